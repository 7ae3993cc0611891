//! The end of the current phase, after every event: a failed step fails the execution once
//! nothing is in flight; a finished phase asks for its approval, then its feedback answers,
//! then its gate, then a goal evaluation, and advances; an advance may make a checkpoint due.
//! This is the one place a phase advances. It keeps the current phase's [`PhaseTally`] across
//! events, so settling costs the same in a phase of 5 steps and of 5,000. This module never
//! does IO.

use crate::engine::edits::fail;
use crate::engine::guards::{answered, is_ready};
use crate::engine::{
    amend, budget, goal, team, CHECKPOINT_PHASE_INTERVAL, CHECKPOINT_TOKEN_THRESHOLD, CHECKPOINT_TURN_THRESHOLD,
};
use crate::model::event::EventKind;
use crate::model::plan::PlanPhase;
use crate::model::state::{
    ApprovalDecision, ExecutionState, ExecutionStatus, PendingApprovalRequest, PhaseTally, StepStatus,
};

/// Handles the end of the current phase (approval → feedback → gate → advance), repeatedly,
/// and turns a failed step into a failed execution once nothing is in flight.
pub(crate) fn settle(state: &mut ExecutionState, now: &str) {
    loop {
        if state.status != ExecutionStatus::Running {
            return;
        }
        // A tallied phase has no team step, so no team conflict to escalate.
        let tally = tally(state);
        if tally.is_none() && team::escalate(state, now) {
            return;
        }
        let Some(phase) = state.plan.phases.get(state.current_phase) else { return };
        let phase_id = phase.phase_id;
        let (failed, all_done, in_flight) = match tally {
            Some(t) => {
                let failed = if t.failed > 0 {
                    phase.steps.iter().find(|s| state.step_status(&s.step_id) == StepStatus::Failed)
                } else {
                    None
                };
                (failed.map(|s| s.step_id.clone()), t.not_done == 0, t.dispatched > 0)
            }
            None => scan(state, phase),
        };
        if let Some(step_id) = failed {
            if !in_flight {
                let error = state.result(&step_id).map(|r| r.error.clone()).unwrap_or_default();
                fail(state, format!("step {step_id} failed: {error}"), now);
            }
            return;
        }
        if !all_done {
            let interacting = match tally {
                Some(t) => t.interacting > 0,
                None => phase.steps.iter().any(|s| state.step_status(&s.step_id) == StepStatus::Interacting),
            };
            // Only a budget ceiling can park a phase that still has steps to run.
            if !in_flight && !interacting && state.budget.ceiling_usd.is_some() {
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
                gate: false,
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
        state.index.2 = None;
        if goal::request_evaluation(state) {
            continue;
        }
        advance(state);
    }
}

/// The one place a phase advances.
fn advance(state: &mut ExecutionState) {
    state.index.2 = None;
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

/// The first failed step of `phase`, whether any of its steps is in flight, and whether all
/// are done: the scan of every step (and team unit) that a tally saves.
fn scan(state: &ExecutionState, phase: &PlanPhase) -> (Option<String>, bool, bool) {
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
    (failed, all_done, in_flight)
}

/// The current phase's tally: the one kept while it still counts this phase, else a fresh
/// count, kept for the next events. None (and none kept) for a phase with team steps or in a
/// plan with a completion condition, whose events change other steps than the one they name.
fn tally(state: &mut ExecutionState) -> Option<PhaseTally> {
    let index = state.current_phase;
    let phase = state.plan.phases.get(index)?;
    if let Some(t) = state.current_tally() {
        return Some(t);
    }
    // A reviewer step's verdict may send another step back (a failed review gate).
    if goal::condition(&state.plan).is_some()
        || phase.steps.iter().any(|s| !s.team.is_empty() || crate::engine::review::is_review(s))
    {
        state.index.2 = None;
        return None;
    }
    let t = count(state, index, phase);
    state.index.2 = Some(t);
    Some(t)
}

/// A fresh tally of `phase` (at `index` in the plan): every step starts pending, and each step
/// result of the phase moves its step to its status. Reads the results once, each located by
/// the step index (a hash lookup), rather than looking up every step of the phase in the
/// results (a tree search each: 5,000 of them when a one-shot process loads a 5,000-step
/// phase).
fn count(state: &ExecutionState, index: usize, phase: &PlanPhase) -> PhaseTally {
    let steps = phase.steps.len();
    let mut t =
        PhaseTally { phase: index, steps, failed: 0, dispatched: 0, not_done: 0, interacting: 0, done_prefix: 0 };
    t.count(StepStatus::Pending, isize::try_from(steps).unwrap_or(isize::MAX));
    let mut done = vec![false; steps];
    for (step_id, result) in &state.step_results {
        let Some((_, si)) = state.locate(step_id).filter(|(pi, si)| *pi == index && *si < steps) else { continue };
        t.count(StepStatus::Pending, -1);
        // The status alone: a result loaded from a snapshot is not decoded for it.
        t.count(result.status(), 1);
        done[si] = result.status().is_done();
    }
    t.done_prefix = done.iter().position(|d| !d).unwrap_or(steps);
    t
}

/// The position of the first step of `phase` at or after `from` that is not done (complete or
/// skipped), or the number of its steps.
fn done_from(state: &ExecutionState, phase: &PlanPhase, from: usize) -> usize {
    let open = phase.steps.iter().skip(from).position(|s| !state.step_status(&s.step_id).is_done());
    open.map_or(phase.steps.len(), |at| from + at)
}

/// Called before an event is applied: the step whose status it changes and that status, when
/// the tally can follow the change (the dispatch or record of an ordinary step of the tallied
/// phase); for any other event the tally is dropped and the next settle counts again.
pub(crate) fn before_event(state: &mut ExecutionState, kind: &EventKind) -> Option<(String, StepStatus)> {
    let step_id = match kind {
        EventKind::StepDispatched { step_id, .. } | EventKind::StepRecorded { step_id, .. } => Some(step_id),
        _ => None,
    };
    let followed = step_id
        .zip(state.index.2)
        .filter(|(id, t)| state.locate(id).is_some_and(|(pi, _)| pi == t.phase) && state.team_parent(id).is_none());
    match followed {
        Some((id, _)) => Some((id.clone(), state.step_status(id))),
        None => {
            state.index.2 = None;
            None
        }
    }
}

/// Called after the event was applied: moves its step in the tally from the status it had to
/// the one it has.
pub(crate) fn after_event(state: &mut ExecutionState, followed: Option<(String, StepStatus)>) {
    let Some((id, before)) = followed else { return };
    let after = state.step_status(&id);
    let (Some(mut t), Some((_, at))) = (state.index.2, state.locate(&id)) else { return };
    t.count(before, -1);
    t.count(after, 1);
    if !after.is_done() {
        t.done_prefix = t.done_prefix.min(at);
    } else if at == t.done_prefix {
        if let Some(phase) = state.plan.phases.get(t.phase) {
            t.done_prefix = done_from(state, phase, at);
        }
    }
    state.index.2 = Some(t);
}

/// True when the kept tally (if any) is what a fresh count of its phase gives (tests check it
/// after every event).
#[cfg(test)]
pub(crate) fn tally_is_true(state: &ExecutionState) -> bool {
    let Some(kept) = state.index.2 else { return true };
    let Some(phase) = state.plan.phases.get(kept.phase) else { return false };
    // Counted step by step, independently of `count`'s pass over the results.
    let mut t = PhaseTally { phase: kept.phase, steps: phase.steps.len(), ..kept };
    (t.failed, t.dispatched, t.not_done, t.interacting) = (0, 0, 0, 0);
    for s in &phase.steps {
        t.count(state.step_status(&s.step_id), 1);
    }
    t.done_prefix = done_from(state, phase, 0);
    t == kept && count(state, kept.phase, phase) == kept
}
