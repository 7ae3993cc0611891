//! Transition cost for plans of 10, 1,000 and 10,000 steps (run by hand: `cargo bench --bench
//! transitions`). Prints, per plan size:
//!
//! * engine µs per transition: `apply` + `next_action`, in memory;
//! * durable µs per transition for one execution driven alone: each event is applied, journaled
//!   (journal row + summary, `synchronous=FULL`) and committed before `next_action` runs, so
//!   this is one fsync'd commit per transition;
//! * durable transitions/s with [`CONCURRENT`] executions of that size driven at once, each
//!   exactly as above (every record still waits for its own commit): appends queued while a
//!   commit is in flight share the next one (group commit).
//!
//! Beside the durable figure, the same bare commit through sqlx ([`sqlx_floor`]) and the
//! raw-SQLite floor ([`raw_floor`]: a bare single-row commit through rusqlite, no sqlx, same
//! pragmas), and durable ÷ raw floor; and the journal floor ([`journal_floor`]: what a record
//! commits — event row and summary update on a Baton database — through rusqlite with nothing
//! of Baton around it), which splits the gap into SQLite's cost of the journal's rows and
//! Baton's own overhead. They are measured in turn, five times each, and each printed figure is
//! the median of its five.
//!
//! Targets (issue #2): ≥ 5,000 durable transitions/s on a 2-core machine, and the 10,000-step
//! figure within 2× of the 10-step one; (issue 14.9) durable ≤ 1.3× the raw floor.
//! `BENCH_STEPS=10,1000` runs other plan sizes. Plans are phases of 10 independent steps; every
//! DISPATCH is answered by a completed record, every CHECKPOINT acknowledged.

use baton::clock::Stopwatch;
use baton::engine;
use baton::model::action::Action;
use baton::model::event::{Event, EventKind, RecordStatus};
use baton::model::plan::{MachinePlan, PlanPhase, PlanStep};
use baton::model::state::ExecutionState;
use baton::runtime::config::DataDir;
use baton::runtime::executions::Executions;

fn plan(task_id: &str, steps: usize) -> MachinePlan {
    let mut plan = MachinePlan::from_json(&format!(r#"{{"task_id":"{task_id}","task_summary":"bench"}}"#))
        .unwrap_or_else(|e| panic!("bench plan: {e}"));
    let phases = steps.div_ceil(10);
    for p in 0..phases {
        let id = i64::try_from(p + 1).unwrap_or(i64::MAX);
        let mut phase = PlanPhase::new(id, format!("P{id}"));
        for s in 0..10.min(steps - p * 10) {
            phase.steps.push(Box::new(PlanStep::new(format!("{id}.{}", s + 1), "dev", "work")));
        }
        plan.phases.push(phase);
    }
    plan
}

fn record(step_id: &str) -> Event {
    Event::new(EventKind::StepRecorded {
        step_id: step_id.to_string(),
        agent_name: "dev".into(),
        status: RecordStatus::Complete,
        outcome: "done".into(),
        files_changed: vec!["a.txt".into()],
        commit_hash: "0123456789abcdef0123456789abcdef01234567".into(),
        tokens: 100,
        cost_usd: 0.01,
        duration_seconds: 1.0,
        error: String::new(),
        usage: None,
    })
}

/// The event that answers `action`, or `None` once the execution is over. A DISPATCH is
/// answered by recording its step complete, a CHECKPOINT by acknowledging it: the same
/// transitions `execute run` journals for a plan whose steps all succeed.
fn answer(action: &Action) -> Option<Event> {
    match action {
        Action::Dispatch(d) => Some(record(&d.step_id)),
        Action::Checkpoint(_) => Some(Event::new(EventKind::CheckpointAcknowledged)),
        Action::Complete { .. } => None,
        other => panic!("bench plans only dispatch and checkpoint, got {other:?}"),
    }
}

/// Engine µs per transition: `apply` + `next_action`, in memory.
fn engine_bench(steps: usize) -> f64 {
    let plan = plan("bench-engine", steps);
    let mut state = engine::start(plan, "2026-01-01T00:00:00+00:00").unwrap_or_else(|e| panic!("{e}"));
    let mut transitions = 0u32;
    let watch = Stopwatch::start();
    while let Some(event) = answer(&engine::next_action(&state)) {
        engine::apply(&mut state, &event, "2026-01-01T00:00:01+00:00").unwrap_or_else(|e| panic!("{e}"));
        transitions += 1;
    }
    watch.elapsed().as_secs_f64() * 1e6 / f64::from(transitions)
}

/// Drives a created execution to COMPLETE through `execs`, one durable transition at a time.
/// Returns the transitions made.
async fn drive(execs: &Executions, mut state: ExecutionState) -> u32 {
    let mut transitions = 0u32;
    while let Some(event) = answer(&engine::next_action(&state)) {
        execs.record(&mut state, event).await.unwrap_or_else(|e| panic!("{e}"));
        transitions += 1;
    }
    transitions
}

/// Durable µs per transition for one execution driven alone, `reps` times one after another
/// over one store opened beforehand (as `baton serve` holds one): each record waits for its
/// commit. The mean over the reps.
async fn durable_bench(steps: usize, reps: usize, dir: &std::path::Path) -> f64 {
    let data = DataDir::open(&dir.join(format!("d{steps}"))).unwrap_or_else(|e| panic!("{e}"));
    let execs = Executions::open(data).await.unwrap_or_else(|e| panic!("{e}"));
    let mut total = 0.0;
    for r in 0..reps {
        let state = execs.create(plan(&format!("bench-{steps}-{r}"), steps)).await.unwrap_or_else(|e| panic!("{e}"));
        let watch = Stopwatch::start();
        let transitions = drive(&execs, state).await;
        total += watch.elapsed().as_secs_f64() * 1e6 / f64::from(transitions);
    }
    total / reps as f64
}

/// Durable transitions/s with `CONCURRENT` executions of `steps` steps driven at once in one
/// process (one store), each by its own task, each record waiting for its commit; and the mean
/// number of events a commit carried.
async fn concurrent_bench(steps: usize, dir: &std::path::Path) -> (f64, f64) {
    let data = DataDir::open(&dir.join(format!("c{steps}"))).unwrap_or_else(|e| panic!("{e}"));
    let execs = Executions::open(data).await.unwrap_or_else(|e| panic!("{e}"));
    // Small plans are run in several rounds so the figure is stable.
    let rounds = (2_000 / (steps * CONCURRENT)).max(1);
    let mut states = Vec::new();
    for round in 0..rounds {
        for i in 0..CONCURRENT {
            let plan = plan(&format!("conc-{steps}-{round}-{i}"), steps);
            states.push(execs.create(plan).await.unwrap_or_else(|e| panic!("{e}")));
        }
    }
    let watch = Stopwatch::start();
    let mut transitions = 0u32;
    let mut states = states.into_iter();
    for _ in 0..rounds {
        let tasks: Vec<_> = states
            .by_ref()
            .take(CONCURRENT)
            .map(|state| {
                let execs = execs.clone();
                tokio::spawn(async move { drive(&execs, state).await })
            })
            .collect();
        for task in tasks {
            transitions += task.await.unwrap_or_else(|e| panic!("{e}"));
        }
    }
    let rate = f64::from(transitions) / watch.elapsed().as_secs_f64();
    let totals = execs.store().metric_totals().await.unwrap_or_else(|e| panic!("{e}"));
    (rate, totals.journal_appends as f64 / totals.journal_commits.max(1) as f64)
}

/// Executions driven at once by [`concurrent_bench`].
const CONCURRENT: usize = 32;

/// The raw-SQLite floor (issue 14.9): µs per bare durable commit without sqlx, on one held
/// rusqlite connection to a WAL database with `synchronous=FULL` — `BEGIN IMMEDIATE`, one
/// cached single-row insert of an event-sized payload, `COMMIT` (one fsync of the WAL) — on
/// the calling thread. One execution's durable transitions cannot beat it.
fn raw_floor(dir: &std::path::Path, commits: u32) -> f64 {
    static RUN: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let run = RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = dir.join(format!("raw-{run}.db"));
    let conn = rusqlite::Connection::open(&path).unwrap_or_else(|e| panic!("{e}"));
    let mode: String = conn.query_row("pragma journal_mode = wal", [], |r| r.get(0)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(mode, "wal");
    conn.execute_batch("pragma synchronous = full; create table t (id integer primary key, body text not null);")
        .unwrap_or_else(|e| panic!("{e}"));
    let body = "x".repeat(300);
    let watch = Stopwatch::start();
    for _ in 0..commits {
        conn.execute_batch("begin immediate").unwrap_or_else(|e| panic!("{e}"));
        conn.prepare_cached("insert into t (body) values (?1)")
            .and_then(|mut insert| insert.execute([&body]))
            .unwrap_or_else(|e| panic!("{e}"));
        conn.execute_batch("commit").unwrap_or_else(|e| panic!("{e}"));
    }
    watch.elapsed().as_secs_f64() * 1e6 / f64::from(commits)
}

/// The journal's own writes with nothing of Baton around them: on a Baton database (its
/// migrations, indexes and triggers; one execution created through the store), one held
/// rusqlite connection on the calling thread commits, per transition, what a record commits —
/// the chained event row (a record's payload size) and the execution's summary and head —
/// `BEGIN IMMEDIATE`, insert, update, `COMMIT`. Durable ÷ this is Baton's own overhead (the
/// engine, serialization, the hand-off to the journal thread, snapshots); this ÷ the raw floor
/// is what the journal's rows and indexes cost SQLite.
fn journal_floor(rt: &tokio::runtime::Runtime, dir: &std::path::Path, commits: u32) -> f64 {
    use baton::store::{event_hash, Store, Summary};
    static RUN: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let run = RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = dir.join(format!("journal-{run}.db"));
    let summary = Summary {
        status: "running".into(),
        current_phase: "P1".into(),
        steps_done: 0,
        steps_total: 10,
        spend_usd: 0.0,
    };
    rt.block_on(async {
        let store = Store::open(&path).await.unwrap_or_else(|e| panic!("{e}"));
        store.create_execution("floor", "{}", &summary, "2026-01-15T09:00:00Z").await.unwrap_or_else(|e| panic!("{e}"));
        store.close().await;
    });
    let conn = rusqlite::Connection::open(&path).unwrap_or_else(|e| panic!("{e}"));
    conn.execute_batch("pragma synchronous = full; pragma foreign_keys = on;").unwrap_or_else(|e| panic!("{e}"));
    let (mut seq, mut hash): (i64, String) = conn
        .query_row("select last_seq, last_hash from executions where task_id = 'floor'", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap_or_else(|e| panic!("{e}"));
    let payload = format!(r#"{{"kind":"step_recorded","outcome":"{}"}}"#, "x".repeat(260));
    let at = "2026-01-15T09:00:01Z";
    let watch = Stopwatch::start();
    for _ in 0..commits {
        let key = format!("k{}", seq + 1);
        let next = event_hash(&hash, seq + 1, "step_recorded", &payload, &key, at);
        conn.execute_batch("begin immediate").unwrap_or_else(|e| panic!("{e}"));
        conn.prepare_cached(
            "insert into execution_events (task_id, seq, kind, payload, idempotency_key, at, prev_hash, hash) \
             values ('floor', ?1, 'step_recorded', ?2, ?3, ?4, ?5, ?6)",
        )
        .and_then(|mut insert| insert.execute(rusqlite::params![seq + 1, payload, key, at, hash, next]))
        .and_then(|_| {
            conn.prepare_cached(
                "update executions set status = 'running', current_phase = 'P1', steps_done = ?1, \
                 steps_total = 10, spend_usd = 0, last_seq = ?1, last_hash = ?2, updated_at = ?3 \
                 where task_id = 'floor'",
            )
        })
        .and_then(|mut update| update.execute(rusqlite::params![seq + 1, next, at]))
        .unwrap_or_else(|e| panic!("{e}"));
        conn.execute_batch("commit").unwrap_or_else(|e| panic!("{e}"));
        (seq, hash) = (seq + 1, next);
    }
    watch.elapsed().as_secs_f64() * 1e6 / f64::from(commits)
}

/// The same bare commit through sqlx: one multi-statement `BEGIN IMMEDIATE; insert; COMMIT`
/// round trip per event on one held connection (sqlx's worker thread does the SQLite calls).
async fn sqlx_floor(dir: &std::path::Path, commits: u32) -> f64 {
    use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
    use sqlx::ConnectOptions as _;
    static RUN: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let run = RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut conn = SqliteConnectOptions::new()
        .filename(dir.join(format!("sqlx-{run}.db")))
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full)
        .connect()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    sqlx::query("create table t (id integer primary key, body text not null)")
        .execute(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let body = "x".repeat(300);
    let watch = Stopwatch::start();
    for _ in 0..commits {
        sqlx::query("begin immediate; insert into t (body) values (?); commit;")
            .bind(&body)
            .execute(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    watch.elapsed().as_secs_f64() * 1e6 / f64::from(commits)
}

/// Median of `runs` measurements.
fn median(mut runs: Vec<f64>) -> f64 {
    runs.sort_by(f64::total_cmp);
    runs.get(runs.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Plan sizes to run: `BENCH_STEPS` (comma-separated), else 10, 1,000 and 10,000.
fn sizes() -> Vec<usize> {
    std::env::var("BENCH_STEPS")
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect::<Vec<usize>>())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| vec![10, 1_000, 10_000])
}

fn main() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap_or_else(|e| panic!("{e}"));
    println!(
        "{:>8}  {:>15}  {:>16}  {:>15}  {:>16}  {:>14}  {:>8}  {:>15}  {:>20}  {:>10}",
        "steps",
        "engine µs/trans",
        "durable µs/trans",
        "sqlx commit µs",
        "journal floor µs",
        "raw floor µs",
        "÷ floor",
        "durable trans/s",
        format!("{CONCURRENT} at once: trans/s"),
        "mean group"
    );
    let mut first = None;
    for steps in sizes() {
        // Small plans are measured over several executions so the figure is stable.
        let reps = (10_000 / steps).clamp(1, 100);
        let engine_us: f64 = (0..reps).map(|_| engine_bench(steps)).sum::<f64>() / reps as f64;
        // The floor and sqlx's durable path are measured in turn, five times each, on the same
        // disk and the same moment's load; each figure is the median of its five.
        let mut floors = Vec::new();
        let mut durables = Vec::new();
        let mut sqlx_floors = Vec::new();
        let mut journal_floors = Vec::new();
        for round in 0..5 {
            floors.push(raw_floor(tmp.path(), 1_000));
            journal_floors.push(journal_floor(&rt, tmp.path(), 1_000));
            sqlx_floors.push(rt.block_on(sqlx_floor(tmp.path(), 1_000)));
            durables.push(rt.block_on(durable_bench(steps, reps, &tmp.path().join(format!("r{round}")))));
        }
        let (floor, sqlx_commit, durable_us) = (median(floors), median(sqlx_floors), median(durables));
        let journal = median(journal_floors);
        let (concurrent, group) = rt.block_on(concurrent_bench(steps, tmp.path()));
        println!(
            "{steps:>8}  {engine_us:>15.2}  {durable_us:>16.1}  {sqlx_commit:>15.1}  {journal:>16.1}  {floor:>14.1}  {:>7.2}×  {:>15.0}  {concurrent:>20.0}  {group:>10.1}",
            durable_us / floor,
            1e6 / durable_us
        );
        let base = *first.get_or_insert((steps, durable_us));
        if steps >= 10 * base.0 {
            println!("{steps}-step durable cost is {:.2}× the {}-step one (target ≤ 2×)", durable_us / base.1, base.0);
        }
    }
    println!(
        "raw floor: BEGIN IMMEDIATE, one insert, COMMIT through rusqlite (WAL, synchronous=FULL), no sqlx; \
         sqlx commit: the same through sqlx, one round trip; journal floor: a record's event row and summary \
         update on a Baton database through rusqlite, nothing of Baton around them; target (issue 14.9): \
         durable ≤ 1.3× the raw floor"
    );
}
