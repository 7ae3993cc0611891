//! One scenario per action type and transition (seed-spec §2.2–§2.18, engine design decisions).

use super::*;

fn dispatch_of(state: &ExecutionState, step_id: &str) -> crate::model::action::DispatchAction {
    next_actions(state)
        .into_iter()
        .find_map(|a| match a {
            Action::Dispatch(d) if d.step_id == step_id => Some(d),
            _ => None,
        })
        .unwrap_or_else(|| panic!("step {step_id} is not offered: {:?}", next_action(state)))
}

fn gate_action_of(state: &ExecutionState) -> crate::model::action::GateAction {
    match next_action(state) {
        Action::Gate(g) => g,
        other => panic!("expected GATE, got {other:?}"),
    }
}

fn approval_action_of(state: &ExecutionState) -> crate::model::action::ApprovalAction {
    match next_action(state) {
        Action::Approval(a) => a,
        other => panic!("expected APPROVAL, got {other:?}"),
    }
}

fn failed_summary(state: &ExecutionState) -> String {
    match next_action(state) {
        Action::Failed { summary, .. } => summary,
        other => panic!("expected FAILED, got {other:?}"),
    }
}

fn phase_names(state: &ExecutionState) -> Vec<(i64, String)> {
    state.plan.phases.iter().map(|p| (p.phase_id, p.name.clone())).collect()
}

// ---------------------------------------------------------------------------------------------
// DISPATCH
// ---------------------------------------------------------------------------------------------

#[test]
fn dispatch_waves_follow_dependencies_with_isolation_only_for_two_or_more() {
    struct Case {
        steps: Vec<PlanStep>,
        waves: Vec<Vec<&'static str>>,
    }
    let cases = vec![
        Case { steps: vec![step("1.1", &[])], waves: vec![vec!["1.1"]] },
        Case { steps: vec![step("1.1", &[]), step("1.2", &["1.1"])], waves: vec![vec!["1.1"], vec!["1.2"]] },
        Case {
            steps: vec![step("1.1", &[]), step("1.2", &[]), step("1.3", &["1.1"]), step("1.4", &["1.2", "1.3"])],
            waves: vec![vec!["1.1", "1.2"], vec!["1.3"], vec!["1.4"]],
        },
        Case {
            steps: vec![step("1.1", &[]), step("1.2", &[]), step("1.3", &[])],
            waves: vec![vec!["1.1", "1.2", "1.3"]],
        },
    ];
    for case in cases {
        let mut state = started(vec![phase(1, case.steps)]);
        for wave in &case.waves {
            let actions = next_actions(&state);
            assert_eq!(dispatch_ids(&state), *wave);
            let want = if wave.len() >= 2 { "worktree" } else { "" };
            for a in &actions {
                let Action::Dispatch(d) = a else { panic!("{a:?}") };
                assert_eq!(d.isolation, want, "wave {wave:?}");
                assert_eq!(d.attempt, 1);
                assert_eq!(d.phase_id, 1);
            }
            assert_eq!(next_action(&state), actions[0]);
            for id in wave {
                ok(&mut state, &dispatched(id));
            }
            assert!(next_actions(&state).is_empty());
            assert!(matches!(next_action(&state), Action::Wait { .. }));
            for id in wave {
                ok(&mut state, &record(id, RecordStatus::Complete));
            }
        }
        assert!(matches!(next_action(&state), Action::Complete { .. }));
    }
}

#[test]
fn dispatch_carries_the_step_payload() {
    let mut s = step("1.1", &[]);
    s.agent_name = "architect".into();
    s.model = "opus".into();
    s.expected_outcome = "a schema".into();
    s.allowed_paths = vec!["docs/".into()];
    s.blocked_paths = vec!["src/".into()];
    s.timeout_seconds = 60;
    let mut auto = step("1.2", &["1.1"]);
    auto.step_type = "automation".into();
    auto.command = "make fmt".into();
    let mut state = started(vec![phase(1, vec![s, auto])]);
    let d = dispatch_of(&state, "1.1");
    assert_eq!(
        (d.agent_name.as_str(), d.agent_model.as_str(), d.step_type.as_str()),
        ("architect", "opus", "developing")
    );
    assert_eq!(d.expected_outcome, "a schema");
    assert_eq!(d.allowed_paths, vec!["docs/"]);
    assert_eq!(d.blocked_paths, vec!["src/"]);
    assert_eq!(d.timeout_seconds, 60);
    assert_eq!(d.command, "");
    assert!(d.delegation_prompt.contains("## Task\ndo 1.1"), "{}", d.delegation_prompt);
    assert!(d.delegation_prompt.contains("Build the thing"));
    ok(&mut state, &record("1.1", RecordStatus::Complete));
    let d = dispatch_of(&state, "1.2");
    assert_eq!(d.command, "make fmt");
    assert_eq!(d.step_type, "automation");
    assert!(
        d.delegation_prompt.contains("## Previous steps\n- 1.1 (dev, complete): did 1.1"),
        "{}",
        d.delegation_prompt
    );
}

#[test]
fn a_retried_step_is_offered_with_the_next_attempt_number() {
    let mut state = started(vec![phase(1, vec![step("1.1", &[])])]);
    ok(&mut state, &dispatched("1.1"));
    ok(&mut state, &failed_record("1.1", "boom"));
    assert_eq!(state.status, ExecutionStatus::Failed);
    ok(&mut state, &ev(EventKind::StepRetried { step_id: "1.1".into() }));
    let d = dispatch_of(&state, "1.1");
    assert_eq!(d.attempt, 2);
    assert!(d.message.contains("(attempt 2)"), "{}", d.message);
    ok(&mut state, &dispatched("1.1"));
    assert_eq!(state.result("1.1").unwrap().attempt, 2);
}

#[test]
fn a_record_for_a_ready_step_never_marked_dispatched_counts_as_dispatched() {
    let mut state = started(vec![phase(1, vec![step("1.1", &[]), step("1.2", &["1.1"])])]);
    ok(&mut state, &record("1.1", RecordStatus::Complete));
    let r = state.result("1.1").unwrap();
    assert_eq!((r.status, r.attempt), (StepStatus::Complete, 1));
    assert_eq!(r.dispatched_at, T0);
    assert_eq!(dispatch_ids(&state), vec!["1.2"]);
}

// ---------------------------------------------------------------------------------------------
// WAIT and FAILED (step failures)
// ---------------------------------------------------------------------------------------------

#[test]
fn a_failed_step_with_siblings_in_flight_waits_then_fails() {
    let mut state = started(vec![phase(1, vec![step("1.1", &[]), step("1.2", &[]), step("1.3", &[])])]);
    ok(&mut state, &dispatched("1.1"));
    ok(&mut state, &dispatched("1.2"));
    ok(&mut state, &failed_record("1.1", "compile error"));
    assert_eq!(state.status, ExecutionStatus::Running);
    assert!(next_actions(&state).is_empty(), "1.3 must not start after a failure");
    let Action::Wait { message } = next_action(&state) else { panic!("{:?}", next_action(&state)) };
    assert!(message.contains("1.1 failed") && message.contains("1.2"), "{message}");
    ok(&mut state, &record("1.2", RecordStatus::Complete));
    assert_eq!(state.status, ExecutionStatus::Failed);
    assert_eq!(failed_summary(&state), "step 1.1 failed: compile error");
    assert!(!state.completed_at.is_empty());
}

#[test]
fn waiting_for_in_flight_steps_names_them() {
    let mut state = started(vec![phase(1, vec![step("1.1", &[]), step("1.2", &["1.1"])])]);
    ok(&mut state, &dispatched("1.1"));
    let Action::Wait { message } = next_action(&state) else { panic!() };
    assert_eq!(message, "Waiting for in-flight steps: 1.1.");
}

// ---------------------------------------------------------------------------------------------
// GATE
// ---------------------------------------------------------------------------------------------

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
/// ("auto-approved"); it is skipped with the reason `no command`. Any other type too.
#[test]
fn a_gate_with_no_command_is_skipped_for_every_type() {
    for gate_type in ["test", "build", "lint", "spec", "review", "ci"] {
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

// ---------------------------------------------------------------------------------------------
// APPROVAL
// ---------------------------------------------------------------------------------------------

fn approval_phase(steps: Vec<PlanStep>) -> PlanPhase {
    let mut p = phase(1, steps);
    p.approval_required = true;
    p
}

fn awaiting_approval() -> ExecutionState {
    let mut first = step("1.1", &[]);
    first.agent_name = "architect".into();
    let mut state = started(vec![approval_phase(vec![first, step("1.2", &[])]), phase(2, vec![step("2.1", &[])])]);
    for id in ["1.1", "1.2"] {
        ok(&mut state, &record(id, RecordStatus::Complete));
    }
    state
}

#[test]
fn approve_continues_to_the_next_phase() {
    let mut state = awaiting_approval();
    assert_eq!(state.status, ExecutionStatus::ApprovalPending);
    assert!(next_actions(&state).is_empty());
    let a = approval_action_of(&state);
    assert_eq!(a.phase_id, 1);
    assert!(!a.preflight);
    assert_eq!(a.approval_options, vec!["approve", "reject", "approve-with-feedback"]);
    assert!(a.approval_context.contains("### Step 1.1 (dev, complete)\ndid 1.1"), "{}", a.approval_context);
    let pending = state.pending_approval_request.clone().unwrap();
    assert_eq!((pending.phase_id, pending.preflight), (1, false));
    ok(&mut state, &approval(1, ApprovalDecision::Approve, ""));
    assert_eq!(state.pending_approval_request, None);
    assert_eq!((state.status, state.current_phase), (ExecutionStatus::Running, 1));
}

#[test]
fn knowledge_gaps_and_deviations_are_kept_and_gaps_reach_the_next_approval() {
    let mut p = approval_phase(vec![step("1.1", &[]), step("1.2", &[])]);
    p.approval_description = "Check the schema".into();
    let mut state = started(vec![p, phase(2, vec![step("2.1", &[])])]);
    let mut e = record("1.1", RecordStatus::Complete);
    if let EventKind::StepRecorded { outcome, .. } = &mut e.kind {
        *outcome = "Done.\nKNOWLEDGE_GAP: which database?\n## Deviations\nUsed SQLite.".into();
    }
    ok(&mut state, &e);
    ok(&mut state, &record("1.2", RecordStatus::Complete));
    let r = state.result("1.1").unwrap();
    assert_eq!(r.knowledge_gaps, ["which database?"]);
    assert_eq!(r.deviations, ["Used SQLite."]);
    let a = approval_action_of(&state);
    assert!(
        a.approval_context
            .starts_with("Check the schema\n\n## Knowledge gaps the agents reported\n\n- 1.1 (dev): which database?"),
        "{}",
        a.approval_context
    );
    // Survives a replay: it is derived from the journal.
    let json = serde_json::to_string(&state).unwrap();
    let back: ExecutionState = serde_json::from_str(&json).unwrap();
    assert_eq!(back.result("1.1").unwrap().deviations, ["Used SQLite."]);
}

#[test]
fn scope_expansions_become_phases_appended_when_their_phase_ends_at_most_three() {
    let mut state = started(vec![phase(1, vec![step("1.1", &[]), step("1.2", &[])]), phase(2, vec![step("2.1", &[])])]);
    let mut e = record("1.1", RecordStatus::Complete);
    if let EventKind::StepRecorded { outcome, .. } = &mut e.kind {
        *outcome = "Done.\nSCOPE_EXPANSION: migrate the old table\nSCOPE_EXPANSION: document the API".into();
    }
    ok(&mut state, &e);
    assert_eq!(state.plan.phases.len(), 2, "nothing is appended before the phase ends");
    let mut e = record("1.2", RecordStatus::Complete);
    if let EventKind::StepRecorded { outcome, .. } = &mut e.kind {
        *outcome =
            "SCOPE_EXPANSION: Migrate the old table\nSCOPE_EXPANSION: add metrics\nSCOPE_EXPANSION: and a fourth"
                .into();
    }
    ok(&mut state, &e);
    let names: Vec<(i64, String)> = phase_names(&state);
    assert_eq!(
        names,
        vec![
            (1, "P1".into()),
            (2, "P2".into()),
            (3, "Scope expansion".into()),
            (4, "Scope expansion".into()),
            (5, "Scope expansion".into())
        ]
    );
    assert_eq!(state.current_phase, 1, "phase 2 runs next; the expansions after it");
    let step = &state.plan.phases[2].steps[0];
    assert_eq!(step.step_id, "3.1");
    assert_eq!(step.task_description, "Scope expansion reported by step 1.1: migrate the old table");
    let triggers: Vec<&str> = state.amendments.iter().map(|a| a.trigger.as_str()).collect();
    assert_eq!(triggers, ["scope_expansion"; 3]);
    assert!(state.plan.phases[2].approval_required, "a human reviews work an agent added");
    assert_eq!(
        state.amendments[2].description, "Scope expansion from step 1.2: add metrics",
        "the repeat is one phase"
    );
    assert_eq!(
        state.result("1.2").unwrap().scope_expansions,
        ["Migrate the old table", "add metrics", "and a fourth"],
        "kept on the result"
    );
}

#[test]
fn approval_description_is_the_context_when_set() {
    let mut p = approval_phase(vec![step("1.1", &[])]);
    p.approval_description = "Check the schema".into();
    let mut state = started(vec![p]);
    ok(&mut state, &record("1.1", RecordStatus::Complete));
    assert_eq!(approval_action_of(&state).approval_context, "Check the schema");
}

#[test]
fn reject_fails_the_execution_naming_the_phase() {
    let mut state = awaiting_approval();
    ok(&mut state, &approval(1, ApprovalDecision::Reject, "wrong design").by("alice"));
    assert_eq!(state.status, ExecutionStatus::Failed);
    assert_eq!(state.pending_approval_request, None);
    assert_eq!(failed_summary(&state), "phase 1 was rejected by alice: wrong design; amend the plan to continue");
}

#[test]
fn approve_with_feedback_inserts_a_remediation_phase_for_the_first_agent() {
    let mut state = awaiting_approval();
    ok(&mut state, &approval(1, ApprovalDecision::ApproveWithFeedback, "add docs"));
    assert_eq!(phase_names(&state), vec![(1, "P1".to_string()), (2, "Remediation".to_string()), (3, "P2".to_string())]);
    assert_eq!(state.plan.phases[2].steps[0].step_id, "3.1", "the old phase 2 was renumbered");
    assert_eq!(state.current_phase, 1);
    let d = dispatch_of(&state, "2.1");
    assert_eq!(d.agent_name, "architect");
    assert!(d.delegation_prompt.contains("Address feedback from phase 1 review: add docs"), "{}", d.delegation_prompt);
    let a = state.amendments.last().unwrap();
    assert_eq!(
        (a.trigger.as_str(), a.phases_added.clone(), a.steps_added.clone()),
        ("approval_feedback", vec![2], vec!["2.1".to_string()])
    );
    assert_eq!(a.feedback, "add docs");
}

#[test]
fn preflight_approval_only_for_high_and_critical_plans() {
    for (risk, preflight) in [("LOW", false), ("MEDIUM", false), ("HIGH", true), ("CRITICAL", true), ("high", true)] {
        let mut plan = plan_of(vec![phase(1, vec![step("1.1", &[])])]);
        plan.risk_level = risk.into();
        let state = start(plan, T0).unwrap();
        if preflight {
            assert_eq!(state.status, ExecutionStatus::ApprovalPending, "{risk}");
            let a = approval_action_of(&state);
            assert!(a.preflight, "{risk}");
            assert_eq!(a.phase_id, 1);
            assert!(
                a.approval_context.starts_with(&format!("Pre-flight approval: this plan is {risk} risk.")),
                "{}",
                a.approval_context
            );
            assert!(next_actions(&state).is_empty());
        } else {
            assert_eq!(state.status, ExecutionStatus::Running, "{risk}");
            assert_eq!(dispatch_ids(&state), vec!["1.1"]);
        }
    }
}

#[test]
fn preflight_approval_is_separate_from_the_phase_approval() {
    // Phase 1 has no approval of its own: the pre-flight one is asked first, and only it.
    let mut plan = plan_of(vec![phase(1, vec![step("1.1", &[])]), {
        let mut p = phase(2, vec![step("2.1", &[])]);
        p.approval_required = true;
        p
    }]);
    plan.risk_level = "HIGH".into();
    let mut state = start(plan, T0).unwrap();
    assert!(approval_action_of(&state).preflight);
    ok(&mut state, &approval(1, ApprovalDecision::Approve, ""));
    assert!(state.approval_results[0].preflight);
    assert_eq!(dispatch_ids(&state), vec!["1.1"]);
    ok(&mut state, &record("1.1", RecordStatus::Complete));
    assert_eq!(dispatch_ids(&state), vec!["2.1"], "phase 1 asks nothing more");
    ok(&mut state, &record("2.1", RecordStatus::Complete));
    assert_eq!(state.status, ExecutionStatus::ApprovalPending, "phase 2's own approval is asked");
    assert!(!approval_action_of(&state).preflight);
}

/// Issue 14.1 (seed-spec §2.1 step 2): a HIGH plan whose first phase already requires an
/// approval gets no generated pre-flight approval besides it.
#[test]
fn a_high_risk_plan_whose_first_phase_requires_approval_gets_no_second_preflight_approval() {
    for risk in ["HIGH", "CRITICAL"] {
        let mut plan = plan_of(vec![approval_phase(vec![step("1.1", &[])]), phase(2, vec![step("2.1", &[])])]);
        plan.risk_level = risk.into();
        let mut state = start(plan, T0).unwrap();
        assert_eq!(state.status, ExecutionStatus::Running, "{risk}: no pre-flight approval at start");
        assert_eq!(dispatch_ids(&state), vec!["1.1"]);
        ok(&mut state, &record("1.1", RecordStatus::Complete));
        assert_eq!(state.status, ExecutionStatus::ApprovalPending, "{risk}: phase 1's own approval");
        ok(&mut state, &approval(1, ApprovalDecision::Approve, ""));
        assert_eq!(dispatch_ids(&state), vec!["2.1"]);
        assert_eq!(state.approval_results.len(), 1, "{risk}: one approval in all");
    }
}

#[test]
fn preflight_feedback_joins_the_shared_context_and_reject_fails() {
    let mut plan = plan_of(vec![phase(1, vec![step("1.1", &[])])]);
    plan.risk_level = "CRITICAL".into();
    let mut state = start(plan.clone(), T0).unwrap();
    ok(&mut state, &approval(1, ApprovalDecision::ApproveWithFeedback, "be careful"));
    assert_eq!(state.plan.phases.len(), 1, "no Remediation phase for a pre-flight approval");
    assert!(dispatch_of(&state, "1.1")
        .delegation_prompt
        .contains("Reviewer feedback (pre-flight approval): be careful"));

    let mut state = start(plan, T0).unwrap();
    ok(&mut state, &approval(1, ApprovalDecision::Reject, ""));
    assert_eq!(state.status, ExecutionStatus::Failed);
    assert!(failed_summary(&state).starts_with("phase 1 was rejected"));
}

#[test]
fn phase_end_order_is_approval_then_feedback_then_gate() {
    let mut p = approval_phase(vec![step("1.1", &[])]);
    p.feedback_questions = vec![question("q1", &["a", "b"])];
    p.gate = Some(gate("true"));
    let mut state = started(vec![p, phase(2, vec![step("2.1", &[])])]);
    ok(&mut state, &record("1.1", RecordStatus::Complete));
    assert_eq!(action_type(&state), ActionType::Approval);
    ok(&mut state, &approval(1, ApprovalDecision::Approve, ""));
    assert_eq!(action_type(&state), ActionType::Feedback);
    ok(&mut state, &answer(1, "q1", 0));
    assert_eq!(action_type(&state), ActionType::Gate);
    ok(&mut state, &gate_result(1, true, ""));
    assert_eq!(dispatch_ids(&state), vec!["2.1"], "the feedback phase goes first");
    assert_eq!(state.plan.phases[1].name, "Feedback-Dispatch (q1)");
}

// ---------------------------------------------------------------------------------------------
// FEEDBACK
// ---------------------------------------------------------------------------------------------

fn awaiting_feedback() -> ExecutionState {
    let mut q1 = question("q1", &["Strict", "Permissive"]);
    q1.option_agents = vec!["python-dev".into(), String::new()];
    q1.option_prompts = vec!["Apply strict validation for {task}".into()];
    let mut p = phase(1, vec![step("1.1", &[])]);
    p.feedback_questions = vec![q1, question("q2", &["x", "y", "z"])];
    let mut state = started(vec![p, phase(2, vec![step("2.1", &[])])]);
    ok(&mut state, &record("1.1", RecordStatus::Complete));
    state
}

#[test]
fn feedback_answers_insert_feedback_dispatch_phases() {
    let mut state = awaiting_feedback();
    assert_eq!(state.status, ExecutionStatus::FeedbackPending);
    assert!(next_actions(&state).is_empty());
    let Action::Feedback(f) = next_action(&state) else { panic!() };
    assert_eq!(f.feedback_questions.iter().map(|q| q.question_id.as_str()).collect::<Vec<_>>(), vec!["q1", "q2"]);

    ok(&mut state, &answer(1, "q1", 0));
    assert_eq!(state.status, ExecutionStatus::FeedbackPending, "q2 is still open");
    let Action::Feedback(f) = next_action(&state) else { panic!() };
    assert_eq!(f.feedback_questions.iter().map(|q| q.question_id.as_str()).collect::<Vec<_>>(), vec!["q2"]);
    ok(&mut state, &answer(1, "q2", 2));
    assert_eq!(
        phase_names(&state),
        vec![
            (1, "P1".to_string()),
            (2, "Feedback-Dispatch (q1)".to_string()),
            (3, "Feedback-Dispatch (q2)".to_string()),
            (4, "P2".to_string())
        ]
    );
    let s = &state.plan.phases[1].steps[0];
    assert_eq!((s.step_id.as_str(), s.agent_name.as_str()), ("2.1", "python-dev"));
    assert_eq!(s.task_description, "Apply strict validation for Build the thing");
    let s = &state.plan.phases[2].steps[0];
    assert_eq!((s.agent_name.as_str(), s.task_description.as_str()), ("backend-engineer", "z"));
    assert_eq!(state.plan.phases[3].steps[0].step_id, "4.1");
    let ids: Vec<&str> = state.feedback_results.iter().map(|f| f.dispatched_step_id.as_str()).collect();
    assert_eq!(ids, vec!["2.1", "3.1"]);
    assert_eq!(state.feedback_results[1].chosen_option, "z");
    assert_eq!(dispatch_ids(&state), vec!["2.1"]);
}

#[test]
fn feedback_option_without_agent_or_prompt_uses_defaults_and_substitutes_task() {
    let mut state = awaiting_feedback();
    ok(&mut state, &answer(1, "q1", 1));
    let s = &state.plan.phases[1].steps[0];
    assert_eq!((s.agent_name.as_str(), s.task_description.as_str()), ("backend-engineer", "Permissive"));
}

#[test]
fn bad_feedback_answers_are_errors() {
    let mut state = awaiting_feedback();
    assert_eq!(
        refused(&mut state, &answer(1, "q1", 2)),
        EngineError::OptionOutOfRange { question_id: "q1".into(), index: 2, count: 2 }
    );
    assert_eq!(
        refused(&mut state, &answer(1, "nope", 0)),
        EngineError::UnknownQuestion { phase_id: 1, question_id: "nope".into() }
    );
    assert_eq!(refused(&mut state, &answer(7, "q1", 0)), EngineError::UnknownPhase { phase_id: 7 });
    ok(&mut state, &answer(1, "q1", 0));
    assert_eq!(
        refused(&mut state, &answer(1, "q1", 1)),
        EngineError::QuestionAnswered { phase_id: 1, question_id: "q1".into() }
    );
}

// ---------------------------------------------------------------------------------------------
// INTERACT
// ---------------------------------------------------------------------------------------------

fn interactive_state(max_turns: Option<u32>) -> ExecutionState {
    let mut s = step("1.1", &[]);
    s.interactive = true;
    s.max_turns_field = max_turns;
    started(vec![phase(1, vec![s]), phase(2, vec![step("2.1", &[])])])
}

#[test]
fn interactive_step_takes_turns_until_interact_complete() {
    let mut state = interactive_state(None);
    let d = dispatch_of(&state, "1.1");
    assert!(d.interactive);
    assert_eq!(d.interact_max_turns, Some(10));
    ok(&mut state, &dispatched("1.1"));
    ok(&mut state, &interacting("1.1", "Which database?"));
    assert_eq!(state.step_status("1.1"), StepStatus::Interacting);
    assert!(next_actions(&state).is_empty());
    let Action::Interact(i) = next_action(&state) else { panic!("{:?}", next_action(&state)) };
    assert_eq!(
        (i.interact_step_id.as_str(), i.interact_prompt.as_str(), i.interact_turn, i.interact_max_turns),
        ("1.1", "Which database?", 1, 10)
    );

    ok(&mut state, &ev(EventKind::InteractInput { step_id: "1.1".into(), input: "Postgres".into() }));
    assert_eq!(state.step_status("1.1"), StepStatus::InteractDispatched);
    let d = dispatch_of(&state, "1.1");
    assert_eq!(d.attempt, 2);
    assert!(d.delegation_prompt.contains("## Human reply\nPostgres"), "{}", d.delegation_prompt);
    assert!(d.delegation_prompt.contains("Which database?"));
    ok(&mut state, &dispatched("1.1"));
    ok(&mut state, &interacting("1.1", "Done, using Postgres.\nINTERACT_COMPLETE"));
    let r = state.result("1.1").unwrap();
    assert_eq!((r.status, r.outcome.as_str()), (StepStatus::Complete, "Done, using Postgres."));
    assert_eq!(state.counters.steps_done, 1);
    assert_eq!(dispatch_ids(&state), vec!["2.1"]);
}

#[test]
fn interact_completed_ends_the_conversation() {
    let mut state = interactive_state(None);
    ok(&mut state, &interacting("1.1", "Here is a draft."));
    ok(&mut state, &ev(EventKind::InteractCompleted { step_id: "1.1".into() }));
    let r = state.result("1.1").unwrap();
    assert_eq!((r.status, r.outcome.as_str()), (StepStatus::Complete, "Here is a draft."));
    assert_eq!(state.current_phase, 1);
}

#[test]
/// Issue 14.2 (seed-spec §2.4, §2.5): the whole history, agent and human turns together,
/// counts against 2 × max_turns; with max_turns 2 the step auto-completes at the agent turn
/// that makes the history 4 or more (the third agent turn), not at the second.
fn max_turns_auto_completes_an_interactive_step() {
    let mut state = interactive_state(Some(2));
    let input = |text: &str| ev(EventKind::InteractInput { step_id: "1.1".into(), input: text.into() });
    ok(&mut state, &interacting("1.1", "turn one"));
    ok(&mut state, &input("go on"));
    ok(&mut state, &interacting("1.1", "turn two"));
    assert_eq!(state.result("1.1").unwrap().status, StepStatus::Interacting, "history 3 < 4: it goes on");
    ok(&mut state, &input("and more"));
    ok(&mut state, &interacting("1.1", "turn three"));
    let r = state.result("1.1").unwrap();
    assert_eq!(r.status, StepStatus::Complete);
    assert!(r.outcome.ends_with("[Auto-completed: max_turns reached]"), "{}", r.outcome);
    assert_eq!(r.interaction_history.len(), 5);
}

#[test]
fn interact_waits_behind_dispatchable_siblings() {
    let mut s = step("1.1", &[]);
    s.interactive = true;
    let mut state = started(vec![phase(1, vec![s, step("1.2", &["1.1"]), step("1.3", &[])])]);
    ok(&mut state, &interacting("1.1", "question"));
    assert_eq!(dispatch_ids(&state), vec!["1.3"]);
    ok(&mut state, &dispatched("1.3"));
    assert_eq!(action_type(&state), ActionType::Interact);
}

#[test]
fn only_interactive_steps_can_be_recorded_interacting() {
    let mut state = started(vec![phase(1, vec![step("1.1", &[])])]);
    let err = refused(&mut state, &interacting("1.1", "hi"));
    assert!(matches!(err, EngineError::StepState { .. }), "{err:?}");
}

// ---------------------------------------------------------------------------------------------
// COMPLETE, CHECKPOINT, cancel, start
// ---------------------------------------------------------------------------------------------

#[test]
fn complete_needs_the_completed_event_and_is_final() {
    let mut state = started(vec![phase(1, vec![step("1.1", &[])]), phase(2, vec![step("2.1", &[])])]);
    assert_eq!(
        refused(&mut state, &ev(EventKind::Completed)),
        EngineError::NotFinished { phase_id: 1, name: "P1".into() }
    );
    ok(&mut state, &record("1.1", RecordStatus::Complete));
    ok(&mut state, &record("2.1", RecordStatus::Complete));
    let Action::Complete { message, summary } = next_action(&state) else { panic!() };
    assert!(message.contains("record `complete`"), "{message}");
    assert_eq!(summary, "t-1: 2/2 steps done, 0 gate runs, $0.02 spent.");
    assert_eq!(state.status, ExecutionStatus::Running);
    assert!(next_actions(&state).is_empty());
    ok(&mut state, &ev(EventKind::Completed));
    assert_eq!(state.status, ExecutionStatus::Complete);
    assert_eq!(state.completed_at, T0);
    assert!(matches!(next_action(&state), Action::Complete { .. }));
    assert_eq!(
        refused(&mut state, &ev(EventKind::Cancelled { reason: String::new() })),
        EngineError::Final { status: ExecutionStatus::Complete }
    );
}

#[test]
fn a_checkpoint_is_due_after_three_phase_advances() {
    let phases = (1..=5).map(|i| phase(i, vec![step(&format!("{i}.1"), &[])])).collect();
    let mut state = started(phases);
    for i in 1..=3 {
        assert_eq!(action_type(&state), ActionType::Dispatch, "phase {i}");
        ok(&mut state, &record(&format!("{i}.1"), RecordStatus::Complete));
    }
    assert!(state.checkpoint.due);
    assert!(next_actions(&state).is_empty());
    let Action::Checkpoint(c) = next_action(&state) else { panic!("{:?}", next_action(&state)) };
    assert_eq!(c.phase_id, 4);
    assert_eq!(c.reason, "3 phases since the last checkpoint");
    assert!(c.handoff.contains("Goal: Build the thing"), "{}", c.handoff);
    assert!(c.handoff.contains("- 3.1 (dev): did 3.1"), "{}", c.handoff);
    assert!(c.handoff.contains("baton execute resume --task-id t-1"), "{}", c.handoff);
    for early in [dispatched("4.1"), record("4.1", RecordStatus::Complete)] {
        let err = refused(&mut state, &early);
        assert!(err.to_string().contains("a checkpoint is due"), "{err}");
    }
    ok(&mut state, &ev(EventKind::CheckpointAcknowledged));
    assert!(!state.checkpoint.due);
    assert_eq!(state.checkpoint.count, 1);
    assert_eq!(dispatch_ids(&state), vec!["4.1"]);
    assert!(matches!(
        refused(&mut state, &ev(EventKind::CheckpointAcknowledged).with_key("ack-2")),
        EngineError::WrongStatus { .. }
    ));
}

#[test]
fn a_checkpoint_is_due_after_many_tokens() {
    let mut state = started(vec![phase(1, vec![step("1.1", &[])]), phase(2, vec![step("2.1", &[])])]);
    let mut e = record("1.1", RecordStatus::Complete);
    if let EventKind::StepRecorded { tokens, .. } = &mut e.kind {
        *tokens = CHECKPOINT_TOKEN_THRESHOLD;
    }
    ok(&mut state, &e);
    assert!(state.checkpoint.due);
    assert_eq!(action_type(&state), ActionType::Checkpoint);
}

#[test]
fn cancel_is_final_and_every_later_event_is_refused() {
    for setup in 0..4 {
        let mut state = awaiting_approval();
        match setup {
            0 => {}
            1 => ok(&mut state, &approval(1, ApprovalDecision::Reject, "")),
            2 => ok(&mut state, &approval(1, ApprovalDecision::Approve, "")),
            _ => {
                ok(&mut state, &approval(1, ApprovalDecision::Approve, ""));
                ok(&mut state, &dispatched("2.1"));
            }
        }
        ok(&mut state, &ev(EventKind::Cancelled { reason: "no longer needed".into() }).by("bob"));
        assert_eq!(state.status, ExecutionStatus::Cancelled);
        assert_eq!(state.pending_approval_request, None);
        assert!(next_actions(&state).is_empty());
        let Action::Failed { message, summary } = next_action(&state) else { panic!() };
        assert!(message.contains("cancelled"), "{message}");
        assert_eq!(summary, "cancelled by bob: no longer needed");
        let later = [
            record("2.1", RecordStatus::Complete),
            ev(EventKind::StepDispatched { step_id: "2.1".into(), agent_name: "other".into() }),
            approval(1, ApprovalDecision::Approve, "x"),
            gate_result(1, true, ""),
            ev(EventKind::StepRetried { step_id: "2.1".into() }),
            ev(EventKind::StepSkipped { step_id: "2.1".into(), reason: String::new() }),
            ev(EventKind::GateRetried { phase_id: 1 }),
            ev(EventKind::Completed),
            ev(EventKind::Cancelled { reason: "again".into() }),
            ev(EventKind::Amended {
                description: "more".into(),
                trigger: "manual".into(),
                phases: vec![phase(0, vec![step("", &[])])],
                after_phase: None,
                steps: vec![],
            }),
        ];
        for e in &later {
            assert_eq!(refused(&mut state, e), EngineError::Final { status: ExecutionStatus::Cancelled }, "{e:?}");
        }
    }
}

#[test]
fn invalid_plans_are_refused_with_every_problem() {
    let mut nameless = step("1.2", &["9.9"]);
    nameless.agent_name = String::new();
    let err = start(plan_of(vec![phase(1, vec![step("1.1", &["1.2"]), nameless]), phase(1, vec![])]), T0).unwrap_err();
    let EngineError::InvalidPlan(problems) = &err else { panic!("{err:?}") };
    let text: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
    assert_eq!(text.len(), 4, "{text:?}");
    for want in ["comes later in the plan", "agent_name is empty", "unknown step 9.9", "duplicate phase_id 1"] {
        assert!(text.iter().any(|t| t.contains(want)), "{want} missing from {text:?}");
    }
    for t in &text {
        assert!(err.to_string().contains(t.as_str()));
    }
    assert!(matches!(start(plan_of(vec![]), T0), Err(EngineError::InvalidPlan(_))));
}

#[test]
fn skip_counts_as_done_and_unblocks_dependants() {
    let mut state = started(vec![phase(1, vec![step("1.1", &[]), step("1.2", &["1.1"])])]);
    ok(&mut state, &ev(EventKind::StepSkipped { step_id: "1.1".into(), reason: "not needed".into() }));
    assert_eq!(state.result("1.1").unwrap().outcome, "skipped: not needed");
    assert_eq!(state.counters.steps_done, 1);
    assert_eq!(dispatch_ids(&state), vec!["1.2"]);
}

#[test]
fn amendments_insert_after_the_current_phase_and_append_steps() {
    let mut state = started(vec![phase(1, vec![step("1.1", &[])]), phase(2, vec![step("2.1", &["1.1"])])]);
    ok(&mut state, &dispatched("1.1"));
    let added = step("", &["1.1"]);
    ok(
        &mut state,
        &ev(EventKind::Amended {
            description: "add docs".into(),
            trigger: "manual".into(),
            phases: vec![PlanPhase { name: "Docs".into(), ..phase(0, vec![added]) }],
            after_phase: None,
            steps: vec![crate::model::event::AddedStep { phase_id: 1, step: step("1.9", &[]) }],
        }),
    );
    assert_eq!(phase_names(&state), vec![(1, "P1".into()), (2, "Docs".into()), (3, "P2".into())]);
    assert_eq!(state.plan.phases[0].steps.iter().map(|s| s.step_id.as_str()).collect::<Vec<_>>(), vec!["1.1", "1.9"]);
    assert_eq!(state.plan.phases[1].steps[0].step_id, "2.1");
    assert_eq!(state.plan.phases[2].steps[0].step_id, "3.1");
    assert_eq!(state.plan.phases[2].steps[0].depends_on, vec!["1.1"]);
    let a = &state.amendments[0];
    assert_eq!((a.amendment_id.as_str(), a.phases_added.clone()), ("amend-1", vec![2]));
    assert_eq!(a.steps_added, vec!["1.9", "2.1"]);
    assert_eq!(dispatch_ids(&state), vec!["1.9"]);
    assert!(validate(&state.plan).is_ok());
}

#[test]
fn amendments_insert_before_the_current_phase_only_while_no_work_started_there() {
    let mut state = started(vec![phase(1, vec![step("1.1", &[])]), phase(2, vec![step("2.1", &["1.1"])])]);
    ok(&mut state, &record("1.1", RecordStatus::Complete));
    let amend = |after| {
        ev(EventKind::Amended {
            description: "x".into(),
            trigger: "manual".into(),
            phases: vec![phase(0, vec![step("", &[])])],
            after_phase: Some(after),
            steps: vec![],
        })
    };
    assert_eq!(refused(&mut state, &amend(9)), EngineError::UnknownPhase { phase_id: 9 });
    // Issue 14.3: phase 2 is current but untouched: the new phase goes before it and becomes
    // current; 2.1 becomes 3.1 and keeps its dependency on 1.1.
    let mut untouched = state.clone();
    ok(&mut untouched, &amend(1));
    assert_eq!(untouched.plan.phases.len(), 3);
    assert_eq!(untouched.current().unwrap().phase_id, 2, "the inserted phase is current");
    assert_eq!(untouched.plan.phases[2].steps[0].step_id, "3.1");
    assert_eq!(untouched.plan.phases[2].steps[0].depends_on, vec!["1.1".to_string()]);
    assert_eq!(dispatch_ids(&untouched), vec!["2.1"], "the new phase's step is dispatched first");
    // Once 2.1 was dispatched, work started there: refused, naming the step.
    ok(&mut state, &dispatched("2.1"));
    match refused(&mut state, &amend(1)) {
        EngineError::InvalidAmendment(m) => assert!(m.contains("step 2.1 was dispatched"), "{m}"),
        other => panic!("{other:?}"),
    }
    ok(&mut state, &amend(2));
    assert_eq!(state.plan.phases[2].phase_id, 3);
}

#[test]
fn a_failed_execution_is_reopened_by_an_amendment() {
    let mut state = awaiting_approval();
    ok(&mut state, &approval(1, ApprovalDecision::Reject, "no"));
    assert_eq!(state.status, ExecutionStatus::Failed);
    ok(
        &mut state,
        &ev(EventKind::Amended {
            description: "fix".into(),
            trigger: "manual".into(),
            phases: vec![phase(0, vec![step("", &[])])],
            after_phase: None,
            steps: vec![],
        }),
    );
    assert_eq!(state.status, ExecutionStatus::ApprovalPending, "phase 1 still needs its approval");
    assert_eq!(state.failure, None);
}

/// Issue 14.8's plan shape: one phase of many steps, driven one step at a time, with a failed
/// step retried and one skipped on the way. Settling follows the phase through its kept tally
/// (it used to scan every step after every event, so a replay cost steps × events): the tally
/// stays a true count after every event, the phase fails on the failure and runs again on the
/// retry, and a replay of the journal rebuilds the same state.
#[test]
fn a_one_phase_plan_of_two_thousand_steps_settles_by_its_tally() {
    let n = 2_000;
    let steps: Vec<PlanStep> = (1..=n).map(|i| step(&format!("1.{i}"), &[])).collect();
    let plan = plan_of(vec![phase(1, steps)]);
    let mut state = start(plan.clone(), T0).unwrap();
    let mut journal = Vec::new();
    let mut push = |state: &mut ExecutionState, event: Event| {
        apply(state, &event, T0).unwrap();
        assert!(crate::engine::settle::tally_is_true(state), "tally after {:?}", event.kind);
        journal.push(event);
    };
    for i in 1..=n {
        let id = format!("1.{i}");
        if i == 700 {
            push(&mut state, ev(EventKind::StepSkipped { step_id: id, reason: "not needed".into() }));
            continue;
        }
        match next_action(&state) {
            Action::Dispatch(d) => assert_eq!(d.step_id, id, "the first ready step is offered"),
            other => panic!("step {id}: expected a dispatch, got {other:?}"),
        }
        push(&mut state, dispatched(&id));
        if i == 500 {
            push(&mut state, record(&id, RecordStatus::Failed));
            assert_eq!(state.status, ExecutionStatus::Failed, "a failed step fails the phase");
            push(&mut state, ev(EventKind::StepRetried { step_id: id.clone() }));
            assert_eq!(state.status, ExecutionStatus::Running);
            push(&mut state, dispatched(&id));
        }
        push(&mut state, record(&id, RecordStatus::Complete));
    }
    assert_eq!(state.counters.steps_done, n as u64);
    assert_eq!(next_action(&state).action_type(), ActionType::Complete);
    let rebuilt = replay(plan, T0, journal.iter().map(|e| (e, T0))).unwrap();
    assert_eq!(rebuilt, state);
}
