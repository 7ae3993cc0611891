//! Pull requests that end on the forge ([`pull_request_ended`]): a `baton/<task_id>` pull
//! request merged, or closed without merging, in the repository of the spec's project moves
//! the spec to `merged` or `closed_unmerged` (issue 19.5).
//!
//! The webhook door reads the forge's payload into a [`PullEnded`] and formats the answer; the
//! decision (which execution the branch names, whether the repository is the project's, which
//! transition) is made here, once for GitHub and Azure DevOps. This module never parses HTTP
//! and never talks to a forge.

use crate::forge::RepoRef;
use crate::runtime::executions::Executions;
use crate::runtime::specs::{SpecError, Specs};
use crate::store::SpecRow;

/// The repository a pull request event came from, as the forge names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullRepo<'a> {
    /// GitHub's `repository.full_name` (`owner/name`).
    GitHub(&'a str),
    /// Azure DevOps' `repository.project.name` and `repository.name`.
    Ado {
        /// The team project.
        project: &'a str,
        /// The Git repository.
        repository: &'a str,
    },
}

/// A pull request that was closed on the forge, merged or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PullEnded<'a> {
    /// Where it was opened.
    pub repo: PullRepo<'a>,
    /// Its number (GitHub) or id (Azure DevOps), for messages.
    pub number: i64,
    /// Its source branch: `baton/<task_id>` (GitHub's `head.ref`) or
    /// `refs/heads/baton/<task_id>` (Azure DevOps' `sourceRefName`).
    pub head: &'a str,
    /// Merged (true) or closed without merging (false).
    pub merged: bool,
    /// Its web address (empty when the event carries none).
    pub url: &'a str,
    /// Who the journal names (`github:<login>`, `ado`).
    pub actor: &'a str,
}

/// What [`pull_request_ended`] did.
#[derive(Debug, Clone)]
pub enum PullOutcome {
    /// The spec moved to `merged` or `closed_unmerged`.
    Changed(Box<SpecRow>),
    /// Nothing changed, and why (not a Baton branch, another repository, no such spec, a spec
    /// that is not executing).
    Ignored(String),
}

/// Whether `repo` is the repository `forge_repo` (a project's `forge_repo` setting) names;
/// names compare case-insensitively, as both forges do.
fn is_project_repo(forge_repo: &str, repo: PullRepo<'_>) -> bool {
    match (RepoRef::parse(forge_repo), repo) {
        (Ok(RepoRef::GitHub { owner, repo: name, .. }), PullRepo::GitHub(full)) => {
            full.eq_ignore_ascii_case(&format!("{owner}/{name}"))
        }
        (Ok(RepoRef::Ado { project, repository, .. }), PullRepo::Ado { project: p, repository: r }) => {
            project.eq_ignore_ascii_case(p) && repository.eq_ignore_ascii_case(r)
        }
        _ => false,
    }
}

/// Applies a pull request's end to the spec fired as the execution its branch names.
///
/// Only a pull request from `baton/<task_id>` in the repository of that spec's project counts;
/// anything else is [`PullOutcome::Ignored`] with the reason, as is a spec that is no longer
/// `executing` (a redelivered or late event: merged is final).
///
/// Errors: the database.
pub async fn pull_request_ended(
    execs: &Executions,
    specs: &Specs,
    ended: &PullEnded<'_>,
) -> Result<PullOutcome, SpecError> {
    let number = match ended.repo {
        PullRepo::GitHub(_) => format!("#{}", ended.number),
        PullRepo::Ado { .. } => ended.number.to_string(),
    };
    let branch = ended.head.strip_prefix("refs/heads/").unwrap_or(ended.head);
    let Some(task_id) = branch.strip_prefix("baton/").filter(|t| !t.is_empty()) else {
        return Ok(PullOutcome::Ignored(format!(
            "pull request {number} ({}) is not a baton/<task_id> branch",
            ended.head
        )));
    };
    let Some(spec) = execs.store().spec_of_execution(task_id).await? else {
        return Ok(PullOutcome::Ignored(format!("no spec was fired as {task_id}")));
    };
    let project = execs.store().project(&spec.project).await?;
    if !project.is_some_and(|p| is_project_repo(&p.forge_repo, ended.repo)) {
        let named = match ended.repo {
            PullRepo::GitHub(full) => full.to_string(),
            PullRepo::Ado { project, repository } => format!("{project}/{repository}"),
        };
        return Ok(PullOutcome::Ignored(format!(
            "spec {} belongs to project {}, which is not {named}",
            spec.spec_id, spec.project
        )));
    }
    if !ended.merged && !ended.url.is_empty() {
        // Only the pull request Baton opened ends the spec: another one from the same branch
        // (closed by hand, a duplicate) leaves it where it is.
        let opened = execs.store().merge(task_id).await?.map(|m| m.pr_url).unwrap_or_default();
        if !opened.is_empty() && opened != ended.url {
            return Ok(PullOutcome::Ignored(format!(
                "pull request {number} is not the one Baton opened for {task_id} ({opened})"
            )));
        }
    }
    let named = if ended.url.is_empty() { format!("pull request {number}") } else { ended.url.to_string() };
    match specs.mark_pull_ended(task_id, &named, ended.merged, ended.actor).await {
        Ok(Some(row)) => Ok(PullOutcome::Changed(Box::new(row))),
        Ok(None) => Ok(PullOutcome::Ignored(format!("no spec was fired as {task_id}"))),
        Err(SpecError::Conflict { message, .. }) => Ok(PullOutcome::Ignored(message)),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_repository_must_be_the_projects_on_the_same_forge() {
        assert!(is_project_repo("github:Acme/Widgets", PullRepo::GitHub("acme/widgets")));
        assert!(!is_project_repo("github:acme/widgets", PullRepo::GitHub("acme/other")));
        assert!(!is_project_repo("github:acme/widgets", PullRepo::Ado { project: "acme", repository: "widgets" }));
        assert!(is_project_repo("ado:contoso/Fabrikam/app", PullRepo::Ado { project: "fabrikam", repository: "APP" }));
        assert!(!is_project_repo("", PullRepo::GitHub("acme/widgets")));
    }
}
