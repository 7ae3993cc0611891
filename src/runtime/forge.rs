//! Forge items as specs: the forge clients of a running Baton ([`Forges`]), what to import
//! ([`ImportRequest`]: one item, a GitHub label, an Azure DevOps WIQL query), and an import of
//! every item a request names ([`import`], each item's outcome shown as [`ImportedItem`]).
//!
//! The spec changes themselves, what each did ([`ImportOutcome`]) and fitting an item's title
//! and body into the spec limits are [`Specs::import`](crate::runtime::specs::Specs::import)
//! and friends. This module never authenticates a webhook delivery; its only IO is the forge
//! calls of [`crate::forge`].

use std::sync::Arc;

use crate::forge::ado::AzureDevOps;
use crate::forge::github::GitHub;
use crate::forge::{ForgeError, ForgeSettings, ItemRef, RetryPolicy};
pub use crate::forge::{ForgeItem, ItemMeta};
use crate::runtime::specs::{ImportOutcome, SpecError, Specs};

/// The forge clients of a running Baton, built once from [`ForgeSettings`]. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Forges {
    settings: Arc<ForgeSettings>,
    github: GitHub,
    ado: AzureDevOps,
    /// One merge at a time in this process (a merge is push + find-or-open).
    pub(crate) merging: Arc<tokio::sync::Mutex<()>>,
}

impl Forges {
    /// Clients for `settings`, retrying by `policy`.
    ///
    /// Errors: an API address that is not a URL.
    pub fn new(settings: ForgeSettings, policy: RetryPolicy) -> Result<Forges, ForgeError> {
        Ok(Forges {
            github: GitHub::new(&settings, policy)?,
            ado: AzureDevOps::new(&settings, policy)?,
            settings: Arc::new(settings),
            merging: Arc::default(),
        })
    }

    /// The settings.
    pub fn settings(&self) -> &ForgeSettings {
        &self.settings
    }

    /// The GitHub client.
    pub fn github(&self) -> &GitHub {
        &self.github
    }

    /// The Azure DevOps client.
    pub fn ado(&self) -> &AzureDevOps {
        &self.ado
    }

    /// The items `request` names, fetched.
    ///
    /// Errors: any [`ForgeError`] of the calls.
    pub async fn fetch(&self, request: &ImportRequest) -> Result<Vec<ForgeItem>, ForgeError> {
        match request {
            ImportRequest::Item(ItemRef::GitHub { owner, repo, number }) => {
                Ok(vec![self.github.issue(owner, repo, *number).await?])
            }
            ImportRequest::Item(ItemRef::Ado { org, project, id }) => {
                Ok(vec![self.ado.work_item(org, project, *id).await?])
            }
            ImportRequest::GitHubLabel { owner, repo, label } => self.github.issues_labelled(owner, repo, label).await,
            ImportRequest::AdoQuery { org, project, wiql } => self.ado.query(org, project, wiql).await,
        }
    }
}

/// What to import.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImportRequest {
    /// One issue or work item.
    Item(ItemRef),
    /// The open issues of a GitHub repository carrying a label.
    GitHubLabel {
        /// Owner.
        owner: String,
        /// Repository.
        repo: String,
        /// Label.
        label: String,
    },
    /// The work items a WIQL query selects.
    AdoQuery {
        /// Organization.
        org: String,
        /// Team project.
        project: String,
        /// The query (`Select [System.Id] From WorkItems Where …`).
        wiql: String,
    },
}

impl ImportRequest {
    /// The request a user typed: `github:OWNER/REPO#N`, `ado:ORG/PROJECT#ID`,
    /// `github:OWNER/REPO` with `label`, or `ado:ORG/PROJECT` with `wiql`.
    ///
    /// Errors: a reference of none of these forms, or a label with an Azure DevOps
    /// reference (and a query with a GitHub one) — [`ForgeError::Invalid`], naming the forms.
    pub fn parse(reference: &str, label: Option<&str>, wiql: Option<&str>) -> Result<ImportRequest, ForgeError> {
        let label = label.map(str::trim).filter(|l| !l.is_empty());
        let wiql = wiql.map(str::trim).filter(|q| !q.is_empty());
        match (label, wiql) {
            (None, None) => ItemRef::parse(reference).map(ImportRequest::Item),
            (Some(_), Some(_)) => Err(ForgeError::Invalid("give a label or a WIQL query, not both".into())),
            (Some(label), None) => match crate::forge::RepoRef::parse(reference.trim()) {
                Ok(crate::forge::RepoRef::GitHub { owner, repo }) if reference.trim().starts_with("github:") => {
                    Ok(ImportRequest::GitHubLabel { owner, repo, label: label.into() })
                }
                _ => Err(ForgeError::Invalid(format!(
                    "a label imports from a GitHub repository: {reference:?} should be github:OWNER/REPO"
                ))),
            },
            (None, Some(wiql)) => match crate::forge::RepoRef::parse(reference.trim()) {
                Ok(crate::forge::RepoRef::Ado { org, project, repository }) if repository == project => {
                    Ok(ImportRequest::AdoQuery { org, project, wiql: wiql.into() })
                }
                _ => Err(ForgeError::Invalid(format!(
                    "a WIQL query imports from an Azure DevOps project: {reference:?} should be ado:ORG/PROJECT"
                ))),
            },
        }
    }
}

/// What one item's import did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ImportedItem {
    /// The spec.
    pub spec_id: i64,
    /// Its title.
    pub title: String,
    /// Its status.
    pub status: String,
    /// The item's address.
    pub source_url: String,
    /// `created`, `updated`, `unchanged` or `ignored`.
    pub outcome: &'static str,
    /// For `updated`: `title`, `body`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub changed: Vec<&'static str>,
    /// For `ignored`: why (the spec is already approved or fired; flagged for the lead).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl ImportedItem {
    /// The view of `o`.
    pub fn of(o: &ImportOutcome) -> ImportedItem {
        let spec = o.spec();
        ImportedItem {
            spec_id: spec.spec_id,
            title: spec.title.clone(),
            status: spec.status.clone(),
            source_url: spec.source_url.clone(),
            outcome: o.as_str(),
            changed: match o {
                ImportOutcome::Updated { changed, .. } => changed.clone(),
                _ => Vec::new(),
            },
            reason: match o {
                ImportOutcome::Ignored { reason, .. } => Some(reason.clone()),
                _ => None,
            },
        }
    }
}

/// An import that failed.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The forge call failed.
    #[error(transparent)]
    Forge(#[from] ForgeError),
    /// The spec change failed (unknown project, …).
    #[error(transparent)]
    Spec(#[from] SpecError),
}

/// Imports what `request` names into `project`: one spec per item (created, updated, or left
/// as it is), in the forge's order.
///
/// Errors: an unknown project (checked before any forge call); a forge failure (nothing is
/// imported when the fetch fails); a spec change that fails stops the import there (the
/// items before it stay imported; importing again is idempotent).
pub async fn import(
    specs: &Specs,
    forges: &Forges,
    project: &str,
    request: &ImportRequest,
    actor: &str,
) -> Result<Vec<ImportOutcome>, ImportError> {
    specs.project(project).await?;
    let items = forges.fetch(request).await?;
    let mut outcomes = Vec::with_capacity(items.len());
    for item in items {
        outcomes.push(specs.import(project, item, actor).await?);
    }
    Ok(outcomes)
}
