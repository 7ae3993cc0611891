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
//! This module never does IO, never reads the clock (time is the `now` argument, RFC 3339) and
//! never imports anything outside `crate::model` (a test scans the source to enforce it).

mod amend;
pub mod budget;
pub mod gate_additions;
pub mod goal;
pub mod prompt;
pub mod signals;
pub mod team;
pub mod validate;

#[cfg(test)]
mod tests;

use sha2::{Digest, Sha256};

use crate::model::action::{
    Action, ApprovalAction, CheckpointAction, DispatchAction, FeedbackAction, GateAction, InteractAction,
};
use crate::model::event::{Event, EventKind, RecordStatus};
use crate::model::plan::{MachinePlan, PlanPhase, PlanStep};
use crate::model::state::{
    ApprovalDecision, ApprovalResult, CheckpointMarks, ExecutionState, ExecutionStatus, GateResult, InteractionTurn,
    PendingApprovalRequest, StepResult, StepStatus,
};

pub use validate::{unsafe_id_reason, validate, PlanProblem};

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
/// Marker an interactive agent emits when the conversation is done.
pub const INTERACT_COMPLETE: &str = "INTERACT_COMPLETE";

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
    /// A value of the event is out of range (a negative cost, feedback missing, …).
    #[error("invalid event: {0}")]
    InvalidEvent(String),
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
/// `approval_pending` with a pre-flight approval before phase 1; an empty first phase is
/// settled at once.
pub fn start(plan: MachinePlan, now: &str) -> Result<ExecutionState, EngineError> {
    validate(&plan).map_err(EngineError::InvalidPlan)?;
    let preflight = matches!(plan.risk_level.to_ascii_uppercase().as_str(), "HIGH" | "CRITICAL");
    let first_phase = plan.phases.first().map(|p| p.phase_id).unwrap_or(0);
    let mut state = ExecutionState::fresh(plan, now);
    if preflight {
        state.status = ExecutionStatus::ApprovalPending;
        state.pending_approval_request = Some(PendingApprovalRequest {
            phase_id: first_phase,
            requested_at: now.to_string(),
            preflight: true,
            team_step: String::new(),
        });
    } else {
        settle(&mut state, now);
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

// ----------------------------------------------------------------------------------------------
// Reading: next_action / next_actions
// ----------------------------------------------------------------------------------------------

/// What to do next: exactly one action (seed-spec §2.2 resolver, §2.3).
///
/// DISPATCH is the first dispatchable step; a driver that runs steps in parallel uses
/// [`next_actions`] to get all of them.
pub fn next_action(state: &ExecutionState) -> Action {
    match state.status {
        ExecutionStatus::Complete => Action::Complete {
            message: format!("Execution {} is complete.", state.task_id),
            summary: completion_summary(state),
        },
        ExecutionStatus::Cancelled => Action::Failed {
            message: format!("Execution {} was cancelled.", state.task_id),
            summary: state.failure.clone().unwrap_or_else(|| "cancelled".into()),
        },
        ExecutionStatus::Failed => Action::Failed {
            message: format!("Execution {} failed.", state.task_id),
            summary: state.failure.clone().unwrap_or_else(|| "failed".into()),
        },
        ExecutionStatus::ApprovalPending => approval_action(state),
        ExecutionStatus::FeedbackPending => feedback_action(state),
        ExecutionStatus::GatePending | ExecutionStatus::GateFailed => gate_action(state),
        ExecutionStatus::BudgetExceeded => budget::action(state),
        ExecutionStatus::Running => running_action(state),
    }
}

/// Every step of the current phase that may be dispatched now, as DISPATCH actions in plan
/// order (seed-spec §2.18); a team step offers its dispatchable members (and synthesis) instead
/// of itself (see [`team`]). Empty while the execution waits or is finished.
pub fn next_actions(state: &ExecutionState) -> Vec<Action> {
    if state.status != ExecutionStatus::Running || state.checkpoint.due {
        return Vec::new();
    }
    let Some(phase) = state.current() else { return Vec::new() };
    if phase.steps.iter().any(|s| state.step_status(&s.step_id) == StepStatus::Failed) {
        return Vec::new();
    }
    let mut ready: Vec<(std::borrow::Cow<'_, PlanStep>, &str)> = Vec::new();
    for s in &phase.steps {
        if s.team.is_empty() {
            if is_ready(state, s) {
                ready.push((std::borrow::Cow::Borrowed(s), ""));
            }
        } else {
            ready.extend(team::ready(state, s).into_iter().map(|m| (std::borrow::Cow::Owned(m), s.step_id.as_str())));
        }
    }
    let affordable: std::collections::HashSet<String> =
        budget::affordable(state, ready.iter().map(|(s, _)| s.as_ref()).collect())
            .into_iter()
            .map(|s| s.step_id.clone())
            .collect();
    ready.retain(|(s, _)| affordable.contains(&s.step_id));
    let isolation = if ready.len() >= 2 { "worktree" } else { "" };
    ready
        .into_iter()
        .map(|(s, parent)| {
            let mut d = dispatch_action(state, phase, &s, isolation);
            d.is_team_member = !parent.is_empty();
            d.parent_step_id = parent.to_string();
            Action::Dispatch(d)
        })
        .collect()
}

fn running_action(state: &ExecutionState) -> Action {
    if state.checkpoint.due {
        return checkpoint_action(state);
    }
    let Some(phase) = state.current() else {
        return Action::Complete {
            message: "All phases complete; record `complete` to finalize the execution.".into(),
            summary: completion_summary(state),
        };
    };
    if let Some(first) = next_actions(state).into_iter().next() {
        return first;
    }
    let failed: Vec<&str> = phase
        .steps
        .iter()
        .filter(|s| state.step_status(&s.step_id) == StepStatus::Failed)
        .map(|s| s.step_id.as_str())
        .collect();
    let in_flight: Vec<&str> = phase
        .steps
        .iter()
        .filter(|s| state.step_status(&s.step_id) == StepStatus::Dispatched)
        .map(|s| s.step_id.as_str())
        .collect();
    if failed.is_empty() {
        if let Some(step) = phase.steps.iter().find(|s| state.step_status(&s.step_id) == StepStatus::Interacting) {
            return interact_action(state, step);
        }
    }
    let message = if failed.is_empty() {
        format!("Waiting for in-flight steps: {}.", in_flight.join(", "))
    } else {
        format!(
            "Step {} failed; waiting for in-flight steps ({}) before the execution fails.",
            failed.join(", "),
            in_flight.join(", ")
        )
    };
    Action::Wait { message }
}

fn is_ready(state: &ExecutionState, step: &PlanStep) -> bool {
    matches!(state.step_status(&step.step_id), StepStatus::Pending | StepStatus::InteractDispatched)
        && step.depends_on.iter().all(|d| state.step_status(d).is_done())
}

fn dispatch_action(state: &ExecutionState, phase: &PlanPhase, step: &PlanStep, isolation: &str) -> DispatchAction {
    let attempt = state.result(&step.step_id).map_or(0, |r| r.attempt) + 1;
    let retry = if attempt > 1 { format!(" (attempt {attempt})") } else { String::new() };
    DispatchAction {
        message: format!(
            "Dispatch step {} to {}{retry}: {}",
            step.step_id,
            step.agent_name,
            first_line(&step.task_description)
        ),
        step_id: step.step_id.clone(),
        phase_id: phase.phase_id,
        agent_name: step.agent_name.clone(),
        agent_model: step.model.clone(),
        step_type: step.step_type.clone(),
        attempt,
        delegation_prompt: prompt::delegation_prompt(state, step),
        command: if step.is_automation() { step.command.clone() } else { String::new() },
        interactive: step.interactive,
        interact_max_turns: step.interactive.then(|| step.max_turns()),
        isolation: isolation.to_string(),
        expected_outcome: step.expected_outcome.clone(),
        allowed_paths: step.allowed_paths.clone(),
        blocked_paths: step.blocked_paths.clone(),
        timeout_seconds: step.timeout_seconds,
        is_team_member: false,
        parent_step_id: String::new(),
    }
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or("").trim()
}

fn gate_action(state: &ExecutionState) -> Action {
    let Some(phase) = state.current() else {
        return Action::Wait { message: "no current phase".into() };
    };
    let Some(gate) = &phase.gate else {
        return Action::Wait { message: format!("phase {} has no gate", phase.phase_id) };
    };
    let failures = state.gate_failures(phase.phase_id);
    let attempt = state.gate_runs(phase.phase_id) + 1;
    // A retry carries the additions too (the original dropped them: seed-spec §5 #64).
    let additions = phase_additions(state, phase);
    let message = if state.status == ExecutionStatus::GateFailed {
        format!(
            "Gate '{}' for phase {} failed ({failures}/{MAX_GATE_FAILURES}); run it again.",
            gate.gate_type, phase.phase_id
        )
    } else {
        format!("Run gate '{}' for phase {}.", gate.gate_type, phase.phase_id)
    };
    let message =
        if additions.is_empty() { message } else { format!("{message} [+agent additions: {}]", additions.join("; ")) };
    Action::Gate(GateAction {
        message,
        phase_id: phase.phase_id,
        gate_type: gate.gate_type.clone(),
        gate_command: expand_files(&gate.command, state, phase),
        attempt,
        failures,
        max_failures: MAX_GATE_FAILURES,
        additions,
    })
}

/// The accepted `GATE_ADDITION:` commands of `phase`'s steps, in step order, each once.
fn phase_additions(state: &ExecutionState, phase: &PlanPhase) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for r in phase.steps.iter().filter_map(|s| state.result(&s.step_id)) {
        for a in &r.gate_additions {
            if !out.contains(a) {
                out.push(a.clone());
            }
        }
    }
    out
}

/// Replaces `{files}` in a gate command with the phase's changed files, each quoted for the
/// shell the command runs in (file names come from agents), space-joined.
fn expand_files(command: &str, state: &ExecutionState, phase: &PlanPhase) -> String {
    if !command.contains("{files}") {
        return command.to_string();
    }
    let mut files: Vec<&str> = phase
        .steps
        .iter()
        .filter_map(|s| state.result(&s.step_id))
        .flat_map(|r| r.files_changed.iter().map(String::as_str))
        .collect();
    files.sort_unstable();
    files.dedup();
    let quoted: Vec<String> = files.iter().map(|f| gate_additions::shell_quote(f)).collect();
    command.replace("{files}", &quoted.join(" "))
}

fn approval_action(state: &ExecutionState) -> Action {
    if let Some(action) = team::approval_action(state) {
        return Action::Approval(action);
    }
    let request = state.pending_approval_request.as_ref();
    let preflight = request.is_some_and(|r| r.preflight);
    let phase_id = request.map_or_else(|| state.current().map_or(0, |p| p.phase_id), |r| r.phase_id);
    let phase = state.plan.phase_index(phase_id).and_then(|i| state.plan.phases.get(i));
    let context = if preflight {
        format!(
            "Pre-flight approval: this plan is {} risk.\n\nTask: {}\nPhases: {}\nSteps: {}\n\nApprove to start phase {}.",
            state.plan.risk_level,
            state.plan.task_summary,
            state.plan.phases.len(),
            state.plan.step_count(),
            phase_id
        )
    } else if let Some(p) = phase.filter(|p| !p.approval_description.trim().is_empty()) {
        p.approval_description.clone()
    } else {
        phase.map(|p| phase_outcomes(state, p)).unwrap_or_default()
    };
    let context = match knowledge_gaps_since_last_approval(state, phase_id) {
        gaps if gaps.is_empty() || preflight => context,
        gaps => format!("{context}\n\n## Knowledge gaps the agents reported\n\n{}", gaps.join("\n")),
    };
    let name = phase.map_or("", |p| p.name.as_str());
    Action::Approval(ApprovalAction {
        message: if preflight {
            format!("Approve the {} risk plan before phase {phase_id} ({name}) starts.", state.plan.risk_level)
        } else {
            format!("Approve phase {phase_id} ({name}).")
        },
        phase_id,
        approval_context: context,
        approval_options: vec!["approve".into(), "reject".into(), "approve-with-feedback".into()],
        preflight,
    })
}

/// `- <step> (<agent>): <gap>` for every knowledge gap of the steps of the phases after the
/// last decided (non-pre-flight) approval, up to and including phase `phase_id`.
fn knowledge_gaps_since_last_approval(state: &ExecutionState, phase_id: i64) -> Vec<String> {
    let last = state
        .approval_results
        .iter()
        .filter(|a| !a.preflight)
        .filter_map(|a| state.plan.phase_index(a.phase_id))
        .filter(|i| state.plan.phase_index(phase_id).is_some_and(|p| *i < p))
        .max();
    let Some(upto) = state.plan.phase_index(phase_id) else { return Vec::new() };
    let from = last.map_or(0, |i| i + 1);
    state.plan.phases[from..=upto]
        .iter()
        .flat_map(|p| &p.steps)
        .filter_map(|s| state.result(&s.step_id))
        .flat_map(|r| r.knowledge_gaps.iter().map(move |g| format!("- {} ({}): {g}", r.step_id, r.agent_name)))
        .collect()
}

fn phase_outcomes(state: &ExecutionState, phase: &PlanPhase) -> String {
    let mut out = format!("## Phase {}: {}\n", phase.phase_id, phase.name);
    for step in &phase.steps {
        if let Some(r) = state.result(&step.step_id) {
            out.push_str(&format!(
                "\n### Step {} ({}, {})\n{}\n",
                step.step_id,
                r.agent_name,
                r.status.as_str(),
                r.outcome.trim()
            ));
            if !r.files_changed.is_empty() {
                out.push_str(&format!("Files: {}\n", r.files_changed.join(", ")));
            }
        }
    }
    out
}

fn feedback_action(state: &ExecutionState) -> Action {
    let Some(phase) = state.current() else {
        return Action::Wait { message: "no current phase".into() };
    };
    let questions =
        phase.feedback_questions.iter().filter(|q| !answered(state, phase.phase_id, &q.question_id)).cloned().collect();
    Action::Feedback(FeedbackAction {
        message: format!("Answer the feedback questions of phase {} ({}).", phase.phase_id, phase.name),
        phase_id: phase.phase_id,
        feedback_questions: questions,
        feedback_context: phase_outcomes(state, phase),
    })
}

fn interact_action(state: &ExecutionState, step: &PlanStep) -> Action {
    let result = state.result(&step.step_id);
    let history = result.map_or(&[][..], |r| r.interaction_history.as_slice());
    let turn = history.iter().filter(|t| t.role == "agent").count() as u32;
    let latest = history.iter().rev().find(|t| t.role == "agent").map_or("", |t| t.content.as_str());
    Action::Interact(InteractAction {
        message: format!(
            "Step {} ({}) waits for your reply (turn {turn}/{}).",
            step.step_id,
            step.agent_name,
            step.max_turns()
        ),
        interact_step_id: step.step_id.clone(),
        interact_agent_name: step.agent_name.clone(),
        interact_prompt: latest.to_string(),
        interact_turn: turn,
        interact_max_turns: step.max_turns(),
    })
}

fn checkpoint_action(state: &ExecutionState) -> Action {
    let phase_id = state.current().map_or(0, |p| p.phase_id);
    let mut handoff = format!("Goal: {}\n", state.plan.task_summary);
    handoff.push_str(&format!(
        "Progress: {} of {} steps done; phase {} of {} next.\n",
        state.counters.steps_done,
        state.plan.step_count(),
        state.current_phase + 1,
        state.plan.phases.len()
    ));
    let done: Vec<String> = state
        .plan
        .phases
        .iter()
        .take(state.current_phase)
        .rev()
        .flat_map(|p| p.steps.iter().rev())
        .filter_map(|s| state.result(&s.step_id))
        .take(10)
        .map(|r| format!("- {} ({}): {}", r.step_id, r.agent_name, excerpt_line(&r.outcome)))
        .collect();
    if !done.is_empty() {
        handoff.push_str("Recent outcomes:\n");
        handoff.push_str(&done.join("\n"));
        handoff.push('\n');
    }
    handoff.push_str(&format!("Resume with: baton execute resume --task-id {}\n", state.task_id));
    Action::Checkpoint(CheckpointAction {
        message: format!("Checkpoint before phase {phase_id}: {}.", state.checkpoint.reason),
        reason: state.checkpoint.reason.clone(),
        phase_id,
        handoff,
    })
}

fn excerpt_line(text: &str) -> String {
    let line = first_line(text);
    if line.chars().count() > 120 {
        format!("{}…", line.chars().take(120).collect::<String>())
    } else {
        line.to_string()
    }
}

fn completion_summary(state: &ExecutionState) -> String {
    let (done, total) = state.progress();
    format!(
        "{}: {done}/{total} steps done, {} gate runs, ${:.2} spent.",
        state.task_id,
        state.gate_results.len(),
        state.counters.spend_usd
    )
}

fn answered(state: &ExecutionState, phase_id: i64, question_id: &str) -> bool {
    state.feedback_results.iter().any(|f| f.phase_id == phase_id && f.question_id == question_id)
}

// ----------------------------------------------------------------------------------------------
// Writing: apply
// ----------------------------------------------------------------------------------------------

/// The idempotency key of `event` against `state`: the explicit key, or a hash of the event's
/// kind, subject, round (attempt, gate run, approval round…) and payload, and for a decision
/// ([`is_decision`]) its actor.
///
/// The round is that of the subject the event answers: the same event sent again after it was
/// applied derives the same key, so it is recognised as a duplicate.
pub fn idempotency_key(state: &ExecutionState, event: &Event) -> String {
    if let Some(key) = &event.idempotency_key {
        return key.clone();
    }
    let round = default_round(state, &event.kind);
    let payload = serde_json::to_string(&event.kind).unwrap_or_default();
    let mut hasher = Sha256::new();
    hasher.update(event.kind.name().as_bytes());
    hasher.update(b"\n");
    hasher.update(round.to_string().as_bytes());
    hasher.update(b"\n");
    hasher.update(payload.as_bytes());
    if is_decision(&event.kind) {
        // A human decision is its decider's: the same decision sent again by the same person
        // is a resend; the same words from someone else are a second decision.
        hasher.update(b"\n");
        hasher.update(event.actor.as_bytes());
    }
    let digest = hasher.finalize();
    format!("{}:{}", event.kind.name(), hex::encode(&digest[..16]))
}

/// Whether `kind` is a human decision (an approval, a feedback answer, a ceiling raise), whose
/// derived idempotency key includes who decided.
pub fn is_decision(kind: &EventKind) -> bool {
    matches!(
        kind,
        EventKind::ApprovalRecorded { .. } | EventKind::FeedbackRecorded { .. } | EventKind::BudgetRaised { .. }
    )
}

fn default_round(state: &ExecutionState, kind: &EventKind) -> u64 {
    let step_round = |step_id: &str| -> u64 {
        let (status, attempt) = state.result(step_id).map_or((StepStatus::Pending, 0), |r| (r.status, r.attempt));
        let open = matches!(status, StepStatus::Pending | StepStatus::InteractDispatched);
        u64::from(attempt) + u64::from(open)
    };
    match kind {
        EventKind::StepDispatched { step_id, .. } | EventKind::StepRecorded { step_id, .. } => step_round(step_id),
        EventKind::StepRetried { step_id }
        | EventKind::InteractCompleted { step_id }
        | EventKind::StepRequeued { step_id } => u64::from(state.result(step_id).map_or(0, |r| r.attempt)),
        EventKind::StepSkipped { step_id, .. } => {
            // A skipped step is pending again only after its phase's gate failed and re-dispatched it.
            let phase = state.locate(step_id).and_then(|(pi, _)| state.plan.phases.get(pi));
            let runs = phase.map_or(0, |p| state.gate_runs(p.phase_id));
            u64::from(state.result(step_id).map_or(0, |r| r.attempt)) + u64::from(runs)
        }
        EventKind::GateRecorded { phase_id, .. } => {
            let open = matches!(state.status, ExecutionStatus::GatePending | ExecutionStatus::GateFailed)
                && state.current().is_some_and(|p| p.phase_id == *phase_id);
            u64::from(state.gate_runs(*phase_id)) + u64::from(open)
        }
        EventKind::GateRetried { phase_id } => u64::from(state.gate_runs(*phase_id)),
        EventKind::ApprovalRecorded { phase_id, .. } => {
            let n = state.approval_results.iter().filter(|a| a.phase_id == *phase_id).count() as u64;
            n + u64::from(state.pending_approval_request.as_ref().is_some_and(|r| r.phase_id == *phase_id))
        }
        EventKind::InteractInput { step_id, .. } => {
            let r = state.result(step_id);
            let humans = r.map_or(0, |r| r.interaction_history.iter().filter(|t| t.role == "human").count()) as u64;
            humans + u64::from(r.is_some_and(|r| r.status == StepStatus::Interacting))
        }
        // Amending never moves the current phase, so a resent amendment derives the same key;
        // the same amendment in a later phase is a new one.
        EventKind::Amended { .. } => state.current_phase as u64,
        EventKind::CheckpointAcknowledged => u64::from(state.checkpoint.count) + u64::from(state.checkpoint.due),
        EventKind::BudgetSet { .. } => u64::from(state.budget.changes),
        // The execution's progress (results recorded): the same raise sent twice before any
        // step ran again (a double submit, a retry) is one raise, even when the first was too
        // small and the execution parked again.
        EventKind::BudgetRaised { .. } => state.counters.turn_count,
        EventKind::Forecasted { .. } => 0,
        EventKind::FeedbackRecorded { .. } | EventKind::Completed | EventKind::Cancelled { .. } => 0,
    }
}

/// Longest explicit idempotency key, characters.
pub const MAX_KEY_LEN: usize = 256;

/// An explicit key must name something: 1–256 characters, no control characters (an empty
/// key would otherwise be one key shared by every client that sends it).
fn check_key(key: &str) -> Result<(), EngineError> {
    let len = key.chars().count();
    if key.trim().is_empty() || len > MAX_KEY_LEN || key.chars().any(char::is_control) {
        let shown: String = key.chars().take(40).collect();
        return Err(EngineError::InvalidEvent(format!(
            "idempotency key {shown:?}{}: expected 1 to {MAX_KEY_LEN} characters, no control characters",
            if len > 40 { "…" } else { "" }
        )));
    }
    Ok(())
}

fn payload_fingerprint(kind: &EventKind) -> String {
    let payload = serde_json::to_string(kind).unwrap_or_default();
    hex::encode(&Sha256::digest(payload.as_bytes())[..8])
}

/// Applies one event at `now` (RFC 3339).
///
/// Validates first, then mutates: on `Err` the state is exactly as before. An event whose
/// idempotency key was already applied returns `Ok(Applied { duplicate: true, .. })` and changes
/// nothing. After a change the state is settled (phase end handled, see the module doc).
pub fn apply(state: &mut ExecutionState, event: &Event, now: &str) -> Result<Applied, EngineError> {
    if let Some(key) = &event.idempotency_key {
        check_key(key)?;
    }
    let key = idempotency_key(state, event);
    // Computed whether the key is explicit or derived: a journaled event carries its derived
    // key explicitly, and must match the same event sent again without one.
    let fingerprint = payload_fingerprint(&event.kind);
    if let Some(seen) = state.applied_keys.get(&key) {
        if *seen != fingerprint {
            return Err(EngineError::KeyConflict { key });
        }
        return Ok(Applied { key, duplicate: true });
    }
    if state.index.0.is_empty() {
        state.reindex();
    }
    check(state, &event.kind)?;
    mutate(state, event, now);
    state.applied_keys.insert(key.clone(), fingerprint);
    state.events_applied += 1;
    settle(state, now);
    Ok(Applied { key, duplicate: false })
}

/// Validation of every event kind against the state: no mutation.
fn check(state: &ExecutionState, kind: &EventKind) -> Result<(), EngineError> {
    let status = state.status;
    if status.is_final() {
        return Err(EngineError::Final { status });
    }
    let reopening = matches!(
        kind,
        EventKind::StepRetried { .. }
            | EventKind::GateRetried { .. }
            | EventKind::StepSkipped { .. }
            | EventKind::Amended { .. }
            | EventKind::Cancelled { .. }
    );
    if status == ExecutionStatus::Failed && !reopening {
        return Err(EngineError::ExecutionFailed { reason: state.failure.clone().unwrap_or_default() });
    }
    if let Some(team_check) = team::check(state, kind) {
        return team_check;
    }
    let wrong = |event: &'static str| EngineError::WrongStatus { event, status };
    match kind {
        EventKind::StepDispatched { step_id, .. } => {
            let step = current_step(state, step_id)?;
            if status != ExecutionStatus::Running {
                return Err(wrong("step_dispatched"));
            }
            if !is_ready(state, step) {
                return Err(not_ready(state, step, "it cannot be dispatched now"));
            }
            if state.checkpoint.due {
                return Err(checkpoint_due(step_id));
            }
            budget::check_dispatch(state, step_id)
        }
        EventKind::Forecasted { steps, default_usd } => budget::check_forecast(state, steps, *default_usd),
        EventKind::BudgetSet { ceiling_usd, .. } => budget::check_set(state, *ceiling_usd),
        EventKind::BudgetRaised { by_usd } => {
            budget::check_raise(state, *by_usd)?;
            if status != ExecutionStatus::BudgetExceeded {
                return Err(wrong("budget_raised"));
            }
            Ok(())
        }
        EventKind::StepRecorded { step_id, status: rec, .. } => {
            check_record_values(state, kind)?;
            let step = current_step(state, step_id)?;
            if status != ExecutionStatus::Running {
                return Err(wrong("step_recorded"));
            }
            let st = state.step_status(step_id);
            let open = st == StepStatus::Dispatched || is_ready(state, step);
            if !open {
                return Err(not_ready(state, step, "it has no attempt to record"));
            }
            if *rec == RecordStatus::BudgetStopped {
                budget::check_stopped(state, step_id)?;
            }
            if st != StepStatus::Dispatched && state.checkpoint.due {
                return Err(checkpoint_due(step_id));
            }
            if *rec == RecordStatus::Interacting && !step.interactive {
                return Err(EngineError::StepState {
                    step_id: step_id.clone(),
                    status: st.as_str().into(),
                    reason: "only interactive steps can be recorded as interacting".into(),
                });
            }
            Ok(())
        }
        EventKind::GateRecorded { phase_id, .. } => {
            ensure_current_phase(state, *phase_id)?;
            if !matches!(status, ExecutionStatus::GatePending | ExecutionStatus::GateFailed) {
                return Err(wrong("gate_recorded"));
            }
            Ok(())
        }
        EventKind::ApprovalRecorded { phase_id, result, feedback } => {
            if state.plan.phase_index(*phase_id).is_none() {
                return Err(EngineError::UnknownPhase { phase_id: *phase_id });
            }
            if *result == ApprovalDecision::ApproveWithFeedback && feedback.trim().is_empty() {
                return Err(EngineError::InvalidEvent("approve-with-feedback needs the feedback text".into()));
            }
            if status != ExecutionStatus::ApprovalPending {
                return Err(wrong("approval_recorded"));
            }
            let pending = state.pending_approval_request.as_ref().map_or(-1, |r| r.phase_id);
            if pending != *phase_id {
                return Err(EngineError::ApprovalPhaseMismatch { phase_id: *phase_id, pending });
            }
            Ok(())
        }
        EventKind::FeedbackRecorded { phase_id, question_id, chosen_index } => {
            let phase = ensure_current_phase(state, *phase_id)?;
            if status != ExecutionStatus::FeedbackPending {
                return Err(wrong("feedback_recorded"));
            }
            let q = phase.feedback_questions.iter().find(|q| &q.question_id == question_id).ok_or_else(|| {
                EngineError::UnknownQuestion { phase_id: *phase_id, question_id: question_id.clone() }
            })?;
            if answered(state, *phase_id, question_id) {
                return Err(EngineError::QuestionAnswered { phase_id: *phase_id, question_id: question_id.clone() });
            }
            if *chosen_index >= q.options.len() {
                return Err(EngineError::OptionOutOfRange {
                    question_id: question_id.clone(),
                    index: *chosen_index,
                    count: q.options.len(),
                });
            }
            Ok(())
        }
        EventKind::InteractInput { step_id, .. } | EventKind::InteractCompleted { step_id } => {
            current_step(state, step_id)?;
            let st = state.step_status(step_id);
            if st != StepStatus::Interacting {
                return Err(EngineError::StepState {
                    step_id: step_id.clone(),
                    status: st.as_str().into(),
                    reason: "it is not waiting for a human reply".into(),
                });
            }
            Ok(())
        }
        EventKind::Amended { phases, after_phase, steps, .. } => amend::check(state, phases, *after_phase, steps),
        EventKind::CheckpointAcknowledged => {
            if !state.checkpoint.due {
                return Err(wrong("checkpoint_acknowledged"));
            }
            Ok(())
        }
        EventKind::Completed => {
            if status != ExecutionStatus::Running {
                return Err(wrong("completed"));
            }
            if let Some(p) = state.current() {
                return Err(EngineError::NotFinished { phase_id: p.phase_id, name: p.name.clone() });
            }
            Ok(())
        }
        EventKind::Cancelled { .. } => Ok(()),
        EventKind::StepRetried { step_id } => {
            current_step(state, step_id)?;
            let st = state.step_status(step_id);
            if st != StepStatus::Failed {
                return Err(EngineError::StepState {
                    step_id: step_id.clone(),
                    status: st.as_str().into(),
                    reason: "only a failed step can be retried".into(),
                });
            }
            Ok(())
        }
        EventKind::StepRequeued { step_id } => {
            current_step(state, step_id)?;
            if status != ExecutionStatus::Running {
                return Err(wrong("step_requeued"));
            }
            let st = state.step_status(step_id);
            if st != StepStatus::Dispatched {
                return Err(EngineError::StepState {
                    step_id: step_id.clone(),
                    status: st.as_str().into(),
                    reason: "only a dispatched step can be requeued".into(),
                });
            }
            Ok(())
        }
        EventKind::StepSkipped { step_id, .. } => {
            // A step of a later phase may be skipped in advance; one of a done phase may not.
            let (pi, _) =
                state.locate(step_id).ok_or_else(|| EngineError::UnknownStep { step_id: step_id.to_string() })?;
            if pi < state.current_phase {
                current_step(state, step_id)?;
            }
            let st = state.step_status(step_id);
            if !matches!(st, StepStatus::Pending | StepStatus::Failed) {
                return Err(EngineError::StepState {
                    step_id: step_id.clone(),
                    status: st.as_str().into(),
                    reason: "only a pending or failed step can be skipped".into(),
                });
            }
            Ok(())
        }
        EventKind::GateRetried { phase_id } => {
            let phase = ensure_current_phase(state, *phase_id)?;
            if phase.gate.is_none() {
                return Err(EngineError::UnknownPhase { phase_id: *phase_id });
            }
            let gate_failed_execution = status == ExecutionStatus::Failed
                && state.gate_failures(*phase_id) > 0
                && !state.gate_passed(*phase_id)
                && phase.steps.iter().all(|s| state.step_status(&s.step_id).is_done());
            if status != ExecutionStatus::GateFailed && !gate_failed_execution {
                return Err(wrong("gate_retried"));
            }
            Ok(())
        }
    }
}

/// The values of a `step_recorded` (a step's or a team member's): a token count, a cost in
/// `0..=MAX_STEP_COST_USD`, a non-negative duration, `budget_stopped` only under a ceiling.
fn check_record_values(state: &ExecutionState, kind: &EventKind) -> Result<(), EngineError> {
    let EventKind::StepRecorded { step_id, status: rec, cost_usd, duration_seconds, tokens, .. } = kind else {
        return Ok(());
    };
    if *tokens > MAX_STEP_TOKENS {
        return Err(EngineError::InvalidEvent(format!(
            "step {step_id}: tokens {tokens} is not a token count (at most {MAX_STEP_TOKENS})"
        )));
    }
    if *rec == RecordStatus::BudgetStopped && state.budget.ceiling_usd.is_none() {
        return Err(EngineError::InvalidEvent(format!(
            "step {step_id}: budget_stopped needs a ceiling, and this execution has none"
        )));
    }
    if !cost_usd.is_finite() || *cost_usd < 0.0 || *cost_usd > MAX_STEP_COST_USD {
        return Err(EngineError::InvalidEvent(format!(
            "step {step_id}: cost_usd {cost_usd} is not a number between 0 and {MAX_STEP_COST_USD}"
        )));
    }
    if !duration_seconds.is_finite() || *duration_seconds < 0.0 {
        return Err(EngineError::InvalidEvent(format!(
            "step {step_id}: duration_seconds {duration_seconds} is not a non-negative number"
        )));
    }
    Ok(())
}

/// No new attempt starts while a checkpoint is due (`next_actions` offers none either).
fn checkpoint_due(step_id: &str) -> EngineError {
    EngineError::StepState {
        step_id: step_id.to_string(),
        status: StepStatus::Pending.as_str().into(),
        reason: "a checkpoint is due: acknowledge it first".into(),
    }
}

fn not_ready(state: &ExecutionState, step: &PlanStep, reason: &str) -> EngineError {
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
fn current_step<'a>(state: &'a ExecutionState, step_id: &str) -> Result<&'a PlanStep, EngineError> {
    let (pi, si) = state.locate(step_id).ok_or_else(|| EngineError::UnknownStep { step_id: step_id.to_string() })?;
    let phase = &state.plan.phases[pi];
    if pi != state.current_phase {
        return Err(EngineError::StepState {
            step_id: step_id.to_string(),
            status: state.step_status(step_id).as_str().into(),
            reason: format!(
                "it belongs to phase {}, and the current phase is {}",
                phase.phase_id,
                state.current().map_or("none (every phase is done)".to_string(), |p| p.phase_id.to_string())
            ),
        });
    }
    Ok(&phase.steps[si])
}

fn ensure_current_phase(state: &ExecutionState, phase_id: i64) -> Result<&PlanPhase, EngineError> {
    if state.plan.phase_index(phase_id).is_none() {
        return Err(EngineError::UnknownPhase { phase_id });
    }
    match state.current() {
        Some(p) if p.phase_id == phase_id => Ok(p),
        other => Err(EngineError::NotCurrentPhase { phase_id, current: other.map(|p| p.phase_id) }),
    }
}

/// Applies a checked event. Must not fail: everything that can go wrong was checked.
fn mutate(state: &mut ExecutionState, event: &Event, now: &str) {
    let steps_done = state.counters.steps_done;
    if !team::decide(state, event, now) {
        mutate_event(state, event, now);
    }
    team::after(state, &event.kind, steps_done, now);
}

fn mutate_event(state: &mut ExecutionState, event: &Event, now: &str) {
    match &event.kind {
        EventKind::StepDispatched { step_id, agent_name } => {
            let r = result_entry(state, step_id, agent_name);
            r.attempt += 1;
            r.status = StepStatus::Dispatched;
            r.agent_name = agent_name.clone();
            r.dispatched_at = now.to_string();
            r.error.clear();
            budget::reserve(state, step_id);
        }
        EventKind::StepRecorded {
            step_id,
            agent_name,
            status,
            outcome,
            files_changed,
            commit_hash,
            tokens,
            cost_usd,
            duration_seconds,
            error,
            usage: _,
        } => {
            let max_turns = state.locate(step_id).map_or(10, |(pi, si)| state.plan.phases[pi].steps[si].max_turns());
            let r = result_entry(state, step_id, agent_name);
            if matches!(r.status, StepStatus::Pending | StepStatus::InteractDispatched) {
                // A record for a ready step that was never marked dispatched counts as dispatched.
                r.attempt += 1;
                r.dispatched_at = now.to_string();
            }
            r.agent_name = agent_name.clone();
            r.completed_at = now.to_string();
            r.estimated_tokens = r.estimated_tokens.saturating_add(*tokens);
            r.cost_usd += cost_usd;
            r.duration_seconds += duration_seconds;
            r.gate_feedback = None;
            let mut became_done = false;
            match status {
                RecordStatus::Complete => {
                    r.status = StepStatus::Complete;
                    r.outcome = outcome.clone();
                    // Files of earlier complete attempts stay: their commits are on the branch
                    // (a gate re-run that changes nothing must not empty `{files}`).
                    for f in files_changed {
                        if !r.files_changed.contains(f) {
                            r.files_changed.push(f.clone());
                        }
                    }
                    r.commit_hash = commit_hash.clone();
                    r.error.clear();
                    (r.gate_additions, r.rejected_gate_additions) = gate_additions::parse(outcome);
                    r.knowledge_gaps = signals::knowledge_gaps(outcome);
                    r.deviations = signals::deviations(outcome);
                    r.scope_expansions = signals::scope_expansions(outcome);
                    became_done = true;
                }
                RecordStatus::Failed => {
                    r.status = StepStatus::Failed;
                    r.outcome = outcome.clone();
                    r.knowledge_gaps = signals::knowledge_gaps(outcome);
                    r.deviations = signals::deviations(outcome);
                    r.error = if error.is_empty() { "step failed".into() } else { error.clone() };
                }
                RecordStatus::BudgetStopped => {
                    // Its spend counts; the step runs again (a new attempt) after a raise.
                    r.status = StepStatus::Pending;
                    r.outcome = outcome.clone();
                    r.error = if error.is_empty() { "stopped at the budget ceiling".into() } else { error.clone() };
                }
                RecordStatus::Interacting => {
                    let agent_turns = r.interaction_history.iter().filter(|t| t.role == "agent").count() as u32;
                    let (text, finished) = strip_interact_complete(outcome);
                    r.interaction_history.push(InteractionTurn {
                        role: "agent".into(),
                        content: text.clone(),
                        timestamp: now.to_string(),
                        turn_number: agent_turns + 1,
                    });
                    if !files_changed.is_empty() {
                        r.files_changed.extend(files_changed.iter().cloned());
                    }
                    if !commit_hash.is_empty() {
                        r.commit_hash = commit_hash.clone();
                    }
                    if finished || agent_turns + 1 >= max_turns {
                        r.status = StepStatus::Complete;
                        r.outcome =
                            if finished { text } else { format!("{text}\n[Auto-completed: max_turns reached]") };
                        became_done = true;
                    } else {
                        r.status = StepStatus::Interacting;
                        r.outcome = text;
                    }
                }
            }
            state.counters.tokens = state.counters.tokens.saturating_add(*tokens);
            state.counters.spend_usd += cost_usd;
            state.counters.turn_count += 1;
            state.checkpoint.turns_since += 1;
            state.checkpoint.tokens_since = state.checkpoint.tokens_since.saturating_add(*tokens);
            if became_done {
                state.counters.steps_done += 1;
            }
            budget::release(state, step_id);
            if *status == RecordStatus::BudgetStopped {
                budget::stopped(state, step_id, *cost_usd);
            } else {
                budget::overshoot_warning(state, step_id);
            }
            budget::tier_warning(state);
            goal::take_verdict(state, step_id, now);
        }
        EventKind::Forecasted { steps, default_usd } => {
            state.budget.forecasts.clone_from(steps);
            state.budget.default_forecast_usd = *default_usd;
            state.budget.forecast_recorded = true;
        }
        EventKind::BudgetSet { ceiling_usd, source } => {
            state.budget.ceiling_usd = *ceiling_usd;
            state.budget.source.clone_from(source);
            budget::ceiling_changed(state);
        }
        EventKind::BudgetRaised { by_usd } => {
            let ceiling = state.budget.ceiling_usd.unwrap_or(state.counters.spend_usd);
            state.budget.ceiling_usd = Some(ceiling + by_usd);
            state.budget.raises.push(crate::model::budget::BudgetRaise {
                by_usd: *by_usd,
                actor: event.actor.clone(),
                at: now.to_string(),
            });
            budget::ceiling_changed(state);
        }
        EventKind::GateRecorded { phase_id, passed, output, command, exit_code } => {
            let phase_index = state.current_phase;
            let (gate_type, planned) = state.plan.phases[phase_index]
                .gate
                .as_ref()
                .map_or((String::new(), String::new()), |g| (g.gate_type.clone(), g.command.clone()));
            let attempt = state.gate_runs(*phase_id) + 1;
            state.gate_results.push(GateResult {
                phase_id: *phase_id,
                gate_type,
                passed: *passed,
                output: output.clone(),
                command: command.clone().unwrap_or(planned),
                exit_code: *exit_code,
                checked_at: now.to_string(),
                attempt,
            });
            if *passed {
                state.status = ExecutionStatus::Running;
            } else {
                gate_failed(state, *phase_id, output, now);
            }
        }
        EventKind::ApprovalRecorded { phase_id, result, feedback } => {
            let preflight = state.pending_approval_request.take().is_some_and(|r| r.preflight);
            push_approval_result(state, event, now, preflight, String::new());
            match result {
                ApprovalDecision::Approve => state.status = ExecutionStatus::Running,
                ApprovalDecision::Reject => {
                    let by = if event.actor.is_empty() { String::new() } else { format!(" by {}", event.actor) };
                    let why = if feedback.is_empty() { String::new() } else { format!(": {feedback}") };
                    fail(state, format!("phase {phase_id} was rejected{by}{why}; amend the plan to continue"), now);
                }
                ApprovalDecision::ApproveWithFeedback => {
                    state.status = ExecutionStatus::Running;
                    if preflight {
                        amend::note_preflight_feedback(state, *phase_id, feedback, now);
                    } else {
                        amend::insert_remediation(state, *phase_id, feedback, now);
                    }
                }
            }
        }
        EventKind::FeedbackRecorded { phase_id, question_id, chosen_index } => {
            amend::insert_feedback_dispatch(state, *phase_id, question_id, *chosen_index, now);
            let phase = &state.plan.phases[state.current_phase];
            let all = phase.feedback_questions.iter().all(|q| answered(state, *phase_id, &q.question_id));
            if all {
                state.status = ExecutionStatus::Running;
            }
        }
        EventKind::InteractInput { step_id, input } => {
            if let Some(r) = state.step_results.get_mut(step_id) {
                let humans = r.interaction_history.iter().filter(|t| t.role == "human").count() as u32;
                r.interaction_history.push(InteractionTurn {
                    role: "human".into(),
                    content: input.clone(),
                    timestamp: now.to_string(),
                    turn_number: humans + 1,
                });
                r.status = StepStatus::InteractDispatched;
            }
        }
        EventKind::InteractCompleted { step_id } => {
            if let Some(r) = state.step_results.get_mut(step_id) {
                r.status = StepStatus::Complete;
                r.completed_at = now.to_string();
                state.counters.steps_done += 1;
            }
        }
        EventKind::Amended { description, trigger, phases, after_phase, steps } => {
            budget::reconsider(state);
            amend::apply(state, description, trigger, phases, *after_phase, steps, now);
            if state.status == ExecutionStatus::Failed {
                reopen(state);
            }
        }
        EventKind::CheckpointAcknowledged => {
            let count = state.checkpoint.count + 1;
            state.checkpoint = CheckpointMarks { count, ..CheckpointMarks::default() };
        }
        EventKind::Completed => {
            state.status = ExecutionStatus::Complete;
            state.completed_at = now.to_string();
        }
        EventKind::Cancelled { reason } => {
            state.status = ExecutionStatus::Cancelled;
            state.pending_approval_request = None;
            let by = if event.actor.is_empty() { String::new() } else { format!(" by {}", event.actor) };
            let why = if reason.is_empty() { String::new() } else { format!(": {reason}") };
            state.failure = Some(format!("cancelled{by}{why}"));
            state.completed_at = now.to_string();
        }
        EventKind::StepRetried { step_id } => {
            if let Some(r) = state.step_results.get_mut(step_id) {
                r.status = StepStatus::Pending;
                r.error.clear();
            }
            reopen(state);
        }
        EventKind::StepRequeued { step_id } => {
            if let Some(r) = state.step_results.get_mut(step_id) {
                r.status = StepStatus::Pending;
            }
            budget::release(state, step_id);
        }
        EventKind::StepSkipped { step_id, reason } => {
            let r = result_entry(state, step_id, "");
            r.status = StepStatus::Skipped;
            r.outcome = if reason.is_empty() { "skipped by an operator".into() } else { format!("skipped: {reason}") };
            r.completed_at = now.to_string();
            state.counters.steps_done += 1;
            reopen(state);
            budget::reconsider(state);
        }
        EventKind::GateRetried { phase_id } => {
            let failures = state.gate_failures(*phase_id);
            *state.gate_failures_forgiven.entry(*phase_id).or_insert(0) += failures;
            state.failure = None;
            state.completed_at.clear();
            state.status = ExecutionStatus::GatePending;
        }
    }
}

fn reopen(state: &mut ExecutionState) {
    if state.status == ExecutionStatus::Failed {
        state.status = ExecutionStatus::Running;
        state.failure = None;
        state.completed_at.clear();
    }
}

fn result_entry<'a>(state: &'a mut ExecutionState, step_id: &str, agent_name: &str) -> &'a mut StepResult {
    state.step_results.entry(step_id.to_string()).or_insert_with(|| StepResult {
        step_id: step_id.to_string(),
        agent_name: agent_name.to_string(),
        status: StepStatus::Pending,
        attempt: 0,
        outcome: String::new(),
        files_changed: Vec::new(),
        commit_hash: String::new(),
        estimated_tokens: 0,
        cost_usd: 0.0,
        duration_seconds: 0.0,
        error: String::new(),
        dispatched_at: String::new(),
        completed_at: String::new(),
        gate_feedback: None,
        interaction_history: Vec::new(),
        gate_additions: Vec::new(),
        rejected_gate_additions: Vec::new(),
        knowledge_gaps: Vec::new(),
        deviations: Vec::new(),
        scope_expansions: Vec::new(),
        team_conflicts: Vec::new(),
    })
}

fn strip_interact_complete(outcome: &str) -> (String, bool) {
    let mut finished = false;
    let kept: Vec<&str> = outcome
        .lines()
        .filter(|l| {
            if l.trim() == INTERACT_COMPLETE {
                finished = true;
                false
            } else {
                true
            }
        })
        .collect();
    let mut text = kept.join("\n");
    if let Some(stripped) = text.trim_end().strip_suffix(INTERACT_COMPLETE) {
        finished = true;
        text = stripped.trim_end().to_string();
    }
    (text.trim().to_string(), finished)
}

/// A failed gate: the first failure of a phase re-dispatches the phase's last step with the
/// gate output; later failures re-run the gate until the cap, then fail the execution.
fn gate_failed(state: &mut ExecutionState, phase_id: i64, output: &str, now: &str) {
    let failures = state.gate_failures(phase_id);
    let phase = &state.plan.phases[state.current_phase];
    let last = phase.steps.last().map(|s| s.step_id.clone());
    if failures >= MAX_GATE_FAILURES {
        let gate_type = phase.gate.as_ref().map_or("", |g| g.gate_type.as_str()).to_string();
        fail(
            state,
            format!("gate '{gate_type}' of phase {phase_id} failed {failures} times (cap {MAX_GATE_FAILURES})"),
            now,
        );
        return;
    }
    match last {
        Some(step_id) if !state.gate_redispatched.contains(&phase_id) => {
            state.gate_redispatched.insert(phase_id);
            let command = phase.gate.as_ref().map_or("", |g| g.command.as_str()).to_string();
            if let Some(r) = state.step_results.get_mut(&step_id) {
                if r.status.is_done() {
                    state.counters.steps_done = state.counters.steps_done.saturating_sub(1);
                }
                r.status = StepStatus::Pending;
                r.gate_feedback = Some(format!("$ {command}\n{output}"));
            }
            team::gate_redispatch(state, &step_id, now);
            state.status = ExecutionStatus::Running;
        }
        _ => state.status = ExecutionStatus::GateFailed,
    }
}

/// Keeps the decision an `ApprovalRecorded` event carries in `approval_results` (any other
/// event: nothing), with whether it answered the preflight approval and the team step whose
/// conflict it decided (empty for a phase's approval).
pub(crate) fn push_approval_result(
    state: &mut ExecutionState,
    event: &Event,
    now: &str,
    preflight: bool,
    team_step: String,
) {
    let EventKind::ApprovalRecorded { phase_id, result, feedback } = &event.kind else { return };
    state.approval_results.push(ApprovalResult {
        phase_id: *phase_id,
        result: *result,
        feedback: feedback.clone(),
        actor: event.actor.clone(),
        decided_at: now.to_string(),
        preflight,
        team_step,
    });
}
fn fail(state: &mut ExecutionState, reason: String, now: &str) {
    state.status = ExecutionStatus::Failed;
    state.failure = Some(reason);
    state.completed_at = now.to_string();
}

/// Handles the end of the current phase (approval → feedback → gate → advance), repeatedly,
/// and turns a failed step into a failed execution once nothing is in flight.
fn settle(state: &mut ExecutionState, now: &str) {
    loop {
        if state.status != ExecutionStatus::Running || team::escalate(state, now) {
            return;
        }
        let Some(phase) = state.plan.phases.get(state.current_phase) else { return };
        let phase_id = phase.phase_id;
        let mut failed = None;
        let mut all_done = true;
        let mut in_flight = false;
        for s in &phase.steps {
            let st = state.step_status(&s.step_id);
            if st == StepStatus::Failed && failed.is_none() {
                failed = Some(s.step_id.clone());
            }
            if team::in_flight(state, s) {
                in_flight = true;
            }
            if !st.is_done() {
                all_done = false;
            }
        }
        if let Some(step_id) = failed {
            if !in_flight {
                let error = state.result(&step_id).map(|r| r.error.clone()).unwrap_or_default();
                fail(state, format!("step {step_id} failed: {error}"), now);
            }
            return;
        }
        if !all_done {
            if !in_flight {
                let ready: Vec<String> = phase
                    .steps
                    .iter()
                    .flat_map(|s| {
                        if s.team.is_empty() {
                            is_ready(state, s).then(|| s.step_id.clone()).into_iter().collect()
                        } else {
                            team::ready(state, s).into_iter().map(|m| m.step_id).collect::<Vec<_>>()
                        }
                    })
                    .collect();
                let interacting = phase.steps.iter().any(|s| state.step_status(&s.step_id) == StepStatus::Interacting);
                budget::park_if_blocked(state, &ready, interacting);
            }
            return;
        }
        let approved = state.approval_results.iter().any(|a| {
            a.phase_id == phase_id
                && !a.preflight
                && a.team_step.is_empty()
                && matches!(a.result, ApprovalDecision::Approve | ApprovalDecision::ApproveWithFeedback)
        });
        if phase.approval_required && !approved {
            state.status = ExecutionStatus::ApprovalPending;
            state.pending_approval_request = Some(PendingApprovalRequest {
                phase_id,
                requested_at: now.to_string(),
                preflight: false,
                team_step: String::new(),
            });
            return;
        }
        if phase.feedback_questions.iter().any(|q| !answered(state, phase_id, &q.question_id)) {
            state.status = ExecutionStatus::FeedbackPending;
            return;
        }
        if phase.gate.is_some() && !state.gate_passed(phase_id) {
            state.status = ExecutionStatus::GatePending;
            return;
        }
        amend::append_scope_expansions(state, phase_id, now);
        if goal::request_evaluation(state) {
            continue;
        }
        advance(state);
    }
}

/// The one place a phase advances.
fn advance(state: &mut ExecutionState) {
    state.current_phase += 1;
    if state.current_phase >= state.plan.phases.len() {
        return;
    }
    let marks = &mut state.checkpoint;
    marks.phases_since += 1;
    let reason = if marks.phases_since >= CHECKPOINT_PHASE_INTERVAL {
        Some(format!("{} phases since the last checkpoint", marks.phases_since))
    } else if marks.turns_since >= CHECKPOINT_TURN_THRESHOLD {
        Some(format!("{} results since the last checkpoint", marks.turns_since))
    } else if marks.tokens_since >= CHECKPOINT_TOKEN_THRESHOLD {
        Some(format!("{} tokens since the last checkpoint", marks.tokens_since))
    } else {
        None
    };
    if let Some(reason) = reason {
        marks.due = true;
        marks.reason = reason;
    }
}
