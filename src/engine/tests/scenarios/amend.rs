//! Amendment scenarios: phases and steps inserted or appended by an amendment, and a failed
//! execution reopened by one. It never covers approvals' own transitions.

use super::*;

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
