//! Persistence: the per-execution event journal, snapshots, board summaries, driver leases and
//! the active task pointer, on SQLite (the default, one file) or PostgreSQL (`pg`, chosen by a
//! `postgres://` database URL).
//!
//! The store owns the database and its schema: `migrations/` (SQLite) and
//! `migrations/postgres/` (the same migrations, by number and name, in PostgreSQL's dialect).
//! Every public method of [`Store`](crate::store::Store) has one contract and two implementations: the SQLite one in
//! this module's aggregate files, the PostgreSQL one in `pg` (same SQL shapes, `$n`
//! parameters, row locks where SQLite relies on its single writer). Plans, event payloads and
//! snapshots are opaque JSON text: the store checks that they parse and never interprets them
//! (save the `/metrics` aggregates of `metrics.rs`, which sum two payload fields by name in
//! SQL), so it never imports `engine`, `runtime` or anything above it. Loading an execution (latest
//! snapshot + replay of the events after it) is composed by the caller, which then calls
//! `engine`.
//!
//! Invariants (SQLite; `pg` states its PostgreSQL equivalents):
//! - Every write is one `BEGIN IMMEDIATE` transaction under this process's one write lock, so
//!   a crash at any moment leaves either all of a batch or none of it. Single-event appends
//!   whose chain head this process knows are committed by the journal thread on its own
//!   connection, those queued while a commit is in flight sharing the next transaction (group
//!   commit, `writer.rs`): each event still commits with its summary or not at all, and each
//!   caller returns only once its own event is durable. Every other write runs on the sqlx
//!   writer connection.
//! - Each execution's events form a hash chain (`seq` 1, 2, 3 …, see
//!   [`event_hash`](crate::store::event_hash)); the head (`last_seq`, `last_hash`) lives on the
//!   `executions` row, so appending costs the same at event 10 and event 10 million and never
//!   rewrites the plan.
//! - The store never reads the clock: every timestamp is an RFC 3339 argument from the caller.

/// Runs the PostgreSQL implementation of the calling method and returns its result, or yields
/// the SQLite handle for the method's own body.
macro_rules! on_backend {
    ($self:ident, $pg:ident => $e:expr) => {
        match &$self.backend {
            super::Backend::Sqlite(lite) => lite,
            super::Backend::Postgres($pg) => return $e,
        }
    };
}

mod auth;
mod ci;
mod cluster;
mod forge;
mod journal;
mod lease;
mod metrics;
mod pg;
mod pmo;
mod polls;
mod portfolio;
mod quota;
mod webhooks;
mod writer;

pub use auth::{TokenRow, UserRow};
pub use ci::CiWaitRow;
pub use cluster::{Change, ChangeListener, ClusterJob, KeyFingerprint, CHANGE_CHANNELS};
pub use forge::{MergeRow, ReportClaim};
pub use metrics::MetricTotals;
pub use pmo::{CardRow, NewSpec, ProjectRow, SpecChange, SpecEventRow, SpecFilter, SpecInsert, SpecRow, StatusRow};
pub use polls::PrPollRow;
pub use portfolio::{
    ExecutionSpendRow, GateRunsRow, MergedSpecRow, PortfolioFilter, PortfolioRows, SpecTransitionRow, WeeklySpendRow,
};
pub use quota::QuotaAccount;
pub use webhooks::ForgeIdentity;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest as _, Sha256};
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions};
use sqlx::sqlite::{SqliteSynchronous, SqliteTransaction};
use sqlx::ConnectOptions as _;

use writer::{WriteTx, Writer};

/// How long a connection waits for another writer before failing with `SQLITE_BUSY`.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// The `prev_hash` of the first event of every execution: 64 zeros.
pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// How many snapshots [`Store::put_snapshot`] keeps per execution (the newest by `seq`).
pub const SNAPSHOTS_KEPT: i64 = 3;

/// How the process that opens a SQLite store uses it: decides how many connections it opens
/// (each one parses the whole schema when it first runs a statement) and whether appends are
/// group-committed by a journal thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Workload {
    /// A long-lived process (`baton serve`, a driver, the tests): a pool of four read
    /// connections, and single-event appends group-committed by the journal thread.
    #[default]
    Service,
    /// A process that runs one command and exits (`baton execute next`, `record`, …): reads
    /// and appends both made on the writer connection itself, so the process opens one
    /// connection and starts no thread of its own (a read that finds the writer busy, a write
    /// in flight on another task, opens one read connection); as it leaves, it empties the WAL
    /// once that is longer than a few dozen pages, so the next process finds a short one.
    /// PostgreSQL stores ignore it.
    OneShot,
}

/// Connections in the reader pool.
const READERS: u32 = 4;

/// Handle to the database: one SQLite journal file ([`Store::open`]) or a PostgreSQL database
/// ([`Store::connect`]).
///
/// Cheap to clone (reference-counted inside). Several `Store`s, in one process or in several,
/// may open the same database; SQLite's locking and the 10 s busy timeout, or PostgreSQL's row
/// locks, serialise their writes.
#[derive(Debug, Clone)]
pub struct Store {
    backend: Backend,
}

/// Which database a [`Store`] runs on.
#[derive(Debug, Clone)]
enum Backend {
    /// A SQLite file.
    Sqlite(Lite),
    /// A PostgreSQL database.
    Postgres(pg::Pg),
}

/// One SQLite journal file: one writer connection and a small reader pool.
#[derive(Debug, Clone)]
struct Lite {
    /// The write lock with the sqlx writer connection, where every general write transaction
    /// begins `IMMEDIATE`, and the journal thread that group-commits single-event appends.
    writer: Writer,
    /// Read-only connections for loads, listings and chain verification. A one-shot store's
    /// pool connects only when a read finds the writer busy: it reads on the writer
    /// connection ([`Lite::read`]).
    reader: SqlitePool,
    /// Last known chain head (seq, hash) per execution, from this process's appends. A hint
    /// only: the fast append path checks it in SQL and falls back when it is stale.
    heads: writer::Heads,
    /// Whether the schema was already this build's when a one-shot process opened the file,
    /// so it ran no migration ([`Store::ran_no_migration`]).
    schema_was_current: bool,
}

/// Failure of a store operation.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// `create_execution` on a task id that is already in the store.
    #[error("execution {task_id} already exists")]
    AlreadyExists {
        /// The task id that was already present.
        task_id: String,
    },
    /// The execution does not exist.
    #[error("no execution with task id {task_id}")]
    NotFound {
        /// The task id that was looked up.
        task_id: String,
    },
    /// Another driver holds an unexpired lease on the execution.
    #[error(
        "execution {task_id} is leased to {} (pid {} on {}) since {} until {}",
        holder.holder, holder.pid, holder.host, holder.acquired_at, holder.expires_at
    )]
    LeaseHeld {
        /// The execution whose lease was refused.
        task_id: String,
        /// Who holds it (boxed to keep `Result`s small).
        holder: Box<LeaseInfo>,
    },
    /// `renew_lease` by a holder that has no lease on the execution (it was released, or it
    /// expired and another driver took it).
    #[error("{holder} holds no lease on execution {task_id}")]
    LeaseNotHeld {
        /// The execution.
        task_id: String,
        /// The holder id that asked.
        holder: String,
    },
    /// A fenced append ([`Store::append_fenced`]) by a lease that is no longer the execution's:
    /// another holder took the lease over (a higher epoch), or it was released. Nothing was
    /// written; the caller must stop driving the execution at once.
    #[error(
        "execution {task_id}: the lease of {holder} (epoch {epoch}) was taken over; the execution is \
         leased to {} (epoch {current}) now, so nothing was written",
        if current_holder.is_empty() { "nobody" } else { current_holder.as_str() }
    )]
    Fenced {
        /// The execution.
        task_id: String,
        /// The holder that tried to append.
        holder: String,
        /// The epoch it held.
        epoch: i64,
        /// Who holds the lease now (empty: nobody).
        current_holder: String,
        /// The lease's epoch now (0: no lease).
        current: i64,
    },
    /// A timestamp argument is not RFC 3339.
    #[error("invalid RFC 3339 timestamp {value:?}: {reason}")]
    InvalidTimestamp {
        /// The string that failed to parse.
        value: String,
        /// Why it failed.
        reason: String,
    },
    /// An argument is out of range (a non-positive lease TTL, a newline in an event kind …).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// `put_snapshot` at a `seq` beyond the last appended event.
    #[error("snapshot of execution {task_id} at seq {seq} is ahead of its journal (last seq {last_seq})")]
    SnapshotAhead {
        /// The execution.
        task_id: String,
        /// The snapshot's seq.
        seq: i64,
        /// The execution's last appended seq.
        last_seq: i64,
    },
    /// The database file could not be opened or configured.
    #[error("opening store {}", path.display())]
    Open {
        /// The database file.
        path: PathBuf,
        /// The underlying error.
        source: sqlx::Error,
    },
    /// The journal writer's own connection (see [`Store::open`]) could not be opened or
    /// configured, or its thread not started, at the first grouped append (which is then
    /// not written; the next one tries again).
    #[error("opening the journal writer of store {}: {reason}", path.display())]
    OpenJournalWriter {
        /// The database file.
        path: PathBuf,
        /// What failed.
        reason: String,
    },
    /// The store's journal writer thread stopped (it panicked; the log says why): appends to
    /// executions whose head this process knows cannot be made durable until the store is
    /// reopened. Nothing of the failed append was written unless a retry finds it a
    /// duplicate.
    #[error(
        "the store's journal writer thread stopped unexpectedly (see the log): the append was not \
         confirmed; reopen the store (restart the process) and retry"
    )]
    JournalWriterStopped,
    /// `insert_project` with a name that is taken.
    #[error("project {name} already exists")]
    ProjectExists {
        /// The name.
        name: String,
    },
    /// No project of that name.
    #[error("no project named {name}")]
    NoSuchProject {
        /// The name.
        name: String,
    },
    /// `delete_project` on a project that still has specs.
    #[error(
        "project {name} has {specs} spec(s), and a project keeps its specs for their history (cancelled ones \
         too): it can be removed only while it has none"
    )]
    ProjectInUse {
        /// The name.
        name: String,
        /// How many specs it has.
        specs: i64,
    },
    /// No spec with that id.
    #[error("no spec with id {spec_id}")]
    NoSuchSpec {
        /// The id.
        spec_id: i64,
    },
    /// `change_spec` found another status than the one the caller saw (someone else acted).
    #[error("spec {spec_id} is {current} now")]
    SpecChanged {
        /// The id.
        spec_id: i64,
        /// Its status now.
        current: String,
    },
    /// Applying `migrations/` failed.
    #[error("migrating store")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// The PostgreSQL database could not be reached or configured.
    #[error("connecting to {url}")]
    Connect {
        /// The database URL, without its password.
        url: String,
        /// The underlying error.
        source: sqlx::Error,
    },
    /// The database URL names no database Baton can use.
    #[error("database url {url:?}: {reason}")]
    BadUrl {
        /// The URL as given, without its password.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Any other database error (I/O, busy beyond the timeout, constraint violations such as a
    /// payload that is not valid JSON); displays as sqlx's own message.
    #[error(transparent)]
    Sqlx(#[from] sqlx::Error),
}

/// Board summary of an execution, written by the caller with every append.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct Summary {
    /// Execution status as the caller names it (e.g. `running`, `done`); opaque to the store.
    pub status: String,
    /// Current phase name; opaque to the store.
    pub current_phase: String,
    /// Steps finished so far.
    pub steps_done: i64,
    /// Steps in the plan.
    pub steps_total: i64,
    /// Money spent so far, in US dollars.
    pub spend_usd: f64,
}

/// Binds a [`Summary`]'s five columns to a query, in the order every statement of the store
/// names them: `status, current_phase, steps_done, steps_total, spend_usd` (SQLite and
/// PostgreSQL alike).
pub(crate) trait BindSummary<'q> {
    /// The query with the five columns of `summary` bound next.
    #[must_use]
    fn bind_summary(self, summary: &'q Summary) -> Self;
}

impl<'q, DB: sqlx::Database> BindSummary<'q> for sqlx::query::Query<'q, DB, <DB as sqlx::Database>::Arguments<'q>>
where
    &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    f64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    fn bind_summary(self, summary: &'q Summary) -> Self {
        self.bind(summary.status.as_str())
            .bind(summary.current_phase.as_str())
            .bind(summary.steps_done)
            .bind(summary.steps_total)
            .bind(summary.spend_usd)
    }
}

/// An event to append to an execution's journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEvent {
    /// Event kind; must not contain `\n`.
    pub kind: String,
    /// Event payload: JSON text (checked with SQLite's `json_valid`).
    pub payload: String,
    /// Caller-chosen key, unique per execution; re-appending it is a no-op. Must not contain
    /// `\n`.
    pub idempotency_key: String,
    /// When the event happened: RFC 3339, stored and hashed verbatim. Must not contain `\n`.
    pub at: String,
}

/// What [`Store::append`] did with one event of a batch, in batch order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppendOutcome {
    /// The event was written at `seq` with chain hash `hash` (64 lowercase hex digits).
    Appended {
        /// Its sequence number (1-based, contiguous per execution).
        seq: i64,
        /// Its chain hash.
        hash: String,
    },
    /// An event with the same idempotency key already exists at `seq`; nothing was written.
    Duplicate {
        /// Seq of the event already stored under that key.
        seq: i64,
    },
}

/// One event as stored in the journal.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct StoredEvent {
    /// Sequence number (1-based, contiguous per execution).
    pub seq: i64,
    /// Event kind.
    pub kind: String,
    /// JSON payload text.
    pub payload: String,
    /// The caller's idempotency key.
    pub idempotency_key: String,
    /// RFC 3339 timestamp, as the caller gave it.
    pub at: String,
    /// Hash of the previous event ([`GENESIS_HASH`] for seq 1).
    pub prev_hash: String,
    /// This event's chain hash, see [`event_hash`].
    pub hash: String,
}

/// A snapshot of an execution's state as of event `seq` (all events up to and including it).
///
/// `S` is what the reader made of the stored text: the text itself (`String`, what
/// [`Store::load`] returns), or the caller's decoding of it, made while the row was borrowed
/// ([`Store::load_latest_with`]), so a megabyte of state is not copied once more first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot<S = String> {
    /// The last event folded into `state` (0 = before any event).
    pub seq: i64,
    /// The caller's serialised state, or what the caller's decoder made of it.
    pub state: S,
}

impl<S> Snapshot<S> {
    /// The snapshot in `row`, a `select seq, state_json from snapshots …` row of either
    /// backend, its text handed to `decode` while it is still borrowed from the row.
    fn from_row<'r, R>(row: &'r R, decode: impl FnOnce(&str) -> S) -> Result<Snapshot<S>, sqlx::Error>
    where
        R: sqlx::Row,
        usize: sqlx::ColumnIndex<R>,
        i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
        &'r str: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    {
        Ok(Snapshot { seq: row.try_get(0)?, state: decode(row.try_get(1)?) })
    }
}

/// Everything needed to rebuild an execution: plan, latest snapshot and the events after it
/// (`S`: the snapshot's state as text, or as decoded by the caller, see [`Snapshot`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Loaded<S = String> {
    /// The plan as created: always read by [`Store::load`], by [`Store::load_latest`] only
    /// when there is no snapshot.
    pub plan_json: Option<String>,
    /// When the execution was created (RFC 3339, as given): the engine's start time.
    pub created_at: String,
    /// The newest snapshot, if any.
    pub snapshot: Option<Snapshot<S>>,
    /// Events with `seq` greater than the snapshot's (all events if there is no snapshot),
    /// in seq order.
    pub events_after_snapshot: Vec<StoredEvent>,
    /// The board summary written with the last append.
    pub summary: Summary,
    /// Seq of the newest event (0 if none).
    pub last_seq: i64,
    /// Chain hash of the newest event (the chain's genesis value if none): with `last_seq`,
    /// the head an append guarded by it expects ([`Store::append_unleased`]).
    pub last_hash: String,
}

/// One execution on the board.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecutionRow {
    /// The execution's task id.
    pub task_id: String,
    /// Its board summary.
    pub summary: Summary,
    /// When it was created (the caller's RFC 3339 string).
    pub created_at: String,
    /// `at` of its newest event (`created_at` before the first).
    pub updated_at: String,
    /// Seq of its newest event (0 if none).
    pub last_seq: i64,
}

/// Where an execution's feature branch started, recorded once for every replica
/// ([`Store::record_base`]).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ExecutionBase {
    /// The feature branch (`baton/<task_id>`).
    pub branch: String,
    /// The commit it started at.
    pub base_sha: String,
}

/// Result of [`Store::verify_chain`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainReport {
    /// Events read from the journal.
    pub events: u64,
    /// The first seq whose row is missing, out of order, mislinked or whose hash does not
    /// match its contents; also set when the journal ends before the execution's `last_seq`.
    pub first_bad_seq: Option<i64>,
    /// True when the whole chain checks out.
    pub ok: bool,
}

/// The driver holding (or asking for) an execution's lease.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct LeaseInfo {
    /// Stable id of the driver, e.g. `host:pid:start-time`.
    pub holder: String,
    /// Its OS process id (stored so the runtime can check liveness; the store never does).
    pub pid: u32,
    /// Host name it runs on.
    pub host: String,
    /// When it acquired the lease: UTC RFC 3339 with microseconds (`…T09:00:00.000000Z`).
    /// Ignored on input; [`Store::acquire_lease`] sets it.
    pub acquired_at: String,
    /// When the lease lapses unless renewed, same format. Ignored on input.
    pub expires_at: String,
    /// The fencing epoch: grows by one on every takeover (a new holder, or the execution leased
    /// again after its lease expired or was released), never on a renewal. Ignored on input;
    /// [`Store::acquire_lease`] sets it and returns it.
    pub epoch: i64,
    /// The holder's data directory (its run directories live there), or empty. A holder on the
    /// same host with the same home re-adopts the agents of a holder it fenced out.
    pub home: String,
}

impl LeaseInfo {
    /// The fence this lease gives its holder for [`Store::append_fenced`].
    pub fn fence(&self) -> Fence {
        Fence { holder: self.holder.clone(), epoch: self.epoch }
    }
}

/// A driver's proof that it holds an execution's lease, checked by every fenced append in the
/// append's own transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    /// The lease holder's id.
    pub holder: String,
    /// The epoch [`Store::acquire_lease`] returned.
    pub epoch: i64,
}

/// Chain hash of one event: lowercase hex SHA-256 of
/// `prev_hash \n seq \n kind \n payload \n idempotency_key \n at` (`seq` in decimal).
///
/// `kind`, `idempotency_key` and `at` contain no `\n` (append rejects them), so the fields are
/// recoverable from the hashed text even when `payload` spans several lines.
pub fn event_hash(prev_hash: &str, seq: i64, kind: &str, payload: &str, idempotency_key: &str, at: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(prev_hash.as_bytes());
    hasher.update(b"\n");
    hasher.update(seq.to_string().as_bytes());
    hasher.update(b"\n");
    hasher.update(kind.as_bytes());
    hasher.update(b"\n");
    hasher.update(payload.as_bytes());
    hasher.update(b"\n");
    hasher.update(idempotency_key.as_bytes());
    hasher.update(b"\n");
    hasher.update(at.as_bytes());
    hex::encode(hasher.finalize())
}

impl Store {
    /// Opens (creating if missing) the journal at `db_path` and applies pending migrations.
    ///
    /// Every connection runs with WAL, `busy_timeout` 10 s, `foreign_keys` on and
    /// `synchronous=FULL`: the sqlx writer connection, the reader pool and the journal
    /// thread's own connection (see `writer`; the thread starts with the first grouped append,
    /// so a one-shot CLI command that never groups does not pay for it). The one constructor
    /// for server, CLI and tests.
    ///
    /// # Errors
    /// [`StoreError::Open`] if the file cannot be created or opened (missing parent directory,
    /// permissions, not a database), [`StoreError::Migrate`] if the schema cannot be brought up
    /// to date (e.g. the file was written by a newer Baton).
    pub async fn open(db_path: &Path) -> Result<Store, StoreError> {
        Store::open_for(db_path, Workload::Service).await
    }

    /// [`Store::open`] sized for `workload` (see [`Workload`]).
    ///
    /// # Errors
    /// As [`Store::open`].
    pub async fn open_for(db_path: &Path, workload: Workload) -> Result<Store, StoreError> {
        let open_err = |source| StoreError::Open { path: db_path.to_path_buf(), source };
        let options = SqliteConnectOptions::new()
            .filename(db_path)
            .journal_mode(SqliteJournalMode::Wal)
            .busy_timeout(BUSY_TIMEOUT)
            .foreign_keys(true)
            .synchronous(SqliteSynchronous::Full);
        // The writer is one long-lived connection to a local file, held rather than pooled
        // (see `writer`).
        let one_shot = workload == Workload::OneShot;
        let mut writer_options = options.clone().create_if_missing(true);
        if one_shot {
            // A one-shot process reads on its writer connection (`Lite::read`), so that one
            // maps the file as the readers do.
            writer_options = writer_options.pragma("mmap_size", READER_MMAP_BYTES);
        }
        let writer = async {
            let mut conn = connect_writer(&writer_options).await.map_err(open_err)?;
            let current = one_shot && schema_is_current(&mut conn).await;
            if !current {
                migrate(&mut conn).await?;
            }
            Ok::<_, StoreError>((conn, current))
        };
        // Readers map the file (`mmap_size`): a snapshot of a large plan is a megabyte of
        // overflow pages, read in place instead of copied page by page into each connection's
        // cache.
        let reader_options = options.read_only(true).pragma("mmap_size", READER_MMAP_BYTES);
        let reader_pool = |max_connections| {
            // No idle timeout or lifetime, so sqlx starts no maintenance task: an idle
            // connection to a local file costs nothing to keep, and that task's loop over the
            // idle count never yields when the count reads below zero (sqlx 0.8 adds a
            // released connection to the count after another thread can already have taken
            // it), so it spun a worker for good and hung the runtime's shutdown (seen in
            // `baton merge` under `tests/it/crash_everywhere.rs`).
            SqlitePoolOptions::new()
                .max_connections(max_connections)
                .test_before_acquire(false)
                .idle_timeout(None)
                .max_lifetime(None)
        };
        if one_shot {
            // A one-shot process reads on its writer connection while nothing else holds it
            // (`Lite::read`): its one read connection is opened only if a read finds the
            // writer busy (a write in flight on another task), which a one-shot command
            // rarely does.
            let (conn, schema_was_current) = writer.await?;
            let reader = reader_pool(1).connect_lazy_with(reader_options);
            let heads = writer::Heads::default();
            let writer = Writer::new(conn, db_path, heads.clone(), one_shot);
            return Ok(Store { backend: Backend::Sqlite(Lite { writer, reader, heads, schema_was_current }) });
        }
        let reader = || connect_retrying(reader_pool(READERS), reader_options.clone());
        // Read-only connections can open a file once the writer has created it and switched it
        // to WAL. An existing file was (every Baton database is created so), so its readers
        // connect while the writer connects and migrates (each connection parses the schema on
        // its own thread); if that early connection fails, the readers connect again after.
        let (conn, early) = if db_path.exists() {
            tokio::join!(writer, reader())
        } else {
            (writer.await, Err(sqlx::Error::PoolClosed))
        };
        let (conn, schema_was_current) = conn?;
        let reader = match early {
            Ok(pool) => pool,
            Err(_) => reader().await.map_err(open_err)?,
        };
        let heads = writer::Heads::default();
        let writer = Writer::new(conn, db_path, heads.clone(), one_shot);
        Ok(Store { backend: Backend::Sqlite(Lite { writer, reader, heads, schema_was_current }) })
    }

    /// True when this store was opened by a one-shot process ([`Workload::OneShot`]) on a
    /// SQLite file whose schema was already this build's: it ran no migration. Work that
    /// follows a migration (giving pre-0010 forge specs their keys) is then already done by
    /// the process that migrated; every long-running process (and every PostgreSQL store)
    /// answers false and does it again at its start.
    pub fn ran_no_migration(&self) -> bool {
        match &self.backend {
            Backend::Sqlite(lite) => lite.schema_was_current,
            Backend::Postgres(_) => false,
        }
    }

    /// Connects to the PostgreSQL database at `url` (`postgres://user:password@host:port/db`)
    /// and applies pending migrations of `migrations/postgres/` (under PostgreSQL's migration
    /// lock, so replicas starting together apply each once).
    ///
    /// # Errors
    /// [`StoreError::BadUrl`] for a URL that is not a `postgres://` or `postgresql://` one or
    /// does not parse, [`StoreError::Connect`] when the server cannot be reached or refuses the
    /// login, [`StoreError::Migrate`] when the schema cannot be brought up to date.
    pub async fn connect(url: &str) -> Result<Store, StoreError> {
        Ok(Store { backend: Backend::Postgres(pg::Pg::connect(url).await?) })
    }

    /// The SQLite handle (tests of the SQLite internals only).
    #[cfg(test)]
    fn lite(&self) -> &Lite {
        match &self.backend {
            Backend::Sqlite(lite) => lite,
            Backend::Postgres(_) => panic!("a SQLite internals test ran on PostgreSQL"),
        }
    }

    /// `"sqlite"` or `"postgres"`: which database this store runs on.
    pub fn backend_name(&self) -> &'static str {
        match self.backend {
            Backend::Sqlite(_) => "sqlite",
            Backend::Postgres(_) => "postgres",
        }
    }

    /// Closes the store: SQLite's reader pool (waiting for checked-out connections to come
    /// back) and writer connection (which checkpoints the WAL when it is the last one to the
    /// file), or PostgreSQL's pool.
    pub async fn close(&self) {
        match &self.backend {
            Backend::Sqlite(lite) => {
                lite.reader.close().await;
                lite.writer.close().await;
            }
            Backend::Postgres(pg) => pg.close().await,
        }
    }

    /// For a process about to exit: closes SQLite's writer as [`Store::close`] does (later
    /// writes fail with `PoolClosed`; a [`Workload::OneShot`] store empties a WAL longer than a
    /// few dozen pages for the next process, when no other connection reads it at that moment),
    /// and leaves the reader pool and PostgreSQL's pool to the process's exit. (Closing sqlx's
    /// SQLite pool right before the runtime shuts down could leave its maintenance task
    /// spinning, so the process never exited: seen in `tests/it/crash_everywhere.rs`.)
    pub async fn close_for_exit(&self) {
        if let Backend::Sqlite(lite) = &self.backend {
            lite.writer.close().await;
        }
    }
}

impl Lite {
    /// Begins a write transaction on the writer connection with `BEGIN IMMEDIATE`, so the
    /// write lock is taken up front (a deferred read-then-write can fail with
    /// `SQLITE_BUSY_SNAPSHOT` under WAL). Dropping it uncommitted rolls back.
    async fn begin_write(&self) -> Result<WriteTx, StoreError> {
        self.writer.begin().await
    }

    /// A connection to read on: the writer connection of a one-shot store while nothing holds
    /// it ([`Writer::try_read`]), else one of the reader pool's.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`] when the pool cannot connect (or is closed).
    async fn read(&self) -> Result<ReadConn, StoreError> {
        Ok(match self.writer.try_read() {
            Some(conn) => Read::Writer(conn),
            None => Read::Pool(self.reader.acquire().await?),
        })
    }

    /// Begins a read transaction (a deferred `BEGIN`: one consistent view of the file) on a
    /// connection from [`Lite::read`].
    ///
    /// # Errors
    /// [`StoreError::Sqlx`] when the pool cannot connect or SQLite refuses to begin.
    async fn begin_read(&self) -> Result<ReadTx, StoreError> {
        Ok(match self.writer.try_read() {
            Some(conn) => Read::Writer(conn.begin_read().await?),
            None => Read::Pool(self.reader.begin().await?),
        })
    }
}

/// Something to read on: the writer connection of a one-shot store ([`Writer::try_read`]),
/// or `P` from the reader pool. Derefs to the connection, so it is used as `&mut *conn`.
enum Read<P> {
    /// The writer connection of a one-shot store: outside any transaction in a [`ReadConn`],
    /// in a deferred `BEGIN` in a [`ReadTx`].
    Writer(WriteTx),
    /// The reader pool's connection or transaction.
    Pool(P),
}

/// A connection to read on, from [`Lite::read`].
type ReadConn = Read<sqlx::pool::PoolConnection<sqlx::Sqlite>>;

/// A read transaction, from [`Lite::begin_read`]. Dropped without [`ReadTx::commit`], it
/// rolls back.
type ReadTx = Read<SqliteTransaction<'static>>;

impl ReadTx {
    /// Ends the read transaction.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`] when SQLite refuses to end it.
    async fn commit(self) -> Result<(), StoreError> {
        match self {
            Read::Writer(tx) => tx.end_read().await,
            Read::Pool(tx) => Ok(tx.commit().await?),
        }
    }
}

impl<P: std::ops::Deref<Target = SqliteConnection>> std::ops::Deref for Read<P> {
    type Target = SqliteConnection;

    fn deref(&self) -> &SqliteConnection {
        match self {
            Read::Writer(conn) => conn,
            Read::Pool(conn) => conn,
        }
    }
}

impl<P: std::ops::DerefMut<Target = SqliteConnection>> std::ops::DerefMut for Read<P> {
    fn deref_mut(&mut self) -> &mut SqliteConnection {
        match self {
            Read::Writer(conn) => conn,
            Read::Pool(conn) => conn,
        }
    }
}

/// Retries of opening a file another process is creating at the same moment.
const OPEN_BUSY_RETRIES: u32 = 10;

/// Address space each reader connection maps of the database file (SQLite's `mmap_size`, in
/// bytes): reads of pages below it come from the mapping rather than `pread` copies.
const READER_MMAP_BYTES: &str = "268435456";

/// Connects a pool, retrying briefly while another process creates the same new file: the two
/// race on switching it to WAL, which SQLite answers with SQLITE_BUSY without waiting on the
/// busy handler.
async fn connect_retrying(pool: SqlitePoolOptions, options: SqliteConnectOptions) -> Result<SqlitePool, sqlx::Error> {
    let mut attempt = 0u32;
    loop {
        match pool.clone().connect_with(options.clone()).await {
            Ok(pool) => return Ok(pool),
            Err(e) if attempt < OPEN_BUSY_RETRIES && is_busy(&e) => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(20 * u64::from(attempt))).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Opens the writer connection with the same retry as [`connect_retrying`].
async fn connect_writer(options: &SqliteConnectOptions) -> Result<SqliteConnection, sqlx::Error> {
    let mut attempt = 0u32;
    loop {
        match options.connect().await {
            Ok(conn) => return Ok(conn),
            Err(e) if attempt < OPEN_BUSY_RETRIES && is_busy(&e) => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(20 * u64::from(attempt))).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// SQLITE_BUSY / SQLITE_LOCKED ("database is locked").
fn is_busy(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(db) => {
            matches!(db.code().as_deref(), Some("5") | Some("6") | Some("261") | Some("517"))
                || db.message().contains("database is locked")
        }
        _ => false,
    }
}

/// Applies `migrations/` (embedded at build time) on the writer connection.
///
/// sqlx takes no lock for SQLite migrations, so two processes opening a new file at once both
/// see the same migration as pending and the loser fails (`table … already exists`,
/// `duplicate column name …`). Each migration commits atomically with its `_sqlx_migrations`
/// row, so the loser has written nothing and its next run finds that migration applied: every
/// failed run is one migration another opener applied, so it retries once per migration (the
/// two openers can collide on each in turn; three attempts were seen to run out), and a real
/// failure still ends after that many quick runs.
async fn migrate(writer: &mut SqliteConnection) -> Result<(), StoreError> {
    let migrator = sqlx::migrate!();
    let attempts = migrator.iter().count() + 1;
    let mut attempt = 1;
    loop {
        match migrator.run_direct(&mut *writer).await {
            Ok(()) => return Ok(()),
            Err(err) if attempt < attempts => {
                tracing::debug!(attempt, error = %err, "migration raced another opener, retrying");
                attempt += 1;
            }
            Err(err) => return Err(err.into()),
        }
    }
}

/// Whether the database's schema is exactly this build's: every migration row succeeded and
/// the newest is this build's newest migration. One query, for a one-shot process
/// ([`Workload::OneShot`]) to skip sqlx's migrator, which reads every applied migration and
/// compares checksums: three statements, about 0.4 ms of every CLI call (issue 14.8). Any
/// other answer (no table yet, an older or a newer schema, a failed migration, an error)
/// runs the migrator, which applies what is pending or says what is wrong. What the fast path
/// does not do is compare the checksums of applied migrations, which only differ in a
/// development build whose migration files were edited after they ran; `baton serve` and
/// every other long-running process still compares them at each start.
async fn schema_is_current(writer: &mut SqliteConnection) -> bool {
    let Some(newest) = sqlx::migrate!().iter().map(|m| m.version).max() else { return false };
    let row =
        sqlx::query_as::<_, (Option<i64>, Option<bool>)>("select max(version), min(success) from _sqlx_migrations")
            .fetch_one(&mut *writer)
            .await;
    matches!(row, Ok((Some(version), Some(true))) if version == newest)
}

/// Parses an RFC 3339 timestamp into UTC.
fn parse_time(value: &str) -> Result<chrono::DateTime<chrono::Utc>, StoreError> {
    chrono::DateTime::parse_from_rfc3339(value)
        .map(|t| t.with_timezone(&chrono::Utc))
        .map_err(|e| StoreError::InvalidTimestamp { value: value.to_owned(), reason: e.to_string() })
}

/// Formats a UTC time so that text order is time order: fixed width, microseconds, `Z`.
fn sortable_time(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}
