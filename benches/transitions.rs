//! Transition cost for plans of 10, 1,000 and 10,000 steps (run by hand: `cargo bench --bench
//! transitions`). Prints, per plan size:
//!
//! * engine µs per transition: `apply(record)` + `next_action`, in memory;
//! * durable µs per transition: the same through the execution service, i.e. one SQLite
//!   transaction per event (journal row + summary) with `synchronous=FULL`, then `next_action`.
//!
//! Targets (issue #2): ≥ 5,000 durable transitions/s on a 2-core machine, and the 10,000-step
//! figure within 2× of the 10-step one. Plans are phases of 10 independent steps.

use baton::clock::Stopwatch;
use baton::engine;
use baton::model::event::{Event, EventKind, RecordStatus};
use baton::model::plan::{MachinePlan, PlanPhase, PlanStep};
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
            phase.steps.push(PlanStep::new(format!("{id}.{}", s + 1), "dev", "work"));
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

fn step_ids(plan: &MachinePlan) -> Vec<String> {
    plan.steps().map(|(_, s)| s.step_id.clone()).collect()
}

fn engine_bench(steps: usize) -> f64 {
    let plan = plan("bench-engine", steps);
    let ids = step_ids(&plan);
    let mut state = engine::start(plan, "2026-01-01T00:00:00+00:00").unwrap_or_else(|e| panic!("{e}"));
    let watch = Stopwatch::start();
    for id in &ids {
        engine::apply(&mut state, &record(id), "2026-01-01T00:00:01+00:00").unwrap_or_else(|e| panic!("{e}"));
        std::hint::black_box(engine::next_action(&state));
    }
    watch.elapsed().as_secs_f64() * 1e6 / ids.len() as f64
}

async fn durable_bench(steps: usize, dir: &std::path::Path) -> f64 {
    let data = DataDir::open(&dir.join(format!("d{steps}"))).unwrap_or_else(|e| panic!("{e}"));
    let execs = Executions::open(data).await.unwrap_or_else(|e| panic!("{e}"));
    let plan = plan(&format!("bench-{steps}"), steps);
    let ids = step_ids(&plan);
    let mut state = execs.create(plan).await.unwrap_or_else(|e| panic!("{e}"));
    let watch = Stopwatch::start();
    for id in &ids {
        execs.record(&mut state, record(id)).await.unwrap_or_else(|e| panic!("{e}"));
        std::hint::black_box(engine::next_action(&state));
    }
    watch.elapsed().as_secs_f64() * 1e6 / ids.len() as f64
}

/// The disk's floor: one single-row `BEGIN IMMEDIATE … COMMIT` per event through sqlx on a
/// WAL database with `synchronous=FULL`, nothing else. Durable transitions cannot beat it.
async fn commit_floor(dir: &std::path::Path) -> f64 {
    use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
    let options = SqliteConnectOptions::new()
        .filename(dir.join("floor.db"))
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full);
    let pool =
        SqlitePoolOptions::new().max_connections(1).connect_with(options).await.unwrap_or_else(|e| panic!("{e}"));
    sqlx::query("create table t (id integer primary key, body text not null)")
        .execute(&pool)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let n = 2_000;
    let watch = Stopwatch::start();
    for i in 0..n {
        let mut tx = pool.begin_with("BEGIN IMMEDIATE").await.unwrap_or_else(|e| panic!("{e}"));
        sqlx::query("insert into t (body) values (?)")
            .bind(format!("event {i}"))
            .execute(&mut *tx)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        tx.commit().await.unwrap_or_else(|e| panic!("{e}"));
    }
    watch.elapsed().as_secs_f64() * 1e6 / f64::from(n)
}

fn main() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap_or_else(|e| panic!("{e}"));
    println!("{:>8}  {:>16}  {:>17}  {:>15}", "steps", "engine µs/trans", "durable µs/trans", "durable trans/s");
    let mut first = None;
    for steps in [10usize, 1_000, 10_000] {
        // Small plans are measured over several executions so the figure is stable.
        let reps = (10_000 / steps).clamp(1, 100);
        let engine_us: f64 = (0..reps).map(|_| engine_bench(steps)).sum::<f64>() / reps as f64;
        let durable_us = rt.block_on(async {
            let mut total = 0.0;
            for r in 0..reps {
                total += durable_bench(steps, &tmp.path().join(format!("r{r}"))).await;
            }
            total / reps as f64
        });
        println!("{steps:>8}  {engine_us:>16.2}  {durable_us:>17.1}  {:>15.0}", 1e6 / durable_us);
        first.get_or_insert(durable_us);
        if steps == 10_000 {
            if let Some(base) = first {
                println!("10,000-step durable cost is {:.2}× the 10-step one (target ≤ 2×)", durable_us / base);
            }
        }
    }
    let floor = rt.block_on(commit_floor(tmp.path()));
    println!(
        "disk floor: a bare single-row commit (WAL, synchronous=FULL) takes {floor:.1} µs here ({:.0} commits/s)",
        1e6 / floor
    );
}
