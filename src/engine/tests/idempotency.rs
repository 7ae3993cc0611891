//! The same event twice has one effect (derived and explicit idempotency keys).

use super::*;

/// Applies `event` (new), then again: the second time is a duplicate and changes nothing.
fn twice(state: &mut ExecutionState, event: &Event) {
    let first = apply(state, event, T0).unwrap_or_else(|e| panic!("{event:?}: {e}"));
    assert!(!first.duplicate, "{event:?}");
    let after = state.clone();
    let second = apply(state, event, "2030-01-01T00:00:00+00:00").unwrap();
    assert_eq!(second, Applied { key: first.key, duplicate: true }, "{event:?}");
    assert_eq!(*state, after, "duplicate {event:?} changed the state");
}

#[test]
fn every_event_kind_applied_twice_has_one_effect() {
    let mut p1 = phase(1, vec![step("1.1", &[]), step("1.2", &[])]);
    p1.approval_required = true;
    p1.feedback_questions = vec![question("q", &["a", "b"])];
    p1.gate = Some(gate("true"));
    let mut i = step("2.2", &[]);
    i.interactive = true;
    let phases = vec![
        p1,
        phase(2, vec![step("2.1", &[]), i]),
        phase(3, vec![step("3.1", &[])]),
        phase(4, vec![step("4.1", &[])]),
    ];
    let mut state = started(phases);
    twice(&mut state, &dispatched("1.1"));
    twice(&mut state, &record("1.1", RecordStatus::Complete));
    twice(&mut state, &failed_record("1.2", "x"));
    twice(&mut state, &ev(EventKind::StepRetried { step_id: "1.2".into() }));
    twice(&mut state, &failed_record("1.2", "x"));
    assert_eq!(state.result("1.2").unwrap().attempt, 2);
    twice(&mut state, &ev(EventKind::StepSkipped { step_id: "1.2".into(), reason: "meh".into() }));
    assert_eq!(state.counters.steps_done, 2);
    twice(&mut state, &approval(1, ApprovalDecision::ApproveWithFeedback, "docs"));
    assert_eq!(state.plan.phases.len(), 5, "one Remediation phase");
    twice(&mut state, &answer(1, "q", 1));
    assert_eq!(state.plan.phases.len(), 6, "one Feedback-Dispatch phase");
    twice(&mut state, &gate_result(1, false, "red"));
    twice(&mut state, &record("1.2", RecordStatus::Complete));
    twice(&mut state, &gate_result(1, true, "green"));
    assert_eq!(state.gate_results.len(), 2);
    twice(&mut state, &record("2.1", RecordStatus::Complete));
    twice(&mut state, &record("3.1", RecordStatus::Complete));
    assert!(state.checkpoint.due);
    twice(&mut state, &ev(EventKind::CheckpointAcknowledged));
    assert_eq!(state.checkpoint.count, 1);
    twice(&mut state, &record("4.1", RecordStatus::Complete));
    twice(&mut state, &interacting("4.2", "question"));
    twice(&mut state, &ev(EventKind::InteractInput { step_id: "4.2".into(), input: "answer".into() }));
    twice(&mut state, &interacting("4.2", "question"));
    assert_eq!(state.result("4.2").unwrap().interaction_history.len(), 3);
    twice(&mut state, &ev(EventKind::InteractCompleted { step_id: "4.2".into() }));
    twice(
        &mut state,
        &ev(EventKind::Amended {
            description: "one more".into(),
            trigger: "manual".into(),
            phases: vec![phase(0, vec![step("", &[])])],
            after_phase: None,
            steps: vec![],
        }),
    );
    assert_eq!(state.plan.phases.len(), 7, "one amendment phase");
    assert_eq!(state.amendments.iter().filter(|a| a.trigger == "manual").count(), 1);
    twice(&mut state, &record("5.1", RecordStatus::Complete));
    twice(&mut state, &record("6.1", RecordStatus::Complete));
    assert!(state.checkpoint.due, "three phases advanced since the last checkpoint");
    twice(&mut state, &ev(EventKind::CheckpointAcknowledged));
    twice(&mut state, &record("7.1", RecordStatus::Complete));
    twice(&mut state, &ev(EventKind::Completed));
    assert_eq!(state.status, ExecutionStatus::Complete);
    twice(&mut started(vec![phase(1, vec![step("1.1", &[])])]), &ev(EventKind::Cancelled { reason: "x".into() }));
}

#[test]
fn duplicate_record_after_completion_is_not_an_error() {
    let mut state = started(vec![phase(1, vec![step("1.1", &[])])]);
    let e = record("1.1", RecordStatus::Complete);
    ok(&mut state, &e);
    ok(&mut state, &ev(EventKind::Completed));
    let before = state.clone();
    assert!(apply(&mut state, &e, T0).unwrap().duplicate);
    assert!(apply(&mut state, &ev(EventKind::Completed), T0).unwrap().duplicate);
    assert_eq!(state, before);
    assert_eq!(state.counters.steps_done, 1);
}

#[test]
fn duplicate_cancel_is_one_effect() {
    let mut state = started(vec![phase(1, vec![step("1.1", &[])])]);
    let e = ev(EventKind::Cancelled { reason: "stop".into() }).by("ops");
    ok(&mut state, &e);
    let before = state.clone();
    assert!(apply(&mut state, &e, "2031-01-01T00:00:00+00:00").unwrap().duplicate);
    assert_eq!(state, before);
    assert_eq!(state.completed_at, T0);
}

#[test]
fn duplicate_approval_does_not_approve_the_next_request() {
    // A HIGH plan: the pre-flight approval of phase 1, then phase 2's own approval. The
    // pre-flight decision sent again while phase 2's approval is pending is a resend of the
    // first (phase 1), never a decision on phase 2.
    let mut p2 = phase(2, vec![step("2.1", &[])]);
    p2.approval_required = true;
    let mut plan = plan_of(vec![phase(1, vec![step("1.1", &[])]), p2]);
    plan.risk_level = "HIGH".into();
    let mut state = start(plan, T0).unwrap();
    let approve = approval(1, ApprovalDecision::Approve, "");
    ok(&mut state, &approve);
    ok(&mut state, &record("1.1", RecordStatus::Complete));
    ok(&mut state, &record("2.1", RecordStatus::Complete));
    assert_eq!(state.status, ExecutionStatus::ApprovalPending);
    assert!(apply(&mut state, &approve, T0).unwrap().duplicate, "the phase-1 decision again is a resend");
    assert_eq!(state.approval_results.len(), 1);
    assert_eq!(state.status, ExecutionStatus::ApprovalPending, "phase 2's approval is still pending");
    ok(&mut state, &approval(2, ApprovalDecision::Approve, ""));
    assert_eq!(state.approval_results.len(), 2);
}

#[test]
fn explicit_keys_decide_duplicates() {
    let mut state = started(vec![phase(1, vec![step("1.1", &[]), step("1.2", &[])])]);
    let a = record("1.1", RecordStatus::Complete).with_key("k-1");
    let applied = apply(&mut state, &a, T0).unwrap();
    assert_eq!(applied, Applied { key: "k-1".into(), duplicate: false });
    let b = record("1.2", RecordStatus::Complete).with_key("k-1");
    let before = state.clone();
    let err = apply(&mut state, &b, T0).unwrap_err();
    assert_eq!(err, EngineError::KeyConflict { key: "k-1".into() }, "same key, different payload: a conflict");
    assert_eq!(state, before);
    assert!(apply(&mut state, &a, T0).unwrap().duplicate, "same key, same payload: a duplicate");
    ok(&mut state, &record("1.2", RecordStatus::Complete).with_key("k-2"));
    assert_eq!(state.counters.steps_done, 2);
}

#[test]
fn a_resent_failing_gate_result_in_gate_failed_needs_an_explicit_key() {
    let mut p1 = phase(1, vec![step("1.1", &[])]);
    p1.gate = Some(gate("make check"));
    let mut state = started(vec![p1]);
    ok(&mut state, &record("1.1", RecordStatus::Complete));
    ok(&mut state, &gate_result(1, false, "red"));
    ok(&mut state, &record("1.1", RecordStatus::Complete));
    let run2 = gate_result(1, false, "red").with_key("gate-1-run-2");
    ok(&mut state, &run2);
    assert_eq!(state.status, ExecutionStatus::GateFailed);
    let before = state.clone();
    assert!(apply(&mut state, &run2, T0).unwrap().duplicate);
    assert_eq!(state, before);
    ok(&mut state, &gate_result(1, false, "red"));
    assert_eq!(state.status, ExecutionStatus::Failed, "an identical re-run without a key is a new run");
}

#[test]
fn derived_keys_differ_between_rounds_of_the_same_subject() {
    let mut state = started(vec![phase(1, vec![step("1.1", &[])])]);
    let fail = failed_record("1.1", "x");
    let k1 = idempotency_key(&state, &fail);
    ok(&mut state, &fail);
    assert_eq!(idempotency_key(&state, &fail), k1);
    ok(&mut state, &ev(EventKind::StepRetried { step_id: "1.1".into() }));
    assert_ne!(idempotency_key(&state, &fail), k1);
    assert!(k1.starts_with("step_recorded:"), "{k1}");
    ok(&mut state, &fail);
    assert_eq!(state.result("1.1").unwrap().attempt, 2);
}

#[test]
fn a_resent_amendment_inserts_one_phase() {
    let mut state = started(vec![phase(1, vec![step("1.1", &[])]), phase(2, vec![step("2.1", &[])])]);
    let amend = ev(EventKind::Amended {
        description: "add a phase".into(),
        trigger: "manual".into(),
        phases: vec![phase(0, vec![step("", &[])])],
        after_phase: None,
        steps: vec![],
    });
    ok(&mut state, &amend);
    assert!(apply(&mut state, &amend, T0).unwrap().duplicate);
    assert_eq!(state.plan.phases.len(), 3);
    ok(&mut state, &record("1.1", RecordStatus::Complete));
    ok(&mut state, &amend);
    assert_eq!(state.plan.phases.len(), 4, "the same amendment in a later phase is a new one");
}

#[test]
fn an_interactive_last_step_redispatched_by_the_gate_can_be_completed_again() {
    let mut s = step("1.1", &[]);
    s.interactive = true;
    let mut p1 = phase(1, vec![s]);
    p1.gate = Some(gate("true"));
    let mut state = started(vec![p1, phase(2, vec![step("2.1", &[])])]);
    let complete = ev(EventKind::InteractCompleted { step_id: "1.1".into() });
    ok(&mut state, &interacting("1.1", "draft"));
    ok(&mut state, &complete);
    ok(&mut state, &gate_result(1, false, "red"));
    ok(&mut state, &interacting("1.1", "draft 2"));
    ok(&mut state, &complete);
    assert_eq!(state.step_status("1.1"), StepStatus::Complete);
    assert_eq!(state.status, ExecutionStatus::GatePending);
}

#[test]
fn a_skipped_last_step_redispatched_by_the_gate_can_be_skipped_again() {
    let mut p1 = phase(1, vec![step("1.1", &[])]);
    p1.gate = Some(gate("true"));
    let mut state = started(vec![p1, phase(2, vec![step("2.1", &[])])]);
    let skip = ev(EventKind::StepSkipped { step_id: "1.1".into(), reason: "later".into() });
    ok(&mut state, &skip);
    ok(&mut state, &gate_result(1, false, "red"));
    assert_eq!(state.step_status("1.1"), StepStatus::Pending);
    ok(&mut state, &skip);
    assert_eq!(state.step_status("1.1"), StepStatus::Skipped);
    assert_eq!(state.status, ExecutionStatus::GatePending);
}

#[test]
fn an_event_sent_again_without_a_key_matches_its_journaled_copy_with_the_derived_key() {
    let mut state = started(vec![phase(1, vec![step("1.1", &[]), step("1.2", &[])])]);
    let event = record("1.1", RecordStatus::Complete);
    let applied = apply(&mut state, &event, T0).unwrap();
    // What the journal holds: the same event with its derived key made explicit.
    let journaled = event.clone().with_key(applied.key.clone());
    let mut reloaded = replay(state.plan.clone(), T0, [(&journaled, T0)]).unwrap();
    let again = apply(&mut reloaded, &event, T0).unwrap();
    assert!(again.duplicate, "the CLI sending the same record again is a duplicate, not a conflict");
}

/// A state decoded from a snapshot knows none of the keys applied before it (issue 14.8);
/// `recall_key` tells it one from the journal, and then the resend is a duplicate and a
/// different event under that key a conflict, as on the state replayed in full. `same_as`
/// (what `baton replay` checks) sees the two as one state, but not when a key both know has
/// two fingerprints or another field differs.
#[test]
fn a_recalled_key_answers_as_on_the_full_state_and_same_as_ignores_only_unknown_keys() {
    let mut full = started(vec![phase(1, vec![step("1.1", &[]), step("1.2", &[])])]);
    let mut keyed = record("1.1", RecordStatus::Complete);
    keyed.idempotency_key = Some("k1".into());
    ok(&mut full, &keyed);
    let mut decoded: ExecutionState = serde_json::from_str(&serde_json::to_string(&full).unwrap()).unwrap();
    assert!(decoded.applied_keys.is_empty());
    assert!(decoded.same_as(&full) && full.same_as(&decoded));

    let mut other = record("1.2", RecordStatus::Complete);
    other.idempotency_key = Some("k1".into());
    let before = decoded.clone();
    crate::engine::recall_key(&mut decoded, "k1".into(), &keyed);
    assert_eq!(apply(&mut decoded, &keyed, T0).unwrap(), Applied { key: "k1".into(), duplicate: true });
    assert_eq!(apply(&mut decoded, &other, T0).unwrap_err(), EngineError::KeyConflict { key: "k1".into() });
    assert!(decoded.same_as(&before) && decoded.same_as(&full));

    let mut conflicting = decoded.clone();
    crate::engine::recall_key(&mut conflicting, "k1".into(), &other);
    assert!(!conflicting.same_as(&full), "a key both know with two fingerprints");
    let mut moved = decoded.clone();
    ok(&mut moved, &dispatched("1.2"));
    assert!(!moved.same_as(&full), "another field differs");
}
