//! Applying a checked event to the state: one change per event kind (a team's decision and
//! member bookkeeping go to `team`). It must not fail: everything that can go wrong was
//! refused by `check`. The end of a phase is `settle`'s, after it. This module never does IO.

use crate::engine::edits::{fail, push_approval_result, reopen, result_entry};
use crate::engine::guards::answered;
use crate::engine::{
    amend, budget, gate_additions, gates, goal, review, signals, team, INTERACT_COMPLETE, MAX_GATE_FAILURES,
};
use crate::model::event::{Event, EventKind, RecordStatus};
use crate::model::state::{
    ApprovalDecision, CheckpointMarks, CiWait, ExecutionState, ExecutionStatus, GateResult, InteractionTurn,
    PendingApprovalRequest, StepStatus,
};

/// Applies a checked event. Must not fail: everything that can go wrong was checked.
pub(crate) fn mutate(state: &mut ExecutionState, event: &Event, now: &str) {
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
            state.quota_waits.retain(|w| w.step_id != *step_id);
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
            usage,
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
            if let Some(usage) = usage {
                r.token_kinds = r.token_kinds.plus(&usage.tokens());
                r.cost_estimated |= usage.cost_estimated && *cost_usd > 0.0;
            }
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
                    // The whole conversation, agent and human turns together, against twice the
                    // turn limit (seed-spec §2.4, §2.5).
                    let history = r.interaction_history.len();
                    if finished || history >= 2 * max_turns as usize {
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
            budget::attempt_spent(state, step_id, *cost_usd);
            budget::release(state, step_id);
            if *status == RecordStatus::BudgetStopped {
                budget::stopped(state, step_id, *cost_usd);
            } else {
                budget::overshoot_warning(state, step_id);
            }
            budget::tier_warning(state);
            goal::take_verdict(state, step_id, now);
            if let Some(v) = review::take_verdict(state, step_id) {
                record_gate(state, v.phase_id, v.passed, v.output, Some(v.command), now);
            }
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
            state.ci_wait = None;
            let run = GateRun { passed: *passed, skipped: None, output: output.clone(), command: command.clone() };
            push_gate_result(state, *phase_id, run, *exit_code, now);
            if *passed {
                state.status = ExecutionStatus::Running;
            } else {
                gate_failed(state, *phase_id, output, now);
            }
        }
        EventKind::CiStarted { phase_id, sha, until } => {
            state.ci_wait = Some(CiWait {
                phase_id: *phase_id,
                sha: sha.clone(),
                until: until.clone(),
                started_at: now.to_string(),
                checks: Vec::new(),
                polls: 0,
            });
        }
        EventKind::CiChecked { checks, .. } => {
            if let Some(w) = state.ci_wait.as_mut() {
                w.checks.clone_from(checks);
                w.polls += 1;
            }
        }
        EventKind::ReviewRequested { agent_name, .. } => {
            review::request(state, agent_name);
            state.status = ExecutionStatus::Running;
        }
        EventKind::GateApprovalRequested { phase_id } => {
            state.status = ExecutionStatus::ApprovalPending;
            state.pending_approval_request = Some(PendingApprovalRequest {
                phase_id: *phase_id,
                requested_at: now.to_string(),
                preflight: false,
                team_step: String::new(),
                gate: true,
            });
        }
        EventKind::GateSkipped { phase_id, .. } => {
            // The engine's own reason (`check` made sure there is one), so a replay or a
            // recorder that sent none journals the same outcome.
            let phase = &state.plan.phases[state.current_phase];
            let reason = gates::plan(state, phase).skip_reason.unwrap_or_else(|| gates::NO_COMMAND.to_string());
            let run =
                GateRun { passed: false, output: format!("skipped: {reason}"), skipped: Some(reason), command: None };
            push_gate_result(state, *phase_id, run, None, now);
            state.status = ExecutionStatus::Running;
        }
        EventKind::ApprovalRecorded { phase_id, result, feedback } => {
            let request = state.pending_approval_request.take();
            let preflight = request.as_ref().is_some_and(|r| r.preflight);
            push_approval_result(state, event, now, preflight, String::new());
            if request.is_some_and(|r| r.gate) {
                // The review gate's human reviewer: the decision is the gate's result.
                let by = if event.actor.is_empty() { "a human".to_string() } else { event.actor.clone() };
                let pass = !matches!(result, ApprovalDecision::Reject);
                let verb = match result {
                    ApprovalDecision::Approve => "approved",
                    ApprovalDecision::ApproveWithFeedback => "approved with feedback",
                    ApprovalDecision::Reject => "rejected",
                };
                let mut output = format!("review by {by}: {verb}\n");
                if !feedback.trim().is_empty() {
                    output.push_str(feedback.trim());
                    output.push('\n');
                }
                state.status = ExecutionStatus::GatePending;
                record_gate(state, *phase_id, pass, output, Some(format!("human review by {by}")), now);
                return;
            }
            match result {
                ApprovalDecision::Approve => state.status = ExecutionStatus::Running,
                ApprovalDecision::Reject => {
                    let by = if event.actor.is_empty() { String::new() } else { format!(" by {}", event.actor) };
                    let why = if feedback.is_empty() { String::new() } else { format!(": {feedback}") };
                    fail(state, format!("phase {phase_id} was rejected{by}{why}; amend the plan to continue"), now);
                    state.rejected_phase = Some(*phase_id);
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
            amend::insert_feedback_dispatch(state, *phase_id, question_id, *chosen_index, &event.actor, now);
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
            state.ci_wait = None;
            state.pending_approval_request = None;
            let by = if event.actor.is_empty() { String::new() } else { format!(" by {}", event.actor) };
            let why = if reason.is_empty() { String::new() } else { format!(": {reason}") };
            state.failure = Some(format!("cancelled{by}{why}"));
            state.completed_at = now.to_string();
            // The attempts in flight were stopped with the execution: they read `cancelled`,
            // not `dispatched` for ever (found by a tester), and their reservations go.
            let in_flight: Vec<String> = state
                .step_results
                .iter()
                .filter(|(_, r)| r.status() == StepStatus::Dispatched)
                .map(|(id, _)| id.clone())
                .collect();
            for step_id in in_flight {
                if let Some(r) = state.step_results.get_mut(&step_id) {
                    r.status = StepStatus::Cancelled;
                    r.completed_at = now.to_string();
                    r.error = format!("the execution was cancelled{by} while attempt {} ran", r.attempt);
                }
                budget::release(state, &step_id);
            }
        }
        EventKind::StepRetried { step_id } => {
            if let Some(r) = state.step_results.get_mut(step_id) {
                r.status = StepStatus::Pending;
                r.error.clear();
            }
            reopen(state);
        }
        EventKind::QuotaWait { step_id, agent_name, account, until, reason, cost_usd, tokens } => {
            let r = result_entry(state, step_id, agent_name);
            if r.status == StepStatus::Dispatched {
                // Not a failed attempt: the step is offered again once the wait is over.
                r.status = StepStatus::Pending;
                r.completed_at = now.to_string();
                r.cost_usd += cost_usd;
                r.estimated_tokens = r.estimated_tokens.saturating_add(*tokens);
                state.counters.tokens = state.counters.tokens.saturating_add(*tokens);
                state.counters.spend_usd += cost_usd;
                budget::release(state, step_id);
            }
            let wait = crate::model::state::QuotaWait {
                step_id: step_id.clone(),
                agent_name: agent_name.clone(),
                account: account.clone(),
                until: until.clone(),
                reason: reason.clone(),
            };
            state.quota_waits.retain(|w| w.step_id != *step_id);
            state.quota_waits.push(wait);
        }
        EventKind::QuotaResumed { step_id } => {
            state.quota_waits.retain(|w| w.step_id != *step_id);
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
            state.ci_wait = None;
            state.failure = None;
            state.completed_at.clear();
            state.status = ExecutionStatus::GatePending;
        }
        EventKind::RemediationStarted { .. }
        | EventKind::RemediationPushed { .. }
        | EventKind::RemediationParked { .. }
        | EventKind::ReviewQueued { .. } => crate::engine::remediate::apply(state, &event.kind, now),
    }
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

/// Records a gate verdict reached inside another event (a reviewer step's result, a human's
/// decision on a review gate): passed moves on, failed follows the failed-gate rules.
fn record_gate(
    state: &mut ExecutionState,
    phase_id: i64,
    passed: bool,
    output: String,
    command: Option<String>,
    now: &str,
) {
    state.ci_wait = None;
    let run = GateRun { passed, skipped: None, output: output.clone(), command };
    push_gate_result(state, phase_id, run, None, now);
    if passed {
        state.status = ExecutionStatus::Running;
    } else {
        gate_failed(state, phase_id, &output, now);
    }
}

/// What a gate run recorded: passed, or skipped with its reason; its output and the command
/// run (`None`: the plan's).
struct GateRun {
    passed: bool,
    skipped: Option<String>,
    output: String,
    command: Option<String>,
}

/// Appends the current phase's gate result for `run`: the gate's type and planned command from
/// the plan, the next attempt number of `phase_id`'s gate.
fn push_gate_result(state: &mut ExecutionState, phase_id: i64, run: GateRun, exit_code: Option<i32>, now: &str) {
    let (gate_type, planned) = state.plan.phases[state.current_phase]
        .gate
        .as_ref()
        .map_or((String::new(), String::new()), |g| (g.gate_type.clone(), g.command.clone()));
    let attempt = state.gate_runs(phase_id) + 1;
    state.gate_results.push(GateResult {
        phase_id,
        gate_type,
        passed: run.passed,
        skipped: run.skipped,
        output: run.output,
        command: run.command.unwrap_or(planned),
        exit_code,
        checked_at: now.to_string(),
        attempt,
    });
}

/// A failed gate: the first failure of a phase re-dispatches the phase's last working step
/// (not a reviewer or goal evaluator step) with the gate output; later failures re-run the
/// gate until the cap, then fail the execution.
fn gate_failed(state: &mut ExecutionState, phase_id: i64, output: &str, now: &str) {
    let failures = state.gate_failures(phase_id);
    let phase = &state.plan.phases[state.current_phase];
    let last =
        phase.steps.iter().rev().find(|s| !review::is_review(s) && !goal::is_evaluation(s)).map(|s| s.step_id.clone());
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
            let (gate_type, command) = phase
                .gate
                .as_ref()
                .map_or((String::new(), String::new()), |g| (g.gate_type.clone(), g.command.clone()));
            if let Some(r) = state.step_results.get_mut(&step_id) {
                if r.status.is_done() {
                    state.counters.steps_done = state.counters.steps_done.saturating_sub(1);
                }
                r.status = StepStatus::Pending;
                r.gate_feedback = Some(if command.trim().is_empty() {
                    format!("{gate_type} gate:\n{output}")
                } else {
                    format!("$ {command}\n{output}")
                });
            }
            team::gate_redispatch(state, &step_id, now);
            state.status = ExecutionStatus::Running;
        }
        _ => state.status = ExecutionStatus::GateFailed,
    }
}
