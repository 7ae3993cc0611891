//! The store's one read-write connection: write transactions, and group commit of journal
//! appends.
//!
//! Owns the single writer connection, held for the store's whole life. It is not borrowed from
//! a pool: sqlx pings a pooled connection on every release, on a spawned task that the next
//! borrower waits for, which doubled the cost of a one-event commit. Owns the queue of
//! single-event appends waiting for that connection, and commits every append queued while
//! another commit was in flight in one transaction (one fsync). Never interprets payloads and
//! never decides what an event means: an append that cannot take the group path is handed back
//! to the caller's ordinary transaction.

use std::collections::{HashMap, HashSet};
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as SyncMutex, OnceLock};

use sqlx::sqlite::{SqliteConnection, SqliteTransactionManager};
use sqlx::TransactionManager as _;
use tokio::sync::{oneshot, Mutex, OwnedMutexGuard};

use super::{AppendOutcome, Fence, NewEvent, StoreError, Summary};

/// At most this many appends share one commit (each is one guarded insert and one update in
/// the batch's SQL, about 1 KiB of text).
pub(super) const MAX_GROUP: usize = 64;

/// Last known chain head (seq, hash) per execution, from this process's appends.
pub(super) type Heads = Arc<SyncMutex<HashMap<String, (i64, String)>>>;

/// The writer connection and whether an interrupted batch may have left it inside a
/// transaction.
#[derive(Debug)]
pub(super) struct Slot {
    conn: SqliteConnection,
    /// Set by [`Writer::close`]: later writes fail with `PoolClosed`.
    closed: bool,
    /// Set while a group commit runs; still set when its future was dropped midway, in which
    /// case the next holder rolls back whatever it left open.
    dirty: bool,
}

/// One single-event append waiting for the writer.
#[derive(Debug)]
pub(super) struct Pending {
    /// Execution it appends to.
    pub(super) task_id: String,
    /// The event, already validated.
    pub(super) event: NewEvent,
    /// Summary columns to write with it.
    pub(super) summary: Summary,
    /// Chain head the caller expects (from [`Heads`]); the SQL checks it.
    pub(super) last_seq: i64,
    /// Hash at that head.
    pub(super) last_hash: String,
    /// This event's hash, chained on `last_hash` at `last_seq + 1`.
    pub(super) hash: String,
    /// The lease the append must still hold (a driver's); the SQL checks it.
    pub(super) fence: Option<Fence>,
    /// `Some` once appended, `None` when the caller must take the ordinary path.
    reply: Option<oneshot::Sender<Option<AppendOutcome>>>,
}

impl Pending {
    /// A pending append; `reply` is set when it is queued.
    pub(super) fn new(task_id: &str, event: &NewEvent, summary: &Summary, last_seq: i64, last_hash: String) -> Pending {
        let hash =
            super::event_hash(&last_hash, last_seq + 1, &event.kind, &event.payload, &event.idempotency_key, &event.at);
        Pending {
            task_id: task_id.to_owned(),
            event: event.clone(),
            summary: summary.clone(),
            last_seq,
            last_hash,
            hash,
            fence: None,
            reply: None,
        }
    }

    fn answer(&mut self, outcome: Option<AppendOutcome>) {
        if let Some(reply) = self.reply.take() {
            // The caller may have given up waiting; nothing is lost, the journal is the truth.
            let _ = reply.send(outcome);
        }
    }
}

/// The writer: one connection behind an async mutex, plus the group-commit queue.
#[derive(Debug, Clone)]
pub(super) struct Writer {
    slot: Arc<Mutex<Slot>>,
    queue: Arc<SyncMutex<Vec<Pending>>>,
    /// Group commits that appended at least one event, since the store was opened.
    commits: Arc<AtomicU64>,
    /// Events those commits appended.
    appends: Arc<AtomicU64>,
}

/// A `BEGIN IMMEDIATE` transaction on the writer connection, holding it exclusively (or,
/// from [`Writer::conn`], the bare connection outside any transaction).
///
/// Derefs to the connection, so it is used as `&mut *tx` like sqlx's own transactions.
/// Dropped without [`WriteTx::commit`], it rolls back (sqlx's deferred rollback, sent before
/// the connection's next statement).
pub(super) struct WriteTx {
    slot: OwnedMutexGuard<Slot>,
    open: bool,
}

impl WriteTx {
    /// Commits the transaction.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`] when SQLite refuses the commit (I/O, disk full); the transaction
    /// is then rolled back.
    pub(super) async fn commit(mut self) -> Result<(), StoreError> {
        SqliteTransactionManager::commit(&mut self.slot.conn).await?;
        self.open = false;
        crate::crash::committed();
        Ok(())
    }
}

impl Deref for WriteTx {
    type Target = SqliteConnection;

    fn deref(&self) -> &SqliteConnection {
        &self.slot.conn
    }
}

impl DerefMut for WriteTx {
    fn deref_mut(&mut self) -> &mut SqliteConnection {
        &mut self.slot.conn
    }
}

impl Drop for WriteTx {
    fn drop(&mut self) {
        if self.open {
            SqliteTransactionManager::start_rollback(&mut self.slot.conn);
        }
    }
}

impl Writer {
    /// Wraps an open, migrated connection.
    pub(super) fn new(conn: SqliteConnection) -> Writer {
        Writer {
            slot: Arc::new(Mutex::new(Slot { conn, closed: false, dirty: false })),
            queue: Arc::new(SyncMutex::new(Vec::new())),
            commits: Arc::default(),
            appends: Arc::default(),
        }
    }

    /// `(commits, appends)`: group commits that appended at least one event since the store
    /// was opened, and the events they appended (appends / commits = mean group size).
    pub(super) fn group_stats(&self) -> (u64, u64) {
        (self.commits.load(Ordering::Relaxed), self.appends.load(Ordering::Relaxed))
    }

    /// Appends waiting in the queue (tests hold the connection to build a group).
    #[cfg(test)]
    pub(super) fn queued(&self) -> usize {
        lock_queue(&self.queue).len()
    }

    /// Takes the slot, first rolling back what an interrupted group commit left open.
    async fn slot(&self) -> OwnedMutexGuard<Slot> {
        let mut slot = self.slot.clone().lock_owned().await;
        if slot.dirty {
            // "no transaction is active" when the batch got as far as its commit.
            let _ = sqlx::query("rollback").execute(&mut slot.conn).await;
            slot.dirty = false;
        }
        slot
    }

    /// The slot, unless the store is closed.
    async fn open_slot(&self) -> Result<OwnedMutexGuard<Slot>, StoreError> {
        let slot = self.slot().await;
        if slot.closed {
            return Err(StoreError::Sqlx(sqlx::Error::PoolClosed));
        }
        Ok(slot)
    }

    /// Takes the connection exclusively, outside any transaction: [`Writer::begin`] starts
    /// from it, and tests hold it so that appends queue up into one group.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`] (`PoolClosed`) once the store is closed.
    pub(super) async fn conn(&self) -> Result<WriteTx, StoreError> {
        Ok(WriteTx { slot: self.open_slot().await?, open: false })
    }

    /// Begins a `BEGIN IMMEDIATE` transaction: the write lock is taken up front (a deferred
    /// read-then-write can fail with `SQLITE_BUSY_SNAPSHOT` under WAL).
    ///
    /// # Errors
    /// [`StoreError::Sqlx`]: the store is closed (`PoolClosed`), or SQLite is busy beyond the
    /// busy timeout.
    pub(super) async fn begin(&self) -> Result<WriteTx, StoreError> {
        let mut tx = self.conn().await?;
        SqliteTransactionManager::begin(&mut tx, Some("BEGIN IMMEDIATE".into())).await?;
        tx.open = true;
        Ok(tx)
    }

    /// Refuses later writes (`PoolClosed`) and checkpoints the WAL into the database file.
    /// The connection itself closes when the last clone of the store is dropped.
    pub(super) async fn close(&self) {
        let mut slot = self.slot().await;
        slot.closed = true;
        if let Err(e) = sqlx::query("pragma wal_checkpoint(passive)").execute(&mut slot.conn).await {
            tracing::warn!("checkpointing on close: {e}");
        }
    }

    /// Appends `pending` through group commit: queued, then committed by whichever caller
    /// takes the connection next, together with every other append queued by then (at most
    /// [`MAX_GROUP`], one per execution), in one `BEGIN IMMEDIATE … COMMIT` round trip.
    ///
    /// Returns `Some(outcome)` when the event was appended, `None` when the caller must use
    /// the ordinary path: the head it expected is stale, the batch failed (it is rolled back
    /// whole; each append then reports its own error on the ordinary path), or the batch's
    /// committer was interrupted.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`] when the store is closed.
    pub(super) async fn append_grouped(
        &self,
        heads: &Heads,
        mut pending: Pending,
    ) -> Result<Option<AppendOutcome>, StoreError> {
        let (reply, mut answer) = oneshot::channel();
        pending.reply = Some(reply);
        lock_queue(&self.queue).push(pending);
        // Until answered: wait for the connection or for a committer that takes this append
        // with its own group, whichever comes first (a waiter already answered must not take
        // the connection in turn just to give it back); holding the connection, commit what is
        // queued. A committer may leave its own append out of its group (another append for the
        // same execution came first, or the group is full): it then goes round again rather
        // than wait for a committer that may never come.
        loop {
            let mut slot = tokio::select! {
                biased;
                outcome = &mut answer => return Ok(outcome.unwrap_or(None)),
                slot = self.open_slot() => slot?,
            };
            match answer.try_recv() {
                Ok(outcome) => return Ok(outcome),
                Err(oneshot::error::TryRecvError::Closed) => return Ok(None),
                Err(oneshot::error::TryRecvError::Empty) => {}
            }
            let batch = take_batch(&self.queue);
            slot.dirty = true;
            let appended = commit_group(&mut slot.conn, heads, batch).await;
            if appended > 0 {
                self.commits.fetch_add(1, Ordering::Relaxed);
                self.appends.fetch_add(appended, Ordering::Relaxed);
            }
            slot.dirty = false;
        }
    }
}

fn lock_queue(queue: &SyncMutex<Vec<Pending>>) -> std::sync::MutexGuard<'_, Vec<Pending>> {
    queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Takes up to [`MAX_GROUP`] appends from the queue, at most one per execution (a second one
/// for the same execution expects the head the first one moves; it waits for the next batch),
/// dropping those whose caller stopped waiting.
fn take_batch(queue: &SyncMutex<Vec<Pending>>) -> Vec<Pending> {
    let mut queue = lock_queue(queue);
    let mut seen = HashSet::new();
    let mut batch = Vec::new();
    let mut rest = Vec::new();
    for pending in queue.drain(..) {
        if pending.reply.as_ref().is_none_or(oneshot::Sender::is_closed) {
            continue;
        }
        if batch.len() < MAX_GROUP && seen.insert(pending.task_id.clone()) {
            batch.push(pending);
        } else {
            rest.push(pending);
        }
    }
    *queue = rest;
    batch
}

/// The SQL of one append: insert the event only while the execution's head is the one the
/// hash was chained on and, for a fenced append, while its lease (holder and epoch) is still
/// the execution's, then move the summary and head, returning the execution's new head
/// exactly when the insert happened (SQLite's change counts are not reliable across
/// BEGIN/COMMIT in one multi-statement batch).
const APPEND_SQL: &str = "insert into execution_events \
     (task_id, seq, kind, payload, idempotency_key, at, prev_hash, hash) \
     select ?, ?, ?, ?, ?, ?, ?, ? where exists \
     (select 1 from executions where task_id = ? and last_seq = ? and last_hash = ?) \
     and (? = 0 or exists (select 1 from leases where task_id = ? and holder = ? and epoch = ?)) \
     on conflict (task_id, idempotency_key) do nothing; \
     update executions set status = ?, current_phase = ?, steps_done = ?, \
     steps_total = ?, spend_usd = ?, last_seq = ?, last_hash = ?, updated_at = ? \
     where task_id = ? and last_seq = ? and exists (select 1 from execution_events \
     where task_id = ? and seq = ? and idempotency_key = ?) returning task_id, last_seq; ";

/// The whole batch's SQL for `n` appends (1 ≤ n ≤ [`MAX_GROUP`]): one round trip from BEGIN
/// to COMMIT. Built once per size, so sqlx's statement cache keys on the same text.
fn batch_sql(n: usize) -> &'static str {
    static SQL: OnceLock<Vec<String>> = OnceLock::new();
    let all = SQL.get_or_init(|| {
        (0..=MAX_GROUP)
            .map(|n| {
                let mut sql = String::with_capacity(32 + n * APPEND_SQL.len());
                sql.push_str("begin immediate; ");
                for _ in 0..n {
                    sql.push_str(APPEND_SQL);
                }
                sql.push_str("commit;");
                sql
            })
            .collect()
    });
    all.get(n).map_or("", String::as_str)
}

/// Commits `batch` in one transaction and answers every append in it. Returns how many
/// events it appended.
async fn commit_group(conn: &mut SqliteConnection, heads: &Heads, mut batch: Vec<Pending>) -> u64 {
    if batch.is_empty() {
        return 0;
    }
    let mut query = sqlx::query_as::<_, (String, i64)>(batch_sql(batch.len()));
    for p in &batch {
        let seq = p.last_seq + 1;
        query = query
            .bind(p.task_id.clone())
            .bind(seq)
            .bind(p.event.kind.clone())
            .bind(p.event.payload.clone())
            .bind(p.event.idempotency_key.clone())
            .bind(p.event.at.clone())
            .bind(p.last_hash.clone())
            .bind(p.hash.clone())
            .bind(p.task_id.clone())
            .bind(p.last_seq)
            .bind(p.last_hash.clone())
            .bind(i64::from(p.fence.is_some()))
            .bind(p.task_id.clone())
            .bind(p.fence.as_ref().map(|f| f.holder.clone()).unwrap_or_default())
            .bind(p.fence.as_ref().map_or(0, |f| f.epoch))
            .bind(p.summary.status.clone())
            .bind(p.summary.current_phase.clone())
            .bind(p.summary.steps_done)
            .bind(p.summary.steps_total)
            .bind(p.summary.spend_usd)
            .bind(seq)
            .bind(p.hash.clone())
            .bind(p.event.at.clone())
            .bind(p.task_id.clone())
            .bind(p.last_seq)
            .bind(p.task_id.clone())
            .bind(seq)
            .bind(p.event.idempotency_key.clone());
    }
    match query.fetch_all(&mut *conn).await {
        Ok(rows) => {
            crate::crash::committed();
            let appended: HashSet<(String, i64)> = rows.into_iter().collect();
            let mut count = 0;
            for p in &mut batch {
                let seq = p.last_seq + 1;
                if appended.contains(&(p.task_id.clone(), seq)) {
                    if let Ok(mut heads) = heads.lock() {
                        heads.insert(p.task_id.clone(), (seq, p.hash.clone()));
                    }
                    let hash = p.hash.clone();
                    p.answer(Some(AppendOutcome::Appended { seq, hash }));
                    count += 1;
                } else {
                    p.answer(None);
                }
            }
            count
        }
        Err(err) => {
            // A statement failed mid-batch: end the transaction it opened, if any, and let
            // every append in it retry alone and report its own error.
            tracing::debug!(appends = batch.len(), "group commit failed, retrying alone: {err}");
            let _ = sqlx::query("rollback").execute(&mut *conn).await;
            for p in &mut batch {
                p.answer(None);
            }
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{AppendOutcome, NewEvent, Store, Summary};
    use super::{lock_queue, Pending};

    fn event(key: &str) -> NewEvent {
        NewEvent {
            kind: "step_done".into(),
            payload: "{}".into(),
            idempotency_key: key.into(),
            at: "2026-01-15T09:00:01Z".into(),
        }
    }

    fn summary() -> Summary {
        Summary {
            status: "running".into(),
            current_phase: "build".into(),
            steps_done: 1,
            steps_total: 2,
            spend_usd: 0.0,
        }
    }

    /// The input that hung: the caller that takes the connection finds another append for
    /// the same execution ahead of its own in the queue, whose owner has queued it but not yet
    /// asked for the connection. Its group leaves its own append out; it must commit that one
    /// too instead of waiting for a committer that never comes.
    #[tokio::test]
    async fn a_committer_whose_own_append_was_left_out_of_its_group_commits_it_next() {
        let dir = tempfile::TempDir::new().unwrap();
        let store = Store::open(&dir.path().join("baton.db")).await.unwrap();
        store.create_execution("t1", "{}", &summary(), "2026-01-15T09:00:00Z").await.unwrap();
        store.append("t1", &[event("first")], &summary()).await.unwrap();
        let (seq, hash) = store.lite().heads.lock().unwrap().get("t1").cloned().unwrap();

        let (reply, mut ahead_answer) = tokio::sync::oneshot::channel();
        let mut ahead = Pending::new("t1", &event("ahead"), &summary(), seq, hash.clone());
        ahead.reply = Some(reply);
        lock_queue(&store.lite().writer.queue).push(ahead);

        let own = Pending::new("t1", &event("own"), &summary(), seq, hash);
        let outcome = tokio::time::timeout(
            std::time::Duration::from_secs(30),
            store.lite().writer.append_grouped(&store.lite().heads, own),
        )
        .await
        .expect("the committer waited for an append it had left out of its own group")
        .unwrap();
        assert_eq!(outcome, None, "its head went stale behind the one ahead: the caller's ordinary path takes it");
        assert!(matches!(ahead_answer.try_recv(), Ok(Some(AppendOutcome::Appended { seq: 2, .. }))));
    }

    #[tokio::test]
    async fn a_group_commit_interrupted_midway_is_rolled_back_by_the_next_writer() {
        let dir = tempfile::TempDir::new().unwrap();
        let store = Store::open(&dir.path().join("baton.db")).await.unwrap();
        {
            // What a committer dropped between its BEGIN and its COMMIT leaves behind.
            let mut slot = store.lite().writer.slot().await;
            sqlx::query("begin immediate").execute(&mut slot.conn).await.unwrap();
            slot.dirty = true;
        }
        let mut tx = store.lite().writer.begin().await.unwrap();
        sqlx::query("insert into settings (key, value) values ('k', 'v')").execute(&mut *tx).await.unwrap();
        tx.commit().await.unwrap();
    }
}
