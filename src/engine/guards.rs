//! The checks several event kinds (and team members) share, each with the refusal it gives:
//! the step an event names must exist and be in the current phase, be ready (its `depends_on`
//! done), start no new attempt while a checkpoint is due; a recorded result's values must be in
//! range; a feedback question is answered once. Used by `check`, `team`, `actions` and
//! `settle`. This module only reads the state, and never does IO.

use crate::engine::{EngineError, MAX_STEP_COST_USD, MAX_STEP_DURATION_SECONDS, MAX_STEP_TOKENS};
use crate::model::event::{EventKind, RecordStatus};
use crate::model::plan::{PlanPhase, PlanStep};
use crate::model::state::{ExecutionState, StepStatus};

/// The step may be dispatched now: pending (or sent its next interactive turn) with every
/// `depends_on` done.
pub(crate) fn is_ready(state: &ExecutionState, step: &PlanStep) -> bool {
    matches!(state.step_status(&step.step_id), StepStatus::Pending | StepStatus::InteractDispatched)
        && step.depends_on.iter().all(|d| state.step_status(d).is_done())
}

/// The feedback question `question_id` of phase `phase_id` has its answer.
pub(crate) fn answered(state: &ExecutionState, phase_id: i64, question_id: &str) -> bool {
    state.feedback_results.iter().any(|f| f.phase_id == phase_id && f.question_id == question_id)
}

/// The values of a `quota_wait` (any other kind passes): an `until` time, a cost between 0 and
/// [`MAX_STEP_COST_USD`](crate::engine::MAX_STEP_COST_USD), a token count. Shared by plain steps
/// and team members (`team::check_member`).
pub(crate) fn check_quota_values(kind: &EventKind) -> Result<(), EngineError> {
    let EventKind::QuotaWait { step_id, until, cost_usd, tokens, .. } = kind else { return Ok(()) };
    if until.trim().is_empty() {
        return Err(EngineError::invalid_field(
            "until",
            format!("step {step_id}: a quota wait needs its `until` time"),
        ));
    }
    if !cost_usd.is_finite() || *cost_usd < 0.0 || *cost_usd > crate::engine::MAX_STEP_COST_USD {
        return Err(EngineError::invalid_field(
            "cost_usd",
            format!(
                "step {step_id}: cost_usd {} is not a number between 0 and {}",
                shown(*cost_usd),
                crate::engine::MAX_STEP_COST_USD
            ),
        ));
    }
    if *tokens > crate::engine::MAX_STEP_TOKENS {
        return Err(EngineError::invalid_field(
            "tokens",
            format!("step {step_id}: tokens {tokens} is not a token count"),
        ));
    }
    Ok(())
}

/// The values of a `step_recorded` (a step's or a team member's): a token count, a cost in
/// `0..=MAX_STEP_COST_USD`, a duration in `0..=MAX_STEP_DURATION_SECONDS`, `budget_stopped`
/// only under a ceiling.
pub(crate) fn check_record_values(state: &ExecutionState, kind: &EventKind) -> Result<(), EngineError> {
    let EventKind::StepRecorded { step_id, status: rec, cost_usd, duration_seconds, tokens, .. } = kind else {
        return Ok(());
    };
    if *tokens > MAX_STEP_TOKENS {
        return Err(EngineError::invalid_field(
            "tokens",
            format!("step {step_id}: tokens {tokens} is not a token count (at most {MAX_STEP_TOKENS})"),
        ));
    }
    if *rec == RecordStatus::BudgetStopped && state.budget.ceiling_usd.is_none() {
        return Err(EngineError::invalid_field(
            "status",
            format!("step {step_id}: budget_stopped needs a ceiling, and this execution has none"),
        ));
    }
    if !cost_usd.is_finite() || *cost_usd < 0.0 || *cost_usd > MAX_STEP_COST_USD {
        return Err(EngineError::invalid_field(
            "cost_usd",
            format!("step {step_id}: cost_usd {} is not a number between 0 and {MAX_STEP_COST_USD}", shown(*cost_usd)),
        ));
    }
    if !duration_seconds.is_finite() || *duration_seconds < 0.0 || *duration_seconds > MAX_STEP_DURATION_SECONDS {
        return Err(EngineError::invalid_field(
            "duration_seconds",
            format!(
            "step {step_id}: duration_seconds {} is not a number of seconds between 0 and {MAX_STEP_DURATION_SECONDS} \
             (366 days)",
            shown(*duration_seconds)
        ),
        ));
    }
    Ok(())
}

/// A number as a refusal shows it: in exponent form from a billion up (`1e300`, not 301
/// digits), as written otherwise.
fn shown(value: f64) -> String {
    if value.abs() >= 1e9 {
        format!("{value:e}")
    } else {
        value.to_string()
    }
}

/// No new attempt starts while a checkpoint is due (`next_actions` offers none either).
pub(crate) fn checkpoint_due(step_id: &str) -> EngineError {
    EngineError::StepState {
        step_id: step_id.to_string(),
        status: StepStatus::Pending.as_str().into(),
        reason: "a checkpoint is due: acknowledge it first".into(),
    }
}

pub(crate) fn not_ready(state: &ExecutionState, step: &PlanStep, reason: &str) -> EngineError {
    let st = state.step_status(&step.step_id);
    let waiting: Vec<&str> =
        step.depends_on.iter().filter(|d| !state.step_status(d).is_done()).map(String::as_str).collect();
    let reason = if st == StepStatus::Pending && !waiting.is_empty() {
        format!("{reason}: it waits for {}", waiting.join(", "))
    } else {
        reason.to_string()
    };
    EngineError::StepState { step_id: step.step_id.clone(), status: st.as_str().into(), reason }
}

/// The step, if it exists and belongs to the current phase.
pub(crate) fn current_step<'a>(state: &'a ExecutionState, step_id: &str) -> Result<&'a PlanStep, EngineError> {
    let (pi, si) = state.locate(step_id).ok_or_else(|| EngineError::UnknownStep { step_id: step_id.to_string() })?;
    let phase = &state.plan.phases[pi];
    if pi != state.current_phase {
        return Err(EngineError::StepState {
            step_id: step_id.to_string(),
            status: state.step_status(step_id).as_str().into(),
            reason: match state.current() {
                Some(current) => {
                    format!("it belongs to phase {}, and the current phase is {}", phase.phase_id, current.phase_id)
                }
                None => format!("it belongs to phase {}, and every phase is done", phase.phase_id),
            },
        });
    }
    Ok(&phase.steps[si])
}

pub(crate) fn ensure_current_phase(state: &ExecutionState, phase_id: i64) -> Result<&PlanPhase, EngineError> {
    if state.plan.phase_index(phase_id).is_none() {
        return Err(EngineError::UnknownPhase { phase_id });
    }
    match state.current() {
        Some(p) if p.phase_id == phase_id => Ok(p),
        other => Err(EngineError::NotCurrentPhase { phase_id, current: other.map(|p| p.phase_id) }),
    }
}
