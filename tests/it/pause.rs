//! Pausing an execution `baton serve` drives (issue 13, point 6): the agent already running
//! finishes, and the work it did (and was paid for) is recorded — by the resume at the latest:
//! while paused the server's driver is stopped, so nothing harvests the finished attempt
//! until the resume starts it again; a cancel of a paused execution records it first. An
//! `execute run` honours the pause the same way: it starts nothing new until the resume.

use std::path::Path;
use std::time::Duration;

use baton::clock::Stopwatch;
use serde_json::Value;

use crate::serve::{fire_sleepy, Server};

/// The run directories of step `step_id`'s attempts holding `file`.
fn attempts_with(data: &Path, task_id: &str, step_id: &str, file: &str) -> usize {
    let Ok(entries) = std::fs::read_dir(data.join("runs").join(task_id).join(step_id)) else { return 0 };
    entries.filter_map(Result::ok).filter(|e| e.path().join(file).exists()).count()
}

/// Waits (up to 60 s) until `ready` holds.
fn wait_until(what: &str, ready: impl Fn() -> bool) {
    let start = Stopwatch::start();
    while !ready() {
        assert!(start.elapsed() < Duration::from_secs(60), "{what} never happened");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn journal(server: &Server, task_id: &str) -> Vec<Value> {
    let (status, journal) = server.request("GET", &format!("/api/v1/executions/{task_id}/journal"), None);
    assert_eq!(status, 200, "{journal}");
    journal.as_array().unwrap().clone()
}

#[test]
fn an_agent_that_finishes_while_its_execution_is_paused_is_recorded_and_paid_for_by_its_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let server = Server::start_env(&data, &[], &[]);
    let (id, task_id) = fire_sleepy(&server, "Document while paused", 2);
    // Paused while the agent runs (it has started and not exited).
    wait_until("the agent's start", || attempts_with(&data, &task_id, "1.1", "started.json") == 1);
    let (status, body) = server.request("POST", &format!("/api/v1/executions/{task_id}/pause"), None);
    assert_eq!((status, body["paused"].as_bool()), (200, Some(true)), "{body}");
    assert_eq!(attempts_with(&data, &task_id, "1.1", "exit.json"), 0, "the agent was still running when paused");
    // It finishes during the pause.
    wait_until("the agent's exit", || attempts_with(&data, &task_id, "1.1", "exit.json") == 1);
    std::thread::sleep(Duration::from_millis(500));
    let (status, body) = server.request("POST", &format!("/api/v1/executions/{task_id}/resume"), None);
    assert_eq!((status, body["paused"].as_bool()), (200, Some(false)), "{body}");
    server.wait_stage(id, "awaiting_human");

    let journal = journal(&server, &task_id);
    let recorded: Vec<&Value> =
        journal.iter().filter(|e| e["kind"] == "step_recorded" && e["payload"]["step_id"] == "1.1").collect();
    assert_eq!(recorded.len(), 1, "the finished work is recorded once: {journal:?}");
    let p = &recorded[0]["payload"];
    assert_eq!(p["status"], "complete", "{p}");
    assert!(p["cost_usd"].as_f64().unwrap() > 0.0, "what it cost is recorded: {p}");
    let dispatches = journal.iter().filter(|e| e["kind"] == "step_dispatched").count();
    assert_eq!(dispatches, 1, "harvested, not run again: {journal:?}");
    assert_eq!(attempts_with(&data, &task_id, "1.1", "started.json"), 1, "one agent launch");
    let (_, exec) = server.request("GET", &format!("/api/v1/executions/{task_id}"), None);
    assert_eq!(exec["counters"]["spend_usd"], p["cost_usd"], "paid for: {exec}");
    // The server's log says why it harvests: its driver was paused, baton was never down (it
    // had said "finished while baton was down", found by a tester).
    let log = server.log();
    assert!(log.contains("recovering 1.1: attempt 1 finished while its driver was stopped"), "{log}");
    assert!(!log.contains("baton was down"), "{log}");
}

#[test]
fn cancelling_a_paused_execution_first_records_the_agent_that_finished_during_the_pause() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let server = Server::start_env(&data, &[], &[]);
    let (id, task_id) = fire_sleepy(&server, "Document then cancel while paused", 2);
    wait_until("the agent's start", || attempts_with(&data, &task_id, "1.1", "started.json") == 1);
    let (status, body) = server.request("POST", &format!("/api/v1/executions/{task_id}/pause"), None);
    assert_eq!((status, body["paused"].as_bool()), (200, Some(true)), "{body}");
    wait_until("the agent's exit", || attempts_with(&data, &task_id, "1.1", "exit.json") == 1);
    let (status, body) = server.request(
        "POST",
        &format!("/api/v1/executions/{task_id}/events"),
        Some(serde_json::json!({"kind": "cancelled", "reason": "not needed any more"})),
    );
    assert!(status == 200 || status == 201, "{status} {body}");
    server.wait_stage(id, "cancelled");

    let journal = journal(&server, &task_id);
    let kinds: Vec<&str> = journal.iter().filter_map(|e| e["kind"].as_str()).collect();
    let recorded = kinds.iter().position(|k| *k == "step_recorded");
    let cancelled = kinds.iter().position(|k| *k == "cancelled");
    assert!(
        matches!((recorded, cancelled), (Some(r), Some(c)) if r < c),
        "the finished agent's result is journaled before the cancel: {kinds:?}"
    );
    let p = &journal[recorded.unwrap()]["payload"];
    assert_eq!(p["step_id"], "1.1", "{p}");
    assert!(p["cost_usd"].as_f64().unwrap() > 0.0, "what it cost is recorded: {p}");
    let (_, exec) = server.request("GET", &format!("/api/v1/executions/{task_id}"), None);
    assert_eq!(exec["status"], "cancelled", "{exec}");
    assert_eq!(exec["counters"]["spend_usd"], p["cost_usd"], "paid for: {exec}");
}

/// Found by a tester: an `execute resume` the server did not take through its relay
/// (`BATON_RELAY=0`) lifted the pause, said "resumed from its pause", then failed with "driven
/// by another process" (exit 2) once the server's driver had taken the lease back; through the
/// relay it said to run `baton execute run` again, for an execution the server drives. Lifting
/// the pause is the whole resume while a driver goes on; the server's resume says its own
/// driver recovers the attempts.
#[test]
fn a_resume_of_a_server_driven_execution_succeeds_through_any_door_and_the_server_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let server = Server::start_env(&data, &[], &[]);
    let cli = |relay: &str, args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
            .env("BATON_RELAY", relay)
            .arg("--data-dir")
            .arg(&data)
            .args(args)
            .output()
            .unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    for (relay, title) in [("0", "Resumed from outside the relay"), ("1", "Resumed through the relay")] {
        let (id, task_id) = fire_sleepy(&server, title, 1);
        wait_until("the agent's start", || attempts_with(&data, &task_id, "1.1", "started.json") == 1);
        let (status, body) = server.request("POST", &format!("/api/v1/executions/{task_id}/pause"), None);
        assert_eq!((status, body["paused"].as_bool()), (200, Some(true)), "{body}");
        wait_until("the agent's exit", || attempts_with(&data, &task_id, "1.1", "exit.json") == 1);

        let (code, stderr) = cli(relay, &["execute", "resume", "--task-id", task_id.as_str()]);
        assert_eq!(code, Some(0), "BATON_RELAY={relay}: {stderr}");
        assert!(stderr.contains("resumed from its pause"), "{stderr}");
        assert!(!stderr.contains("baton execute run` again") || relay == "0", "the server drives it: {stderr}");
        if relay == "1" {
            assert!(stderr.contains("driven by this server"), "{stderr}");
        }
        let (_, exec) = server.request("GET", &format!("/api/v1/executions/{task_id}"), None);
        assert_ne!(exec["status"], "failed", "{exec}");
        server.wait_stage(id, "awaiting_human");
        let (code, stderr) = cli(relay, &["execute", "status", "--task-id", task_id.as_str()]);
        assert!(code == Some(0) && !stderr.contains("paused"), "{stderr}");
    }
}

/// Found by a tester: `execute resume` of an execution the server was running (not paused,
/// an agent in flight) failed with "driven by another process", naming the server itself,
/// where the API's resume answers 200. Nothing needs resuming: its driver goes on.
#[test]
fn a_resume_of_a_running_server_driven_execution_succeeds_and_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let server = Server::start_env(&data, &[], &[]);
    let (id, task_id) = fire_sleepy(&server, "Resumed while running", 3);
    wait_until("the agent's start", || attempts_with(&data, &task_id, "1.1", "started.json") == 1);
    for (relay, said) in [("1", "driven by this server"), ("0", "driven by another process, which goes on")] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
            .env("BATON_RELAY", relay)
            .arg("--data-dir")
            .arg(&data)
            .args(["execute", "resume", "--task-id", task_id.as_str()])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "BATON_RELAY={relay}: {stderr}");
        assert!(stderr.contains(said) && !stderr.contains("resumed from its pause"), "{stderr}");
    }
    server.wait_stage(id, "awaiting_human");
    let journal = journal(&server, &task_id);
    let dispatches = journal.iter().filter(|e| e["kind"] == "step_dispatched").count();
    assert_eq!(dispatches, 1, "the running attempt went on, nothing was offered again: {journal:?}");
    assert_eq!(attempts_with(&data, &task_id, "1.1", "started.json"), 1, "one agent launch");
}

/// Found by a tester: `execute run` dispatched on through `execute pause` (only a server's
/// driver stopped) and completed the plan while it read "paused". Its agents running at the
/// pause finish and are recorded; no new step starts until `execute resume`, which the run
/// waited for and then goes on from.
#[test]
fn an_execute_run_dispatches_nothing_new_while_paused_and_goes_on_at_resume() {
    use crate::common::*;
    let ws = Workspace::with_repo(&[("README.md", "x\n")]);
    let plan = ws.write("plan.json", &small_plan("run-paused", "[demo: sleep=2]"));
    let mut child = ws.spawn_run(&plan);
    wait_for(&ws.data().join("runs/run-paused/1.1/1/started.json"));
    let paused = ws.run(&["execute", "pause", "--task-id", "run-paused"]);
    assert_eq!(code(&paused), 0, "{}", stderr(&paused));
    // Phase 1's agents finish and its gate runs (a gate is no dispatch); phase 2 waits.
    wait_until("phase 1's gate", || ws.status("run-paused")["gate_results"].as_array().is_some_and(|g| !g.is_empty()));
    std::thread::sleep(Duration::from_millis(1500));
    let status = ws.status("run-paused");
    assert_eq!(status["step_results"]["1.1"]["status"], "complete", "{status}");
    assert!(status["step_results"].get("2.1").is_none(), "2.1 dispatched while paused: {status}");
    assert_eq!(ws.launches("run-paused", "2.1"), 0);
    assert!(child.try_wait().unwrap().is_none(), "the run waits for the resume");

    let resumed = ws.run(&["execute", "resume", "--task-id", "run-paused"]);
    assert_eq!(code(&resumed), 0, "{}", stderr(&resumed));
    let start = Stopwatch::start();
    let exit = loop {
        if let Some(exit) = child.try_wait().unwrap() {
            break exit;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "the run never ended after the resume");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(exit.success(), "the run completes once resumed: {exit:?}");
    assert_eq!(ws.status("run-paused")["status"], "complete");
    assert_eq!(ws.launches("run-paused", "2.1"), 1);
}
