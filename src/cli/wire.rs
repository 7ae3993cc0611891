//! The `ACTION:` text wire format an orchestrator parses (seed-spec §2.24).
//!
//! One block per action: `ACTION: <TYPE>`, indented `Key: value` lines, optional delimited
//! sections (`--- Delegation Prompt ---` … `--- End Prompt ---`, `--- Approval Context ---`, …)
//! and a final line saying which command records the result. Every action type has a committed
//! golden file under `tests/golden/wire/`. This module never does IO beyond building strings.

use std::fmt::Write as _;

use crate::model::action::Action;
use crate::model::text::shell_quote;

/// Renders `action` of execution `task_id` in the text wire format (ends with a newline).
pub fn render(action: &Action, task_id: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "ACTION: {}", action.action_type().upper());
    let task = shell_quote(task_id);
    match action {
        Action::Dispatch(d) => {
            let _ = writeln!(out, "  Agent: {}", d.agent_name);
            let _ = writeln!(out, "  Model: {}", d.agent_model);
            let _ = writeln!(out, "  Step: {}", d.step_id);
            let _ = writeln!(out, "  Phase: {}", d.phase_id);
            let _ = writeln!(out, "  Attempt: {}", d.attempt);
            if d.is_team_member {
                let _ = writeln!(out, "  Team-Step: yes");
                let _ = writeln!(out, "  Parent-Step: {}", d.parent_step_id);
            }
            if d.step_type != "developing" {
                let _ = writeln!(out, "  Type: {}", d.step_type);
            }
            if d.interactive {
                let _ = writeln!(out, "  Interactive: yes");
                let _ = writeln!(out, "  Max-Turns: {}", d.interact_max_turns.unwrap_or(0));
            }
            if !d.isolation.is_empty() {
                let _ = writeln!(out, "  Isolation: {}", d.isolation);
            }
            if d.timeout_seconds > 0 {
                let _ = writeln!(out, "  Timeout: {}s", d.timeout_seconds);
            }
            if !d.mcp_servers.is_empty() {
                let _ = writeln!(out, "  MCP-Servers: {}", d.mcp_servers.join(", "));
            }
            let _ = writeln!(out, "  Message: {}", d.message);
            if !d.expected_outcome.is_empty() {
                let _ = writeln!(out, "  Expected: {}", d.expected_outcome);
            }
            if !d.command.is_empty() {
                let _ = writeln!(out, "  Command: {}", d.command);
                let _ = writeln!(out, "--- Command ---\n{}\n--- End Command ---", d.command);
            } else {
                let _ = writeln!(
                    out,
                    "--- Delegation Prompt ---\n{}--- End Prompt ---",
                    ensure_newline(&d.delegation_prompt)
                );
            }
            // Both commands, as a fresh-clone tester missed the first: without `dispatched`,
            // `next --all` offers the step again while it runs. `--status` is optional
            // (`complete` by default).
            let (step, agent) = (shell_quote(&d.step_id), shell_quote(&d.agent_name));
            let _ = writeln!(
                out,
                "Mark dispatched with: baton execute dispatched --task-id {task} --step-id {step} --agent {agent}"
            );
            let _ = writeln!(
                out,
                "Record with: baton execute record --task-id {task} --step-id {step} --agent {agent} [--status complete|failed] --outcome TEXT"
            );
        }
        Action::Gate(g) => {
            let _ = writeln!(out, "  Type: {}", g.gate_type);
            let _ = writeln!(out, "  Phase: {}", g.phase_id);
            let _ = writeln!(out, "  Attempt: {} (failures {}/{})", g.attempt, g.failures, g.max_failures);
            let _ = writeln!(out, "  Command: {}", g.gate_command);
            for a in &g.additions {
                let _ = writeln!(out, "  Addition: {a}");
            }
            let _ = writeln!(out, "  Message: {}", g.message);
            if let Some(check) = g.check {
                let by = match check {
                    crate::model::action::GateCheck::ForgeCi => "forge_ci",
                    crate::model::action::GateCheck::Reviewer => "reviewer",
                };
                let _ = writeln!(out, "  Check: {by}");
                let _ = writeln!(
                    out,
                    "Record with: baton execute run --task-id {task} (the driver pushes and reads the forge's checks, \
                     or asks the reviewer)"
                );
            } else if let Some(reason) = &g.skip_reason {
                let _ = writeln!(out, "  Skip: {reason}");
                let _ = writeln!(
                    out,
                    "Record with: baton execute gate --task-id {task} --phase-id {} --result skip",
                    g.phase_id
                );
            } else {
                let _ = writeln!(
                    out,
                    "Record with: baton execute gate --task-id {task} --phase-id {} --result pass|fail --output TEXT",
                    g.phase_id
                );
            }
        }
        Action::Approval(a) => {
            let _ = writeln!(out, "  Phase: {}", a.phase_id);
            if a.preflight {
                let _ = writeln!(out, "  Pre-Flight: yes");
            }
            let _ = writeln!(out, "  Message: {}", a.message);
            let _ =
                writeln!(out, "--- Approval Context ---\n{}--- End Context ---", ensure_newline(&a.approval_context));
            let _ = writeln!(out, "Options: {}", a.approval_options.join(" | "));
            let _ = writeln!(
                out,
                "Record with: baton execute approve --task-id {task} --phase-id {} --result approve|reject|approve-with-feedback [--feedback TEXT]",
                a.phase_id
            );
        }
        Action::Feedback(f) => {
            let _ = writeln!(out, "  Phase: {}", f.phase_id);
            let _ = writeln!(out, "  Message: {}", f.message);
            for q in &f.feedback_questions {
                let _ = writeln!(out, "--- Question: {} ---", q.question_id);
                let _ = writeln!(out, "{}", q.question);
                if !q.context.is_empty() {
                    let _ = writeln!(out, "Context: {}", q.context);
                }
                for (i, option) in q.options.iter().enumerate() {
                    let _ = writeln!(out, "  [{i}] {option}");
                }
            }
            let _ = writeln!(out, "--- End Questions ---");
            let _ = writeln!(
                out,
                "Record with: baton execute feedback --task-id {task} --phase-id {} --question-id ID --chosen-index N",
                f.phase_id
            );
        }
        Action::Interact(i) => {
            let _ = writeln!(out, "  Step: {}", i.interact_step_id);
            let _ = writeln!(out, "  Agent: {}", i.interact_agent_name);
            let _ = writeln!(out, "  Turn: {}/{}", i.interact_turn, i.interact_max_turns);
            let _ = writeln!(out, "  Message: {}", i.message);
            let _ = writeln!(out, "--- Agent Output ---\n{}--- End Output ---", ensure_newline(&i.interact_prompt));
            let _ = writeln!(
                out,
                "Reply with: baton execute interact --task-id {task} --step-id {} --input TEXT   (or --complete)",
                shell_quote(&i.interact_step_id)
            );
        }
        Action::Wait { message, until } => {
            let _ = writeln!(out, "  Message: {message}");
            if let Some(until) = until {
                let _ = writeln!(out, "  Until: {until}");
            }
        }
        Action::Complete { message, summary } | Action::Failed { message, summary } => {
            let _ = writeln!(out, "  Message: {message}");
            let _ = writeln!(out, "  Summary: {summary}");
        }
        Action::Checkpoint(c) => {
            let _ = writeln!(out, "  Phase: {}", c.phase_id);
            let _ = writeln!(out, "  Reason: {}", c.reason);
            let _ = writeln!(out, "  Message: {}", c.message);
            let _ = writeln!(out, "--- Handoff ---\n{}--- End Handoff ---", ensure_newline(&c.handoff));
        }
        Action::Budget(b) => {
            let _ = writeln!(out, "  Step: {}", b.step_id);
            let _ = writeln!(out, "  Ceiling: ${:.2}", b.ceiling_usd);
            let _ = writeln!(out, "  Spent: ${:.2}", b.spent_usd);
            let _ = writeln!(out, "  Forecast: ${:.2}", b.forecast_usd);
            let _ = writeln!(out, "  Needed: ${:.2}", b.needed_usd);
            let _ = writeln!(out, "  Reason: {}", b.reason);
            let _ = writeln!(out, "  Message: {}", b.message);
            let _ = writeln!(out, "Options: {}", b.budget_options.join(" | "));
            let _ = writeln!(out, "Record with: baton execute budget --task-id {task} --raise USD   (or --stop)");
        }
    }
    out
}

fn ensure_newline(s: &str) -> String {
    if s.is_empty() || s.ends_with('\n') {
        s.to_string()
    } else {
        format!("{s}\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dispatch_names_its_mcp_servers_and_one_without_says_nothing() {
        let plan = serde_json::json!({"task_id": "t", "task_summary": "s", "phases": [{"phase_id": 1, "name": "P",
            "steps": [{"step_id": "1.1", "agent_name": "dev", "task_description": "x", "mcp_servers": ["github", "docs"]},
                      {"step_id": "1.2", "agent_name": "dev", "task_description": "y"}]}]});
        let plan = crate::model::plan::MachinePlan::from_value(plan).unwrap();
        let state = crate::engine::start(plan, "2026-01-01T00:00:00Z").unwrap();
        let texts: Vec<String> = crate::engine::next_actions(&state).iter().map(|a| render(a, "t")).collect();
        assert!(texts[0].contains("\n  MCP-Servers: github, docs\n"), "{}", texts[0]);
        assert!(!texts[1].contains("MCP-Servers"), "{}", texts[1]);
    }
}
