//! The USD ceiling: which ready steps may be dispatched, reservations, parking in
//! `budget_exceeded`, and the BUDGET action (issue 5 §1).
//!
//! Rules:
//! * A dispatch reserves the step's forecast (`mid_usd`); recording any result of the attempt
//!   releases it and adds the real cost. A retry (any dispatch of a step whose earlier attempts
//!   spent something) is forecast at no less than what those attempts cost on average
//!   ([`retry_forecast_usd`]): a step that cost $1.44 and failed is not run again on a $0.25
//!   forecast.
//! * A ready step is offered only when spend + every reservation + its forecast fits the
//!   ceiling; `affordable` takes ready steps in plan order while they fit, so parallel
//!   dispatches cannot overshoot together. `StepDispatched` is refused on the same test.
//! * When nothing is in flight and a ready step does not fit, or an attempt was stopped at the
//!   ceiling (`budget_stopped`), the execution parks in `budget_exceeded` with the shortfall. A
//!   `BudgetRaised` (or a new, higher `BudgetSet`) resumes exactly there; `Cancelled` stops.
//!   Parking never completes the execution and never skips a step. `budget_stopped` is
//!   accepted only for a dispatched step (or member): it stops an attempt that was running.
//! * While attempts run, what they stream is summed against the ceiling ([`attempts_to_stop`]):
//!   once spend + the running agents' streamed usage crosses it, every running attempt is
//!   stopped, newest first, and recorded `budget_stopped`.
//! * The plan's token tier (`budget_tier`: lean 50 000, standard 500 000, full 2 000 000 tokens,
//!   or the plan's `token_budget`; seed-spec §2.14) is advice: crossing it adds one warning.
//!
//! This module never does IO and never reads the clock.

use crate::engine::EngineError;
use crate::model::action::{Action, BudgetAction};
use crate::model::budget::{BudgetShortfall, StepForecast};
use crate::model::state::{ExecutionState, ExecutionStatus, StepStatus};

/// Slack for float sums, USD: a forecast that fits to a millionth of a cent fits.
const EPSILON_USD: f64 = 1e-9;
/// Largest ceiling or raise accepted, USD (beyond it a value is a typo, not a budget).
pub const MAX_CEILING_USD: f64 = 1_000_000.0;
/// Smallest ceiling or raise accepted, USD: a cent.
pub const MIN_CEILING_USD: f64 = 0.01;

/// What a dispatch of a step is forecast at, USD: its own forecast (`forecast_usd`), or, when
/// its earlier attempts spent something, at least their mean (`earlier_attempts_usd`, one cost
/// per recorded attempt; attempts that spent nothing, such as one that could not start, say
/// nothing about the cost and are left out). Pure: the caller passes the costs in.
pub fn retry_forecast_usd(forecast_usd: f64, earlier_attempts_usd: &[f64]) -> f64 {
    let spent: Vec<f64> = earlier_attempts_usd.iter().copied().filter(|c| c.is_finite() && *c > 0.0).collect();
    if spent.is_empty() {
        return forecast_usd;
    }
    let mean = spent.iter().sum::<f64>() / spent.len() as f64;
    forecast_usd.max(mean.min(MAX_CEILING_USD))
}

/// What each recorded attempt of `step_id` cost: its result's list, else (a state saved before
/// results kept it) the budget's, else (a state from before either was kept) the result's
/// total spread over its attempts.
fn earlier_attempts(state: &ExecutionState, step_id: &str) -> Vec<f64> {
    let result = state.result(step_id);
    if let Some(r) = result.filter(|r| !r.attempts_usd.is_empty()) {
        return r.attempts_usd.clone();
    }
    if let Some(costs) = state.budget.attempts_usd.get(step_id) {
        return costs.clone();
    }
    match result {
        Some(r) if r.cost_usd > 0.0 && r.attempt > 0 => vec![r.cost_usd / f64::from(r.attempt)],
        _ => Vec::new(),
    }
}

/// The forecast a dispatch of `step_id` reserves and is checked on: [`retry_forecast_usd`] of
/// its forecast and its earlier attempts' costs.
pub(crate) fn dispatch_forecast(state: &ExecutionState, step_id: &str) -> f64 {
    retry_forecast_usd(state.budget.forecast_usd(step_id), &earlier_attempts(state, step_id))
}

/// Adds `cost_usd` to the cost of `step_id`'s current attempt (a recorded result; an
/// interactive step records several per attempt), in its result's `attempts_usd`, which
/// first takes over the list an older state kept in the budget.
pub(crate) fn attempt_spent(state: &mut ExecutionState, step_id: &str, cost_usd: f64) {
    let legacy = state.budget.attempts_usd.remove(step_id);
    let Some(r) = state.step_results.get_mut(step_id) else { return };
    let attempt = r.attempt.max(1) as usize;
    let costs = &mut r.attempts_usd;
    if costs.is_empty() {
        *costs = legacy.unwrap_or_default();
    }
    if costs.len() < attempt {
        costs.resize(attempt, 0.0);
    }
    costs[attempt - 1] += cost_usd;
}

/// True when a step forecast at `forecast_usd` fits on top of what is spent and reserved, plus
/// `extra_usd` reserved by dispatches being planned alongside it.
fn fits(state: &ExecutionState, forecast_usd: f64, extra_usd: f64) -> bool {
    let Some(ceiling) = state.budget.ceiling_usd else { return true };
    state.counters.spend_usd + state.budget.reserved_usd() + extra_usd + forecast_usd <= ceiling + EPSILON_USD
}

/// Which ready steps may be dispatched now, decided one step at a time in plan order: none
/// while a shortfall waits for its decision, else each step whose forecast still fits after the
/// ones taken before it. Taking steps one by one lets a caller that needs only the first few
/// stop scanning there (the choice of a step never depends on the steps after it).
#[derive(Debug)]
pub(crate) struct Affordable {
    /// USD the steps taken so far reserve.
    planned_usd: f64,
}

impl Affordable {
    /// A choice with nothing taken yet.
    pub(crate) fn new() -> Affordable {
        Affordable { planned_usd: 0.0 }
    }

    /// Whether `step_id`, the next ready step in plan order, may be dispatched along with those
    /// taken before it; taking it reserves its forecast for the steps after it.
    pub(crate) fn take(&mut self, state: &ExecutionState, step_id: &str) -> bool {
        if state.budget.shortfall.is_some() {
            return false;
        }
        if state.budget.ceiling_usd.is_none() {
            return true;
        }
        let forecast = dispatch_forecast(state, step_id);
        if fits(state, forecast, self.planned_usd) {
            self.planned_usd += forecast;
            return true;
        }
        false
    }
}

/// Refuses a dispatch whose forecast does not fit (or while a decision is pending).
pub(crate) fn check_dispatch(state: &ExecutionState, step_id: &str) -> Result<(), EngineError> {
    let forecast = dispatch_forecast(state, step_id);
    if state.budget.shortfall.is_none() && fits(state, forecast, 0.0) {
        return Ok(());
    }
    Err(EngineError::OverBudget {
        step_id: step_id.to_string(),
        forecast_usd: forecast,
        spent_usd: state.counters.spend_usd,
        reserved_usd: state.budget.reserved_usd(),
        ceiling_usd: state.budget.ceiling_usd.unwrap_or(0.0),
    })
}

/// Checks a `Forecasted` event: recorded once, when the execution starts (a second one would
/// rewrite what reservations were made against), every value a USD amount from 0 to the cap.
pub(crate) fn check_forecast(
    state: &ExecutionState,
    steps: &std::collections::BTreeMap<String, crate::model::budget::StepForecast>,
    default_usd: f64,
) -> Result<(), EngineError> {
    if state.budget.forecast_recorded {
        return Err(EngineError::invalid_event(
            "the forecast is recorded once, when the execution starts, and it already was",
        ));
    }
    let bad = |field: &'static str, what: String, v: f64| {
        EngineError::invalid_field(field, format!("{what}: {v} is not a USD amount between 0 and {MAX_CEILING_USD}"))
    };
    let ok = |v: f64| v.is_finite() && (0.0..=MAX_CEILING_USD).contains(&v);
    if !ok(default_usd) {
        return Err(bad("default_usd", "forecast default_usd".into(), default_usd));
    }
    for (step, f) in steps {
        for (name, v) in [("low_usd", f.low_usd), ("mid_usd", f.mid_usd), ("high_usd", f.high_usd)] {
            if !ok(v) {
                return Err(bad("steps", format!("forecast of step {step}: {name}"), v));
            }
        }
    }
    Ok(())
}

/// Checks a ceiling (`BudgetSet`) or a raise (`BudgetRaised`) amount: a cent to a million USD.
pub(crate) fn check_amount(what: &'static str, usd: f64) -> Result<(), EngineError> {
    if usd.is_finite() && (MIN_CEILING_USD..=MAX_CEILING_USD).contains(&usd) {
        return Ok(());
    }
    Err(EngineError::invalid_field(
        what,
        format!("{what} {usd} is not a USD amount from {MIN_CEILING_USD} to {MAX_CEILING_USD}"),
    ))
}

/// Checks a `budget_stopped` record of `step_id` (a step or a team member): it says a running
/// attempt was stopped at the ceiling, so the step must be dispatched (found by a tester: a
/// step no attempt ever ran was recorded as stopped and parked the execution).
pub(crate) fn check_stopped(state: &ExecutionState, step_id: &str) -> Result<(), EngineError> {
    let st = state.step_status(step_id);
    if st == StepStatus::Dispatched {
        return Ok(());
    }
    let why = if st == StepStatus::Pending { "it was never dispatched" } else { "no attempt of it is running" };
    Err(EngineError::StepState {
        step_id: step_id.to_string(),
        status: st.as_str().into(),
        reason: format!("budget_stopped records a running attempt stopped at the ceiling, and {why}"),
    })
}

/// Checks a `BudgetSet`: a ceiling can be set or replaced, never removed once there is one
/// (dispatch would then run unbounded).
pub(crate) fn check_set(state: &ExecutionState, ceiling_usd: Option<f64>) -> Result<(), EngineError> {
    match ceiling_usd {
        Some(c) => check_amount("ceiling_usd", c),
        None if state.budget.ceiling_usd.is_some() => Err(EngineError::invalid_field(
            "ceiling_usd",
            "ceiling_usd: the execution has a ceiling; it can be replaced or raised, not removed",
        )),
        None => Ok(()),
    }
}

/// Checks a `BudgetRaised`: the raised ceiling within the cap.
pub(crate) fn check_raise(state: &ExecutionState, by_usd: f64) -> Result<(), EngineError> {
    check_amount("by_usd", by_usd)?;
    let raised = state.budget.ceiling_usd.unwrap_or(0.0) + by_usd;
    if raised > MAX_CEILING_USD {
        return Err(EngineError::invalid_field(
            "by_usd",
            format!("by_usd {by_usd}: the ceiling would be {raised}, above the largest ceiling {MAX_CEILING_USD}"),
        ));
    }
    Ok(())
}

/// A dispatch reserves the step's forecast ([`dispatch_forecast`]: a retry's, from its earlier
/// attempts).
pub(crate) fn reserve(state: &mut ExecutionState, step_id: &str) {
    let forecast = dispatch_forecast(state, step_id);
    state.budget.reserved.insert(step_id.to_string(), forecast);
}

/// A recorded (or requeued) attempt releases its reservation.
pub(crate) fn release(state: &mut ExecutionState, step_id: &str) {
    state.budget.reserved.remove(step_id);
}

/// An attempt stopped at the ceiling: dispatch is held until a human decides, and the step's
/// forecast grows by what the stopped attempt used (running it again from scratch costs at
/// least that much again), so the raise asked for is one that can let it finish.
pub(crate) fn stopped(state: &mut ExecutionState, step_id: &str, cost_usd: f64) {
    let grown = state.budget.forecast_usd(step_id) + cost_usd;
    let entry = state.budget.forecasts.entry(step_id.to_string()).or_insert_with(|| StepForecast {
        low_usd: grown,
        mid_usd: grown,
        high_usd: grown,
        samples: 0,
        basis: String::new(),
    });
    entry.mid_usd = grown;
    entry.high_usd = entry.high_usd.max(grown);
    entry.basis = format!("{} + ${cost_usd:.2} used by an attempt stopped at the ceiling", entry.basis);
    state.budget.shortfall = Some(BudgetShortfall {
        step_id: step_id.to_string(),
        needed_usd: 0.0,
        reason: format!(
            "step {step_id} was stopped while running: its usage (${cost_usd:.2}) crossed the remaining budget"
        ),
    });
}

/// Which running attempts the driver's usage watch stops, newest first: every one of them once
/// `spent_usd` (recorded) plus what they have all streamed so far crosses `ceiling_usd`, none
/// while it fits. `streamed_usd` holds each running attempt's streamed usage, oldest launch
/// first; the result holds their indices. One ceiling for the whole execution: the running
/// agents' usage is summed, never each held to what the others' reservations leave it (two
/// agents each stopped at $0.90 under a $1.00 ceiling spent $1.80). Watched after each message,
/// the overshoot stays within one streamed message per running agent.
pub fn attempts_to_stop(ceiling_usd: f64, spent_usd: f64, streamed_usd: &[f64]) -> Vec<usize> {
    let streamed: f64 = streamed_usd.iter().copied().filter(|u| u.is_finite() && *u > 0.0).sum();
    if spent_usd + streamed <= ceiling_usd + EPSILON_USD {
        return Vec::new();
    }
    (0..streamed_usd.len()).rev().collect()
}

/// After a result, a warning when spend ended above the ceiling (an agent that reports its
/// cost only at the end, or usage streamed while no driver watched): never silent.
pub(crate) fn overshoot_warning(state: &mut ExecutionState, step_id: &str) {
    let Some(ceiling) = state.budget.ceiling_usd else { return };
    let spent = state.counters.spend_usd;
    if spent > ceiling + EPSILON_USD {
        state.budget.warnings.push(format!(
            "BUDGET_OVERSHOT: step {step_id}'s result brought spend to ${spent:.2}, over the ${ceiling:.2} ceiling"
        ));
    }
}

/// A new ceiling (set or raised) clears the pending decision; `settle` parks again if the
/// blocked step still does not fit.
pub(crate) fn ceiling_changed(state: &mut ExecutionState) {
    state.budget.shortfall = None;
    state.budget.changes += 1;
    if state.status == ExecutionStatus::BudgetExceeded {
        state.status = ExecutionStatus::Running;
    }
}

/// A skip or an amendment changes what is left to run: a parked execution is reconsidered
/// (`settle` parks it again, with a fresh shortfall, if what is ready still does not fit).
pub(crate) fn reconsider(state: &mut ExecutionState) {
    if state.status == ExecutionStatus::BudgetExceeded {
        state.budget.shortfall = None;
        state.status = ExecutionStatus::Running;
    }
}

/// spend + forecast − ceiling, at least a cent: the smallest raise that lets `step_id` run.
fn shortfall_usd(state: &ExecutionState, step_id: &str) -> f64 {
    let ceiling = state.budget.ceiling_usd.unwrap_or(0.0);
    let need = state.counters.spend_usd + state.budget.reserved_usd() + dispatch_forecast(state, step_id) - ceiling;
    // Rounded up to the cent, ignoring float noise below a millionth of a cent.
    ((need.max(0.01) * 100.0) - 1e-6).ceil() / 100.0
}

/// Called by `settle` when the current phase has unfinished steps and nothing in flight:
/// parks the execution when a decision is pending or a ready step cannot be afforded. The
/// shortfall names the first ready step in plan order (the one a raise lets run first) and
/// what it needs. A step waiting for a human's reply (interactive) is answered first: no
/// parking while one waits.
pub(crate) fn park_if_blocked(state: &mut ExecutionState, ready: &[String], interacting: bool) {
    if interacting || state.budget.ceiling_usd.is_none() {
        return;
    }
    let Some(first) = ready.first().cloned() else { return };
    if state.budget.shortfall.is_none() {
        if ready.iter().any(|s| fits(state, dispatch_forecast(state, s), 0.0)) {
            return;
        }
        let forecast = dispatch_forecast(state, &first);
        let retry = if forecast > state.budget.forecast_usd(&first) { ", what its earlier attempts cost" } else { "" };
        state.budget.shortfall = Some(BudgetShortfall {
            reason: format!(
                "step {first}'s forecast (${forecast:.2}{retry}) does not fit: ${:.2} of the ${:.2} ceiling is spent",
                state.counters.spend_usd,
                state.budget.ceiling_usd.unwrap_or(0.0)
            ),
            step_id: first.clone(),
            needed_usd: 0.0,
        });
    }
    let needed = shortfall_usd(state, &first);
    if let Some(s) = state.budget.shortfall.as_mut() {
        s.step_id = first;
        s.needed_usd = needed;
    }
    state.status = ExecutionStatus::BudgetExceeded;
}

/// Adds the token-tier warning once the execution's tokens cross the plan's tier cap.
pub(crate) fn tier_warning(state: &mut ExecutionState) {
    let tier = state.plan.budget_tier.to_ascii_lowercase();
    let explicit = state.plan.extra.get("token_budget").and_then(serde_json::Value::as_u64).filter(|n| *n > 0);
    let cap = explicit.unwrap_or(match tier.as_str() {
        "lean" => 50_000,
        "full" => 2_000_000,
        _ => 500_000,
    });
    let used = state.counters.tokens;
    if used > cap && state.budget.warnings.iter().all(|w| !w.starts_with("TOKEN_BUDGET_WARNING")) {
        let source = if explicit.is_some() { "token_budget".to_string() } else { format!("{tier} tier") };
        state.budget.warnings.push(format!(
            "TOKEN_BUDGET_WARNING: {used} tokens used, the plan's cap is {cap} ({source}); the USD ceiling, not this cap, stops dispatch"
        ));
    }
}

/// The BUDGET action of a parked execution.
pub(crate) fn action(state: &ExecutionState) -> Action {
    let shortfall = state.budget.shortfall.clone().unwrap_or(BudgetShortfall {
        step_id: String::new(),
        needed_usd: 0.01,
        reason: "the ceiling was reached".into(),
    });
    let ceiling = state.budget.ceiling_usd.unwrap_or(0.0);
    Action::Budget(BudgetAction {
        message: format!(
            "Budget ceiling reached (${:.2} of ${ceiling:.2} spent): raise it by at least ${:.2} to run step {}, or stop.",
            state.counters.spend_usd, shortfall.needed_usd, shortfall.step_id
        ),
        ceiling_usd: ceiling,
        spent_usd: state.counters.spend_usd,
        forecast_usd: dispatch_forecast(state, &shortfall.step_id),
        step_id: shortfall.step_id,
        needed_usd: shortfall.needed_usd,
        reason: shortfall.reason,
        budget_options: vec!["raise".into(), "stop".into()],
    })
}
