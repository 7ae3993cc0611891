//! The worker pool of `baton serve`: one in-process driver per fired execution.
//!
//! Each driver is [`driver::run`] by task id, in a loop: it holds the execution's lease while it
//! runs, and when the engine asks a human (APPROVAL, FEEDBACK, INTERACT) or the execution
//! failed, it returns, and the loop parks without the lease until it is woken ([`Pool::wake`],
//! called by the server after it records a decision) or the journal's head moves (a decision
//! recorded by another process, such as the CLI, noticed within [`JOURNAL_POLL`]). Attempts of
//! every driver share the global agent cap and their project's cap ([`driver::RunOptions::slots`]).
//! On shutdown every driver stops at once, as after a crash: agents keep running detached and
//! are re-adopted by [`Pool::recover`] at the next start. This module never touches HTTP.
//!
//! Several replicas (issue 17.2): [`Pool::claim`], run every third of a lease lifetime by
//! [`Pool::claim_loop`], leases the runnable executions that nobody holds (fired on an API-only
//! replica, left by a replica that died or was paused past its lease) through
//! [`Store::claim_leases`](crate::store::Store::claim_leases) and drives them; an execution
//! first driven by another replica gets its `execution.json` here, from its project and the
//! base recorded when it was created (`adopt`). A driver that lost its lease (fenced out, or the lease held by another holder)
//! ends its loop instead of retrying: the execution is another replica's now.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{watch, Notify, Semaphore};
use tokio::task::JoinHandle;

use crate::model::action::Action;
use crate::model::state::ExecutionStatus;
use crate::runtime::config::DataDir;
use crate::runtime::driver::{self, Interrupted, RunOptions};
use crate::runtime::executions::Executions;
use crate::runtime::runs;

/// How often a parked driver looks at its execution's journal head.
pub const JOURNAL_POLL: Duration = Duration::from_secs(1);

/// How long a driver that failed (not the execution: the driver, e.g. a missing repository)
/// waits before it tries again, unless woken.
pub const RETRY_AFTER_ERROR: Duration = Duration::from_secs(30);

/// Default global agent cap of `baton serve`.
pub const DEFAULT_MAX_AGENTS: usize = 3;

/// What a driver is doing, for `/readyz`, `/metrics` and the execution page.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DriverState {
    /// Driving: dispatching, waiting for agents or running a gate.
    Running,
    /// Waiting for a human decision or an operator event (without the lease).
    Parked,
    /// The last run failed with this error; it tries again later.
    Errored(String),
}

#[derive(Debug)]
struct Handle {
    wake: Arc<Notify>,
    stop: watch::Sender<bool>,
    state: watch::Receiver<DriverState>,
    join: Option<JoinHandle<()>>,
}

#[derive(Debug)]
struct Inner {
    data: DataDir,
    execs: Executions,
    global: Arc<Semaphore>,
    project_slots: Mutex<HashMap<String, Arc<Semaphore>>>,
    drivers: Mutex<HashMap<String, Handle>>,
    closed: watch::Sender<bool>,
    /// This process as a driver (`<host>:<pid>:run`, with its data directory).
    holder: crate::store::LeaseInfo,
    /// False on an API-only replica (`baton serve --role api`): nothing is driven here.
    drives: std::sync::atomic::AtomicBool,
}

/// The pool; cheap to clone (one shared inner).
#[derive(Debug, Clone)]
pub struct Pool {
    inner: Arc<Inner>,
}

impl Pool {
    /// A pool over `execs` whose attempts never exceed `max_agents` at once (at least 1).
    pub fn new(execs: Executions, max_agents: usize) -> Pool {
        let (closed, _) = watch::channel(false);
        let execs_root = &execs.data().root().to_path_buf();
        Pool {
            inner: Arc::new(Inner {
                data: execs.data().clone(),
                execs,
                global: Arc::new(Semaphore::new(max_agents.max(1))),
                project_slots: Mutex::default(),
                drivers: Mutex::default(),
                closed,
                holder: crate::runtime::lease::driver_holder(execs_root),
                drives: std::sync::atomic::AtomicBool::new(true),
            }),
        }
    }

    /// The execution service the pool drives with.
    pub fn execs(&self) -> &Executions {
        &self.inner.execs
    }

    /// Agent slots free under the global cap.
    pub fn free_agent_slots(&self) -> usize {
        self.inner.global.available_permits()
    }

    /// Whether the pool still accepts work (false once [`Pool::shutdown`] began).
    pub fn is_open(&self) -> bool {
        !*self.inner.closed.borrow()
    }

    /// Whether this pool drives executions (false: `baton serve --role api`; a fired execution or
    /// a decision is picked up by a worker replica's claim loop).
    pub fn drives(&self) -> bool {
        self.inner.drives.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Turns driving on or off (set once at start by `baton serve --role`).
    pub fn set_drives(&self, on: bool) {
        self.inner.drives.store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Each driven execution and what its driver is doing.
    pub fn drivers(&self) -> Vec<(String, DriverState)> {
        let map = self.inner.drivers.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out: Vec<_> = map.iter().map(|(k, h)| (k.clone(), h.state.borrow().clone())).collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// What the driver of `task_id` is doing; `None` when no driver runs it.
    pub fn driver_state(&self, task_id: &str) -> Option<DriverState> {
        let map = self.inner.drivers.lock().unwrap_or_else(PoisonError::into_inner);
        map.get(task_id).map(|h| h.state.borrow().clone())
    }

    /// Registers (or updates) a project's agent cap; 0 removes it.
    pub fn set_project_cap(&self, project: &str, max_agents: usize) {
        let mut map = self.inner.project_slots.lock().unwrap_or_else(PoisonError::into_inner);
        if max_agents == 0 {
            map.remove(project);
        } else {
            map.insert(project.to_string(), Arc::new(Semaphore::new(max_agents)));
        }
    }

    /// Starts driving `task_id` (of `project`, whose cap applies), or wakes its driver when it
    /// has one. Does nothing after shutdown began.
    pub fn drive(&self, task_id: &str, project: Option<&str>) {
        if !self.is_open() || !self.drives() {
            return;
        }
        let mut map = self.inner.drivers.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(h) = map.get(task_id) {
            h.wake.notify_one();
            return;
        }
        let mut slots = vec![self.inner.global.clone()];
        if let Some(p) = project {
            let caps = self.inner.project_slots.lock().unwrap_or_else(PoisonError::into_inner);
            slots.extend(caps.get(p).cloned());
        }
        let wake = Arc::new(Notify::new());
        let (stop, stop_rx) = watch::channel(false);
        let (state_tx, state) = watch::channel(DriverState::Running);
        let ctx = DriverLoop {
            pool: self.clone(),
            task_id: task_id.to_string(),
            slots,
            wake: wake.clone(),
            stop: stop_rx,
            state: state_tx,
        };
        let join = tokio::spawn(ctx.run());
        map.insert(task_id.to_string(), Handle { wake, stop, state, join: Some(join) });
    }

    /// Wakes the driver of `task_id` if it is parked (after a decision was recorded).
    pub fn wake(&self, task_id: &str) {
        let map = self.inner.drivers.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(h) = map.get(task_id) {
            h.wake.notify_one();
        }
    }

    /// Stops the driver of `task_id` and waits (up to 15 s) until it released the lease, so the
    /// caller can take it (cancel, pause). Running agents keep running. True when a driver was
    /// stopped.
    pub async fn halt(&self, task_id: &str) -> bool {
        let handle = {
            let mut map = self.inner.drivers.lock().unwrap_or_else(PoisonError::into_inner);
            map.remove(task_id)
        };
        let Some(mut h) = handle else { return false };
        let _ = h.stop.send(true);
        if let Some(join) = h.join.take() {
            if tokio::time::timeout(Duration::from_secs(15), join).await.is_err() {
                tracing::warn!(task.id = %task_id, "driver did not stop within 15 s");
            }
        }
        true
    }

    /// Drives every execution that a driver of this data dir was driving (it has a run
    /// directory) and that is neither final nor paused; returns how many.
    ///
    /// Errors: the database cannot be read.
    pub async fn recover(&self) -> anyhow::Result<usize> {
        if !self.is_open() || !self.drives() {
            return Ok(0);
        }
        let store = self.inner.execs.store();
        let mut n = 0;
        for row in store.list_executions().await? {
            let status = row.summary.status.as_str();
            if matches!(status, "complete" | "cancelled") {
                continue;
            }
            if !runs::meta_path(&self.inner.data, &row.task_id).exists() || store.is_paused(&row.task_id).await? {
                continue;
            }
            let project = store.spec_of_execution(&row.task_id).await?.map(|s| s.project);
            self.drive(&row.task_id, project.as_deref());
            n += 1;
        }
        Ok(n)
    }

    /// Leases up to as many runnable executions as this pool has free agent slots (at least one),
    /// among those nobody holds (see [`Store::claim_leases`](crate::store::Store::claim_leases)),
    /// and drives them. Returns the task ids it claimed. Does nothing once shutdown began.
    ///
    /// Errors: the database.
    pub async fn claim(&self) -> anyhow::Result<Vec<String>> {
        if !self.is_open() || !self.drives() {
            return Ok(Vec::new());
        }
        let exclude: Vec<String> = self.drivers().into_iter().map(|(task_id, _)| task_id).collect();
        let limit = self.free_agent_slots().max(1);
        let store = self.inner.execs.store();
        let claimed = store
            .claim_leases(
                &self.inner.holder,
                &exclude,
                &crate::clock::now_rfc3339(),
                crate::runtime::lease::ttl_secs(),
                limit,
            )
            .await?;
        let mut out = Vec::with_capacity(claimed.len());
        for (task_id, epoch) in claimed {
            tracing::info!(task.id = %task_id, lease.epoch = epoch, "claimed execution {task_id} (epoch {epoch})");
            let project = store.spec_of_execution(&task_id).await?.map(|s| s.project);
            self.drive(&task_id, project.as_deref());
            out.push(task_id);
        }
        Ok(out)
    }

    /// Runs [`Pool::claim`] every third of a lease lifetime until shutdown, so an execution
    /// whose replica died or was paused is taken over within about two lease lifetimes.
    pub async fn claim_loop(self) {
        let mut closed = self.inner.closed.subscribe();
        loop {
            tokio::select! {
                _ = closed.changed() => {}
                () = tokio::time::sleep(crate::runtime::lease::renew_every()) => {}
            }
            if !self.is_open() {
                return;
            }
            if let Err(e) = self.claim().await {
                tracing::warn!("claiming executions: {e:#}");
            }
        }
    }

    /// Stops every driver (they stop at once; agents keep running detached) and waits up to
    /// `grace` for them to release their leases. No driver starts afterwards.
    pub async fn shutdown(&self, grace: Duration) {
        // `send_replace`: `send` fails, and stores nothing, while no receiver exists (none does).
        self.inner.closed.send_replace(true);
        let handles: Vec<Handle> = {
            let mut map = self.inner.drivers.lock().unwrap_or_else(PoisonError::into_inner);
            map.drain().map(|(_, h)| h).collect()
        };
        let mut joins = Vec::new();
        for mut h in handles {
            let _ = h.stop.send(true);
            joins.extend(h.join.take());
        }
        let all = join_all(joins);
        if tokio::time::timeout(grace, all).await.is_err() {
            tracing::warn!("some drivers did not stop within {grace:?}");
        }
    }

    fn forget(&self, task_id: &str, wake: &Arc<Notify>) {
        let mut map = self.inner.drivers.lock().unwrap_or_else(PoisonError::into_inner);
        // Only this loop's own entry (a halt may have removed it, and a new drive replaced it).
        if map.get(task_id).is_some_and(|h| Arc::ptr_eq(&h.wake, wake)) {
            map.remove(task_id);
        }
    }
}

/// Gives this data directory the `execution.json` of an execution another replica started
/// (a takeover): the repository and agent profile come from the project of its spec, the
/// feature branch and its base are the ones recorded when the execution was created
/// ([`Store::recorded_base`](crate::store::Store::recorded_base); an execution older than that
/// record gets `baton/<task_id>` and the default branch's tip). Nothing to do when it has one,
/// or when the project has a remote on PostgreSQL (`repo_url`): then the driver takes the
/// execution over from the remote, in this replica's own clone, with the steps already pushed
/// ([`crate::runtime::remote::adopt`]), which a local `repo_path` would not have.
///
/// Errors: no spec or project for the execution, or the project's repository cannot be opened.
async fn adopt(execs: &Executions, task_id: &str) -> anyhow::Result<()> {
    let data = execs.data();
    if runs::meta_path(data, task_id).exists()
        || crate::runtime::remote::remote_project(execs, task_id).await?.is_some()
    {
        return Ok(());
    }
    let store = execs.store();
    let spec = store
        .spec_of_execution(task_id)
        .await?
        .ok_or_else(|| anyhow::anyhow!("execution {task_id} has no execution.json here and no spec to take it from"))?;
    let project = store
        .project(&spec.project)
        .await?
        .ok_or_else(|| anyhow::anyhow!("execution {task_id}: project {} is gone", spec.project))?;
    let recorded = store.recorded_base(task_id).await?;
    let (path, default) = (std::path::PathBuf::from(&project.repo_path), project.default_branch.clone());
    let known = recorded.as_ref().map(|r| r.base_sha.clone());
    let (root, base_sha) = crate::runtime::blocking(move || {
        let repo = crate::git::GitRepo::open(&path)?;
        let sha = match known {
            Some(sha) => sha,
            None => repo.resolve(&default)?,
        };
        Ok::<_, crate::git::GitError>((repo.root().to_path_buf(), sha))
    })
    .await??;
    let meta = runs::RunMeta {
        repo: root,
        base_sha,
        branch: recorded.map_or_else(|| driver::feature_branch(task_id), |r| r.branch),
        profile: project.agent_profile.clone(),
    };
    crate::runtime::runs::write_meta(data, task_id, &meta)?;
    tracing::info!(task.id = %task_id, "took over execution {task_id} started by another replica");
    Ok(())
}

async fn join_all(joins: Vec<JoinHandle<()>>) {
    for j in joins {
        let _ = j.await;
    }
}

struct DriverLoop {
    pool: Pool,
    task_id: String,
    slots: Vec<Arc<Semaphore>>,
    wake: Arc<Notify>,
    stop: watch::Receiver<bool>,
    state: watch::Sender<DriverState>,
}

impl DriverLoop {
    async fn run(mut self) {
        loop {
            if *self.stop.borrow() {
                break;
            }
            let _ = self.state.send(DriverState::Running);
            if let Err(e) = adopt(&self.pool.inner.execs, &self.task_id).await {
                tracing::warn!(task.id = %self.task_id, "driver cannot start: {e:#}");
                let _ = self.state.send(DriverState::Errored(format!("{e:#}")));
                if !self.park(Some(RETRY_AFTER_ERROR)).await {
                    break;
                }
                continue;
            }
            let options = RunOptions {
                task_id: Some(self.task_id.clone()),
                slots: self.slots.clone(),
                stop: Some(self.stop.clone()),
                execs: Some(self.pool.inner.execs.clone()),
                wake: Some(self.wake.clone()),
                ..RunOptions::default()
            };
            // One span per execution: its log lines and tracing events carry task.id.
            let span = tracing::info_span!("execution", task.id = %self.task_id);
            let run = tracing::Instrument::instrument(driver::run(self.pool.inner.data.clone(), options), span);
            let pause = match crate::runtime::DRIVING.scope(self.task_id.clone(), run).await {
                Ok(outcome) => match outcome.action {
                    Action::Complete { .. } => break,
                    _ => None,
                },
                // Parked (paused with its reason): a resume drives it again.
                Err(e) if e.is::<Interrupted>() || e.is::<driver::Parked>() => break,
                // Another replica drives it now: its claim loop, not this one, carries on.
                Err(e) if crate::runtime::executions::is_fenced(&e) || self.held_elsewhere().await => {
                    tracing::info!(task.id = %self.task_id, "driven by another holder now: {e:#}");
                    break;
                }
                Err(e) => {
                    let status = self.pool.inner.execs.store().summary(&self.task_id).await.ok().flatten();
                    if status.as_ref().is_none_or(|s| matches!(s.status.as_str(), "complete" | "cancelled")) {
                        break;
                    }
                    tracing::warn!(task.id = %self.task_id, "driver stopped: {e:#}");
                    let _ = self.state.send(DriverState::Errored(format!("{e:#}")));
                    Some(RETRY_AFTER_ERROR)
                }
            };
            if matches!(*self.state.borrow(), DriverState::Running) {
                let _ = self.state.send(DriverState::Parked);
            }
            if !self.park(pause).await {
                break;
            }
        }
        self.pool.forget(&self.task_id, &self.wake);
    }

    /// Whether another holder has a live lease on the execution.
    async fn held_elsewhere(&self) -> bool {
        let lease = self.pool.inner.execs.store().lease(&self.task_id).await.ok().flatten();
        lease.is_some_and(|l| {
            l.holder != self.pool.inner.holder.holder && l.expires_at.as_str() > crate::clock::now_rfc3339().as_str()
        })
    }

    /// Waits for a wake, a journal change or (with `limit`) that long; false when stopped or
    /// the execution is gone or final.
    async fn park(&mut self, limit: Option<Duration>) -> bool {
        let store = self.pool.inner.execs.store().clone();
        let seen = store.head_seq(&self.task_id).await.ok().flatten();
        let deadline = limit.map(|l| tokio::time::Instant::now() + l);
        loop {
            tokio::select! {
                () = self.wake.notified() => return true,
                _ = self.stop.changed() => return false,
                () = tokio::time::sleep(JOURNAL_POLL) => {}
            }
            if *self.stop.borrow() {
                return false;
            }
            match store.summary(&self.task_id).await {
                Ok(None) => return false,
                Ok(Some(s)) if s.status == ExecutionStatus::Complete.as_str() => return false,
                Ok(Some(s)) if s.status == ExecutionStatus::Cancelled.as_str() => return false,
                _ => {}
            }
            let head = store.head_seq(&self.task_id).await.ok().flatten();
            if head != seen {
                return true;
            }
            if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
                return true;
            }
        }
    }
}
