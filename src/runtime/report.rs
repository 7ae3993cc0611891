//! Report back: comments on an imported spec's source item (a GitHub issue, an Azure DevOps
//! work item through the `7.1-preview` comments API) when the spec is fired, when its
//! execution waits for a human (with a link to the execution page, where the decision forms
//! are), when it fails (which step or gate, and why), when its pull request is open, and when
//! Baton stops remediating the pull request (rounds used up, `/baton stop`) and asks a human,
//! or cannot push a round's fix (it conflicts with someone else's push) and is parked.
//!
//! [`Reporter`] runs inside `baton serve`, looking at the fired forge specs that changed since
//! its last pass ([`Reporter::pass`]). Each report has a key (`fired`, `waiting:<phase>:<since>`,
//! `failed:<at>`, `pr:<url>`) claimed in `forge_reports` before it is posted, so a report is
//! posted once however many passes or servers see it; a failed post is tried again on later
//! passes, at most [`MAX_ATTEMPTS`] times. This module never changes a spec or an execution.

use std::time::Duration;

use crate::clock::Clock;
use crate::forge::{ForgeError, ItemRef};
use crate::model::state::{ExecutionState, ExecutionStatus, StepStatus};
use crate::runtime::executions::Executions;
use crate::runtime::forge::Forges;

/// Posts of one report tried, at most.
pub const MAX_ATTEMPTS: i64 = 5;

/// How often the reporter looks.
pub const INTERVAL: Duration = Duration::from_secs(1);

/// How far back the first pass looks, hours.
const FIRST_LOOK_HOURS: i64 = 72;

/// One comment to post.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// Its de-duplication key.
    pub key: String,
    /// The comment (markdown).
    pub text: String,
}

/// The reports an execution's state (and its pull request, if open) calls for, oldest
/// first. `page` is the execution page's address.
pub fn reports_for(state: &ExecutionState, pr_url: Option<&str>, page: &str) -> Vec<Report> {
    let mut out = vec![Report {
        key: "fired".into(),
        text: format!("Baton fired this as execution `{}`: {page}", state.task_id),
    }];
    let phase_name = |phase_id: i64| {
        state.plan.phases.iter().find(|p| p.phase_id == phase_id).map(|p| p.name.clone()).unwrap_or_default()
    };
    match state.status {
        ExecutionStatus::ApprovalPending => {
            if let Some(req) = &state.pending_approval_request {
                out.push(Report {
                    key: format!("waiting:{}:{}", req.phase_id, req.requested_at),
                    text: format!(
                        "Baton is waiting for a human: phase {} ({}) needs an approval. Decide it here: {page} \
                         (or comment `/baton approve` / `/baton reject <reason>`).",
                        req.phase_id,
                        phase_name(req.phase_id)
                    ),
                });
            }
        }
        ExecutionStatus::FeedbackPending => {
            let phase = state.plan.phases.get(state.current_phase);
            let id = phase.map(|p| p.phase_id).unwrap_or_default();
            out.push(Report {
                key: format!("waiting:{id}:feedback:{}", state.events_applied),
                text: format!(
                    "Baton is waiting for a human: phase {id} ({}) has questions to answer: {page}",
                    phase.map(|p| p.name.as_str()).unwrap_or_default()
                ),
            });
        }
        ExecutionStatus::Failed => {
            let failed_step = state.step_results.values().find(|r| r.status() == StepStatus::Failed);
            let failed_gate =
                state.gate_results.iter().rev().find(|g| g.outcome() == crate::model::state::GateOutcome::Failed);
            let which = match (failed_step, failed_gate) {
                (Some(s), _) => format!("step {} ({})", s.step_id, s.agent_name),
                (None, Some(g)) => format!("the {} gate of phase {}", g.gate_type, g.phase_id),
                (None, None) => "the execution".into(),
            };
            let why = state.failure.clone().unwrap_or_else(|| "no reason was recorded".into());
            let why: String = why.chars().take(500).collect();
            out.push(Report {
                key: format!("failed:{}", state.events_applied),
                text: format!("Baton's execution `{}` failed at {which}: {why}. Details: {page}", state.task_id),
            });
        }
        _ => {}
    }
    if let Some(url) = pr_url.filter(|u| !u.is_empty()) {
        out.push(Report { key: format!("pr:{url}"), text: format!("Baton opened the pull request {url}") });
    }
    if let Some(why) = &state.remediation.parked {
        let why: String = why.chars().take(500).collect();
        let pr = pr_url.filter(|u| !u.is_empty()).map(|u| format!(" {u}")).unwrap_or_default();
        out.push(Report {
            key: format!("remediation-parked:{}", state.remediation.rounds.len()),
            text: format!(
                "Baton stopped fixing the pull request{pr} and needs a human: {why}. Look at it here: {page}"
            ),
        });
    }
    out
}

/// The report of a remediation round whose fix could not be pushed (it conflicts with commits
/// someone else pushed to the pull request's branch): the execution is parked with `reason`
/// and a human resolves and resumes. `None` unless a round's fix waits for its push, the
/// pull request is open and the execution is parked.
pub fn unpushed_fix_report(
    state: &ExecutionState,
    pr_url: Option<&str>,
    park_reason: Option<&str>,
    page: &str,
) -> Option<Report> {
    let url = pr_url.filter(|u| !u.is_empty())?;
    let why = park_reason.filter(|r| !r.is_empty())?;
    state.remediation.unpushed()?;
    let why: String = why.chars().take(500).collect();
    Some(Report {
        key: format!("remediation-unpushed:{}", state.remediation.rounds.len()),
        text: format!(
            "Baton could not push its fix to the pull request {url} and needs a human: {why}. Look at it here: {page}"
        ),
    })
}

/// The hidden line that ends every report comment, naming its key (an HTML comment: neither
/// forge shows it). A retry looks for it before posting again, so a post whose outcome was
/// lost (a crash right after it, a timeout) is not posted twice.
pub fn marker(key: &str) -> String {
    format!("<!-- baton-report {} -->", key.replace("--", "-").replace('>', ""))
}

/// Posts the reports of fired forge specs.
#[derive(Debug, Clone)]
pub struct Reporter {
    execs: Executions,
    forges: Forges,
    /// The board's public address (`BATON_PUBLIC_URL`, else `http://<bind>`), no trailing `/`.
    base_url: String,
    /// Where the next pass starts looking (RFC 3339).
    since: String,
    /// The time (the wall clock in `baton serve`, a manual one in tests).
    clock: Clock,
}

impl Reporter {
    /// A reporter linking to pages under `base_url`, reading the time from `clock`.
    pub fn new(execs: Executions, forges: Forges, base_url: &str, clock: Clock) -> Reporter {
        let since = (clock.now() - chrono::Duration::hours(FIRST_LOOK_HOURS))
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, false);
        Reporter { execs, forges, base_url: base_url.trim_end_matches('/').to_string(), since, clock }
    }

    /// Passes every [`INTERVAL`] until `closing` turns true. A failing pass is logged and the
    /// next one tries again. With several replicas on one PostgreSQL database, one replica's
    /// pass runs at a time (the `report` cluster job's advisory lock): the others skip theirs.
    pub async fn run(mut self, mut closing: tokio::sync::watch::Receiver<bool>) {
        loop {
            match self.execs.store().cluster_job("report").await {
                Ok(Some(job)) => {
                    if let Err(e) = self.pass().await {
                        tracing::warn!("report-back pass failed: {e:#}");
                    }
                    job.done().await;
                }
                Ok(None) => {}
                Err(e) => tracing::warn!("report-back pass not started: {e}"),
            }
            tokio::select! {
                _ = tokio::time::sleep(INTERVAL) => {}
                _ = closing.wait_for(|c| *c) => return,
            }
        }
    }

    /// One pass: every fired forge spec changed since the last pass gets the reports it is
    /// due; the number posted.
    ///
    /// Errors: the database. A forge failure is recorded on its report, not returned.
    pub async fn pass(&mut self) -> anyhow::Result<usize> {
        // A little overlap: rows written during the previous pass's read are seen again.
        let started =
            (self.clock.now() - chrono::Duration::seconds(5)).to_rfc3339_opts(chrono::SecondsFormat::Secs, false);
        let store = self.execs.store();
        let mut posted = 0;
        for (spec_id, task_id) in store.reportable_specs(&self.since).await? {
            let Some(spec) = store.spec(spec_id).await? else { continue };
            let meta: crate::forge::ItemMeta = serde_json::from_str(&spec.source_meta).unwrap_or_default();
            let Ok(item) = ItemRef::parse(&meta.item_ref) else { continue };
            let Some(state) = self.execs.load(&task_id).await? else { continue };
            let pr = store.merge(&task_id).await?.filter(|m| m.state == "opened").map(|m| m.pr_url);
            let page = format!("{}/executions/{task_id}", self.base_url);
            let mut reports = reports_for(&state, pr.as_deref(), &page);
            if state.remediation.unpushed().is_some() {
                let parked = store.park_reason(&task_id).await?;
                reports.extend(unpushed_fix_report(&state, pr.as_deref(), parked.as_deref(), &page));
            }
            for report in reports {
                let at = self.clock.now_rfc3339();
                let Some(claim) = store.claim_report(spec_id, &report.key, MAX_ATTEMPTS, &at).await? else {
                    continue;
                };
                let text = format!("{}\n\n{}", report.text, marker(&report.key));
                if let Some(since) = &claim.retry_of {
                    // The earlier attempt may have posted before its outcome was recorded (a
                    // crash, a timeout): look for its marker before posting again.
                    match self.already_posted(&item, &report.key, since).await {
                        Ok(true) => {
                            store.finish_report(spec_id, &report.key, "", &self.clock.now_rfc3339()).await?;
                            continue;
                        }
                        Ok(false) => {}
                        Err(e) => {
                            tracing::warn!("reporting {} on {item}: {e}", report.key);
                            store
                                .finish_report(spec_id, &report.key, &e.to_string(), &self.clock.now_rfc3339())
                                .await?;
                            continue;
                        }
                    }
                }
                let error = match self.post(&item, &text).await {
                    Ok(()) => {
                        posted += 1;
                        String::new()
                    }
                    Err(e) => {
                        tracing::warn!("reporting {} on {item}: {e}", report.key);
                        e.to_string()
                    }
                };
                store.finish_report(spec_id, &report.key, &error, &self.clock.now_rfc3339()).await?;
            }
        }
        self.since = started;
        Ok(posted)
    }

    /// Whether a comment carrying report `key`'s [`marker`] is on `item`, posted at or after
    /// `since` (RFC 3339; a minute earlier, for clocks that differ).
    async fn already_posted(&self, item: &ItemRef, key: &str, since: &str) -> Result<bool, ForgeError> {
        let mark = marker(key);
        let since = chrono::DateTime::parse_from_rfc3339(since)
            .map(|t| (t - chrono::Duration::minutes(1)).to_utc().to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
            .unwrap_or_else(|_| "1970-01-01T00:00:00Z".into());
        let texts = match item {
            ItemRef::GitHub { owner, repo, number } => {
                self.forges.github().comments_since(owner, repo, *number, &since).await?
            }
            ItemRef::Ado { org, project, id } => self.forges.ado().comment_texts(org, project, *id).await?,
        };
        Ok(texts.iter().any(|t| t.contains(&mark)))
    }

    async fn post(&self, item: &ItemRef, text: &str) -> Result<(), ForgeError> {
        match item {
            ItemRef::GitHub { owner, repo, number } => {
                self.forges.github().comment(owner, repo, *number, text).await.map(|_| ())
            }
            ItemRef::Ado { org, project, id } => self.forges.ado().comment(org, project, *id, text).await.map(|_| ()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::plan::{MachinePlan, PlanPhase, PlanStep};
    use crate::model::state::{GateResult, PendingApprovalRequest};

    fn state() -> ExecutionState {
        let mut plan = MachinePlan::from_json(r#"{"task_id":"t-1","task_summary":"s"}"#).unwrap();
        let mut phase = PlanPhase::new(1, "Design");
        phase.steps = vec![Box::new(PlanStep::new("1.1", "architect", "design it"))];
        plan.phases = vec![phase];
        ExecutionState::fresh(plan, "2026-01-01T00:00:00+00:00")
    }

    #[test]
    fn a_waiting_execution_reports_its_phase_and_the_page_and_each_wait_has_its_own_key() {
        let mut s = state();
        s.status = ExecutionStatus::ApprovalPending;
        s.pending_approval_request = Some(PendingApprovalRequest {
            phase_id: 1,
            requested_at: "2026-01-01T00:05:00+00:00".into(),
            preflight: false,
            team_step: String::new(),
            gate: false,
        });
        let reports = reports_for(&s, None, "http://b/executions/t-1");
        assert_eq!(reports.len(), 2);
        assert_eq!(reports[0].key, "fired");
        assert_eq!(reports[1].key, "waiting:1:2026-01-01T00:05:00+00:00");
        assert!(reports[1].text.contains("phase 1 (Design)") && reports[1].text.contains("http://b/executions/t-1"));
        s.pending_approval_request.as_mut().unwrap().requested_at = "2026-01-01T01:00:00+00:00".into();
        assert_ne!(reports_for(&s, None, "p")[1].key, reports[1].key, "a second wait is reported again");
    }

    #[test]
    fn a_failed_gate_is_named_with_the_reason_and_an_open_pull_request_is_reported() {
        let mut s = state();
        s.status = ExecutionStatus::Failed;
        s.failure = Some("the test gate failed 3 times".into());
        s.gate_results.push(GateResult {
            phase_id: 1,
            gate_type: "test".into(),
            passed: false,
            skipped: None,
            output: String::new(),
            command: "cargo test".into(),
            exit_code: Some(101),
            checked_at: String::new(),
            attempt: 3,
        });
        let reports = reports_for(&s, Some("https://x/pull/1"), "p");
        let failed = reports.iter().find(|r| r.key.starts_with("failed:")).unwrap();
        assert!(failed.text.contains("the test gate of phase 1: the test gate failed 3 times"), "{}", failed.text);
        assert_eq!(reports.last().unwrap().key, "pr:https://x/pull/1");
        assert_eq!(reports_for(&state(), None, "p").len(), 1, "running: only the fired report");
    }
}
