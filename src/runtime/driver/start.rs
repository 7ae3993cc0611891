//! Starting a run: [`run`] checks its flags, creates the execution (or resumes it, checking that
//! the plan, repository and profile are its own), takes the lease, settles the budget and
//! hands over to the run loop until the run stops; [`prepare`] creates an execution a later
//! [`run`] drives, and [`check_new_run`] refuses what [`run`] would before anything is written.
//! Creating writes the feature branch and `execution.json`, and records the branch and its
//! base in the database for every replica; nothing runs an agent here.

use std::path::PathBuf;

use anyhow::Context as _;
use tokio::task::JoinSet;

use crate::clock;
use crate::engine;
use crate::git::GitRepo;
use crate::model::action::Action;
use crate::model::plan::MachinePlan;
use crate::model::state::ExecutionState;
use crate::runtime::agent::profile::agent_env;
use crate::runtime::agent::roster::{load_roster, Roster};
use crate::runtime::config::{Config, DataDir};
use crate::runtime::executions::Executions;
use crate::runtime::runs::{read_meta, RunMeta};
use crate::runtime::BadInput;
use crate::runtime::{blocking, lease};
use crate::store::ExecutionBase;

use super::agents::{check_step_servers, profile_of};
use super::options::{Interrupted, Parked, RunOptions, RunOutcome, PROFILES};
use super::{feature_branch, Driver};

/// The worktree environment patterns of `baton.toml` for the driver's repository: `[worktree]`
/// and `[projects.<name>]` of every project registered on it.
async fn env_include(driver: &Driver) -> anyhow::Result<Vec<String>> {
    if driver.config.projects.is_empty() {
        return Ok(driver.config.worktree_include([]));
    }
    let root = driver.repo.root();
    let projects = driver.execs.store().list_projects().await?;
    let names = projects
        .iter()
        .filter(|p| {
            let on = |path: &std::path::Path| path.canonicalize().is_ok_and(|c| c == root);
            // A project with a remote works in this replica's clone of it.
            on(std::path::Path::new(&p.repo_path)) || (!p.repo_url.is_empty() && on(&driver.data.repo_clone(&p.name)))
        })
        .map(|p| p.name.as_str());
    Ok(driver.config.worktree_include(names))
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
    // On PostgreSQL, a project with a remote: this replica works in its own clone of it.
    let mut remote = crate::runtime::remote::remote_project(&execs, &task_id).await?;
    let (state, meta) = match existing {
        Some(state) => {
            if let Some(plan) = &plan {
                if !execs.started_with(&task_id, plan).await? {
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
            } else if let Some(project) = &remote {
                // Driven by another replica until now: take it over from the project's remote.
                crate::runtime::remote::adopt(&data, execs.store(), project, &task_id).await?
            } else {
                // Started by `execute start` (an orchestrator), or driven by another data
                // directory until now: `run` takes it over on --repo, from the recorded base.
                let recorded = execs.store().recorded_base(&task_id).await?;
                let meta = prepare_meta(&data, &task_id, &args, recorded).await?;
                record_base(&execs, &task_id, &meta).await?;
                meta
            };
            // A fired execution is created before its first drive: nothing dispatched yet is a start.
            let verb = if state.step_results.is_empty() { "starting" } else { "resuming" };
            errln!("{verb} execution {task_id} ({})", state.status);
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
    if let Some(project) = remote.clone() {
        let clone = crate::runtime::remote::replica_clone(&data, &project).await?;
        if meta.repo == clone.root() {
            crate::runtime::remote::sync_branch(&clone, &meta.branch).await?;
        } else {
            errln!(
                "note: execution {task_id} works on {}, not on this replica's clone of {}: its branch is not pushed",
                meta.repo.display(),
                project.repo_url
            );
            remote = None;
        }
    }
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
    let lease = lease::acquire_as_driver(execs.store(), &task_id, data.root()).await?;
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
        clock: crate::clock::Clock::system(),
        wake: args.wake.clone(),
        lease: Some(lease.holder().clone()),
        remote: remote.is_some(),

        env_include: Vec::new(),
    };
    driver.prices = driver.config.price_table();
    driver.env_include = env_include(&driver).await?;
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
    // A run picks a parked execution up again: the park's reason is cleared (it parks again,
    // with a fresh reason, if the feature branch is still checked out somewhere).
    if let Some(reason) = driver.execs.store().park_reason(&task_id).await? {
        errln!("execution {task_id} was parked ({reason}); trying again");
        driver.execs.store().set_paused(&task_id, false).await?;
    }
    let outcome = tokio::select! {
        outcome = driver.drive(state, &lease) => outcome,
        () = stopped => Err(Interrupted { task_id: task_id.clone() }.into()),
    };
    if let Some(e) = outcome.as_ref().err().filter(|e| crate::runtime::executions::is_fenced(e)) {
        fenced_out(&driver, &task_id, &lease, e).await;
        return outcome;
    }
    if let Some(p) = outcome.as_ref().err().and_then(|e| e.downcast_ref::<Parked>()) {
        driver.execs.store().park(&task_id, &p.reason).await?;
        errln!("execution {task_id} parked: {}", p.reason);
    }
    // Waiting for a human: no replica claims it back until the decision is journaled (with
    // several replicas, each would otherwise take it in turn, only to find the same wait).
    let waits = outcome.as_ref().is_ok_and(|o| {
        matches!(o.action, Action::Approval(_) | Action::Feedback(_) | Action::Interact(_) | Action::Budget(_))
    });
    if waits {
        lease.release_waiting().await?;
    } else {
        lease.release().await?;
    }
    outcome
}

/// What a run does when it lost its lease (an append fenced out, a renewal refused): another
/// holder drives the execution now. It writes nothing more and releases nothing (the lease is
/// not its own); its agents are stopped unless the new holder re-adopts them (the same host and
/// data directory, see [`lease::adopts_agents_of`]).
async fn fenced_out(driver: &Driver, task_id: &str, lease: &lease::Lease, error: &anyhow::Error) {
    let current = driver.execs.store().lease(task_id).await.ok().flatten();
    tracing::warn!(task.id = %task_id, lease.epoch = lease.holder().epoch, "lost the lease, stopping: {error:#}");
    if lease::adopts_agents_of(current.as_ref(), lease.holder()) {
        errln!(
            "execution {task_id}: lost the lease to {}; its agents are re-adopted there",
            lease_name(current.as_ref())
        );
        return;
    }
    let (data, id) = (driver.data.clone(), task_id.to_string());
    let stopped = blocking(move || crate::runtime::runs::stop_running_attempts(&data, &id)).await.unwrap_or(0);
    errln!(
        "execution {task_id}: lost the lease to {}; stopped {stopped} agent(s) of this replica",
        lease_name(current.as_ref())
    );
}

fn lease_name(lease: Option<&crate::store::LeaseInfo>) -> String {
    lease.map_or_else(|| "nobody".to_string(), |l| format!("{} (epoch {})", l.holder, l.epoch))
}

/// Records the results of the attempts of `task_id` that finished while nobody drove it (it was
/// paused, or its driver stopped), and does nothing else: no dispatch, no relaunch, no gate.
/// A cancel calls it first, so an agent's finished work and what it cost are journaled before
/// the execution ends instead of being lost with it. Returns how many results it recorded.
///
/// Does nothing (returns 0) for an execution no driver ever ran (an orchestrator's, without
/// `execution.json`), a final one, or one whose lease another process holds (that driver is
/// running and harvests its own attempts). Errors: an unreadable journal or repository.
pub async fn harvest_finished(execs: &Executions, task_id: &str) -> anyhow::Result<usize> {
    let data = execs.data().clone();
    let Some(meta) = read_meta(&data, task_id)? else { return Ok(0) };
    let Some(mut state) = execs.load(task_id).await? else { return Ok(0) };
    if state.status.is_final() {
        return Ok(0);
    }
    let Ok(lease) = lease::acquire_briefly(execs.store(), task_id).await else { return Ok(0) };
    let result = async {
        let config = data.config()?;
        let repo = {
            let path = meta.repo.clone();
            blocking(move || GitRepo::open(&path))
                .await?
                .map_err(|e| BadInput(format!("repository of {task_id}: {e}")))?
        };
        let mut driver = Driver {
            execs: execs.clone(),
            data: data.clone(),
            default_profile: meta.profile.clone(),
            prices: config.price_table(),
            config,
            repo,
            meta,
            roster: Roster::default(),
            cap: 1,
            env: Vec::new(),
            baton_exe: std::env::current_exe().context("locating the baton executable")?,
            auto_approve: false,
            inflight: JoinSet::new(),
            running: 0,
            slots: Vec::new(),
            permits: Vec::new(),
            reserved: None,
            live: Vec::new(),
            clock: crate::clock::Clock::system(),
            wake: None,
            lease: Some(lease.holder().clone()),
            remote: crate::runtime::remote::remote_project(execs, task_id).await?.is_some(),

            // Harvesting launches nothing; commits keep out what each launch's `baton.json` lists.
            env_include: Vec::new(),
        };
        driver.harvest_finished(&mut state).await
    }
    .await;
    lease.release().await?;
    result
}

/// The plan check of `ci` and `review` gates without a command (issue 19.2): a `ci` gate needs
/// the project's forge (`forge_repo`) to read checks from; a configured reviewer agent must
/// have a profile that runs (the reviewer of `project`: its `review_agent`, else `[review]
/// agent`).
///
/// Errors ([`BadInput`]) name the phase and its gate: `no forge configured`; an unknown
/// reviewer agent as [`profile_of`] names it.
fn check_external_gates(
    config: &Config,
    plan: &MachinePlan,
    profile: &str,
    forge_repo: Option<&str>,
    project: Option<&str>,
) -> anyhow::Result<()> {
    let has_forge = forge_repo.is_some_and(|f| !f.trim().is_empty());
    for phase in &plan.phases {
        let Some(gate) = phase.gate.as_ref().filter(|g| g.command.trim().is_empty()) else { continue };
        match engine::gates::external_check(&gate.gate_type) {
            Some(crate::model::action::GateCheck::ForgeCi) if !has_forge => {
                return Err(BadInput(format!(
                    "phase {} ({}): gate 'ci' has no command, so it reads the forge's checks of the pushed \
                     branch, but no forge configured: set the project's forge_repo, or give the gate a command",
                    phase.phase_id, phase.name
                ))
                .into());
            }
            Some(crate::model::action::GateCheck::Reviewer) => {
                if let Some(agent) = config.reviewer_for(project) {
                    profile_of(config, profile, &agent)?;
                }
            }
            _ => {}
        }
    }
    Ok(())
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

/// Records where the feature branch of `task_id` started ([`crate::store::Store::record_base`]),
/// so that every replica reads it; a base recorded before stays.
async fn record_base(execs: &Executions, task_id: &str, meta: &RunMeta) -> anyhow::Result<()> {
    execs
        .store()
        .record_base(task_id, &meta.branch, &meta.base_sha, &clock::now_rfc3339())
        .await
        .context("recording the execution's base")?;
    Ok(())
}

/// Opens `--repo`, resolves `--base` (or takes the `recorded` base of an execution that has
/// one), creates the feature branch and writes the run's `execution.json`. Errors
/// ([`BadInput`]) name the flag at fault.
async fn prepare_meta(
    data: &DataDir,
    task_id: &str,
    args: &RunOptions,
    recorded: Option<ExecutionBase>,
) -> anyhow::Result<RunMeta> {
    let path = args.repo.clone().unwrap_or_else(|| PathBuf::from("."));
    let shown = path.display().to_string();
    let repo = blocking(move || GitRepo::open(&path)).await?.map_err(|e| BadInput(format!("--repo {shown}: {e}")))?;
    if args.base.is_none() && recorded.is_none() {
        let r = repo.clone();
        if blocking(move || r.has_uncommitted_changes()).await?.unwrap_or(false) {
            errln!(
                "note: {} has uncommitted changes; the feature branch starts at its last commit, without them",
                repo.root().display()
            );
        }
    }
    let base = args.base.clone();
    let known = recorded.as_ref().map(|r| r.base_sha.clone());
    let r = repo.clone();
    let base_sha = blocking(move || match (&known, &base) {
        (Some(sha), _) => r.resolve(sha).map_err(|e| format!("the execution's recorded base {sha}: {e}")),
        (None, Some(rev)) => r.resolve(rev).map_err(|e| format!("--base {rev}: {e}")),
        (None, None) => r.head_branch().map(|(_, sha)| sha).map_err(|_| {
            format!(
                "the repository at {} has no commits yet: commit something first, or pass --base",
                r.root().display()
            )
        }),
    })
    .await?
    .map_err(BadInput)?;
    let recorded_base = recorded.is_some();
    let branch = recorded.map_or_else(|| feature_branch(task_id), |r| r.branch);
    let (r, b) = (repo.clone(), branch.clone());
    if let Some(tip) = blocking(move || r.branch_tip(&b)).await?? {
        // The execution's own branch, when its base is recorded, is wherever its steps left it.
        if tip != base_sha && !recorded_base {
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
    crate::runtime::runs::write_meta(data, task_id, &meta)?;
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
    // Validate the plan fully (team steps, the intake rules a new plan meets, …) and how each
    // agent runs before anything is written: a plan `Executions::create` refused after the
    // feature branch and the run directory were made left both behind for good (found by a
    // tester, firing a spec whose gate command held a NUL).
    engine::validate_new(&plan).map_err(|problems| BadInput(engine::EngineError::InvalidPlan(problems).to_string()))?;
    engine::start(plan.clone(), &clock::now_rfc3339()).map_err(|e| BadInput(e.to_string()))?;
    let profile = args.agent.clone().unwrap_or_else(|| "claude".into());
    for (_, step) in plan.steps().filter(|(_, s)| !s.is_automation()) {
        profile_of(config, &profile, &step.agent_name)?;
        for agent in engine::team::agents(step) {
            profile_of(config, &profile, agent)?;
        }
        check_step_servers(config, &profile, step)?;
    }
    if engine::goal::condition(&plan).is_some() {
        profile_of(config, &profile, &engine::goal::evaluator_agent(&plan))?;
    }
    check_external_gates(config, &plan, &profile, args.forge_repo.as_deref(), args.project.as_deref())?;
    let meta = prepare_meta(data, &plan.task_id, args, None).await?;
    let state = execs.create(plan).await?;
    // Every replica reads the base from the database, not from this data directory alone.
    record_base(execs, &state.task_id, &meta).await?;
    Ok((state, meta))
}
