//! Remediation of an open pull request (issue 19.3/4): CI fix rounds and review rounds.
//!
//! Once a completed execution's pull request is open (its spec stands in `pr_open`), a
//! required check of the pull request's head that fails starts a **CI fix round**: the
//! execution is reopened the way an amendment reopens one (`remediation_started`: a fix phase
//! whose one step goes to the agent that made the change, or `[ci] fixer`), the step runs in a
//! worktree at the feature branch's tip (the pull request's head), its commit is consolidated
//! and pushed to the same branch, never forced (`remediation_pushed`, by the driver), and the
//! execution completes again. A reviewer's requested change starts a **review round** the
//! same way (the operator service decides who may ask: `runtime::ops`), and after the push
//! Baton replies on each review comment with the commit that addressed it
//! (`runtime::fixes::reply_threads`). Rounds are bounded per pull request and cause (`[ci]
//! max_fix_rounds`, `[review] max_rounds`, per project; default 2 each, counted apart); past
//! the bound Baton parks (`remediation_parked`), the report-back asks a human on the source
//! item and the card says so.
//!
//! This module decides whether a CI notice starts a round ([`Remediation::ci_notice`]): the
//! pull request must be Baton's, open, its spec executing and its execution complete; what
//! failed is read from the forge's API (never taken from the delivery). Recording goes through
//! the operator service; the prompt is `runtime::fixes`'. It never parses HTTP.

use crate::forge::checks::CheckDetail;
use crate::forge::{ForgeError, RepoRef};
use crate::model::state::{ExecutionStatus, RemediationCause};
use crate::runtime::ci_events::CiNotice;
use crate::runtime::executions::Executions;
use crate::runtime::fixes::{ci_prompt, failed_required, FailedCheck};
use crate::runtime::forge::Forges;
use crate::runtime::ops::{Ops, RoundOutcome, RoundRequest};
use crate::store::MergeRow;

/// The CI side of remediation: which open pull request a CI notice concerns, and whether its
/// failing checks start a round. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Remediation {
    execs: Executions,
    ops: Ops,
    forges: Forges,
}

impl Remediation {
    /// A service recording through `ops`, reading the forges through `forges`.
    pub fn new(execs: Executions, ops: Ops, forges: Forges) -> Remediation {
        Remediation { execs, ops, forges }
    }

    /// A forge said something about CI: every open Baton pull request whose head is the
    /// notice's commit (or whose branch it names) has its checks read, and a failed required
    /// check starts a fix round (or parks, past the bound). Returns what happened per execution
    /// (none: the notice concerned no open pull request).
    ///
    /// Errors: the database; a forge failure is an outcome ([`RoundOutcome::Ignored`]).
    pub async fn ci_notice(&self, notice: &CiNotice) -> anyhow::Result<Vec<(String, RoundOutcome)>> {
        let sha = notice.sha.as_deref().map(str::to_ascii_lowercase);
        let mut out = Vec::new();
        for row in self.execs.store().opened_merges().await? {
            let named = sha.as_deref().is_some_and(|s| !s.is_empty() && row.pushed_sha.eq_ignore_ascii_case(s))
                || notice.branches.contains(&row.branch);
            if named {
                let outcome = self.check_pull(&row).await?;
                out.push((row.task_id.clone(), outcome));
            }
        }
        Ok(out)
    }

    /// Reads the checks of the head of `row`'s pull request and starts a fix round when a
    /// required one failed.
    ///
    /// Errors: the database.
    pub async fn check_pull(&self, row: &MergeRow) -> anyhow::Result<RoundOutcome> {
        let task_id = &row.task_id;
        let store = self.execs.store();
        let Some(spec) = store.spec_of_execution(task_id).await? else {
            return Ok(RoundOutcome::Ignored(format!("execution {task_id} came from no spec")));
        };
        if spec.status != "executing" {
            return Ok(RoundOutcome::Ignored(format!("spec {} is {}", spec.spec_id, spec.status)));
        }
        let Some(state) = self.execs.load(task_id).await? else {
            return Ok(RoundOutcome::Ignored(format!("no execution {task_id}")));
        };
        if state.status != ExecutionStatus::Complete {
            return Ok(RoundOutcome::Ignored(format!(
                "execution {task_id} is {}: a round starts only on a completed execution",
                state.status.as_str()
            )));
        }
        if let Some(why) = &state.remediation.parked {
            return Ok(RoundOutcome::Ignored(format!("remediation of {task_id} is parked: {why}")));
        }
        let head = row.pushed_sha.clone();
        let config = self.execs.data().config()?;
        let ci = config.ci_for(Some(&spec.project));
        let checks =
            match crate::runtime::ci::read_checks(self.forges.settings(), &row.forge_repo, &row.branch, &head).await {
                Ok(c) => c,
                Err(e) => return Ok(RoundOutcome::Ignored(format!("reading the checks of {head}: {e}"))),
            };
        let failed = failed_required(&checks, &ci.required);
        if failed.is_empty() {
            return Ok(RoundOutcome::Ignored(format!("no required check of {head} failed")));
        }
        let details = self.details(&row.forge_repo, &head).await.unwrap_or_default();
        let failed: Vec<FailedCheck> = failed
            .iter()
            .map(|c| FailedCheck {
                name: c.name.clone(),
                summary: c.summary.clone(),
                details: details.iter().find(|d| d.name == c.name).map(|d| d.text.clone()).unwrap_or_default(),
            })
            .collect();
        let round = state.remediation.used(RemediationCause::Ci) + 1;
        let prompt = ci_prompt(&row.pr_url, &head, &failed, round, ci.max_fix_rounds);
        let request = RoundRequest {
            cause: RemediationCause::Ci,
            sha: head.clone(),
            prompt,
            threads: Vec::new(),
            key: format!("remediation:{task_id}:ci:{head}"),
        };
        Ok(self.ops.start_remediation(task_id, request).await?)
    }

    /// What the failed checks of `sha` say beyond their summaries (GitHub: output text and
    /// annotations; Azure DevOps: the summaries only).
    async fn details(&self, forge_repo: &str, sha: &str) -> Result<Vec<CheckDetail>, ForgeError> {
        match RepoRef::parse(forge_repo)? {
            RepoRef::GitHub { owner, repo } => self.forges.github().failed_check_details(&owner, &repo, sha).await,
            RepoRef::Ado { .. } => Ok(Vec::new()),
        }
    }
}
