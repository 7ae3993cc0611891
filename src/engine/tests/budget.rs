//! The USD ceiling (issue 5 §1): forecasts reserved at dispatch, parking in
//! `budget_exceeded`, raising and stopping, and the property that spend never runs past the
//! ceiling by more than what was in flight.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::model::budget::StepForecast;

fn forecast(mid: f64) -> StepForecast {
    StepForecast { low_usd: mid / 2.0, mid_usd: mid, high_usd: mid * 2.0, samples: 0, basis: "test".into() }
}

fn forecasted(steps: &[(&str, f64)], default_usd: f64) -> Event {
    let steps: BTreeMap<String, StepForecast> = steps.iter().map(|(s, m)| (s.to_string(), forecast(*m))).collect();
    ev(EventKind::Forecasted { steps, default_usd })
}

fn ceiling(usd: f64) -> Event {
    ev(EventKind::BudgetSet { ceiling_usd: Some(usd), source: "test".into() })
}

fn raise(by_usd: f64) -> Event {
    ev(EventKind::BudgetRaised { by_usd })
}

fn costing(step_id: &str, status: RecordStatus, cost: f64) -> Event {
    let mut e = record(step_id, status);
    if let EventKind::StepRecorded { cost_usd, .. } = &mut e.kind {
        *cost_usd = cost;
    }
    e
}

/// One phase of three independent steps, forecast at $0.40 each, under a $1.00 ceiling.
fn three_parallel() -> ExecutionState {
    let mut s = started(vec![phase(1, vec![step("1.1", &[]), step("1.2", &[]), step("1.3", &[])])]);
    ok(&mut s, &forecasted(&[("1.1", 0.4), ("1.2", 0.4), ("1.3", 0.4)], 0.4));
    ok(&mut s, &ceiling(1.0));
    s
}

#[test]
fn a_step_whose_forecast_would_cross_the_ceiling_is_not_offered_nor_accepted() {
    let mut s = three_parallel();
    // 0.4 + 0.4 fit under 1.00; the third would make 1.20.
    assert_eq!(dispatch_ids(&s), vec!["1.1", "1.2"]);
    ok(&mut s, &dispatched("1.1"));
    ok(&mut s, &dispatched("1.2"));
    assert_eq!(s.budget.reserved_usd(), 0.8);
    assert!(dispatch_ids(&s).is_empty());
    let err = refused(&mut s, &dispatched("1.3"));
    assert!(matches!(err, EngineError::OverBudget { ref step_id, .. } if step_id == "1.3"), "{err}");
    assert!(err.to_string().contains("$0.40 does not fit"), "{err}");
    // 1.1 cost less than forecast: its reservation is released and 1.3 fits (0.1 + 0.4 + 0.4).
    ok(&mut s, &costing("1.1", RecordStatus::Complete, 0.1));
    assert_eq!(s.budget.reserved_usd(), 0.4);
    assert_eq!(dispatch_ids(&s), vec!["1.3"]);
}

#[test]
fn the_usage_watch_sums_every_running_agent_and_stops_them_all_newest_first() {
    use crate::engine::budget::attempts_to_stop;
    // The case: two agents at $0.60 each under $1.00. Each compared with what the
    // ceiling left it ($0.75 after the other's $0.25 reservation) went on to $0.90.
    assert_eq!(attempts_to_stop(1.0, 0.0, &[0.6, 0.6]), vec![1, 0]);
    assert_eq!(attempts_to_stop(1.0, 0.0, &[0.3, 0.6]), Vec::<usize>::new(), "$0.90 fits");
    assert_eq!(attempts_to_stop(1.0, 0.5, &[0.3, 0.3]), vec![1, 0], "recorded spend counts");
    assert_eq!(attempts_to_stop(1.0, 1.0, &[]), Vec::<usize>::new(), "nothing running");
    assert_eq!(attempts_to_stop(1.0, 0.0, &[0.9, f64::NAN, 0.05]), Vec::<usize>::new());
    assert_eq!(attempts_to_stop(1.0, 0.0, &[0.2, 0.3, 0.6]), vec![2, 1, 0]);
}

#[test]
fn a_retry_is_forecast_from_what_its_earlier_attempts_cost() {
    use crate::engine::budget::retry_forecast_usd;
    assert_eq!(retry_forecast_usd(0.25, &[]), 0.25, "a first attempt: its own forecast");
    assert_eq!(retry_forecast_usd(0.25, &[1.44]), 1.44);
    assert_eq!(retry_forecast_usd(0.25, &[1.0, 0.5, 0.0]), 0.75, "the mean of those that spent");
    assert_eq!(retry_forecast_usd(2.0, &[1.0]), 2.0, "never below the step's own forecast");
    assert_eq!(retry_forecast_usd(0.25, &[f64::NAN, -1.0]), 0.25);
}

/// One step forecast at $0.25 under a $2.00 ceiling, whose first attempt cost $1.44 and failed.
fn failed_at_1_44() -> ExecutionState {
    let mut s = started(vec![phase(1, vec![step("1.1", &[])])]);
    ok(&mut s, &forecasted(&[("1.1", 0.25)], 0.25));
    ok(&mut s, &ceiling(2.0));
    ok(&mut s, &dispatched("1.1"));
    ok(&mut s, &costing("1.1", RecordStatus::Failed, 1.44));
    s
}

#[test]
fn a_retried_step_that_cost_more_than_its_forecast_is_refused_before_it_starts() {
    // The case: a $0.25 forecast, a first attempt that cost $1.44 and failed, a $2.00
    // ceiling. Retried on the forecast it would have been launched ($1.44 + $0.25 fits) and
    // ended at $2.88.
    let mut s = failed_at_1_44();
    assert_eq!(s.step_results.get("1.1").unwrap().attempts_usd, vec![1.44]);
    ok(&mut s, &ev(EventKind::StepRetried { step_id: "1.1".into() }));
    assert!(dispatch_ids(&s).is_empty(), "the retry was offered");
    let err = crate::engine::budget::check_dispatch(&s, "1.1").unwrap_err();
    assert!(matches!(err, EngineError::OverBudget { forecast_usd, .. } if forecast_usd == 1.44), "{err}");
    // Nothing in flight: it parks at once, and a dispatch is refused.
    assert_eq!(s.status, ExecutionStatus::BudgetExceeded);
    refused(&mut s, &dispatched("1.1"));
    let Action::Budget(b) = next_action(&s) else { panic!("expected BUDGET, got {:?}", next_action(&s)) };
    assert_eq!((b.step_id.as_str(), b.forecast_usd, b.needed_usd), ("1.1", 1.44, 0.88));
    assert!(b.reason.contains("($1.44, what its earlier attempts cost)"), "{}", b.reason);
    // Raised by what it needs: the retry runs, reserving what it is forecast at.
    ok(&mut s, &raise(0.88));
    assert_eq!(dispatch_ids(&s), vec!["1.1"]);
    ok(&mut s, &dispatched("1.1"));
    assert_eq!(s.budget.reserved_usd(), 1.44);
    ok(&mut s, &costing("1.1", RecordStatus::Complete, 0.5));
    assert_eq!(s.step_results.get("1.1").unwrap().attempts_usd, vec![1.44, 0.5]);
}

#[test]
fn an_older_states_attempt_costs_in_the_budget_still_forecast_a_retry_then_move_to_the_result() {
    let mut s = failed_at_1_44();
    // Where a state saved before the results kept their attempts' costs holds them.
    let costs = std::mem::take(&mut s.step_results.get_mut("1.1").unwrap().attempts_usd);
    s.budget.attempts_usd.insert("1.1".into(), costs);
    ok(&mut s, &ev(EventKind::StepRetried { step_id: "1.1".into() }));
    let err = crate::engine::budget::check_dispatch(&s, "1.1").unwrap_err();
    assert!(matches!(err, EngineError::OverBudget { forecast_usd, .. } if forecast_usd == 1.44), "{err}");
    ok(&mut s, &raise(0.88));
    ok(&mut s, &dispatched("1.1"));
    ok(&mut s, &costing("1.1", RecordStatus::Complete, 0.5));
    assert_eq!(s.step_results.get("1.1").unwrap().attempts_usd, vec![1.44, 0.5]);
    assert!(s.budget.attempts_usd.is_empty(), "{:?}", s.budget.attempts_usd);
}

#[test]
fn reaching_the_ceiling_parks_the_execution_and_a_raise_resumes_exactly_there() {
    let mut s = three_parallel();
    ok(&mut s, &dispatched("1.1"));
    ok(&mut s, &dispatched("1.2"));
    ok(&mut s, &costing("1.1", RecordStatus::Complete, 0.5));
    // 1.2 still runs: no decision while something is in flight.
    assert_eq!(s.status, ExecutionStatus::Running);
    assert_eq!(action_type(&s), ActionType::Wait);
    ok(&mut s, &costing("1.2", RecordStatus::Complete, 0.45));
    assert_eq!(s.status, ExecutionStatus::BudgetExceeded);
    let Action::Budget(b) = next_action(&s) else { panic!("expected BUDGET, got {:?}", next_action(&s)) };
    assert_eq!(b.step_id, "1.3");
    // 0.95 spent + 0.40 forecast − 1.00 ceiling.
    assert_eq!(b.needed_usd, 0.35);
    assert_eq!(b.budget_options, vec!["raise", "stop"]);
    assert!(next_actions(&s).is_empty());
    refused(&mut s, &dispatched("1.3"));

    ok(&mut s, &raise(0.35));
    assert_eq!(s.status, ExecutionStatus::Running);
    assert_eq!(s.budget.ceiling_usd, Some(1.35));
    // The same decision sent twice is one raise.
    assert!(apply(&mut s, &raise(0.35), T0).unwrap().duplicate);
    assert_eq!(s.budget.raises.len(), 1);
    assert_eq!(dispatch_ids(&s), vec!["1.3"]);
    // Completed steps stay completed: only 1.3 is offered, as attempt 1.
    assert_eq!(s.result("1.1").unwrap().attempt, 1);
    ok(&mut s, &dispatched("1.3"));
    ok(&mut s, &costing("1.3", RecordStatus::Complete, 0.3));
    assert_eq!(action_type(&s), ActionType::Complete);
}

#[test]
fn a_raise_too_small_parks_again_with_the_new_shortfall() {
    let mut s = three_parallel();
    for id in ["1.1", "1.2"] {
        ok(&mut s, &dispatched(id));
        ok(&mut s, &costing(id, RecordStatus::Complete, 0.5));
    }
    assert_eq!(s.status, ExecutionStatus::BudgetExceeded);
    ok(&mut s, &raise(0.1));
    assert_eq!(s.status, ExecutionStatus::BudgetExceeded);
    let Action::Budget(b) = next_action(&s) else { panic!() };
    assert_eq!(b.needed_usd, 0.3);
    // The same raise sent again before anything ran (a double submit) is one raise, even
    // though the first left it parked (found by a tester: two clicks raised it twice).
    assert!(apply(&mut s, &raise(0.1), T0).unwrap().duplicate);
    assert_eq!(s.budget.ceiling_usd, Some(1.1));
}

#[test]
fn after_attempts_are_stopped_the_raise_asked_for_runs_the_step_it_names() {
    let mut s = three_parallel();
    ok(&mut s, &ceiling(1.2));
    for id in ["1.1", "1.2", "1.3"] {
        ok(&mut s, &dispatched(id));
    }
    // All three stopped at the ceiling, the last one recorded being 1.3.
    for id in ["1.1", "1.2", "1.3"] {
        ok(&mut s, &costing(id, RecordStatus::BudgetStopped, 0.4));
    }
    assert_eq!(s.status, ExecutionStatus::BudgetExceeded);
    let Action::Budget(b) = next_action(&s) else { panic!() };
    // It names the step that runs first after the raise, and its forecast grew by what the
    // stopped attempt used: 0.40 + 0.40.
    assert_eq!(b.step_id, "1.1");
    assert_eq!(b.forecast_usd, 0.8);
    // 1.20 spent + 0.80 − 1.20.
    assert_eq!(b.needed_usd, 0.8);
    ok(&mut s, &raise(b.needed_usd));
    assert_eq!(dispatch_ids(&s), vec!["1.1"]);
}

#[test]
fn a_step_waiting_for_a_human_reply_is_answered_before_any_budget_decision() {
    let mut interactive = step("1.1", &[]);
    interactive.interactive = true;
    let mut s = started(vec![phase(1, vec![interactive, step("1.2", &[]), step("1.3", &["1.2"])])]);
    ok(&mut s, &forecasted(&[("1.1", 0.3), ("1.2", 0.5), ("1.3", 0.5)], 0.3));
    ok(&mut s, &ceiling(0.8));
    ok(&mut s, &dispatched("1.1"));
    ok(&mut s, &dispatched("1.2"));
    let mut turn = costing("1.1", RecordStatus::Interacting, 0.6);
    if let EventKind::StepRecorded { outcome, .. } = &mut turn.kind {
        *outcome = "Which greeting?".into();
    }
    ok(&mut s, &turn);
    ok(&mut s, &costing("1.2", RecordStatus::Complete, 0.1));
    // 1.3 is ready and does not fit, but 1.1 waits for its human: INTERACT first, not BUDGET
    // (found by a tester: the BUDGET action hid the pending question).
    assert_eq!(dispatch_ids(&s), Vec::<String>::new());
    assert_eq!(s.status, ExecutionStatus::Running);
    assert_eq!(action_type(&s), ActionType::Interact);
}

#[test]
fn budget_events_that_would_loosen_or_rewrite_the_budget_are_refused() {
    let mut s = three_parallel();
    let removed = refused(&mut s, &ev(EventKind::BudgetSet { ceiling_usd: None, source: "api".into() }));
    assert!(removed.to_string().contains("not removed"), "{removed}");
    let again = refused(&mut s, &forecasted(&[], 0.0));
    assert!(again.to_string().contains("recorded once"), "{again}");
    for bad in [0.001, 1e-300] {
        refused(&mut s, &ceiling(bad));
    }
    // A broken token count is refused, not added until the counter overflows (found by a
    // tester: two records of u64::MAX tokens panicked).
    let mut huge = record("1.1", RecordStatus::Complete);
    if let EventKind::StepRecorded { tokens, .. } = &mut huge.kind {
        *tokens = u64::MAX;
    }
    refused(&mut s, &huge);
    // budget_stopped needs a ceiling.
    let mut bare = started(vec![phase(1, vec![step("1.1", &[])])]);
    let err = refused(&mut bare, &costing("1.1", RecordStatus::BudgetStopped, 0.4));
    assert!(err.to_string().contains("needs a ceiling"), "{err}");
}

#[test]
fn budget_stopped_is_refused_for_a_step_that_was_never_dispatched() {
    // Found by a tester: `execute record --status budget_stopped` on a ready step that no
    // attempt ever ran was accepted and parked the execution.
    let mut s = three_parallel();
    let err = refused(&mut s, &costing("1.1", RecordStatus::BudgetStopped, 0.0));
    assert!(
        matches!(err, EngineError::StepState { ref step_id, ref status, .. } if step_id == "1.1" && status == "pending"),
        "{err}"
    );
    assert!(err.to_string().contains("never dispatched"), "{err}");
    assert_eq!(s.status, ExecutionStatus::Running);
    // Once dispatched, it is what stops a running attempt.
    ok(&mut s, &dispatched("1.1"));
    ok(&mut s, &costing("1.1", RecordStatus::BudgetStopped, 0.4));
    assert_eq!(s.status, ExecutionStatus::BudgetExceeded);
}

#[test]
fn a_result_that_brings_spend_over_the_ceiling_is_flagged() {
    let mut s = started(vec![phase(1, vec![step("1.1", &[])])]);
    ok(&mut s, &forecasted(&[("1.1", 0.25)], 0.25));
    ok(&mut s, &ceiling(1.0));
    ok(&mut s, &dispatched("1.1"));
    // An agent that reports its cost only at the end.
    ok(&mut s, &costing("1.1", RecordStatus::Complete, 15.0));
    assert!(s.budget.warnings.iter().any(|w| w.starts_with("BUDGET_OVERSHOT: step 1.1")), "{:?}", s.budget.warnings);
    assert_eq!(action_type(&s), ActionType::Complete);
}

#[test]
fn an_attempt_stopped_at_the_ceiling_counts_its_spend_and_runs_again_after_a_raise() {
    let mut s = started(vec![phase(1, vec![step("1.1", &[])])]);
    ok(&mut s, &forecasted(&[("1.1", 0.2)], 0.2));
    ok(&mut s, &ceiling(1.0));
    ok(&mut s, &dispatched("1.1"));
    ok(&mut s, &costing("1.1", RecordStatus::BudgetStopped, 1.02));
    assert_eq!(s.status, ExecutionStatus::BudgetExceeded);
    assert_eq!(s.step_status("1.1"), StepStatus::Pending);
    assert_eq!(s.counters.spend_usd, 1.02);
    assert!(s.budget.reserved.is_empty());
    let Action::Budget(b) = next_action(&s) else { panic!() };
    assert!(b.reason.contains("stopped while running"), "{}", b.reason);
    // It never completes on its own, and the stopped step is not skipped.
    assert_eq!(s.counters.steps_done, 0);
    ok(&mut s, &raise(b.needed_usd));
    assert_eq!(dispatch_ids(&s), vec!["1.1"]);
    let Action::Dispatch(d) = next_action(&s) else { panic!() };
    assert_eq!(d.attempt, 2);
}

#[test]
fn stopping_at_the_ceiling_cancels_with_the_reason() {
    let mut s = started(vec![phase(1, vec![step("1.1", &[])])]);
    ok(&mut s, &forecasted(&[("1.1", 2.0)], 2.0));
    ok(&mut s, &ceiling(1.0));
    assert_eq!(s.status, ExecutionStatus::BudgetExceeded, "nothing fits from the start");
    ok(&mut s, &ev(EventKind::Cancelled { reason: "stopped at the budget ceiling".into() }));
    assert_eq!(s.status, ExecutionStatus::Cancelled);
    assert!(s.failure.as_deref().unwrap().contains("budget ceiling"));
}

#[test]
fn skipping_the_blocked_step_while_parked_goes_on_without_it() {
    let mut s = started(vec![phase(1, vec![step("1.1", &[]), step("1.2", &[])]), phase(2, vec![step("2.1", &[])])]);
    ok(&mut s, &forecasted(&[("1.1", 0.2), ("1.2", 5.0), ("2.1", 0.2)], 0.2));
    ok(&mut s, &ceiling(1.0));
    ok(&mut s, &dispatched("1.1"));
    ok(&mut s, &costing("1.1", RecordStatus::Complete, 0.2));
    assert_eq!(s.status, ExecutionStatus::BudgetExceeded);
    assert_eq!(s.budget.shortfall.as_ref().unwrap().step_id, "1.2");
    ok(&mut s, &ev(EventKind::StepSkipped { step_id: "1.2".into(), reason: "too dear".into() }));
    assert_eq!(s.status, ExecutionStatus::Running, "the skip unparks it");
    assert!(s.budget.shortfall.is_none());
    assert_eq!(dispatch_ids(&s), vec!["2.1"]);
}

#[test]
fn budget_events_refuse_nonsense_and_change_nothing() {
    let mut s = three_parallel();
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 2e6] {
        assert!(matches!(refused(&mut s, &ceiling(bad)), EngineError::InvalidEvent { .. }));
    }
    assert!(matches!(refused(&mut s, &forecasted(&[("1.1", -0.1)], 0.1)), EngineError::InvalidEvent { .. }));
    // A raise is the answer to a parked execution, not a way to change a running one.
    assert!(matches!(refused(&mut s, &raise(1.0)), EngineError::WrongStatus { .. }));
}

#[test]
fn without_a_ceiling_nothing_is_held_back_and_a_new_ceiling_unparks() {
    let mut s = started(vec![phase(1, vec![step("1.1", &[]), step("1.2", &[])])]);
    ok(&mut s, &forecasted(&[("1.1", 5.0), ("1.2", 5.0)], 5.0));
    assert_eq!(dispatch_ids(&s), vec!["1.1", "1.2"]);
    ok(&mut s, &ceiling(1.0));
    assert_eq!(s.status, ExecutionStatus::BudgetExceeded);
    ok(&mut s, &ceiling(20.0));
    assert_eq!(s.status, ExecutionStatus::Running);
    assert_eq!(dispatch_ids(&s), vec!["1.1", "1.2"]);
}

#[test]
fn the_token_tier_is_a_warning_not_a_stop() {
    let mut plan = plan_of(vec![phase(1, vec![step("1.1", &[]), step("1.2", &[])])]);
    plan.budget_tier = "lean".into();
    let mut s = start(plan, T0).unwrap();
    let mut big = record("1.1", RecordStatus::Complete);
    if let EventKind::StepRecorded { tokens, .. } = &mut big.kind {
        *tokens = 50_001;
    }
    ok(&mut s, &big);
    assert_eq!(s.budget.warnings.len(), 1);
    assert!(s.budget.warnings[0].starts_with("TOKEN_BUDGET_WARNING: 50001 tokens"), "{:?}", s.budget.warnings);
    ok(&mut s, &record("1.2", RecordStatus::Complete));
    assert_eq!(s.budget.warnings.len(), 1, "warned once");
    assert_eq!(action_type(&s), ActionType::Complete);
}

#[test]
fn replay_restores_the_budget_and_the_parked_decision() {
    let mut s = three_parallel();
    let mut journal = vec![
        forecasted(&[("1.1", 0.4), ("1.2", 0.4), ("1.3", 0.4)], 0.4),
        ceiling(1.0),
        dispatched("1.1"),
        costing("1.1", RecordStatus::Complete, 0.9),
    ];
    for e in &journal[2..] {
        ok(&mut s, e);
    }
    assert_eq!(s.status, ExecutionStatus::BudgetExceeded);
    journal.push(raise(0.5));
    ok(&mut s, &journal[4]);
    let replayed = replay(s.plan.clone(), T0, journal.iter().map(|e| (e, T0))).unwrap();
    assert_eq!(replayed.budget, s.budget);
    assert_eq!(replayed.status, s.status);
}

// ---------------------------------------------------------------------------------------------
// Property: with 3 steps in parallel, spend never exceeds ceiling + the reservations in flight.
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Run {
    forecasts: Vec<Vec<u32>>,
    ceiling_cents: u32,
    /// Per attempt: (index of the in-flight attempt to finish, cost as a multiple of its
    /// forecast in percent, poll lag in percent of its reservation).
    moves: Vec<(prop::sample::Index, u32, u32)>,
}

fn run_strategy() -> impl Strategy<Value = Run> {
    (
        prop::collection::vec(prop::collection::vec(1u32..=150, 1..=4), 1..=3),
        20u32..=400,
        prop::collection::vec((any::<prop::sample::Index>(), 0u32..=300, 0u32..=100), 40),
    )
        .prop_map(|(forecasts, ceiling_cents, moves)| Run { forecasts, ceiling_cents, moves })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn spend_never_exceeds_the_ceiling_plus_the_reservations_in_flight(run in run_strategy()) {
        let phases: Vec<PlanPhase> = run
            .forecasts
            .iter()
            .enumerate()
            .map(|(pi, steps)| {
                let ids: Vec<PlanStep> = (0..steps.len()).map(|si| step(&format!("{}.{}", pi + 1, si + 1), &[])).collect();
                phase(pi as i64 + 1, ids)
            })
            .collect();
        let mut s = started(phases);
        let forecasts: Vec<(String, f64)> = run
            .forecasts
            .iter()
            .enumerate()
            .flat_map(|(pi, steps)| {
                steps.iter().enumerate().map(move |(si, c)| (format!("{}.{}", pi + 1, si + 1), f64::from(*c) / 100.0))
            })
            .collect();
        let refs: Vec<(&str, f64)> = forecasts.iter().map(|(s, f)| (s.as_str(), *f)).collect();
        ok(&mut s, &forecasted(&refs, 0.5));
        ok(&mut s, &ceiling(f64::from(run.ceiling_cents) / 100.0));
        let mut moves = run.moves.iter().cycle();
        let mut launches = 0;
        // The most ever reserved at once, and the overshoot the watch's lag let through.
        let (mut peak_reserved, mut lag_spent) = (0.0_f64, 0.0_f64);
        for _ in 0..400 {
            match s.status {
                ExecutionStatus::BudgetExceeded => {
                    prop_assert!(s.budget.reserved.is_empty(), "parked with work in flight");
                    let Action::Budget(b) = next_action(&s) else { panic!("no BUDGET action") };
                    ok(&mut s, &raise(b.needed_usd));
                    continue;
                }
                ExecutionStatus::Running => {}
                _ => break,
            }
            if matches!(next_action(&s), Action::Complete { .. }) {
                break;
            }
            // Dispatch what is offered (at most 3 in flight), and check what is not offered is refused.
            let ceiling_usd = s.budget.ceiling_usd.unwrap();
            for id in dispatch_ids(&s) {
                if s.budget.reserved.len() >= 3 {
                    break;
                }
                let f = crate::engine::budget::dispatch_forecast(&s, &id);
                prop_assert!(s.counters.spend_usd + s.budget.reserved_usd() + f <= ceiling_usd + 1e-9);
                ok(&mut s, &dispatched(&id));
                launches += 1;
                peak_reserved = peak_reserved.max(s.budget.reserved_usd());
            }
            let phase = s.current().unwrap().clone();
            for st in &phase.steps {
                if s.step_status(&st.step_id) == StepStatus::Pending && !dispatch_ids(&s).contains(&st.step_id) {
                    prop_assert!(apply(&mut s.clone(), &dispatched(&st.step_id), T0).is_err());
                }
            }
            let in_flight: Vec<String> = s.budget.reserved.keys().cloned().collect();
            if in_flight.is_empty() {
                continue;
            }
            let (pick, pct, lag) = moves.next().unwrap();
            let id = pick.get(&in_flight).clone();
            let reserved_before = s.budget.reserved_usd();
            let own = s.budget.reserved[&id];
            // What the agent really costs (and how late the watch notices) depends on the step,
            // not on what was reserved for it: a stopped step's forecast grows, its cost does not.
            let original = forecasts.iter().find(|(sid, _)| *sid == id).map_or(0.5, |(_, f)| *f);
            let wanted = original * f64::from(*pct) / 100.0;
            // The driver's watch stops an attempt once its usage crosses what the ceiling leaves
            // it, noticing up to one reservation late.
            let allowed = ceiling_usd - s.counters.spend_usd - (reserved_before - own);
            let (status, cost) = if wanted > allowed {
                let late = original.min(own) * f64::from(*lag) / 100.0;
                lag_spent += late;
                (RecordStatus::BudgetStopped, allowed.max(0.0) + late)
            } else {
                (RecordStatus::Complete, wanted)
            };
            ok(&mut s, &costing(&id, status, cost));
            // Dispatch alone never crosses the ceiling: only the watch's lag does …
            prop_assert!(
                s.counters.spend_usd <= ceiling_usd + lag_spent + 1e-9,
                "spend {} > ceiling {} + lag {}",
                s.counters.spend_usd,
                ceiling_usd,
                lag_spent
            );
            // … and that is bounded by what was reserved in flight.
            prop_assert!(
                s.counters.spend_usd <= ceiling_usd + peak_reserved + 1e-9,
                "spend {} > ceiling {} + in flight {}",
                s.counters.spend_usd,
                ceiling_usd,
                peak_reserved
            );
        }
        prop_assert!(launches > 0);
        prop_assert!(s.status != ExecutionStatus::Complete || s.counters.steps_done == s.plan.step_count() as u64);
    }
}
