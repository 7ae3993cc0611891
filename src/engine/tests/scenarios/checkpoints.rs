//! COMPLETE, CHECKPOINT and cancel scenarios: the final completion, checkpoints due after phase
//! advances or tokens, and a cancel refusing every later event. It never covers dispatch or gates.

use super::*;

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
    assert!(message.contains("run `baton execute complete`"), "{message}");
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
