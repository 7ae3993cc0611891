//! Engine scenario tests: table-driven transitions, the original's bug list, properties.

use crate::engine::*;
use crate::model::event::{Event, EventKind, RecordStatus};
use crate::model::plan::{MachinePlan, PlanGate, PlanPhase, PlanStep};

const T0: &str = "2026-01-01T00:00:00+00:00";

pub(crate) fn plan_of(phases: Vec<PlanPhase>) -> MachinePlan {
    let mut p = MachinePlan::from_json(r#"{"task_id":"t-1","task_summary":"Build the thing"}"#).unwrap();
    p.phases = phases;
    p
}

pub(crate) fn phase(id: i64, steps: Vec<PlanStep>) -> PlanPhase {
    let mut p = PlanPhase::new(id, format!("P{id}"));
    p.steps = steps;
    p
}

pub(crate) fn step(id: &str, deps: &[&str]) -> PlanStep {
    let mut s = PlanStep::new(id, "dev", format!("do {id}"));
    s.depends_on = deps.iter().map(|d| d.to_string()).collect();
    s
}

pub(crate) fn record(step_id: &str, status: RecordStatus) -> Event {
    Event::new(EventKind::StepRecorded {
        step_id: step_id.into(),
        agent_name: "dev".into(),
        status,
        outcome: format!("did {step_id}"),
        files_changed: vec![],
        commit_hash: String::new(),
        tokens: 10,
        cost_usd: 0.01,
        duration_seconds: 1.0,
        error: String::new(),
    })
}

pub(crate) fn dispatch_ids(state: &ExecutionState) -> Vec<String> {
    next_actions(state)
        .into_iter()
        .filter_map(|a| match a {
            Action::Dispatch(d) => Some(d.step_id),
            _ => None,
        })
        .collect()
}

#[test]
fn parallel_steps_are_dispatched_together_and_dependants_wait() {
    let mut state =
        start(plan_of(vec![phase(1, vec![step("1.1", &[]), step("1.2", &[]), step("1.3", &["1.1", "1.2"])])]), T0)
            .unwrap();
    assert_eq!(dispatch_ids(&state), vec!["1.1", "1.2"]);
    apply(&mut state, &record("1.1", RecordStatus::Complete), T0).unwrap();
    assert_eq!(dispatch_ids(&state), vec!["1.2"]);
    apply(&mut state, &record("1.2", RecordStatus::Complete), T0).unwrap();
    assert_eq!(dispatch_ids(&state), vec!["1.3"]);
    apply(&mut state, &record("1.3", RecordStatus::Complete), T0).unwrap();
    assert!(matches!(next_action(&state), Action::Complete { .. }));
    apply(&mut state, &Event::new(EventKind::Completed), T0).unwrap();
    assert_eq!(state.status, ExecutionStatus::Complete);
}

#[test]
fn gate_phase_with_plan() {
    let mut p = phase(1, vec![step("1.1", &[])]);
    p.gate = Some(PlanGate { gate_type: "test".into(), command: "true".into(), extra: Default::default() });
    let state = start(plan_of(vec![p]), T0).unwrap();
    assert_eq!(dispatch_ids(&state), vec!["1.1"]);
}
