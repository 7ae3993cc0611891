//! The PostgreSQL implementation of the [`Store`](super::Store) contract (issue 17): the same
//! methods, results and errors as the SQLite one, on `migrations/postgres/`.
//!
//! Owns the connection pool and every PostgreSQL statement; callers never see which backend
//! runs. It never reads the clock and never interprets payloads (save the SQL aggregates that
//! `metrics.rs` and `portfolio.rs` document for SQLite too).
//!
//! How SQLite's guarantees carry over:
//! - SQLite serialises writers on one connection; here each write is one transaction on a
//!   pooled connection, and where a decision reads before it writes, the row it decides on is
//!   locked first (`select … for update`) or the decision is one `insert … on conflict`
//!   statement. An append locks its execution's row, so the hash chain stays linear across
//!   connections, processes and machines.
//! - Group commit: each append (one event or a batch) is one transaction; concurrent appends run
//!   on different connections, and PostgreSQL's WAL flush commits them together (its own group
//!   commit), so there is no queue here. [`Pg::group_stats`] counts these commits.
//! - Multi-statement reads (a load, a chain check, the board) run in one `repeatable read,
//!   read only` transaction: one consistent snapshot, like SQLite's read transaction.

mod journal;
mod lease;
mod pmo;
mod reads;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{PgConnection, Postgres, Transaction};

use super::StoreError;

/// Connections in the pool: the server's handlers, drivers and background loops share them.
const CONNECTIONS: u32 = 10;

/// How long a caller waits for a free pooled connection before failing.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(30);

/// A PostgreSQL database: one pool, plus this process's commit counters.
#[derive(Debug, Clone)]
pub(super) struct Pg {
    pool: PgPool,
    /// Append transactions that wrote at least one event, since the store was opened.
    commits: Arc<AtomicU64>,
    /// Events they wrote.
    appends: Arc<AtomicU64>,
}

/// `url` without its password, for error messages.
fn redacted(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) => {
            if parsed.password().is_some() {
                let _ = parsed.set_password(Some("***"));
            }
            parsed.to_string()
        }
        Err(_) => "(unparsable url)".to_string(),
    }
}

impl Pg {
    /// Connects to `url` and applies `migrations/postgres/`.
    ///
    /// sqlx takes PostgreSQL's advisory migration lock, so replicas opening one new database at
    /// once apply each migration once.
    pub(super) async fn connect(url: &str) -> Result<Pg, StoreError> {
        let shown = redacted(url);
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err(StoreError::BadUrl {
                url: shown,
                reason: "not a postgres:// or postgresql:// URL (leave it unset for the SQLite file)".to_string(),
            });
        }
        // sqlx nests its configuration errors ("error with configuration: error with
        // configuration: unknown value …"): the innermost one says what is wrong.
        let options: PgConnectOptions = url.parse().map_err(|e: sqlx::Error| {
            let mut root: &dyn std::error::Error = &e;
            while let Some(source) = root.source() {
                root = source;
            }
            StoreError::BadUrl { url: shown.clone(), reason: root.to_string() }
        })?;
        let options = options.application_name("baton");
        // No idle timeout or lifetime, so sqlx starts no maintenance task: its loop over the
        // idle count can spin without yielding (see `Store::open_for`, where it hung a
        // process); a dead connection is still caught, by the ping before each acquire.
        let pool = PgPoolOptions::new()
            .max_connections(CONNECTIONS)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_with(options)
            .await
            .map_err(|source| StoreError::Connect { url: shown, source })?;
        sqlx::migrate!("./migrations/postgres").run(&pool).await?;
        Ok(Pg { pool, commits: Arc::default(), appends: Arc::default() })
    }

    /// The connection pool (for `cluster.rs`'s advisory locks and listener).
    pub(in super::super) fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Closes the pool, waiting for checked-out connections to come back.
    pub(super) async fn close(&self) {
        self.pool.close().await;
    }

    /// Begins a write transaction (read committed; decisions lock their rows).
    async fn begin_write(&self) -> Result<Transaction<'static, Postgres>, StoreError> {
        Ok(self.pool.begin().await?)
    }

    /// Begins a read transaction: one consistent snapshot for several statements.
    async fn begin_read(&self) -> Result<Transaction<'static, Postgres>, StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("set transaction isolation level repeatable read, read only").execute(&mut *tx).await?;
        Ok(tx)
    }

    /// Counts one append transaction that wrote `events` events.
    fn count_commit(&self, events: u64) {
        if events > 0 {
            self.commits.fetch_add(1, Ordering::Relaxed);
            self.appends.fetch_add(events, Ordering::Relaxed);
        }
    }

    /// `(commits, appends)` since the store was opened, like the SQLite writer's.
    pub(super) fn group_stats(&self) -> (u64, u64) {
        (self.commits.load(Ordering::Relaxed), self.appends.load(Ordering::Relaxed))
    }
}

/// Fails with `NotFound` unless execution `task_id` exists.
async fn require_execution(conn: &mut PgConnection, task_id: &str) -> Result<(), StoreError> {
    let found = sqlx::query_scalar::<_, bool>("select true from executions where task_id = $1")
        .bind(task_id)
        .fetch_optional(conn)
        .await?;
    match found {
        Some(_) => Ok(()),
        None => Err(StoreError::NotFound { task_id: task_id.to_owned() }),
    }
}

/// PostgreSQL for tests: a fresh database per test on the cluster `BATON_TEST_DATABASE_URL`
/// names (`scripts/test` starts a throwaway one).
#[cfg(test)]
pub(super) mod testing {
    /// The URL of a new, empty database on the test cluster, or `None` when there is no
    /// cluster: see [`super::test_cluster::fresh_database`].
    pub(in crate::store) async fn fresh_database() -> Option<String> {
        super::test_cluster::fresh_database("baton_unit").await
    }
}

#[cfg(test)]
mod test_cluster;
