//! The small changes of the state several event kinds share: a step's result entry (created on
//! first use), reopening a failed execution, failing it, keeping an approval decision, and
//! reading a judging step's verdict. Used by `mutate`, `team`, `goal`, `review` and `settle`.
//! This module never does IO.

use crate::model::event::{Event, EventKind};
use crate::model::lazy_result::LazyResult;
use crate::model::state::{ApprovalResult, ExecutionState, ExecutionStatus, StepResult, StepStatus};

/// A failed execution runs again (a retried or skipped step, an amendment; after a rejection
/// only an amendment, see `check`); any other: unchanged.
pub(crate) fn reopen(state: &mut ExecutionState) {
    if state.status == ExecutionStatus::Failed {
        state.status = ExecutionStatus::Running;
        state.failure = None;
        state.rejected_phase = None;
        state.completed_at.clear();
    }
}

/// The result of `step_id`, created pending (attempt 0, agent `agent_name`) on first use.
pub(crate) fn result_entry<'a>(state: &'a mut ExecutionState, step_id: &str, agent_name: &str) -> &'a mut StepResult {
    state.step_results.entry(step_id.to_string()).or_insert_with(|| {
        LazyResult::new(StepResult {
            step_id: step_id.to_string(),
            agent_name: agent_name.to_string(),
            status: StepStatus::Pending,
            attempt: 0,
            outcome: String::new(),
            files_changed: Vec::new(),
            commit_hash: String::new(),
            estimated_tokens: 0,
            cost_usd: 0.0,
            attempts_usd: Vec::new(),
            token_kinds: Default::default(),
            cost_estimated: false,
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
    })
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

/// Fails the execution at `now`, for `reason`.
pub(crate) fn fail(state: &mut ExecutionState, reason: String, now: &str) {
    state.status = ExecutionStatus::Failed;
    state.failure = Some(reason);
    state.completed_at = now.to_string();
}

/// The verdict of complete judging step `step_id` (a goal evaluator, a reviewer), read from
/// its outcome by `parse`, together with its agent. A judge speaks through its verdict only:
/// its gate additions, scope expansions and knowledge gaps are dropped. A verdict `parse`
/// refuses (`Err(why)`) fails the step with `invalid <what> verdict: <why>` and how to ask
/// `judge` again, takes back its count in `steps_done`, and gives `None`; so does a step with
/// no result.
pub(crate) fn take_judgement<T>(
    state: &mut ExecutionState,
    step_id: &str,
    what: &str,
    judge: &str,
    parse: impl FnOnce(&str) -> Result<T, String>,
) -> Option<(T, String)> {
    let task_id = state.task_id.clone();
    let result = state.step_results.get_mut(step_id)?;
    result.gate_additions.clear();
    result.rejected_gate_additions.clear();
    result.scope_expansions.clear();
    result.knowledge_gaps.clear();
    match parse(&result.outcome) {
        Ok(v) => Some((v, result.agent_name.clone())),
        Err(why) => {
            result.status = StepStatus::Failed;
            result.error = format!(
                "invalid {what} verdict: {why}; `baton execute retry-step --task-id {task_id} --step-id {step_id}` \
                 asks the {judge} again"
            );
            state.counters.steps_done = state.counters.steps_done.saturating_sub(1);
            None
        }
    }
}
