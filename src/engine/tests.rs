//! Engine scenario tests: table-driven transitions, the original's bug list, properties.

use crate::engine::*;
use crate::model::action::{Action, ActionType};
use crate::model::event::{Event, EventKind, RecordStatus};
use crate::model::plan::{FeedbackQuestion, MachinePlan, PlanGate, PlanPhase, PlanStep};
use crate::model::state::{ApprovalDecision, ExecutionState, ExecutionStatus, StepStatus};

mod budget;
mod bugs;
mod goal;
mod golden;
mod idempotency;
mod props;
mod purity;
mod rejected;
mod scenarios;
mod teams;

pub(crate) const T0: &str = "2026-01-01T00:00:00+00:00";

pub(crate) fn plan_of(phases: Vec<PlanPhase>) -> MachinePlan {
    let mut p = MachinePlan::from_json(r#"{"task_id":"t-1","task_summary":"Build the thing"}"#).unwrap();
    p.phases = phases;
    p
}

pub(crate) fn phase(id: i64, steps: Vec<PlanStep>) -> PlanPhase {
    let mut p = PlanPhase::new(id, format!("P{id}"));
    p.steps = steps.into_iter().map(Box::new).collect();
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
        usage: None,
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

pub(crate) fn ev(kind: EventKind) -> Event {
    Event::new(kind)
}

pub(crate) fn gate(command: &str) -> PlanGate {
    PlanGate { gate_type: "test".into(), command: command.into(), extra: Default::default() }
}

pub(crate) fn question(id: &str, options: &[&str]) -> FeedbackQuestion {
    FeedbackQuestion {
        question_id: id.into(),
        question: format!("{id}?"),
        context: String::new(),
        options: options.iter().map(|o| o.to_string()).collect(),
        option_agents: Vec::new(),
        option_prompts: Vec::new(),
        extra: Default::default(),
    }
}

pub(crate) fn dispatched(step_id: &str) -> Event {
    ev(EventKind::StepDispatched { step_id: step_id.into(), agent_name: "dev".into() })
}

pub(crate) fn gate_result(phase_id: i64, passed: bool, output: &str) -> Event {
    ev(EventKind::GateRecorded {
        phase_id,
        passed,
        output: output.into(),
        command: None,
        exit_code: Some(i32::from(!passed)),
    })
}

pub(crate) fn approval(phase_id: i64, result: ApprovalDecision, feedback: &str) -> Event {
    ev(EventKind::ApprovalRecorded { phase_id, result, feedback: feedback.into() })
}

pub(crate) fn answer(phase_id: i64, question_id: &str, chosen_index: usize) -> Event {
    ev(EventKind::FeedbackRecorded { phase_id, question_id: question_id.into(), chosen_index })
}

pub(crate) fn interacting(step_id: &str, outcome: &str) -> Event {
    let mut e = record(step_id, RecordStatus::Interacting);
    if let EventKind::StepRecorded { outcome: o, .. } = &mut e.kind {
        *o = outcome.into();
    }
    e
}

pub(crate) fn failed_record(step_id: &str, error: &str) -> Event {
    let mut e = record(step_id, RecordStatus::Failed);
    if let EventKind::StepRecorded { error: er, .. } = &mut e.kind {
        *er = error.into();
    }
    e
}

/// Applies an event that must be accepted and new; returns the state for chaining.
pub(crate) fn ok(state: &mut ExecutionState, event: &Event) {
    match apply(state, event, T0) {
        Ok(applied) => assert!(!applied.duplicate, "unexpected duplicate: {event:?}"),
        Err(e) => panic!("{event:?} was refused: {e}"),
    }
}

/// Applies an event that must be refused, and checks that the state did not change.
pub(crate) fn refused(state: &mut ExecutionState, event: &Event) -> EngineError {
    let before = state.clone();
    let err = apply(state, event, T0).expect_err("event should be refused");
    assert_eq!(*state, before, "a refused {} changed the state", event.kind.name());
    err
}

pub(crate) fn started(phases: Vec<PlanPhase>) -> ExecutionState {
    start(plan_of(phases), T0).unwrap()
}

pub(crate) fn action_type(state: &ExecutionState) -> ActionType {
    next_action(state).action_type()
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

#[test]
fn a_call_on_a_state_loaded_from_a_snapshot_decodes_only_the_results_it_reads() {
    // Issue 14.8: a CLI process loads the newest snapshot and makes one call; the results of
    // the steps done before must stay undecoded (`model::lazy_result`), or every call pays
    // for all of them again.
    let ids: Vec<String> = (1..=40).map(|i| format!("1.{i}")).collect();
    let mut s = started(vec![phase(1, ids.iter().map(|id| step(id, &[])).collect())]);
    for id in &ids[..30] {
        ok(&mut s, &dispatched(id));
        ok(&mut s, &record(id, RecordStatus::Complete));
    }
    let mut loaded = crate::model::snapshot::decode(&crate::model::snapshot::encode(&s).unwrap()).unwrap();
    loaded.reindex();
    let decoded = |state: &ExecutionState| -> Vec<String> {
        state.step_results.iter().filter(|(_, r)| r.is_decoded()).map(|(id, _)| id.clone()).collect()
    };
    assert!(decoded(&loaded).is_empty());
    // `next`, `dispatched` and `record` of the next step, as the CLI makes them.
    assert_eq!(dispatch_ids(&loaded).first().map(String::as_str), Some("1.31"));
    ok(&mut loaded, &dispatched("1.31"));
    let _ = next_action(&loaded);
    ok(&mut loaded, &record("1.31", RecordStatus::Complete));
    let _ = next_action(&loaded);
    assert_eq!(decoded(&loaded), ["1.31"], "only the step the calls were about");
    assert_eq!(loaded.counters.steps_done, 31);
    assert_eq!(loaded.step_status("1.30"), StepStatus::Complete);
}

/// A fresh-clone tester's report: the DISPATCH an outside orchestrator reads told its agent
/// "You work in a dedicated git worktree … Baton commits your changes", though nothing of the
/// kind happens when an orchestrator runs the agent (it records the commit itself). The
/// action's prompt is the orchestrator's; the prompt Baton's own driver writes keeps the
/// worktree rules.
#[test]
fn a_dispatch_prompt_says_who_commits_by_who_runs_the_agent() {
    use crate::engine::prompt::{delegation_prompt, Runner};
    let state = started(vec![phase(1, vec![step("1.1", &[])])]);
    let Action::Dispatch(d) = next_action(&state) else { panic!("a DISPATCH") };
    assert!(d.delegation_prompt.contains("## Working rules"), "{}", d.delegation_prompt);
    assert!(d.delegation_prompt.contains("Your orchestrator records your result"), "{}", d.delegation_prompt);
    assert!(!d.delegation_prompt.contains("worktree of the execution"), "{}", d.delegation_prompt);
    assert!(!d.delegation_prompt.contains("Baton commits"), "{}", d.delegation_prompt);
    let step = &state.plan.phases[0].steps[0];
    assert_eq!(d.delegation_prompt, delegation_prompt(&state, step, Runner::Orchestrator));
    let driven = delegation_prompt(&state, step, Runner::Baton);
    assert!(driven.contains("## Worktree rules") && driven.contains("Baton commits your changes"), "{driven}");
    assert!(driven.contains("## Protocol") && d.delegation_prompt.contains("## Protocol"));
}
