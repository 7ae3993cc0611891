//! The original system's known engine bugs (seed-spec §5), one test each.

use super::*;

fn amend_phase_after_current(steps: Vec<PlanStep>) -> Event {
    ev(EventKind::Amended {
        description: "insert".into(),
        trigger: "manual".into(),
        phases: vec![PlanPhase { name: "Inserted".into(), ..phase(0, steps) }],
        after_phase: None,
        steps: vec![],
    })
}

// seed-spec §5 #8
#[test]
fn recording_an_unknown_step_errors_and_leaves_the_state_equal() {
    let mut state = started(vec![phase(1, vec![step("1.1", &[])])]);
    ok(&mut state, &dispatched("1.1"));
    let before = state.clone();
    let err = apply(&mut state, &record("9.9", RecordStatus::Complete), T0).unwrap_err();
    assert_eq!(err, EngineError::UnknownStep { step_id: "9.9".into() });
    assert_eq!(state, before);
    assert_eq!(serde_json::to_string(&state).unwrap(), serde_json::to_string(&before).unwrap());
}

// seed-spec §5 #9
#[test]
fn state_rebuilt_from_the_journal_offers_the_same_actions_as_before_the_crash() {
    let plan = plan_of(vec![phase(1, vec![step("1.1", &[]), step("1.2", &[]), step("1.3", &["1.1"])])]);
    let mut state = start(plan.clone(), T0).unwrap();
    let journal = vec![dispatched("1.1"), dispatched("1.2"), record("1.1", RecordStatus::Complete)];
    for e in &journal {
        ok(&mut state, e);
    }
    let rebuilt = replay(plan, T0, journal.iter().map(|e| (e, T0))).unwrap();
    assert_eq!(rebuilt, state);
    assert_eq!(next_actions(&rebuilt), next_actions(&state));
    assert_eq!(dispatch_ids(&rebuilt), vec!["1.3"]);
    assert_eq!(rebuilt.step_status("1.2"), StepStatus::Dispatched, "in-flight work is still tracked after a restart");
}

// seed-spec §5 #9
#[test]
fn a_dispatched_step_whose_attempt_failed_is_offered_again_after_step_retried() {
    let mut state = started(vec![phase(1, vec![step("1.1", &[])])]);
    ok(&mut state, &dispatched("1.1"));
    ok(&mut state, &failed_record("1.1", "agent crashed"));
    assert!(dispatch_ids(&state).is_empty());
    ok(&mut state, &ev(EventKind::StepRetried { step_id: "1.1".into() }));
    assert_eq!(dispatch_ids(&state), vec!["1.1"]);
}

// seed-spec §5 #10
#[test]
fn a_skipped_step_counts_as_done_for_its_dependants() {
    let mut state =
        started(vec![phase(1, vec![step("1.1", &[]), step("1.2", &["1.1"])]), phase(2, vec![step("2.1", &["1.1"])])]);
    ok(&mut state, &dispatched("1.1"));
    ok(&mut state, &failed_record("1.1", "flaky"));
    assert_eq!(state.status, ExecutionStatus::Failed);
    ok(&mut state, &ev(EventKind::StepSkipped { step_id: "1.1".into(), reason: String::new() }));
    assert_eq!(state.status, ExecutionStatus::Running);
    assert_eq!(dispatch_ids(&state), vec!["1.2"]);
    ok(&mut state, &record("1.2", RecordStatus::Complete));
    assert_eq!(dispatch_ids(&state), vec!["2.1"]);
}

// seed-spec §5 #11
#[test]
fn retry_step_on_a_failed_run_reopens_it_and_redispatches() {
    let mut state = started(vec![phase(1, vec![step("1.1", &[]), step("1.2", &["1.1"])])]);
    ok(&mut state, &failed_record("1.1", "boom"));
    assert_eq!(state.status, ExecutionStatus::Failed);
    ok(&mut state, &ev(EventKind::StepRetried { step_id: "1.1".into() }));
    assert_eq!(state.status, ExecutionStatus::Running);
    assert_eq!(state.failure, None);
    assert_eq!(action_type(&state), ActionType::Dispatch);
    assert_eq!(dispatch_ids(&state), vec!["1.1"]);
    ok(&mut state, &record("1.1", RecordStatus::Complete));
    assert_eq!(dispatch_ids(&state), vec!["1.2"]);
}

// seed-spec §5 #12
#[test]
fn inserting_a_phase_keeps_dependencies_pointing_at_renamed_siblings() {
    let mut state = started(vec![
        phase(1, vec![step("1.1", &[])]),
        phase(2, vec![step("2.1", &[]), step("2.2", &["2.1"])]),
        phase(3, vec![step("3.1", &["2.2", "1.1"])]),
    ]);
    ok(&mut state, &amend_phase_after_current(vec![step("", &[])]));
    let ids: Vec<Vec<&str>> =
        state.plan.phases.iter().map(|p| p.steps.iter().map(|s| s.step_id.as_str()).collect()).collect();
    assert_eq!(ids, vec![vec!["1.1"], vec!["2.1"], vec!["3.1", "3.2"], vec!["4.1"]]);
    assert_eq!(state.plan.phases[2].steps[1].depends_on, vec!["3.1"]);
    assert_eq!(state.plan.phases[3].steps[0].depends_on, vec!["3.2", "1.1"]);
    assert_eq!(state.amendments[0].phases_added, vec![2], "real ids, not placeholders");
    assert!(validate(&state.plan).is_ok());
}

// seed-spec §5 #12
#[test]
fn renumbering_remaps_earlier_amendments_to_real_ids() {
    let mut state = started(vec![phase(1, vec![step("1.1", &[])]), phase(2, vec![step("2.1", &[])])]);
    ok(&mut state, &dispatched("1.1"));
    ok(&mut state, &amend_phase_after_current(vec![step("", &[])]));
    assert_eq!(
        (state.amendments[0].phases_added.clone(), state.amendments[0].steps_added.clone()),
        (vec![2], vec!["2.1".to_string()])
    );
    let mut second = phase(0, vec![step("", &["1.1"])]);
    second.name = "Second".into();
    ok(
        &mut state,
        &ev(EventKind::Amended {
            description: "y".into(),
            trigger: "manual".into(),
            phases: vec![second],
            after_phase: None,
            steps: vec![],
        }),
    );
    let names: Vec<&str> = state.plan.phases.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, vec!["P1", "Second", "Inserted", "P2"]);
    assert_eq!(
        (state.amendments[0].phases_added.clone(), state.amendments[0].steps_added.clone()),
        (vec![3], vec!["3.1".to_string()])
    );
    assert_eq!(
        (state.amendments[1].phases_added.clone(), state.amendments[1].steps_added.clone()),
        (vec![2], vec!["2.1".to_string()])
    );
    assert_eq!(state.plan.phases[3].steps[0].step_id, "4.1");
    assert_eq!(state.step_status("1.1"), StepStatus::Dispatched);
}

// seed-spec §5 #13
#[test]
fn feedback_result_names_the_inserted_step_even_after_renumbering() {
    let mut p = phase(1, vec![step("1.1", &[])]);
    p.feedback_questions = vec![question("q1", &["a", "b"]), question("q2", &["c", "d"])];
    let mut state = started(vec![p, phase(2, vec![step("2.1", &[])])]);
    ok(&mut state, &record("1.1", RecordStatus::Complete));
    ok(&mut state, &answer(1, "q1", 1));
    assert_eq!(state.feedback_results[0].dispatched_step_id, "2.1");
    assert_eq!(
        state.plan.find_step("2.1").map(|(pi, _)| state.plan.phases[pi].name.clone()),
        Some("Feedback-Dispatch (q1)".into())
    );
    let mut extra = phase(0, vec![step("", &[])]);
    extra.name = "Extra".into();
    ok(
        &mut state,
        &ev(EventKind::Amended {
            description: "x".into(),
            trigger: "manual".into(),
            phases: vec![extra],
            after_phase: None,
            steps: vec![],
        }),
    );
    assert_eq!(state.feedback_results[0].dispatched_step_id, "3.1");
    assert_eq!(state.plan.phases[2].name, "Feedback-Dispatch (q1)");
    assert_eq!(state.plan.phases[2].steps[0].step_id, "3.1");
}

// seed-spec §5 #15
#[test]
fn a_gate_result_for_another_phase_is_an_error_and_changes_nothing() {
    let mut p1 = phase(1, vec![step("1.1", &[])]);
    p1.gate = Some(gate("true"));
    let mut p2 = phase(2, vec![step("2.1", &[])]);
    p2.gate = Some(gate("true"));
    let mut state = started(vec![p1, p2]);
    ok(&mut state, &record("1.1", RecordStatus::Complete));
    assert_eq!(state.status, ExecutionStatus::GatePending);
    assert_eq!(refused(&mut state, &gate_result(77, true, "")), EngineError::UnknownPhase { phase_id: 77 });
    assert_eq!(
        refused(&mut state, &gate_result(2, true, "")),
        EngineError::NotCurrentPhase { phase_id: 2, current: Some(1) }
    );
    assert_eq!(state.current_phase, 0);
    assert!(state.gate_results.is_empty());
}

// seed-spec §5 #16
#[test]
fn a_one_based_plan_redispatches_its_own_last_step_and_retry_gate_cycles_still_fail() {
    let mut p1 = phase(1, vec![step("1.1", &[]), step("1.2", &[])]);
    p1.gate = Some(gate("pytest"));
    let mut state = started(vec![p1, phase(2, vec![step("2.1", &[]), step("2.2", &[])])]);
    ok(&mut state, &record("1.1", RecordStatus::Complete));
    ok(&mut state, &record("1.2", RecordStatus::Complete));
    ok(&mut state, &gate_result(1, false, "E1"));
    assert_eq!(dispatch_ids(&state), vec!["1.2"], "not 2.2 (phases[phase_id])");
    ok(&mut state, &record("1.2", RecordStatus::Complete));
    ok(&mut state, &gate_result(1, false, "E2"));
    ok(&mut state, &gate_result(1, false, "E3"));
    assert_eq!(state.status, ExecutionStatus::Failed);
    for cycle in 0..3 {
        ok(&mut state, &ev(EventKind::GateRetried { phase_id: 1 }));
        for n in 0..MAX_GATE_FAILURES {
            assert_ne!(state.status, ExecutionStatus::Failed, "cycle {cycle}, failure {n}");
            ok(&mut state, &gate_result(1, false, &format!("cycle {cycle} run {n}")));
        }
        assert_eq!(state.status, ExecutionStatus::Failed, "cycle {cycle}");
    }
}

// seed-spec §5 #19
#[test]
fn cancelled_is_terminal_for_the_resolver() {
    let mut state = started(vec![phase(1, vec![step("1.1", &[]), step("1.2", &[])])]);
    ok(&mut state, &dispatched("1.1"));
    ok(&mut state, &ev(EventKind::Cancelled { reason: String::new() }));
    assert!(next_actions(&state).is_empty());
    assert_eq!(action_type(&state), ActionType::Failed);
    assert_eq!(
        refused(&mut state, &record("1.1", RecordStatus::Complete)),
        EngineError::Final { status: ExecutionStatus::Cancelled }
    );
}

// seed-spec §5 #21
#[test]
fn every_phase_end_goes_through_one_path_even_when_a_gate_passes() {
    let mut p1 = phase(1, vec![step("1.1", &[])]);
    p1.gate = Some(gate("true"));
    p1.approval_required = true;
    let mut p2 = phase(2, vec![step("2.1", &[])]);
    p2.approval_required = true;
    let phases = vec![p1, p2, phase(3, vec![]), phase(4, vec![step("4.1", &[])])];
    let mut state = started(phases);
    ok(&mut state, &record("1.1", RecordStatus::Complete));
    assert_eq!(action_type(&state), ActionType::Approval, "approval comes before the gate");
    assert!(matches!(refused(&mut state, &gate_result(1, true, "")), EngineError::WrongStatus { .. }));
    ok(&mut state, &approval(1, ApprovalDecision::Approve, ""));
    ok(&mut state, &gate_result(1, true, ""));
    assert_eq!(state.current_phase, 1);
    ok(&mut state, &record("2.1", RecordStatus::Complete));
    assert_eq!(action_type(&state), ActionType::Approval, "the gate-less next phase still asks its approval");
    ok(&mut state, &approval(2, ApprovalDecision::Approve, ""));
    assert_eq!(state.current_phase, 3, "the empty phase 3 advanced through the same path");
    assert_eq!(state.checkpoint.phases_since, 3);
    assert!(state.checkpoint.due, "gate-pass and approval advances are counted alike");
}

// seed-spec §5 #22
#[test]
fn the_engine_has_no_time_based_failure() {
    let mut s = step("1.1", &[]);
    s.timeout_seconds = 1;
    let mut state = started(vec![phase(1, vec![s])]);
    ok(&mut state, &dispatched("1.1"));
    let much_later = "2099-01-01T00:00:00+00:00";
    let same = state.clone();
    assert!(matches!(next_action(&state), Action::Wait { .. }), "timeouts are the runtime's job");
    assert_eq!(state, same);
    apply(&mut state, &record("1.1", RecordStatus::Complete), much_later).unwrap();
    assert_eq!(state.result("1.1").unwrap().completed_at, much_later);
    assert_eq!(state.result("1.1").unwrap().status, StepStatus::Complete);
}

// seed-spec §5 #24
#[test]
fn next_actions_is_empty_in_every_status_unless_next_action_dispatches() {
    let mut approval_p = phase(1, vec![step("1.1", &[])]);
    approval_p.approval_required = true;
    let mut feedback_p = phase(1, vec![step("1.1", &[])]);
    feedback_p.feedback_questions = vec![question("q", &["a", "b"])];
    let mut gate_p = phase(1, vec![step("1.1", &[])]);
    gate_p.gate = Some(gate("true"));
    let mut interactive = step("1.1", &[]);
    interactive.interactive = true;

    let mut states: Vec<(&str, ExecutionState)> = Vec::new();
    let fresh = started(vec![phase(1, vec![step("1.1", &[]), step("1.2", &[])])]);
    states.push(("running", fresh.clone()));
    let mut s = fresh.clone();
    ok(&mut s, &dispatched("1.1"));
    ok(&mut s, &dispatched("1.2"));
    states.push(("waiting", s.clone()));
    ok(&mut s, &failed_record("1.1", "x"));
    states.push(("failed step, sibling in flight", s.clone()));
    ok(&mut s, &record("1.2", RecordStatus::Complete));
    states.push(("failed", s.clone()));
    let mut s = started(vec![approval_p]);
    ok(&mut s, &record("1.1", RecordStatus::Complete));
    states.push(("approval_pending", s.clone()));
    let mut s = started(vec![feedback_p]);
    ok(&mut s, &record("1.1", RecordStatus::Complete));
    states.push(("feedback_pending", s.clone()));
    let mut s = started(vec![gate_p]);
    ok(&mut s, &record("1.1", RecordStatus::Complete));
    states.push(("gate_pending", s.clone()));
    ok(&mut s, &gate_result(1, false, ""));
    ok(&mut s, &record("1.1", RecordStatus::Complete));
    ok(&mut s, &gate_result(1, false, ""));
    states.push(("gate_failed", s.clone()));
    let mut s = started(vec![phase(1, vec![interactive])]);
    ok(&mut s, &interacting("1.1", "?"));
    states.push(("interacting", s.clone()));
    let mut s = fresh.clone();
    ok(&mut s, &record("1.1", RecordStatus::Complete));
    ok(&mut s, &record("1.2", RecordStatus::Complete));
    states.push(("all phases done", s.clone()));
    ok(&mut s, &ev(EventKind::Completed));
    states.push(("complete", s.clone()));
    let mut s = fresh.clone();
    ok(&mut s, &ev(EventKind::Cancelled { reason: String::new() }));
    states.push(("cancelled", s));
    let mut s = started((1..=4).map(|i| phase(i, vec![step(&format!("{i}.1"), &[])])).collect());
    for i in 1..=3 {
        ok(&mut s, &record(&format!("{i}.1"), RecordStatus::Complete));
    }
    states.push(("checkpoint due", s));

    let mut seen = std::collections::HashSet::new();
    for (name, state) in &states {
        seen.insert(state.status);
        let first = next_action(state);
        let all = next_actions(state);
        if let Action::Dispatch(_) = first {
            assert!(!all.is_empty(), "{name}");
            assert_eq!(all[0], first, "{name}");
        } else {
            assert!(all.is_empty(), "{name}: {all:?} while next_action is {first:?}");
        }
        assert!(all.iter().all(|a| a.action_type() == ActionType::Dispatch), "{name}");
    }
    assert_eq!(seen.len(), 8, "every status is covered: {seen:?}");
}

// seed-spec §5 #25
#[test]
fn complete_keeps_running_until_the_completed_event_and_completed_errors_before_the_end() {
    let mut state = started(vec![phase(1, vec![step("1.1", &[])])]);
    assert!(matches!(refused(&mut state, &ev(EventKind::Completed)), EngineError::NotFinished { .. }));
    ok(&mut state, &record("1.1", RecordStatus::Complete));
    assert_eq!(action_type(&state), ActionType::Complete);
    assert_eq!(state.status, ExecutionStatus::Running, "a driver that stops here leaves a detectable state");
    assert_eq!(state.completed_at, "");

    let mut failed = started(vec![phase(1, vec![step("1.1", &[])])]);
    ok(&mut failed, &failed_record("1.1", "x"));
    assert!(matches!(refused(&mut failed, &ev(EventKind::Completed)), EngineError::ExecutionFailed { .. }));
    let mut gated = phase(1, vec![step("1.1", &[])]);
    gated.gate = Some(gate("true"));
    let mut pending = started(vec![gated]);
    ok(&mut pending, &record("1.1", RecordStatus::Complete));
    assert_eq!(
        refused(&mut pending, &ev(EventKind::Completed)),
        EngineError::WrongStatus { event: "completed", status: ExecutionStatus::GatePending }
    );
}

// seed-spec §5 #27
#[test]
fn an_amendment_cannot_create_a_step_id_that_renumbering_also_creates() {
    let mut state = started(vec![phase(1, vec![step("1.1", &[])]), phase(2, vec![step("2.1", &[])])]);
    let err = refused(&mut state, &amend_phase_after_current(vec![step("3.1", &[])]));
    assert!(matches!(&err, EngineError::InvalidAmendment(m) if m.contains("3.1")), "{err:?}");
    let err = refused(
        &mut state,
        &ev(EventKind::Amended {
            description: "x".into(),
            trigger: "manual".into(),
            phases: vec![phase(0, vec![step("", &[])])],
            after_phase: None,
            steps: vec![crate::model::event::AddedStep { phase_id: 1, step: step("3.1", &[]) }],
        }),
    );
    assert!(matches!(&err, EngineError::InvalidAmendment(m) if m.contains("3.1")), "{err:?}");
    ok(&mut state, &amend_phase_after_current(vec![step("docs", &[])]));
    assert!(validate(&state.plan).is_ok());
}

// seed-spec §5 #27
#[test]
fn an_amended_phase_that_could_never_finish_is_refused() {
    let mut state = started(vec![phase(1, vec![step("1.1", &[])])]);
    let mut stuck = phase(0, vec![step("", &[])]);
    stuck.name = "Ask".into();
    stuck.feedback_questions = vec![question("q", &[])];
    let err = refused(
        &mut state,
        &ev(EventKind::Amended {
            description: "x".into(),
            trigger: "manual".into(),
            phases: vec![stuck],
            after_phase: None,
            steps: vec![],
        }),
    );
    assert!(matches!(&err, EngineError::InvalidAmendment(m) if m.contains("has no options")), "{err:?}");
}

// seed-spec §5 #9: resume offers again a step that was dispatched when the driver stopped,
// and does not touch completed steps.
#[test]
fn a_requeued_dispatched_step_is_offered_again_and_completed_steps_stay_done() {
    let mut state = started(vec![phase(1, vec![step("1.1", &[]), step("1.2", &[])])]);
    ok(&mut state, &dispatched("1.1"));
    ok(&mut state, &dispatched("1.2"));
    ok(&mut state, &record("1.1", RecordStatus::Complete));
    assert!(dispatch_ids(&state).is_empty());
    let requeue = ev(EventKind::StepRequeued { step_id: "1.2".into() });
    ok(&mut state, &requeue);
    assert_eq!(dispatch_ids(&state), vec!["1.2"]);
    assert_eq!(state.step_status("1.1"), StepStatus::Complete);
    match next_action(&state) {
        Action::Dispatch(d) => assert_eq!(d.attempt, 2, "the lost attempt counts"),
        other => panic!("expected DISPATCH, got {other:?}"),
    }
    let before = state.clone();
    assert!(apply(&mut state, &requeue, T0).unwrap().duplicate, "the same requeue twice has one effect");
    let err = apply(&mut state, &ev(EventKind::StepRequeued { step_id: "1.1".into() }), T0).unwrap_err();
    assert!(matches!(err, EngineError::StepState { .. }), "{err}");
    assert_eq!(state, before);
}

#[test]
fn an_explicit_key_reused_for_a_different_event_is_a_conflict_not_a_silent_duplicate() {
    let mut state = started(vec![phase(1, vec![step("1.1", &[]), step("1.2", &[])])]);
    ok(&mut state, &record("1.1", RecordStatus::Complete).with_key("K1"));
    let err = refused(&mut state, &record("1.2", RecordStatus::Complete).with_key("K1"));
    assert_eq!(err, EngineError::KeyConflict { key: "K1".into() });
    assert_eq!(state.step_status("1.2"), StepStatus::Pending);
    assert!(apply(&mut state, &record("1.1", RecordStatus::Complete).with_key("K1"), T0).unwrap().duplicate);
}

#[test]
fn negative_or_non_finite_costs_and_durations_are_refused() {
    let mut state = started(vec![phase(1, vec![step("1.1", &[])])]);
    for (cost, duration) in [(-5.0, 1.0), (f64::NAN, 1.0), (f64::INFINITY, 1.0), (1e308, 1.0), (0.1, -1.0)] {
        let mut event = record("1.1", RecordStatus::Complete);
        if let EventKind::StepRecorded { cost_usd, duration_seconds, .. } = &mut event.kind {
            *cost_usd = cost;
            *duration_seconds = duration;
        }
        assert!(matches!(refused(&mut state, &event), EngineError::InvalidEvent { .. }), "{cost} {duration}");
    }
}

/// `record --duration 1.7e308` was taken, and a second attempt's summed to infinity, which
/// the state's JSON wrote as `"duration_seconds": null`. A duration is now at most
/// `MAX_STEP_DURATION_SECONDS`, and the refusal shows a huge number in exponent form.
#[test]
fn a_duration_longer_than_the_bound_is_refused_and_the_bound_itself_is_taken() {
    let mut state = started(vec![phase(1, vec![step("1.1", &[])])]);
    let with_duration = |seconds: f64| {
        let mut event = record("1.1", RecordStatus::Complete);
        if let EventKind::StepRecorded { duration_seconds, .. } = &mut event.kind {
            *duration_seconds = seconds;
        }
        event
    };
    for seconds in [1.7e308, 1e300, MAX_STEP_DURATION_SECONDS + 1.0] {
        let err = refused(&mut state, &with_duration(seconds));
        assert!(matches!(err, EngineError::InvalidEvent { .. }), "{seconds}: {err}");
        assert!(err.to_string().len() < 200, "{err}");
    }
    assert!(refused(&mut state, &with_duration(1e300)).to_string().contains("duration_seconds 1e300 is not"));
    ok(&mut state, &with_duration(MAX_STEP_DURATION_SECONDS));
    assert_eq!(state.step_results.get("1.1").map(|r| r.duration_seconds), Some(MAX_STEP_DURATION_SECONDS));
    // The OpenAPI schema of `step_recorded` (model::event) states these bounds as literals.
    assert_eq!(
        (MAX_STEP_DURATION_SECONDS, MAX_STEP_COST_USD, MAX_STEP_TOKENS),
        (31_622_400.0, 1_000_000.0, 1_000_000_000_000)
    );
}

#[test]
fn approve_with_feedback_needs_feedback_text() {
    let mut p = phase(1, vec![step("1.1", &[])]);
    p.approval_required = true;
    let mut state = started(vec![p]);
    ok(&mut state, &record("1.1", RecordStatus::Complete));
    let err = refused(&mut state, &approval(1, ApprovalDecision::ApproveWithFeedback, "  "));
    assert!(matches!(err, EngineError::InvalidEvent { .. }), "{err}");
    ok(&mut state, &approval(1, ApprovalDecision::ApproveWithFeedback, "tighten the schema"));
    assert_eq!(state.plan.phases[1].name, "Remediation");
}

#[test]
fn a_step_of_a_later_phase_can_be_skipped_in_advance_but_not_one_of_a_done_phase() {
    let mut state =
        started(vec![phase(1, vec![step("1.1", &[])]), phase(2, vec![step("2.1", &[]), step("2.2", &["2.1"])])]);
    ok(&mut state, &ev(EventKind::StepSkipped { step_id: "2.1".into(), reason: "done by hand".into() }));
    assert_eq!(dispatch_ids(&state), vec!["1.1"], "phase 1 still runs first");
    ok(&mut state, &record("1.1", RecordStatus::Complete));
    assert_eq!(dispatch_ids(&state), vec!["2.2"], "the skipped step counts as done for its dependant");
    let err = refused(&mut state, &ev(EventKind::StepSkipped { step_id: "1.1".into(), reason: String::new() }));
    assert!(matches!(err, EngineError::StepState { .. }), "{err}");
}

#[test]
fn empty_overlong_or_control_character_keys_are_refused() {
    let mut state = started(vec![phase(1, vec![step("1.1", &[])])]);
    for key in [String::new(), "   ".into(), "a\nb".into(), "k".repeat(MAX_KEY_LEN + 1)] {
        let err = refused(&mut state, &record("1.1", RecordStatus::Complete).with_key(key.clone()));
        assert!(matches!(err, EngineError::InvalidEvent { .. }), "{key:?}: {err}");
    }
    ok(&mut state, &record("1.1", RecordStatus::Complete).with_key("k".repeat(MAX_KEY_LEN)));
}

#[test]
fn an_approval_for_a_phase_the_plan_lacks_is_an_unknown_phase() {
    let mut p = phase(1, vec![step("1.1", &[])]);
    p.approval_required = true;
    let mut state = started(vec![p]);
    ok(&mut state, &record("1.1", RecordStatus::Complete));
    let err = refused(&mut state, &approval(9, ApprovalDecision::Approve, ""));
    assert_eq!(err, EngineError::UnknownPhase { phase_id: 9 });
}

/// A fresh-user tester's step had a 5 MB one-line task: `execute status` printed all of it on
/// its `next:` line. The DISPATCH message says at most 200 characters of it; the prompt keeps
/// the whole task.
#[test]
fn a_dispatch_message_says_the_start_of_a_long_task_and_its_prompt_all_of_it() {
    let mut long = step("1.1", &[]);
    long.task_description = format!("{} end", "x".repeat(10_000));
    let state = started(vec![phase(1, vec![long])]);
    let Action::Dispatch(d) = next_action(&state) else { panic!("no dispatch") };
    assert_eq!(d.message, format!("Dispatch step 1.1 to {}: {}…", d.agent_name, "x".repeat(200)));
    assert!(d.delegation_prompt.contains(&format!("{} end", "x".repeat(10_000))));
}

/// Found by a tester: a cancel stopped the attempts in flight, but their steps read
/// `dispatched` for ever (in `execute status`, the API and the page). They read `cancelled`,
/// with when and by whom, and hold no reservation; a step never dispatched stays pending, a
/// finished one keeps its result.
#[test]
fn a_cancel_marks_the_attempts_in_flight_cancelled() {
    let mut state = started(vec![phase(1, vec![step("1.1", &[]), step("1.2", &[]), step("1.3", &[])])]);
    ok(&mut state, &dispatched("1.1"));
    ok(&mut state, &dispatched("1.2"));
    ok(&mut state, &record("1.2", RecordStatus::Complete));
    assert!(state.budget.reserved.contains_key("1.1"), "{:?}", state.budget.reserved);
    ok(&mut state, &ev(EventKind::Cancelled { reason: "changed my mind".into() }).by("alice"));
    assert_eq!(state.step_status("1.1"), StepStatus::Cancelled);
    let r = state.result("1.1").unwrap();
    assert_eq!(
        (r.completed_at.as_str(), r.error.as_str()),
        (T0, "the execution was cancelled by alice while attempt 1 ran")
    );
    assert_eq!(state.step_status("1.2"), StepStatus::Complete);
    assert_eq!(state.step_status("1.3"), StepStatus::Pending);
    assert!(state.budget.reserved.is_empty(), "{:?}", state.budget.reserved);
    // A snapshot keeps it (its own status letter).
    let text = crate::model::snapshot::encode(&state).unwrap();
    let back = crate::model::snapshot::decode(&text).unwrap();
    assert_eq!(back.step_status("1.1"), StepStatus::Cancelled);
}
