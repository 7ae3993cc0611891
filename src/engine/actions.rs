//! The reading side: what to do next. [`next_action`] is exactly one action (DISPATCH, GATE,
//! APPROVAL, FEEDBACK, INTERACT, CHECKPOINT, BUDGET, WAIT, COMPLETE, FAILED) with everything a
//! driver or a human needs to carry it out; [`next_actions`] is every step that may be
//! dispatched now. Both are pure reads of a settled state: they never change it, and this
//! module never does IO.

use crate::engine::guards::{answered, is_ready};
use crate::engine::{budget, gates, prompt, team, MAX_GATE_FAILURES};
use crate::model::action::{
    Action, ApprovalAction, CheckpointAction, DispatchAction, FeedbackAction, GateAction, InteractAction,
};
use crate::model::plan::{PlanPhase, PlanStep};
use crate::model::state::{ExecutionState, ExecutionStatus, StepStatus};
use crate::model::text::{cut, first_line};

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
        ExecutionStatus::GatePending | ExecutionStatus::GateFailed => match ci_wait_action(state) {
            Some(wait) => wait,
            None => gate_action(state),
        },
        ExecutionStatus::BudgetExceeded => budget::action(state),
        ExecutionStatus::Running => running_action(state),
    }
}

/// Every step of the current phase that may be dispatched now, as DISPATCH actions in plan
/// order (seed-spec §2.18); a team step offers its dispatchable members (and synthesis) instead
/// of itself (see [`team`]). Empty while the execution waits or is finished.
pub fn next_actions(state: &ExecutionState) -> Vec<Action> {
    dispatches(state, usize::MAX)
}

/// The first `limit` DISPATCH actions of [`next_actions`]: ready steps are taken in plan order
/// while their forecasts fit ([`budget::Affordable`]), and the scan stops once it has `limit`
/// of them and knows whether two or more are dispatchable (then each gets worktree isolation),
/// so `next_action` at the head of a long phase costs a few steps, not the phase; the scan
/// starts after the phase's leading done steps (`ExecutionState::first_open_step`, from the
/// engine's tally), so late in a long phase it does not pass every completed step again. Only
/// the steps taken get their action (and its prompt) built.
fn dispatches(state: &ExecutionState, limit: usize) -> Vec<Action> {
    if state.status != ExecutionStatus::Running || state.checkpoint.due || limit == 0 {
        return Vec::new();
    }
    let Some(phase) = state.current() else { return Vec::new() };
    if state.any_failed_in_current_phase() {
        return Vec::new();
    }
    let waiting = |step_id: &str| state.quota_waits.iter().any(|w| w.step_id == step_id);
    let wanted = limit.max(2);
    let mut affordable = budget::Affordable::new();
    let mut taken: Vec<(std::borrow::Cow<'_, PlanStep>, &str)> = Vec::new();
    // The steps before `first_open_step` are done: none of them is ready.
    'phase: for s in phase.steps.iter().skip(state.first_open_step()) {
        if s.team.is_empty() {
            if is_ready(state, s) && !waiting(&s.step_id) && affordable.take(state, &s.step_id) {
                taken.push((std::borrow::Cow::Borrowed(s), ""));
            }
        } else {
            for m in team::ready(state, s) {
                if !waiting(&m.step_id) && affordable.take(state, &m.step_id) {
                    taken.push((std::borrow::Cow::Owned(m), s.step_id.as_str()));
                    if taken.len() >= wanted {
                        break 'phase;
                    }
                }
            }
        }
        if taken.len() >= wanted {
            break;
        }
    }
    let isolation = if taken.len() >= 2 { "worktree" } else { "" };
    taken
        .into_iter()
        .take(limit)
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
            message: "All phases complete; run `baton execute complete` to finalize the execution.".into(),
            summary: completion_summary(state),
        };
    };
    if let Some(first) = dispatches(state, 1).into_iter().next() {
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
    // Steps waiting for their account's quota (issue 18.1): the wait names its end.
    let quota: Vec<&crate::model::state::QuotaWait> = state
        .quota_waits
        .iter()
        .filter(|w| {
            let owner = state.team_parent(&w.step_id).unwrap_or(&w.step_id);
            phase.steps.iter().any(|s| s.step_id == owner)
        })
        .filter(|w| state.step_status(&w.step_id) == StepStatus::Pending)
        .collect();
    let first_reset = quota.iter().min_by(|a, b| a.until.cmp(&b.until));
    if failed.is_empty() {
        if let Some(w) = first_reset {
            let mut message = format!("Step {} is {}.", w.step_id, w.note());
            if !in_flight.is_empty() {
                message.push_str(&format!(" In flight: {}.", in_flight.join(", ")));
            }
            return Action::Wait { message, until: Some(w.until.clone()) };
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
    Action::Wait { message, until: None }
}

/// At most this many characters of a step's task go into its DISPATCH message (a tester's
/// 5 MB one-line task was printed whole on `execute status`'s `next:` line).
const DISPATCH_MESSAGE_CHARS: usize = 200;

fn dispatch_action(state: &ExecutionState, phase: &PlanPhase, step: &PlanStep, isolation: &str) -> DispatchAction {
    let attempt = state.result(&step.step_id).map_or(0, |r| r.attempt) + 1;
    let retry = if attempt > 1 { format!(" (attempt {attempt})") } else { String::new() };
    DispatchAction {
        message: format!(
            "Dispatch step {} to {}{retry}: {}",
            step.step_id,
            step.agent_name,
            // A one-line summary (`execute status`'s `next:`, the wire's `Message:`): the
            // prompt carries the whole task.
            cut(first_line(&step.task_description), DISPATCH_MESSAGE_CHARS)
        ),
        step_id: step.step_id.clone(),
        phase_id: phase.phase_id,
        agent_name: step.agent_name.clone(),
        agent_model: step.model.clone(),
        step_type: step.step_type.clone(),
        attempt,
        // An action is what an outside orchestrator reads (`execute next`, `GET …/next`); Baton's
        // own driver builds its agents' prompts itself (`runtime::driver::launch`).
        delegation_prompt: prompt::delegation_prompt(state, step, prompt::Runner::Orchestrator),
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
        mcp_servers: step.mcp_servers.clone(),
    }
}

/// WAIT while the current phase's `ci` gate waits for the forge's checks (issue 19.2): the
/// message says how far they are; `until` is when the wait times out.
fn ci_wait_action(state: &ExecutionState) -> Option<Action> {
    let w = state.ci_wait.as_ref()?;
    if state.current().is_none_or(|p| p.phase_id != w.phase_id) {
        return None;
    }
    let sha = w.sha.get(..10).unwrap_or(&w.sha);
    let pending: Vec<&str> = w
        .checks
        .iter()
        .filter(|c| c.state == crate::model::state::CiCheckState::Pending)
        .map(|c| c.name.as_str())
        .take(5)
        .collect();
    let running = if pending.is_empty() { String::new() } else { format!("; running: {}", pending.join(", ")) };
    Some(Action::Wait {
        message: format!("Phase {} gate 'ci' is {} on {sha}{running}.", w.phase_id, w.note()),
        until: Some(w.until.clone()),
    })
}

fn gate_action(state: &ExecutionState) -> Action {
    let Some(phase) = state.current() else {
        return Action::Wait { message: "no current phase".into(), until: None };
    };
    let Some(gate) = &phase.gate else {
        return Action::Wait { message: format!("phase {} has no gate", phase.phase_id), until: None };
    };
    let failures = state.gate_failures(phase.phase_id);
    let attempt = state.gate_runs(phase.phase_id) + 1;
    // A retry carries the additions too (the original dropped them: seed-spec §5 #64).
    let run = gates::plan(state, phase);
    let message = if let Some(check) = run.check {
        match check {
            crate::model::action::GateCheck::ForgeCi => format!(
                "Gate 'ci' for phase {}: push baton/{} to the forge (never forced) and wait for the checks of its head commit.",
                phase.phase_id, state.task_id
            ),
            crate::model::action::GateCheck::Reviewer => format!(
                "Gate 'review' for phase {}: ask the project's reviewer agent (review_requested), or a human when none \
                 is configured (gate_approval_requested).",
                phase.phase_id
            ),
        }
    } else if let Some(reason) = &run.skip_reason {
        format!(
            "Gate '{}' for phase {} has nothing to run ({reason}): record it as skipped; a skipped gate is not a pass.",
            gate.gate_type, phase.phase_id
        )
    } else if state.status == ExecutionStatus::GateFailed {
        format!(
            "Gate '{}' for phase {} failed ({failures}/{MAX_GATE_FAILURES}); run it again.",
            gate.gate_type, phase.phase_id
        )
    } else {
        format!("Run gate '{}' for phase {}.", gate.gate_type, phase.phase_id)
    };
    let message = if run.additions.is_empty() {
        message
    } else {
        format!("{message} [+agent additions: {}]", run.additions.join("; "))
    };
    Action::Gate(GateAction {
        message,
        phase_id: phase.phase_id,
        gate_type: gate.gate_type.clone(),
        gate_command: run.command,
        attempt,
        failures,
        max_failures: MAX_GATE_FAILURES,
        additions: run.additions,
        skip_reason: run.skip_reason,
        check: run.check,
    })
}

fn approval_action(state: &ExecutionState) -> Action {
    if let Some(action) = team::approval_action(state) {
        return Action::Approval(action);
    }
    let request = state.pending_approval_request.as_ref();
    if let Some(r) = request.filter(|r| r.gate) {
        return gate_approval_action(state, r.phase_id);
    }
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

/// APPROVAL of a `review` gate that has no reviewer agent: a human reviews the phase's changes.
fn gate_approval_action(state: &ExecutionState, phase_id: i64) -> Action {
    let phase = state.plan.phase_index(phase_id).and_then(|i| state.plan.phases.get(i));
    let name = phase.map_or("", |p| p.name.as_str());
    let mut context = format!(
        "The review gate of phase {phase_id} ({name}) has no command and no reviewer agent is configured, so a \
         human reviews it: approve to pass the gate, reject (with what must change) to fail it.\n\n"
    );
    context.push_str(&phase.map(|p| phase_outcomes(state, p)).unwrap_or_default());
    Action::Approval(ApprovalAction {
        message: format!("Review the changes of phase {phase_id} ({name}): its review gate waits for a human."),
        phase_id,
        approval_context: context,
        approval_options: vec!["approve".into(), "reject".into(), "approve-with-feedback".into()],
        preflight: false,
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
        return Action::Wait { message: "no current phase".into(), until: None };
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
        .map(|r| format!("- {} ({}): {}", r.step_id, r.agent_name, cut(first_line(&r.outcome), 120)))
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

fn completion_summary(state: &ExecutionState) -> String {
    let (done, total) = state.progress();
    format!(
        "{}: {done}/{total} steps done, {} gate runs, ${:.2} spent.",
        state.task_id,
        state.gate_results.len(),
        state.counters.spend_usd
    )
}
