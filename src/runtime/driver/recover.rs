//! Crash recovery, when a run starts: every dispatched attempt of the current phase is
//! launched (never started), re-adopted (still running), harvested (finished while baton was
//! down) or run again in a fresh worktree (died, or its worktree is gone: it is stopped first,
//! see [`crate::runtime::agent::interrupt`]). Completed steps never run again. With a remote
//! (issue 17.3), an attempt that another replica launched and whose commit reached the remote
//! is recorded from that commit instead of running again.

use crate::engine;
use crate::model::event::{EventKind, RecordStatus};
use crate::model::state::{ExecutionState, StepStatus};
use crate::runtime::agent::shim::{self, AttemptState};
use crate::runtime::blocking;
use crate::runtime::runs::latest_launch;

use super::gate::{stop_orphan_gate, GATE_PGID_FILE};
use super::launch::{LaunchMeta, META_FILE};
use super::{Driver, Finished, LiveAttempt};

/// The dispatched attempts of the current phase (team members included): (step id, attempt).
fn dispatched(state: &ExecutionState) -> Vec<(String, u32)> {
    let Some(phase) = state.current() else { return Vec::new() };
    engine::team::dispatch_ids(phase)
        .iter()
        .filter_map(|id| state.result(id))
        .filter(|r| r.status == StepStatus::Dispatched)
        .map(|r| (r.step_id.clone(), r.attempt))
        .collect()
}

impl Driver {
    /// A step dispatched by another replica that died after pushing its commit and before
    /// journaling its result (issue 17.3): when the feature branch (fetched from the remote)
    /// holds the commit of this very attempt (its `Baton-Task`, `Baton-Step` and
    /// `Baton-Attempt` trailers), the result is recorded from it and the step is not run again.
    /// Its cost was spent on the other replica and is not known here (recorded as 0). False
    /// when the branch has no such commit (the work never reached the remote: run it again).
    async fn record_from_remote(
        &mut self,
        state: &mut ExecutionState,
        step_id: &str,
        attempt: u32,
    ) -> anyhow::Result<bool> {
        let (repo, branch) = (self.repo.clone(), self.meta.branch.clone());
        let log = blocking(move || repo.log(&branch, 500)).await??;
        let lines = [
            format!("Baton-Task: {}\n", state.task_id),
            format!("Baton-Step: {step_id}\n"),
            format!("Baton-Attempt: {attempt}\n"),
        ];
        let Some(commit) = log.into_iter().find(|c| lines.iter().all(|l| c.message.contains(l.as_str()))) else {
            return Ok(false);
        };
        let Some(step) = engine::team::work_step(state, step_id).map(|s| s.into_owned()) else { return Ok(false) };
        let (repo, sha) = (self.repo.clone(), commit.sha.clone());
        let files = blocking(move || repo.changed_files(&format!("{sha}~1"), &sha)).await??;
        errln!(
            "recovering {step_id}: attempt {attempt} ran on another replica and its commit {} is on the remote; recording it",
            commit.sha.get(..10).unwrap_or(&commit.sha)
        );
        let kind = EventKind::StepRecorded {
            step_id: step_id.to_string(),
            agent_name: step.agent_name.clone(),
            status: if step.interactive { RecordStatus::Interacting } else { RecordStatus::Complete },
            outcome: format!(
                "[baton] recorded from the project's remote: commit {} of attempt {attempt} (it ran on another \
                 replica, which stopped before recording it; its cost is not known here)",
                commit.sha
            ),
            files_changed: files,
            commit_hash: commit.sha,
            tokens: 0,
            cost_usd: 0.0,
            duration_seconds: 0.0,
            error: String::new(),
            usage: None,
        };
        let key = format!("record:{}:{step_id}:{attempt}", state.task_id);
        self.record(state, kind, key).await?;
        Ok(true)
    }

    /// Harvests the dispatched attempts of the current phase whose agent has finished, and
    /// only those (running, died and never-started attempts are left as they are); returns
    /// how many it recorded. What a cancel of a paused execution does first.
    pub(super) async fn harvest_finished(&mut self, state: &mut ExecutionState) -> anyhow::Result<usize> {
        let mut harvested = 0;
        for (step_id, attempt) in dispatched(state) {
            let base = self.data.run_dir(&state.task_id, &step_id, attempt);
            let Some((_, dir)) = latest_launch(&base) else { continue };
            if let AttemptState::Finished(exit) = shim::inspect(&dir)? {
                errln!("{step_id}: attempt {attempt} finished while the execution was halted; recording its result");
                match self.harvest(state, &step_id, attempt, &dir, exit).await {
                    // The feature branch is checked out somewhere: its commit stays under its
                    // attempt ref, and a cancel still goes through.
                    Err(e) if e.is::<super::options::Parked>() => {
                        errln!("{step_id}: attempt {attempt} not recorded: {e}");
                        continue;
                    }
                    done => done?,
                }
                harvested += 1;
            }
        }
        Ok(harvested)
    }

    /// Recovers every dispatched step of the current phase (see the module doc).
    pub(super) async fn recover(&mut self, state: &mut ExecutionState) -> anyhow::Result<()> {
        stop_orphan_gate(&self.data.runs(&state.task_id).join(GATE_PGID_FILE));
        for (step_id, attempt) in dispatched(state) {
            let base = self.data.run_dir(&state.task_id, &step_id, attempt);
            let Some((n, dir)) = latest_launch(&base) else {
                if self.remote && self.record_from_remote(state, &step_id, attempt).await? {
                    continue;
                }
                errln!("recovering {step_id}: attempt {attempt} was journaled but never launched; launching it");
                self.launch_or_fail(state, &step_id, attempt, 1).await?;
                continue;
            };
            let mut found = shim::inspect(&dir)?;
            // A driver that died inside `launch` may have left a shim that has not taken its
            // lock yet (on a busy machine it can take seconds). No grace period is long enough
            // for sure: abandon the run directory under the shim's own lock instead, so either
            // the shim holds it now (running: re-adopt it) or it will never start the agent.
            if matches!(found, AttemptState::NotStarted) && !shim::abandon(&dir)? {
                found = shim::inspect(&dir)?;
            }
            // A worktree deleted while no driver watched it: stop the attempt and run it again.
            if let Some(why) = crate::runtime::agent::interrupt::interrupt_if_worktree_lost(&dir, &found).await? {
                errln!("recovering {step_id}: attempt {attempt} interrupted: {why}");
                found = AttemptState::Died;
            }
            match found {
                AttemptState::NotStarted | AttemptState::Died => {
                    errln!(
                        "recovering {step_id}: attempt {attempt} did not survive; running it again in a fresh worktree"
                    );
                    let _ = shim::kill_attempt(&dir);
                    self.launch_or_fail(state, &step_id, attempt, n + 1).await?;
                }
                AttemptState::Running => {
                    errln!("recovering {step_id}: attempt {attempt} is still running; re-adopting it");
                    let launched = std::fs::read_to_string(dir.join(META_FILE))
                        .ok()
                        .and_then(|t| serde_json::from_str::<LaunchMeta>(&t).ok());
                    if let Some(m) = launched.filter(|m| !m.automation) {
                        let usage = crate::runtime::spend::UsageStream::default();
                        self.live.push(LiveAttempt {
                            step_id: step_id.clone(),
                            run_dir: dir.clone(),
                            model: m.model,
                            usage,
                            unpriced: false,
                        });
                    }
                    self.started_one();
                    self.inflight.spawn(async move {
                        let result = shim::wait_until_finished(&dir).await;
                        Finished { step_id, attempt, run_dir: dir, result }
                    });
                }
                AttemptState::Finished(exit) => {
                    errln!(
                        "recovering {step_id}: attempt {attempt} finished while its driver was stopped; harvesting it"
                    );
                    self.harvest(state, &step_id, attempt, &dir, exit).await?;
                }
            }
        }
        Ok(())
    }
}
