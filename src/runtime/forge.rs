//! Forge items as specs: the forge clients of a running Baton ([`Forges`]), what to import
//! ([`ImportRequest`]: one item, a GitHub label, an Azure DevOps WIQL query), how a bulk
//! import meets a rate limit ([`Pacing`]: wait it out, or stop with a [`Cursor`] to resume
//! from), and an import of every item a request names ([`import`], [`import_from`]; what it
//! did: [`Imported`], each item's outcome shown as [`ImportedItem`]).
//!
//! The spec changes themselves, what each did ([`ImportOutcome`]) and fitting an item's title
//! and body into the spec limits are [`Specs::import`](crate::runtime::specs::Specs::import)
//! and friends. This module never authenticates a webhook delivery; its only IO is the forge
//! calls of [`crate::forge`].

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use crate::forge::ado::{AzureDevOps, BATCH as ADO_BATCH};
use crate::forge::github::{GitHub, MAX_BULK_ISSUES, MAX_BULK_PAGES};
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
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
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

/// How an import meets a rate limit the forge call itself did not wait out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pacing {
    /// Stop there: keep what was imported, and (bulk) say where to resume
    /// ([`Imported::stopped`]); a single item fails with the rate limit. For requests that
    /// must answer in time (REST, the board's form).
    Stop,
    /// Wait it out — the forge's `retry-after` or reset, at least a minute for GitHub's
    /// secondary rate limit ([`crate::forge::RetryPolicy::secondary_rate_limit_wait`]), a
    /// minute when the forge says nothing — and ask again, going on where it stopped; at most
    /// `waits` waits in a row for one call and none longer than `longest` (else the import
    /// fails with the rate limit, the items before it imported). For the CLI.
    Wait {
        /// Waits in a row for one call, at most.
        waits: u32,
        /// Longest single wait taken.
        longest: Duration,
    },
}

/// The pacing of `baton spec import`: up to 10 waits in a row, none over 15 minutes.
pub const CLI_PACING: Pacing = Pacing::Wait { waits: 10, longest: Duration::from_secs(15 * 60) };

/// Where a bulk import stopped, to resume it: GitHub's page number, or Azure DevOps' batch of
/// 200 work items of the query (1 is the first). Shown and taken as text (an opaque
/// `cursor`): a positive integer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cursor(u32);

impl Cursor {
    /// The start of a bulk import.
    pub const START: Cursor = Cursor(1);

    /// Reads a cursor a caller passed back.
    ///
    /// Errors: anything but a positive integer up to 100 000 ([`SpecError::Invalid`], field
    /// `cursor`).
    pub fn parse(text: &str) -> Result<Cursor, SpecError> {
        text.trim().parse::<u32>().ok().filter(|n| (1..=100_000).contains(n)).map(Cursor).ok_or_else(|| {
            SpecError::Invalid {
                field: "cursor".into(),
                message: format!(
                    "{:?} is not a cursor: pass back the `cursor` of a stopped bulk import as it was given",
                    text.chars().take(40).collect::<String>()
                ),
            }
        })
    }

    /// Its position (1-based).
    pub fn position(self) -> u32 {
        self.0
    }
}

impl std::fmt::Display for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A bulk import stopped by a rate limit ([`Pacing::Stop`]).
#[derive(Debug, Clone)]
pub struct Stopped {
    /// Where to resume: the part not imported yet.
    pub cursor: Cursor,
    /// The rate limit ([`ForgeError::RateLimited`], saying when to retry).
    pub error: ForgeError,
}

impl Stopped {
    /// Seconds to wait before resuming: the forge's, else a minute.
    pub fn retry_after_secs(&self) -> u64 {
        match &self.error {
            ForgeError::RateLimited { retry_after_secs: Some(s), .. } => (*s).max(1),
            _ => crate::forge::DEFAULT_SECONDARY_RATE_LIMIT_WAIT.as_secs(),
        }
    }
}

/// What an import did.
#[derive(Debug, Clone)]
pub struct Imported {
    /// One outcome per item imported, in the forge's order.
    pub outcomes: Vec<ImportOutcome>,
    /// Set when a rate limit stopped a bulk import ([`Pacing::Stop`]): the items in
    /// `outcomes` stay imported; resuming from the cursor imports the rest.
    pub stopped: Option<Stopped>,
}

/// Imports what `request` names into `project`: one spec per item (created, updated, or left
/// as it is), in the forge's order, and nothing stopped by a rate limit (a stop is an error
/// here; [`import_from`] keeps what was imported and says where to resume).
///
/// Errors: as [`import_from`]; a rate limit.
pub async fn import(
    specs: &Specs,
    forges: &Forges,
    project: &str,
    request: &ImportRequest,
    actor: &str,
) -> Result<Vec<ImportOutcome>, ImportError> {
    let imported = import_from(specs, forges, project, request, None, Pacing::Stop, actor).await?;
    match imported.stopped {
        Some(stopped) => Err(stopped.error.into()),
        None => Ok(imported.outcomes),
    }
}

/// Imports what `request` names into `project`, from `cursor` on (a bulk import's resume
/// point; `None`: from the start): one spec per item, in the forge's order, each item imported
/// as soon as its page (GitHub) or batch (Azure DevOps) is read, so what was read stays
/// imported whatever comes after. A rate limit the forge call did not wait out is met by
/// `pacing`: waited out and the same page asked again, or the import stops there with the
/// cursor of that page ([`Imported::stopped`]). A resumed Azure DevOps import runs its query
/// again; a GitHub listing is read by page number, so an issue opened meanwhile may shift an
/// item into a page already read (import again: importing is idempotent).
///
/// Errors: an unknown project (checked before any forge call); a cursor with a single item
/// ([`SpecError::Invalid`]); a forge failure that is not a rate limit met by `pacing` (the
/// items before it stay imported); a spec change that fails stops the import there.
pub async fn import_from(
    specs: &Specs,
    forges: &Forges,
    project: &str,
    request: &ImportRequest,
    cursor: Option<Cursor>,
    pacing: Pacing,
    actor: &str,
) -> Result<Imported, ImportError> {
    specs.project(project).await?;
    let mut outcomes = Vec::new();
    let start = cursor.unwrap_or(Cursor::START);
    match request {
        ImportRequest::Item(item) => {
            if cursor.is_some() {
                return Err(SpecError::Invalid {
                    field: "cursor".into(),
                    message: "a cursor resumes a bulk import (a label or a WIQL query), not one item".into(),
                }
                .into());
            }
            let fetched = paced(pacing, || async {
                match item {
                    ItemRef::GitHub { owner, repo, number } => forges.github.issue(owner, repo, *number).await,
                    ItemRef::Ado { org, project, id } => forges.ado.work_item(org, project, *id).await,
                }
            })
            .await?;
            outcomes.push(specs.import(project, fetched, actor).await?);
        }
        ImportRequest::GitHubLabel { owner, repo, label } => {
            let gh = &forges.github;
            let mut next = Some(gh.labelled_page(owner, repo, label, start.0));
            let (mut seen_pages, mut seen_urls) = (HashSet::new(), HashSet::new());
            while let Some(page) = next.take() {
                // A `Link` back to a page already read, or more pages than the cap: stop.
                if !seen_pages.insert(page.uri().to_string()) || seen_pages.len() > MAX_BULK_PAGES {
                    break;
                }
                let read = match paced(pacing, || gh.issues_page(owner, repo, label, &page)).await {
                    Ok(read) => read,
                    Err(error @ ForgeError::RateLimited { .. }) => {
                        let stopped = Some(Stopped { cursor: Cursor(page.number), error });
                        return Ok(Imported { outcomes, stopped });
                    }
                    Err(e) => return Err(e.into()),
                };
                for item in read.items {
                    if seen_urls.insert(item.url.clone()) && seen_urls.len() <= MAX_BULK_ISSUES {
                        outcomes.push(specs.import(project, item, actor).await?);
                    }
                }
                next = read.next.filter(|_| seen_urls.len() < MAX_BULK_ISSUES);
            }
        }
        ImportRequest::AdoQuery { org, project: team, wiql } => {
            let ado = &forges.ado;
            let ids = match paced(pacing, || ado.query_ids(org, team, wiql)).await {
                Ok(ids) => ids,
                Err(error @ ForgeError::RateLimited { .. }) => {
                    return Ok(Imported { outcomes, stopped: Some(Stopped { cursor: start, error }) });
                }
                Err(e) => return Err(e.into()),
            };
            let skip = usize::try_from(start.0 - 1).unwrap_or(usize::MAX);
            for (n, batch) in ids.chunks(ADO_BATCH).enumerate().skip(skip) {
                let items = match paced(pacing, || ado.work_items(org, team, batch)).await {
                    Ok(items) => items,
                    Err(error @ ForgeError::RateLimited { .. }) => {
                        let cursor = Cursor(u32::try_from(n + 1).unwrap_or(u32::MAX));
                        return Ok(Imported { outcomes, stopped: Some(Stopped { cursor, error }) });
                    }
                    Err(e) => return Err(e.into()),
                };
                for item in items {
                    outcomes.push(specs.import(project, item, actor).await?);
                }
            }
        }
    }
    Ok(Imported { outcomes, stopped: None })
}

/// Runs `call`, meeting its rate limits by `pacing` ([`Pacing::Wait`]: waits and asks again).
async fn paced<T, F, Fut>(pacing: Pacing, mut call: F) -> Result<T, ForgeError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, ForgeError>>,
{
    let mut waited = 0;
    loop {
        match call().await {
            Err(e @ ForgeError::RateLimited { .. }) => {
                let Pacing::Wait { waits, longest } = pacing else { return Err(e) };
                let ForgeError::RateLimited { wait, .. } = &e else { return Err(e) };
                let wait = wait.unwrap_or(crate::forge::DEFAULT_SECONDARY_RATE_LIMIT_WAIT);
                if waited >= waits || wait > longest {
                    return Err(e);
                }
                waited += 1;
                tracing::warn!("{e}; waiting {:.1} s, then going on (wait {waited} of {waits})", wait.as_secs_f64());
                tokio::time::sleep(wait).await;
            }
            other => return other,
        }
    }
}
