//! [`EngineError`]: why the engine refused an event or a plan. The state is unchanged whenever
//! one is returned; each variant is a domain case a caller (the API, the CLI) can tell apart.
//! This module never does IO.

use crate::engine::validate::PlanProblem;
use crate::model::state::ExecutionStatus;

/// Why the engine refused an event or a plan. The state is unchanged whenever this is returned.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EngineError {
    /// The plan failed validation.
    #[error("invalid plan: {}", .0.iter().map(|p| p.to_string()).collect::<Vec<_>>().join("; "))]
    InvalidPlan(Vec<PlanProblem>),
    /// The execution is complete or cancelled.
    #[error("execution is {status}: no further events are accepted")]
    Final {
        /// Its status.
        status: ExecutionStatus,
    },
    /// The execution has failed; only retry-step, retry-gate, skip, amend or cancel reopen it.
    #[error(
        "execution has failed ({reason}); retry a step, retry the gate, skip a step or amend the plan to reopen it"
    )]
    ExecutionFailed {
        /// Failure reason.
        reason: String,
    },
    /// The execution failed because a human rejected phase `phase_id`'s approval; only an
    /// amendment of the plan (or a cancel) goes on from there: a retried or skipped step would
    /// ask for the rejected approval again.
    #[error(
        "execution has failed ({reason}); the rejection of phase {phase_id} stands: amend the plan to go on \
         (a retried or skipped step does not reopen it), or cancel the execution"
    )]
    RejectionStands {
        /// The rejected phase's id.
        phase_id: i64,
        /// Failure reason (who rejected it, and why).
        reason: String,
    },
    /// No such step in the plan.
    #[error("unknown step {step_id}")]
    UnknownStep {
        /// Step id given.
        step_id: String,
    },
    /// No such phase in the plan.
    #[error("unknown phase {phase_id}")]
    UnknownPhase {
        /// Phase id given.
        phase_id: i64,
    },
    /// The event names a phase that is not the current one.
    #[error("phase {phase_id} is not the current phase ({})", .current.map_or("none: every phase is done".to_string(), |c| c.to_string()))]
    NotCurrentPhase {
        /// Phase id given.
        phase_id: i64,
        /// Current phase id.
        current: Option<i64>,
    },
    /// The step cannot take this event in its current state.
    #[error("step {step_id} is {status}: {reason}")]
    StepState {
        /// Step.
        step_id: String,
        /// Its status.
        status: String,
        /// What is wrong.
        reason: String,
    },
    /// The execution's status does not allow this event.
    #[error("cannot apply {event} while the execution is {status}")]
    WrongStatus {
        /// Event kind.
        event: &'static str,
        /// Current status.
        status: ExecutionStatus,
    },
    /// A pending approval exists for another phase.
    #[error("approval is pending for phase {pending}, not phase {phase_id}")]
    ApprovalPhaseMismatch {
        /// Phase given.
        phase_id: i64,
        /// Phase pending.
        pending: i64,
    },
    /// No such feedback question in the phase.
    #[error("phase {phase_id} has no feedback question {question_id}")]
    UnknownQuestion {
        /// Phase.
        phase_id: i64,
        /// Question.
        question_id: String,
    },
    /// The question was already answered.
    #[error("feedback question {question_id} of phase {phase_id} is already answered")]
    QuestionAnswered {
        /// Phase.
        phase_id: i64,
        /// Question.
        question_id: String,
    },
    /// The option index is out of range.
    #[error("option {index} is out of range: question {question_id} has {count} options, numbered from 0")]
    OptionOutOfRange {
        /// Question.
        question_id: String,
        /// Index given.
        index: usize,
        /// Number of options.
        count: usize,
    },
    /// `Completed` before every phase is done.
    #[error("cannot complete: phase {phase_id} ({name}) is not done")]
    NotFinished {
        /// Current phase id.
        phase_id: i64,
        /// Its name.
        name: String,
    },
    /// An explicit idempotency key was already used for a different event.
    #[error("idempotency key {key} was already used for a different event")]
    KeyConflict {
        /// The key.
        key: String,
    },
    /// A value of the event is out of range (a negative cost, feedback missing, …), or the
    /// event breaks a rule of the state it is applied to. The message names the field or the
    /// rule on its own ("step 1.1: cost_usd -5 is not …").
    #[error("{message}")]
    InvalidEvent {
        /// The event's field whose value is refused (`cost_usd`, `until`, …), when one is:
        /// what the REST door reports as `details.field`. `None` for a rule of the state (a
        /// forecast recorded twice, a gate that is not a ci gate).
        field: Option<&'static str>,
        /// What is wrong, naming the step, phase or field.
        message: String,
    },
    /// An amendment that cannot be applied.
    #[error("invalid amendment: {0}")]
    InvalidAmendment(String),
    /// The step's forecast does not fit under the USD ceiling (or a budget decision is pending).
    #[error(
        "step {step_id} cannot be dispatched: its forecast ${forecast_usd:.2} does not fit (${spent_usd:.2} spent, ${reserved_usd:.2} reserved, ceiling ${ceiling_usd:.2})"
    )]
    OverBudget {
        /// The step.
        step_id: String,
        /// Its forecast, USD.
        forecast_usd: f64,
        /// Spent so far, USD.
        spent_usd: f64,
        /// Reserved by in-flight attempts, USD.
        reserved_usd: f64,
        /// The ceiling, USD.
        ceiling_usd: f64,
    },
}

impl EngineError {
    /// [`EngineError::InvalidEvent`] for a refused value of the event's `field`.
    pub(crate) fn invalid_field(field: &'static str, message: impl Into<String>) -> EngineError {
        EngineError::InvalidEvent { field: Some(field), message: message.into() }
    }

    /// [`EngineError::InvalidEvent`] for an event that breaks a rule of the state, no one
    /// field's value.
    pub(crate) fn invalid_event(message: impl Into<String>) -> EngineError {
        EngineError::InvalidEvent { field: None, message: message.into() }
    }

    /// The event's field an [`EngineError`] refuses, for a door's `details.field`: the
    /// field of an [`EngineError::InvalidEvent`], `step_id`, `phase_id` or `question_id` for
    /// an unknown one, `chosen_index` for an option out of range; `None` otherwise.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            EngineError::InvalidEvent { field, .. } => *field,
            EngineError::UnknownStep { .. } => Some("step_id"),
            EngineError::UnknownPhase { .. } => Some("phase_id"),
            EngineError::UnknownQuestion { .. } => Some("question_id"),
            EngineError::OptionOutOfRange { .. } => Some("chosen_index"),
            _ => None,
        }
    }
}
