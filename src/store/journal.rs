//! Executions, their hash-chained event journal and their snapshots.
//!
//! Owns the `executions`, `execution_events`, `snapshots` and `execution_bases` tables (where
//! each execution's feature branch started, recorded once). Payloads are opaque JSON
//! text; nothing here interprets them. Appends read the chain head from the `executions` row
//! and never scan the journal or touch `plan_json`.

use sqlx::SqliteConnection;

use super::lease::{check_fence, current_lease};
use super::writer::{LeaseGuard, Pending};

use super::Lite;
use super::{
    event_hash, parse_time, AppendOutcome, BindSummary as _, ChainReport, ExecutionBase, ExecutionRow, Fence, Loaded,
    NewEvent, Snapshot, Store, StoreError, StoredEvent, Summary, GENESIS_HASH, SNAPSHOTS_KEPT,
};

/// Rows read per page by [`Store::verify_chain`], bounding its memory.
const VERIFY_PAGE: i64 = 1000;

/// Columns of [`StoredEvent`], in struct order.
const EVENT_COLUMNS: &str = "seq, kind, payload, idempotency_key, at, prev_hash, hash";

/// The head of an execution's chain.
#[derive(sqlx::FromRow)]
struct Head {
    last_seq: i64,
    last_hash: String,
}

/// The `executions` columns that [`Store::load`] returns.
#[derive(sqlx::FromRow)]
struct HeadRow {
    created_at: String,
    #[sqlx(flatten)]
    summary: Summary,
    last_seq: i64,
    last_hash: String,
}

/// One board row.
#[derive(sqlx::FromRow)]
struct BoardRow {
    task_id: String,
    #[sqlx(flatten)]
    summary: Summary,
    created_at: String,
    updated_at: String,
    last_seq: i64,
}

/// Reads the chain head, or `NotFound`.
async fn head(conn: &mut SqliteConnection, task_id: &str) -> Result<Head, StoreError> {
    sqlx::query_as::<_, Head>("select last_seq, last_hash from executions where task_id = ?")
        .bind(task_id)
        .fetch_optional(conn)
        .await?
        .ok_or_else(|| StoreError::NotFound { task_id: task_id.to_owned() })
}

/// Events of `task_id` with `seq > after_seq`, in seq order, at most `limit` (-1 = all).
async fn events_after(
    conn: &mut SqliteConnection,
    task_id: &str,
    after_seq: i64,
    limit: i64,
) -> Result<Vec<StoredEvent>, StoreError> {
    let sql = format!(
        "select {EVENT_COLUMNS} from execution_events \
         where task_id = ? and seq > ? order by seq limit ?"
    );
    Ok(sqlx::query_as::<_, StoredEvent>(&sql).bind(task_id).bind(after_seq).bind(limit).fetch_all(conn).await?)
}

/// Rejects fields that would make the hashed text ambiguous, and unparsable timestamps.
pub(super) fn validate_event(task_id: &str, event: &NewEvent) -> Result<(), StoreError> {
    for (name, value) in [("kind", &event.kind), ("idempotency_key", &event.idempotency_key), ("at", &event.at)] {
        if value.contains('\n') {
            return Err(StoreError::InvalidArgument(format!(
                "event {name} {value:?} for execution {task_id} contains a newline"
            )));
        }
    }
    parse_time(&event.at)?;
    Ok(())
}

impl Store {
    /// Creates execution `task_id` with its plan and initial summary, created and updated `at`
    /// (RFC 3339), with an empty journal, and points the active task pointer at it: in one
    /// transaction, so a process killed as it starts an execution never leaves one that exists
    /// but is not the one `execute next` without `--task-id` drives.
    ///
    /// # Errors
    /// [`StoreError::AlreadyExists`] if `task_id` is present; [`StoreError::InvalidTimestamp`]
    /// if `at` is not RFC 3339; [`StoreError::Sqlx`] if `plan_json` is not valid JSON (check
    /// constraint) or on database failure.
    #[tracing::instrument(level = "debug", skip_all, fields(task.id = %task_id))]
    pub async fn create_execution(
        &self,
        task_id: &str,
        plan_json: &str,
        summary: &Summary,
        at: &str,
    ) -> Result<(), StoreError> {
        let lite = on_backend!(self, pg => pg.create_execution(task_id, plan_json, summary, at).await);
        parse_time(at)?;
        let mut tx = lite.begin_write().await?;
        let exists = sqlx::query_scalar::<_, i64>("select 1 from executions where task_id = ?")
            .bind(task_id)
            .fetch_optional(&mut *tx)
            .await?;
        if exists.is_some() {
            return Err(StoreError::AlreadyExists { task_id: task_id.to_owned() });
        }
        sqlx::query(
            "insert into executions (task_id, status, current_phase, steps_done, \
             steps_total, spend_usd, created_at, updated_at) values (?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(task_id)
        .bind_summary(summary)
        .bind(at)
        .bind(at)
        .execute(&mut *tx)
        .await?;
        sqlx::query("insert into execution_plans (task_id, plan_json) values (?, ?)")
            .bind(task_id)
            .bind(plan_json)
            .execute(&mut *tx)
            .await?;
        super::lease::put_active_task(&mut tx, task_id).await?;
        tx.commit().await?;
        // Its first append takes the group-commit path too.
        lite.remember_head(task_id, 0, GENESIS_HASH);
        Ok(())
    }

    /// Appends a batch of events to `task_id`'s journal and sets its summary, in one
    /// `BEGIN IMMEDIATE` transaction: all of it commits or none of it.
    ///
    /// Returns one outcome per event, in order. An event whose idempotency key is already in
    /// the journal (including earlier in this batch) is [`AppendOutcome::Duplicate`] and is not
    /// written; the others get `seq = last_seq + 1` and a chained hash (see
    /// [`super::event_hash`]). The summary columns are always overwritten with `summary`;
    /// `updated_at` becomes the `at` of the last appended event (unchanged if none was).
    /// An empty batch just updates the summary. Cost is independent of journal and plan size.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] if the execution does not exist;
    /// [`StoreError::InvalidArgument`] if a `kind`, `idempotency_key` or `at` contains a
    /// newline; [`StoreError::InvalidTimestamp`] if an `at` is not RFC 3339 (both checked
    /// before anything is written); [`StoreError::Sqlx`] if a payload is not valid JSON or on
    /// database failure, in which case the whole batch is rolled back.
    #[tracing::instrument(level = "debug", skip_all, fields(task.id = %task_id, events = events.len()))]
    pub async fn append(
        &self,
        task_id: &str,
        events: &[NewEvent],
        summary: &Summary,
    ) -> Result<Vec<AppendOutcome>, StoreError> {
        self.append_with(task_id, None, events, summary).await
    }

    /// [`Store::append`] by a lease holder (a driver): in the same transaction as the append,
    /// the store checks that `fence` (holder and epoch) is still the execution's lease, so a
    /// driver that was paused or cut off past its lease, and taken over, can never write again.
    ///
    /// # Errors
    /// [`StoreError::Fenced`] when another holder took the lease over (a higher epoch) or it was
    /// released: nothing of the batch was written (not even the summary). Otherwise as
    /// [`Store::append`].
    #[tracing::instrument(level = "debug", skip_all, fields(task.id = %task_id, events = events.len(), lease.epoch = fence.epoch))]
    pub async fn append_fenced(
        &self,
        task_id: &str,
        fence: &Fence,
        events: &[NewEvent],
        summary: &Summary,
    ) -> Result<Vec<AppendOutcome>, StoreError> {
        self.append_with(task_id, Some(fence), events, summary).await
    }

    /// One event appended without a lease, for a one-shot command recording on an execution
    /// nobody drives: in one transaction, only while the execution's head is still
    /// `(last_seq, last_hash)` (the state the caller applied the event to) and no lease exists
    /// (no driver holds it, no other command is recording under one). It saves a command the
    /// two write transactions of taking and releasing a brief lease (issue 14.8).
    ///
    /// Returns `Ok(None)`, having written nothing, when either condition fails, when the key
    /// is a duplicate, or on PostgreSQL (where the brief lease stays the one path, every
    /// replica taking its claims through the lease table): the caller then records under a
    /// lease as before.
    ///
    /// # Errors
    /// As [`Store::append`] (an invalid event; the database).
    #[tracing::instrument(level = "debug", skip_all, fields(task.id = %task_id, last_seq))]
    pub async fn append_unleased(
        &self,
        task_id: &str,
        last_seq: i64,
        last_hash: &str,
        event: &NewEvent,
        summary: &Summary,
    ) -> Result<Option<AppendOutcome>, StoreError> {
        validate_event(task_id, event)?;
        let lite = on_backend!(self, _pg => Ok(None));
        let mut pending = Pending::new(task_id, event, summary, last_seq, last_hash.to_owned());
        pending.guard = LeaseGuard::Unleased;
        lite.writer.append_grouped(pending).await
    }

    async fn append_with(
        &self,
        task_id: &str,
        fence: Option<&Fence>,
        events: &[NewEvent],
        summary: &Summary,
    ) -> Result<Vec<AppendOutcome>, StoreError> {
        for event in events {
            validate_event(task_id, event)?;
        }
        let lite = on_backend!(self, pg => pg.append(task_id, fence, events, summary).await);
        if let [event] = events {
            if let Some(outcome) = lite.append_fast(task_id, fence, event, summary).await? {
                return Ok(vec![outcome]);
            }
        }
        let mut tx = lite.begin_write().await?;
        let Head { mut last_seq, mut last_hash } = head(&mut tx, task_id).await?;
        if let Some(fence) = fence {
            let current = current_lease(&mut tx, task_id).await?.map(|l| (l.holder, l.epoch));
            check_fence(task_id, fence, current)?;
        }
        let mut updated_at = None;
        let mut outcomes = Vec::with_capacity(events.len());
        for event in events {
            let seq = last_seq + 1;
            let hash = event_hash(&last_hash, seq, &event.kind, &event.payload, &event.idempotency_key, &event.at);
            // A duplicate idempotency key inserts nothing (the unique index); only then is the
            // existing row looked up, so the common path is one statement.
            let inserted = sqlx::query(
                "insert into execution_events \
                 (task_id, seq, kind, payload, idempotency_key, at, prev_hash, hash) \
                 values (?, ?, ?, ?, ?, ?, ?, ?) \
                 on conflict (task_id, idempotency_key) do nothing",
            )
            .bind(task_id)
            .bind(seq)
            .bind(&event.kind)
            .bind(&event.payload)
            .bind(&event.idempotency_key)
            .bind(&event.at)
            .bind(&last_hash)
            .bind(&hash)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if inserted == 0 {
                let existing = sqlx::query_scalar::<_, i64>(
                    "select seq from execution_events where task_id = ? and idempotency_key = ?",
                )
                .bind(task_id)
                .bind(&event.idempotency_key)
                .fetch_one(&mut *tx)
                .await?;
                outcomes.push(AppendOutcome::Duplicate { seq: existing });
                continue;
            }
            last_seq = seq;
            last_hash.clone_from(&hash);
            updated_at = Some(event.at.as_str());
            outcomes.push(AppendOutcome::Appended { seq, hash });
        }
        sqlx::query(
            "update executions set status = ?, current_phase = ?, steps_done = ?, \
             steps_total = ?, spend_usd = ?, last_seq = ?, last_hash = ?, \
             updated_at = coalesce(?, updated_at) where task_id = ?",
        )
        .bind_summary(summary)
        .bind(last_seq)
        .bind(&last_hash)
        .bind(updated_at)
        .bind(task_id)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        lite.remember_head(task_id, last_seq, &last_hash);
        Ok(outcomes)
    }

    /// Loads what the caller needs to rebuild `task_id`: plan, newest snapshot, the events
    /// after it, summary and last seq, read in one consistent transaction.
    ///
    /// Returns `None` if the execution does not exist. [`Loaded::plan_json`] is always `Some`.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`] on database failure.
    #[tracing::instrument(level = "debug", skip_all, fields(task.id = %task_id))]
    pub async fn load(&self, task_id: &str) -> Result<Option<Loaded>, StoreError> {
        let lite = on_backend!(self, pg => pg.load_with(task_id, true, str::to_owned).await);
        lite.load_with(task_id, true, str::to_owned).await
    }

    /// Like [`Store::load`], but the plan text is read only when there is no snapshot to start
    /// from ([`Loaded::plan_json`] is `None` otherwise): the snapshot holds the plan as
    /// amended, and the plan as created is as long as the plan (a megabyte at 5,000 steps).
    ///
    /// # Errors
    /// [`StoreError::Sqlx`] on database failure.
    #[tracing::instrument(level = "debug", skip_all, fields(task.id = %task_id))]
    pub async fn load_latest(&self, task_id: &str) -> Result<Option<Loaded>, StoreError> {
        self.load_latest_with(task_id, str::to_owned).await
    }

    /// [`Store::load_latest`], with the snapshot's text handed to `decode` while it is still
    /// the row's (a borrowed `&str`): the state the caller builds from it is the snapshot's
    /// [`Snapshot::state`]. A snapshot is the whole state (a megabyte at 5,000 steps): decoding
    /// it in place saves copying it, and touching as many fresh pages, on every load of a
    /// process that loads once (the CLI). `decode` runs inside the read transaction and its
    /// errors are the caller's to carry in `S` (a `Result`).
    ///
    /// # Errors
    /// [`StoreError::Sqlx`] on database failure.
    #[tracing::instrument(level = "debug", skip_all, fields(task.id = %task_id))]
    pub async fn load_latest_with<S: Send>(
        &self,
        task_id: &str,
        decode: impl FnOnce(&str) -> S + Send,
    ) -> Result<Option<Loaded<S>>, StoreError> {
        let lite = on_backend!(self, pg => pg.load_with(task_id, false, decode).await);
        lite.load_with(task_id, false, decode).await
    }

    /// Events of `task_id` with `seq > after_seq`, in seq order (`after_seq = 0` for all).
    ///
    /// # Errors
    /// [`StoreError::NotFound`] if the execution does not exist; [`StoreError::Sqlx`] on
    /// database failure.
    #[tracing::instrument(level = "debug", skip_all, fields(task.id = %task_id, after_seq))]
    pub async fn events(&self, task_id: &str, after_seq: i64) -> Result<Vec<StoredEvent>, StoreError> {
        let lite = on_backend!(self, pg => pg.events(task_id, after_seq).await);
        let mut tx = lite.begin_read().await?;
        head(&mut tx, task_id).await?;
        let events = events_after(&mut tx, task_id, after_seq, -1).await?;
        tx.commit().await?;
        Ok(events)
    }

    /// The event of `task_id` journaled under `idempotency_key`, if any (the key is unique per
    /// execution).
    ///
    /// # Errors
    /// [`StoreError::Sqlx`] on database failure.
    pub async fn event_by_key(&self, task_id: &str, idempotency_key: &str) -> Result<Option<StoredEvent>, StoreError> {
        let lite = on_backend!(self, pg => pg.event_by_key(task_id, idempotency_key).await);
        let sql = format!("select {EVENT_COLUMNS} from execution_events where task_id = ? and idempotency_key = ?");
        Ok(sqlx::query_as::<_, StoredEvent>(&sql)
            .bind(task_id)
            .bind(idempotency_key)
            .fetch_optional(&mut *lite.read().await?)
            .await?)
    }

    /// Stores a snapshot of `task_id`'s state as of event `seq`, taken `at` (RFC 3339), and
    /// prunes all but the newest [`super::SNAPSHOTS_KEPT`] (by seq).
    ///
    /// Snapshots may lag the journal (`seq < last_seq`); writing the same seq again replaces
    /// it. A snapshot older than the kept ones is pruned at once.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] if the execution does not exist; [`StoreError::SnapshotAhead`]
    /// if `seq` is beyond its last event; [`StoreError::InvalidArgument`] if `seq` is
    /// negative; [`StoreError::InvalidTimestamp`]; [`StoreError::Sqlx`] if `state_json` is not
    /// valid JSON or on database failure.
    #[tracing::instrument(level = "debug", skip_all, fields(task.id = %task_id, seq))]
    pub async fn put_snapshot(&self, task_id: &str, seq: i64, state_json: &str, at: &str) -> Result<(), StoreError> {
        let lite = on_backend!(self, pg => pg.put_snapshot(task_id, seq, state_json, at).await);
        if seq < 0 {
            return Err(StoreError::InvalidArgument(format!("snapshot seq {seq} for execution {task_id} is negative")));
        }
        parse_time(at)?;
        let mut tx = lite.begin_write().await?;
        let last_seq = head(&mut tx, task_id).await?.last_seq;
        if seq > last_seq {
            return Err(StoreError::SnapshotAhead { task_id: task_id.to_owned(), seq, last_seq });
        }
        sqlx::query(
            "insert into snapshots (task_id, seq, state_json, at) values (?, ?, ?, ?) \
             on conflict (task_id, seq) do update set state_json = excluded.state_json, \
             at = excluded.at",
        )
        .bind(task_id)
        .bind(seq)
        .bind(state_json)
        .bind(at)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "delete from snapshots where task_id = ? and seq not in \
             (select seq from snapshots where task_id = ? order by seq desc limit ?)",
        )
        .bind(task_id)
        .bind(task_id)
        .bind(SNAPSHOTS_KEPT)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Records where `task_id`'s feature branch `branch` started (`base_sha`), `at` (RFC
    /// 3339), unless a base is recorded already: the first record stays. Returns the recorded
    /// base (this one, or the earlier one). Every replica reads it ([`Store::recorded_base`]),
    /// so one that takes the execution over never guesses it.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] if the execution does not exist;
    /// [`StoreError::InvalidTimestamp`] if `at` is not RFC 3339; [`StoreError::Sqlx`] on
    /// database failure.
    #[tracing::instrument(level = "debug", skip_all, fields(task.id = %task_id))]
    pub async fn record_base(
        &self,
        task_id: &str,
        branch: &str,
        base_sha: &str,
        at: &str,
    ) -> Result<ExecutionBase, StoreError> {
        let lite = on_backend!(self, pg => pg.record_base(task_id, branch, base_sha, at).await);
        parse_time(at)?;
        let mut tx = lite.begin_write().await?;
        head(&mut tx, task_id).await?;
        sqlx::query(
            "insert into execution_bases (task_id, branch, base_sha, recorded_at) values (?, ?, ?, ?) \
             on conflict (task_id) do nothing",
        )
        .bind(task_id)
        .bind(branch)
        .bind(base_sha)
        .bind(at)
        .execute(&mut *tx)
        .await?;
        let recorded =
            sqlx::query_as::<_, ExecutionBase>("select branch, base_sha from execution_bases where task_id = ?")
                .bind(task_id)
                .fetch_one(&mut *tx)
                .await?;
        tx.commit().await?;
        Ok(recorded)
    }

    /// Where `task_id`'s feature branch started, as [`Store::record_base`] recorded it; `None`
    /// when nothing was recorded (an execution created before the record existed, or one an
    /// orchestrator drives).
    ///
    /// # Errors
    /// [`StoreError::Sqlx`] on database failure.
    #[tracing::instrument(level = "debug", skip_all, fields(task.id = %task_id))]
    pub async fn recorded_base(&self, task_id: &str) -> Result<Option<ExecutionBase>, StoreError> {
        let lite = on_backend!(self, pg => pg.recorded_base(task_id).await);
        Ok(sqlx::query_as::<_, ExecutionBase>("select branch, base_sha from execution_bases where task_id = ?")
            .bind(task_id)
            .fetch_optional(&mut *lite.read().await?)
            .await?)
    }

    /// The board summary of `task_id`, or `None` if it does not exist.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`] on database failure.
    #[tracing::instrument(level = "debug", skip_all, fields(task.id = %task_id))]
    pub async fn summary(&self, task_id: &str) -> Result<Option<Summary>, StoreError> {
        let lite = on_backend!(self, pg => pg.summary(task_id).await);
        Ok(sqlx::query_as::<_, Summary>(
            "select status, current_phase, steps_done, steps_total, spend_usd \
             from executions where task_id = ?",
        )
        .bind(task_id)
        .fetch_optional(&mut *lite.read().await?)
        .await?)
    }

    /// All executions with their summaries, in creation order.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`] on database failure.
    #[tracing::instrument(level = "debug", skip_all)]
    pub async fn list_executions(&self) -> Result<Vec<ExecutionRow>, StoreError> {
        let lite = on_backend!(self, pg => pg.list_executions().await);
        let rows = sqlx::query_as::<_, BoardRow>(
            "select task_id, status, current_phase, steps_done, steps_total, spend_usd, \
             created_at, updated_at, last_seq from executions order by rowid",
        )
        .fetch_all(&mut *lite.read().await?)
        .await?;
        Ok(rows
            .into_iter()
            .map(|r| ExecutionRow {
                task_id: r.task_id,
                summary: r.summary,
                created_at: r.created_at,
                updated_at: r.updated_at,
                last_seq: r.last_seq,
            })
            .collect())
    }

    /// Recomputes `task_id`'s whole hash chain and checks it against the stored hashes,
    /// links, seq numbering and the execution's recorded head.
    ///
    /// Reads in pages of 1000 inside one read transaction, so memory stays bounded; time is
    /// linear in the journal. A broken chain is reported in the [`ChainReport`], not as an
    /// error.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] if the execution does not exist; [`StoreError::Sqlx`] on
    /// database failure.
    #[tracing::instrument(level = "debug", skip_all, fields(task.id = %task_id))]
    pub async fn verify_chain(&self, task_id: &str) -> Result<ChainReport, StoreError> {
        let lite = on_backend!(self, pg => pg.verify_chain(task_id).await);
        let mut tx = lite.begin_read().await?;
        let recorded = head(&mut tx, task_id).await?;
        let mut count: u64 = 0;
        let mut first_bad: Option<i64> = None;
        let mut prev_seq: i64 = 0;
        let mut prev_hash = GENESIS_HASH.to_owned();
        loop {
            let page = events_after(&mut tx, task_id, prev_seq, VERIFY_PAGE).await?;
            if page.is_empty() {
                break;
            }
            for event in &page {
                count += 1;
                if first_bad.is_none() {
                    let expected = prev_seq + 1;
                    let recomputed = event_hash(
                        &event.prev_hash,
                        event.seq,
                        &event.kind,
                        &event.payload,
                        &event.idempotency_key,
                        &event.at,
                    );
                    if event.seq != expected {
                        first_bad = Some(expected);
                    } else if event.prev_hash != prev_hash || recomputed != event.hash {
                        first_bad = Some(event.seq);
                    }
                }
                prev_seq = event.seq;
                prev_hash.clone_from(&event.hash);
            }
        }
        tx.commit().await?;
        if first_bad.is_none() {
            if prev_seq < recorded.last_seq {
                // Events at the tail are missing.
                first_bad = Some(prev_seq + 1);
            } else if prev_seq > recorded.last_seq {
                // Rows beyond the recorded head were inserted behind the store's back.
                first_bad = Some(recorded.last_seq + 1);
            } else if prev_hash != recorded.last_hash {
                first_bad = Some(prev_seq.max(1));
            }
        }
        Ok(ChainReport { events: count, first_bad_seq: first_bad, ok: first_bad.is_none() })
    }
}

impl Lite {
    fn remember_head(&self, task_id: &str, seq: i64, hash: &str) {
        if let Ok(mut heads) = self.heads.lock() {
            heads.insert(task_id.to_owned(), (seq, hash.to_owned()));
        }
    }

    /// One event, when this process knows the chain head: an insert guarded by the expected
    /// head (and, for a fenced append, by its lease) and a summary update guarded by the
    /// inserted row, committed in one round trip
    /// together with the other executions' appends queued meanwhile (group commit, see
    /// `writer`). `Ok(None)` when the head was stale, the key a duplicate or the group
    /// failed: nothing of this event was written and the caller takes the general path.
    async fn append_fast(
        &self,
        task_id: &str,
        fence: Option<&Fence>,
        event: &NewEvent,
        summary: &Summary,
    ) -> Result<Option<AppendOutcome>, StoreError> {
        let known = self.heads.lock().ok().and_then(|h| h.get(task_id).cloned());
        let Some((last_seq, last_hash)) = known else { return Ok(None) };
        let mut pending = Pending::new(task_id, event, summary, last_seq, last_hash);
        pending.guard = fence.map_or(LeaseGuard::Any, |f| LeaseGuard::Held(f.clone()));
        self.writer.append_grouped(pending).await
    }

    async fn load_with<S: Send>(
        &self,
        task_id: &str,
        with_plan: bool,
        decode: impl FnOnce(&str) -> S + Send,
    ) -> Result<Option<Loaded<S>>, StoreError> {
        let mut tx = self.begin_read().await?;
        let row = sqlx::query_as::<_, HeadRow>(
            "select created_at, status, current_phase, steps_done, steps_total, spend_usd, last_seq, \
             last_hash from executions where task_id = ?",
        )
        .bind(task_id)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let snapshot = sqlx::query("select seq, state_json from snapshots where task_id = ? order by seq desc limit 1")
            .bind(task_id)
            .fetch_optional(&mut *tx)
            .await?
            .map(|row| Snapshot::from_row(&row, decode))
            .transpose()?;
        let plan_json = if with_plan || snapshot.is_none() {
            Some(
                sqlx::query_scalar::<_, String>("select plan_json from execution_plans where task_id = ?")
                    .bind(task_id)
                    .fetch_one(&mut *tx)
                    .await?,
            )
        } else {
            None
        };
        let after = snapshot.as_ref().map_or(0, |s| s.seq);
        let events_after_snapshot = events_after(&mut tx, task_id, after, -1).await?;
        tx.commit().await?;
        Ok(Some(Loaded {
            plan_json,
            created_at: row.created_at,
            snapshot,
            events_after_snapshot,
            summary: row.summary,
            last_seq: row.last_seq,
            last_hash: row.last_hash,
        }))
    }
}
