//! An external orchestrator drives a plan with the agent-baton CLI contract only.

use crate::common::*;

fn json_of(out: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(out)))
}

#[test]
fn an_orchestrator_drives_a_plan_to_complete_with_the_cli() {
    let ws = Workspace::with_repo(&[("a", "a")]);
    let plan = ws.write("plan.json", &small_plan("orch-1", ""));
    let saved = ws.run(&["plan", "--from", plan.to_str().unwrap()]);
    assert_eq!(code(&saved), 0, "{}", stderr(&saved));
    let start = ws.run(&["execute", "start", "--json"]);
    assert_eq!(code(&start), 0, "{}", stderr(&start));
    assert_eq!(json_of(&start)["action_type"], "dispatch");
    // `status` names the action `next` would give, held back as `next` holds it while paused.
    let text = stdout(&ws.run(&["execute", "status"]));
    assert!(text.contains("  next: DISPATCH — Dispatch step 1.1 to alpha"), "{text}");
    // `--json` answers as the API's pause does (a tester found it printed nothing).
    let paused = ws.run(&["--json", "execute", "pause"]);
    assert_eq!(code(&paused), 0, "{}", stderr(&paused));
    assert_eq!(json_of(&paused), serde_json::json!({"task_id": "orch-1", "paused": true, "changed": true}));
    assert!(stderr(&paused).contains("execution orch-1 paused: no new dispatches"), "{}", stderr(&paused));
    // A second pause changes nothing and says so (it had said "paused" again, found by a tester).
    let again = ws.run(&["--json", "execute", "pause"]);
    assert_eq!(code(&again), 0, "{}", stderr(&again));
    assert_eq!(json_of(&again)["changed"], false);
    assert!(stderr(&again).contains("execution orch-1 was already paused"), "{}", stderr(&again));
    let text = stdout(&ws.run(&["execute", "status"]));
    assert!(text.contains("  next: WAIT — execution orch-1 is paused by an operator"), "{text}");
    assert_eq!(code(&ws.run(&["execute", "resume"])), 0);
    // The active task is used without --task-id.
    let all = ws.run(&["execute", "next", "--all", "--json"]);
    let wave = json_of(&all);
    let ids: Vec<&str> = wave.as_array().unwrap().iter().map(|a| a["step_id"].as_str().unwrap()).collect();
    assert_eq!(ids, vec!["1.1", "1.2"]);
    assert!(wave.as_array().unwrap().iter().all(|a| a["isolation"] == "worktree"));
    assert_eq!(code(&ws.run(&["execute", "dispatched", "--step-id", "1.1", "--agent", "alpha"])), 0);
    assert_eq!(code(&ws.run(&["execute", "record", "--step-id", "1.1", "--agent", "alpha", "--files", "a.md"])), 0);
    let rec = ws.run(&["execute", "record", "--step-id", "1.2", "--agent", "beta", "--tokens", "12", "--json"]);
    assert_eq!(json_of(&rec)["action_type"], "gate");
    assert_eq!(json_of(&rec)["gate_command"], "test -s a.md && test -s b.md");
    let gate = ws.run(&["execute", "gate", "--phase-id", "1", "--result", "pass", "--json"]);
    assert_eq!(json_of(&gate)["step_id"], "2.1");
    let rec = ws.run(&["execute", "record", "--step-id", "2.1", "--agent", "gamma", "--json"]);
    assert_eq!(json_of(&rec)["action_type"], "complete");
    assert_eq!(ws.status("orch-1")["status"], "running", "COMPLETE is an action; the status changes on `complete`");
    // The text status says so (a fresh-clone tester read `running — 3/3 steps done` and
    // wondered what was left).
    let text = stdout(&ws.run(&["execute", "status"]));
    assert!(text.contains("orch-1: running — 3/3 steps done"), "{text}");
    assert!(text.contains("  next: COMPLETE — All phases complete; run `baton execute complete`"), "{text}");
    let done = ws.run(&["execute", "complete"]);
    assert_eq!(code(&done), 0, "{}", stderr(&done));
    assert_eq!(ws.status("orch-1")["status"], "complete");
    let text = stdout(&ws.run(&["execute", "status"]));
    assert!(text.contains("orch-1: complete — 3/3 steps done") && !text.contains("next:"), "{text}");
    let list = ws.run(&["execute", "list"]);
    assert!(stdout(&list).contains("orch-1  complete"), "{}", stdout(&list));
}

#[test]
fn resume_offers_again_the_steps_a_stopped_orchestrator_had_dispatched() {
    let ws = Workspace::with_repo(&[("a", "a")]);
    let plan = ws.write("plan.json", &small_plan("resume-1", ""));
    assert_eq!(code(&ws.run(&["execute", "start", "--plan", plan.to_str().unwrap()])), 0);
    assert_eq!(code(&ws.run(&["execute", "dispatched", "--step-id", "1.1", "--agent", "alpha"])), 0);
    assert_eq!(code(&ws.run(&["execute", "record", "--step-id", "1.2", "--agent", "beta"])), 0);
    let next = ws.run(&["execute", "next"]);
    assert!(stdout(&next).contains("ACTION: WAIT"), "{}", stdout(&next));
    let resumed = ws.run(&["execute", "resume"]);
    assert_eq!(code(&resumed), 0, "{}", stderr(&resumed));
    assert!(stdout(&resumed).contains("ACTION: DISPATCH"), "{}", stdout(&resumed));
    assert!(stdout(&resumed).contains("Step: 1.1"));
    assert!(stdout(&resumed).contains("Attempt: 2"));
    let status = ws.status("resume-1");
    assert_eq!(status["step_results"]["1.2"]["status"], "complete", "completed steps stay done");
}

#[test]
fn amend_inserts_a_phase_that_runs_next() {
    let ws = Workspace::with_repo(&[("a", "a")]);
    let plan = ws.write("plan.json", &small_plan("amend-1", ""));
    assert_eq!(code(&ws.run(&["execute", "start", "--plan", plan.to_str().unwrap()])), 0);
    let out = ws.run(&["execute", "amend", "--description", "Add docs", "--add-phase", "Docs:writer"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let status = ws.status("amend-1");
    let phases = status["plan"]["phases"].as_array().unwrap();
    assert_eq!(phases.len(), 3);
    assert_eq!(phases[1]["name"], "Docs");
    assert_eq!(phases[1]["steps"][0]["step_id"], "2.1");
    assert_eq!(phases[2]["steps"][0]["step_id"], "3.1");
    assert_eq!(phases[2]["steps"][0]["depends_on"], serde_json::json!(["1.1", "1.2"]));
    assert_eq!(status["amendments"][0]["phases_added"], serde_json::json!([2]));
    let bad = ws.run(&["execute", "amend", "--description", "x", "--add-phase", "NoAgent"]);
    assert_eq!(code(&bad), 2);
    assert!(stderr(&bad).contains("expected NAME:AGENT"), "{}", stderr(&bad));
}

#[test]
fn execute_run_takes_over_an_execution_an_orchestrator_started() {
    let ws = Workspace::with_repo(&[("a", "a")]);
    let plan = ws.write("plan.json", &small_plan("takeover-1", ""));
    assert_eq!(code(&ws.run(&["execute", "start", "--plan", plan.to_str().unwrap()])), 0);
    let out = ws
        .baton()
        .args(["execute", "run", "--agent", "demo", "--task-id", "takeover-1", "--repo"])
        .arg(ws.repo())
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}\n{}", stdout(&out), stderr(&out));
    for step in ["1.1", "1.2", "2.1"] {
        assert_eq!(ws.launches("takeover-1", step), 1);
    }
    assert_eq!(ws.status("takeover-1")["status"], "complete");
}

#[test]
fn with_json_a_failure_is_json_on_stdout_too() {
    // Found by a fresh-clone tester: `--json` was ignored when a command failed.
    let ws = Workspace::with_repo(&[("README.md", "x\n")]);
    let out = ws.run(&["--json", "merge", "nope"]);
    assert_eq!(code(&out), 2);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["exit_code"], 2);
    assert!(v["error"].as_str().unwrap().contains("no execution with task id nope"), "{v}");
    let out = ws.run(&["--json", "spec", "import", "github:../..#1", "--project", "p"]);
    assert_eq!(code(&out), 2);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["error"].as_str().unwrap().contains("is not an item reference"), "{v}");
    // Without --json stdout stays empty.
    assert!(ws.run(&["merge", "nope"]).stdout.is_empty());
}

#[test]
fn record_refuses_budget_stopped_for_a_step_never_dispatched_and_its_help_lists_it() {
    use baton::model::event::{Event, EventKind};
    let ws = Workspace::with_repo(&[("a", "a")]);
    let plan = ws.write("plan.json", &small_plan("stop-1", ""));
    assert_eq!(code(&ws.run(&["execute", "start", "--plan", plan.to_str().unwrap()])), 0);
    // A ceiling (budget_stopped needs one), journaled as `execute run --max-spend-usd` does.
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let data = baton::runtime::config::DataDir::open(&ws.data()).unwrap();
        let execs = baton::runtime::executions::Executions::open(data).await.unwrap();
        let kind = EventKind::BudgetSet { ceiling_usd: Some(5.0), source: "test".into() };
        execs.record_once("stop-1", Event::new(kind).by("test")).await.unwrap();
    });
    let before = ws.status("stop-1")["events_applied"].clone();
    assert!(before.as_u64().is_some_and(|n| n >= 1), "{before}");
    // Found by a tester: accepted for step 1.1, which no attempt ever ran, parking the execution.
    let args = ["--task-id", "stop-1", "--step-id", "1.1", "--agent", "alpha", "--status", "budget_stopped"];
    let out = ws.run(&[&["execute", "record"][..], &args[..]].concat());
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("1.1") && stderr(&out).contains("never dispatched"), "{}", stderr(&out));
    let status = ws.status("stop-1");
    assert_eq!((&status["events_applied"], &status["status"]), (&before, &serde_json::json!("running")));
    let help = ws.run(&["execute", "record", "--help"]);
    assert!(stdout(&help).contains("budget_stopped"), "{}", stdout(&help));
}

/// Issue 14.8: one-shot commands keep the WAL short for the next process. The first
/// connection of every process rebuilds the WAL's index by reading each frame in the WAL:
/// frames left behind by each call (a 500-step run had ~3 MB of them) made every later call
/// read them again. A one-shot process empties the WAL as it leaves once it is longer than
/// 256 KiB, so however many calls run, it stays about that long.
#[test]
fn one_shot_commands_keep_the_wal_short_for_the_next() {
    let ws = Workspace::with_repo(&[("a", "a")]);
    let steps: Vec<_> = (1..=20)
        .map(|i| serde_json::json!({"step_id": format!("1.{i}"), "agent_name": "alpha", "task_description": "do it"}))
        .collect();
    let plan = serde_json::json!({"task_id": "wal-1", "task_summary": "WAL", "phases": [
        {"phase_id": 1, "name": "All", "steps": steps}
    ]});
    let plan = ws.write("plan.json", &plan.to_string());
    let wal = ws.data().join("baton.db-wal");
    let wal_len = || std::fs::metadata(&wal).map_or(0, |m| m.len());
    // 256 KiB, and the frames of the call that crossed it (a frame is a 4 KiB page and its
    // 24-byte header).
    let bound = 256 * 1024 + 16 * (4096 + 24);
    let out = ws.run(&["execute", "start", "--plan", plan.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    for i in 1..=20 {
        let step = format!("1.{i}");
        let calls: [&[&str]; 3] = [
            &["execute", "next", "--task-id", "wal-1"],
            &["execute", "dispatched", "--task-id", "wal-1", "--step-id", &step, "--agent", "alpha"],
            &["execute", "record", "--task-id", "wal-1", "--step-id", &step, "--agent", "alpha"],
        ];
        for args in calls {
            let out = ws.run(args);
            assert_eq!(code(&out), 0, "{args:?}: {}", stderr(&out));
            assert!(wal_len() <= bound, "after {args:?} the WAL holds {} bytes (at most {bound})", wal_len());
        }
    }
    assert_eq!(ws.status("wal-1")["counters"]["steps_done"], 20, "every record landed");
}

/// The same for the one-shot commands outside `execute`: each opens the store for one call
/// and empties a WAL longer than 256 KiB as it leaves (they used to open it as a server does
/// and leave every frame for the next process to read back). The WAL is grown by a connection
/// of the test's own that never checkpoints, kept open (idle) so that SQLite does not empty
/// the WAL when it closes.
#[test]
fn other_one_shot_commands_empty_a_long_wal_as_they_leave() {
    let ws = Workspace::with_repo(&[("a", "a")]);
    ws.start_small_plan("wal-2");
    let wal = ws.data().join("baton.db-wal");
    let wal_len = || std::fs::metadata(&wal).map_or(0, |m| m.len());
    let filler = rusqlite::Connection::open(ws.data().join("baton.db")).unwrap();
    filler.execute_batch("pragma wal_autocheckpoint = 0; pragma busy_timeout = 10000;").unwrap();
    let commands: [&[&str]; 5] = [
        &["replay", "wal-2"],
        &["audit", "verify", "wal-2"],
        &["token", "list"],
        &["token", "create", "--user", "ann", "--role", "reviewer"],
        &["gc", "--hours", "1"],
    ];
    for (n, args) in commands.iter().enumerate() {
        let value = "x".repeat(400 * 1024);
        filler
            .execute("insert or replace into settings (key, value) values (?1, ?2)", (format!("filler-{n}"), value))
            .unwrap();
        assert!(wal_len() > 256 * 1024, "the WAL was grown before {args:?}: {} bytes", wal_len());
        let out = ws.run(args);
        assert_eq!(code(&out), 0, "{args:?}: {}", stderr(&out));
        assert_eq!(wal_len(), 0, "{args:?} left a WAL of {} bytes", wal_len());
    }
}

/// `--json` is a global flag, but `replay` and `audit verify` printed text with it (a fresh-clone
/// tester): both answer one JSON object now, with the same exit codes (4 when something does
/// not match), so a script can read the verdict.
#[test]
fn replay_and_audit_verify_answer_json_with_the_same_verdicts() {
    let ws = Workspace::with_repo(&[("a", "a")]);
    let plan = ws.write("plan.json", &small_plan("json-1", ""));
    assert_eq!(code(&ws.run(&["execute", "start", "--plan", plan.to_str().unwrap()])), 0);
    assert_eq!(code(&ws.run(&["execute", "record", "--step-id", "1.1", "--agent", "alpha"])), 0);
    let replay = ws.run(&["replay", "--json"]);
    assert_eq!(code(&replay), 0, "{}", stderr(&replay));
    let r = json_of(&replay);
    assert_eq!(
        (r["task_id"].as_str(), r["events"].as_u64(), r["status"].as_str()),
        (Some("json-1"), Some(1), Some("running"))
    );
    assert_eq!((r["steps_done"].as_u64(), r["steps_total"].as_u64()), (Some(1), Some(3)));
    assert_eq!((r["state_matches"].as_bool(), r["summary_matches"].as_bool()), (Some(true), Some(true)));
    let verify = ws.run(&["audit", "verify", "--json"]);
    assert_eq!(code(&verify), 0, "{}", stderr(&verify));
    let v = json_of(&verify);
    assert_eq!((v["events"].as_u64(), v["chain_intact"].as_bool()), (Some(1), Some(true)));
    assert!(v["first_bad_seq"].is_null(), "{v}");
    assert_eq!(v["decisions"], serde_json::json!({"signed": 0, "unsigned": 0, "bad_seqs": []}));

    // A journal changed behind Baton's back: the chain is broken at that entry, exit 4.
    let db = rusqlite::Connection::open(ws.data().join("baton.db")).unwrap();
    db.execute_batch(
        "drop trigger execution_events_append_only;
         update execution_events set payload = json_set(payload, '$.outcome', 'forged') where seq = 1;",
    )
    .unwrap();
    let verify = ws.run(&["audit", "verify", "--json"]);
    assert_eq!(code(&verify), 4, "{}", stderr(&verify));
    let v = json_of(&verify);
    assert_eq!((v["chain_intact"].as_bool(), v["first_bad_seq"].as_u64()), (Some(false), Some(1)), "{v}");
}
