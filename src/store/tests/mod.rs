//! Store tests on real SQLite files in temporary directories and, for the contract every
//! backend keeps, on real PostgreSQL databases too (`on_both_backends!`: each test becomes
//! `<name>::sqlite` and `<name>::postgres`, the latter on its own database of the cluster that
//! `BATON_TEST_DATABASE_URL` names; see [`pg::testing`]). No clocks, no sleeps: every timestamp
//! is a literal.

use std::collections::BTreeMap;
use std::path::PathBuf;

use sqlx::Connection as _;
use tempfile::TempDir;

use super::*;

const T0: &str = "2026-01-15T09:00:00Z";
const T1: &str = "2026-01-15T09:00:01Z";
const T2: &str = "2026-01-15T09:00:02Z";

const PLAN: &str = r#"{"phases":[{"name":"build","steps":["a","b"]}]}"#;

/// A fresh, empty database of one backend, a store open on it, and how to reach it from
/// outside the store.
struct Fresh {
    store: Store,
    /// SQLite: the file's directory (kept alive for the test) and the file.
    sqlite: Option<(TempDir, PathBuf)>,
    /// PostgreSQL: the database's URL.
    url: Option<String>,
}

impl Fresh {
    async fn sqlite() -> Fresh {
        let (dir, path, store) = fresh().await;
        Fresh { store, sqlite: Some((dir, path)), url: None }
    }

    /// `None` when this run has no PostgreSQL (allowed only outside CI, with a loud message).
    async fn postgres() -> Option<Fresh> {
        let url = pg::testing::fresh_database().await?;
        let store = Store::connect(&url).await.unwrap();
        Some(Fresh { store, sqlite: None, url: Some(url) })
    }

    /// A second store on the same database (another process, as far as the database knows).
    async fn open_again(&self) -> Store {
        match (&self.sqlite, &self.url) {
            (Some((_, path)), _) => Store::open(path).await.unwrap(),
            (None, Some(url)) => Store::connect(url).await.unwrap(),
            (None, None) => unreachable!("a fresh database is SQLite or PostgreSQL"),
        }
    }

    /// Runs one statement on a connection of its own, outside the store.
    async fn raw(&self, sql: &str) -> Result<u64, sqlx::Error> {
        match (&self.sqlite, &self.url) {
            (Some((_, path)), _) => {
                let options = SqliteConnectOptions::new().filename(path).busy_timeout(BUSY_TIMEOUT);
                let mut conn = sqlx::SqliteConnection::connect_with(&options).await?;
                let done = sqlx::query(sql).execute(&mut conn).await.map(|d| d.rows_affected());
                conn.close().await?;
                done
            }
            (None, Some(url)) => {
                let mut conn = sqlx::PgConnection::connect(url).await?;
                let done = sqlx::query(sql).execute(&mut conn).await.map(|d| d.rows_affected());
                conn.close().await?;
                done
            }
            (None, None) => unreachable!("a fresh database is SQLite or PostgreSQL"),
        }
    }

    /// The first column (an integer) of every row of `sql`, read outside the store.
    async fn raw_i64s(&self, sql: &str) -> Vec<i64> {
        match (&self.sqlite, &self.url) {
            (Some((_, path)), _) => {
                let mut conn =
                    sqlx::SqliteConnection::connect_with(&SqliteConnectOptions::new().filename(path)).await.unwrap();
                sqlx::query_scalar(sql).fetch_all(&mut conn).await.unwrap()
            }
            (None, Some(url)) => {
                let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
                sqlx::query_scalar(sql).fetch_all(&mut conn).await.unwrap()
            }
            (None, None) => unreachable!("a fresh database is SQLite or PostgreSQL"),
        }
    }
}

/// Runs each named `async fn(Fresh)` as two tests, `<name>::sqlite` and `<name>::postgres`.
macro_rules! on_both_backends {
    ($($name:ident),+ $(,)?) => {$(
        mod $name {
            #[tokio::test]
            async fn sqlite() {
                super::$name(super::Fresh::sqlite().await).await;
            }

            #[tokio::test]
            async fn postgres() {
                if let Some(db) = super::Fresh::postgres().await {
                    super::$name(db).await;
                }
            }
        }
    )+};
}

on_both_backends!(
    reopening_an_existing_database_keeps_data_and_skips_applied_migrations,
    create_twice_is_already_exists,
    append_then_load_round_trips,
    duplicate_idempotency_key_is_reported_and_journal_unchanged,
    failing_event_rolls_back_the_whole_batch,
    foreign_key_rejects_events_of_a_missing_execution,
    append_to_unknown_task_is_not_found,
    newline_in_kind_or_bad_timestamp_is_rejected_before_writing,
    verify_chain_is_ok_then_detects_a_tampered_payload_at_its_seq,
    verify_chain_detects_a_deleted_tail,
    snapshot_then_events_after_snapshot_and_only_three_kept,
    load_latest_reads_the_plan_only_without_a_snapshot,
    load_latest_with_decodes_the_borrowed_snapshot_and_carries_its_error,
    a_cluster_job_runs_on_one_store_at_a_time_and_appends_reach_listeners,
    two_stores_on_one_database_see_each_others_writes,
    active_task_pointer_set_read_and_cleared,
    concurrent_writers_on_one_database_interleave_into_one_chain,
    writes_after_close_fail_with_an_error,
);

async fn fresh() -> (TempDir, PathBuf, Store) {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("baton.db");
    let store = Store::open(&path).await.unwrap();
    (dir, path, store)
}

fn summary(status: &str, steps_done: i64) -> Summary {
    Summary {
        status: status.to_owned(),
        current_phase: "build".to_owned(),
        steps_done,
        steps_total: 2,
        spend_usd: 0.25 * steps_done as f64,
    }
}

fn ev(key: &str, payload: &str) -> NewEvent {
    NewEvent {
        kind: "step_done".to_owned(),
        payload: payload.to_owned(),
        idempotency_key: key.to_owned(),
        at: T1.to_owned(),
    }
}

async fn created(store: &Store, task_id: &str) {
    store.create_execution(task_id, PLAN, &summary("pending", 0), T0).await.unwrap();
}

/// Creates `task_id` and appends one event, so this store knows its head (the group path
/// needs it).
async fn started(store: &Store, task_id: &str) {
    created(store, task_id).await;
    store.append(task_id, &[ev(&format!("{task_id}-first"), "{}")], &summary("running", 0)).await.unwrap();
}

fn holder(id: &str, pid: u32) -> LeaseInfo {
    LeaseInfo {
        holder: id.to_owned(),
        pid,
        host: "box-1".to_owned(),
        acquired_at: String::new(),
        expires_at: String::new(),
        epoch: 0,
        home: String::new(),
    }
}

async fn pragma(conn: &mut sqlx::SqliteConnection, name: &str) -> String {
    use sqlx::Row as _;
    let row = sqlx::query(&format!("pragma {name}")).fetch_one(conn).await.unwrap();
    match row.try_get::<String, _>(0) {
        Ok(text) => text,
        Err(_) => row.try_get::<i64, _>(0).unwrap().to_string(),
    }
}

#[tokio::test]
async fn open_sets_wal_foreign_keys_full_sync_and_busy_timeout_on_both_pools() {
    let (_dir, path, store) = fresh().await;
    assert!(path.exists());
    let mut writer = store.lite().writer.conn().await.unwrap();
    let mut reader = store.lite().reader.acquire().await.unwrap();
    for conn in [&mut *writer, &mut *reader] {
        assert_eq!(pragma(&mut *conn, "journal_mode").await, "wal");
        assert_eq!(pragma(&mut *conn, "foreign_keys").await, "1");
        // 2 = FULL
        assert_eq!(pragma(&mut *conn, "synchronous").await, "2");
        assert_eq!(pragma(&mut *conn, "busy_timeout").await, "10000");
    }
    assert_eq!(pragma(&mut reader, "mmap_size").await, READER_MMAP_BYTES, "readers map the file");
    drop(writer);
    let journal = store
        .lite()
        .writer
        .probe_journal_conn(|conn| {
            ["journal_mode", "foreign_keys", "synchronous", "busy_timeout"].map(|name| {
                match conn.query_row(&format!("pragma {name}"), [], |row| row.get::<_, rusqlite::types::Value>(0)) {
                    Ok(rusqlite::types::Value::Text(text)) => text,
                    Ok(rusqlite::types::Value::Integer(n)) => n.to_string(),
                    other => format!("{other:?}"),
                }
            })
        })
        .await;
    assert_eq!(journal, ["wal", "1", "2", "10000"], "the journal thread's connection");
}

async fn reopening_an_existing_database_keeps_data_and_skips_applied_migrations(db: Fresh) {
    let store = db.store.clone();
    created(&store, "t1").await;
    store.close().await;
    let again = db.open_again().await;
    assert_eq!(again.summary("t1").await.unwrap(), Some(summary("pending", 0)));
}

/// Readers of an existing file connect while the writer migrates; a file that exists but is
/// no database yet (zero bytes: `touch baton.db`) still opens, migrates and serves reads.
#[tokio::test]
async fn an_existing_empty_file_opens_as_a_fresh_database_for_both_workloads() {
    for workload in [Workload::Service, Workload::OneShot] {
        let dir = TempDir::new().unwrap();
        let path = dir.path().join("baton.db");
        std::fs::write(&path, b"").unwrap();
        let store = Store::open_for(&path, workload).await.unwrap();
        created(&store, "t1").await;
        assert_eq!(store.summary("t1").await.unwrap(), Some(summary("pending", 0)), "{workload:?}");
        let mut reader = store.lite().reader.acquire().await.unwrap();
        assert_eq!(pragma(&mut reader, "journal_mode").await, "wal", "{workload:?}");
        drop(reader);
        store.close().await;
    }
}

/// A one-shot store reads on its writer connection (issue 14.8: each connection is a thread,
/// a parse of the schema and fresh memory in every CLI process), so a load opens no read
/// connection; the writer maps the file as readers do. A read while a write holds that
/// connection goes to the read pool instead of waiting for it, so it never deadlocks on the
/// write lock.
#[tokio::test]
async fn a_one_shot_store_reads_on_its_writer_until_a_write_holds_it() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("baton.db");
    let setup = Store::open(&path).await.unwrap();
    created(&setup, "t1").await;
    setup.close().await;

    let store = Store::open_for(&path, Workload::OneShot).await.unwrap();
    let loaded = store.load_latest("t1").await.unwrap().expect("t1 exists");
    assert_eq!(loaded.summary, summary("pending", 0));
    assert_eq!(store.summary("t1").await.unwrap(), Some(summary("pending", 0)));
    assert!(store.verify_chain("t1").await.unwrap().ok);
    assert_eq!(store.lite().reader.size(), 0, "no read connection was opened");
    {
        let mut writer = store.lite().writer.conn().await.unwrap();
        assert_eq!(pragma(&mut writer, "mmap_size").await, READER_MMAP_BYTES, "the writer maps the file");
        // The writer connection is held (as by a write in flight): the read does not wait.
        let read = tokio::time::timeout(std::time::Duration::from_secs(5), store.summary("t1")).await;
        assert_eq!(read.expect("a read never waits for the write lock").unwrap(), Some(summary("pending", 0)));
        assert_eq!(store.lite().reader.size(), 1, "the held writer sent the read to the pool");
    }
    // After reads on the writer, a write still begins, commits and is read back.
    store.append("t1", &[ev("k2", "{}")], &summary("running", 0)).await.unwrap();
    assert_eq!(store.summary("t1").await.unwrap(), Some(summary("running", 0)));
    store.close().await;

    let service = Store::open(&path).await.unwrap();
    assert!(service.lite().writer.try_read().is_none(), "a long-lived store reads on its pool");
    service.close().await;
}

/// sqlx starts a pool's maintenance task only for a pool with an idle timeout or a lifetime;
/// that task's loop could spin without yielding and hang the runtime's shutdown (`baton
/// merge` under `tests/it/crash_everywhere.rs`), so the reader pools of both workloads have
/// neither; nor does PostgreSQL's pool (when this run has PostgreSQL).
#[tokio::test]
async fn reader_pools_have_no_idle_timeout_or_lifetime_so_no_maintenance_task() {
    for workload in [Workload::Service, Workload::OneShot] {
        let dir = TempDir::new().unwrap();
        let store = Store::open_for(&dir.path().join("baton.db"), workload).await.unwrap();
        let options = store.lite().reader.options();
        assert_eq!(options.get_idle_timeout(), None, "{workload:?}");
        assert_eq!(options.get_max_lifetime(), None, "{workload:?}");
        store.close().await;
    }
    if let Some(db) = Fresh::postgres().await {
        let Backend::Postgres(pg) = &db.store.backend else { unreachable!("a PostgreSQL store") };
        let options = pg.pool().options();
        assert_eq!((options.get_idle_timeout(), options.get_max_lifetime()), (None, None), "PostgreSQL");
        assert!(options.get_test_before_acquire(), "a dead connection is still caught before use");
        db.store.close().await;
    }
}

/// A one-shot process skips sqlx's migrator when the schema is exactly this build's, and
/// runs it otherwise: a database a newer Baton migrated, or one whose newest migration failed,
/// is refused as [`Store::open`] refuses it, never used as if it were current.
#[tokio::test]
async fn a_one_shot_open_runs_the_migrator_unless_the_schema_is_exactly_this_builds() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("baton.db");
    // A fresh file: nothing applied, so the migrator runs and the store works.
    let store = Store::open_for(&path, Workload::OneShot).await.unwrap();
    created(&store, "t1").await;
    store.close().await;
    // Current: opens again, with the same data.
    let store = Store::open_for(&path, Workload::OneShot).await.unwrap();
    assert_eq!(store.summary("t1").await.unwrap(), Some(summary("pending", 0)));
    let newest = sqlx::migrate!().iter().map(|m| m.version).max().unwrap();
    for (what, row) in [
        ("a newer Baton's migration", format!("({}, 'later', 1, x'00', 0)", newest + 1)),
        ("a failed newest migration", format!("({}, 'later', 0, x'00', 0)", newest + 1)),
        ("a failed migration below the newest", "(0, 'failed', 0, x'00', 0)".to_string()),
    ] {
        let mut other = sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display())).await.unwrap();
        sqlx::query(&format!(
            "insert into _sqlx_migrations (version, description, success, checksum, execution_time) values {row}"
        ))
        .execute(&mut other)
        .await
        .unwrap();
        for workload in [Workload::OneShot, Workload::Service] {
            let err = Store::open_for(&path, workload).await.expect_err(what);
            assert!(matches!(err, StoreError::Migrate(_)), "{what}, {workload:?}: {err}");
        }
        sqlx::query("delete from _sqlx_migrations where version > ? or version = 0")
            .bind(newest)
            .execute(&mut other)
            .await
            .unwrap();
        other.close().await.unwrap();
    }
    // What the fast path leaves to long-running processes: an applied migration whose
    // checksum differs (a development build's edited migration file) stops `Store::open`,
    // not a one-shot command.
    let mut other = sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display())).await.unwrap();
    sqlx::query("update _sqlx_migrations set checksum = x'00' where version = 1").execute(&mut other).await.unwrap();
    other.close().await.unwrap();
    let err = Store::open(&path).await.expect_err("a changed checksum");
    assert!(matches!(err, StoreError::Migrate(_)), "{err}");
    let one_shot = Store::open_for(&path, Workload::OneShot).await.unwrap();
    assert_eq!(one_shot.summary("t1").await.unwrap(), Some(summary("pending", 0)));
    one_shot.close().await;
    store.close().await;
}

#[tokio::test]
async fn open_in_a_missing_directory_names_the_path() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("no/such/dir/baton.db");
    let err = Store::open(&path).await.unwrap_err();
    assert!(matches!(err, StoreError::Open { .. }), "{err}");
    assert!(err.to_string().contains("no/such/dir/baton.db"), "{err}");
}

async fn create_twice_is_already_exists(db: Fresh) {
    let store = db.store.clone();
    created(&store, "t1").await;
    let err = store.create_execution("t1", PLAN, &summary("pending", 0), T0).await.unwrap_err();
    assert!(matches!(&err, StoreError::AlreadyExists { task_id } if task_id == "t1"));
    assert_eq!(err.to_string(), "execution t1 already exists");
}

async fn append_then_load_round_trips(db: Fresh) {
    let store = db.store.clone();
    created(&store, "t1").await;
    let outcomes = store
        .append("t1", &[ev("k1", r#"{"step":"a"}"#), ev("k2", "{\n  \"step\": \"b\"\n}")], &summary("running", 2))
        .await
        .unwrap();
    let h1 = event_hash(GENESIS_HASH, 1, "step_done", r#"{"step":"a"}"#, "k1", T1);
    let h2 = event_hash(&h1, 2, "step_done", "{\n  \"step\": \"b\"\n}", "k2", T1);
    assert_eq!(
        outcomes,
        vec![
            AppendOutcome::Appended { seq: 1, hash: h1.clone() },
            AppendOutcome::Appended { seq: 2, hash: h2.clone() },
        ]
    );

    let loaded = store.load("t1").await.unwrap().unwrap();
    assert_eq!(loaded.plan_json.as_deref(), Some(PLAN));
    assert_eq!(loaded.snapshot, None);
    assert_eq!(loaded.summary, summary("running", 2));
    assert_eq!(loaded.last_seq, 2);
    assert_eq!(
        loaded.events_after_snapshot,
        vec![
            StoredEvent {
                seq: 1,
                kind: "step_done".to_owned(),
                payload: r#"{"step":"a"}"#.to_owned(),
                idempotency_key: "k1".to_owned(),
                at: T1.to_owned(),
                prev_hash: GENESIS_HASH.to_owned(),
                hash: h1.clone(),
            },
            StoredEvent {
                seq: 2,
                kind: "step_done".to_owned(),
                payload: "{\n  \"step\": \"b\"\n}".to_owned(),
                idempotency_key: "k2".to_owned(),
                at: T1.to_owned(),
                prev_hash: h1,
                hash: h2,
            },
        ]
    );
    assert_eq!(store.events("t1", 1).await.unwrap().len(), 1);
    assert_eq!(store.load("missing").await.unwrap(), None);

    let board = store.list_executions().await.unwrap();
    assert_eq!(
        board,
        vec![ExecutionRow {
            task_id: "t1".to_owned(),
            summary: summary("running", 2),
            created_at: T0.to_owned(),
            updated_at: T1.to_owned(),
            last_seq: 2,
        }]
    );
}

#[tokio::test]
async fn event_hash_matches_the_documented_formula() {
    // printf '%s\n%s\n%s\n%s\n%s\n%s' "$(printf '0%.0s' {1..64})" 1 started '{}' k 2026-01-15T09:00:00Z | sha256sum
    assert_eq!(
        event_hash(GENESIS_HASH, 1, "started", "{}", "k", T0),
        "6f850f0b211bc7d3ef414ad9f592372ddc07732e9a2282727a77340b2613508e"
    );
}

async fn duplicate_idempotency_key_is_reported_and_journal_unchanged(db: Fresh) {
    let store = db.store.clone();
    created(&store, "t1").await;
    store.append("t1", &[ev("k1", "{}")], &summary("running", 1)).await.unwrap();
    let before = store.events("t1", 0).await.unwrap();

    let outcomes = store
        .append("t1", &[ev("k1", r#"{"different":true}"#), ev("k2", "{}"), ev("k2", "{}")], &summary("running", 2))
        .await
        .unwrap();
    assert_eq!(outcomes[0], AppendOutcome::Duplicate { seq: 1 });
    assert!(matches!(outcomes[1], AppendOutcome::Appended { seq: 2, .. }));
    // A repeat inside the same batch is a duplicate of the event written earlier in it.
    assert_eq!(outcomes[2], AppendOutcome::Duplicate { seq: 2 });

    let after = store.events("t1", 0).await.unwrap();
    assert_eq!(after.len(), 2);
    assert_eq!(after[0], before[0]);

    // Replaying the whole batch (a retry after a crash) writes nothing.
    let replay = store.append("t1", &[ev("k1", "{}"), ev("k2", "{}")], &summary("running", 2)).await.unwrap();
    assert_eq!(replay, vec![AppendOutcome::Duplicate { seq: 1 }, AppendOutcome::Duplicate { seq: 2 }]);
    assert_eq!(store.events("t1", 0).await.unwrap(), after);
    assert!(store.verify_chain("t1").await.unwrap().ok);
}

async fn failing_event_rolls_back_the_whole_batch(db: Fresh) {
    let store = db.store.clone();
    created(&store, "t1").await;
    store.append("t1", &[ev("k1", "{}")], &summary("running", 1)).await.unwrap();
    // The second event violates the json_valid check after the first was inserted in the
    // same transaction.
    let err = store
        .append("t1", &[ev("k2", "{}"), ev("k3", "not json"), ev("k4", "{}")], &summary("broken", 99))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Sqlx(_)), "{err}");

    let loaded = store.load("t1").await.unwrap().unwrap();
    assert_eq!(loaded.last_seq, 1);
    assert_eq!(loaded.events_after_snapshot.len(), 1);
    assert_eq!(loaded.summary, summary("running", 1));
    // The writer connection is usable again and the chain continues at seq 2.
    let next = store.append("t1", &[ev("k2", "{}")], &summary("running", 2)).await.unwrap();
    assert!(matches!(next[0], AppendOutcome::Appended { seq: 2, .. }), "{next:?}");
    assert!(store.verify_chain("t1").await.unwrap().ok);
}

async fn foreign_key_rejects_events_of_a_missing_execution(db: Fresh) {
    // Below the API (which reports NotFound first), the schema itself refuses orphan events.
    let err = db
        .raw(&format!(
            "insert into execution_events \
             (task_id, seq, kind, payload, idempotency_key, at, prev_hash, hash) \
             values ('ghost', 1, 'k', '{{}}', 'k', '{T0}', '{GENESIS_HASH}', 'x')"
        ))
        .await
        .unwrap_err();
    assert!(err.to_string().to_lowercase().contains("foreign key"), "{err}");
}

async fn append_to_unknown_task_is_not_found(db: Fresh) {
    let store = db.store.clone();
    let err = store.append("ghost", &[ev("k1", "{}")], &summary("running", 1)).await.unwrap_err();
    assert!(matches!(&err, StoreError::NotFound { task_id } if task_id == "ghost"));
    assert_eq!(err.to_string(), "no execution with task id ghost");
    assert!(matches!(store.events("ghost", 0).await.unwrap_err(), StoreError::NotFound { .. }));
}

async fn newline_in_kind_or_bad_timestamp_is_rejected_before_writing(db: Fresh) {
    let store = db.store.clone();
    created(&store, "t1").await;
    let mut bad_kind = ev("k2", "{}");
    bad_kind.kind = "a\nb".to_owned();
    let err = store.append("t1", &[ev("k1", "{}"), bad_kind], &summary("running", 1)).await.unwrap_err();
    assert!(matches!(err, StoreError::InvalidArgument(_)), "{err}");
    let mut bad_at = ev("k1", "{}");
    bad_at.at = "yesterday".to_owned();
    let err = store.append("t1", &[bad_at], &summary("running", 1)).await.unwrap_err();
    assert!(matches!(err, StoreError::InvalidTimestamp { .. }), "{err}");
    assert!(store.events("t1", 0).await.unwrap().is_empty());
}

async fn verify_chain_is_ok_then_detects_a_tampered_payload_at_its_seq(db: Fresh) {
    let store = db.store.clone();
    created(&store, "t1").await;
    let batch: Vec<NewEvent> = (1..=5).map(|i| ev(&format!("k{i}"), &format!(r#"{{"i":{i}}}"#))).collect();
    store.append("t1", &batch, &summary("running", 2)).await.unwrap();
    assert_eq!(store.verify_chain("t1").await.unwrap(), ChainReport { events: 5, first_bad_seq: None, ok: true });

    // Tamper from outside, as another process with the database's shell would.
    let refused = db.raw("update execution_events set payload = '{\"i\":33}' where seq = 3").await.unwrap_err();
    assert!(refused.to_string().contains("append-only"), "{refused}");
    let drop_trigger = match db.url {
        None => "drop trigger execution_events_append_only",
        Some(_) => "drop trigger execution_events_append_only on execution_events",
    };
    db.raw(drop_trigger).await.unwrap();
    db.raw("update execution_events set payload = '{\"i\":33}' where seq = 3").await.unwrap();

    assert_eq!(store.verify_chain("t1").await.unwrap(), ChainReport { events: 5, first_bad_seq: Some(3), ok: false });
}

async fn verify_chain_detects_a_deleted_tail(db: Fresh) {
    let store = db.store.clone();
    created(&store, "t1").await;
    store.append("t1", &[ev("k1", "{}"), ev("k2", "{}"), ev("k3", "{}")], &summary("running", 2)).await.unwrap();
    db.raw("delete from execution_events where seq = 3").await.unwrap();
    let report = store.verify_chain("t1").await.unwrap();
    assert_eq!(report.events, 2);
    assert_eq!(report.first_bad_seq, Some(3));
    assert!(!report.ok);
}

async fn snapshot_then_events_after_snapshot_and_only_three_kept(db: Fresh) {
    let store = db.store.clone();
    created(&store, "t1").await;
    let batch: Vec<NewEvent> = (1..=6).map(|i| ev(&format!("k{i}"), "{}")).collect();
    store.append("t1", &batch, &summary("running", 1)).await.unwrap();
    for seq in 1..=4 {
        store.put_snapshot("t1", seq, &format!(r#"{{"upto":{seq}}}"#), T2).await.unwrap();
    }
    let loaded = store.load("t1").await.unwrap().unwrap();
    assert_eq!(loaded.snapshot, Some(Snapshot { seq: 4, state: r#"{"upto":4}"#.to_owned() }));
    let seqs: Vec<i64> = loaded.events_after_snapshot.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, vec![5, 6]);
    assert_eq!(loaded.last_seq, 6);

    let kept = db.raw_i64s("select seq from snapshots where task_id = 't1' order by seq").await;
    assert_eq!(kept, vec![2, 3, 4]);

    let err = store.put_snapshot("t1", 7, "{}", T2).await.unwrap_err();
    assert!(matches!(err, StoreError::SnapshotAhead { seq: 7, last_seq: 6, .. }), "{err}");
    assert!(matches!(store.put_snapshot("ghost", 0, "{}", T2).await.unwrap_err(), StoreError::NotFound { .. }));
}

/// Issue 14.8: every CLI call loaded the plan as created (a megabyte at 5,000 steps) besides
/// the snapshot that already holds it.
async fn load_latest_reads_the_plan_only_without_a_snapshot(db: Fresh) {
    let store = db.store.clone();
    created(&store, "t1").await;
    store.append("t1", &[ev("k1", "{}"), ev("k2", "{}")], &summary("running", 1)).await.unwrap();
    let bare = store.load_latest("t1").await.unwrap().unwrap();
    assert_eq!(bare.plan_json.as_deref(), Some(PLAN), "no snapshot: the plan is where a load starts");
    assert_eq!(bare.events_after_snapshot.len(), 2);

    store.put_snapshot("t1", 1, r#"{"upto":1}"#, T2).await.unwrap();
    let latest = store.load_latest("t1").await.unwrap().unwrap();
    assert_eq!(latest.plan_json, None);
    assert_eq!(latest.snapshot, Some(Snapshot { seq: 1, state: r#"{"upto":1}"#.to_owned() }));
    assert_eq!(latest.events_after_snapshot.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![2]);
    assert_eq!((latest.last_seq, latest.summary), (2, summary("running", 1)));
    assert_eq!(store.load("t1").await.unwrap().unwrap().plan_json.as_deref(), Some(PLAN));
    assert_eq!(store.load_latest("ghost").await.unwrap(), None);
}

/// Issue 14.8: a load hands the snapshot's text to the caller's decoder while it is the row's,
/// instead of copying a megabyte into a `String` first; the decoder's error is the caller's.
async fn load_latest_with_decodes_the_borrowed_snapshot_and_carries_its_error(db: Fresh) {
    let store = db.store.clone();
    created(&store, "t1").await;
    store.append("t1", &[ev("k1", "{}"), ev("k2", "{}")], &summary("running", 1)).await.unwrap();
    let decode = |json: &str| serde_json::from_str::<BTreeMap<String, i64>>(json).map(|m| m.get("upto").copied());
    let bare = store.load_latest_with("t1", decode).await.unwrap().unwrap();
    assert!(bare.snapshot.is_none(), "no snapshot, nothing decoded");
    assert_eq!(bare.plan_json.as_deref(), Some(PLAN));

    store.put_snapshot("t1", 1, r#"{"upto":1}"#, T2).await.unwrap();
    let latest = store.load_latest_with("t1", decode).await.unwrap().unwrap();
    let snapshot = latest.snapshot.unwrap();
    assert_eq!((snapshot.seq, snapshot.state.unwrap()), (1, Some(1)));
    assert_eq!(latest.events_after_snapshot.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![2]);

    store.put_snapshot("t1", 2, r#"{"upto":"two"}"#, T2).await.unwrap();
    let broken = store.load_latest_with("t1", decode).await.unwrap().unwrap().snapshot.unwrap();
    assert_eq!(broken.seq, 2);
    assert!(broken.state.is_err(), "the decoder's error reaches the caller: {:?}", broken.state);
    assert!(store.load_latest_with("ghost", decode).await.unwrap().is_none());
}

async fn a_cluster_job_runs_on_one_store_at_a_time_and_appends_reach_listeners(db: Fresh) {
    let first = db.store.clone();
    let second = db.open_again().await;
    let postgres = first.backend_name() == "postgres";

    let job = first.cluster_job("report").await.unwrap().expect("free");
    // Another replica's pass of the same job is skipped while this one runs (PostgreSQL); on
    // SQLite there is one machine and every pass runs. Another job is independent.
    assert_eq!(second.cluster_job("report").await.unwrap().is_none(), postgres);
    let other = second.cluster_job("gc").await.unwrap().expect("another job");
    other.done().await;
    job.done().await;
    second.cluster_job("report").await.unwrap().expect("free again once the pass ended").done().await;

    let listener = second.listen_changes().await.unwrap();
    assert_eq!(listener.is_some(), postgres, "notifications exist on PostgreSQL only");
    if let Some(mut listener) = listener {
        created(&first, "t1").await;
        first.append("t1", &[ev("k1", "{}")], &summary("running", 1)).await.unwrap();
        let change = tokio::time::timeout(std::time::Duration::from_secs(10), listener.recv()).await.unwrap().unwrap();
        assert_eq!(change, Change { channel: "baton_events".to_owned(), payload: "t1".to_owned() });
    }
}

async fn two_stores_on_one_database_see_each_others_writes(db: Fresh) {
    let first = db.store.clone();
    let second = db.open_again().await;

    created(&first, "t1").await;
    second.append("t1", &[ev("k1", "{}")], &summary("running", 1)).await.unwrap();
    first.append("t1", &[ev("k2", "{}"), ev("k1", "{}")], &summary("running", 2)).await.unwrap();
    let from_second = second.load("t1").await.unwrap().unwrap();
    assert_eq!(from_second.last_seq, 2);
    assert_eq!(from_second.summary, summary("running", 2));
    assert!(second.verify_chain("t1").await.unwrap().ok);

    let a = holder("driver-a", 1);
    first.acquire_lease("t1", &a, T0, 30).await.unwrap();
    assert!(matches!(
        second.acquire_lease("t1", &holder("driver-b", 2), T1, 30).await,
        Err(StoreError::LeaseHeld { .. })
    ));

    second.set_active_task("t1").await.unwrap();
    assert_eq!(first.active_task().await.unwrap().as_deref(), Some("t1"));
}

async fn active_task_pointer_set_read_and_cleared(db: Fresh) {
    let store = db.store.clone();
    assert_eq!(store.active_task().await.unwrap(), None);
    created(&store, "t1").await;
    // Creating an execution makes it the active one, in the same commit (a start killed
    // after it never leaves the previous execution active).
    assert_eq!(store.active_task().await.unwrap().as_deref(), Some("t1"));
    created(&store, "t2").await;
    assert_eq!(store.active_task().await.unwrap().as_deref(), Some("t2"));
    store.set_active_task("t1").await.unwrap();
    assert_eq!(store.active_task().await.unwrap().as_deref(), Some("t1"));
    store.set_active_task("t2").await.unwrap();
    assert_eq!(store.active_task().await.unwrap().as_deref(), Some("t2"));
    assert!(matches!(store.set_active_task("ghost").await, Err(StoreError::NotFound { .. })));
    store.clear_active_task().await.unwrap();
    assert_eq!(store.active_task().await.unwrap(), None);
}

async fn concurrent_writers_on_one_database_interleave_into_one_chain(db: Fresh) {
    let first = db.store.clone();
    let second = db.open_again().await;
    created(&first, "t1").await;
    let run = |store: Store, who: &'static str| async move {
        for i in 0..20 {
            store.append("t1", &[ev(&format!("{who}-{i}"), "{}")], &summary("running", 1)).await.unwrap();
        }
    };
    let a = tokio::spawn(run(first.clone(), "a"));
    let b = tokio::spawn(run(second.clone(), "b"));
    a.await.unwrap();
    b.await.unwrap();
    let report = first.verify_chain("t1").await.unwrap();
    assert_eq!(report.events, 40);
    assert!(report.ok);
}

/// Two processes opening a new file at once both migrate it. The input that broke it: the two
/// collided on more than three migrations in turn (`duplicate column name: source_key` at
/// migration 10 on the last of three attempts), so several fresh files are opened in parallel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_opens_of_a_new_file_both_succeed() {
    let dir = TempDir::new().unwrap();
    for n in 0..8 {
        let path = dir.path().join(format!("baton-{n}.db"));
        let open = |path: PathBuf| tokio::spawn(async move { Store::open(&path).await });
        let (a, b) = tokio::join!(open(path.clone()), open(path.clone()));
        let (a, b) = (a.unwrap().unwrap(), b.unwrap().unwrap());
        created(&a, "t1").await;
        assert!(b.summary("t1").await.unwrap().is_some());
    }
}

async fn writes_after_close_fail_with_an_error(db: Fresh) {
    let store = db.store.clone();
    started(&store, "t1").await;
    store.close().await;
    let err = store.append("t1", &[ev("late", "{}")], &summary("running", 1)).await.unwrap_err();
    assert!(err.to_string().contains("closed"), "{err}");
    let err = store.create_execution("t2", PLAN, &summary("pending", 0), T0).await.unwrap_err();
    assert!(err.to_string().contains("closed"), "{err}");
}

// The contracts below use `on_both_backends!` and the fixtures above.
/// Group commit on SQLite's journal thread: a group's chains, failures and a dead thread.
mod group_commit;
/// Leases, fencing, unleased appends and the base every replica reads.
mod leases;
/// The PMO, webhook, auth, forge and quota contracts.
mod pmo;
