//! What several replicas on one database coordinate beyond leases: once-per-cluster jobs,
//! change notifications and the fingerprint of the server key they must share.
//!
//! Owns PostgreSQL's advisory locks and LISTEN/NOTIFY as Baton uses them. A [`ClusterJob`] is a
//! transaction-level advisory lock (`pg_try_advisory_xact_lock`) held for one pass of a
//! periodic job: the replica that gets it runs the pass, the others skip theirs; it is
//! released when the pass ends (or the connection dies), so no replica can hold it forever.
//! [`ChangeListener`] hears the notifications that migration 0017's triggers send in the
//! writing transaction: `baton_events` (a journal append; payload the task id) and
//! `baton_board` (the board's change counter moved). On SQLite there is one machine and
//! nothing to coordinate: every job runs, and there are no notifications (callers poll).
//! The `server_key` table (migration 0019) holds one fingerprint; the store records and reads
//! it and never judges it (the runtime's `auth` compares it with the replica's key).

use sqlx::postgres::PgListener;
use sqlx::{Postgres, Transaction};

use super::{Backend, Store, StoreError};

/// First key of Baton's advisory locks (the second is the job name's hash), so they never
/// collide with another application's locks on the same database.
const ADVISORY_NAMESPACE: i32 = 0x0BA7_0017;

/// Channels a [`ChangeListener`] listens on.
pub const CHANGE_CHANNELS: [&str; 2] = ["baton_events", "baton_board"];

/// One pass of a once-per-cluster job, holding its lock (PostgreSQL) until dropped or
/// [`ClusterJob::done`].
#[derive(Debug)]
pub struct ClusterJob {
    /// The transaction holding the advisory lock (`None` on SQLite).
    tx: Option<Transaction<'static, Postgres>>,
}

impl ClusterJob {
    /// Ends the pass and releases the lock.
    pub async fn done(self) {
        if let Some(tx) = self.tx {
            // Nothing was written in it: a rollback releases the lock as a commit would.
            let _ = tx.rollback().await;
        }
    }
}

/// A change another process (another replica) committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// `baton_events` or `baton_board`.
    pub channel: String,
    /// The task id (`baton_events`) or the board's change counter (`baton_board`).
    pub payload: String,
}

/// A dedicated connection listening for changes (PostgreSQL only).
#[derive(Debug)]
pub struct ChangeListener {
    listener: PgListener,
}

impl ChangeListener {
    /// The next change. Notifications sent while the connection was lost are lost too
    /// (sqlx reconnects and listens again): callers keep polling as their fallback.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`] when the connection fails and cannot be re-established.
    pub async fn recv(&mut self) -> Result<Change, StoreError> {
        let n = self.listener.recv().await?;
        Ok(Change { channel: n.channel().to_owned(), payload: n.payload().to_owned() })
    }
}

/// The server key fingerprint recorded in the database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyFingerprint {
    /// The fingerprint (hex).
    pub fingerprint: String,
    /// When it was recorded (RFC 3339).
    pub recorded_at: String,
}

impl Store {
    /// Records `fingerprint` (at `now`) as the server key's when none is recorded yet, in one
    /// statement (of two replicas starting at once, one records), and returns the recorded one:
    /// `fingerprint` itself, or the one recorded before.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`] on database failure.
    pub async fn record_key_fingerprint(&self, fingerprint: &str, now: &str) -> Result<KeyFingerprint, StoreError> {
        const SELECT: &str = "select fingerprint, recorded_at from server_key where id = 1";
        let (fingerprint, recorded_at) = match &self.backend {
            Backend::Sqlite(lite) => {
                let mut tx = lite.begin_write().await?;
                sqlx::query("insert into server_key (id, fingerprint, recorded_at) values (1, ?1, ?2) on conflict (id) do nothing")
                    .bind(fingerprint).bind(now).execute(&mut *tx).await?;
                let row = sqlx::query_as::<_, (String, String)>(SELECT).fetch_one(&mut *tx).await?;
                tx.commit().await?;
                row
            }
            Backend::Postgres(pg) => {
                sqlx::query("insert into server_key (id, fingerprint, recorded_at) values (1, $1, $2) on conflict (id) do nothing")
                    .bind(fingerprint).bind(now).execute(pg.pool()).await?;
                sqlx::query_as::<_, (String, String)>(SELECT).fetch_one(pg.pool()).await?
            }
        };
        Ok(KeyFingerprint { fingerprint, recorded_at })
    }

    /// Records `fingerprint` (at `now`) as the server key's, over any recorded before (the key
    /// of a single-machine SQLite data directory was replaced).
    ///
    /// # Errors
    /// [`StoreError::Sqlx`] on database failure.
    pub async fn replace_key_fingerprint(&self, fingerprint: &str, now: &str) -> Result<(), StoreError> {
        const SET: &str =
            "on conflict (id) do update set fingerprint = excluded.fingerprint, recorded_at = excluded.recorded_at";
        match &self.backend {
            Backend::Sqlite(lite) => {
                let mut tx = lite.begin_write().await?;
                let sql = format!("insert into server_key (id, fingerprint, recorded_at) values (1, ?1, ?2) {SET}");
                sqlx::query(&sql).bind(fingerprint).bind(now).execute(&mut *tx).await?;
                tx.commit().await?;
            }
            Backend::Postgres(pg) => {
                let sql = format!("insert into server_key (id, fingerprint, recorded_at) values (1, $1, $2) {SET}");
                sqlx::query(&sql).bind(fingerprint).bind(now).execute(pg.pool()).await?;
            }
        }
        Ok(())
    }

    /// Starts one pass of the once-per-cluster job `name` (`report`, …): `Some` when this
    /// process may run it now, `None` when another replica's pass holds it. Always `Some` on
    /// SQLite. Hold the guard for the whole pass.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`] on database failure.
    pub async fn cluster_job(&self, name: &str) -> Result<Option<ClusterJob>, StoreError> {
        let pg = match &self.backend {
            Backend::Sqlite(_) => return Ok(Some(ClusterJob { tx: None })),
            Backend::Postgres(pg) => pg,
        };
        let mut tx = pg.pool().begin().await?;
        let got = sqlx::query_scalar::<_, bool>("select pg_try_advisory_xact_lock($1, hashtext($2))")
            .bind(ADVISORY_NAMESPACE)
            .bind(name)
            .fetch_one(&mut *tx)
            .await?;
        Ok(got.then_some(ClusterJob { tx: Some(tx) }))
    }

    /// Takes the cluster-wide lock `name` (`merge:<task_id>`, …) for as long as the returned
    /// guard lives, waiting while another replica holds it: a PostgreSQL advisory lock
    /// (`pg_advisory_xact_lock`, released when the guard is dropped or its connection dies).
    /// Returns at once on SQLite (one machine: the caller's own locks suffice).
    ///
    /// # Errors
    /// [`StoreError::Sqlx`] on database failure.
    pub async fn cluster_lock(&self, name: &str) -> Result<ClusterJob, StoreError> {
        let pg = match &self.backend {
            Backend::Sqlite(_) => return Ok(ClusterJob { tx: None }),
            Backend::Postgres(pg) => pg,
        };
        let mut tx = pg.pool().begin().await?;
        sqlx::query("select pg_advisory_xact_lock($1, hashtext($2))")
            .bind(ADVISORY_NAMESPACE)
            .bind(name)
            .execute(&mut *tx)
            .await?;
        Ok(ClusterJob { tx: Some(tx) })
    }

    /// A listener for the changes every replica commits ([`CHANGE_CHANNELS`]), on a connection
    /// of its own; `None` on SQLite.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`] when the connection or the LISTEN fails.
    pub async fn listen_changes(&self) -> Result<Option<ChangeListener>, StoreError> {
        let pg = match &self.backend {
            Backend::Sqlite(_) => return Ok(None),
            Backend::Postgres(pg) => pg,
        };
        let mut listener = PgListener::connect_with(pg.pool()).await?;
        listener.listen_all(CHANGE_CHANNELS).await?;
        Ok(Some(ChangeListener { listener }))
    }
}
