//! The end of the current phase, after every event: a failed step fails the execution once
//! nothing is in flight; a finished phase asks for its approval, then its feedback answers,
//! then its gate, then a goal evaluation, and advances; an advance may make a checkpoint due.
//! This is the one place a phase advances. This module never does IO.

use crate::engine::edits::fail;
use crate::engine::guards::{answered, is_ready};
use crate::engine::{
    amend, budget, goal, team, CHECKPOINT_PHASE_INTERVAL, CHECKPOINT_TOKEN_THRESHOLD, CHECKPOINT_TURN_THRESHOLD,
};
use crate::model::state::{ApprovalDecision, ExecutionState, ExecutionStatus, PendingApprovalRequest, StepStatus};

/// Handles the end of the current phase (approval → feedback → gate → advance), repeatedly,
/// and turns a failed step into a failed execution once nothing is in flight.
pub(crate) fn settle(state: &mut ExecutionState, now: &str) {
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
        if phase.gate.is_some() && !state.gate_cleared(phase_id) {
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
