//! The delegation prompt: the one template every agent receives.
//!
//! Sections, in order (a section with nothing to say is left out):
//!
//! 1. a title naming the step and the execution, and the agent's role;
//! 2. `## Task summary` (the plan's `task_summary`) and `## Shared context`;
//! 3. `## Step` (`- <step_id>`), `## Team` (a team member's id, role, parent step and team;
//!    see `engine::team`), `## Task` (the step's `task_description`), `## Expected outcome`;
//! 4. `## Deliverables`, `## Context files`, `## Allowed paths`, `## Blocked paths` (lists);
//! 5. `## Previous steps`: outcomes of the steps this one depends on (first 600 characters each);
//! 6. `## Gate output`: when a failed gate re-dispatches the step, the command and its output;
//! 7. `## Conversation so far` and `## Human reply`: continuation of an interactive step;
//! 8. `## Worktree rules` and `## Protocol`: the lines an agent may emit.
//!
//! Building a prompt costs the size of the step and its direct dependencies, never the plan.
//! This module never does IO.

use std::fmt::Write as _;

use crate::model::plan::{MachinePlan, PlanStep};
use crate::model::state::ExecutionState;

const OUTCOME_EXCERPT: usize = 600;

fn list(out: &mut String, title: &str, items: &[String]) {
    if items.is_empty() {
        return;
    }
    let _ = writeln!(out, "## {title}");
    for item in items {
        let _ = writeln!(out, "- {item}");
    }
    out.push('\n');
}

fn excerpt(text: &str, max: usize) -> String {
    let trimmed = text.trim();
    if trimmed.chars().count() <= max {
        return trimmed.to_string();
    }
    let cut: String = trimmed.chars().take(max).collect();
    format!("{cut}…")
}

/// Builds the delegation prompt for `step` of `state` (see the module doc for the template).
pub fn delegation_prompt(state: &ExecutionState, step: &PlanStep) -> String {
    let plan: &MachinePlan = &state.plan;
    let mut out = String::with_capacity(2048);
    let _ = writeln!(out, "# Baton delegation: step {} of {}\n", step.step_id, state.task_id);
    let _ = writeln!(out, "You are **{}**, carrying out one step of a larger plan.\n", step.agent_name);
    let _ = writeln!(out, "## Task summary\n{}\n", plan.task_summary.trim());
    if !plan.shared_context.trim().is_empty() {
        let _ = writeln!(out, "## Shared context\n{}\n", plan.shared_context.trim());
    }
    let _ = writeln!(out, "## Step\n- {}\n", step.step_id);
    if let Some(team) = crate::engine::team::prompt_section(state, &step.step_id) {
        out.push_str(&team);
    }
    let _ = writeln!(out, "## Task\n{}\n", step.task_description.trim());
    if !step.expected_outcome.trim().is_empty() {
        let _ = writeln!(out, "## Expected outcome\n{}\n", step.expected_outcome.trim());
    }
    list(&mut out, "Deliverables", &step.deliverables);
    list(&mut out, "Context files", &step.context_files);
    list(&mut out, "Allowed paths", &step.allowed_paths);
    list(&mut out, "Blocked paths", &step.blocked_paths);

    let previous: Vec<String> = step
        .depends_on
        .iter()
        .filter_map(|dep| state.result(dep))
        .map(|r| {
            format!("{} ({}, {}): {}", r.step_id, r.agent_name, r.status.as_str(), excerpt(&r.outcome, OUTCOME_EXCERPT))
        })
        .collect();
    list(&mut out, "Previous steps", &previous);

    let result = state.result(&step.step_id);
    if let Some(feedback) = result.and_then(|r| r.gate_feedback.as_deref()) {
        let _ = writeln!(
            out,
            "## Gate output\nThe phase's gate failed after your previous attempt. Fix what it reports; \
             the gate runs again after this attempt.\n\n```text\n{}\n```\n",
            feedback.trim_end()
        );
    }
    if let Some(r) = result {
        if !r.interaction_history.is_empty() {
            let _ = writeln!(out, "## Conversation so far");
            let n = r.interaction_history.len();
            for (i, turn) in r.interaction_history.iter().enumerate() {
                if i + 3 < n {
                    let _ = writeln!(out, "- {} #{}: {}", turn.role, turn.turn_number, excerpt(&turn.content, 100));
                } else if !(i + 1 == n && turn.role == "human") {
                    let _ = writeln!(out, "- {} #{}:\n{}", turn.role, turn.turn_number, turn.content.trim());
                }
            }
            out.push('\n');
            if let Some(last) = r.interaction_history.last().filter(|t| t.role == "human") {
                let _ = writeln!(out, "## Human reply\n{}\n", last.content.trim());
            }
            let _ = writeln!(
                out,
                "When the conversation has reached its goal, end your message with a line `INTERACT_COMPLETE`.\n"
            );
        }
    }

    out.push_str(
        "## Worktree rules\n\
         - You work in a dedicated git worktree of the execution's feature branch; the current directory is its root.\n\
         - Change files only inside that worktree, and only under the allowed paths when any are listed; never touch blocked paths.\n\
         - Do not commit, push, switch branches or rewrite history: Baton commits your changes when you finish.\n\n\
         ## Protocol\n\
         End with a short summary of what you did. You may also write, each on its own line:\n\
         - `GATE_ADDITION: <command>` to propose an extra check for the phase's gate;\n\
         - `KNOWLEDGE_GAP: <what is missing>` when you lack information to finish;\n\
         - a `## Deviations` section listing where you departed from the task, and why.\n",
    );
    if step.interactive {
        out.push_str("- `INTERACT_COMPLETE` when this interactive step is done.\n");
    }
    out
}
