//! Durable transitions/s on SQLite and on PostgreSQL with one and with three replicas (issue
//! 17, run by hand: `benches/replicas.sh` runs it with the board and takeover measures, or
//! `BENCH_DATABASE_URL=postgres://… cargo bench --bench replicas` alone).
//!
//! The same work in each setting: [`EXECUTIONS`] executions of a [`STEPS`]-step plan, every
//! DISPATCH answered by a completed record and every CHECKPOINT acknowledged, each record
//! waiting for its own commit (as `benches/transitions.rs` drives them). "Replicas" are
//! processes: this binary starts itself once per replica (`BENCH_REPLICA=<i>/<n>`), each with
//! its own store (its own connections) on the one database, each driving its share of the
//! executions at once; the figure is every replica's transitions over the wall time from the
//! first start to the last finish. SQLite is one process (one writer; it is not shared across
//! machines). `BENCH_DATABASE_URL` names a database the bench may fill (`replicas.sh` makes a
//! new one); without it only SQLite runs.

use std::process::Command;

use baton::clock::Stopwatch;
use baton::engine;
use baton::model::action::Action;
use baton::model::event::{Event, EventKind, RecordStatus};
use baton::model::plan::{MachinePlan, PlanPhase, PlanStep};
use baton::model::state::ExecutionState;
use baton::runtime::config::DataDir;
use baton::runtime::executions::Executions;

/// Executions per setting, split over its replicas.
const EXECUTIONS: usize = 48;
/// Steps per plan (phases of 10 independent steps).
const STEPS: usize = 50;

fn plan(task_id: &str) -> MachinePlan {
    let mut plan = MachinePlan::from_json(&format!(r#"{{"task_id":"{task_id}","task_summary":"bench"}}"#))
        .unwrap_or_else(|e| panic!("bench plan: {e}"));
    for p in 0..STEPS.div_ceil(10) {
        let id = i64::try_from(p + 1).unwrap_or(i64::MAX);
        let mut phase = PlanPhase::new(id, format!("P{id}"));
        for s in 0..10.min(STEPS - p * 10) {
            phase.steps.push(Box::new(PlanStep::new(format!("{id}.{}", s + 1), "dev", "work")));
        }
        plan.phases.push(phase);
    }
    plan
}

fn answer(action: &Action) -> Option<Event> {
    match action {
        Action::Dispatch(d) => Some(Event::new(EventKind::StepRecorded {
            step_id: d.step_id.clone(),
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
        })),
        Action::Checkpoint(_) => Some(Event::new(EventKind::CheckpointAcknowledged)),
        Action::Complete { .. } => None,
        other => panic!("bench plans only dispatch and checkpoint, got {other:?}"),
    }
}

async fn drive(execs: &Executions, mut state: ExecutionState) -> u64 {
    let mut transitions = 0;
    while let Some(event) = answer(&engine::next_action(&state)) {
        execs.record(&mut state, event).await.unwrap_or_else(|e| panic!("{e}"));
        transitions += 1;
    }
    transitions
}

/// One replica: opens its store on `data` (whose `baton.toml` names the database), creates
/// `count` executions named `<prefix>-<i>`, drives them all at once; returns the transitions.
async fn replica(data: &std::path::Path, prefix: &str, count: usize) -> u64 {
    let data = DataDir::open(data).unwrap_or_else(|e| panic!("{e}"));
    let execs = Executions::open(data).await.unwrap_or_else(|e| panic!("{e}"));
    let mut states = Vec::new();
    for i in 0..count {
        states.push(execs.create(plan(&format!("{prefix}-{i}"))).await.unwrap_or_else(|e| panic!("{e}")));
    }
    let tasks: Vec<_> = states
        .into_iter()
        .map(|state| {
            let execs = execs.clone();
            tokio::spawn(async move { drive(&execs, state).await })
        })
        .collect();
    let mut transitions = 0;
    for task in tasks {
        transitions += task.await.unwrap_or_else(|e| panic!("{e}"));
    }
    execs.store().close().await;
    transitions
}

/// Runs `n` replica processes on `url` at once; returns (transitions/s, transitions).
fn replicas(tmp: &std::path::Path, url: &str, n: usize, run: &str) -> (f64, u64) {
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("{e}"));
    let dirs: Vec<_> = (0..n)
        .map(|i| {
            let dir = tmp.join(format!("{run}-replica-{i}"));
            std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
            std::fs::write(dir.join("baton.toml"), format!("[database]\nurl = '{url}'\n"))
                .unwrap_or_else(|e| panic!("{e}"));
            dir
        })
        .collect();
    let watch = Stopwatch::start();
    let handles: Vec<_> = dirs
        .iter()
        .enumerate()
        .map(|(i, dir)| {
            Command::new(&exe)
                .env("BENCH_REPLICA", format!("{i}/{n}"))
                .env("BENCH_REPLICA_DIR", dir)
                .env("BENCH_REPLICA_PREFIX", format!("{run}-{i}"))
                .env_remove("BATON_DATABASE_URL")
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap_or_else(|e| panic!("{e}"))
        })
        .collect();
    let mut transitions = 0;
    for child in handles {
        let out = child.wait_with_output().unwrap_or_else(|e| panic!("{e}"));
        assert!(out.status.success(), "a replica failed");
        let text = String::from_utf8_lossy(&out.stdout);
        transitions += text.trim().parse::<u64>().unwrap_or_else(|e| panic!("replica said {text:?}: {e}"));
    }
    (transitions as f64 / watch.elapsed().as_secs_f64(), transitions)
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap_or_else(|e| panic!("{e}"));
    if let Ok(me) = std::env::var("BENCH_REPLICA") {
        // A replica process: its share of the executions, then its transitions on stdout.
        let (i, n) = me.split_once('/').unwrap_or_else(|| panic!("BENCH_REPLICA={me}"));
        let (i, n): (usize, usize) = (i.parse().unwrap_or(0), n.parse().unwrap_or(1));
        let count = EXECUTIONS / n + usize::from(i < EXECUTIONS % n);
        let dir = std::env::var("BENCH_REPLICA_DIR").unwrap_or_else(|e| panic!("{e}"));
        let prefix = std::env::var("BENCH_REPLICA_PREFIX").unwrap_or_else(|e| panic!("{e}"));
        println!("{}", rt.block_on(replica(std::path::Path::new(&dir), &prefix, count)));
        return;
    }
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    println!("{EXECUTIONS} executions of {STEPS} steps driven at once, each record waiting for its commit");
    println!("{:<28}  {:>15}  {:>12}", "store", "transitions/s", "transitions");
    let sqlite = tmp.path().join("sqlite");
    let watch = Stopwatch::start();
    let n = rt.block_on(replica(&sqlite, "sqlite", EXECUTIONS));
    println!("{:<28}  {:>15.0}  {n:>12}", "SQLite, 1 process", n as f64 / watch.elapsed().as_secs_f64());
    let Some(url) = std::env::var("BENCH_DATABASE_URL").ok().filter(|u| !u.is_empty()) else {
        println!("PostgreSQL skipped: set BENCH_DATABASE_URL (benches/replicas.sh makes a database)");
        return;
    };
    for n in [1, 3] {
        let (rate, total) = replicas(tmp.path(), &url, n, &format!("pg{n}"));
        println!("{:<28}  {rate:>15.0}  {total:>12}", format!("PostgreSQL, {n} replica(s)"));
    }
}
