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
//! 8. the rules of where the agent works, which depend on who runs it ([`Runner`]):
//!    `## Worktree rules` for Baton's own driver (a dedicated worktree, committed by Baton),
//!    `## Working rules` for an outside orchestrator (it chooses where, and records the commit);
//! 9. `## Protocol`: the lines an agent may emit.
//!
//! Building a prompt costs the size of the step and its direct dependencies, never the plan.
//! The one exception is the goal evaluator's prompt ([`goal_prompt`]), which summarises the
//! whole execution once per phase boundary. This module never does IO.

use std::fmt::Write as _;

use crate::engine::goal;
use crate::model::plan::{MachinePlan, PlanStep};
use crate::model::state::{ExecutionState, StepStatus};
use crate::model::text::{cut, first_line};

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

/// Who runs the agent a delegation prompt is for: the rules it works under differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runner {
    /// Baton's own driver (`baton serve`, `execute run`): the agent works in a dedicated
    /// worktree of the feature branch, and Baton commits what it changed.
    Baton,
    /// An outside orchestrator, reading DISPATCH from `execute next` or `GET …/next`: it
    /// chooses where the agent works (the `isolation` hint asks for worktrees when steps run
    /// in parallel) and records the result, with its commit, itself. Telling its agent that
    /// Baton commits would leave the work uncommitted.
    Orchestrator,
}

/// Builds the delegation prompt for `step` of `state`, for an agent that `runner` runs (see
/// the module doc for the template).
pub fn delegation_prompt(state: &ExecutionState, step: &PlanStep, runner: Runner) -> String {
    if goal::is_evaluation(step) && goal::condition(&state.plan).is_some() {
        return goal_prompt(state, step);
    }
    if crate::engine::review::is_review(step) {
        return crate::engine::review::review_prompt(state, step);
    }
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
            format!(
                "{} ({}, {}): {}",
                r.step_id,
                r.agent_name,
                r.status.as_str(),
                cut(r.outcome.trim(), OUTCOME_EXCERPT)
            )
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
                    let _ = writeln!(out, "- {} #{}: {}", turn.role, turn.turn_number, cut(turn.content.trim(), 100));
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

    out.push_str(match runner {
        Runner::Baton => {
            "## Worktree rules\n\
             - You work in a dedicated git worktree of the execution's feature branch; the current directory is its root.\n\
             - Change files only inside that worktree, and only under the allowed paths when any are listed; never touch blocked paths.\n\
             - Do not commit, push, switch branches or rewrite history: Baton commits your changes when you finish.\n\n"
        }
        Runner::Orchestrator => {
            "## Working rules\n\
             - Work where your orchestrator started you: its checkout, or a worktree it made for this step.\n\
             - Change files only under the allowed paths when any are listed; never touch blocked paths.\n\
             - Do not push, switch branches or rewrite history. Your orchestrator records your result with Baton, with your commit when there is one.\n\n"
        }
    });
    out.push_str(
        "## Protocol\n\
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

/// Characters of each step outcome quoted in the goal evaluator's prompt.
const GOAL_OUTCOME_EXCERPT: usize = 400;

/// The goal evaluator's prompt for step `goal.<n>` (see [`crate::engine::goal`]).
///
/// Sections: a title and the evaluator's role; `## Completion condition`; `## Task summary`;
/// `## Step`; `## Phases done` (each phase up to the judged one, its gate, each step's agent,
/// status, outcome excerpt and changed files); `## Phases still planned` (name, steps, first
/// line of each task; or a note that this is the last boundary); `## Earlier goal checks`
/// (one `- g<n> …` item each); `## Previous answer` (why the last attempt's answer was refused,
/// on a retry); `## Round-out budget`; `## Answer` (the exact JSON shape and the rules that
/// follow from it).
pub fn goal_prompt(state: &ExecutionState, step: &PlanStep) -> String {
    let plan = &state.plan;
    let condition = goal::condition(plan).unwrap_or("");
    let judged = state.locate(&step.step_id).map_or(state.current_phase, |(pi, _)| pi);
    let judged_id = plan.phases.get(judged).map_or(0, |p| p.phase_id);
    let mut out = String::with_capacity(4096);
    let _ = writeln!(out, "# Baton goal check: step {} of {}\n", step.step_id, state.task_id);
    let _ = writeln!(
        out,
        "You are **{}**, judging whether this execution has met its goal at the end of phase {judged_id}. \
         Your working directory is a checkout of the feature branch as it stands: read it to judge. \
         Do not change files; nothing you write is kept.\n",
        step.agent_name
    );
    let _ = writeln!(out, "## Completion condition\n{condition}\n");
    let _ = writeln!(out, "## Task summary\n{}\n", plan.task_summary.trim());
    let _ = writeln!(out, "## Step\n- {}\n", step.step_id);

    let _ = writeln!(out, "## Phases done");
    for phase in plan.phases.iter().take(judged + 1) {
        let gate = match &phase.gate {
            Some(g) if state.gate_passed(phase.phase_id) => format!(" (gate `{}` passed)", g.gate_type),
            Some(g) if state.gate_skipped(phase.phase_id).is_some() => format!(
                " (gate `{}` skipped: {}; nothing was checked)",
                g.gate_type,
                state.gate_skipped(phase.phase_id).unwrap_or_default()
            ),
            Some(g) => format!(" (gate `{}` not passed)", g.gate_type),
            None => String::new(),
        };
        let _ = writeln!(out, "### Phase {}: {}{gate}", phase.phase_id, phase.name);
        for s in phase.steps.iter().filter(|s| !goal::is_evaluation(s)) {
            let (status, outcome, files) =
                state.result(&s.step_id).map_or(("pending", String::new(), String::new()), |r| {
                    let files = if r.files_changed.is_empty() {
                        String::new()
                    } else {
                        format!(" [files: {}]", r.files_changed.join(", "))
                    };
                    (r.status.as_str(), cut(r.outcome.trim(), GOAL_OUTCOME_EXCERPT), files)
                });
            let _ = writeln!(out, "- {} ({}, {status}){files}: {outcome}", s.step_id, s.agent_name);
        }
    }
    out.push('\n');

    let _ = writeln!(out, "## Phases still planned");
    let later = plan.phases.get(judged + 1..).unwrap_or(&[]);
    if later.is_empty() {
        let _ = writeln!(
            out,
            "None: this is the last phase boundary. If the condition is not met, only the phases you suggest can still meet it."
        );
    }
    for phase in later {
        let steps: Vec<String> = phase
            .steps
            .iter()
            .map(|s| format!("{} ({}): {}", s.step_id, s.agent_name, cut(first_line(&s.task_description), 160)))
            .collect();
        let _ = writeln!(out, "- Phase {}: {} — {}", phase.phase_id, phase.name, steps.join("; "));
    }
    out.push('\n');

    if !state.goal.checks.is_empty() {
        let _ = writeln!(out, "## Earlier goal checks");
        for c in &state.goal.checks {
            let verdict = if c.met { "met".to_string() } else { "not met".to_string() };
            let missing =
                if c.missing.is_empty() { String::new() } else { format!("; missing: {}", c.missing.join("; ")) };
            let _ = writeln!(out, "- {} (phase {}): {verdict}{missing}; {}", c.check_id, c.phase_id, c.decision);
        }
        out.push('\n');
    }

    // A retry after an invalid verdict: the refused answer is still the step's outcome.
    let previous =
        state.result(&step.step_id).filter(|r| r.status != StepStatus::Complete && !r.outcome.trim().is_empty());
    if let Some(Err(why)) = previous.map(|r| goal::parse_verdict(&r.outcome)) {
        let _ = writeln!(
            out,
            "## Previous answer\nYour previous answer to this check could not be used (invalid goal verdict: {}). \
             Answer exactly in the shape below.\n",
            cut(why.trim(), GOAL_OUTCOME_EXCERPT)
        );
    }

    let max = plan.max_amend_cycles;
    let used = state.goal.amend_cycles_used;
    let _ = writeln!(
        out,
        "## Round-out budget\n{used} of {max} round-out cycles used: {} more time(s) the phases you suggest can be added.\n",
        max.saturating_sub(used)
    );
    out.push_str(
        "## Answer\n\
         Reply with your verdict as one JSON object in a ```json fenced block (a bare JSON object is accepted too). \
         Anything else is an invalid verdict, and the execution fails saying so.\n\n\
         ```json\n\
         {\n\
         \x20 \"met\": false,\n\
         \x20 \"confidence\": 0.8,\n\
         \x20 \"missing\": [\"what is still missing, one item each\"],\n\
         \x20 \"suggested_phases\": [\n\
         \x20   {\"name\": \"Phase name\", \"steps\": [\n\
         \x20     {\"agent_name\": \"backend-engineer\", \"task_description\": \"What to do\", \"deliverables\": [\"path\"]}\n\
         \x20   ]}\n\
         \x20 ],\n\
         \x20 \"reasoning\": \"why\"\n\
         }\n\
         ```\n\n\
         - `met` (true or false) is required; the other keys are optional.\n\
         - Suggest phases only when `met` is false. They are inserted right after the judged phase, before the phases \
         still planned. Leave out `phase_id` and `step_id` (Baton numbers them); `depends_on` may name only steps of \
         earlier phases. Gates and automation steps are not accepted from an evaluator.\n\
         - A `false` verdict fails the execution at the last phase boundary when no round-out cycle is left or no \
         suggested phase can be added; at an earlier boundary the planned phases go on.\n",
    );
    out
}
