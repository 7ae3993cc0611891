//! The journal's group commit under real load and real crashes: many executions in one
//! `baton serve` share commits and survive `kill -9` in the middle without losing an event or
//! running a completed step again; a server, two `execute run` processes and one-shot CLI
//! commands write one data dir at once; and, through the library, groups larger than one
//! commit, huge payloads, repeated keys, one execution written by two tasks at once and a
//! store closed under queued appends.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use baton::clock::Stopwatch;
use baton::store::{AppendOutcome, NewEvent, Store, StoreError, Summary};
use serde_json::{json, Value};

use crate::common::*;
use crate::serve::{fire_sleepy as fire, fire_sleepy_in as fire_in, Server};

const T0: &str = "2026-01-15T09:00:00Z";
const PLAN: &str = r#"{"phases":[{"name":"build","steps":["a"]}]}"#;

fn summary(steps_done: i64) -> Summary {
    Summary {
        status: "running".to_owned(),
        current_phase: "build".to_owned(),
        steps_done,
        steps_total: 1000,
        spend_usd: 0.0,
    }
}

fn ev(key: &str, payload: &str) -> NewEvent {
    NewEvent {
        kind: "step_done".to_owned(),
        payload: payload.to_owned(),
        idempotency_key: key.to_owned(),
        at: T0.to_owned(),
    }
}

/// A fresh store with `n` executions `t0…`, each with one event (so this store knows their
/// heads and later single-event appends take the group path).
async fn store_with(n: usize) -> (tempfile::TempDir, Store, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("baton.db")).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..n {
        let task = format!("t{i}");
        store.create_execution(&task, PLAN, &summary(0), T0).await.unwrap();
        store.append(&task, &[ev("first", "{}")], &summary(0)).await.unwrap();
        tasks.push(task);
    }
    (dir, store, tasks)
}

/// Group commits and the appends they carried so far, from the store's metric totals.
async fn group_stats(store: &Store) -> (u64, u64) {
    let totals = store.metric_totals().await.unwrap();
    (totals.journal_commits, totals.journal_appends)
}

/// Fails the test if `fut` has not finished in 60 s: the appends below never wait for anything
/// but each other, so a minute means a caller was left waiting for an answer nobody sends.
async fn bounded<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), fut).await.unwrap_or_else(|_| panic!("{what} never finished"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn more_executions_than_one_group_holds_append_at_once_and_keep_every_chain() {
    // 80 executions (more than the 64 appends a commit carries), 12 appends each, all at once;
    // every execution uses the same keys, so one group holds the same key many times.
    let (_dir, store, tasks) = store_with(80).await;
    let before = group_stats(&store).await;
    let mut handles = Vec::new();
    for task in &tasks {
        let (store, task) = (store.clone(), task.clone());
        handles.push(tokio::spawn(async move {
            for n in 1..=12_i64 {
                let payload = json!({"task": task, "n": n}).to_string();
                let out = store.append(&task, &[ev(&format!("k{n}"), &payload)], &summary(n)).await.unwrap();
                assert_eq!(out.len(), 1);
                assert!(matches!(out[0], AppendOutcome::Appended { seq, .. } if seq == n + 1), "{task} #{n}: {out:?}");
                if n == 6 {
                    // A key this execution already used: nothing is written, wherever it queues.
                    let dup = store.append(&task, &[ev("k3", "{}")], &summary(n)).await.unwrap();
                    assert_eq!(dup, vec![AppendOutcome::Duplicate { seq: 4 }], "{task}");
                }
            }
        }));
    }
    // An execution that does not exist, appended to among the groups, is refused by name.
    let missing = store.append("nobody", &[ev("k1", "{}")], &summary(1)).await.unwrap_err();
    assert!(matches!(missing, StoreError::NotFound { .. }), "{missing}");
    bounded("80 executions' appends", futures_util::future::join_all(handles))
        .await
        .into_iter()
        .for_each(|h| h.unwrap());
    let after = group_stats(&store).await;
    let (commits, appends) = (after.0 - before.0, after.1 - before.1);
    assert!(appends > commits, "appends were grouped: {appends} appends in {commits} commits");
    for task in &tasks {
        let report = store.verify_chain(task).await.unwrap();
        assert!(report.ok && report.events == 13, "{task}: {report:?}");
        let events = store.events(task, 0).await.unwrap();
        let ns: Vec<i64> = events[1..]
            .iter()
            .map(|e| serde_json::from_str::<Value>(&e.payload).unwrap()["n"].as_i64().unwrap())
            .collect();
        assert_eq!(ns, (1..=12).collect::<Vec<_>>(), "{task}: each event once, in order");
        assert!(
            events[1..].iter().all(|e| e.payload.contains(&format!("\"{task}\""))),
            "{task}: no event landed in another chain"
        );
        assert_eq!(store.summary(task).await.unwrap(), Some(summary(12)), "{task}: the summary of its last append");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn huge_payloads_share_a_group_whole() {
    // 64 appends of 256 KiB each at once: one full group is 16 MiB of bound text.
    let (_dir, store, tasks) = store_with(64).await;
    let big = |task: &str| json!({"task": task, "blob": "x".repeat(256 * 1024)}).to_string();
    let mut handles = Vec::new();
    for task in &tasks {
        let (store, task, payload) = (store.clone(), task.clone(), big(task));
        handles.push(tokio::spawn(async move { store.append(&task, &[ev("big", &payload)], &summary(1)).await }));
    }
    for h in bounded("huge appends", futures_util::future::join_all(handles)).await {
        let out = h.unwrap().unwrap();
        assert!(matches!(out.as_slice(), [AppendOutcome::Appended { seq: 2, .. }]), "{out:?}");
    }
    for task in &tasks {
        let events = store.events(task, 0).await.unwrap();
        assert_eq!(events.len(), 2, "{task}");
        assert_eq!(events[1].payload, big(task), "{task}: the payload is stored whole, in its own chain");
        assert!(store.verify_chain(task).await.unwrap().ok, "{task}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_tasks_appending_to_one_execution_never_wait_forever() {
    // Both writers believe the same head: one of each pair goes through the group, the other
    // finds the head moved and takes the ordinary path. Nothing else is writing, so an append
    // left in the queue with nobody to commit it would wait forever.
    let (_dir, store, _tasks) = store_with(1).await;
    let mut handles = Vec::new();
    for writer in ["a", "b"] {
        let store = store.clone();
        handles.push(tokio::spawn(async move {
            for n in 0..150 {
                let out = store.append("t0", &[ev(&format!("{writer}{n}"), "{}")], &summary(n)).await.unwrap();
                assert!(matches!(out.as_slice(), [AppendOutcome::Appended { .. }]), "{writer}{n}: {out:?}");
            }
        }));
    }
    for h in bounded("two writers of one execution", futures_util::future::join_all(handles)).await {
        h.unwrap();
    }
    let report = store.verify_chain("t0").await.unwrap();
    assert!(report.ok && report.events == 301, "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn appends_abandoned_mid_group_leave_each_chain_whole_and_a_retry_lands_once() {
    // Callers (and so committers) dropped at any point of a group: while queued, holding the
    // connection, or mid-commit. Each round, every third append is abandoned and then retried
    // with the same key, as a restarted driver would.
    let (_dir, store, tasks) = store_with(40).await;
    for round in 1..=8_i64 {
        let key = format!("k{round}");
        let mut handles = Vec::new();
        for task in &tasks {
            let (store, task, key) = (store.clone(), task.clone(), key.clone());
            handles.push(tokio::spawn(async move { store.append(&task, &[ev(&key, "{}")], &summary(round)).await }));
        }
        tokio::task::yield_now().await;
        for (i, h) in handles.iter().enumerate() {
            if i % 3 == round as usize % 3 {
                h.abort();
            }
        }
        for (task, h) in tasks.iter().zip(handles) {
            match bounded("a round of appends", h).await {
                Ok(out) => {
                    let out = out.unwrap();
                    assert!(matches!(out.as_slice(), [AppendOutcome::Appended { .. }]), "{task} {key}: {out:?}");
                }
                Err(e) => {
                    assert!(e.is_cancelled(), "{e}");
                    let again =
                        bounded("a retry", store.append(task, &[ev(&key, "{}")], &summary(round))).await.unwrap();
                    assert!(
                        matches!(again.as_slice(), [AppendOutcome::Appended { .. } | AppendOutcome::Duplicate { .. }]),
                        "{task} {key}: {again:?}"
                    );
                }
            }
        }
    }
    for task in &tasks {
        let report = store.verify_chain(task).await.unwrap();
        assert!(report.ok, "{task}: {report:?}");
        let keys: Vec<String> = store.events(task, 0).await.unwrap().into_iter().map(|e| e.idempotency_key).collect();
        let want: Vec<String> = std::iter::once("first".to_string()).chain((1..=8).map(|n| format!("k{n}"))).collect();
        assert_eq!(keys, want, "{task}: every event once, in order");
    }
    // The connection is usable afterwards (a committer dropped mid-batch was rolled back).
    store.append("t0", &[ev("after", "{}")], &summary(9)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn closing_the_store_under_queued_appends_answers_each_and_writes_only_what_succeeded() {
    let (dir, store, tasks) = store_with(40).await;
    let mut handles = Vec::new();
    for task in &tasks {
        let (store, task) = (store.clone(), task.clone());
        handles.push(tokio::spawn(async move {
            let mut written = 0_i64;
            for n in 1..=20_i64 {
                match store.append(&task, &[ev(&format!("k{n}"), "{}")], &summary(n)).await {
                    Ok(out) => {
                        assert!(matches!(out.as_slice(), [AppendOutcome::Appended { .. }]), "{task}: {out:?}");
                        written = n;
                    }
                    Err(e) => {
                        assert!(e.to_string().contains("closed"), "{task}: {e}");
                        return (task, written);
                    }
                }
            }
            (task, written)
        }));
    }
    // Close while the appends are in flight (after the first group commits).
    while group_stats(&store).await.0 < 2 {
        tokio::task::yield_now().await;
    }
    store.close().await;
    let written: Vec<(String, i64)> = bounded("appends racing close", futures_util::future::join_all(handles))
        .await
        .into_iter()
        .map(|h| h.unwrap())
        .collect();
    assert!(written.iter().any(|(_, n)| *n < 20), "the close came while appends were still queued: {written:?}");
    drop(store);
    let reopened = Store::open(&dir.path().join("baton.db")).await.unwrap();
    for (task, n) in written {
        let report = reopened.verify_chain(&task).await.unwrap();
        assert!(report.ok, "{task}: {report:?}");
        assert_eq!(
            report.events,
            u64::try_from(n + 1).unwrap(),
            "{task}: exactly the appends that returned Ok are stored"
        );
        assert_eq!(reopened.summary(&task).await.unwrap().unwrap().steps_done, n, "{task}: and their summary");
    }
}

/// `baton_journal_group_{commits,appends}_total` from the server's `/metrics`.
fn served_group_stats(server: &Server) -> (u64, u64) {
    let (status, _, text) = server.raw("GET", "/metrics", "", "");
    assert_eq!(status, 200, "{text}");
    let value = |name: &str| -> u64 {
        let line =
            text.lines().find(|l| l.starts_with(&format!("{name} "))).unwrap_or_else(|| panic!("{name}:\n{text}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    (value("baton_journal_group_commits_total"), value("baton_journal_group_appends_total"))
}

/// `baton --data-dir <data> <args>`.
fn baton(data: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_baton")).arg("--data-dir").arg(data).args(args).output().unwrap()
}

/// Step id → status of every step the journal records, from `execute status --json`.
fn step_statuses(data: &Path, task_id: &str) -> BTreeMap<String, String> {
    let out = baton(data, &["execute", "status", "--json", "--task-id", task_id]);
    assert!(out.status.success(), "status {task_id}: {}", stderr(&out));
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    status["step_results"]
        .as_object()
        .map(|steps| {
            steps.iter().map(|(id, r)| (id.clone(), r["status"].as_str().unwrap_or_default().to_string())).collect()
        })
        .unwrap_or_default()
}

/// Agent launches of a step: run directories whose shim started the agent.
fn launches(data: &Path, task_id: &str, step_id: &str) -> usize {
    let Ok(entries) = std::fs::read_dir(data.join("runs").join(task_id).join(step_id)) else { return 0 };
    entries.filter_map(Result::ok).filter(|e| e.path().join("started.json").exists()).count()
}

/// Commits of `step` (its `Baton-Step` trailer) on `branch` of `repo`.
fn commits_for_step(repo: &Path, branch: &str, step: &str) -> usize {
    let out = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["log", "--format=%(trailers:key=Baton-Step,valueonly,separator=)", branch])
        .output()
        .unwrap();
    assert!(out.status.success(), "git log {branch}: {}", stderr(&out));
    String::from_utf8_lossy(&out.stdout).lines().filter(|l| l.trim() == step).count()
}

/// `audit verify` and `replay` of `task_id` both pass.
fn assert_audit_and_replay(data: &Path, task_id: &str) {
    let audit = baton(data, &["audit", "verify", task_id]);
    assert_eq!(code(&audit), 0, "audit verify {task_id}: {}\n{}", stdout(&audit), stderr(&audit));
    assert!(stdout(&audit).contains("hash chain intact"), "{}", stdout(&audit));
    let replay = baton(data, &["replay", task_id]);
    assert_eq!(code(&replay), 0, "replay {task_id}: {}\n{}", stdout(&replay), stderr(&replay));
    assert!(!stdout(&replay).contains("NO"), "replay {task_id}: {}", stdout(&replay));
}

/// Approves phase 1 of every spec once all of them park there, all at once (one thread per
/// spec, released together), so the approvals' appends queue behind each other's commits and
/// the drivers wake together.
fn approve_all(server: &Server, runs: &[(i64, String)]) {
    for (id, _) in runs {
        server.wait_stage(*id, "awaiting_human");
    }
    let barrier = std::sync::Barrier::new(runs.len());
    std::thread::scope(|scope| {
        for (_, task_id) in runs {
            let barrier = &barrier;
            scope.spawn(move || {
                barrier.wait();
                let (status, body) = server.request(
                    "POST",
                    &format!("/api/v1/executions/{task_id}/approve"),
                    Some(json!({"phase_id": 1, "result": "approve"})),
                );
                assert_eq!(status, 201, "{task_id}: {body}");
            });
        }
    });
}

#[test]
fn a_server_killed_during_group_commits_resumes_every_execution_without_running_a_finished_step_again() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let mut server = Server::start_env(&data, &["--max-agents", "16"], &[]);
    let runs: Vec<(i64, String)> = (0..8).map(|i| fire(&server, &format!("Document part {i}"), 1)).collect();
    // Approved together, the eight wake together: their dispatches and records overlap.
    approve_all(&server, &runs);
    // Kill as soon as commits have been shared, while the executions are still running.
    let start = Stopwatch::start();
    loop {
        let (commits, appends) = served_group_stats(&server);
        if appends > commits {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "eight executions never shared a commit: {appends} in {commits}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    server.kill9();
    let done_before: Vec<BTreeMap<String, String>> = runs.iter().map(|(_, t)| step_statuses(&data, t)).collect();

    let server = Server::start_env(&data, &["--max-agents", "16"], &[]);
    for (id, _) in &runs {
        server.wait_stage(*id, "changelist_review");
    }
    drop(server);
    let repo = data.join("demo").join("board-repo");
    for ((_, task_id), before) in runs.iter().zip(&done_before) {
        assert_audit_and_replay(&data, task_id);
        let after = step_statuses(&data, task_id);
        assert_eq!(after.len(), 4, "{task_id}: {after:?}");
        for (step, status) in &after {
            assert_eq!(status, "complete", "{task_id} {step}: {after:?}");
            assert_eq!(commits_for_step(&repo, &format!("baton/{task_id}"), step), 1, "{task_id}: commits of {step}");
            if before.get(step).is_some_and(|s| s == "complete") {
                assert_eq!(launches(&data, task_id, step), 1, "{task_id}: {step} was complete before the kill");
            }
        }
    }
}

#[test]
fn a_server_two_cli_runs_and_one_shot_commands_write_one_data_dir_at_once() {
    let ws = Workspace::with_repo(&[("README.md", "x\n")]);
    let data = ws.data();
    let server = Server::start_env(&data, &["--max-agents", "16"], &[]);
    let before = served_group_stats(&server);
    // One repository per execution: what is tested here is the journal, not git's handling of
    // many worktrees of one repository added at once.
    let runs: Vec<(i64, String)> = (0..6)
        .map(|i| {
            let repo = ws.tmp.path().join(format!("repo{i}"));
            baton::git::init_repository(&repo, &[("README.md", "x\n")], "initial").unwrap();
            let project = json!({"name": format!("p{i}"), "repo_path": repo, "agent_profile": "demo"});
            let (status, body) = server.request("POST", "/api/v1/projects", Some(project));
            assert_eq!(status, 201, "{body}");
            fire_in(&server, &format!("p{i}"), &format!("Document part {i}"), 1)
        })
        .collect();
    let plans: Vec<_> = ["cli-a", "cli-b", "cli-c", "cli-d"]
        .iter()
        .map(|t| (t.to_string(), ws.write(&format!("{t}.json"), &small_plan(t, ""))))
        .collect();
    let children: Vec<_> = plans[..2]
        .iter()
        .map(|(_, plan)| {
            let mut cmd = ws.baton();
            cmd.args(["execute", "run", "--agent", "demo", "--plan"]).arg(plan).arg("--repo").arg(ws.repo());
            cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap()
        })
        .collect();
    // Approved together, the server's executions wake together and share commits.
    approve_all(&server, &runs);
    let start = Stopwatch::start();
    loop {
        let (commits, appends) = served_group_stats(&server);
        if appends - before.1 > commits - before.0 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "six executions never shared a commit: {appends} in {commits}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // One-shot commands opening the same file while all three write: runs of two more plans,
    // one after the other, and audits of the server's executions.
    for (_, plan) in &plans[2..] {
        let out = ws.run_plan(plan);
        assert_eq!(code(&out), 0, "{}\n{}", stdout(&out), stderr(&out));
        for (_, task_id) in &runs {
            let out = baton(&data, &["audit", "verify", task_id]);
            assert_eq!(code(&out), 0, "{task_id}: {}\n{}", stdout(&out), stderr(&out));
        }
    }
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert_eq!(code(&out), 0, "{}\n{}", stdout(&out), stderr(&out));
        assert!(stdout(&out).contains("ACTION: COMPLETE"), "{}", stdout(&out));
    }
    for (id, _) in &runs {
        server.wait_stage(*id, "changelist_review");
    }
    drop(server);
    for (_, task_id) in &runs {
        assert_audit_and_replay(&data, task_id);
    }
    for (task_id, _) in &plans {
        assert_audit_and_replay(&data, task_id);
        for step in ["1.1", "1.2", "2.1"] {
            assert_eq!(ws.launches(task_id, step), 1, "{task_id}: launches of {step}");
        }
    }
}
