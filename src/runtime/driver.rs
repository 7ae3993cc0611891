//! `baton execute run`: the headless driver of one execution.
//!
//! It asks the engine for actions and carries out DISPATCH (real agent processes, each attempt
//! in a fresh worktree of the feature branch `baton/<task_id>`) and GATE (the plan's command in
//! an integration worktree) itself; on APPROVAL / FEEDBACK / INTERACT it prints the action and
//! exits 3 with everything saved, so the next `run` continues. Never a busy loop: it waits on
//! agent exits.
//!
//! Crash safety: a dispatch is journaled before the launch; each agent runs under the detached
//! `baton __attempt` shim. On start the driver recovers every in-flight attempt: never started →
//! launch it; still running (its lock held) → re-adopt it; finished while baton was down →
//! harvest its exit record; died → kill its process group and run it again in a fresh worktree.
//! Completed steps never run again. `BATON_CRASH_AT=<point>` makes the process exit at a named
//! point (see [`CRASH_POINTS`]) so tests can prove it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

use crate::clock;
use crate::engine;
use crate::git::{self, CommitIdentity, GitRepo, PickOutcome};
use crate::model::action::{Action, DispatchAction, GateAction};
use crate::model::event::{AttemptUsage, Event, EventKind, RecordStatus};
use crate::model::plan::MachinePlan;
use crate::model::state::{ApprovalDecision, ExecutionState, ExecutionStatus, StepStatus};
use crate::runtime::agent::output::tail;
use crate::runtime::agent::profile::{agent_env, build_argv, parse_output, AgentInvocation, AgentProfile};
use crate::runtime::agent::roster::{load_roster, Roster};
use crate::runtime::agent::shim::{self, AttemptSpec, AttemptState, ExitRecord, WaitError};
use crate::runtime::config::{Config, DataDir};
use crate::runtime::executions::Executions;
use crate::runtime::runs::{latest_launch, launch_dir, launch_of, meta_path, read_meta, RunMeta};
use crate::runtime::BadInput;
use crate::runtime::{blocking, lease, write_atomic};

/// Named crash points (`BATON_CRASH_AT`): after a dispatch is journaled but before the launch;
/// after the launch; after an attempt's commit is on the feature branch but before its result
/// is recorded; after a result is recorded; after a gate ran but before its result is recorded.
pub const CRASH_POINTS: &[&str] =
    &["after-dispatch", "after-launch", "after-consolidate", "after-record", "before-gate-record"];

fn crash_point(name: &str) {
    if std::env::var("BATON_CRASH_AT").is_ok_and(|v| v == name) {
        errln!("baton: crashing at {name} (BATON_CRASH_AT)");
        std::process::exit(137);
    }
}

/// What `execute run` is asked to do.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// A parsed plan (its task id resumes a live execution of the same plan).
    pub plan: Option<MachinePlan>,
    /// The execution to resume, when no plan is given.
    pub task_id: Option<String>,
    /// The repository (default `.` for a new execution, the execution's own when resuming).
    pub repo: Option<PathBuf>,
    /// Default agent profile (default `claude`, or the execution's own when resuming).
    pub agent: Option<String>,
    /// Base of the feature branch (default: the repository's current branch tip).
    pub base: Option<String>,
    /// Concurrent agents (default: baton.toml).
    pub max_parallel: Option<usize>,
    /// Approve every approval automatically with a printed notice (`baton demo`).
    pub auto_approve: bool,
    /// Agent slots shared with other drivers (`baton serve`: the global and the project's
    /// cap): an attempt launches only when every one of them has a free permit, and holds one
    /// permit of each until it finishes.
    pub slots: Vec<Arc<Semaphore>>,
    /// Stops the run when it turns `true` (`baton serve` shutting down, pausing or cancelling):
    /// the run returns [`Interrupted`] exactly as after Ctrl-C. Without it, Ctrl-C stops the run.
    pub stop: Option<watch::Receiver<bool>>,
    /// The USD ceiling and where it comes from (`--max-spend-usd`, `spec`, `project`): set on
    /// the execution when it differs from its current one. Without it, a new execution takes
    /// `BATON_RUN_BUDGET_USD` (or its alias) when set.
    pub budget: Option<(f64, String)>,
    /// The executions (and so the store) to drive with, shared with the caller's other drivers
    /// (`baton serve`: one store, so concurrent drivers' appends share group commits). Without
    /// it, the run opens its own.
    pub execs: Option<Executions>,
}

/// How a run ended: the action it stopped on (COMPLETE, FAILED, or a human decision).
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// The execution.
    pub task_id: String,
    /// The action the run stopped on.
    pub action: Action,
    /// The feature branch, `baton/<task_id>`.
    pub branch: String,
    /// The repository the execution works on.
    pub repo: PathBuf,
}

/// Agent profiles `--agent` and `baton.toml` accept.
pub const PROFILES: &[&str] = &["demo", "claude", "codex", "command"];

/// What a run directory remembers about its attempt (`baton.json` beside `attempt.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct LaunchMeta {
    step_id: String,
    attempt: u32,
    agent_name: String,
    profile: AgentProfile,
    worktree: PathBuf,
    base_sha: String,
    automation: bool,
    /// Model asked for (the spend ledger's `model`); empty in run dirs written before it.
    #[serde(default)]
    model: String,
}

const META_FILE: &str = "baton.json";

/// Marker a driver writes in an attempt's run dir before stopping it at the budget ceiling:
/// the harvest (even after a crash) records the attempt as `budget_stopped`, not failed.
const BUDGET_STOP_FILE: &str = "budget-stopped";

/// How often a driver reads the usage its running agents stream, when there is a ceiling.
const BUDGET_POLL: Duration = Duration::from_millis(200);

/// How long recovery waits for an attempt whose shim has not taken its lock (a driver that died
/// while launching it) before launching it again.
const NOT_STARTED_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// `runs/<task_id>/gate.pgid`: the process group of a running gate.
const GATE_PGID_FILE: &str = "gate.pgid";

/// How often a driver waiting for a shared agent slot looks again.
const SLOT_POLL: Duration = Duration::from_millis(250);

/// How often a driver renews its lease while it waits (a third of its lifetime).
const LEASE_RENEW_EVERY: Duration = Duration::from_secs(lease::LEASE_TTL_SECS as u64 / 3);

/// The feature branch of an execution.
pub fn feature_branch(task_id: &str) -> String {
    format!("baton/{task_id}")
}

struct Driver {
    execs: Executions,
    data: DataDir,
    config: Config,
    repo: GitRepo,
    meta: RunMeta,
    roster: Roster,
    default_profile: String,
    cap: usize,
    env: Vec<(String, String)>,
    baton_exe: PathBuf,
    auto_approve: bool,
    inflight: JoinSet<Finished>,
    running: usize,
    slots: Vec<Arc<Semaphore>>,
    /// One group of permits (one per slot semaphore) per running attempt.
    permits: Vec<Vec<OwnedSemaphorePermit>>,
    /// Permits taken for the attempt being dispatched, handed to it at launch.
    reserved: Option<Vec<OwnedSemaphorePermit>>,
    /// Running attempts whose streamed usage is watched against the ceiling.
    live: Vec<LiveAttempt>,
    /// The price table (`baton.toml` over the built-in rows).
    prices: crate::pmo::pricing::PriceTable,
}

/// A running attempt, as the budget watch sees it.
struct LiveAttempt {
    step_id: String,
    run_dir: PathBuf,
    model: String,
    /// What its stdout has streamed so far, read incrementally.
    usage: crate::runtime::spend::UsageStream,
    /// Warned that its usage has no price (so it cannot be watched).
    unpriced: bool,
}

struct Finished {
    step_id: String,
    attempt: u32,
    run_dir: PathBuf,
    result: Result<ExitRecord, WaitError>,
}

/// Runs (or resumes) an execution headlessly; returns the exit code of the final action.
///
/// Errors: a bad plan, a missing repository, an execution that is complete or cancelled, or an
/// execution driven by another process ([`BadInput`], exit 2); internal failures (exit 1).
pub async fn run(data: DataDir, args: RunOptions) -> anyhow::Result<RunOutcome> {
    check_agent(&args)?;
    let config = data.config()?;
    // A bad ceiling in the environment is refused before anything is written.
    let env_ceiling = crate::runtime::spend::ceiling_from_env(|k| std::env::var(k).ok())?;
    let execs = match &args.execs {
        Some(execs) => execs.clone(),
        None => Executions::open(data.clone()).await?,
    };
    let plan = args.plan.clone();
    let task_id = match (&plan, &args.task_id) {
        (Some(p), _) => p.task_id.clone(),
        (None, Some(id)) => id.clone(),
        (None, None) => return Err(BadInput("execute run needs --plan FILE or --task-id ID".into()).into()),
    };
    let existing = execs.load(&task_id).await?;
    if let Some(state) = &existing {
        if state.status.is_final() {
            return Err(BadInput(format!(
                "execution {task_id} is {}; nothing to run (start a new plan with another task_id)",
                state.status
            ))
            .into());
        }
    }
    let (state, meta) = match existing {
        Some(state) => {
            if let Some(plan) = &plan {
                let stored = execs.original_plan(&task_id).await?;
                if stored.as_ref() != Some(plan) {
                    return Err(BadInput(format!(
                        "execution {task_id} already exists with a different plan: give the new plan another \
                         task_id, or resume this one with --task-id {task_id}"
                    ))
                    .into());
                }
            }
            let meta = if let Some(meta) = read_meta(&data, &task_id)? {
                if let Some(repo) = &args.repo {
                    let given = repo.canonicalize().unwrap_or_else(|_| repo.clone());
                    if given != meta.repo {
                        return Err(BadInput(format!(
                            "execution {task_id} works on {}, not {}",
                            meta.repo.display(),
                            repo.display()
                        ))
                        .into());
                    }
                }
                meta
            } else {
                // Started by `execute start` (an orchestrator); `run` takes it over on --repo.
                prepare_meta(&data, &task_id, &args).await?
            };
            errln!("resuming execution {task_id} ({})", state.status);
            (state, meta)
        }
        None => {
            let Some(plan) = plan else {
                return Err(BadInput(format!("no execution with task id {task_id}")).into());
            };
            let (state, meta) = create(&execs, &data, &config, plan, &args).await?;
            errln!("started execution {task_id} on branch {}", meta.branch);
            (state, meta)
        }
    };
    let repo = {
        let path = meta.repo.clone();
        blocking(move || GitRepo::open(&path)).await?.map_err(|e| BadInput(format!("repository of {task_id}: {e}")))?
    };
    let root = repo.root().to_path_buf();
    let roster = blocking(move || load_roster(&root)).await?.map_err(|e| BadInput(format!("{e:#}")))?;
    let mut cap = args.max_parallel.unwrap_or(config.runtime.max_parallel).max(1);
    if let Some(limit) =
        state.plan.resource_limits.as_ref().map(|l| l.max_concurrent_agents as usize).filter(|n| *n > 0)
    {
        cap = cap.min(limit);
    }
    let default_profile = args.agent.clone().unwrap_or_else(|| meta.profile.clone());
    let lease = lease::acquire_as_driver(execs.store(), &task_id).await?;
    let mut driver = Driver {
        execs,
        data,
        config,
        repo,
        meta,
        roster,
        default_profile,
        cap,
        env: agent_env(std::env::vars()),
        baton_exe: std::env::current_exe().context("locating the baton executable")?,
        auto_approve: args.auto_approve,
        inflight: JoinSet::new(),
        running: 0,
        slots: args.slots.clone(),
        permits: Vec::new(),
        reserved: None,
        live: Vec::new(),
        prices: crate::pmo::pricing::PriceTable::default(),
    };
    driver.prices = driver.config.price_table();
    let state = driver.settle_budget(state, args.budget.clone(), env_ceiling).await?;
    // Ctrl-C (or the stop signal) stops the driver at once: everything done so far is
    // journaled, and the detached agents keep running, to be re-adopted by the next `run`.
    let stopped = async {
        match args.stop.clone() {
            Some(mut stop) => {
                if stop.wait_for(|s| *s).await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
            None => {
                if tokio::signal::ctrl_c().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        }
    };
    let outcome = tokio::select! {
        outcome = driver.drive(state, &lease) => outcome,
        () = stopped => Err(Interrupted { task_id: task_id.clone() }.into()),
    };
    lease.release().await?;
    outcome
}

/// `execute run` was interrupted (Ctrl-C); the CLI exits 130.
#[derive(Debug, thiserror::Error)]
#[error(
    "interrupted: execution {task_id} is saved and its running agents keep going; \
     `baton execute run --task-id {task_id}` picks them up"
)]
pub struct Interrupted {
    /// The execution.
    pub task_id: String,
}

/// `--agent` names a profile. Errors ([`BadInput`]): which ones exist.
fn check_agent(args: &RunOptions) -> anyhow::Result<()> {
    match args.agent.as_deref().filter(|a| !PROFILES.contains(a)) {
        Some(agent) => Err(BadInput(format!("--agent {agent:?}: expected one of {}", PROFILES.join(", "))).into()),
        None => Ok(()),
    }
}

/// What a new execution's `run` would refuse before writing anything (for callers, such as
/// `baton goal`, that write a plan file first): an unknown `--agent`, a `--repo` that is no git
/// repository with a working tree. Errors ([`BadInput`]) name the flag, as [`run`]'s do.
pub async fn check_new_run(args: &RunOptions) -> anyhow::Result<()> {
    check_agent(args)?;
    let path = args.repo.clone().unwrap_or_else(|| PathBuf::from("."));
    let shown = path.display().to_string();
    blocking(move || GitRepo::open(&path)).await?.map_err(|e| BadInput(format!("--repo {shown}: {e}")))?;
    Ok(())
}

/// Opens `--repo`, resolves `--base`, creates the feature branch and writes the run's
/// `execution.json`. Errors ([`BadInput`]) name the flag at fault.
async fn prepare_meta(data: &DataDir, task_id: &str, args: &RunOptions) -> anyhow::Result<RunMeta> {
    let path = args.repo.clone().unwrap_or_else(|| PathBuf::from("."));
    let shown = path.display().to_string();
    let repo = blocking(move || GitRepo::open(&path)).await?.map_err(|e| BadInput(format!("--repo {shown}: {e}")))?;
    if args.base.is_none() {
        let r = repo.clone();
        if blocking(move || r.has_uncommitted_changes()).await?.unwrap_or(false) {
            errln!(
                "note: {} has uncommitted changes; the feature branch starts at its last commit, without them",
                repo.root().display()
            );
        }
    }
    let base = args.base.clone();
    let r = repo.clone();
    let base_sha = blocking(move || match &base {
        Some(rev) => r.resolve(rev).map_err(|e| format!("--base {rev}: {e}")),
        None => r.head_branch().map(|(_, sha)| sha).map_err(|_| {
            format!(
                "the repository at {} has no commits yet: commit something first, or pass --base",
                r.root().display()
            )
        }),
    })
    .await?
    .map_err(BadInput)?;
    let branch = feature_branch(task_id);
    let (r, b) = (repo.clone(), branch.clone());
    if let Some(tip) = blocking(move || r.branch_tip(&b)).await?? {
        if tip != base_sha {
            return Err(BadInput(format!(
                "branch {branch} already exists in {} at {} (not at the base {}): it is not this \
                 execution's; delete it (git branch -D {branch}) or give the plan another task_id",
                repo.root().display(),
                tip.get(..10).unwrap_or(&tip),
                base_sha.get(..10).unwrap_or(&base_sha)
            ))
            .into());
        }
    }
    let (r, b, s) = (repo.clone(), branch.clone(), base_sha.clone());
    blocking(move || r.ensure_branch(&b, &s)).await?.map_err(|e| BadInput(format!("creating branch {branch}: {e}")))?;
    let profile = args.agent.clone().unwrap_or_else(|| "claude".into());
    let meta = RunMeta { repo: repo.root().to_path_buf(), base_sha, branch, profile };
    let path = meta_path(data, task_id);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    write_atomic(&path, serde_json::to_string_pretty(&meta)?.as_bytes())?;
    Ok(meta)
}

/// Creates an execution of `plan` that a later [`run`] (by task id) drives: validates the plan
/// and its agents, creates the feature branch at `options.base` (default: the repository's
/// current branch tip) and journals the start. Nothing runs yet. Used by `baton serve` when a
/// spec is fired.
///
/// Errors ([`BadInput`]): an invalid plan, an unknown agent profile, a repository that is not
/// one, an unknown base, a feature branch that exists elsewhere, an existing task id.
pub async fn prepare(data: &DataDir, plan: MachinePlan, options: &RunOptions) -> anyhow::Result<ExecutionState> {
    let config = data.config()?;
    let execs = Executions::open(data.clone()).await?;
    if execs.load(&plan.task_id).await?.is_some() {
        return Err(BadInput(format!("execution {} already exists", plan.task_id)).into());
    }
    let (state, _) = create(&execs, data, &config, plan, options).await?;
    Ok(state)
}

async fn create(
    execs: &Executions,
    data: &DataDir,
    config: &Config,
    plan: MachinePlan,
    args: &RunOptions,
) -> anyhow::Result<(ExecutionState, RunMeta)> {
    // Validate the plan fully (team steps, …) and how each agent runs before anything is written.
    engine::start(plan.clone(), &clock::now_rfc3339()).map_err(|e| BadInput(e.to_string()))?;
    let profile = args.agent.clone().unwrap_or_else(|| "claude".into());
    for (_, step) in plan.steps().filter(|(_, s)| !s.is_automation()) {
        profile_of(config, &profile, &step.agent_name)?;
        for agent in engine::team::agents(step) {
            profile_of(config, &profile, agent)?;
        }
    }
    if engine::goal::condition(&plan).is_some() {
        profile_of(config, &profile, &engine::goal::evaluator_agent(&plan))?;
    }
    let meta = prepare_meta(data, &plan.task_id, args).await?;
    let state = execs.create(plan).await?;
    Ok((state, meta))
}

impl Driver {
    async fn record(&self, state: &mut ExecutionState, kind: EventKind, key: String) -> anyhow::Result<()> {
        let event = Event::new(kind).by("baton").with_key(key);
        self.execs.record(state, event).await?;
        Ok(())
    }

    async fn drive(&mut self, mut state: ExecutionState, lease: &lease::Lease) -> anyhow::Result<RunOutcome> {
        self.recover(&mut state).await?;
        let mut last_renew = clock::Stopwatch::start();
        loop {
            if last_renew.elapsed() > LEASE_RENEW_EVERY {
                lease.renew().await?;
                last_renew = clock::Stopwatch::start();
            }
            let action = engine::next_action(&state);
            match &action {
                Action::Checkpoint(c) => {
                    errln!("checkpoint before phase {}: {}", c.phase_id, c.reason);
                    let key = format!("checkpoint:{}:{}", state.task_id, state.checkpoint.count + 1);
                    self.record(&mut state, EventKind::CheckpointAcknowledged, key).await?;
                }
                Action::Dispatch(_) => {
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
                        if let Action::Dispatch(d) = a {
                            let done = self.dispatch(&mut state, &d).await;
                            self.reserved = None;
                            done?;
                            dispatched += 1;
                        }
                    }
                    if dispatched == 0 && self.running == 0 {
                        tokio::time::sleep(SLOT_POLL).await;
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
                            () = tokio::time::sleep(LEASE_RENEW_EVERY) => lease.renew().await?,
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
                    self.execs.record(&mut state, event).await?;
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
                    let key = format!("complete:{}", state.task_id);
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

    /// Free permits of the scarcest shared slot semaphore (unbounded without any).
    fn shared_slots_free(&self) -> usize {
        self.slots.iter().map(|s| s.available_permits()).min().unwrap_or(usize::MAX)
    }

    /// One permit of every shared slot semaphore, or none (all or nothing).
    fn reserve_slots(&self) -> Option<Vec<OwnedSemaphorePermit>> {
        self.slots.iter().map(|s| s.clone().try_acquire_owned().ok()).collect()
    }

    /// Counts a launched attempt with the permits reserved for it before its dispatch; a
    /// re-adopted attempt takes what is free (it runs anyway when its slots are taken).
    fn started_one(&mut self) {
        self.running += 1;
        let group = self
            .reserved
            .take()
            .unwrap_or_else(|| self.slots.iter().filter_map(|s| s.clone().try_acquire_owned().ok()).collect());
        self.permits.push(group);
    }

    /// Counts a finished attempt and frees its permits.
    fn finished_one(&mut self) {
        self.running = self.running.saturating_sub(1);
        self.permits.pop();
    }

    fn outcome(&self, state: &ExecutionState, action: Action) -> RunOutcome {
        RunOutcome {
            task_id: state.task_id.clone(),
            action,
            branch: self.meta.branch.clone(),
            repo: self.meta.repo.clone(),
        }
    }

    /// Resolves how an agent name runs: (profile, model, permission mode, tools, timeout).
    fn resolve_agent(
        &self,
        agent: &str,
        step_model: &str,
    ) -> anyhow::Result<(AgentProfile, AgentInvocationParts, u64)> {
        let cfg = self.config.agents.get(agent);
        let def = self.roster.get(agent);
        let profile = profile_of(&self.config, &self.default_profile, agent)?;
        let model = cfg
            .and_then(|c| c.model.clone())
            .or_else(|| def.and_then(|d| d.model.clone()))
            .or_else(|| Some(step_model.to_string()).filter(|m| !m.is_empty()));
        let parts = AgentInvocationParts {
            model,
            permission_mode: def.and_then(|d| d.permission_mode.clone()),
            allowed_tools: def.map(|d| d.tools.clone()).unwrap_or_default(),
        };
        let timeout = cfg.and_then(|c| c.timeout_secs).unwrap_or(self.config.runtime.default_timeout_secs);
        Ok((profile, parts, timeout))
    }

    /// Journals the dispatch, prepares a fresh worktree and run dir, and launches the shim.
    async fn dispatch(&mut self, state: &mut ExecutionState, d: &DispatchAction) -> anyhow::Result<()> {
        if d.command.is_empty() {
            // A misconfigured agent is refused before anything is journaled.
            self.resolve_agent(&d.agent_name, &d.agent_model)?;
        }
        let kind = EventKind::StepDispatched { step_id: d.step_id.clone(), agent_name: d.agent_name.clone() };
        let key = format!("dispatch:{}:{}:{}", state.task_id, d.step_id, d.attempt);
        self.record(state, kind, key).await?;
        errln!("dispatched {} to {} (attempt {})", d.step_id, d.agent_name, d.attempt);
        crash_point("after-dispatch");
        self.launch_or_fail(state, &d.step_id, d.attempt, 1).await
    }

    /// Launches an attempt; when it cannot even start (no worktree, an unwritable run dir, …)
    /// the step fails with the reason instead of stopping the driver, so a rerun cannot loop.
    async fn launch_or_fail(
        &mut self,
        state: &mut ExecutionState,
        step_id: &str,
        attempt: u32,
        launch: u32,
    ) -> anyhow::Result<()> {
        let Err(e) = self.launch(state, step_id, attempt, launch).await else { return Ok(()) };
        if e.chain().any(|c| c.is::<BadInput>() || c.is::<crate::engine::EngineError>()) {
            return Err(e);
        }
        let error = format!("the attempt could not be started: {e:#}");
        errln!("{step_id} failed: {error}");
        let agent_name = state.result(step_id).map(|r| r.agent_name.clone()).unwrap_or_default();
        let kind = EventKind::StepRecorded {
            step_id: step_id.to_string(),
            agent_name,
            status: RecordStatus::Failed,
            outcome: String::new(),
            files_changed: Vec::new(),
            commit_hash: String::new(),
            tokens: 0,
            cost_usd: 0.0,
            duration_seconds: 0.0,
            error,
            usage: Some(AttemptUsage { attempt, ..AttemptUsage::default() }),
        };
        let key = format!("record:{}:{step_id}:{attempt}", state.task_id);
        self.record(state, kind, key).await
    }

    /// Launches (launch number `launch` ≥ 1) attempt `attempt` of a dispatched step.
    async fn launch(&mut self, state: &ExecutionState, step_id: &str, attempt: u32, launch: u32) -> anyhow::Result<()> {
        let Some(step) = engine::team::work_step(state, step_id) else {
            anyhow::bail!("step {step_id} is not in the plan");
        };
        let step = step.as_ref();
        let run_dir = launch_dir(&self.data.run_dir(&state.task_id, step_id, attempt), launch);
        let worktree = self.data.attempt_worktree(&state.task_id, step_id, attempt);
        let tip = {
            let (repo, branch) = (self.repo.clone(), self.meta.branch.clone());
            blocking(move || repo.branch_tip(&branch))
                .await??
                .ok_or_else(|| anyhow::anyhow!("branch {} is gone", self.meta.branch))?
        };
        {
            // The attempt's ref names its starting point now and its commit after success; a
            // failed attempt keeps it (and its worktree) for inspection until `baton gc`.
            let (repo, wt, sha) = (self.repo.clone(), worktree.clone(), tip.clone());
            let attempt_ref = format!("refs/baton/{}/{step_id}/{attempt}", state.task_id);
            blocking(move || {
                repo.add_worktree(&wt, &sha)?;
                repo.set_ref(&attempt_ref, &sha)
            })
            .await?
            .with_context(|| format!("creating worktree for {step_id}"))?;
        }
        std::fs::create_dir_all(&run_dir).with_context(|| format!("creating {}", run_dir.display()))?;
        let prompt_path = run_dir.join("prompt.md");
        write_atomic(&prompt_path, engine::prompt::delegation_prompt(state, step).as_bytes())?;
        let automation = step.is_automation();
        let mut model = String::new();
        let (profile, argv, prompt_on_stdin, timeout) = if automation {
            let argv = vec!["sh".to_string(), "-c".to_string(), step.command.clone()];
            (
                AgentProfile::Command { argv_template: argv.clone() },
                argv,
                false,
                self.config.runtime.default_timeout_secs,
            )
        } else {
            let (profile, parts, timeout) = self.resolve_agent(&step.agent_name, &step.model)?;
            model = parts.model.clone().unwrap_or_else(|| step.model.clone());
            let inv = AgentInvocation {
                model: parts.model,
                permission_mode: parts.permission_mode,
                allowed_tools: parts.allowed_tools,
                baton_exe: self.baton_exe.clone(),
                prompt_path: prompt_path.clone(),
                cwd: worktree.clone(),
            };
            let cmd = build_argv(&profile, &inv);
            (profile, cmd.argv, cmd.prompt_on_stdin, timeout)
        };
        let timeout = if step.timeout_seconds > 0 { step.timeout_seconds } else { timeout };
        let mut env = self.env.clone();
        env.push(("BATON_TASK_ID".into(), state.task_id.clone()));
        env.push(("BATON_STEP_ID".into(), step_id.to_string()));
        let spec = AttemptSpec {
            argv,
            cwd: worktree.clone(),
            env,
            prompt_file: prompt_on_stdin.then(|| prompt_path.clone()),
            timeout_secs: timeout,
        };
        let meta = LaunchMeta {
            step_id: step_id.to_string(),
            attempt,
            agent_name: step.agent_name.clone(),
            profile,
            worktree,
            base_sha: tip,
            automation,
            model: model.clone(),
        };
        write_atomic(&run_dir.join(META_FILE), serde_json::to_string_pretty(&meta)?.as_bytes())?;
        shim::prepare_run_dir(&run_dir, &spec)?;
        let mut launched = shim::launch(&self.baton_exe, &run_dir)?;
        launched.locked().await?;
        crash_point("after-launch");
        let (step_id, dir) = (step_id.to_string(), run_dir.clone());
        if !automation {
            let usage = crate::runtime::spend::UsageStream::default();
            self.live.push(LiveAttempt {
                step_id: step_id.clone(),
                run_dir: dir.clone(),
                model,
                usage,
                unpriced: false,
            });
        }
        self.started_one();
        self.inflight.spawn(async move { Finished { step_id, attempt, run_dir: dir, result: launched.wait().await } });
        Ok(())
    }

    /// Waits for one in-flight attempt (renewing the lease meanwhile) and records its result.
    async fn wait_one(&mut self, state: &mut ExecutionState, lease: &lease::Lease) -> anyhow::Result<()> {
        let watch = state.budget.ceiling_usd.is_some() && !self.live.is_empty();
        let mut renew = clock::Stopwatch::start();
        let joined = loop {
            tokio::select! {
                joined = self.inflight.join_next() => break joined,
                () = tokio::time::sleep(if watch { BUDGET_POLL } else { LEASE_RENEW_EVERY }) => {
                    if watch {
                        self.watch_budget(state);
                    }
                    if !watch || renew.elapsed() > LEASE_RENEW_EVERY {
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

    async fn relaunch(&mut self, state: &mut ExecutionState, step_id: &str, attempt: u32) -> anyhow::Result<()> {
        let base = self.data.run_dir(&state.task_id, step_id, attempt);
        let next = latest_launch(&base).map_or(1, |(n, _)| n + 1);
        self.launch_or_fail(state, step_id, attempt, next).await
    }

    /// Turns a finished attempt into a result: commit, path check, consolidation, record.
    async fn harvest(
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
        let mut tokens = out.input_tokens + out.output_tokens;
        if let Some(c) = out.cost_usd.filter(|c| !c.is_finite() || !(0.0..=engine::MAX_STEP_COST_USD).contains(c)) {
            errln!("warning: {step_id} reported an invalid cost ({c}); priced from its tokens instead");
        }
        let model = if meta.model.is_empty() { step.model.clone() } else { meta.model.clone() };
        let (mut cost, mut estimated) = crate::runtime::spend::attempt_cost(&out, &model, &self.prices);
        let (mut input_tokens, mut output_tokens) = (out.input_tokens, out.output_tokens);
        let stopped = run_dir.join(BUDGET_STOP_FILE).exists();
        // What it streamed counts when it says more than its final report (killed before the
        // report, a command that only streams): the larger of the two is what it used.
        let (i, o, reported) = crate::runtime::spend::streamed_usage(&stdout);
        let priced = reported.filter(|m| self.prices.get(m).is_some()).unwrap_or_else(|| model.clone());
        if let Some(c) = self.prices.cost(&priced, i, o).map(|c| c.min(engine::MAX_STEP_COST_USD)).filter(|c| *c > cost)
        {
            (cost, estimated, input_tokens, output_tokens, tokens) = (c, true, i, o, i.saturating_add(o));
        }
        // Launches of this attempt that died with their driver and were run again spent too.
        let lost = self.lost_launch_spend(run_dir, &model);
        if lost > 0.0 {
            errln!("{step_id}: adding ${lost:.2} streamed by earlier launches of attempt {attempt} that died");
            cost = (cost + lost).min(engine::MAX_STEP_COST_USD);
            estimated = true;
        }
        let duration = exit.duration_ms as f64 / 1000.0;
        let mut files = Vec::new();
        let mut commit_hash = String::new();
        let mut error = String::new();
        let success = if stopped {
            error = format!("stopped at the budget ceiling: its usage (${cost:.2}) crossed the remaining budget");
            false
        } else if exit.timed_out {
            error = format!("timed out after {} s", exit.duration_ms / 1000);
            false
        } else if !out.success {
            error = out.error.clone().unwrap_or_else(|| exit.describe());
            false
        } else {
            match self
                .consolidate(state, &meta, &step, &out.outcome)
                .await
                .unwrap_or_else(|e| Err(format!("consolidation failed: {e:#}")))
            {
                Ok((sha, changed)) => {
                    commit_hash = sha;
                    files = changed;
                    true
                }
                Err(why) => {
                    error = why;
                    false
                }
            }
        };
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
            outcome: out.outcome.clone(),
            files_changed: files.clone(),
            commit_hash: commit_hash.clone(),
            tokens,
            cost_usd: cost,
            duration_seconds: duration,
            error: error.clone(),
            usage: Some(AttemptUsage { attempt, model, input_tokens, output_tokens, cost_estimated: estimated }),
        };
        let key = format!("record:{}:{step_id}:{attempt}", state.task_id);
        self.record(state, kind, key).await?;
        crash_point("after-record");
        if success {
            let short = commit_hash.get(..10).unwrap_or("no commit");
            let done = state.step_status(step_id).as_str();
            errln!("{step_id} {done} ({short}, {} files, ${cost:.2})", files.len());
            let (repo, wt) = (self.repo.clone(), meta.worktree.clone());
            let attempt_ref = format!("refs/baton/{}/{step_id}/{attempt}", state.task_id);
            let _ = blocking(move || {
                let _ = repo.remove_worktree(&wt);
                let _ = repo.delete_ref(&attempt_ref);
            })
            .await;
        } else if stopped {
            errln!("{step_id}: {error}; it runs again once the ceiling is raised");
        } else {
            errln!("{step_id} failed: {error} (worktree kept at {})", meta.worktree.display());
        }
        Ok(())
    }

    /// USD streamed by the earlier launches of the attempt whose newest launch is `run_dir`
    /// (launches that died with their driver and were run again), priced at `model`.
    fn lost_launch_spend(&self, run_dir: &Path, model: &str) -> f64 {
        let (base, n) = launch_of(run_dir);
        (1..n)
            .filter_map(|k| std::fs::read(launch_dir(&base, k).join(shim::STDOUT_FILE)).ok())
            .filter_map(|bytes| {
                let (i, o, reported) = crate::runtime::spend::streamed_usage(&String::from_utf8_lossy(&bytes));
                let priced = reported.filter(|m| self.prices.get(m).is_some()).unwrap_or_else(|| model.to_string());
                self.prices.cost(&priced, i, o)
            })
            .sum::<f64>()
            + 0.0
    }

    /// Commits the attempt's changes, checks its paths and cherry-picks it onto the feature
    /// branch. `Ok(Err(reason))` fails the step; `Ok(Ok((sha, files)))` is the branch commit.
    async fn consolidate(
        &self,
        state: &ExecutionState,
        meta: &LaunchMeta,
        step: &crate::model::plan::PlanStep,
        outcome: &str,
    ) -> anyhow::Result<Result<(String, Vec<String>), String>> {
        if engine::goal::is_evaluation(step) {
            // A goal evaluator only judges: nothing it writes is kept (engine::goal).
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
        let commit = blocking(move || repo.commit_worktree(&wt, &base, &identity, &message)).await??;
        let Some(commit) = commit else {
            return Ok(Ok((String::new(), Vec::new())));
        };
        let attempt_ref = format!("refs/baton/{task_id}/{}/{}", step.step_id, meta.attempt);
        let (repo, sha) = (self.repo.clone(), commit.sha.clone());
        blocking(move || repo.set_ref(&attempt_ref, &sha)).await??;
        let violations = git::check_paths(&commit.files_changed, &step.allowed_paths, &step.blocked_paths);
        if !violations.is_empty() {
            let list: Vec<String> = violations.iter().map(|v| v.to_string()).collect();
            return Ok(Err(format!("changed files outside the step's allowed paths: {}", list.join("; "))));
        }
        for _ in 0..3 {
            let (repo, branch, sha) = (self.repo.clone(), self.meta.branch.clone(), commit.sha.clone());
            match blocking(move || repo.cherry_pick_onto(&branch, &sha)).await? {
                Ok(PickOutcome::Applied { new_tip }) => return Ok(Ok((new_tip, commit.files_changed))),
                Ok(PickOutcome::AlreadyApplied) => {
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
                Err(e) => return Err(e).context("consolidating onto the feature branch"),
            }
        }
        anyhow::bail!("feature branch {} keeps moving under consolidation", self.meta.branch)
    }

    /// The feature-branch commit of an attempt whose patch is already there (a re-harvest).
    async fn find_on_branch(&self, task_id: &str, step_id: &str, attempt: u32) -> anyhow::Result<String> {
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

    /// Runs the gate in the integration worktree at the feature branch tip and records it.
    async fn gate(&mut self, state: &mut ExecutionState, g: &GateAction) -> anyhow::Result<()> {
        let command = g.gate_command.trim().to_string();
        let (passed, output, exit_code) = if command.is_empty() && g.additions.is_empty() {
            (true, format!("auto-approved ({}): no command specified", g.gate_type), None)
        } else {
            let path = self.data.integration_worktree(&state.task_id);
            let (repo, branch, wt) = (self.repo.clone(), self.meta.branch.clone(), path.clone());
            blocking(move || -> Result<(), git::GitError> {
                let tip = repo.branch_tip(&branch)?.ok_or(git::GitError::UnknownRevision { rev: branch })?;
                repo.remove_worktree(&wt)?;
                repo.add_worktree(&wt, &tip)
            })
            .await?
            .context("preparing the integration worktree")?;
            errln!("gate {} of phase {} (attempt {}): {command}", g.gate_type, g.phase_id, g.attempt);
            let marker = self.data.runs(&state.task_id).join(GATE_PGID_FILE);
            let timeout = self.config.runtime.gate_timeout_secs;
            // The plan's command through `sh -c` (plan authors write shell), then each agent
            // addition as its own argv, never through a shell; every one must pass.
            let mut runs: Vec<(String, Vec<String>)> = Vec::new();
            if !command.is_empty() {
                runs.push((command.clone(), vec!["sh".into(), "-c".into(), command.clone()]));
            }
            let files = phase_files(state, g.phase_id);
            for addition in &g.additions {
                match engine::gate_additions::split(addition) {
                    Some(words) if !words.is_empty() => {
                        let argv: Vec<String> = words
                            .into_iter()
                            .flat_map(|w| if w == "{files}" { files.clone() } else { vec![w] })
                            .collect();
                        let shown = argv.iter().map(|w| engine::gate_additions::shell_quote(w)).collect::<Vec<_>>();
                        runs.push((shown.join(" "), argv));
                    }
                    _ => {}
                }
            }
            let mut all = (true, String::new(), None);
            for (shown, argv) in &runs {
                if runs.len() > 1 {
                    errln!("gate {} of phase {}: {shown}", g.gate_type, g.phase_id);
                }
                let (ok, out, code) = run_gate_argv(argv, &path, &self.env, timeout, &marker).await?;
                if runs.len() > 1 {
                    all.1.push_str(&format!("$ {shown}\n"));
                }
                all.1.push_str(&out);
                if !all.1.ends_with('\n') {
                    all.1.push('\n');
                }
                all.2 = code;
                if !ok {
                    all.0 = false;
                    break;
                }
            }
            (all.0, tail(&all.1, 4000).to_string(), all.2)
        };
        let passed = passed && gate_type_passes(&g.gate_type, &output);
        errln!("gate of phase {} {}", g.phase_id, if passed { "passed" } else { "failed" });
        crash_point("before-gate-record");
        let kind = EventKind::GateRecorded { phase_id: g.phase_id, passed, output, command: Some(command), exit_code };
        let key = format!("gate:{}:{}:{}", state.task_id, g.phase_id, g.attempt);
        self.record(state, kind, key).await
    }

    /// Journals what the budget needs before anything runs: the forecast per step (once, from
    /// the spend ledger's history and the price table, with each agent's model as it will run)
    /// and the ceiling (`budget` when it differs from the execution's; else, for an execution
    /// that never had one, `BATON_RUN_BUDGET_USD`).
    async fn settle_budget(
        &mut self,
        mut state: ExecutionState,
        budget: Option<(f64, String)>,
        env_ceiling: Option<(f64, &'static str)>,
    ) -> anyhow::Result<ExecutionState> {
        if state.status.is_terminal() {
            return Ok(state);
        }
        // The ceiling first: it is kept even when forecasting fails.
        let wanted = match (budget, state.budget.ceiling_usd) {
            (Some(b), None) => Some(b),
            (Some((flag, _)), Some(current)) => {
                if (flag - current).abs() > 1e-9 {
                    errln!(
                        "note: keeping execution {}'s ceiling of ${current:.2} ({}); --max-spend-usd applies to a new \
                         execution, `baton execute budget --raise` changes this one",
                        state.task_id,
                        state.budget.source
                    );
                }
                None
            }
            (None, None) if state.budget.changes == 0 => env_ceiling.map(|(v, name)| (v, name.to_string())),
            (None, _) => None,
        };
        if let Some((ceiling, source)) = wanted {
            errln!("budget ceiling: ${ceiling:.2} ({source})");
            let kind = EventKind::BudgetSet { ceiling_usd: Some(ceiling), source };
            let key = format!("budget-set:{}:{}", state.task_id, state.budget.changes + 1);
            self.record(&mut state, kind, key).await?;
        }
        if !state.budget.forecast_recorded && state.plan.steps().any(|(_, s)| !s.is_automation()) {
            let mut plan = state.plan.clone();
            for phase in &mut plan.phases {
                for step in phase.steps.iter_mut().filter(|s| !s.is_automation()) {
                    if let Ok((_, parts, _)) = self.resolve_agent(&step.agent_name, &step.model) {
                        if let Some(m) = parts.model {
                            step.model = m;
                        }
                    }
                    self.resolve_member_models(&mut step.team);
                }
            }
            let history = crate::runtime::spend::history(self.execs.store()).await?;
            let forecast = crate::pmo::enrich::forecast(&plan, &history, &self.prices);
            let default_usd = forecast.steps.iter().map(|s| s.mid_usd).fold(0.0, f64::max);
            let default_usd = if default_usd > 0.0 { default_usd } else { self.prices.default_step_usd("sonnet") };
            let default_usd = default_usd.min(crate::engine::budget::MAX_CEILING_USD);
            errln!(
                "forecast: ${:.2} (${:.2}–${:.2}); {}",
                forecast.mid_usd,
                forecast.low_usd,
                forecast.high_usd,
                forecast.rule
            );
            let kind = EventKind::Forecasted { steps: forecast.by_step(), default_usd };
            let key = format!("forecast:{}", state.task_id);
            self.record(&mut state, kind, key).await?;
        }
        Ok(state)
    }

    /// Each team member's model as it will run (`baton.toml`, the roster, else the plan's),
    /// sub-teams included: the forecast prices members at what they use.
    fn resolve_member_models(&self, members: &mut [crate::model::plan::TeamMember]) {
        for m in members {
            if let Ok((_, parts, _)) = self.resolve_agent(&m.agent_name, &m.model) {
                if let Some(model) = parts.model {
                    m.model = model;
                }
            }
            self.resolve_member_models(&mut m.sub_team);
        }
    }

    /// Stops every running attempt whose streamed usage (tokens × its model's price) crosses
    /// what the ceiling leaves it: ceiling − spend − the other attempts' reservations. The
    /// marker file makes its harvest record `budget_stopped`.
    fn watch_budget(&mut self, state: &ExecutionState) {
        let Some(ceiling) = state.budget.ceiling_usd else { return };
        for live in &mut self.live {
            if live.run_dir.join(BUDGET_STOP_FILE).exists() {
                continue;
            }
            if live.usage.read_new(&live.run_dir.join(shim::STDOUT_FILE)).is_err() {
                continue;
            }
            let (i, o, reported) = live.usage.totals();
            let priced = reported.filter(|m| self.prices.get(m).is_some()).unwrap_or_else(|| live.model.clone());
            let Some(used) = self.prices.cost(&priced, i, o) else {
                if !live.unpriced && i + o > 0 {
                    live.unpriced = true;
                    errln!(
                        "warning: {}: model {priced} has no row in the price table ([prices.{priced}] in baton.toml): \
                         its streamed usage cannot be held to the ceiling",
                        live.step_id
                    );
                }
                continue;
            };
            let others = state.budget.reserved_usd() - state.budget.reserved.get(&live.step_id).copied().unwrap_or(0.0);
            let remaining = ceiling - state.counters.spend_usd - others;
            if used > remaining {
                errln!(
                    "{}: stopping it: its usage (${used:.2}) crossed the remaining budget (${remaining:.2} of the ${ceiling:.2} ceiling)",
                    live.step_id
                );
                let _ = write_atomic(&live.run_dir.join(BUDGET_STOP_FILE), format!("{used}\n").as_bytes());
                let _ = shim::kill_attempt(&live.run_dir);
            }
        }
    }

    /// Recovers every dispatched step of the current phase (see the module doc).
    async fn recover(&mut self, state: &mut ExecutionState) -> anyhow::Result<()> {
        stop_orphan_gate(&self.data.runs(&state.task_id).join(GATE_PGID_FILE));
        let Some(phase) = state.current() else { return Ok(()) };
        let dispatched: Vec<(String, u32)> = engine::team::dispatch_ids(phase)
            .iter()
            .filter_map(|id| state.result(id))
            .filter(|r| r.status == StepStatus::Dispatched)
            .map(|r| (r.step_id.clone(), r.attempt))
            .collect();
        for (step_id, attempt) in dispatched {
            let base = self.data.run_dir(&state.task_id, &step_id, attempt);
            let Some((n, dir)) = latest_launch(&base) else {
                errln!("recovering {step_id}: attempt {attempt} was journaled but never launched; launching it");
                self.launch_or_fail(state, &step_id, attempt, 1).await?;
                continue;
            };
            let mut found = shim::inspect(&dir)?;
            if matches!(found, AttemptState::NotStarted) {
                // A driver that died inside `launch` may have left a shim that has not taken its
                // lock yet: give it the time `launch` would have, before running the attempt
                // again in the same worktree.
                let waiting = crate::clock::Stopwatch::start();
                while matches!(found, AttemptState::NotStarted) && waiting.elapsed() < NOT_STARTED_GRACE {
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                    found = shim::inspect(&dir)?;
                }
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
                    errln!("recovering {step_id}: attempt {attempt} finished while baton was down; harvesting it");
                    self.harvest(state, &step_id, attempt, &dir, exit).await?;
                }
            }
        }
        Ok(())
    }
}

/// The parts of an agent invocation that come from configuration and the roster.
#[derive(Debug)]
struct AgentInvocationParts {
    model: Option<String>,
    permission_mode: Option<String>,
    allowed_tools: Vec<String>,
}

/// The profile an agent runs with: its `[agents.<name>]` entry in baton.toml, else `default`.
///
/// Errors ([`BadInput`]): an unknown profile, or `command` without a command template.
fn profile_of(config: &Config, default: &str, agent: &str) -> anyhow::Result<AgentProfile> {
    let cfg = config.agents.get(agent);
    let name = cfg.and_then(|c| c.profile.as_deref()).unwrap_or(default);
    Ok(match name {
        "claude" => AgentProfile::Claude,
        "codex" => AgentProfile::Codex,
        "demo" => AgentProfile::Demo,
        "command" => {
            let template = cfg.and_then(|c| c.command.clone()).filter(|t| !t.is_empty()).ok_or_else(|| {
                BadInput(format!(
                    "agent {agent}: profile `command` needs a non-empty `command = [...]` in [agents.{agent}] of baton.toml"
                ))
            })?;
            AgentProfile::Command { argv_template: template }
        }
        other => {
            return Err(BadInput(format!(
                "agent {agent}: unknown profile {other:?} (expected {})",
                PROFILES.join(", ")
            ))
            .into())
        }
    })
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or("").trim()
}

/// Lint gates also fail on error markers in their output (seed-spec §2.7); review gates and
/// unknown types are judged by the exit code alone.
fn gate_type_passes(gate_type: &str, output: &str) -> bool {
    if gate_type != "lint" {
        return true;
    }
    const MARKERS: &[&str] = &[": error:", ":E:", " E ", "[E", "Error:", "ERROR", "SyntaxError", "error:"];
    !output.lines().any(|l| MARKERS.iter().any(|m| l.contains(m)))
}

/// The files the steps of phase `phase_id` changed, sorted, each once.
fn phase_files(state: &ExecutionState, phase_id: i64) -> Vec<String> {
    let Some(phase) = state.plan.phase_index(phase_id).and_then(|i| state.plan.phases.get(i)) else {
        return Vec::new();
    };
    let mut files: Vec<String> = phase
        .steps
        .iter()
        .filter_map(|s| state.result(&s.step_id))
        .flat_map(|r| r.files_changed.iter().cloned())
        .collect();
    files.sort_unstable();
    files.dedup();
    files
}

/// Runs one gate command, `argv` (the plan's command as `sh -c …`, an agent addition as its
/// own words), in `cwd`, in its own process group, with the agent environment and a timeout.
/// Returns (exit 0, output tail, exit code).
async fn run_gate_argv(
    argv: &[String],
    cwd: &Path,
    env: &[(String, String)],
    timeout_secs: u64,
    marker: &Path,
) -> anyhow::Result<(bool, String, Option<i32>)> {
    let Some((program, args)) = argv.split_first() else {
        return Ok((false, "empty gate command".into(), None));
    };
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .current_dir(cwd)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .process_group(0);
    let child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => return Ok((false, format!("gate command could not start: {e}"), None)),
    };
    // The gate's process group, so a driver that restarts after a crash can stop a gate its
    // predecessor left running before it runs the gate again.
    if let Some(pid) = child.id() {
        write_atomic(marker, pid.to_string().as_bytes())?;
    }
    let result = tokio::time::timeout(Duration::from_secs(timeout_secs.max(1)), child.wait_with_output()).await;
    let _ = std::fs::remove_file(marker);
    match result {
        Ok(Ok(out)) => {
            let mut text = String::from_utf8_lossy(&out.stdout).to_string();
            let err = String::from_utf8_lossy(&out.stderr);
            if !err.trim().is_empty() {
                text.push_str(&err);
            }
            let code = out.status.code();
            Ok((out.status.success(), tail(&text, 4000).to_string(), code))
        }
        Ok(Err(e)) => Ok((false, format!("gate command failed: {e}"), None)),
        Err(_) => Ok((false, format!("gate timed out after {timeout_secs} s"), None)),
    }
}

/// Stops a gate a crashed driver left running (its process group is in the marker file).
fn stop_orphan_gate(marker: &Path) {
    let Ok(text) = std::fs::read_to_string(marker) else { return };
    if let Ok(pgid) = text.trim().parse::<i32>() {
        if pgid > 1 {
            let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), nix::sys::signal::Signal::SIGKILL);
            errln!("stopped the gate (process group {pgid}) a previous driver left running");
        }
    }
    let _ = std::fs::remove_file(marker);
}

/// The newest `limit` commits of the feature branch (newest first).
pub async fn branch_log(repo: &Path, branch: &str, limit: usize) -> anyhow::Result<Vec<git::CommitInfo>> {
    let (path, b) = (repo.to_path_buf(), branch.to_string());
    let log = blocking(move || GitRepo::open(&path).and_then(|r| r.log(&b, limit))).await??;
    Ok(log)
}
