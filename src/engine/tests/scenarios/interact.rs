//! INTERACT scenarios: interactive steps taking turns, completion, the `max_turns` limit and
//! waiting behind dispatchable siblings. It never covers other action types.

use super::*;

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
