//! What the doors show: the read side of executions (list, summary, journal, pause flag,
//! merge, pull request), the approvals queue and its rule (which statuses wait for which human), the
//! board's change counter, `/metrics` totals and the readiness probe.
//!
//! These are [`Executions`] methods so a door reads through the execution service and never
//! through the store. Nothing here writes; nothing here decides (decisions are
//! `runtime::ops`).

use crate::model::spec::{PullRequest, SpecStatus};
use crate::runtime::executions::Executions;
use crate::store::{ExecutionRow, MergeRow, MetricTotals, ProjectRow, SpecRow, StoredEvent, Summary};

/// One execution waiting for a human, for the approvals queue.
#[derive(Debug, Clone, PartialEq)]
pub struct Waiting {
    /// The execution.
    pub task_id: String,
    /// What it waits for (`approval of phase 1 Design`, a budget decision, …).
    pub waits_for: String,
    /// Its summary status (one of [`WAITING`]).
    pub status: String,
    /// Its spec's title, when it was fired from one (untrusted text: escape it).
    pub spec_title: Option<String>,
    /// When it last changed (RFC 3339).
    pub updated_at: String,
}

/// The summary statuses of an execution that waits for a human decision.
pub const WAITING: [&str; 3] = ["approval_pending", "feedback_pending", "budget_exceeded"];

/// What an execution in `status` (a summary status) at `current_phase` waits for from a
/// human, or `None` when it waits for nobody (`Some` exactly for [`WAITING`]): the one rule the
/// approvals page and its count in the navigation follow.
pub fn waits_for(status: &str, current_phase: &str) -> Option<String> {
    match status {
        "approval_pending" => Some(format!("approval of phase {current_phase}")),
        "feedback_pending" => Some(format!("feedback on phase {current_phase}")),
        "budget_exceeded" => Some("a budget decision: raise the ceiling or stop".to_string()),
        _ => None,
    }
}

impl Executions {
    /// Every execution's summary row, newest first.
    ///
    /// Errors: the database.
    pub async fn list(&self) -> anyhow::Result<Vec<ExecutionRow>> {
        Ok(self.store().list_executions().await?)
    }

    /// The board summary of `task_id`, `None` when unknown.
    ///
    /// Errors: the database.
    pub async fn summary(&self, task_id: &str) -> anyhow::Result<Option<Summary>> {
        Ok(self.store().summary(task_id).await?)
    }

    /// The journal of `task_id` after `after_seq` (0: all), in order; `None` when unknown.
    ///
    /// Errors: the database.
    pub async fn journal(&self, task_id: &str, after_seq: i64) -> anyhow::Result<Option<Vec<StoredEvent>>> {
        if self.store().summary(task_id).await?.is_none() {
            return Ok(None);
        }
        Ok(Some(self.store().events(task_id, after_seq).await?))
    }

    /// Whether `task_id` is paused.
    ///
    /// Errors: the database.
    pub async fn is_paused(&self, task_id: &str) -> anyhow::Result<bool> {
        Ok(self.store().is_paused(task_id).await?)
    }

    /// Why `task_id` is parked (paused by its driver until a human acts, e.g. a checkout holds
    /// its feature branch); `None` when it is not, or an operator paused it.
    ///
    /// Errors: the database.
    pub async fn park_reason(&self, task_id: &str) -> anyhow::Result<Option<String>> {
        Ok(self.store().park_reason(task_id).await?)
    }

    /// How `task_id`'s merge stands, `None` before one began.
    ///
    /// Errors: the database.
    pub async fn merge_row(&self, task_id: &str) -> anyhow::Result<Option<MergeRow>> {
        Ok(self.store().merge(task_id).await?)
    }

    /// `task_id`'s pull request once opened, and where it stands (its spec's status says merged
    /// or closed unmerged, see [`PullRequest::of`]); `None` before one was opened.
    ///
    /// Errors: the database.
    pub async fn pull_request(&self, task_id: &str) -> anyhow::Result<Option<PullRequest>> {
        let Some(row) = self.store().merge(task_id).await? else { return Ok(None) };
        let status = self.store().spec_of_execution(task_id).await?.and_then(|s| SpecStatus::parse(&s.status));
        Ok(PullRequest::of(status, row.pr_number, Some(&row.pr_url)))
    }

    /// The spec `task_id` was fired from, if any.
    ///
    /// Errors: the database.
    pub async fn spec_of(&self, task_id: &str) -> anyhow::Result<Option<SpecRow>> {
        Ok(self.store().spec_of_execution(task_id).await?)
    }

    /// The project of the spec `task_id` was fired from, if any.
    ///
    /// Errors: the database.
    pub async fn project_of(&self, task_id: &str) -> anyhow::Result<Option<ProjectRow>> {
        match self.store().spec_of_execution(task_id).await? {
            Some(spec) => Ok(self.store().project(&spec.project).await?),
            None => Ok(None),
        }
    }

    /// Executions waiting for a human ([`waits_for`]), in creation order: one query over the
    /// summary rows (no state or journal is read).
    ///
    /// Errors: the database.
    pub async fn waiting(&self) -> anyhow::Result<Vec<Waiting>> {
        let rows = self.store().executions_in(&WAITING).await?;
        Ok(rows
            .into_iter()
            .filter_map(|r| {
                let waits_for = waits_for(&r.status, &r.current_phase)?;
                Some(Waiting {
                    task_id: r.task_id,
                    waits_for,
                    status: r.status,
                    spec_title: r.spec_title,
                    updated_at: r.updated_at,
                })
            })
            .collect())
    }

    /// How many executions wait for a human (the navigation's count).
    ///
    /// Errors: the database.
    pub async fn count_waiting(&self) -> anyhow::Result<usize> {
        Ok(usize::try_from(self.store().count_executions_in(&WAITING).await?).unwrap_or(0))
    }

    /// The board's change counter: it moves whenever a spec or an execution summary changes.
    ///
    /// Errors: the database.
    pub async fn board_version(&self) -> anyhow::Result<String> {
        Ok(self.store().board_version().await?)
    }

    /// The database's totals for `/metrics`.
    ///
    /// Errors: the database.
    pub async fn metric_totals(&self) -> anyhow::Result<MetricTotals> {
        Ok(self.store().metric_totals().await?)
    }

    /// Checks the hash chain of `task_id`'s journal (`baton audit verify`).
    ///
    /// Errors: unknown execution; the database.
    pub async fn verify_chain(&self, task_id: &str) -> anyhow::Result<crate::store::ChainReport> {
        Ok(self.store().verify_chain(task_id).await?)
    }

    /// Checks every decision of `task_id`'s journal against its signature under `key`.
    ///
    /// Errors: the database; a journal payload that is not an event.
    pub async fn verify_decisions(
        &self,
        key: &crate::runtime::auth::ServerKey,
        task_id: &str,
    ) -> anyhow::Result<crate::runtime::auth::DecisionReport> {
        crate::runtime::auth::verify_decisions(self.store(), key, task_id).await
    }

    /// Whether the database answers a read (the readiness probe).
    ///
    /// Errors: the database's error when it does not.
    pub async fn ping(&self) -> anyhow::Result<()> {
        self.store().active_task().await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exactly_the_waiting_statuses_wait_for_a_human() {
        for status in WAITING {
            assert!(waits_for(status, "1 Design").is_some(), "{status}");
        }
        for status in ["running", "gate_pending", "gate_failed", "complete", "failed", "cancelled", ""] {
            assert_eq!(waits_for(status, "1 Design"), None, "{status}");
        }
        assert_eq!(waits_for("approval_pending", "2 Build").as_deref(), Some("approval of phase 2 Build"));
    }
}
