//! The run loop: asks the engine for the next action and carries it out (dispatch up to the
//! cap and the shared slots unless paused, wait for an attempt, run a gate, acknowledge a checkpoint,
//! approve automatically under `baton demo`, record `completed`), renewing the lease, until
//! the run stops on an action a human must answer or a final one. It never launches or
//! harvests an attempt itself: `launch` and `harvest` do.

use std::time::Duration;

use crate::clock;
use crate::engine;
use crate::model::action::Action;
use crate::model::event::{Event, EventKind};
use crate::model::state::{ApprovalDecision, ExecutionState, ExecutionStatus};
use crate::runtime::lease;

use super::options::RunOutcome;
use super::quota::Route;
use super::{renew_every, Driver};

/// How often a driver waiting for a shared agent slot looks again.
const SLOT_POLL: Duration = Duration::from_millis(250);

/// How often a paused driver looks whether the pause was lifted.
const PAUSE_POLL: Duration = Duration::from_millis(500);

impl Driver {
    /// Waits, holding and renewing the lease, until the execution is no longer paused (an
    /// operator's `execute resume` from any door), then reloads it: what a pause lifted means
    /// to a driver that had nothing running. Ctrl-C (or a cancel) stops the run as at any other
    /// time; a later run goes on from the journal.
    async fn wait_out_pause(&mut self, state: &mut ExecutionState, lease: &lease::Lease) -> anyhow::Result<()> {
        let task_id = state.task_id.clone();
        errln!("execution {task_id} is paused: no new dispatches until `baton execute resume`; waiting");
        let mut last_renew = clock::Stopwatch::start();
        while self.execs.store().is_paused(&task_id).await? {
            tokio::time::sleep(PAUSE_POLL).await;
            if last_renew.elapsed() > renew_every() {
                lease.renew().await?;
                last_renew = clock::Stopwatch::start();
            }
        }
        errln!("execution {task_id} resumed");
        if let Some(fresh) = self.execs.load(&task_id).await? {
            *state = fresh;
        }
        Ok(())
    }

    pub(super) async fn drive(
        &mut self,
        mut state: ExecutionState,
        lease: &lease::Lease,
    ) -> anyhow::Result<RunOutcome> {
        self.recover(&mut state).await?;
        let mut last_renew = clock::Stopwatch::start();
        loop {
            if last_renew.elapsed() > renew_every() {
                lease.renew().await?;
                last_renew = clock::Stopwatch::start();
            }
            // Quota waits whose time came (or whose fallback agent is free) end first.
            if !state.quota_waits.is_empty() && state.status == ExecutionStatus::Running {
                self.resume_due_waits(&mut state).await?;
            }
            let action = engine::next_action(&state);
            match &action {
                Action::Checkpoint(c) => {
                    errln!("checkpoint before phase {}: {}", c.phase_id, c.reason);
                    // The engine derives its key, one per checkpoint, as for every other door.
                    let event = Event::new(EventKind::CheckpointAcknowledged).by("baton");
                    self.journal(&mut state, event).await?;
                }
                Action::Dispatch(_) => {
                    // A pause holds back new dispatches through every door, this driver's too
                    // (an `execute run` dispatched on through `execute pause`, found by a
                    // tester): the agents running finish and are recorded, then the run waits
                    // until the pause is lifted.
                    if self.execs.store().is_paused(&state.task_id).await? {
                        if self.running > 0 {
                            self.wait_one(&mut state, lease).await?;
                        } else {
                            self.wait_out_pause(&mut state, lease).await?;
                        }
                        continue;
                    }
                    let ready = engine::next_actions(&state);
                    let free = self.cap.saturating_sub(self.running).min(self.shared_slots_free());
                    if free == 0 && self.running == 0 {
                        // Every shared slot is taken by other executions' attempts.
                        tokio::time::sleep(SLOT_POLL).await;
                        continue;
                    }
                    if free == 0 || ready.is_empty() {
                        self.wait_one(&mut state, lease).await?;
                        continue;
                    }
                    let mut dispatched = 0;
                    for a in ready.into_iter().take(free) {
                        // A launch that failed may have ended the execution: stop dispatching.
                        if state.status != ExecutionStatus::Running {
                            break;
                        }
                        // The shared slots are taken before the dispatch is journaled: another
                        // driver may have taken the last one since `free` was counted.
                        let Some(group) = self.reserve_slots() else { break };
                        self.reserved = Some(group);
                        if let Action::Dispatch(mut d) = a {
                            // An exhausted account: its fallback agent runs the step, or it waits.
                            match self.route(&d).await? {
                                Route::Agent(agent) => d.agent_name = agent,
                                Route::Wait { account, until, reason } => {
                                    self.reserved = None;
                                    self.wait_before_dispatch(&mut state, &d, account, until, reason).await?;
                                    continue;
                                }
                            }
                            let done = self.dispatch(&mut state, &d).await;
                            self.reserved = None;
                            done?;
                            dispatched += 1;
                        }
                    }
                    if dispatched == 0 && self.running == 0 && state.quota_waits.is_empty() {
                        tokio::time::sleep(SLOT_POLL).await;
                    }
                }
                Action::Wait { .. } if state.ci_wait.is_some() && self.running == 0 => {
                    // A ci gate waits for the forge's checks: poll, or wake on a webhook.
                    self.watch_ci(&mut state, lease).await?;
                }
                Action::Wait { until: Some(until), message } => {
                    let Ok(until) = chrono::DateTime::parse_from_rfc3339(until) else {
                        anyhow::bail!("execution {}: a quota wait has no readable end ({until})", state.task_id);
                    };
                    let until = until.with_timezone(&chrono::Utc);
                    if self.running > 0 {
                        self.wait_one_until(&mut state, lease, Some(until)).await?;
                        continue;
                    }
                    errln!("{message} Waiting; it resumes by itself then.");
                    loop {
                        let left = (until - self.clock.now()).to_std().unwrap_or_default();
                        if left.is_zero() {
                            break;
                        }
                        tokio::time::sleep(left.min(renew_every())).await;
                        lease.renew().await?;
                    }
                }
                Action::Wait { .. } => {
                    if self.running == 0 {
                        anyhow::bail!("execution {} waits for in-flight steps that no process runs", state.task_id);
                    }
                    self.wait_one(&mut state, lease).await?;
                }
                Action::Gate(g) => {
                    if self.running > 0 {
                        self.wait_one(&mut state, lease).await?;
                        continue;
                    }
                    let gate = self.gate(&mut state, g);
                    tokio::pin!(gate);
                    loop {
                        tokio::select! {
                            done = &mut gate => break done?,
                            () = tokio::time::sleep(renew_every()) => lease.renew().await?,
                        }
                    }
                }
                Action::Approval(a) if self.auto_approve => {
                    errln!("notice: approving phase {} automatically (baton demo): {}", a.phase_id, a.message);
                    let kind = EventKind::ApprovalRecorded {
                        phase_id: a.phase_id,
                        result: ApprovalDecision::Approve,
                        feedback: "approved automatically by baton demo".into(),
                    };
                    let key = format!("approval:{}:{}:{}", state.task_id, a.phase_id, state.approval_results.len());
                    let event = Event::new(kind).by("baton demo (auto-approve)").with_key(key);
                    self.journal(&mut state, event).await?;
                }
                Action::Approval(_) | Action::Feedback(_) | Action::Interact(_) | Action::Budget(_) => {
                    if self.running > 0 {
                        self.wait_one(&mut state, lease).await?;
                        continue;
                    }
                    let mut action = action.clone();
                    if let Action::Approval(a) = &mut action {
                        let context = std::mem::take(&mut a.approval_context);
                        a.approval_context = crate::runtime::teams::approval_context(&self.data, &state, context).await;
                    }
                    return Ok(self.outcome(&state, action));
                }
                Action::Complete { .. } => {
                    if self.running > 0 {
                        self.wait_one(&mut state, lease).await?;
                        continue;
                    }
                    if state.remediation.unpushed().is_some() {
                        self.push_remediation(&mut state).await?;
                    }
                    let key = match state.remediation.rounds.len() {
                        0 => format!("complete:{}", state.task_id),
                        n => format!("complete:{}:{n}", state.task_id),
                    };
                    self.record(&mut state, EventKind::Completed, key).await?;
                    return Ok(self.outcome(&state, engine::next_action(&state)));
                }
                Action::Failed { .. } => {
                    if self.running > 0 {
                        self.wait_one(&mut state, lease).await?;
                        continue;
                    }
                    return Ok(self.outcome(&state, action.clone()));
                }
            }
        }
    }

    pub(super) fn outcome(&self, state: &ExecutionState, action: Action) -> RunOutcome {
        RunOutcome {
            task_id: state.task_id.clone(),
            action,
            branch: self.meta.branch.clone(),
            repo: self.meta.repo.clone(),
        }
    }
}
