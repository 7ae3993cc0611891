//! The store's writing side: the write lock of this process, the sqlx writer connection that
//! every general write transaction runs on, and the journal thread that group-commits
//! single-event appends on a connection of its own.
//!
//! Owns three things. The *slot*: one sqlx connection held for the store's whole life (not
//! borrowed from a pool: sqlx pings a pooled connection on every release, on a spawned task
//! the next borrower waits for), behind an async mutex that is this process's write lock.
//! The *queue* of single-event appends whose caller knows the chain head. And the *journal
//! thread*, a thread of our own owning a rusqlite connection to the same file: it takes the
//! write lock, takes every append queued by then (at most [`MAX_GROUP`], one per execution),
//! commits them in one `BEGIN IMMEDIATE … COMMIT` (one fsync) and answers each caller. An
//! append is so one hand-off to that thread and one reply, instead of a hop to sqlx's worker
//! thread and back per statement (issue 14.9); a lone append (nothing queued, the lock free, a
//! multi-threaded runtime) skips even that and commits on its caller's thread, on the same
//! connection under the same lock (`Writer::commit_inline`). A one-shot process
//! (`Workload::OneShot`) starts no thread: it appends on the sqlx connection. Both connections
//! write only while holding the slot, so in one process they never wait on each other's SQLite
//! lock; other processes are serialised by SQLite's lock and the busy timeout, every write
//! transaction beginning `IMMEDIATE` on either connection.
//!
//! Never interprets payloads and never decides what an event means: an append that cannot
//! take the group path (stale head, duplicate key, a failed group) is handed back to the
//! caller's ordinary transaction on the sqlx connection.

use std::collections::{HashMap, HashSet};
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex as SyncMutex, MutexGuard as SyncGuard};

use sqlx::sqlite::{SqliteConnection, SqliteTransactionManager};
use sqlx::TransactionManager as _;
use tokio::sync::{oneshot, Mutex, OnceCell, OwnedMutexGuard};

use super::{AppendOutcome, BindSummary as _, Fence, NewEvent, StoreError, Summary, BUSY_TIMEOUT};

/// At most this many appends share one commit.
pub(super) const MAX_GROUP: usize = 64;

/// Last known chain head (seq, hash) per execution, from this process's appends.
pub(super) type Heads = Arc<SyncMutex<HashMap<String, (i64, String)>>>;

/// The sqlx writer connection, and whether the store is closed.
#[derive(Debug)]
pub(super) struct Slot {
    conn: SqliteConnection,
    /// Set by [`Writer::close`]: later writes fail with `PoolClosed`.
    closed: bool,
}

/// One single-event append waiting for the journal thread.
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
    /// What the execution's lease must be for the append to land; the SQL checks it.
    pub(super) guard: LeaseGuard,
    /// `Some` once appended, `None` when the caller must take the ordinary path. Dropped
    /// unanswered only when the journal thread stopped (or the caller gave up).
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
            guard: LeaseGuard::Any,
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

/// What a grouped append requires of the execution's lease, checked in its own insert.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum LeaseGuard {
    /// Nothing: the caller already holds the lease through the store's own path, or needs none.
    Any,
    /// The lease is still this one (a driver's, or a one-shot command's brief lease).
    Held(Fence),
    /// No lease at all: nobody drives the execution, so a one-shot command may record without
    /// taking one (its insert is guarded by the head it read, like every grouped append).
    Unleased,
}

impl LeaseGuard {
    /// The guard as [`INSERT_SQL`]'s `?10`–`?12`: (0 any / 1 held / 2 unleased, holder, epoch).
    fn params(&self) -> (i64, &str, i64) {
        match self {
            LeaseGuard::Any => (0, "", 0),
            LeaseGuard::Held(fence) => (1, fence.holder.as_str(), fence.epoch),
            LeaseGuard::Unleased => (2, "", 0),
        }
    }
}

/// Why the journal thread takes no more appends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stopped {
    /// The store was closed (or dropped).
    Closed,
    /// The thread ended on its own: it panicked.
    Died,
}

impl Stopped {
    fn error(self) -> StoreError {
        match self {
            Stopped::Closed => StoreError::Sqlx(sqlx::Error::PoolClosed),
            Stopped::Died => StoreError::JournalWriterStopped,
        }
    }
}

/// Test hook: a closure the journal thread runs on its connection.
#[cfg(test)]
type Probe = Box<dyn FnOnce(&rusqlite::Connection) + Send>;

/// The appends waiting for the journal thread, and whether it has stopped.
#[derive(Default)]
struct Queue {
    pending: Vec<Pending>,
    stopped: Option<Stopped>,
    /// Test hook: closures to run on the journal thread's connection.
    #[cfg(test)]
    probes: Vec<Probe>,
}

impl Queue {
    /// Whether the journal thread has something to do.
    fn has_work(&self) -> bool {
        #[cfg(test)]
        if !self.probes.is_empty() {
            return true;
        }
        !self.pending.is_empty() || self.stopped.is_some()
    }
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue").field("pending", &self.pending).field("stopped", &self.stopped).finish_non_exhaustive()
    }
}

/// What the writer's clones and its journal thread share.
#[derive(Debug)]
struct Shared {
    /// The write lock of this process, with the sqlx connection.
    slot: Arc<Mutex<Slot>>,
    queue: SyncMutex<Queue>,
    /// Wakes the journal thread when an append is queued or the writer stops.
    wake: Condvar,
    heads: Heads,
    /// The database file, for the journal thread's connection.
    path: PathBuf,
    /// Set once the journal thread runs: it is started by the first grouped append, so a
    /// process that never takes that path (a one-shot CLI command, whose first append has no
    /// known chain head) never pays for a thread and a second connection.
    thread: OnceCell<()>,
    /// The journal connection, opened by the journal thread as it starts. Used only while the
    /// slot is held: by the thread for a group, or by an appender committing its own append
    /// on its thread when nothing else is queued ([`Writer::commit_inline`]).
    conn: SyncMutex<Option<rusqlite::Connection>>,
    /// [`super::Workload::OneShot`]: grouped appends run on the sqlx connection
    /// ([`Writer::append_direct`]) and the journal thread is never started.
    direct: bool,
    /// Group commits that appended at least one event, since the store was opened.
    commits: AtomicU64,
    /// Events those commits appended.
    appends: AtomicU64,
    /// Test hook: appends committed on their caller's thread ([`Writer::commit_inline`]).
    #[cfg(test)]
    inline: AtomicU64,
    /// Test hook: the journal thread panics before its next group.
    #[cfg(test)]
    panic_next: std::sync::atomic::AtomicBool,
}

impl Shared {
    fn queue(&self) -> SyncGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The journal connection (`None` until the journal thread opened it).
    fn journal_conn(&self) -> SyncGuard<'_, Option<rusqlite::Connection>> {
        self.conn.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Stops the journal thread (a first reason sticks) and drops every queued append: its
    /// caller wakes up and reports why.
    fn stop(&self, why: Stopped) {
        let dropped = {
            let mut queue = self.queue();
            queue.stopped.get_or_insert(why);
            std::mem::take(&mut queue.pending)
        };
        drop(dropped);
        self.wake.notify_all();
    }
}

/// The writer: the slot, the queue and the journal thread. Cheap to clone.
#[derive(Debug, Clone)]
pub(super) struct Writer {
    shared: Arc<Shared>,
    /// Stops the journal thread once the last clone is dropped.
    _owner: Arc<Owner>,
}

/// Held by every [`Writer`] clone (never by the journal thread): the last one dropped stops it.
#[derive(Debug)]
struct Owner(Arc<Shared>);

impl Drop for Owner {
    fn drop(&mut self) {
        self.0.stop(Stopped::Closed);
    }
}

/// A `BEGIN IMMEDIATE` transaction on the sqlx writer connection, holding the write lock (or,
/// from [`Writer::conn`], the bare connection outside any transaction).
///
/// Derefs to the connection, so it is used as `&mut *tx` like sqlx's own transactions.
/// Dropped without [`WriteTx::commit`], it rolls back (sqlx sends the rollback to its worker
/// at once; should the journal thread begin before the worker ran it, SQLite's busy handler
/// waits the few microseconds that takes).
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

impl WriteTx {
    /// Begins a deferred `BEGIN` transaction on a connection from [`Writer::try_read`]: a
    /// read transaction, one consistent view of the file, that takes no write lock.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`] when SQLite refuses to begin.
    pub(super) async fn begin_read(mut self) -> Result<WriteTx, StoreError> {
        SqliteTransactionManager::begin(&mut self.slot.conn, Some("BEGIN".into())).await?;
        self.open = true;
        Ok(self)
    }

    /// Ends a read transaction from [`WriteTx::begin_read`] (a `COMMIT` of nothing written,
    /// which is not a durable commit: the crash hook of `crash::committed` is not hit).
    ///
    /// # Errors
    /// [`StoreError::Sqlx`] when SQLite refuses to end it.
    pub(super) async fn end_read(mut self) -> Result<(), StoreError> {
        SqliteTransactionManager::commit(&mut self.slot.conn).await?;
        self.open = false;
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
    /// Wraps an open, migrated sqlx connection to `path`. The journal thread, on a rusqlite
    /// connection of its own to the same file (WAL, `synchronous=FULL`, the busy timeout,
    /// foreign keys on, as every connection of the store), is started by the first grouped
    /// append ([`Writer::append_grouped`]).
    ///
    /// With `direct` (a one-shot process, [`super::Workload::OneShot`]) the thread is never
    /// started: a grouped append runs on the sqlx connection ([`Writer::append_direct`]).
    pub(super) fn new(conn: SqliteConnection, path: &Path, heads: Heads, direct: bool) -> Writer {
        let shared = Arc::new(Shared {
            direct,
            slot: Arc::new(Mutex::new(Slot { conn, closed: false })),
            queue: SyncMutex::default(),
            wake: Condvar::new(),
            heads,
            path: path.to_path_buf(),
            thread: OnceCell::new(),
            conn: SyncMutex::new(None),
            commits: AtomicU64::default(),
            appends: AtomicU64::default(),
            #[cfg(test)]
            inline: AtomicU64::default(),
            #[cfg(test)]
            panic_next: std::sync::atomic::AtomicBool::new(false),
        });
        Writer { _owner: Arc::new(Owner(shared.clone())), shared }
    }

    /// Starts the journal thread unless it runs (or ran) already; waits until its connection
    /// is open. A failed start leaves nothing behind, and the next grouped append tries again.
    ///
    /// # Errors
    /// [`StoreError::OpenJournalWriter`] when the thread cannot be started or its connection
    /// cannot be opened or configured.
    async fn start_thread(&self) -> Result<(), StoreError> {
        let shared = &self.shared;
        let failed = |reason: String| StoreError::OpenJournalWriter { path: shared.path.clone(), reason };
        shared
            .thread
            .get_or_try_init(|| async {
                let (opened, is_open) = oneshot::channel();
                // The thread holds the shared state, never an `Owner`: dropping the last
                // writer still stops it.
                let thread_shared = shared.clone();
                std::thread::Builder::new()
                    .name("baton-journal".into())
                    .spawn(move || match open_journal_conn(&thread_shared.path) {
                        Ok(conn) => {
                            *thread_shared.journal_conn() = Some(conn);
                            let _ = opened.send(Ok(()));
                            journal_thread(&thread_shared);
                        }
                        Err(e) => {
                            let _ = opened.send(Err(e.to_string()));
                        }
                    })
                    .map_err(|e| failed(format!("starting its thread: {e}")))?;
                match is_open.await {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(reason)) => Err(failed(reason)),
                    Err(_) => Err(failed("its thread ended while opening it".into())),
                }
            })
            .await
            .map(|_| ())
    }

    /// `(commits, appends)`: group commits that appended at least one event since the store
    /// was opened, and the events they appended (appends / commits = mean group size).
    pub(super) fn group_stats(&self) -> (u64, u64) {
        (self.shared.commits.load(Ordering::Relaxed), self.shared.appends.load(Ordering::Relaxed))
    }

    /// Whether the journal thread was started (tests of [`super::Workload::OneShot`]).
    #[cfg(test)]
    pub(super) fn journal_thread_started(&self) -> bool {
        self.shared.thread.initialized()
    }

    /// Appends committed on their caller's thread (tests of [`Writer::commit_inline`]).
    #[cfg(test)]
    pub(super) fn inline_commits(&self) -> u64 {
        self.shared.inline.load(Ordering::Relaxed)
    }

    /// Appends waiting in the queue (tests hold the connection to build a group).
    #[cfg(test)]
    pub(super) fn queued(&self) -> usize {
        self.shared.queue().pending.len()
    }

    /// Makes the journal thread panic before its next group (tests of its death).
    #[cfg(test)]
    pub(super) fn panic_journal_thread(&self) {
        self.shared.panic_next.store(true, Ordering::SeqCst);
    }

    /// Runs `probe` on the journal thread's connection and returns what it returns.
    #[cfg(test)]
    pub(super) async fn probe_journal_conn<T: Send + 'static>(
        &self,
        probe: impl FnOnce(&rusqlite::Connection) -> T + Send + 'static,
    ) -> T {
        self.start_thread().await.expect("the journal thread started");
        let (tx, rx) = oneshot::channel();
        self.shared.queue().probes.push(Box::new(move |conn| {
            let _ = tx.send(probe(conn));
        }));
        self.shared.wake.notify_one();
        rx.await.expect("the journal thread ran the probe")
    }

    /// The slot, unless the store is closed.
    async fn open_slot(&self) -> Result<OwnedMutexGuard<Slot>, StoreError> {
        let slot = self.shared.slot.clone().lock_owned().await;
        if slot.closed {
            return Err(StoreError::Sqlx(sqlx::Error::PoolClosed));
        }
        Ok(slot)
    }

    /// Takes the write lock and the sqlx connection exclusively, outside any transaction:
    /// [`Writer::begin`] starts from it, and tests hold it so that appends queue up into one
    /// group.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`] (`PoolClosed`) once the store is closed.
    pub(super) async fn conn(&self) -> Result<WriteTx, StoreError> {
        Ok(WriteTx { slot: self.open_slot().await?, open: false })
    }

    /// The sqlx connection to read on, outside any transaction, when this is a one-shot store
    /// (`direct`) and nothing holds it: a one-shot process reads on its writer connection
    /// instead of opening a second one (each connection costs a thread, a parse of the
    /// schema and fresh memory: about 6% of an `execute next`, issue 14.8). `None` for a
    /// long-lived store, a closed one, or while a write (or another read) holds the
    /// connection: the caller reads on its reader pool then, so a read never waits for the
    /// write lock.
    pub(super) fn try_read(&self) -> Option<WriteTx> {
        if !self.shared.direct {
            return None;
        }
        let slot = self.shared.slot.clone().try_lock_owned().ok()?;
        (!slot.closed).then_some(WriteTx { slot, open: false })
    }

    /// Begins a `BEGIN IMMEDIATE` transaction on the sqlx connection: the write lock is taken
    /// up front (a deferred read-then-write can fail with `SQLITE_BUSY_SNAPSHOT` under WAL).
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

    /// Refuses later writes (`PoolClosed`; appends still queued are answered so), stops the
    /// journal thread once its group in flight is committed, and checkpoints the WAL into the
    /// database file: a long-lived process always (passive); a one-shot process only once the
    /// WAL file is longer than [`ONE_SHOT_WAL_BYTES`], and then empties it. The sqlx connection
    /// itself closes when the last clone of the store is dropped.
    pub(super) async fn close(&self) {
        let mut slot = self.shared.slot.clone().lock_owned().await;
        slot.closed = true;
        self.shared.stop(Stopped::Closed);
        let checkpoint = if !self.shared.direct {
            "pragma wal_checkpoint(passive)"
        } else if self.wal_len() > ONE_SHOT_WAL_BYTES {
            // No waiting for another process's reader: busy timeout 0 (the next one to leave
            // with a long WAL empties it).
            "pragma busy_timeout = 0; pragma wal_checkpoint(truncate)"
        } else {
            return;
        };
        if let Err(e) = sqlx::raw_sql(checkpoint).execute(&mut slot.conn).await {
            tracing::debug!("checkpointing on close: {e}");
        }
    }

    /// Length of the database's WAL file in bytes (0 when there is none).
    fn wal_len(&self) -> u64 {
        let mut wal = self.shared.path.clone().into_os_string();
        wal.push("-wal");
        std::fs::metadata(wal).map_or(0, |m| m.len())
    }

    /// Appends `pending` through group commit: queued for the journal thread, which commits it
    /// with every other append queued by then in one transaction and answers. The caller
    /// returns only once its event is durable.
    ///
    /// Returns `Some(outcome)` when the event was appended, `None` when the caller must use
    /// the ordinary path: the head it expected is stale, the key is a duplicate, or the group
    /// failed (it is rolled back whole; each append then reports its own error on the ordinary
    /// path). A caller that stops waiting while its append is still queued leaves nothing
    /// written; once the thread has taken it, it is committed (a retry with the same key finds
    /// it a duplicate).
    ///
    /// # Errors
    /// [`StoreError::Sqlx`] (`PoolClosed`) when the store is closed;
    /// [`StoreError::JournalWriterStopped`] when the journal thread died;
    /// [`StoreError::OpenJournalWriter`] when it could not be started (the first grouped append).
    pub(super) async fn append_grouped(&self, mut pending: Pending) -> Result<Option<AppendOutcome>, StoreError> {
        if self.shared.direct {
            return self.append_direct(&pending).await;
        }
        if let Some(stopped) = self.shared.queue().stopped {
            return Err(stopped.error());
        }
        self.start_thread().await?;
        let (reply, answer) = oneshot::channel();
        pending.reply = Some(reply);
        match self.commit_inline(pending) {
            Some(not_inline) => pending = not_inline,
            // Committed and answered on this thread.
            None => return answer.await.map_err(|_| self.shared.queue().stopped.unwrap_or(Stopped::Died).error()),
        }
        {
            let mut queue = self.shared.queue();
            if let Some(stopped) = queue.stopped {
                return Err(stopped.error());
            }
            queue.pending.push(pending);
        }
        self.shared.wake.notify_one();
        match answer.await {
            Ok(outcome) => Ok(outcome),
            // Dropped unanswered: the thread stopped (it may still be unwinding from a panic,
            // before it could record why).
            Err(_) => Err(self.shared.queue().stopped.unwrap_or(Stopped::Died).error()),
        }
    }

    /// A grouped append without the journal thread, for a process that makes one or two
    /// appends and exits ([`super::Workload::OneShot`]): the same guarded insert and summary
    /// update as a group of one ([`INSERT_SQL`], [`UPDATE_SQL`]), in one `BEGIN IMMEDIATE`
    /// transaction on the sqlx connection, so the process opens no second connection (each
    /// parses the whole schema) and starts no thread.
    ///
    /// Returns what [`Writer::append_grouped`] returns: `Some` once appended, `None` when the
    /// caller must take the ordinary path (stale head, duplicate key, a lease that is not the
    /// one the guard asks for, or a statement that failed: nothing is written then).
    ///
    /// # Errors
    /// [`StoreError::Sqlx`] when the store is closed or SQLite stays busy past the busy
    /// timeout (the transaction could not begin).
    async fn append_direct(&self, p: &Pending) -> Result<Option<AppendOutcome>, StoreError> {
        let mut tx = self.begin().await?;
        let seq = p.last_seq + 1;
        let (fenced, holder, epoch) = p.guard.params();
        let inserted = sqlx::query(INSERT_SQL)
            .bind(&p.task_id)
            .bind(seq)
            .bind(&p.event.kind)
            .bind(&p.event.payload)
            .bind(&p.event.idempotency_key)
            .bind(&p.event.at)
            .bind(&p.last_hash)
            .bind(&p.hash)
            .bind(p.last_seq)
            .bind(fenced)
            .bind(holder)
            .bind(epoch)
            .execute(&mut *tx)
            .await;
        // Not inserted, or failed: the dropped transaction rolls back and the caller's
        // ordinary path appends (or reports its own error).
        let Ok(inserted) = inserted else { return Ok(None) };
        if inserted.rows_affected() != 1 {
            return Ok(None);
        }
        let moved = sqlx::query(UPDATE_SQL)
            .bind(&p.task_id)
            .bind_summary(&p.summary)
            .bind(seq)
            .bind(&p.hash)
            .bind(&p.event.at)
            .bind(p.last_seq)
            .execute(&mut *tx)
            .await;
        // The insert checked the head in this transaction, so the update moves exactly it.
        if !matches!(moved, Ok(ref m) if m.rows_affected() == 1) {
            return Ok(None);
        }
        tx.commit().await?;
        self.shared.commits.fetch_add(1, Ordering::Relaxed);
        self.shared.appends.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut heads) = self.shared.heads.lock() {
            heads.insert(p.task_id.clone(), (seq, p.hash.clone()));
        }
        Ok(Some(AppendOutcome::Appended { seq, hash: p.hash.clone() }))
    }

    /// Commits `pending` on the calling thread, as a group of one on the journal connection,
    /// when nothing else waits: no append queued, the write lock free, the journal thread
    /// started, and a multi-threaded tokio runtime (the commit runs in
    /// [`tokio::task::block_in_place`], so the runtime's other tasks move to another thread
    /// while this one waits for the fsync). A lone append so skips the hand-off to the journal
    /// thread and its reply, two thread wake-ups that cost about as much as the commit's own
    /// statements (issue 14.9). Answers `pending` through its reply channel and returns `None`;
    /// returns `Some(pending)`, untouched, when any condition does not hold: the caller queues
    /// it for the journal thread, which groups it with what comes in meanwhile.
    fn commit_inline(&self, pending: Pending) -> Option<Pending> {
        let multi_thread = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        if !multi_thread {
            return Some(pending);
        }
        {
            let queue = self.shared.queue();
            if !queue.pending.is_empty() || queue.stopped.is_some() {
                return Some(pending);
            }
        }
        let Ok(slot) = self.shared.slot.clone().try_lock_owned() else { return Some(pending) };
        if slot.closed {
            return Some(pending);
        }
        {
            let mut guard = self.shared.journal_conn();
            let Some(conn) = guard.as_mut() else { return Some(pending) };
            tokio::task::block_in_place(|| commit_group(conn, &self.shared, vec![pending]));
        }
        #[cfg(test)]
        self.shared.inline.fetch_add(1, Ordering::Relaxed);
        drop(slot);
        None
    }
}

/// Marks the journal thread stopped however it ends: a panic, or a return after the store
/// was closed (whose reason then sticks).
struct StopOnExit<'a>(&'a Shared);

impl Drop for StopOnExit<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            tracing::error!("the journal writer thread panicked; appends fail until the store is reopened");
        }
        self.0.stop(Stopped::Died);
    }
}

/// WAL bytes beyond which a one-shot process empties the WAL as it leaves
/// ([`Writer::close`]; about 60 pages). The first connection of every process rebuilds the WAL's
/// index by reading each frame in the WAL, and a process that exits without closing the
/// database leaves its frames there (issue 14.8: 739 frames, ~2 ms per call, at step 250 of
/// 500). Emptying it on every exit instead cost each writing command four more fsyncs: the
/// checkpoint's two, and the fresh WAL's header and directory on the next commit.
pub(super) const ONE_SHOT_WAL_BYTES: u64 = 256 * 1024;

/// Opens the journal thread's connection to the migrated database at `path`.
fn open_journal_conn(path: &Path) -> rusqlite::Result<rusqlite::Connection> {
    use rusqlite::OpenFlags;
    let conn = rusqlite::Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_PRIVATE_CACHE,
    )?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    // The sqlx connection made the file WAL (persistent); a connection opening it joins it.
    let mode: String = conn.query_row("pragma journal_mode", [], |row| row.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(rusqlite::Error::InvalidParameterName(format!("journal_mode is {mode}, not wal")));
    }
    conn.execute_batch("pragma synchronous = full; pragma foreign_keys = on;")?;
    Ok(conn)
}

/// The journal thread: waits for queued appends, takes the write lock, commits a group,
/// answers, until the writer stops.
fn journal_thread(shared: &Shared) {
    let _stop = StopOnExit(shared);
    loop {
        {
            let mut queue = shared.queue();
            while !queue.has_work() {
                queue = shared.wake.wait(queue).unwrap_or_else(std::sync::PoisonError::into_inner);
            }
            if queue.stopped.is_some() {
                return;
            }
            #[cfg(test)]
            {
                for probe in std::mem::take(&mut queue.probes) {
                    if let Some(conn) = shared.journal_conn().as_ref() {
                        probe(conn);
                    }
                }
                if queue.pending.is_empty() {
                    continue;
                }
            }
        }
        // Appends queued while this waits for the lock (a general write transaction, or a test
        // holding the connection) join this group.
        let slot = shared.slot.blocking_lock();
        if slot.closed {
            return;
        }
        #[cfg(test)]
        if shared.panic_next.swap(false, Ordering::SeqCst) {
            panic!("journal writer thread: panicking as the test asked");
        }
        let batch = take_batch(shared);
        if let Some(conn) = shared.journal_conn().as_mut() {
            commit_group(conn, shared, batch);
        }
        drop(slot);
    }
}

/// Takes up to [`MAX_GROUP`] appends from the queue, at most one per execution (a second one
/// for the same execution expects the head the first one moves; it waits for the next group),
/// dropping those whose caller stopped waiting.
fn take_batch(shared: &Shared) -> Vec<Pending> {
    let mut queue = shared.queue();
    let mut seen = HashSet::new();
    let mut batch = Vec::new();
    let mut rest = Vec::new();
    for pending in queue.pending.drain(..) {
        if pending.reply.as_ref().is_none_or(oneshot::Sender::is_closed) {
            continue;
        }
        if batch.len() < MAX_GROUP && seen.insert(pending.task_id.clone()) {
            batch.push(pending);
        } else {
            rest.push(pending);
        }
    }
    queue.pending = rest;
    batch
}

/// One append's insert: the event only while the execution's head is the one the hash was
/// chained on and, as its [`LeaseGuard`] says (`?10`: 0 any, 1 held, 2 unleased), while its
/// lease (holder and epoch) is still the execution's or while the execution has no lease; a
/// duplicate key inserts nothing.
const INSERT_SQL: &str = "insert into execution_events \
     (task_id, seq, kind, payload, idempotency_key, at, prev_hash, hash) \
     select ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8 where exists \
     (select 1 from executions where task_id = ?1 and last_seq = ?9 and last_hash = ?7) \
     and (?10 = 0 \
       or (?10 = 1 and exists (select 1 from leases where task_id = ?1 and holder = ?11 and epoch = ?12)) \
       or (?10 = 2 and not exists (select 1 from leases where task_id = ?1))) \
     on conflict (task_id, idempotency_key) do nothing";

/// The summary and head moved by an inserted event.
const UPDATE_SQL: &str = "update executions set status = ?2, current_phase = ?3, steps_done = ?4, \
     steps_total = ?5, spend_usd = ?6, last_seq = ?7, last_hash = ?8, updated_at = ?9 \
     where task_id = ?1 and last_seq = ?10";

/// Commits `batch` in one transaction, counts it in the metrics and answers every append in
/// it (counted before any caller is answered, so a caller sees its own commit counted).
fn commit_group(conn: &mut rusqlite::Connection, shared: &Shared, mut batch: Vec<Pending>) {
    if batch.is_empty() {
        return;
    }
    match write_group(conn, &batch) {
        Ok(appended) => {
            crate::crash::committed();
            let count = appended.iter().filter(|a| **a).count() as u64;
            if count > 0 {
                shared.commits.fetch_add(1, Ordering::Relaxed);
                shared.appends.fetch_add(count, Ordering::Relaxed);
            }
            for (p, appended) in batch.iter_mut().zip(appended) {
                if appended {
                    let seq = p.last_seq + 1;
                    if let Ok(mut heads) = shared.heads.lock() {
                        heads.insert(p.task_id.clone(), (seq, p.hash.clone()));
                    }
                    let hash = p.hash.clone();
                    p.answer(Some(AppendOutcome::Appended { seq, hash }));
                } else {
                    p.answer(None);
                }
            }
        }
        Err(err) => {
            // A statement failed: end the transaction if SQLite has not, and let every append
            // in it retry alone and report its own error.
            tracing::debug!(appends = batch.len(), "group commit failed, retrying alone: {err}");
            if !conn.is_autocommit() {
                if let Err(e) = conn.execute_batch("rollback") {
                    tracing::warn!("rolling back a failed group commit: {e}");
                }
            }
            for p in &mut batch {
                p.answer(None);
            }
        }
    }
}

/// `BEGIN IMMEDIATE`, each append's guarded insert and (when it inserted) its summary
/// update, `COMMIT`, on cached statements. Returns, per append, whether it was inserted.
fn write_group(conn: &rusqlite::Connection, batch: &[Pending]) -> rusqlite::Result<Vec<bool>> {
    use rusqlite::params;
    conn.prepare_cached("begin immediate")?.execute([])?;
    let mut insert = conn.prepare_cached(INSERT_SQL)?;
    let mut update = conn.prepare_cached(UPDATE_SQL)?;
    let mut appended = Vec::with_capacity(batch.len());
    for p in batch {
        let seq = p.last_seq + 1;
        let (fenced, holder, epoch) = p.guard.params();
        let inserted = insert.execute(params![
            p.task_id,
            seq,
            p.event.kind,
            p.event.payload,
            p.event.idempotency_key,
            p.event.at,
            p.last_hash,
            p.hash,
            p.last_seq,
            fenced,
            holder,
            epoch,
        ])? == 1;
        if inserted {
            let s = &p.summary;
            let moved = update.execute(params![
                p.task_id,
                s.status,
                s.current_phase,
                s.steps_done,
                s.steps_total,
                s.spend_usd,
                seq,
                p.hash,
                p.event.at,
                p.last_seq,
            ])?;
            if moved != 1 {
                // Cannot happen: the insert checked the head in this transaction.
                return Err(rusqlite::Error::StatementChangedRows(moved));
            }
        }
        appended.push(inserted);
    }
    conn.prepare_cached("commit")?.execute([])?;
    Ok(appended)
}

#[cfg(test)]
mod tests {
    use super::super::{AppendOutcome, NewEvent, Store, Summary};
    use super::Pending;

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

    /// The input that hung the committer-elected design: another append for the same
    /// execution is ahead of the caller's in the queue, and its owner is not waiting for the
    /// connection. The journal thread commits it in one group and the caller's (now stale) in
    /// the next, instead of waiting for a committer that never comes.
    #[tokio::test]
    async fn an_append_left_out_of_a_group_for_its_execution_is_answered_by_the_next() {
        let dir = tempfile::TempDir::new().unwrap();
        let store = Store::open(&dir.path().join("baton.db")).await.unwrap();
        store.create_execution("t1", "{}", &summary(), "2026-01-15T09:00:00Z").await.unwrap();
        store.append("t1", &[event("first")], &summary()).await.unwrap();
        let (seq, hash) = store.lite().heads.lock().unwrap().get("t1").cloned().unwrap();

        let writer = &store.lite().writer;
        let (reply, mut ahead_answer) = tokio::sync::oneshot::channel();
        let mut ahead = Pending::new("t1", &event("ahead"), &summary(), seq, hash.clone());
        ahead.reply = Some(reply);
        // Queued without waking the thread: the caller's own append wakes it.
        writer.shared.queue().pending.push(ahead);

        let own = Pending::new("t1", &event("own"), &summary(), seq, hash);
        let outcome = tokio::time::timeout(std::time::Duration::from_secs(30), writer.append_grouped(own))
            .await
            .expect("the append left out of the first group was never answered")
            .unwrap();
        assert_eq!(outcome, None, "its head went stale behind the one ahead: the caller's ordinary path takes it");
        assert!(matches!(ahead_answer.try_recv(), Ok(Some(AppendOutcome::Appended { seq: 2, .. }))));
    }
}
