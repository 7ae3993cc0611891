//! The execution service: engine transitions made durable in the store.
//!
//! Loading an execution is its latest snapshot plus a replay of the journal after it (composed
//! here, because `store` never imports `engine`). Recording an event applies it to the
//! in-memory state, then appends it to the journal with the new summary in one transaction:
//! the cost of a record does not grow with the plan. A snapshot is written every
//! [`SNAPSHOT_EVERY`] events ([`ONE_SHOT_SNAPSHOT_EVERY`] in a one-shot process), before the
//! record that made it due returns (and by a load that found one missing), so a load replays
//! at most that many events. The snapshot is decoded from the store's row as it is read
//! ([`Store::load_latest_with`]), not from a copy of it. This module never touches git or
//! agents.

use std::sync::Arc;

use anyhow::Context as _;

use crate::clock;
use crate::engine::{self, Applied};
use crate::model::event::{Event, EventKind};
use crate::model::plan::MachinePlan;
use crate::model::snapshot;
use crate::model::state::{ExecutionState, ExecutionStatus};
use crate::runtime::config::DataDir;
use crate::runtime::{lease, runs, BadInput};
use crate::store::{Fence, NewEvent, Store, StoreError, Summary, Workload};

/// Events between two snapshots written by a long-lived process: a load replays at most this
/// many journal entries after the latest snapshot, whatever the plan's size (a snapshot
/// serializes the whole state, so its cost, amortized over this many events, is small; and a
/// long-lived process loads an execution once, then catches up in memory).
pub const SNAPSHOT_EVERY: u64 = 256;

/// Events between two snapshots written by a one-shot process ([`Workload::OneShot`], a CLI
/// call without a server): such a process loads the execution on every call, reading and
/// replaying each event after the latest snapshot (about 15 µs an event at 5,000 steps), so it
/// snapshots four times as often as a server. Either cadence bounds every load's replay, since
/// a load that finds more events than its own cadence allows after the latest snapshot writes
/// one.
pub const ONE_SHOT_SNAPSHOT_EVERY: u64 = 64;

/// What [`Executions::record_once`] did.
#[derive(Debug)]
pub struct RecordedOnce {
    /// The execution after the event (shared with this process's state cache: cloning it is
    /// free, and the next load of the execution does not copy it while nobody else holds it).
    pub state: Arc<ExecutionState>,
    /// The event's key, and whether it was a duplicate (nothing changed).
    pub applied: Applied,
    /// Agent attempts a cancel stopped.
    pub stopped_attempts: usize,
}

/// Durable executions over one store.
#[derive(Debug, Clone)]
pub struct Executions {
    store: Store,
    data: DataDir,
    cache: StateCache,
    /// Events between two snapshots: [`SNAPSHOT_EVERY`], or [`ONE_SHOT_SNAPSHOT_EVERY`].
    snapshot_every: u64,
}

/// How many executions' states a process keeps in memory, to load them by catching up.
pub const CACHED_EXECUTIONS: usize = 64;

/// The newest states this process loaded, by task id, each with the seq (and, when known, the
/// hash) of the last journal entry it includes, shared by every clone of [`Executions`].
///
/// A load that finds its execution here reads only the journal entries after that seq and
/// applies them (the engine is deterministic, so the result is the state a full load would
/// build), instead of reading and parsing the newest snapshot: a long-lived process (`baton
/// serve`, and the CLI calls it runs through the relay) pays for what changed, not for the
/// plan's size. Sound because the journal is append-only and executions are never deleted;
/// entries whose chain does not continue from the cached hash make the load a full one.
///
/// A state is held as an `Arc`: a load hands out a reference, not a copy, and a record
/// mutates the cached state in place (copy-on-write: a copy is made only while a reader still
/// holds the previous version), so no call copies a state whose size grows with the plan.
#[derive(Debug, Clone, Default)]
struct StateCache(std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, Cached>>>);

#[derive(Debug)]
struct Cached {
    seq: i64,
    hash: Option<String>,
    state: Arc<ExecutionState>,
}

impl StateCache {
    fn take(&self, task_id: &str) -> Option<Cached> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(task_id)
    }

    fn put(&self, task_id: &str, cached: Cached) {
        let mut map = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if map.len() >= CACHED_EXECUTIONS && !map.contains_key(task_id) {
            if let Some(evicted) = map.keys().next().cloned() {
                map.remove(&evicted);
            }
        }
        map.insert(task_id.to_owned(), cached);
    }
}

/// The store summary of a state.
pub fn summary_of(state: &ExecutionState) -> Summary {
    let (done, total) = state.progress();
    Summary {
        status: state.status.as_str().to_string(),
        current_phase: state.current().map_or_else(String::new, |p| format!("{} {}", p.phase_id, p.name)),
        steps_done: i64::try_from(done).unwrap_or(i64::MAX),
        steps_total: i64::try_from(total).unwrap_or(i64::MAX),
        spend_usd: state.counters.spend_usd,
    }
}

impl Executions {
    /// Opens the store of `data` (its SQLite file, or the PostgreSQL database that
    /// [`database_url`](crate::runtime::config::database_url) names), and gives forge specs
    /// older than their item keys theirs ([`backfill_source_keys`]; a one-shot process that
    /// ran no migration leaves that to the one that did, see [`Store::ran_no_migration`]).
    pub async fn open(data: DataDir) -> anyhow::Result<Executions> {
        Executions::open_for(data, Workload::Service).await
    }

    /// [`Executions::open`] for `workload`: a one-shot CLI process opens its SQLite store with
    /// fewer connections and no journal thread ([`Workload`]).
    pub async fn open_for(data: DataDir, workload: Workload) -> anyhow::Result<Executions> {
        let store = match crate::runtime::config::database_url(&data, |name| std::env::var(name).ok()) {
            Some(url) => Store::connect(&url).await.context("opening the PostgreSQL store")?,
            None => Store::open_for(&data.db_path(), workload)
                .await
                .with_context(|| format!("opening {}", data.db_path().display()))?,
        };
        // A one-shot process on a schema it did not migrate skips the backfill: the process
        // that applied migration 0010 ran it, as every server does at start (one statement of
        // every CLI call, issue 14.8).
        if !store.ran_no_migration() {
            backfill_source_keys(&store).await.context("keying the specs of forge items")?;
        }
        let snapshot_every = match workload {
            Workload::Service => SNAPSHOT_EVERY,
            Workload::OneShot => ONE_SHOT_SNAPSHOT_EVERY,
        };
        Ok(Executions { store, data, cache: StateCache::default(), snapshot_every })
    }

    /// For a process that ran one command and is about to exit ([`Workload::OneShot`]): closes
    /// the store's writer ([`Store::close_for_exit`]); later writes fail.
    pub async fn close_for_exit(&self) {
        self.store.close_for_exit().await;
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The data directory.
    pub fn data(&self) -> &DataDir {
        &self.data
    }

    /// Starts a new execution of `plan` and persists it (plan, summary and the active task
    /// pointer in one transaction, then the initial snapshot).
    ///
    /// Errors ([`BadInput`]): invalid plan, team steps, an execution with this task id exists.
    pub async fn create(&self, plan: MachinePlan) -> anyhow::Result<ExecutionState> {
        let now = clock::now_rfc3339();
        let plan_json = serde_json::to_string(&plan).context("serializing the plan")?;
        let original = plan.clone();
        // A new plan meets the intake rules too (no NUL, one-line names), which a journal's
        // plan is not held to on replay.
        engine::validate_new(&plan)
            .map_err(|problems| BadInput(engine::EngineError::InvalidPlan(problems).to_string()))?;
        let state = engine::start(plan, &now).map_err(|e| BadInput(e.to_string()))?;
        match self.store.create_execution(&state.task_id, &plan_json, &summary_of(&state), &now).await {
            Ok(()) => {}
            Err(StoreError::AlreadyExists { .. }) => {
                let id = &state.task_id;
                let which =
                    if self.started_with(id, &original).await? { "with this plan" } else { "with a different plan" };
                // A complete or cancelled execution takes no more events: going on is no way.
                let status = self.store.summary(id).await?.map(|s| s.status).unwrap_or_default();
                let ended = [ExecutionStatus::Complete, ExecutionStatus::Cancelled];
                if ended.iter().any(|e| e.to_string() == status) {
                    return Err(BadInput(format!(
                        "an execution with task id {id} already exists {which} and is {status}: give the new plan \
                         another task_id"
                    ))
                    .into());
                }
                return Err(BadInput(format!(
                    "an execution with task id {id} already exists {which}: go on with it \
                     (`baton execute next --task-id {id}`), or give the new plan another task_id"
                ))
                .into());
            }
            Err(e) => return Err(e).context("creating the execution"),
        }
        // A load before this snapshot starts from the stored plan: it only saves that work.
        let snapshot = snapshot::encode(&state).context("serializing the state")?;
        self.store.put_snapshot(&state.task_id, 0, &snapshot, &now).await.context("writing the first snapshot")?;
        Ok(state)
    }

    /// Loads an execution: latest snapshot + replay of the later journal. `None` if unknown.
    ///
    /// An owned copy: a caller that only reads takes [`Executions::load_shared`], which does
    /// not copy the state.
    pub async fn load(&self, task_id: &str) -> anyhow::Result<Option<ExecutionState>> {
        Ok(self.load_shared(task_id).await?.map(Arc::unwrap_or_clone))
    }

    /// [`Executions::load`], shared with the state cache: no copy of the state is made.
    pub async fn load_shared(&self, task_id: &str) -> anyhow::Result<Option<Arc<ExecutionState>>> {
        let Some(cached) = self.checkout(task_id).await? else { return Ok(None) };
        let state = Arc::clone(&cached.state);
        self.cache.put(task_id, cached);
        Ok(Some(state))
    }

    /// The execution taken out of the cache and brought up to the journal's head, or built by a
    /// full load; `None` if unknown. The caller puts it back ([`StateCache::put`]) once the
    /// state is known to match the journal again.
    async fn checkout(&self, task_id: &str) -> anyhow::Result<Option<Cached>> {
        if let Some(cached) = self.cache.take(task_id) {
            if let Some(caught_up) = self.catch_up(task_id, cached).await {
                return Ok(Some(caught_up));
            }
        }
        let decode = snapshot::decode;
        let Some(loaded) =
            self.store.load_latest_with(task_id, decode).await.with_context(|| format!("loading {task_id}"))?
        else {
            return Ok(None);
        };
        let mut state = match loaded.snapshot {
            Some(snap) => snap.state.with_context(|| format!("snapshot {} of {task_id} is unreadable", snap.seq))?,
            None => {
                let plan = stored_plan(task_id, loaded.plan_json.as_deref())?;
                engine::start(plan, &loaded.created_at)
                    .map_err(|e| anyhow::anyhow!("the plan stored with execution {task_id} does not start: {e}"))?
            }
        };
        state.reindex();
        for ev in &loaded.events_after_snapshot {
            let event: Event = serde_json::from_str(&ev.payload)
                .with_context(|| format!("journal entry {} of {task_id} is unreadable", ev.seq))?;
            engine::apply(&mut state, &event, &ev.at)
                .map_err(|e| anyhow::anyhow!("journal entry {} of {task_id} does not replay: {e}", ev.seq))?;
        }
        if loaded.events_after_snapshot.len() as u64 >= self.snapshot_every {
            // A snapshot that was due was not written (a crash between the append and the
            // snapshot): this load writes it, so replays stay bounded.
            self.snapshot(&state, &clock::now_rfc3339()).await;
        }
        // Read in the same transaction as the snapshot and the events: the state's own head.
        Ok(Some(Cached { seq: loaded.last_seq, hash: Some(loaded.last_hash), state: Arc::new(state) }))
    }

    /// `cached` brought up to the journal's head (see [`StateCache`]); `None` when that cannot
    /// be done soundly (the store failed, the chain does not continue from the cached entry, an
    /// entry does not replay): the caller loads in full.
    async fn catch_up(&self, task_id: &str, cached: Cached) -> Option<Cached> {
        let Cached { mut seq, mut hash, mut state } = cached;
        let events = self.store.events(task_id, seq).await.ok()?;
        if let (Some(first), Some(h)) = (events.first(), &hash) {
            if &first.prev_hash != h {
                return None;
            }
        }
        if !events.is_empty() {
            let state = Arc::make_mut(&mut state);
            for ev in &events {
                let event: Event = serde_json::from_str(&ev.payload).ok()?;
                engine::apply(state, &event, &ev.at).ok()?;
                seq = ev.seq;
                hash = Some(ev.hash.clone());
            }
        }
        Some(Cached { seq, hash, state })
    }

    /// Like [`Executions::load`], but an unknown task id is a [`BadInput`].
    pub async fn get(&self, task_id: &str) -> anyhow::Result<ExecutionState> {
        self.load(task_id).await?.ok_or_else(|| BadInput(format!("no execution with task id {task_id}")).into())
    }

    /// Like [`Executions::load_shared`], but an unknown task id is a [`BadInput`].
    pub async fn get_shared(&self, task_id: &str) -> anyhow::Result<Arc<ExecutionState>> {
        self.load_shared(task_id).await?.ok_or_else(|| BadInput(format!("no execution with task id {task_id}")).into())
    }

    /// The plan an execution was created with (before any amendment), if it exists.
    pub async fn original_plan(&self, task_id: &str) -> anyhow::Result<Option<MachinePlan>> {
        let Some(loaded) = self.store.load(task_id).await? else { return Ok(None) };
        let plan = stored_plan(task_id, loaded.plan_json.as_deref())?;
        Ok(Some(plan))
    }

    /// Whether the execution `task_id` was started with exactly `plan` (its plan as created,
    /// before any amendment); `false` when there is no such execution. What every door that
    /// is given a plan for a task id that exists asks (`execute start`, `execute run
    /// --plan`).
    ///
    /// Errors: the store's; a stored plan that no longer parses (an error, never taken for
    /// a different plan).
    pub async fn started_with(&self, task_id: &str, plan: &MachinePlan) -> anyhow::Result<bool> {
        Ok(self.original_plan(task_id).await?.is_some_and(|stored| stored == *plan))
    }

    /// Rebuilds an execution from its plan and the whole journal (no snapshot).
    pub async fn replay(&self, task_id: &str) -> anyhow::Result<ExecutionState> {
        let loaded =
            self.store.load(task_id).await?.ok_or_else(|| BadInput(format!("no execution with task id {task_id}")))?;
        let plan = stored_plan(task_id, loaded.plan_json.as_deref())?;
        let events = self.store.events(task_id, 0).await?;
        let mut parsed = Vec::with_capacity(events.len());
        for ev in &events {
            let event: Event = serde_json::from_str(&ev.payload)
                .with_context(|| format!("journal entry {} of {task_id} is unreadable", ev.seq))?;
            parsed.push((event, ev.at.clone()));
        }
        engine::replay(plan, &loaded.created_at, parsed.iter().map(|(e, at)| (e, at.as_str())))
            .map_err(|e| anyhow::anyhow!("journal of {task_id} does not replay: {e}"))
    }

    /// Applies `event` to `state` and journals it (with the new summary) in one transaction.
    ///
    /// A duplicate (same idempotency key) changes nothing and writes nothing. Errors: an
    /// [`EngineError`](crate::engine::EngineError), unwrapped so callers can classify it (the
    /// CLI exits 2, the API answers 409 or 422; state unchanged, nothing written), or a store
    /// error — then the in-memory state is ahead of the journal and must be reloaded.
    pub async fn record(&self, state: &mut ExecutionState, event: Event) -> anyhow::Result<Applied> {
        self.record_fenced(state, event, None).await
    }

    /// [`Executions::record`] by a lease holder: with `fence`, the append is refused
    /// ([`StoreError::Fenced`], inside the error) when the lease was taken over since, and
    /// nothing is written. The same refusal replaces the engine's when the engine refuses the
    /// event and the lease was taken over (the new holder's events conflict with the stale
    /// state: a key it journaled first is a key conflict here). Every driver journals this
    /// way; [`is_fenced`] tells the refusal.
    ///
    /// Errors: as [`Executions::record`], and the refusal.
    pub async fn record_fenced(
        &self,
        state: &mut ExecutionState,
        event: Event,
        fence: Option<&Fence>,
    ) -> anyhow::Result<Applied> {
        if let Some((key, earlier)) = self.journaled_key(state, &event).await? {
            engine::recall_key(state, key, &earlier);
        }
        let now = clock::now_rfc3339();
        let applied = match engine::apply(state, &event, &now) {
            Ok(applied) => applied,
            Err(refused) => {
                // A holder whose lease was taken over holds a stale state: the new holder's
                // events (one under the same idempotency key, a step it finished) refuse its
                // own. The lost lease, not the refusal, is what it must act on.
                if let Some(fence) = fence {
                    self.store.check_fence(&state.task_id, fence).await?;
                }
                return Err(refused.into());
            }
        };
        self.append_applied(state, event, &applied, fence, &now).await?;
        Ok(applied)
    }

    /// Journals `event`, just applied to `state` as `applied`, with the new summary (a
    /// duplicate writes nothing), and writes the snapshot that became due. Returns where the
    /// event was written (seq and chain hash), `None` for a duplicate.
    ///
    /// Errors: the store's (then `state` is ahead of the journal).
    async fn append_applied(
        &self,
        state: &ExecutionState,
        event: Event,
        applied: &Applied,
        fence: Option<&Fence>,
        now: &str,
    ) -> anyhow::Result<Option<(i64, String)>> {
        if applied.duplicate {
            return Ok(None);
        }
        let kind = event.kind.name();
        let new = journal_entry(event, applied, now)?;
        let appended = match fence {
            Some(fence) => self.store.append_fenced(&state.task_id, fence, &[new], &summary_of(state)).await,
            None => self.store.append(&state.task_id, &[new], &summary_of(state)).await,
        };
        let outcomes = appended.with_context(|| format!("journaling {kind} for {}", state.task_id))?;
        self.snapshot_if_due(state, now).await;
        Ok(outcomes.into_iter().next().and_then(|o| match o {
            crate::store::AppendOutcome::Appended { seq, hash } => Some((seq, hash)),
            crate::store::AppendOutcome::Duplicate { .. } => None,
        }))
    }

    /// Records one event the way every one-shot client (the CLI, the REST API) must: when
    /// nobody holds the execution's lease (SQLite), load, apply and journal in one write
    /// transaction that checks there is still no lease and no newer event; otherwise (a lease
    /// exists, the load was overtaken, PostgreSQL, a cancel) take the lease briefly (a cancel
    /// first stops a live `execute run` driver), load, apply and journal, release. After a
    /// cancel, kill the agents still running for it.
    ///
    /// Errors: unknown task ([`BadInput`]), the lease held by a driver ([`BadInput`]), an
    /// [`EngineError`](crate::engine::EngineError) refusal (state and journal unchanged).
    pub async fn record_once(&self, task_id: &str, event: Event) -> anyhow::Result<RecordedOnce> {
        self.record_once_checked(task_id, event, |_, _| Ok(())).await
    }

    /// [`Executions::record_once`] with `check` run on the loaded state under the lease,
    /// before the event is applied: its error is returned as is and nothing is written (the
    /// operator service checks there whether a decision is already taken). The state `check`
    /// sees knows the event's own key when the journal holds it (recalled from the journal,
    /// see [`ExecutionState::applied_keys`]), however it was loaded.
    ///
    /// Errors: as [`Executions::record_once`], and `check`'s.
    pub async fn record_once_checked(
        &self,
        task_id: &str,
        event: Event,
        check: impl Fn(&ExecutionState, &Event) -> anyhow::Result<()>,
    ) -> anyhow::Result<RecordedOnce> {
        let cancel = matches!(event.kind, EventKind::Cancelled { .. });
        if !cancel {
            if let Some(done) = self.record_unleased(task_id, &event, &check).await? {
                return Ok(done);
            }
        }
        let lease = if cancel {
            lease::acquire_stopping_driver(&self.store, task_id).await?
        } else {
            lease::acquire_briefly(&self.store, task_id).await?
        };
        let result = async {
            let Some(mut cached) = self.checkout(task_id).await? else {
                return Err(BadInput(format!("no execution with task id {task_id}")).into());
            };
            self.recall_key(&mut cached.state, &event).await?;
            if let Err(refused) = check(&cached.state, &event) {
                self.cache.put(task_id, cached);
                return Err(refused);
            }
            // In place when no reader holds the cached state (copy-on-write otherwise).
            let state = Arc::make_mut(&mut cached.state);
            let now = clock::now_rfc3339();
            let applied = match engine::apply(state, &event, &now) {
                Ok(applied) => applied,
                Err(refused) => {
                    // The engine changes nothing when it refuses: the state still matches.
                    self.cache.put(task_id, cached);
                    return Err(refused.into());
                }
            };
            // A store error leaves the state ahead of the journal: it is not cached again, and
            // the next load reads the journal.
            if let Some((seq, hash)) = self.append_applied(state, event, &applied, Some(&lease.fence()), &now).await? {
                (cached.seq, cached.hash) = (seq, Some(hash));
            }
            let state = Arc::clone(&cached.state);
            self.cache.put(task_id, cached);
            Ok::<_, anyhow::Error>((state, applied))
        }
        .await;
        lease.release().await?;
        let (state, applied) = result?;
        let stopped_attempts = if cancel && !applied.duplicate {
            let (data, snapshot) = (self.data.clone(), Arc::clone(&state));
            crate::runtime::blocking(move || runs::stop_attempts(&data, &snapshot)).await?
        } else {
            0
        };
        Ok(RecordedOnce { state, applied, stopped_attempts })
    }

    /// The journal's entry under the idempotency key `event` would be applied with, when
    /// `state` does not know that key yet: a state decoded from a snapshot holds only the keys
    /// applied since (see [`ExecutionState::applied_keys`]), so every door that applies a new
    /// event passes this to [`engine::recall_key`] first, and a resend is a duplicate (or a key
    /// conflict) however the state was loaded. One indexed read of the journal; none when the
    /// state knows the key.
    ///
    /// Errors: the store's; an entry that does not parse.
    async fn journaled_key(&self, state: &ExecutionState, event: &Event) -> anyhow::Result<Option<(String, Event)>> {
        let key = engine::idempotency_key(state, event);
        if state.applied_keys.contains_key(&key) {
            return Ok(None);
        }
        let Some(entry) = self.store.event_by_key(&state.task_id, &key).await? else {
            return Ok(None);
        };
        let earlier: Event = serde_json::from_str(&entry.payload)
            .with_context(|| format!("journal entry {} of {} is unreadable", entry.seq, state.task_id))?;
        Ok(Some((key, earlier)))
    }

    /// [`Executions::journaled_key`] recalled into a shared state: copied (copy-on-write) only
    /// when the journal holds a key the state does not know.
    ///
    /// Errors: as [`Executions::journaled_key`].
    async fn recall_key(&self, state: &mut Arc<ExecutionState>, event: &Event) -> anyhow::Result<()> {
        if let Some((key, earlier)) = self.journaled_key(state, event).await? {
            engine::recall_key(Arc::make_mut(state), key, &earlier);
        }
        Ok(())
    }

    /// Whether an event was applied to `state`'s execution under the idempotency key `key`:
    /// known to `state`, or journaled before the snapshot it was decoded from (see
    /// [`ExecutionState::applied_keys`]). What a door asks before it starts something keyed
    /// (a remediation round, a link's resent submission).
    ///
    /// Errors: the store's.
    pub async fn key_applied(&self, state: &ExecutionState, key: &str) -> anyhow::Result<bool> {
        if state.applied_keys.contains_key(key) {
            return Ok(true);
        }
        Ok(self.store.event_by_key(&state.task_id, key).await?.is_some())
    }

    /// Writes the snapshot due after `state`'s last event, if one is (every
    /// `snapshot_every` events), before the caller returns: a one-shot process (the CLI) ends
    /// right after, and a snapshot left to a background task was usually never written.
    async fn snapshot_if_due(&self, state: &ExecutionState, now: &str) {
        if state.events_applied.is_multiple_of(self.snapshot_every) {
            self.snapshot(state, now).await;
        }
    }

    /// [`Executions::record_once_checked`] without a lease, when nobody holds one (SQLite):
    /// load (this process's cache, caught up), check, apply, and append guarded in its own
    /// transaction by the head the state was at and by the absence of any lease
    /// ([`Store::append_unleased`](crate::store::Store::append_unleased)). Recording so takes
    /// one write transaction instead of three.
    ///
    /// `Ok(None)` when the guarded append did not land (a lease exists, another process
    /// appended since the load, or the store is PostgreSQL): nothing was written, the cached
    /// state (already ahead) is dropped, and the caller records under a lease.
    ///
    /// Errors: unknown task ([`BadInput`]), `check`'s refusal, the engine's refusal (nothing
    /// written, the cache unchanged; with a lease held, `Ok(None)` instead), the store's.
    async fn record_unleased(
        &self,
        task_id: &str,
        event: &Event,
        check: &impl Fn(&ExecutionState, &Event) -> anyhow::Result<()>,
    ) -> anyhow::Result<Option<RecordedOnce>> {
        let Some(mut cached) = self.checkout(task_id).await? else {
            return Err(BadInput(format!("no execution with task id {task_id}")).into());
        };
        let Some(head_hash) = cached.hash.clone() else {
            self.cache.put(task_id, cached);
            return Ok(None);
        };
        self.recall_key(&mut cached.state, event).await?;
        if let Err(refused) = check(&cached.state, event) {
            self.cache.put(task_id, cached);
            return self.refused_unless_leased(task_id, refused).await;
        }
        let state = Arc::make_mut(&mut cached.state);
        let now = clock::now_rfc3339();
        let applied = match engine::apply(state, event, &now) {
            Ok(applied) => applied,
            Err(refused) => {
                self.cache.put(task_id, cached);
                return self.refused_unless_leased(task_id, refused.into()).await;
            }
        };
        if !applied.duplicate {
            let new = journal_entry(event.clone(), &applied, &now)?;
            let appended = self
                .store
                .append_unleased(task_id, cached.seq, &head_hash, &new, &summary_of(state))
                .await
                .with_context(|| format!("journaling {} for {task_id}", event.kind.name()))?;
            let Some(crate::store::AppendOutcome::Appended { seq, hash }) = appended else {
                // `cached` is ahead of the journal: dropped, the lease path reloads.
                return Ok(None);
            };
            (cached.seq, cached.hash) = (seq, Some(hash));
            self.snapshot_if_due(state, &now).await;
        }
        let state = Arc::clone(&cached.state);
        self.cache.put(task_id, cached);
        Ok(Some(RecordedOnce { state, applied, stopped_attempts: 0 }))
    }

    /// A refusal of the unleased path stands only while nobody holds the lease: under a
    /// driver the state is moving, and the lease path reports who holds it, as it always did.
    async fn refused_unless_leased(
        &self,
        task_id: &str,
        refused: anyhow::Error,
    ) -> anyhow::Result<Option<RecordedOnce>> {
        match self.store.lease(task_id).await? {
            Some(_) => Ok(None),
            None => Err(refused),
        }
    }

    /// Writes a snapshot of `state` as of its last event. A failure is logged, not returned:
    /// the events are durable in the journal, and the next load replays them (and tries again).
    async fn snapshot(&self, state: &ExecutionState, now: &str) {
        let seq = i64::try_from(state.events_applied).unwrap_or(i64::MAX);
        let task_id = state.task_id.clone();
        let copy = state.clone();
        let json = match crate::runtime::blocking(move || snapshot::encode(&copy)).await {
            Ok(Ok(json)) => json,
            Ok(Err(e)) => return tracing::warn!(task.id = %task_id, "snapshot at seq {seq} not serialized: {e}"),
            Err(e) => return tracing::warn!(task.id = %task_id, "snapshot at seq {seq} not serialized: {e:#}"),
        };
        if let Err(e) = self.store.put_snapshot(&task_id, seq, &json, now).await {
            tracing::warn!(task.id = %task_id, "snapshot at seq {seq} not written: {e}");
        }
    }

    /// Task id from `--task-id`, else `BATON_TASK_ID` (clap reads it into the same flag), else
    /// the active task. Errors when none is known.
    pub async fn resolve_task_id(&self, explicit: Option<&str>) -> anyhow::Result<String> {
        if let Some(id) = explicit.filter(|s| !s.is_empty()) {
            return Ok(id.to_string());
        }
        match self.store.active_task().await? {
            Some(id) => Ok(id),
            None => {
                Err(BadInput("no task id: pass --task-id, set BATON_TASK_ID, or start an execution first".into())
                    .into())
            }
        }
    }
}

/// The journal entry of `event`, applied at `now` as `applied`: the event with its
/// idempotency key, serialized.
///
/// Errors: serialization (cannot happen for the engine's own types).
fn journal_entry(mut event: Event, applied: &Applied, now: &str) -> anyhow::Result<NewEvent> {
    event.idempotency_key = Some(applied.key.clone());
    let payload = serde_json::to_string(&event).context("serializing the event")?;
    Ok(NewEvent {
        kind: event.kind.name().to_string(),
        payload,
        idempotency_key: applied.key.clone(),
        at: now.to_string(),
    })
}

/// Whether `error` is (or wraps) a lost lease: a fenced append refused
/// ([`StoreError::Fenced`]), or a renewal that found the lease taken over or gone. A driver
/// that gets one stops at once: the execution belongs to another holder now.
pub fn is_fenced(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        matches!(
            cause.downcast_ref::<StoreError>(),
            Some(StoreError::Fenced { .. } | StoreError::LeaseHeld { .. } | StoreError::LeaseNotHeld { .. })
        )
    })
}

/// Parses the plan `task_id` was created with, as the store gave it.
///
/// Errors: the text was not loaded, or no longer parses (damaged on disk, edited by hand):
/// "the plan stored with execution X is unreadable: …".
fn stored_plan(task_id: &str, plan_json: Option<&str>) -> anyhow::Result<MachinePlan> {
    let text = plan_json.ok_or_else(|| anyhow::anyhow!("the plan stored with execution {task_id} was not loaded"))?;
    MachinePlan::from_json(text)
        .map_err(|e| anyhow::anyhow!("the plan stored with execution {task_id} is unreadable: {e}"))
}

/// Gives every forge spec written before migration 0010 its item's key
/// ([`crate::forge::item_key`] of its `source_url`), oldest spec first: the oldest spec of an
/// item keeps being the item's spec; a younger duplicate (left by the check-then-insert that
/// came before the unique key) is marked `superseded:<id>` with a spec event
/// `superseded_duplicate` naming the item's spec, and imports and webhooks no longer touch it.
/// Idempotent and cheap once done (one query finding nothing); run by [`Executions::open`].
///
/// Errors: the database.
pub async fn backfill_source_keys(store: &Store) -> anyhow::Result<usize> {
    let pending = store.specs_without_source_key().await?;
    let mut superseded = 0;
    for (spec_id, source, url) in pending {
        let key = crate::forge::item_key(&source, &url);
        let reason = |holder: i64| {
            format!(
                "spec {holder} was imported from the same {source} item ({url}) first: it stays the item's spec; \
                 imports and webhooks no longer update this duplicate"
            )
        };
        if let Some(holder) = store.claim_source_key(spec_id, &key, reason, "baton", &clock::now_rfc3339()).await? {
            tracing::warn!("spec {spec_id} duplicates spec {holder} (both from {url}): marked superseded");
            superseded += 1;
        }
    }
    Ok(superseded)
}
