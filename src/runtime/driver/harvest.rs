//! Finished attempts: waiting for one (watching the budget and renewing the lease meanwhile),
//! then turning its exit into a result: its cost (reported, streamed, and spent by launches
//! that died), its commit, the path check and the cherry-pick onto the feature branch, and the
//! `step_recorded` event; an attempt that did no work or deletes most of the repository fails
//! (`engine::work`). Worktree environment files copied in at launch never reach the commit (an
//! agent that staged one gets a note in its journaled outcome). A died attempt is launched
//! again. When a working tree has the feature branch checked out, consolidation returns
//! [`Parked`] instead of failing the step: nothing is recorded, the attempt's commit stays
//! under its attempt ref, and the next run harvests it. It never dispatches a new step.

use std::path::Path;

use anyhow::Context as _;

use crate::clock;
use crate::engine;
use crate::git::{self, CommitIdentity, PickOutcome};
use crate::model::event::{AttemptUsage, EventKind, RecordStatus};
use crate::model::state::{ExecutionState, StepStatus};
use crate::model::text::first_line;
use crate::runtime::agent::output::tail;
use crate::runtime::agent::profile::parse_output;
use crate::runtime::agent::shim::{self, ExitRecord, WaitError};
use crate::runtime::runs::{launch_dir, launch_of};
use crate::runtime::{blocking, lease};

use super::budget::{BUDGET_POLL, BUDGET_STOP_FILE};
use super::launch::{LaunchMeta, META_FILE};
use super::options::Parked;
use super::{crash_point, renew_every, Driver};

impl Driver {
    /// Waits for one in-flight attempt (renewing the lease meanwhile) and records its result.
    pub(super) async fn wait_one(&mut self, state: &mut ExecutionState, lease: &lease::Lease) -> anyhow::Result<()> {
        self.wait_one_until(state, lease, None).await
    }

    /// [`Driver::wait_one`], or until `deadline` (a quota wait's end) passes first, when it
    /// returns with nothing harvested.
    pub(super) async fn wait_one_until(
        &mut self,
        state: &mut ExecutionState,
        lease: &lease::Lease,
        deadline: Option<chrono::DateTime<chrono::Utc>>,
    ) -> anyhow::Result<()> {
        let watch = state.budget.ceiling_usd.is_some() && !self.live.is_empty();
        let mut renew = clock::Stopwatch::start();
        let joined = loop {
            let left = deadline.map(|d| (d - self.clock.now()).to_std().unwrap_or_default());
            if left == Some(std::time::Duration::ZERO) {
                return Ok(());
            }
            let nap = if watch { BUDGET_POLL } else { renew_every() };
            tokio::select! {
                joined = self.inflight.join_next() => break joined,
                () = tokio::time::sleep(left.map_or(nap, |l| l.min(nap))) => {
                    if watch {
                        self.watch_budget(state);
                    }
                    if renew.elapsed() >= renew_every().saturating_sub(std::time::Duration::from_millis(50)) {
                        lease.renew().await?;
                        renew = clock::Stopwatch::start();
                    }
                }
            }
        };
        let Some(joined) = joined else {
            anyhow::bail!("nothing in flight to wait for");
        };
        self.finished_one();
        let finished = joined.context("an attempt watcher panicked")?;
        self.live.retain(|l| l.run_dir != finished.run_dir);
        match finished.result {
            Ok(exit) => self.harvest(state, &finished.step_id, finished.attempt, &finished.run_dir, exit).await,
            Err(WaitError::Died(_)) if finished.run_dir.join(BUDGET_STOP_FILE).exists() => {
                // Stopped at the ceiling and its shim gone too: nothing to harvest but the stop.
                let exit = ExitRecord {
                    exit_code: None,
                    signal: Some(9),
                    timed_out: false,
                    stopped_after_result: false,
                    spawn_error: None,
                    started_at: String::new(),
                    finished_at: String::new(),
                    duration_ms: 0,
                };
                self.harvest(state, &finished.step_id, finished.attempt, &finished.run_dir, exit).await
            }
            Err(WaitError::Died(_) | WaitError::NotStarted(_)) => {
                errln!(
                    "attempt {} of {} died; running it again in a fresh worktree",
                    finished.attempt,
                    finished.step_id
                );
                let _ = shim::kill_attempt(&finished.run_dir);
                self.relaunch(state, &finished.step_id, finished.attempt).await
            }
            Err(WaitError::Io(e)) => {
                Err(e.context(format!("watching attempt {} of {}", finished.attempt, finished.step_id)))
            }
        }
    }

    /// Turns a finished attempt into a result: commit, path check, consolidation, record.
    pub(super) async fn harvest(
        &mut self,
        state: &mut ExecutionState,
        step_id: &str,
        attempt: u32,
        run_dir: &Path,
        exit: ExitRecord,
    ) -> anyhow::Result<()> {
        if state.step_status(step_id) != StepStatus::Dispatched
            || state.result(step_id).map_or(0, |r| r.attempt) != attempt
        {
            return Ok(()); // already recorded (a re-harvest after a crash)
        }
        let text = std::fs::read_to_string(run_dir.join(META_FILE))
            .with_context(|| format!("reading {}", run_dir.display()))?;
        let meta: LaunchMeta = serde_json::from_str(&text)?;
        let (stdout, stderr) = shim::read_output(run_dir)?;
        let out = parse_output(&meta.profile, &stdout, &stderr, &exit);
        let step = engine::team::work_step(state, step_id)
            .ok_or_else(|| anyhow::anyhow!("step {step_id} vanished"))?
            .into_owned();
        let mut kinds = out.tokens();
        if let Some(c) = out.cost_usd.filter(|c| !c.is_finite() || !(0.0..=engine::MAX_STEP_COST_USD).contains(c)) {
            tracing::warn!(
                task.id = %state.task_id,
                step.id = %step_id,
                "{step_id} reported an invalid cost ({c}); priced from its tokens instead"
            );
        }
        let model = if meta.model.is_empty() { step.model.clone() } else { meta.model.clone() };
        let (mut cost, mut estimated) = crate::runtime::spend::attempt_cost(&out, &model, &self.prices);
        let stopped = run_dir.join(BUDGET_STOP_FILE).exists();
        // What it streamed counts when it says more than its final report (killed before the
        // report, a command that only streams): the larger of the two is what it used.
        let (streamed, reported) = crate::runtime::spend::streamed_usage(&stdout);
        let priced = reported.filter(|m| self.prices.get(m).is_some()).unwrap_or_else(|| model.clone());
        if let Some(c) =
            self.prices.cost_of(&priced, &streamed).map(|c| c.min(engine::MAX_STEP_COST_USD)).filter(|c| *c > cost)
        {
            (cost, estimated, kinds) = (c, true, streamed);
        }
        let tokens = kinds.total();
        // Launches of this attempt that died with their driver and were run again spent too.
        let lost = self.lost_launch_spend(run_dir, &model);
        if lost > 0.0 {
            tracing::info!(
                task.id = %state.task_id,
                step.id = %step_id,
                "{step_id}: adding ${lost:.2} streamed by earlier launches of attempt {attempt} that died"
            );
            cost = (cost + lost).min(engine::MAX_STEP_COST_USD);
            estimated = true;
        }
        // Stopped on its account's usage limit (not at the ceiling, not timed out): no failed
        // attempt, the step (or team member) waits for the account (issue 18.1).
        if !out.success && !stopped && !exit.timed_out {
            if let Some(hit) = crate::runtime::agent::quota::detect(&meta.profile, &stdout, &stderr, self.clock.now()) {
                self.record_quota_stop(state, step_id, attempt, &meta.agent_name, &meta.profile, hit, cost, tokens)
                    .await?;
                self.drop_attempt(state, step_id, attempt, &meta).await;
                return Ok(());
            }
        }
        let duration = exit.duration_ms as f64 / 1000.0;
        let mut outcome = out.outcome.clone();
        let mut withheld = Vec::new();
        let mut files = Vec::new();
        let mut commit_hash = String::new();
        let mut error = String::new();
        let success = if stopped {
            error = format!(
                "stopped at the budget ceiling: the running agents' usage crossed the remaining budget (this attempt: ${cost:.2})"
            );
            false
        } else if exit.timed_out {
            error = format!("timed out after {} s", exit.duration_ms / 1000);
            false
        } else if !out.success {
            error = out.error.clone().unwrap_or_else(|| exit.describe());
            false
        } else {
            let consolidated = match self.consolidate(state, &meta, &step, &out.outcome, &mut withheld).await {
                // A checkout holds the feature branch: park, never fail paid-for work; the step
                // stays dispatched and is harvested again on resume.
                Err(e) if e.is::<Parked>() => return Err(e),
                Err(e) => Err(format!("consolidation failed: {e:#}")),
                Ok(done) => done,
            };
            match consolidated {
                Ok((sha, changed)) => match engine::work::no_work_reason(
                    &step,
                    tokens,
                    cost,
                    &sha,
                    &changed,
                    if out.outcome.trim().is_empty() { &stderr } else { &out.outcome },
                ) {
                    Some(why) => {
                        error = why;
                        false
                    }
                    None => {
                        commit_hash = sha;
                        files = changed;
                        true
                    }
                },
                Err(why) => {
                    error = why;
                    false
                }
            }
        };
        if !withheld.is_empty() {
            // Journaled with the result: the agent staged files that must never be committed.
            let note = format!(
                "[baton] kept out of the commit: {} (worktree environment files copied from the project checkout \
                 by .worktreeinclude are never committed; the agent had staged them)",
                withheld.join(", ")
            );
            errln!("{step_id}: {note}");
            outcome = if outcome.trim().is_empty() { note } else { format!("{}\n\n{note}", outcome.trim_end()) };
        }
        crash_point("after-consolidate");
        let status = match (success, step.interactive) {
            (false, _) if stopped => RecordStatus::BudgetStopped,
            (false, _) => RecordStatus::Failed,
            (true, true) => RecordStatus::Interacting,
            (true, false) => RecordStatus::Complete,
        };
        let kind = EventKind::StepRecorded {
            step_id: step_id.to_string(),
            agent_name: meta.agent_name.clone(),
            status,
            outcome,
            files_changed: files.clone(),
            commit_hash: commit_hash.clone(),
            tokens,
            cost_usd: cost,
            duration_seconds: duration,
            error: error.clone(),
            usage: Some(AttemptUsage {
                attempt,
                model,
                input_tokens: kinds.input,
                output_tokens: kinds.output,
                cache_creation_tokens: kinds.cache_write,
                cache_read_tokens: kinds.cache_read,
                cost_estimated: estimated,
            }),
        };
        let key = format!("record:{}:{step_id}:{attempt}", state.task_id);
        self.record(state, kind, key).await?;
        crash_point("after-record");
        if success {
            let short = commit_hash.get(..10).unwrap_or("no commit");
            let done = state.step_status(step_id).as_str();
            errln!("{step_id} {done} ({short}, {} files, ${cost:.2})", files.len());
            self.drop_attempt(state, step_id, attempt, &meta).await;
            if !meta.automation {
                self.quota_recovered(&meta.profile).await?;
            }
        } else if stopped {
            errln!("{step_id}: {error}; it runs again once the ceiling is raised");
        } else {
            errln!("{step_id} failed: {error} (worktree kept at {})", meta.worktree.display());
        }
        Ok(())
    }

    /// Removes a finished attempt's worktree and ref (kept only for a failed attempt).
    async fn drop_attempt(&self, state: &ExecutionState, step_id: &str, attempt: u32, meta: &LaunchMeta) {
        let (repo, wt) = (self.repo.clone(), meta.worktree.clone());
        let attempt_ref = git::attempt_ref(&state.task_id, step_id, attempt);
        let _ = blocking(move || {
            let _ = repo.remove_worktree(&wt);
            let _ = repo.delete_ref(&attempt_ref);
        })
        .await;
    }

    /// USD streamed by the earlier launches of the attempt whose newest launch is `run_dir`
    /// (launches that died with their driver and were run again), priced at `model`.
    pub(super) fn lost_launch_spend(&self, run_dir: &Path, model: &str) -> f64 {
        let (base, n) = launch_of(run_dir);
        (1..n)
            .filter_map(|k| std::fs::read(launch_dir(&base, k).join(shim::STDOUT_FILE)).ok())
            .filter_map(|bytes| {
                let (tokens, reported) = crate::runtime::spend::streamed_usage(&String::from_utf8_lossy(&bytes));
                let priced = reported.filter(|m| self.prices.get(m).is_some()).unwrap_or_else(|| model.to_string());
                self.prices.cost_of(&priced, &tokens)
            })
            .sum::<f64>()
            + 0.0
    }

    /// Commits the attempt's changes, checks its paths and cherry-picks it onto the feature
    /// branch. `Ok(Err(reason))` fails the step; `Ok(Ok((sha, files)))` is the branch commit.
    pub(super) async fn consolidate(
        &self,
        state: &ExecutionState,
        meta: &LaunchMeta,
        step: &crate::model::plan::PlanStep,
        outcome: &str,
        withheld: &mut Vec<String>,
    ) -> anyhow::Result<Result<(String, Vec<String>), String>> {
        if engine::goal::is_evaluation(step) || engine::review::is_review(step) {
            // A goal evaluator or a reviewer only judges: nothing it writes is kept.
            return Ok(Ok((String::new(), Vec::new())));
        }
        let task_id = state.task_id.clone();
        let message = format!(
            "{}: {}\n\n{}\n\nBaton-Task: {task_id}\nBaton-Step: {}\nBaton-Attempt: {}\n",
            step.step_id,
            first_line(&step.task_description),
            tail(outcome.trim(), 2000),
            step.step_id,
            meta.attempt
        );
        let author = if meta.automation { "automation".to_string() } else { meta.agent_name.clone() };
        let identity = CommitIdentity { author_email: format!("{author}@baton.invalid"), author_name: author };
        let (repo, wt, base) = (self.repo.clone(), meta.worktree.clone(), meta.base_sha.clone());
        let never = meta.env_files.clone();
        let (commit, kept_out) =
            blocking(move || repo.commit_worktree_without(&wt, &base, &identity, &message, &never)).await??;
        *withheld = kept_out;
        let Some(commit) = commit else {
            return Ok(Ok((String::new(), Vec::new())));
        };
        let attempt_ref = git::attempt_ref(&task_id, &step.step_id, meta.attempt);
        let (repo, sha) = (self.repo.clone(), commit.sha.clone());
        blocking(move || repo.set_ref(&attempt_ref, &sha)).await??;
        let violations = git::check_paths(&commit.files_changed, &step.allowed_paths, &step.blocked_paths);
        if !violations.is_empty() {
            let list: Vec<String> = violations.iter().map(|v| v.to_string()).collect();
            return Ok(Err(format!("changed files outside the step's allowed paths: {}", list.join("; "))));
        }
        if let Some(why) = engine::work::mass_deletion_reason(step, commit.files_deleted, commit.base_files) {
            return Ok(Err(why));
        }
        for _ in 0..3 {
            let (repo, branch, sha) = (self.repo.clone(), self.meta.branch.clone(), commit.sha.clone());
            match blocking(move || repo.cherry_pick_onto(&branch, &sha)).await? {
                Ok(PickOutcome::Applied { new_tip }) => {
                    self.publish(&task_id, &step.step_id, meta.attempt, &commit.sha).await?;
                    return Ok(Ok((new_tip, commit.files_changed)));
                }
                Ok(PickOutcome::AlreadyApplied) => {
                    self.publish(&task_id, &step.step_id, meta.attempt, &commit.sha).await?;
                    let found = self.find_on_branch(&task_id, &step.step_id, meta.attempt).await?;
                    return Ok(Ok((found, commit.files_changed)));
                }
                Ok(PickOutcome::Conflict { paths }) => {
                    return Ok(Err(format!(
                        "consolidation onto {} conflicts in: {}",
                        self.meta.branch,
                        paths.join(", ")
                    )))
                }
                Err(git::GitError::RefChanged { .. }) => continue,
                Err(git::GitError::BranchCheckedOut { branch, worktree }) => {
                    return Err(Parked {
                        task_id,
                        reason: format!(
                            "feature branch `{branch}` is checked out at {}: switch away and resume \
                             (step {} attempt {} is kept as {})",
                            worktree.display(),
                            step.step_id,
                            meta.attempt,
                            commit.sha.get(..10).unwrap_or(&commit.sha)
                        ),
                    }
                    .into())
                }
                Err(e) => return Err(e).context("consolidating onto the feature branch"),
            }
        }
        anyhow::bail!("feature branch {} keeps moving under consolidation", self.meta.branch)
    }

    /// With a remote ([`Driver::remote`]): pushes the feature branch after a consolidation,
    /// before the step's result is journaled, so a recorded commit is always on the remote.
    /// A push that fails parks the execution ([`Parked`]): the step stays dispatched, its
    /// commit on the local branch and under its attempt ref, and a resume pushes again.
    async fn publish(&self, task_id: &str, step_id: &str, attempt: u32, sha: &str) -> anyhow::Result<()> {
        if !self.remote {
            return Ok(());
        }
        match crate::runtime::remote::publish(&self.repo, &self.meta.branch).await {
            Ok(_) => Ok(()),
            Err(e) => Err(Parked {
                task_id: task_id.to_string(),
                reason: format!(
                    "{e:#}; step {step_id} attempt {attempt} is kept as {}: resume to fetch and push again",
                    sha.get(..10).unwrap_or(sha)
                ),
            }
            .into()),
        }
    }

    /// The feature-branch commit of an attempt whose patch is already there (a re-harvest).
    pub(super) async fn find_on_branch(&self, task_id: &str, step_id: &str, attempt: u32) -> anyhow::Result<String> {
        let (repo, branch) = (self.repo.clone(), self.meta.branch.clone());
        let log = blocking(move || repo.log(&branch, 200)).await??;
        let step_line = format!("Baton-Step: {step_id}\n");
        let attempt_line = format!("Baton-Attempt: {attempt}\n");
        let task_line = format!("Baton-Task: {task_id}\n");
        let hit = log.iter().find(|c| {
            c.message.contains(&step_line) && c.message.contains(&attempt_line) && c.message.contains(&task_line)
        });
        Ok(hit.or_else(|| log.first()).map(|c| c.sha.clone()).unwrap_or_default())
    }
}
