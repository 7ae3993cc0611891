//! The engine: a deterministic state machine over `ExecutionState`.
//!
//! * [`start`](crate::engine::start) validates a plan and builds the initial state (HIGH/CRITICAL plans start with a
//!   pre-flight approval).
//! * [`next_action`](crate::engine::next_action) says what to do next: one of the ten actions (agent-baton's nine and BUDGET).
//! * [`next_actions`](crate::engine::next_actions) lists every step of the current phase that may be dispatched now (the
//!   parallel rule); it is empty whenever the execution waits (in-flight work, a human, a gate)
//!   or is finished.
//! * [`apply`](crate::engine::apply) applies one event: it validates first, then mutates, so a rejected event leaves
//!   the state untouched; the same event twice (same idempotency key) has one effect.
//! * [`replay`](crate::engine::replay) rebuilds a state from its plan and journal.
//!
//! After every event the state is *settled*: the end of a phase is handled here, in the order
//! approval → feedback questions → gate → goal evaluation ([`goal`](crate::engine::goal)) → advance, so
//! `next_action` is a pure read.
//!
//! Where each part lives: [`apply`](crate::engine::apply) runs an event through `keys` (its idempotency key),
//! `check` (is it allowed now? every refusal is an [`EngineError`](crate::engine::EngineError), from `error`), `mutate`
//! (change the state) and `settle` (the end of a phase); `actions` is the reading side
//! (`next_action`, `next_actions`). `guards` holds the checks and `edits` the small state
//! changes that several of those (and `team`, `goal`) share. The rules of particular features
//! have their own modules: `amend`, `budget`, `gate_additions`, `gates` (what a gate runs, or why
//! it is skipped), `goal`, `review` (the reviewer of a `review` gate), `prompt`, `remediate` (fix rounds on an open pull request), `signals`, `team`, `work` (what a finished attempt must
//! show to count), and `validate` for plans.
//!
//! This module never does IO, never reads the clock (time is the `now` argument, RFC 3339) and
//! never imports anything outside `crate::model` (a test scans the source to enforce it).

mod actions;
mod amend;
pub mod budget;
mod check;
mod edits;
mod error;
pub mod gate_additions;
pub mod gates;
pub mod goal;
mod guards;
mod keys;
mod mutate;
pub mod prompt;
pub mod remediate;
pub mod review;
mod settle;
pub mod signals;
pub mod team;
pub mod validate;
pub mod work;

#[cfg(test)]
mod tests;

use crate::model::event::Event;
use crate::model::plan::MachinePlan;
use crate::model::state::{ExecutionState, ExecutionStatus, PendingApprovalRequest};

pub use actions::{next_action, next_actions};
pub use error::EngineError;
pub use keys::{idempotency_key, is_decision, MAX_KEY_LEN};
pub use validate::{unsafe_id_reason, validate, validate_new, PlanProblem};

/// Gate failures that fail the execution (seed-spec §2.7 `max_gate_retries`).
pub const MAX_GATE_FAILURES: u32 = 3;
/// A checkpoint is due after this many phase advances (seed-spec §2.17 (b)).
pub const CHECKPOINT_PHASE_INTERVAL: u32 = 3;
/// … or this many recorded results …
pub const CHECKPOINT_TURN_THRESHOLD: u64 = 40;
/// … or this many tokens since the last checkpoint.
pub const CHECKPOINT_TOKEN_THRESHOLD: u64 = 150_000;
/// Largest spend one step may report, USD: anything above is a broken report, not a cost
/// (and would overflow the execution's total).
pub const MAX_STEP_COST_USD: f64 = 1_000_000.0;
/// Most tokens one result may report: anything above is a broken report (and would overflow
/// the execution's total).
pub const MAX_STEP_TOKENS: u64 = 1_000_000_000_000;
/// Longest agent wall time one result may report, seconds (366 days): anything above is a
/// broken report. Without a bound, two results of 1.7e308 s summed to infinity, which JSON
/// writes as `null`: the step's `duration_seconds` read back as `null` from the API.
pub const MAX_STEP_DURATION_SECONDS: f64 = 366.0 * 86_400.0;
/// Marker an interactive agent emits when the conversation is done.
pub const INTERACT_COMPLETE: &str = "INTERACT_COMPLETE";

/// What `apply` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The event's idempotency key (explicit or derived): journal it with the event.
    pub key: String,
    /// True when the key was already applied: nothing changed, nothing to journal.
    pub duplicate: bool,
}

/// Starts an execution of `plan` at `now` (RFC 3339).
///
/// Errors: [`EngineError::InvalidPlan`] with every problem. A HIGH or CRITICAL plan starts
/// `approval_pending` with a pre-flight approval before phase 1, unless phase 1 already
/// requires an approval (seed-spec §2.1 step 2: nothing is added, no duplicate); an empty
/// first phase is settled at once.
pub fn start(plan: MachinePlan, now: &str) -> Result<ExecutionState, EngineError> {
    validate(&plan).map_err(EngineError::InvalidPlan)?;
    let risky = matches!(plan.risk_level.to_ascii_uppercase().as_str(), "HIGH" | "CRITICAL");
    let preflight = risky && !plan.phases.first().is_some_and(|p| p.approval_required);
    let first_phase = plan.phases.first().map(|p| p.phase_id).unwrap_or(0);
    let mut state = ExecutionState::fresh(plan, now);
    if preflight {
        state.status = ExecutionStatus::ApprovalPending;
        state.pending_approval_request = Some(PendingApprovalRequest {
            phase_id: first_phase,
            requested_at: now.to_string(),
            preflight: true,
            team_step: String::new(),
            gate: false,
        });
    } else {
        settle::settle(&mut state, now);
    }
    Ok(state)
}

/// Rebuilds an execution from its plan, start time and journal (events in order, each with
/// the time it was applied). Used by `baton replay` and by loading (snapshot + later events).
pub fn replay<'a>(
    plan: MachinePlan,
    started_at: &str,
    events: impl IntoIterator<Item = (&'a Event, &'a str)>,
) -> Result<ExecutionState, EngineError> {
    let mut state = start(plan, started_at)?;
    for (event, at) in events {
        apply(&mut state, event, at)?;
    }
    Ok(state)
}

/// Tells `state` that the event `earlier` was applied under `key` before the snapshot `state`
/// was decoded from: a snapshot does not carry the applied idempotency keys (the journal holds
/// each with its event, unique per execution), so a caller that loaded a state from one looks
/// up the key of an event it is about to apply ([`idempotency_key`]) and, when the journal
/// holds it, passes that entry here first. [`apply`] then answers the event as it would on a
/// state replayed in full: a duplicate (same payload) or [`EngineError::KeyConflict`].
pub fn recall_key(state: &mut ExecutionState, key: String, earlier: &Event) {
    state.applied_keys.insert(key, keys::payload_fingerprint(&earlier.kind));
}

/// Applies one event at `now` (RFC 3339).
///
/// Validates first, then mutates: on `Err` the state is exactly as before. An event whose
/// idempotency key was already applied to `state` (or recalled into it, [`recall_key`]) returns
/// `Ok(Applied { duplicate: true, .. })` and changes nothing. After a change the state is
/// settled (phase end handled, see the module doc).
pub fn apply(state: &mut ExecutionState, event: &Event, now: &str) -> Result<Applied, EngineError> {
    if let Some(key) = &event.idempotency_key {
        keys::check_key(key)?;
    }
    let key = idempotency_key(state, event);
    // Computed whether the key is explicit or derived: a journaled event carries its derived
    // key explicitly, and must match the same event sent again without one.
    let fingerprint = keys::payload_fingerprint(&event.kind);
    if let Some(seen) = state.applied_keys.get(&key) {
        if *seen != fingerprint {
            return Err(EngineError::KeyConflict { key });
        }
        return Ok(Applied { key, duplicate: true });
    }
    if state.index.0.is_empty() {
        state.reindex();
    }
    check::check(state, &event.kind)?;
    let followed = settle::before_event(state, &event.kind);
    mutate::mutate(state, event, now);
    settle::after_event(state, followed);
    state.applied_keys.insert(key.clone(), fingerprint);
    state.events_applied += 1;
    settle::settle(state, now);
    Ok(Applied { key, duplicate: false })
}
