//! Validation of an event against the state, before anything changes: the execution's status,
//! the subject the event names (step, phase, question) and its values, one rule set per event
//! kind; a team member's events go to `team`. A refused event is an [`EngineError`] and leaves
//! the state untouched. This module never mutates the state and never does IO.

use crate::engine::guards::{
    answered, check_quota_values, check_record_values, checkpoint_due, current_step, ensure_current_phase, is_ready,
    not_ready,
};
use crate::engine::{amend, budget, gates, team, EngineError};
use crate::model::action::GateCheck;
use crate::model::event::{EventKind, RecordStatus};
use crate::model::text::cut;

/// Checks one `ci_checked` event may report, at most.
pub(crate) const MAX_CI_CHECKS: usize = 500;
use crate::model::state::{ApprovalDecision, ExecutionState, ExecutionStatus, StepStatus};

/// Validation of every event kind against the state: no mutation.
pub(crate) fn check(state: &ExecutionState, kind: &EventKind) -> Result<(), EngineError> {
    let status = state.status;
    if matches!(
        kind,
        EventKind::RemediationStarted { .. }
            | EventKind::RemediationPushed { .. }
            | EventKind::RemediationParked { .. }
            | EventKind::ReviewQueued { .. }
    ) {
        return crate::engine::remediate::check(state, kind);
    }
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
    if let (ExecutionStatus::Failed, Some(phase_id)) = (status, state.rejected_phase) {
        // A rejection stands: a retried or skipped step would reopen the execution and ask for
        // the rejected approval again, of anyone. Only an amendment (or a cancel) goes on.
        if !matches!(kind, EventKind::Amended { .. } | EventKind::Cancelled { .. }) {
            return Err(EngineError::RejectionStands { phase_id, reason: state.failure.clone().unwrap_or_default() });
        }
    }
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
        EventKind::GateRecorded { phase_id, passed, .. } => {
            let phase = ensure_current_phase(state, *phase_id)?;
            if !matches!(status, ExecutionStatus::GatePending | ExecutionStatus::GateFailed) {
                return Err(wrong("gate_recorded"));
            }
            // A gate with nothing to run checks nothing: it is skipped, never passed (a
            // failure may still be recorded: a human may find the phase wanting).
            if *passed {
                match gates::plan(state, phase).check {
                    Some(GateCheck::ForgeCi) if state.ci_wait.as_ref().is_none_or(|w| w.phase_id != *phase_id) => {
                        return Err(EngineError::invalid_field(
                            "passed",
                            format!(
                            "the ci gate of phase {phase_id} is decided by the forge's checks: record `ci_started` \
                             for the pushed commit first; a pass without them would check nothing"
                        ),
                        ));
                    }
                    Some(GateCheck::Reviewer) => {
                        return Err(EngineError::invalid_field(
                            "passed",
                            format!(
                                "the review gate of phase {phase_id} is decided by the reviewer: record \
                             `review_requested` (a reviewer agent) or `gate_approval_requested` (a human)"
                            ),
                        ));
                    }
                    _ => {}
                }
                if let Some(reason) = gates::plan(state, phase).skip_reason {
                    return Err(EngineError::invalid_field(
                        "passed",
                        format!(
                            "the gate of phase {phase_id} has nothing to run ({reason}): record it as skipped; a pass \
                         would say something was checked"
                        ),
                    ));
                }
            }
            Ok(())
        }
        EventKind::GateSkipped { phase_id, .. } => {
            let phase = ensure_current_phase(state, *phase_id)?;
            if !matches!(status, ExecutionStatus::GatePending | ExecutionStatus::GateFailed) {
                return Err(wrong("gate_skipped"));
            }
            let run = gates::plan(state, phase);
            if let Some(check) = run.check {
                let who = match check {
                    GateCheck::ForgeCi => "the forge's CI checks (record `ci_started`)",
                    GateCheck::Reviewer => "the reviewer (record `review_requested` or `gate_approval_requested`)",
                };
                return Err(EngineError::invalid_event(format!(
                    "the gate of phase {phase_id} has no command but is checked by {who}; it is never skipped"
                )));
            }
            if run.skip_reason.is_none() {
                let what = if run.command.is_empty() { run.additions.join("; ") } else { run.command };
                return Err(EngineError::invalid_event(format!(
                    "the gate of phase {phase_id} has something to run ({what}): run it and record pass or fail; \
                     only a gate with nothing to run is skipped"
                )));
            }
            Ok(())
        }
        EventKind::ApprovalRecorded { phase_id, result, feedback } => {
            if state.plan.phase_index(*phase_id).is_none() {
                return Err(EngineError::UnknownPhase { phase_id: *phase_id });
            }
            if *result == ApprovalDecision::ApproveWithFeedback && feedback.trim().is_empty() {
                return Err(EngineError::invalid_field("feedback", "approve-with-feedback needs the feedback text"));
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
        EventKind::QuotaWait { step_id, .. } => {
            let step = current_step(state, step_id)?;
            if status != ExecutionStatus::Running {
                return Err(wrong("quota_wait"));
            }
            check_quota_values(kind)?;
            let st = state.step_status(step_id);
            if st != StepStatus::Dispatched && !is_ready(state, step) {
                return Err(not_ready(state, step, "only a dispatched or ready step can wait for quota"));
            }
            Ok(())
        }
        EventKind::QuotaResumed { step_id } => {
            current_step(state, step_id)?;
            if !state.quota_waits.iter().any(|w| w.step_id == *step_id) {
                return Err(EngineError::StepState {
                    step_id: step_id.clone(),
                    status: state.step_status(step_id).as_str().into(),
                    reason: "it does not wait for quota".into(),
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
        EventKind::CiStarted { phase_id, sha, until } => {
            let phase = ensure_current_phase(state, *phase_id)?;
            if !matches!(status, ExecutionStatus::GatePending | ExecutionStatus::GateFailed) {
                return Err(wrong("ci_started"));
            }
            if gates::plan(state, phase).check != Some(GateCheck::ForgeCi) {
                return Err(EngineError::invalid_event(format!(
                    "the gate of phase {phase_id} is not a ci gate without a command: nothing waits for the forge's checks"
                )));
            }
            if let Some(w) = &state.ci_wait {
                return Err(EngineError::invalid_event(format!(
                    "the ci gate of phase {} already waits for the checks of {}",
                    w.phase_id, w.sha
                )));
            }
            if sha.len() < 7 || sha.len() > 64 || !sha.chars().all(|c| c.is_ascii_hexdigit()) {
                return Err(EngineError::invalid_field(
                    "sha",
                    format!("ci_started: sha {:?} is not a commit id", cut(sha, 80)),
                ));
            }
            if until.trim().is_empty() {
                return Err(EngineError::invalid_field("until", "ci_started needs its `until` time"));
            }
            Ok(())
        }
        EventKind::CiChecked { phase_id, sha, checks } => {
            ensure_current_phase(state, *phase_id)?;
            let Some(w) = state.ci_wait.as_ref().filter(|w| w.phase_id == *phase_id) else {
                return Err(EngineError::invalid_event(format!(
                    "ci_checked: the gate of phase {phase_id} does not wait for CI"
                )));
            };
            if w.sha != *sha {
                return Err(EngineError::invalid_field(
                    "sha",
                    format!("ci_checked: the ci gate of phase {phase_id} waits for {}, not {}", w.sha, cut(sha, 80)),
                ));
            }
            if checks.len() > MAX_CI_CHECKS || checks.iter().any(|c| c.name.trim().is_empty()) {
                return Err(EngineError::invalid_field(
                    "checks",
                    format!("ci_checked: expected at most {MAX_CI_CHECKS} checks, each with a name"),
                ));
            }
            Ok(())
        }
        // Checked before the status (a completed execution accepts them).
        EventKind::RemediationStarted { .. }
        | EventKind::RemediationPushed { .. }
        | EventKind::RemediationParked { .. }
        | EventKind::ReviewQueued { .. } => crate::engine::remediate::check(state, kind),
        EventKind::ReviewRequested { phase_id, .. } | EventKind::GateApprovalRequested { phase_id } => {
            let name = kind.name();
            let phase = ensure_current_phase(state, *phase_id)?;
            if !matches!(status, ExecutionStatus::GatePending | ExecutionStatus::GateFailed) {
                return Err(wrong(name));
            }
            if gates::plan(state, phase).check != Some(GateCheck::Reviewer) {
                return Err(EngineError::invalid_event(format!(
                    "{name}: the gate of phase {phase_id} is not a review gate without a command"
                )));
            }
            if let EventKind::ReviewRequested { agent_name, .. } = kind {
                if let Some(why) = crate::engine::unsafe_id_reason(agent_name) {
                    return Err(EngineError::invalid_field(
                        "agent_name",
                        format!("review_requested: agent_name {why}"),
                    ));
                }
            }
            Ok(())
        }
        EventKind::GateRetried { phase_id } => {
            let phase = ensure_current_phase(state, *phase_id)?;
            if phase.gate.is_none() {
                return Err(EngineError::invalid_event(format!("phase {phase_id} has no gate to retry")));
            }
            let gate_failed_execution = status == ExecutionStatus::Failed
                && state.gate_failures(*phase_id) > 0
                && !state.gate_cleared(*phase_id)
                && phase.steps.iter().all(|s| state.step_status(&s.step_id).is_done());
            if status != ExecutionStatus::GateFailed && !gate_failed_execution {
                return Err(wrong("gate_retried"));
            }
            Ok(())
        }
    }
}
