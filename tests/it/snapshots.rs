//! Call cost that stays flat (issue 14.8): a snapshot that is due is written before the
//! command that made it due returns, so a short-lived CLI process leaves one behind and every
//! load replays at most `ONE_SHOT_SNAPSHOT_EVERY` events. (Before, the snapshot was left to a
//! background task the CLI process ended before it ran: a 300-step run had only the snapshot
//! at seq 0.)

use baton::runtime::executions::{ONE_SHOT_SNAPSHOT_EVERY, SNAPSHOT_EVERY};

use crate::common::*;

/// A workspace whose execution `task_id` (`small_plan`) the CLI started, and its data
/// directory, for the tests that drive the execution service itself.
fn started(task_id: &str) -> (Workspace, baton::runtime::config::DataDir) {
    let ws = Workspace::with_repo(&[("a", "a")]);
    let plan = ws.write("plan.json", &small_plan(task_id, ""));
    let out = ws.run(&["execute", "start", "--plan", plan.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let data = baton::runtime::config::DataDir::open(&ws.data()).unwrap();
    (ws, data)
}

/// A workspace whose one-phase plan `task_id` of `steps` steps (`1.1` …, no dependencies) the
/// CLI started.
fn started_with_steps(task_id: &str, steps: usize) -> Workspace {
    let ws = Workspace::with_repo(&[("a", "a")]);
    let plan = serde_json::json!({
        "task_id": task_id, "task_summary": "many steps",
        "phases": [{"phase_id": 1, "name": "All", "steps": (1..=steps).map(|i| serde_json::json!(
            {"step_id": format!("1.{i}"), "agent_name": "worker", "task_description": "do it"})).collect::<Vec<_>>()}]
    });
    let plan = ws.write("plan.json", &plan.to_string());
    let out = ws.run(&["execute", "start", "--plan", plan.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    ws
}

/// The lease holder `holder` (pid 1 on another machine) as a test takes a lease with it.
fn lease_holder(holder: &str) -> baton::store::LeaseInfo {
    baton::store::LeaseInfo {
        holder: holder.into(),
        pid: 1,
        host: "another-machine".into(),
        acquired_at: String::new(),
        expires_at: String::new(),
        epoch: 0,
        home: String::new(),
    }
}

/// Runs `execute <args…> --task-id <task_id>` and asserts it exits 0.
/// Two processes' worth of execution services on one data directory, each with its own cache.
async fn two_processes(
    data: baton::runtime::config::DataDir,
) -> (baton::runtime::executions::Executions, baton::runtime::executions::Executions) {
    let first = baton::runtime::executions::Executions::open(data.clone()).await.unwrap();
    let second = baton::runtime::executions::Executions::open(data).await.unwrap();
    (first, second)
}

fn execute_ok(ws: &Workspace, task_id: &str, args: &[&str]) -> std::process::Output {
    let out = ws.run(&[&["execute"], args, &["--task-id", task_id]].concat());
    assert_eq!(code(&out), 0, "{args:?}: {}", stderr(&out));
    out
}

/// Dispatches and records, one CLI call each, the steps `<phase>.<i>` for `i` in `steps`.
fn drive_steps(ws: &Workspace, task_id: &str, phase: u32, steps: std::ops::RangeInclusive<usize>) {
    for i in steps {
        let step = format!("{phase}.{i}");
        execute_ok(ws, task_id, &["dispatched", "--step-id", &step, "--agent", "worker"]);
        execute_ok(ws, task_id, &["record", "--step-id", &step, "--agent", "worker"]);
    }
}

/// The latest stored state of `task_id` as the store holds it.
fn stored(ws: &Workspace, task_id: &str) -> baton::store::Loaded {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let store = baton::store::Store::open(&ws.data().join("baton.db")).await.unwrap();
        store.load(task_id).await.unwrap().unwrap()
    })
}

#[test]
fn one_shot_cli_records_leave_a_snapshot_so_replays_stay_bounded() {
    let steps = usize::try_from(ONE_SHOT_SNAPSHOT_EVERY).unwrap() / 2 + 10;
    let ws = started_with_steps("flat", steps);
    drive_steps(&ws, "flat", 1, 1..=steps);
    let loaded = stored(&ws, "flat");
    let snapshot = loaded.snapshot.expect("a snapshot");
    assert!(
        loaded.last_seq > i64::try_from(ONE_SHOT_SNAPSHOT_EVERY).unwrap(),
        "the run crossed a snapshot: {}",
        loaded.last_seq
    );
    assert_eq!(
        snapshot.seq,
        i64::try_from(ONE_SHOT_SNAPSHOT_EVERY).unwrap(),
        "the due snapshot was written by the CLI call"
    );
    assert!(loaded.events_after_snapshot.len() < usize::try_from(ONE_SHOT_SNAPSHOT_EVERY).unwrap());
    let replay = ws.run(&["replay", "flat"]);
    assert!(stdout(&replay).contains("state matches the stored snapshot + journal: yes"), "{}", stdout(&replay));
}

/// Issue 14.8: a snapshot leaves out the applied idempotency keys (two a step, they made up
/// 40% of a 5,000-step snapshot): the journal holds them. A record resent after the snapshot
/// that followed it is still a duplicate, and an explicit key reused for a different record is
/// still a conflict, whether the process loaded the state from the snapshot (the CLI) or a
/// driver holds it; `baton replay` still finds the stored state equal to the journal's.
#[test]
fn a_record_resent_after_a_snapshot_left_out_its_key_is_still_a_duplicate() {
    let steps = usize::try_from(ONE_SHOT_SNAPSHOT_EVERY).unwrap() / 2 + 2;
    let ws = started_with_steps("keys", steps);
    execute_ok(&ws, "keys", &["dispatched", "--step-id", "1.1", "--agent", "worker"]);
    execute_ok(&ws, "keys", &["record", "--step-id", "1.1", "--agent", "worker", "--idempotency-key", "record-1"]);
    drive_steps(&ws, "keys", 1, 2..=steps);
    let before = stored(&ws, "keys");
    let snapshot = before.snapshot.as_ref().expect("a snapshot");
    assert!(snapshot.seq >= 4, "the snapshot comes after the records resent below: {}", snapshot.seq);
    let snapshot_seq = snapshot.seq;
    assert!(!snapshot.state.contains("applied_keys"), "the snapshot holds no keys");
    assert!(!snapshot.state.contains("record-1"), "the snapshot holds no keys");

    // The CLI: a fresh process, the state decoded from the snapshot.
    let out = execute_ok(&ws, "keys", &["record", "--step-id", "1.2", "--agent", "worker"]);
    assert!(stderr(&out).contains("already applied"), "{}", stderr(&out));
    let out =
        execute_ok(&ws, "keys", &["record", "--step-id", "1.1", "--agent", "worker", "--idempotency-key", "record-1"]);
    assert!(stderr(&out).contains("already applied"), "{}", stderr(&out));
    let out = ws.run(&[
        "execute",
        "record",
        "--task-id",
        "keys",
        "--step-id",
        "1.1",
        "--agent",
        "worker",
        "--outcome",
        "other",
        "--idempotency-key",
        "record-1",
    ]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("idempotency key record-1 was already used for a different event"),
        "{}",
        stderr(&out)
    );
    assert_eq!(stored(&ws, "keys").last_seq, before.last_seq, "nothing was journaled");

    // A driver's state, loaded once and recorded into (`Executions::record`).
    use baton::model::event::Event;
    let data = baton::runtime::config::DataDir::open(&ws.data()).unwrap();
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let execs = baton::runtime::executions::Executions::open(data).await.unwrap();
        let mut state = execs.get("keys").await.unwrap();
        let since = usize::try_from(before.last_seq - snapshot_seq).unwrap();
        assert_eq!(state.applied_keys.len(), since, "only the keys journaled since the snapshot");
        assert!(execs.key_applied(&state, "record-1").await.unwrap(), "the journal knows the key");
        assert!(!execs.key_applied(&state, "record-2").await.unwrap());
        // The journal's shape of an event: its kind, payload and key.
        let resend: Event = serde_json::from_value(serde_json::json!({
            "kind": "step_recorded", "step_id": "1.1", "agent_name": "worker", "status": "complete",
            "outcome": "other", "idempotency_key": "record-1"
        }))
        .unwrap();
        let refused = execs.record(&mut state, resend).await.unwrap_err();
        assert!(refused.to_string().contains("already used for a different event"), "{refused:#}");
    });
    assert_eq!(stored(&ws, "keys").last_seq, before.last_seq, "nothing was journaled");
    let replay = ws.run(&["replay", "keys"]);
    assert_eq!(code(&replay), 0, "{}{}", stdout(&replay), stderr(&replay));
    assert!(stdout(&replay).contains("state matches the stored snapshot + journal: yes"), "{}", stdout(&replay));
}

/// The operator service's rule for decisions reads the applied keys too: an approval resent by
/// the same operator after a snapshot that left its key out is still that approval resent
/// (exit 0, nothing written), not a second decision refused as "already decided"; a decision
/// under another key still is refused.
#[test]
fn an_approval_resent_after_a_snapshot_left_out_its_key_is_still_a_resend() {
    let ws = Workspace::with_repo(&[("a", "a")]);
    let steps = usize::try_from(ONE_SHOT_SNAPSHOT_EVERY).unwrap() / 2 + 2;
    let step = |id: String| serde_json::json!({"step_id": id, "agent_name": "worker", "task_description": "do it"});
    let plan = serde_json::json!({"task_id": "ap", "task_summary": "approve, then many steps", "phases": [
        {"phase_id": 1, "name": "Design", "approval_required": true, "steps": [step("1.1".into())]},
        {"phase_id": 2, "name": "Build", "steps": (1..=steps).map(|i| step(format!("2.{i}"))).collect::<Vec<_>>()}
    ]});
    let plan = ws.write("plan.json", &plan.to_string());
    let out = ws.run(&["execute", "start", "--plan", plan.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    execute_ok(&ws, "ap", &["dispatched", "--step-id", "1.1", "--agent", "worker"]);
    let out = ws.run(&["execute", "record", "--task-id", "ap", "--step-id", "1.1", "--agent", "worker"]);
    assert_eq!(code(&out), 3, "waiting for the approval: {}", stderr(&out));
    let approve = ["approve", "--phase-id", "1", "--result", "approve"];
    execute_ok(&ws, "ap", &approve);
    let approved_at = stored(&ws, "ap").last_seq;
    drive_steps(&ws, "ap", 2, 1..=steps);
    let before = stored(&ws, "ap");
    let snapshot = before.snapshot.as_ref().expect("a snapshot");
    assert!(snapshot.seq > approved_at, "the snapshot ({}) comes after the approval ({approved_at})", snapshot.seq);

    let out = execute_ok(&ws, "ap", &approve);
    assert!(stderr(&out).contains("already applied"), "{}", stderr(&out));
    let other = ws.run(&[&["execute"], &approve[..], &["--task-id", "ap", "--idempotency-key", "second"]].concat());
    assert_eq!(code(&other), 2, "{}", stderr(&other));
    assert!(stderr(&other).contains("was already decided: approve"), "{}", stderr(&other));
    assert_eq!(stored(&ws, "ap").last_seq, before.last_seq, "nothing was journaled");
}

/// Issue 14.8: a call's cost must not grow with the plan, so no call copies the state. A load
/// hands out the cached state itself, a record updates it in place, a reader holding an older
/// version keeps it unchanged (copy-on-write), and a refused event leaves the cache matching
/// the journal.
#[test]
fn loads_share_the_cached_state_and_a_record_updates_it_without_a_copy() {
    use baton::model::event::{Event, EventKind};
    use baton::model::state::StepStatus;
    use std::sync::Arc;
    let (_ws, data) = started("cache-1");
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let execs = baton::runtime::executions::Executions::open(data).await.unwrap();
        let dispatch = |step: &str| {
            Event::new(EventKind::StepDispatched { step_id: step.into(), agent_name: "alpha".into() }).by("test")
        };
        let first = execs.load_shared("cache-1").await.unwrap().unwrap();
        let again = execs.load_shared("cache-1").await.unwrap().unwrap();
        assert!(Arc::ptr_eq(&first, &again), "a second load shares the state the first one cached");
        drop((first, again));

        let done = execs.record_once("cache-1", dispatch("1.1")).await.unwrap();
        let after = execs.load_shared("cache-1").await.unwrap().unwrap();
        assert!(Arc::ptr_eq(&done.state, &after), "the record updated the cached state in place");
        assert_eq!(after.step_status("1.1"), StepStatus::Dispatched);
        drop(done);

        // A step the plan does not have: refused, nothing journaled, the cache still right.
        let held = after;
        let refused = execs.record_once("cache-1", dispatch("9.9")).await.unwrap_err();
        assert!(format!("{refused:#}").contains("9.9"), "{refused:#}");
        execs.record_once("cache-1", dispatch("1.2")).await.unwrap();
        // The reader's version is as it was; the cache has the new event.
        assert_eq!(held.step_status("1.2"), StepStatus::Pending);
        let now = execs.load_shared("cache-1").await.unwrap().unwrap();
        assert_eq!(now.step_status("1.2"), StepStatus::Dispatched);
        assert_eq!(now.events_applied, held.events_applied + 1);
        // And it is what a full rebuild from the journal gives.
        let replayed = execs.replay("cache-1").await.unwrap();
        assert_eq!(serde_json::to_value(&*now).unwrap(), serde_json::to_value(&replayed).unwrap());
    });
}

/// Issue 14.8: a record on an execution nobody leases is one write transaction, with no brief
/// lease taken and released around it (the lease's epoch, which every lease taken moves, stays
/// where it was), and the journal stays one chain. Once a driver elsewhere holds the lease, a
/// record is refused as before and writes nothing.
#[test]
fn a_record_nobody_leases_takes_no_lease_and_a_driver_held_lease_still_refuses_it() {
    use baton::model::event::{Event, EventKind};
    let (_ws, data) = started("unleased-1");
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let (first, second) = two_processes(data).await;
        let dispatch = |step: &str| {
            Event::new(EventKind::StepDispatched { step_id: step.into(), agent_name: "alpha".into() }).by("test")
        };
        first.record_once("unleased-1", dispatch("1.1")).await.unwrap();
        second.record_once("unleased-1", dispatch("1.2")).await.unwrap();
        // The first one's cache is behind the journal now: it catches up before it appends.
        let budget = Event::new(EventKind::BudgetSet { ceiling_usd: Some(50.0), source: "test".into() }).by("test");
        let done = first.record_once("unleased-1", budget).await.unwrap();
        assert_eq!(done.state.events_applied, 3);
        let store = first.store();
        assert!(store.verify_chain("unleased-1").await.unwrap().ok);

        let now = baton::clock::now_rfc3339();
        let epoch = store.acquire_lease("unleased-1", &lease_holder("another-machine:1:run"), &now, 600).await.unwrap();
        assert_eq!(epoch, 1, "three records took no lease: the first lease ever taken has epoch 1");

        let budget = Event::new(EventKind::BudgetSet { ceiling_usd: Some(80.0), source: "test".into() }).by("test");
        let refused = second.record_once("unleased-1", budget).await.unwrap_err();
        assert!(format!("{refused:#}").contains("another-machine:1:run"), "{refused:#}");
        assert_eq!(store.load_latest("unleased-1").await.unwrap().unwrap().last_seq, 3, "the refusal wrote nothing");
    });
}

/// A driver paused past its lease (seen with SIGSTOP in `replicas.rs`) wakes with a stale
/// state: the replica that took the execution over has journaled the step's outcome under the
/// key the paused one records its own with. The paused driver must learn that it lost the
/// lease (and stop as fenced out), not that its idempotency key was used for a different
/// event; and it writes nothing.
#[test]
fn a_driver_whose_lease_was_taken_over_is_fenced_out_not_told_of_a_key_conflict() {
    use baton::model::event::{Event, EventKind};
    use baton::model::state::StepStatus;
    use baton::store::Fence;
    let (_ws, data) = started("fenced-1");
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let (paused, taker) = two_processes(data).await;
        let store = paused.store().clone();
        // The paused replica's lease, taken an hour ago for ten seconds: long expired.
        let an_hour_ago = (baton::clock::now() - chrono::Duration::hours(1)).to_rfc3339();
        let epoch = store.acquire_lease("fenced-1", &lease_holder("paused"), &an_hour_ago, 10).await.unwrap();
        let fence = Fence { holder: "paused".into(), epoch };
        let mut stale = paused.get("fenced-1").await.unwrap();
        let dispatch = Event::new(EventKind::StepDispatched { step_id: "1.1".into(), agent_name: "alpha".into() });
        paused.record_fenced(&mut stale, dispatch.by("driver"), Some(&fence)).await.unwrap();

        // Another replica takes the lease over and records the step's outcome.
        let now = baton::clock::now_rfc3339();
        let taken = store.acquire_lease("fenced-1", &lease_holder("taker"), &now, 600).await.unwrap();
        assert!(taken > epoch, "a takeover moves the epoch");
        let outcome = |status: &str| -> Event {
            serde_json::from_value(serde_json::json!({
                "kind": "step_recorded", "step_id": "1.1", "agent_name": "alpha", "status": status,
                "outcome": format!("{status} here"), "idempotency_key": "record:fenced-1:1.1:1"
            }))
            .unwrap()
        };
        let mut current = taker.get("fenced-1").await.unwrap();
        let taker_fence = Fence { holder: "taker".into(), epoch: taken };
        taker.record_fenced(&mut current, outcome("complete"), Some(&taker_fence)).await.unwrap();
        let before = store.load_latest("fenced-1").await.unwrap().unwrap().last_seq;

        // The paused one wakes and records its own outcome of the same attempt.
        let refused = paused.record_fenced(&mut stale, outcome("failed"), Some(&fence)).await.unwrap_err();
        assert!(baton::runtime::executions::is_fenced(&refused), "not told it lost the lease: {refused:#}");
        assert!(format!("{refused:#}").contains("taker"), "names who holds the lease now: {refused:#}");
        assert_eq!(store.load_latest("fenced-1").await.unwrap().unwrap().last_seq, before, "nothing written");
        let state = taker.get("fenced-1").await.unwrap();
        assert_eq!(state.step_status("1.1"), StepStatus::Complete, "the new holder's outcome stands");

        // Without a fence (a door that holds no lease), the engine's refusal is unchanged.
        let unfenced = paused.record(&mut stale, outcome("failed")).await.unwrap_err();
        assert!(!baton::runtime::executions::is_fenced(&unfenced), "{unfenced:#}");
    });
}

/// Issue 14.8: a long-lived process snapshots every `SNAPSHOT_EVERY` events (it loads an
/// execution once and catches up in memory), a one-shot process every
/// `ONE_SHOT_SNAPSHOT_EVERY` (it loads on every call). A one-shot load that finds more events
/// than its cadence after the latest snapshot writes one, whoever journaled them.
#[test]
fn a_server_snapshots_every_256_events_and_a_one_shot_process_every_64() {
    use baton::model::event::{Event, EventKind};
    use baton::runtime::executions::Executions;
    use baton::store::Workload;
    let (_ws, data) = started("cadence-1");
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let budget = |i: u64| {
            let ceiling = Some(100.0 + i as f64);
            Event::new(EventKind::BudgetSet { ceiling_usd: ceiling, source: "test".into() })
                .with_key(format!("budget-{i}"))
                .by("test")
        };
        let latest = |execs: &Executions| {
            let store = execs.store().clone();
            async move { store.load_latest("cadence-1").await.unwrap().unwrap() }
        };
        let server = Executions::open(data.clone()).await.unwrap();
        let past_one_shot_cadence = ONE_SHOT_SNAPSHOT_EVERY + 6;
        for i in 1..=past_one_shot_cadence {
            server.record_once("cadence-1", budget(i)).await.unwrap();
        }
        let loaded = latest(&server).await;
        assert_eq!(loaded.last_seq, i64::try_from(past_one_shot_cadence).unwrap());
        assert_eq!(loaded.snapshot.map(|s| s.seq), Some(0), "a server writes none before {SNAPSHOT_EVERY} events");

        let one_shot = Executions::open_for(data, Workload::OneShot).await.unwrap();
        one_shot.load_shared("cadence-1").await.unwrap().unwrap();
        let loaded = latest(&one_shot).await;
        assert_eq!(
            loaded.snapshot.map(|s| s.seq),
            Some(loaded.last_seq),
            "the one-shot load wrote the overdue snapshot"
        );
        for i in past_one_shot_cadence + 1..=2 * ONE_SHOT_SNAPSHOT_EVERY {
            one_shot.record_once("cadence-1", budget(i)).await.unwrap();
        }
        let loaded = latest(&one_shot).await;
        let due = i64::try_from(2 * ONE_SHOT_SNAPSHOT_EVERY).unwrap();
        assert_eq!(loaded.snapshot.map(|s| s.seq), Some(due), "the one-shot record that made it due wrote it");
    });
}

/// A run of `task_id` driven by the CLI past its first one-shot snapshot, with two steps left:
/// the workspace, the steps done, the snapshot's seq and the database, open with rusqlite to
/// edit that snapshot's row.
fn past_a_snapshot(task_id: &str) -> (Workspace, usize, i64, rusqlite::Connection) {
    let steps = usize::try_from(ONE_SHOT_SNAPSHOT_EVERY).unwrap() / 2 + 4;
    let ws = started_with_steps(task_id, steps + 2);
    drive_steps(&ws, task_id, 1, 1..=steps);
    let seq = stored(&ws, task_id).snapshot.expect("a snapshot").seq;
    let db = rusqlite::Connection::open(ws.data().join("baton.db")).unwrap();
    (ws, steps, seq, db)
}

/// Issue 14.8: a snapshot written by this build keeps its step results undecoded until read;
/// one written by another build (another model fingerprint, or none) is decoded in full at
/// load. So after an upgrade the CLI goes on from an older build's snapshot, and a result in
/// it that the new build cannot decode is a clear error naming the snapshot, not a panic
/// later.
#[test]
fn a_snapshot_from_another_build_is_decoded_in_full_and_a_result_it_cannot_read_is_an_error() {
    let (ws, steps, seq, db) = past_a_snapshot("older");
    let opening: String =
        db.query_row("select substr(state_json, 1, 11) from snapshots where seq = ?1", [seq], |r| r.get(0)).unwrap();
    assert_eq!(opening, r#"{"$model":""#, "this build's snapshot opens with its fingerprint");
    // As another build wrote it: its first key is not this build's fingerprint.
    db.execute(r#"update snapshots set state_json = '{"$other' || substr(state_json, 9) where seq = ?1"#, [seq])
        .unwrap();
    let next = execute_ok(&ws, "older", &["next"]);
    assert!(stdout(&next).contains(&format!("1.{}", steps + 1)), "{}", stdout(&next));
    let replay = ws.run(&["replay", "older"]);
    assert!(stdout(&replay).contains("state matches the stored snapshot + journal: yes"), "{}", stdout(&replay));
    // A result the build cannot read: the load fails at once, saying which snapshot.
    db.execute(
        r#"update snapshots set state_json = replace(state_json, '"attempt":1', '"attempt":"one"') where seq = ?1"#,
        [seq],
    )
    .unwrap();
    let out = ws.run(&["execute", "next", "--task-id", "older"]);
    assert_ne!(code(&out), 0);
    let err = stderr(&out);
    assert!(err.contains(&format!("snapshot {seq} of older is unreadable")) && err.contains("\"one\""), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// A snapshot of this build changed after it was written (here a result edited by hand so
/// that it no longer decodes) fails its checksum and is decoded in full: every command that
/// loads it says which snapshot is unreadable and why, and none panics. (Found by a
/// fresh-clone tester: before the checksum, such a snapshot loaded, and `execute status`,
/// `status --json` and `replay` panicked at the result's first read.)
#[test]
fn a_snapshot_of_this_build_edited_by_hand_is_an_error_for_every_command_never_a_panic() {
    let (ws, steps, seq, db) = past_a_snapshot("edited");
    let changed = db
        .execute(
            r#"update snapshots set state_json = replace(state_json, '"attempt":1', '"attempt":"one"') where seq = ?1"#,
            [seq],
        )
        .unwrap();
    assert_eq!(changed, 1);
    let opening: String =
        db.query_row("select substr(state_json, 1, 11) from snapshots where seq = ?1", [seq], |r| r.get(0)).unwrap();
    assert_eq!(opening, r#"{"$model":""#, "still this build's fingerprint");
    for args in [
        &["execute", "status", "--task-id", "edited"][..],
        &["execute", "status", "--task-id", "edited", "--json"],
        &["execute", "next", "--task-id", "edited"],
        &[
            "execute",
            "dispatched",
            "--task-id",
            "edited",
            "--step-id",
            &format!("1.{}", steps + 1),
            "--agent",
            "worker",
        ],
        &["replay", "edited"],
    ] {
        let out = ws.run(args);
        let err = stderr(&out);
        assert!(!err.contains("panicked") && code(&out) != 101, "{args:?}: {err}");
        assert_ne!(code(&out), 0, "{args:?}: {}", stdout(&out));
        assert!(
            err.contains(&format!("snapshot {seq} of edited is unreadable")) && err.contains("\"one\""),
            "{args:?}: {err}"
        );
    }
}
