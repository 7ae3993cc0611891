//! A rejected event leaves the state untouched, whatever the status.

use super::*;

fn amend(phases: Vec<PlanPhase>, after_phase: Option<i64>, steps: Vec<crate::model::event::AddedStep>) -> Event {
    ev(EventKind::Amended { description: "x".into(), trigger: "manual".into(), phases, after_phase, steps })
}

fn full_plan() -> Vec<PlanPhase> {
    let mut p1 = phase(1, vec![step("1.1", &[]), step("1.2", &["1.1"])]);
    p1.approval_required = true;
    p1.feedback_questions = vec![question("q", &["a", "b"])];
    p1.gate = Some(gate("true"));
    let mut i = step("2.2", &[]);
    i.interactive = true;
    vec![p1, phase(2, vec![step("2.1", &[]), i])]
}

/// States in each status, built from the same plan.
fn states() -> Vec<(&'static str, ExecutionState)> {
    let mut out = Vec::new();
    let mut s = started(full_plan());
    out.push(("running, fresh", s.clone()));
    ok(&mut s, &dispatched("1.1"));
    out.push(("running, in flight", s.clone()));
    ok(&mut s, &record("1.1", RecordStatus::Complete));
    ok(&mut s, &record("1.2", RecordStatus::Complete));
    out.push(("approval_pending", s.clone()));
    ok(&mut s, &approval(1, ApprovalDecision::Approve, ""));
    out.push(("feedback_pending", s.clone()));
    ok(&mut s, &answer(1, "q", 0));
    out.push(("gate_pending", s.clone()));
    let mut g = s.clone();
    ok(&mut g, &gate_result(1, false, ""));
    ok(&mut g, &record("1.2", RecordStatus::Complete));
    ok(&mut g, &gate_result(1, false, ""));
    out.push(("gate_failed", g.clone()));
    ok(&mut g, &gate_result(1, false, ""));
    out.push(("failed by the gate", g));
    ok(&mut s, &gate_result(1, true, ""));
    let mut f = s.clone();
    ok(&mut f, &failed_record("2.1", "boom"));
    out.push(("failed by a step", f));
    ok(&mut s, &record("2.1", RecordStatus::Complete));
    out.push(("running, phase 3", s.clone()));
    ok(&mut s, &record("3.1", RecordStatus::Complete));
    ok(&mut s, &interacting("3.2", "?"));
    out.push(("interacting", s.clone()));
    ok(&mut s, &ev(EventKind::InteractCompleted { step_id: "3.2".into() }));
    out.push(("all phases done", s.clone()));
    let mut c = s.clone();
    ok(&mut c, &ev(EventKind::Completed));
    out.push(("complete", c));
    ok(&mut s, &ev(EventKind::Cancelled { reason: String::new() }));
    out.push(("cancelled", s));
    out
}

fn illegal_everywhere() -> Vec<Event> {
    vec![
        record("9.9", RecordStatus::Complete),
        dispatched("9.9"),
        ev(EventKind::StepRetried { step_id: "9.9".into() }),
        ev(EventKind::StepSkipped { step_id: "9.9".into(), reason: String::new() }),
        ev(EventKind::InteractInput { step_id: "9.9".into(), input: "x".into() }),
        ev(EventKind::InteractCompleted { step_id: "1.1".into() }),
        gate_result(42, true, ""),
        approval(42, ApprovalDecision::Approve, ""),
        answer(42, "q", 0),
        ev(EventKind::GateRetried { phase_id: 42 }),
        amend(vec![], None, vec![]),
        amend(vec![phase(0, vec![step("1.1", &[])])], None, vec![]),
        amend(vec![phase(0, vec![step("", &["9.9"])])], None, vec![]),
        amend(vec![phase(0, vec![step("../evil", &[])])], None, vec![]),
        ev(EventKind::CheckpointAcknowledged),
        ev(EventKind::StepRetried { step_id: "1.1".into() }),
    ]
}

#[test]
fn rejected_events_leave_the_state_untouched_in_every_status() {
    let all = states();
    let mut statuses = std::collections::HashSet::new();
    for (name, state) in &all {
        statuses.insert(state.status);
        for event in illegal_everywhere() {
            let mut s = state.clone();
            let before = s.clone();
            let result = apply(&mut s, &event, T0);
            assert!(result.is_err(), "{name}: {event:?} was accepted");
            assert_eq!(s, before, "{name}: rejected {event:?} changed the state");
        }
    }
    assert_eq!(statuses.len(), 8, "{statuses:?}");
}

#[test]
fn status_specific_illegal_events_are_rejected_without_change() {
    let find = |name: &str| states().into_iter().find(|(n, _)| *n == name).map(|(_, s)| s).unwrap();
    let table: Vec<(&str, Vec<Event>)> = vec![
        (
            "running, fresh",
            vec![
                dispatched("1.2"),
                record("1.2", RecordStatus::Complete),
                record("2.1", RecordStatus::Complete),
                dispatched("2.1"),
                gate_result(1, true, ""),
                approval(1, ApprovalDecision::Approve, ""),
                answer(1, "q", 0),
                ev(EventKind::Completed),
                ev(EventKind::GateRetried { phase_id: 1 }),
                ev(EventKind::StepRetried { step_id: "1.1".into() }),
                amend(vec![], None, vec![crate::model::event::AddedStep { phase_id: 1, step: step("x", &["2.1"]) }]),
                amend(vec![phase(0, vec![step("", &["2.1"])])], None, vec![]),
            ],
        ),
        (
            "running, in flight",
            vec![
                ev(EventKind::StepDispatched { step_id: "1.1".into(), agent_name: "other".into() }),
                ev(EventKind::StepSkipped { step_id: "1.1".into(), reason: String::new() }),
                ev(EventKind::InteractInput { step_id: "1.1".into(), input: "x".into() }),
            ],
        ),
        (
            "approval_pending",
            vec![
                failed_record("1.1", "late"),
                approval(2, ApprovalDecision::Approve, ""),
                answer(1, "q", 0),
                gate_result(1, true, ""),
                ev(EventKind::StepSkipped { step_id: "1.2".into(), reason: String::new() }),
                amend(vec![], None, vec![crate::model::event::AddedStep { phase_id: 1, step: step("1.3", &[]) }]),
            ],
        ),
        (
            "feedback_pending",
            vec![
                answer(1, "q", 5),
                answer(1, "zz", 0),
                approval(1, ApprovalDecision::Reject, ""),
                gate_result(1, true, ""),
            ],
        ),
        (
            "gate_pending",
            vec![
                gate_result(2, true, ""),
                ev(EventKind::GateRetried { phase_id: 1 }),
                answer(1, "q", 1),
                dispatched("1.2"),
                ev(EventKind::Completed),
            ],
        ),
        (
            "gate_failed",
            vec![
                gate_result(2, false, ""),
                failed_record("1.2", "x"),
                ev(EventKind::StepRetried { step_id: "1.2".into() }),
            ],
        ),
        (
            "failed by the gate",
            vec![
                gate_result(1, true, ""),
                failed_record("1.2", "x"),
                ev(EventKind::Completed),
                ev(EventKind::StepRetried { step_id: "1.2".into() }),
                ev(EventKind::CheckpointAcknowledged),
            ],
        ),
        (
            "failed by a step",
            vec![
                record("2.1", RecordStatus::Complete),
                dispatched("2.1"),
                ev(EventKind::GateRetried { phase_id: 1 }),
                ev(EventKind::GateRetried { phase_id: 2 }),
                ev(EventKind::Completed),
            ],
        ),
        (
            "interacting",
            vec![
                record("3.2", RecordStatus::Complete),
                dispatched("3.2"),
                ev(EventKind::InteractCompleted { step_id: "3.1".into() }),
                interacting("3.1", "no"),
            ],
        ),
        (
            "all phases done",
            vec![
                record("3.2", RecordStatus::Complete),
                gate_result(3, true, ""),
                amend(vec![], None, vec![crate::model::event::AddedStep { phase_id: 3, step: step("3.9", &[]) }]),
            ],
        ),
    ];
    for (name, events) in table {
        let state = find(name);
        for event in events {
            let mut s = state.clone();
            let before = s.clone();
            let err = apply(&mut s, &event, T0);
            assert!(err.is_err(), "{name}: {event:?} was accepted");
            assert_eq!(s, before, "{name}: {event:?}");
        }
    }
}

/// Found trying the CLI: a step recorded again once every phase was done was refused with
/// "the current phase is none (every phase is done)"; the reason now says it plainly, and
/// names the current phase while there is one.
#[test]
fn a_step_of_another_phase_is_refused_naming_the_current_phase_or_the_end() {
    let mut s = started(vec![phase(1, vec![step("1.1", &[])]), phase(2, vec![step("2.1", &[])])]);
    ok(&mut s, &record("1.1", RecordStatus::Complete));
    let err = apply(&mut s, &record("1.1", RecordStatus::Failed), T0).unwrap_err();
    assert_eq!(err.to_string(), "step 1.1 is complete: it belongs to phase 1, and the current phase is 2");
    ok(&mut s, &record("2.1", RecordStatus::Complete));
    let err = apply(&mut s, &record("1.1", RecordStatus::Failed), T0).unwrap_err();
    assert_eq!(err.to_string(), "step 1.1 is complete: it belongs to phase 1, and every phase is done");
}
