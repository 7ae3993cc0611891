//! GATE scenarios: passing, skipped and failing gates, `{files}` expansion and quoting, gate
//! additions, gate retries and `retry_gate`. It never covers approvals or feedback.

use super::*;

fn gated(steps: Vec<PlanStep>) -> ExecutionState {
    let mut p = phase(1, steps);
    p.gate = Some(gate("cargo test {files}"));
    let mut state = started(vec![p, phase(2, vec![step("2.1", &[])])]);
    for id in dispatch_ids(&state) {
        ok(&mut state, &with_files(record(&id, RecordStatus::Complete), &[&format!("{id}.rs")]));
    }
    state
}

fn with_files(mut e: Event, files: &[&str]) -> Event {
    if let EventKind::StepRecorded { files_changed, .. } = &mut e.kind {
        *files_changed = files.iter().map(|f| f.to_string()).collect();
    }
    e
}

#[test]
fn a_passing_gate_advances() {
    let mut state = gated(vec![step("1.1", &[])]);
    assert_eq!(state.status, ExecutionStatus::GatePending);
    assert!(next_actions(&state).is_empty());
    let g = gate_action_of(&state);
    assert_eq!((g.phase_id, g.gate_type.as_str(), g.attempt, g.failures), (1, "test", 1, 0));
    assert_eq!(g.message, "Run gate 'test' for phase 1.");
    ok(&mut state, &gate_result(1, true, "ok"));
    assert_eq!(state.status, ExecutionStatus::Running);
    assert_eq!(state.current_phase, 1);
    assert_eq!(dispatch_ids(&state), vec!["2.1"]);
}

/// Issue 14.4, the input that showed it: `python -m py_compile {files}` after a phase that
/// changed no file ran `python -m py_compile ` and passed without checking anything.
#[test]
fn a_files_gate_after_a_phase_that_changed_no_file_is_skipped_not_passed() {
    let mut p = phase(1, vec![step("1.1", &[])]);
    p.gate = Some(gate("python -m py_compile {files}"));
    let mut state = started(vec![p, phase(2, vec![step("2.1", &[])])]);
    ok(&mut state, &record("1.1", RecordStatus::Complete));
    assert_eq!(state.status, ExecutionStatus::GatePending);
    let g = gate_action_of(&state);
    assert_eq!(g.skip_reason.as_deref(), Some("no files changed"));
    assert_eq!(g.gate_command, "", "the command is not run with an empty file list");
    assert!(g.message.contains("nothing to run (no files changed)"), "{}", g.message);
    // A pass cannot be recorded as a skip of a gate that has something to run, and vice versa
    // a skip is accepted here and lets the phase go on.
    let skip = ev(EventKind::GateSkipped { phase_id: 1, reason: "no files changed".into() });
    let events = [record("1.1", RecordStatus::Complete), skip.clone()];
    ok(&mut state, &skip);
    assert_eq!(state.current_phase, 1, "the phase advanced");
    assert_eq!(dispatch_ids(&state), vec!["2.1"]);
    let r = &state.gate_results[0];
    assert_eq!((r.passed, r.skipped.as_deref(), r.exit_code), (false, Some("no files changed"), None));
    assert_eq!(r.outcome(), crate::model::state::GateOutcome::Skipped);
    assert_eq!(r.command, "python -m py_compile {files}");
    assert!(!state.gate_passed(1), "a skipped gate is never a pass");
    assert!(state.gate_cleared(1));
    assert_eq!(state.gate_failures(1), 0, "nor a failure");
    assert_eq!(state.gate_skipped(1), Some("no files changed"));
    // The same again is a duplicate; replaying the journal gives the same state.
    assert!(apply(&mut state, &skip, T0).unwrap().duplicate);
    let mut p = phase(1, vec![step("1.1", &[])]);
    p.gate = Some(gate("python -m py_compile {files}"));
    let plan = plan_of(vec![p, phase(2, vec![step("2.1", &[])])]);
    let replayed = replay(plan, T0, events.iter().map(|e| (e, T0))).unwrap();
    assert_eq!(replayed, state);
}

/// Issue 14.4: a test, build or lint gate with no command was recorded as passed
/// ("auto-approved"); it is skipped with the reason `no command`. Any other type too, but `ci`
/// and `review`, which the forge's checks and the reviewer decide (issue 19.2).
#[test]
fn a_gate_with_no_command_is_skipped_for_every_type() {
    for gate_type in ["test", "build", "lint", "spec", "security"] {
        let mut p = phase(1, vec![step("1.1", &[])]);
        p.gate = Some(PlanGate { gate_type: gate_type.into(), command: "  ".into(), extra: Default::default() });
        let mut state = started(vec![p]);
        ok(&mut state, &with_files(record("1.1", RecordStatus::Complete), &["a.rs"]));
        let g = gate_action_of(&state);
        assert_eq!(g.skip_reason.as_deref(), Some("no command"), "{gate_type}");
        // A skip sent with no reason journals the engine's own.
        ok(&mut state, &ev(EventKind::GateSkipped { phase_id: 1, reason: String::new() }));
        assert_eq!(state.gate_results[0].skipped.as_deref(), Some("no command"));
        assert!(!state.gate_passed(1));
        assert_eq!(action_type(&state), ActionType::Complete, "{gate_type}: the phase went on");
    }
}

#[test]
fn a_gate_with_something_to_run_cannot_be_skipped() {
    let mut state = gated(vec![step("1.1", &[])]);
    assert_eq!(gate_action_of(&state).skip_reason, None);
    let err = refused(&mut state, &ev(EventKind::GateSkipped { phase_id: 1, reason: "no command".into() }));
    let text = err.to_string();
    assert!(text.contains("has something to run (cargo test 1.1.rs)"), "{text}");
}

#[test]
fn additions_naming_files_are_dropped_when_no_file_changed_and_the_others_still_run() {
    let mut p = phase(1, vec![step("1.1", &[])]);
    p.gate = Some(gate("lint {files}"));
    let mut state = started(vec![p]);
    let mut e = record("1.1", RecordStatus::Complete);
    if let EventKind::StepRecorded { outcome, .. } = &mut e.kind {
        *outcome = "done\nGATE_ADDITION: ruff check {files}\nGATE_ADDITION: cargo check".into();
    }
    ok(&mut state, &e);
    let g = gate_action_of(&state);
    assert_eq!(
        (g.gate_command.as_str(), g.additions.as_slice(), g.skip_reason.as_deref()),
        ("", &["cargo check".to_string()][..], None)
    );
    // With only `{files}` additions, the gate is skipped.
    let mut p = phase(1, vec![step("1.1", &[])]);
    p.gate = Some(gate("lint {files}"));
    let mut state = started(vec![p]);
    let mut e = record("1.1", RecordStatus::Complete);
    if let EventKind::StepRecorded { outcome, .. } = &mut e.kind {
        *outcome = "done\nGATE_ADDITION: ruff check {files}".into();
    }
    ok(&mut state, &e);
    let g = gate_action_of(&state);
    assert_eq!((g.additions.len(), g.skip_reason.as_deref()), (0, Some("no files changed")));
}

#[test]
fn gate_command_expands_files_of_the_phase() {
    let mut p = phase(1, vec![step("1.1", &[]), step("1.2", &[])]);
    p.gate = Some(gate("lint {files}"));
    let mut state = started(vec![p]);
    for (id, files) in [("1.1", vec!["b.rs", "a.rs"]), ("1.2", vec!["a.rs", "c.rs"])] {
        let mut e = record(id, RecordStatus::Complete);
        if let EventKind::StepRecorded { files_changed, .. } = &mut e.kind {
            *files_changed = files.into_iter().map(String::from).collect();
        }
        ok(&mut state, &e);
    }
    assert_eq!(gate_action_of(&state).gate_command, "lint a.rs b.rs c.rs");
}

#[test]
fn gate_files_are_quoted_for_the_shell_the_gate_runs_in() {
    // Agent-chosen file names reach `sh -c`: quoted, a name like `x;rm -rf ~` stays one word.
    let mut p = phase(1, vec![step("1.1", &[])]);
    p.gate = Some(gate("lint {files}"));
    let mut state = started(vec![p]);
    let mut e = record("1.1", RecordStatus::Complete);
    if let EventKind::StepRecorded { files_changed, .. } = &mut e.kind {
        *files_changed = vec!["x;rm -rf ~".into(), "ok.rs".into()];
    }
    ok(&mut state, &e);
    assert_eq!(gate_action_of(&state).gate_command, "lint ok.rs 'x;rm -rf ~'");
}

#[test]
fn gate_additions_join_the_gate_and_stay_on_its_retry() {
    let mut state = gated(vec![step("1.1", &[]), step("1.2", &[])]);
    // `gated` recorded both steps; record 1.2 again with additions, as a re-run would.
    let mut state2 = started(vec![{
        let mut p = phase(1, vec![step("1.1", &[]), step("1.2", &[])]);
        p.gate = Some(gate("cargo test"));
        p
    }]);
    let with = |id: &str, outcome: &str| {
        let mut e = record(id, RecordStatus::Complete);
        if let EventKind::StepRecorded { outcome: o, .. } = &mut e.kind {
            *o = outcome.into();
        }
        e
    };
    let e1 = with("1.1", "done\nGATE_ADDITION: npm audit\nGATE_ADDITION: rm -rf /");
    let e2 = with("1.2", "done\ngate_addition: npm audit\nGATE_ADDITION: cargo clippy");
    ok(&mut state2, &e1);
    ok(&mut state2, &e2);
    let r1 = state2.result("1.1").unwrap();
    assert_eq!(r1.gate_additions, ["npm audit"]);
    assert_eq!(r1.rejected_gate_additions.len(), 1);
    assert!(r1.rejected_gate_additions[0].reason.contains("destructive"));
    let g = gate_action_of(&state2);
    assert_eq!(g.additions, ["npm audit", "cargo clippy"], "in step order, each once");
    assert!(g.message.ends_with("[+agent additions: npm audit; cargo clippy]"), "{}", g.message);
    // A failing gate re-dispatches 1.2; its re-run keeps its additions, and the retry carries
    // them (seed-spec §5 #64).
    ok(&mut state2, &gate_result(1, false, "npm audit: 1 vulnerability"));
    ok(&mut state2, &dispatched("1.2"));
    ok(&mut state2, &e2);
    assert_eq!(gate_action_of(&state2).additions, ["npm audit", "cargo clippy"]);
    // Without additions the action is as before.
    assert!(gate_action_of(&{
        ok(&mut state, &gate_result(1, false, "x"));
        ok(&mut state, &record("1.2", RecordStatus::Complete));
        state
    })
    .additions
    .is_empty());
}

#[test]
fn gate_failure_redispatches_the_last_step_then_gate_failed_then_failed_after_three() {
    let mut state = gated(vec![step("1.1", &[]), step("1.2", &[])]);
    let done_before = state.counters.steps_done;

    ok(&mut state, &gate_result(1, false, "test foo ... FAILED"));
    assert_eq!(state.status, ExecutionStatus::Running);
    assert_eq!(state.counters.steps_done, done_before - 1);
    assert_eq!(dispatch_ids(&state), vec!["1.2"], "the phase's last step, and only it");
    let d = dispatch_of(&state, "1.2");
    assert_eq!(d.attempt, 2);
    assert!(d.delegation_prompt.contains("## Gate output"), "{}", d.delegation_prompt);
    assert!(d.delegation_prompt.contains("$ cargo test {files}\ntest foo ... FAILED"), "{}", d.delegation_prompt);
    ok(&mut state, &dispatched("1.2"));
    ok(&mut state, &record("1.2", RecordStatus::Complete));
    assert!(state.result("1.2").unwrap().gate_feedback.is_none());
    assert_eq!(state.status, ExecutionStatus::GatePending);
    assert_eq!(gate_action_of(&state).attempt, 2);

    ok(&mut state, &gate_result(1, false, "still failing"));
    assert_eq!(state.status, ExecutionStatus::GateFailed);
    assert!(next_actions(&state).is_empty());
    let g = gate_action_of(&state);
    assert_eq!((g.failures, g.max_failures, g.attempt), (2, MAX_GATE_FAILURES, 3));
    assert_eq!(g.message, "Gate 'test' for phase 1 failed (2/3); run it again.");

    ok(&mut state, &gate_result(1, false, "failing again"));
    assert_eq!(state.status, ExecutionStatus::Failed);
    assert_eq!(failed_summary(&state), "gate 'test' of phase 1 failed 3 times (cap 3)");
    assert_eq!(state.current_phase, 0);
}

#[test]
fn gate_failed_then_pass_advances() {
    let mut state = gated(vec![step("1.1", &[])]);
    ok(&mut state, &gate_result(1, false, "f1"));
    ok(&mut state, &record("1.1", RecordStatus::Complete));
    ok(&mut state, &gate_result(1, false, "f2"));
    assert_eq!(state.status, ExecutionStatus::GateFailed);
    ok(&mut state, &gate_result(1, true, "ok"));
    assert_eq!((state.status, state.current_phase), (ExecutionStatus::Running, 1));
}

#[test]
fn retry_gate_forgives_failures_and_reopens_a_failed_execution() {
    let mut state = gated(vec![step("1.1", &[])]);
    ok(&mut state, &gate_result(1, false, "f1"));
    ok(&mut state, &record("1.1", RecordStatus::Complete));
    for out in ["f2", "f3"] {
        ok(&mut state, &gate_result(1, false, out));
    }
    assert_eq!(state.status, ExecutionStatus::Failed);
    ok(&mut state, &ev(EventKind::GateRetried { phase_id: 1 }));
    assert_eq!(state.status, ExecutionStatus::GatePending);
    assert_eq!(state.failure, None);
    assert_eq!(state.completed_at, "");
    assert_eq!(state.gate_failures(1), 0);
    ok(&mut state, &gate_result(1, false, "f4"));
    assert_eq!(state.status, ExecutionStatus::GateFailed, "no second re-dispatch");
    assert_eq!(gate_action_of(&state).failures, 1);
    ok(&mut state, &ev(EventKind::GateRetried { phase_id: 1 }));
    assert_eq!(state.status, ExecutionStatus::GatePending);
    ok(&mut state, &gate_result(1, true, "ok"));
    assert_eq!(state.current_phase, 1);
}

#[test]
fn an_empty_phase_with_a_gate_asks_for_the_gate_at_once_and_a_failure_goes_to_gate_failed() {
    let mut empty = phase(1, vec![]);
    empty.gate = Some(gate("true"));
    let mut state = started(vec![empty, phase(2, vec![step("2.1", &[])])]);
    assert_eq!(state.status, ExecutionStatus::GatePending);
    ok(&mut state, &gate_result(1, false, "no"));
    assert_eq!(state.status, ExecutionStatus::GateFailed);
    ok(&mut state, &gate_result(1, true, "yes"));
    assert_eq!(dispatch_ids(&state), vec!["2.1"]);
}

/// A fresh-user tester's `execute retry-gate --phase-id 1` on a phase without a gate said
/// "unknown phase 1", of a phase that exists. It says the phase has no gate.
#[test]
fn retrying_the_gate_of_a_phase_without_one_says_so() {
    let mut state = started(vec![phase(1, vec![step("1.1", &[])]), phase(2, vec![step("2.1", &[])])]);
    let err = refused(&mut state, &ev(EventKind::GateRetried { phase_id: 1 }));
    assert_eq!(err.to_string(), "phase 1 has no gate to retry");
    let err = refused(&mut state, &ev(EventKind::GateRetried { phase_id: 7 }));
    assert_eq!(err.to_string(), "unknown phase 7");
}
