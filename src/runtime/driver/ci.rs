//! `ci` and `review` gates without a command (issue 19.2), as the driver carries them out.
//!
//! A `ci` gate: the feature branch `baton/<task_id>` is pushed to the project's remote
//! (`origin`, never forced) and `ci_started` journals its head commit and when the wait times
//! out (`[ci] timeout_secs`, the project's `ci_timeout_secs`; default 60 minutes). While the
//! engine answers WAIT, the driver reads the commit's checks on the project's forge
//! ([`crate::runtime::ci::read_checks`]) every `poll_secs` (doubling while nothing changes, up
//! to `max_poll_secs`), or at once when a webhook wakes it, journals every change
//! (`ci_checked`) and finally the verdict (`gate_recorded`, see
//! [`crate::runtime::ci::verdict`]). A restart finds `ci_started` in the journal and waits on
//! without pushing again. An execution of no project, or of one without `forge_repo`, fails
//! the gate with `no forge configured` (the plan check refuses such plans up front).
//!
//! A `review` gate: `review_requested` on the project's reviewer agent (`[review] agent`, the
//! project's `review_agent`), whose step the engine then dispatches; without one,
//! `gate_approval_requested`, and a human decides. It never decides a verdict itself.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::model::action::{GateAction, GateCheck};
use crate::model::event::EventKind;
use crate::model::state::ExecutionState;
use crate::runtime::blocking;
use crate::runtime::ci::{self, CiVerdict};
use crate::runtime::lease;

use super::{crash_point, renew_every, Driver};

/// The project an execution belongs to: (name, forge_repo), when it was fired from a spec.
type ProjectLink = Option<(String, String)>;

fn parse_time(text: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text).ok().map(|t| t.with_timezone(&Utc))
}

impl Driver {
    /// The execution's project and its `forge_repo` (empty when it has none).
    async fn project_link(&self, task_id: &str) -> anyhow::Result<ProjectLink> {
        let store = self.execs.store();
        let Some(spec) = store.spec_of_execution(task_id).await? else { return Ok(None) };
        let forge_repo = store.project(&spec.project).await?.map(|p| p.forge_repo).unwrap_or_default();
        Ok(Some((spec.project, forge_repo.trim().to_string())))
    }

    /// Journals a failed gate verdict with `output`; `checked` says what was checked (no
    /// command ran).
    async fn gate_failed(
        &self,
        state: &mut ExecutionState,
        phase_id: i64,
        output: String,
        checked: String,
    ) -> anyhow::Result<()> {
        errln!("gate of phase {phase_id} failed: {}", output.lines().next().unwrap_or_default());
        let key = format!("gate:{}:{phase_id}:{}", state.task_id, state.gate_runs(phase_id) + 1);
        crash_point("before-gate-record");
        let kind = EventKind::GateRecorded { phase_id, passed: false, output, command: Some(checked), exit_code: None };
        self.record(state, kind, key).await
    }

    /// Starts a gate that the forge's CI or the reviewer checks (the GATE action's `check`).
    pub(super) async fn external_gate(
        &mut self,
        state: &mut ExecutionState,
        g: &GateAction,
        check: GateCheck,
    ) -> anyhow::Result<()> {
        let link = self.project_link(&state.task_id).await?;
        let (task_id, phase_id, attempt) = (state.task_id.clone(), g.phase_id, g.attempt);
        let key = move |what: &str| format!("{what}:{task_id}:{phase_id}:{attempt}");
        match check {
            GateCheck::Reviewer => {
                let project = link.as_ref().map(|(p, _)| p.as_str());
                match self.config.reviewer_for(project) {
                    Some(agent) => {
                        errln!("gate review of phase {}: the reviewer agent {agent} judges it", g.phase_id);
                        let kind = EventKind::ReviewRequested { phase_id: g.phase_id, agent_name: agent };
                        self.record(state, kind, key("review-requested")).await
                    }
                    None => {
                        errln!(
                            "gate review of phase {}: no reviewer agent is configured ([review] agent in baton.toml); \
                             a human reviews it",
                            g.phase_id
                        );
                        let kind = EventKind::GateApprovalRequested { phase_id: g.phase_id };
                        self.record(state, kind, key("gate-approval")).await
                    }
                }
            }
            GateCheck::ForgeCi => {
                let Some((project, forge_repo)) = link.filter(|(_, f)| !f.is_empty()) else {
                    let output = format!(
                        "no forge configured: the ci gate of phase {} has no command and reads the checks of the \
                         pushed branch on the project's forge, but this execution's project has no forge_repo\n",
                        g.phase_id
                    );
                    return self.gate_failed(state, g.phase_id, output, "forge CI".into()).await;
                };
                let branch = self.meta.branch.clone();
                let remote = super::REMOTE.to_string();
                errln!("gate ci of phase {}: pushing {branch} to {remote} ({forge_repo})", g.phase_id);
                let (repo, b, r) = (self.repo.clone(), branch.clone(), remote.clone());
                let sha = match blocking(move || repo.push_branch(&r, &b)).await? {
                    Ok(sha) => sha,
                    Err(e) => {
                        let output = format!("pushing {branch} to {remote} failed (never forced): {e}\n");
                        return self
                            .gate_failed(state, g.phase_id, output, format!("git push {remote} {branch}"))
                            .await;
                    }
                };
                let ci = self.config.ci_for(Some(&project));
                let until =
                    self.clock.now() + chrono::Duration::seconds(i64::try_from(ci.timeout_secs).unwrap_or(3600));
                let until = until.to_rfc3339_opts(chrono::SecondsFormat::Secs, false);
                crash_point("before-gate-record");
                let kind = EventKind::CiStarted { phase_id: g.phase_id, sha: sha.clone(), until };
                self.record(state, kind, key("ci-started")).await?;
                errln!("gate ci of phase {}: waiting for the checks of {sha} on {forge_repo}", g.phase_id);
                Ok(())
            }
        }
    }

    /// Waits for the checks of the commit the current ci gate waits for, journaling every
    /// change and, finally, the verdict (see the module doc). Returns once the verdict is
    /// journaled.
    pub(super) async fn watch_ci(&mut self, state: &mut ExecutionState, lease: &lease::Lease) -> anyhow::Result<()> {
        let Some(wait) = state.ci_wait.clone() else { return Ok(()) };
        let link = self.project_link(&state.task_id).await?;
        let Some((project, forge_repo)) = link.filter(|(_, f)| !f.is_empty()) else {
            let output = format!(
                "no forge configured: the project of this execution has no forge_repo to read the checks of {} from\n",
                wait.sha
            );
            return self.gate_failed(state, wait.phase_id, output, format!("forge CI of {}", wait.sha)).await;
        };
        let ci = self.config.ci_for(Some(&project));
        let settings = self.config.forge_settings(|k| std::env::var(k).ok());
        let until = parse_time(&wait.until).unwrap_or_else(|| self.clock.now());
        let started = parse_time(&wait.started_at).unwrap_or_else(|| self.clock.now());
        let base = Duration::from_secs(ci.poll_secs.max(1));
        let mut interval = base;
        let mut renewed = crate::clock::Stopwatch::start();
        errln!("{} of {} (phase {})", wait_note(state), wait.sha, wait.phase_id);
        loop {
            if renewed.elapsed() > renew_every() {
                lease.renew().await?;
                renewed = crate::clock::Stopwatch::start();
            }
            let now = self.clock.now();
            let timed_out = now >= until;
            let elapsed = (now - started).to_std().unwrap_or_default();
            let known = state.ci_wait.as_ref().map(|w| w.checks.clone()).unwrap_or_default();
            let checks = match ci::read_checks(&settings, &forge_repo, &self.meta.branch, &wait.sha).await {
                Ok(checks) => Some(checks),
                Err(e) => {
                    errln!("reading the CI checks of {} failed: {e}; trying again", wait.sha);
                    None
                }
            };
            let current = match checks {
                Some(checks) if checks != known => {
                    let polls = state.ci_wait.as_ref().map_or(0, |w| w.polls);
                    let key = format!("ci-checked:{}:{}:{}:{polls}", state.task_id, wait.phase_id, wait.sha);
                    let kind =
                        EventKind::CiChecked { phase_id: wait.phase_id, sha: wait.sha.clone(), checks: checks.clone() };
                    self.record(state, kind, key).await?;
                    errln!("{} ({})", wait_note(state), wait.sha);
                    interval = base;
                    checks
                }
                Some(checks) => {
                    interval = (interval * 2).min(Duration::from_secs(ci.max_poll_secs.max(1)));
                    checks
                }
                None => {
                    interval = (interval * 2).min(Duration::from_secs(ci.max_poll_secs.max(1)));
                    known
                }
            };
            let timeout = Duration::from_secs(ci.timeout_secs);
            let grace = Duration::from_secs(ci.grace_secs);
            match ci::verdict(&wait.sha, &current, &ci.required, elapsed, grace, timed_out, timeout) {
                CiVerdict::Waiting => {}
                CiVerdict::Passed(output) => {
                    errln!("gate ci of phase {} passed: {}", wait.phase_id, output.trim());
                    let key =
                        format!("gate:{}:{}:{}", state.task_id, wait.phase_id, state.gate_runs(wait.phase_id) + 1);
                    crash_point("before-gate-record");
                    let kind = EventKind::GateRecorded {
                        phase_id: wait.phase_id,
                        passed: true,
                        output,
                        command: Some(format!("forge CI of {}", wait.sha)),
                        exit_code: None,
                    };
                    return self.record(state, kind, key).await;
                }
                CiVerdict::Failed(output) => {
                    let checked = format!("forge CI of {}", wait.sha);
                    return self.gate_failed(state, wait.phase_id, output, checked).await;
                }
            }
            // Until the next poll, a webhook's wake, the timeout, or the grace period's end.
            let mut sleep = interval.min((until - now).to_std().unwrap_or_default().max(Duration::from_millis(200)));
            if current.is_empty() && elapsed < grace {
                sleep = sleep.min((grace - elapsed).max(Duration::from_millis(200)));
            }
            let sleep = sleep.min(renew_every());
            match self.wake.clone() {
                Some(wake) => {
                    tokio::select! {
                        () = wake.notified() => interval = base,
                        () = tokio::time::sleep(sleep) => {}
                    }
                }
                None => tokio::time::sleep(sleep).await,
            }
        }
    }
}

impl Driver {
    /// A remediation round's fix is consolidated (every phase done): pushes the feature branch
    /// to the project's remote (never forced: the pull request's branch moves forward), journals
    /// `remediation_pushed`, records the new head on the merge row (the head CI notices are
    /// matched against), and replies on the review comments the round answers. A failed push
    /// is an error: the driver tries again (its pushed commit is journaled only once pushed).
    /// A fix that conflicts with commits someone else pushed parks the execution
    /// ([`super::Parked`]: paused with the reason, the round unpushed, the fix commit on the
    /// local branch) until a human resolves and resumes; the resumed drive pushes it.
    pub(super) async fn push_remediation(&mut self, state: &mut ExecutionState) -> anyhow::Result<()> {
        let Some(round) = state.remediation.unpushed().cloned() else { return Ok(()) };
        let n = u32::try_from(state.remediation.rounds.len()).unwrap_or(u32::MAX);
        let branch = self.meta.branch.clone();
        let remote = super::REMOTE.to_string();
        let (repo, b, r) = (self.repo.clone(), branch.clone(), remote.clone());
        let base = round.sha.clone();
        let pushed = blocking(move || push_or_replay(&repo, &r, &b, &base)).await?.map_err(|e| {
            anyhow::anyhow!(
                "pushing the {} round's fix on {branch} to {remote} (never forced): {e}",
                round.cause.as_str()
            )
        })?;
        let sha = match pushed {
            Pushed::Pushed(sha) => sha,
            Pushed::Conflict { theirs, paths } => {
                // Someone pushed to the branch and the fix does not apply on their commits:
                // nothing is pushed (never forced). The execution parks with the fix commit
                // kept on the local feature branch (the round stays unpushed): a human brings
                // their commits into it (merge or rebase, resolving the conflict) and resumes,
                // and the next drive pushes it (a fast-forward now) and completes the round.
                let reason = format!(
                    "the fix of {} round {} conflicts with commits someone else pushed to {branch} ({}) in {}: \
                     merge or rebase {remote}/{branch} into the local {branch}, resolve the conflict and resume \
                     (the fix is pushed then, never forced)",
                    round.cause.as_str(),
                    round.round,
                    crate::model::text::cut(&theirs, 12),
                    crate::model::text::cut(&paths.join(", "), 300)
                );
                errln!("{reason}: parked, a human decides");
                return Err(super::Parked { task_id: state.task_id.clone(), reason }.into());
            }
        };
        errln!(
            "{} round {} of {}: pushed {sha} to {remote}/{branch}",
            round.cause.as_str(),
            round.round,
            state.task_id
        );
        crash_point("before-remediation-pushed");
        let key = format!("remediation-pushed:{}:{n}", state.task_id);
        self.record(state, EventKind::RemediationPushed { round: n, sha: sha.clone() }, key).await?;
        let store = self.execs.store();
        if let Some(mut merge) = store.merge(&state.task_id).await? {
            merge.pushed_sha.clone_from(&sha);
            merge.updated_at = self.clock.now_rfc3339();
            store.put_merge(&merge).await?;
        }
        if !round.threads.is_empty() {
            let settings = self.config.forge_settings(|k| std::env::var(k).ok());
            let posted = crate::runtime::fixes::reply_threads(&self.execs, &settings, &state.task_id).await?;
            errln!("replied on {posted} review comments with {sha}");
        }
        Ok(())
    }
}

/// What pushing a round's fix came to.
#[derive(Debug)]
enum Pushed {
    /// The branch is on the remote at this commit.
    Pushed(String),
    /// Someone else's commits (`theirs`, the remote tip) are on the branch and the fix
    /// conflicts with them (`paths`): nothing was pushed.
    Conflict {
        /// The remote branch's tip.
        theirs: String,
        /// The conflicting paths.
        paths: Vec<String>,
    },
}

/// Pushes `branch` to `remote` (never forced). When the push is refused because the remote
/// branch moved past what Baton knows (someone pushed to the pull request's branch), fetches,
/// replays the round's commits (those after `base`, the head the round fixed) onto the remote
/// tip and pushes once more; a conflict pushes nothing.
fn push_or_replay(
    repo: &crate::git::GitRepo,
    remote: &str,
    branch: &str,
    base: &str,
) -> Result<Pushed, crate::git::GitError> {
    let refused = match repo.push_branch(remote, branch) {
        Ok(sha) => return Ok(Pushed::Pushed(sha)),
        Err(e) => e,
    };
    repo.fetch(remote)?;
    let Some(theirs) = repo.remote_tip(remote, branch)? else { return Err(refused) };
    let ours = repo.branch_tip(branch)?.unwrap_or_default();
    if ours.is_empty() || repo.is_ancestor(&theirs, &ours)? {
        // The remote did not move past us: the refusal was something else.
        return Err(refused);
    }
    errln!(
        "the push of {branch} was refused: {remote} has {theirs}, which someone else pushed; replaying the fix onto it"
    );
    match repo.replay_onto(branch, base, &theirs)? {
        crate::git::PickOutcome::Conflict { paths } => Ok(Pushed::Conflict { theirs, paths }),
        _ => repo.push_branch(remote, branch).map(Pushed::Pushed),
    }
}

/// `waiting for CI: 3 of 5 checks done`, from the state's wait.
fn wait_note(state: &ExecutionState) -> String {
    state.ci_wait.as_ref().map(crate::model::state::CiWait::note).unwrap_or_default()
}
