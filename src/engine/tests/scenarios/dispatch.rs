//! Start and dispatch scenarios: plans refused at start, dispatch waves and payloads, retried
//! attempts, waits behind in-flight siblings and step failures, skips, and a large phase settled
//! by its tally. It never covers gates, approvals or amendments.

use super::*;

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

#[test]
fn a_failed_step_with_siblings_in_flight_waits_then_fails() {
    let mut state = started(vec![phase(1, vec![step("1.1", &[]), step("1.2", &[]), step("1.3", &[])])]);
    ok(&mut state, &dispatched("1.1"));
    ok(&mut state, &dispatched("1.2"));
    ok(&mut state, &failed_record("1.1", "compile error"));
    assert_eq!(state.status, ExecutionStatus::Running);
    assert!(next_actions(&state).is_empty(), "1.3 must not start after a failure");
    let Action::Wait { message, .. } = next_action(&state) else { panic!("{:?}", next_action(&state)) };
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
    let Action::Wait { message, .. } = next_action(&state) else { panic!() };
    assert_eq!(message, "Waiting for in-flight steps: 1.1.");
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
        if i < n {
            assert_eq!(state.first_open_step(), i, "the pass to the next ready step starts after {i} done steps");
        }
    }
    assert_eq!(state.counters.steps_done, n as u64);
    assert_eq!(next_action(&state).action_type(), ActionType::Complete);
    let rebuilt = replay(plan, T0, journal.iter().map(|e| (e, T0))).unwrap();
    assert_eq!(rebuilt, state);
}
