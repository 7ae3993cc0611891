//! Call cost that stays flat (issue 14.8): a snapshot that is due is written before the
//! command that made it due returns, so a short-lived CLI process leaves one behind and every
//! load replays at most `SNAPSHOT_EVERY` events. (Before, the snapshot was left to a background
//! task the CLI process ended before it ran: a 300-step run had only the snapshot at seq 0.)

use baton::runtime::executions::SNAPSHOT_EVERY;

use crate::common::*;

#[test]
fn one_shot_cli_records_leave_a_snapshot_so_replays_stay_bounded() {
    let ws = Workspace::with_repo(&[("a", "a")]);
    let steps = usize::try_from(SNAPSHOT_EVERY).unwrap() / 2 + 10;
    let plan = serde_json::json!({
        "task_id": "flat", "task_summary": "many steps",
        "phases": [{"phase_id": 1, "name": "All", "steps": (1..=steps).map(|i| serde_json::json!(
            {"step_id": format!("1.{i}"), "agent_name": "worker", "task_description": "do it"})).collect::<Vec<_>>()}]
    });
    let plan = ws.write("plan.json", &plan.to_string());
    let out = ws.run(&["execute", "start", "--plan", plan.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    for i in 1..=steps {
        let step = format!("1.{i}");
        let out = ws.run(&["execute", "dispatched", "--task-id", "flat", "--step-id", &step, "--agent", "worker"]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let out = ws.run(&["execute", "record", "--task-id", "flat", "--step-id", &step, "--agent", "worker"]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let loaded = rt.block_on(async {
        let store = baton::store::Store::open(&ws.data().join("baton.db")).await.unwrap();
        store.load("flat").await.unwrap().unwrap()
    });
    let snapshot = loaded.snapshot.expect("a snapshot");
    assert!(
        loaded.last_seq > i64::try_from(SNAPSHOT_EVERY).unwrap(),
        "the run crossed a snapshot: {}",
        loaded.last_seq
    );
    assert_eq!(snapshot.seq, i64::try_from(SNAPSHOT_EVERY).unwrap(), "the due snapshot was written by the CLI call");
    assert!(loaded.events_after_snapshot.len() < usize::try_from(SNAPSHOT_EVERY).unwrap());
    let replay = ws.run(&["replay", "flat"]);
    assert!(stdout(&replay).contains("state matches the stored snapshot + journal: yes"), "{}", stdout(&replay));
}
