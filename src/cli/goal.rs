//! `baton goal "<condition>"`: goal-driven execution from one sentence.
//!
//! Builds a small MachinePlan — one phase in which the `--worker` agent works towards the
//! condition (behind an optional `--gate`), with the sentence as its `completion_condition`,
//! `--max-amend-cycles` and `goal_evaluator` — saves it like `baton plan --from` does
//! (`<data>/plans/current.json`, plus `<data>/plans/<task_id>.json`), and runs it like
//! `baton execute run` with the same flags. The evaluator then judges every phase boundary and
//! rounds the plan out (`engine::goal`). Printing and exit codes are `execute run`'s.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;

use crate::cli::service::with_executions;
use crate::cli::{check_plan, print_outcome};
use crate::clock;
use crate::engine::goal::{DEFAULT_EVALUATOR, EVALUATOR_KEY};
use crate::model::plan::{MachinePlan, PlanGate, PlanPhase, PlanStep};
use crate::model::state::ExecutionState;
use crate::runtime::config::DataDir;
use crate::runtime::driver::{self, RunOptions};
use crate::runtime::{write_atomic, BadInput};

/// `baton goal` flags.
#[derive(Debug, Args, Clone)]
// The variant's about again: the subcommands are deferred (see `cli::Command`), so the last
// about applied is the one of the flags' structs, this one's or else a flattened one's doc comment.
#[command(
    about = "Goal-driven execution: write a small plan whose completion condition is CONDITION and run it like `execute run`; the evaluator judges every phase boundary (the book, docs/src/running.md \"Goals\")"
)]
pub struct GoalArgs {
    /// What "done" means, in one sentence: the completion condition the evaluator judges.
    pub condition: String,
    /// Execution id (default: `goal-<words of the condition>-<UTC time>`).
    #[arg(long, allow_negative_numbers = true)]
    pub task_id: Option<String>,
    /// Agent (roster name) that works towards the goal.
    #[arg(long, default_value = "backend-engineer", allow_negative_numbers = true)]
    pub worker: String,
    /// Agent (roster name) that judges the condition at every phase boundary.
    #[arg(long, default_value = DEFAULT_EVALUATOR, allow_negative_numbers = true)]
    pub evaluator: String,
    /// Round-out amendments at most (phases the evaluator suggests when the goal is not met).
    #[arg(long, default_value_t = 3, allow_negative_numbers = true, value_parser = super::args::whole_number::<u32>)]
    pub max_amend_cycles: u32,
    /// Test gate of the work phase (a shell command run in the integration worktree).
    #[arg(long, allow_negative_numbers = true)]
    pub gate: Option<String>,
    /// Only write the plan; do not run it.
    #[arg(long)]
    pub no_run: bool,
    /// How the run works (as `execute run`).
    #[command(flatten)]
    pub flags: super::RunFlags,
}

/// The plan `baton goal` runs (see the module doc). Errors ([`BadInput`]): a blank condition.
pub fn goal_plan(args: &GoalArgs, task_id: &str) -> anyhow::Result<MachinePlan> {
    let condition = args.condition.trim();
    if condition.is_empty() {
        return Err(BadInput("baton goal: the condition is empty; say what \"done\" means".into()).into());
    }
    let mut step = PlanStep::new(
        "1.1",
        args.worker.trim(),
        format!("Work towards this goal, changing what is needed so that it holds:\n\n{condition}"),
    );
    step.expected_outcome = format!("The completion condition holds: {condition}");
    let mut phase = PlanPhase::new(1, "Work towards the goal");
    phase.steps.push(Box::new(step));
    phase.gate = args.gate.as_ref().filter(|g| !g.trim().is_empty()).map(|command| PlanGate {
        gate_type: "test".into(),
        command: command.clone(),
        extra: Default::default(),
    });
    let mut plan = MachinePlan::from_value(serde_json::json!({"task_id": task_id, "task_summary": condition}))
        .map_err(|e| anyhow::anyhow!("building the goal plan: {e}"))?;
    plan.phases.push(phase);
    plan.completion_condition = Some(condition.to_string());
    plan.max_amend_cycles = args.max_amend_cycles;
    plan.extra.insert(EVALUATOR_KEY.into(), serde_json::Value::from(args.evaluator.trim()));
    Ok(plan)
}

/// `goal-<up to five words of the condition>-<YYYYmmdd-HHMMSS>`, ref- and path-safe.
fn default_task_id(condition: &str) -> String {
    let words: Vec<String> = condition
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .take(5)
        .map(str::to_ascii_lowercase)
        .collect();
    let slug: String = words.join("-").chars().take(40).collect();
    let slug = slug.trim_end_matches('-');
    let time = clock::now().format("%Y%m%d-%H%M%S");
    if slug.is_empty() {
        format!("goal-{time}")
    } else {
        format!("goal-{slug}-{time}")
    }
}

/// Runs `baton goal`.
pub async fn run_goal(data_dir: &Path, args: GoalArgs, json: bool) -> anyhow::Result<ExitCode> {
    let task_id = args.task_id.clone().filter(|t| !t.is_empty()).unwrap_or_else(|| default_task_id(&args.condition));
    // The flag's problem, not a plan file's: the user wrote no plan.
    if let Some(why) = crate::engine::unsafe_id_reason(&task_id) {
        return Err(BadInput(format!("--task-id {task_id:?} {why}")).into());
    }
    let plan = goal_plan(&args, &task_id)?;
    let options = args.flags.clone().options()?;
    // Refused flags leave no plan file behind (found by a tester: a missing --repo did).
    if !args.no_run {
        driver::check_new_run(&options).await?;
    }
    let data = DataDir::open(data_dir)?;
    // An existing execution's plan file is never overwritten with another plan.
    let other_plan = with_executions(data.clone(), async |execs| {
        Ok(execs.load(&task_id).await?.is_some() && execs.original_plan(&task_id).await?.as_ref() != Some(&plan))
    })
    .await?;
    if other_plan {
        return Err(BadInput(format!(
            "execution {task_id} already exists with another plan: give the goal another --task-id, or resume it \
             with `baton execute run --task-id {task_id}`"
        ))
        .into());
    }
    let dir = data.plans_dir();
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(format!("{task_id}.json"));
    check_plan(&path, &plan)?;
    let text = serde_json::to_string_pretty(&plan)?;
    write_atomic(&path, text.as_bytes())?;
    write_atomic(&dir.join("current.json"), text.as_bytes())?;
    errln!(
        "goal plan {task_id} written to {} (evaluator {}, at most {} round-out cycles)",
        path.display(),
        args.evaluator.trim(),
        plan.max_amend_cycles
    );
    if args.no_run {
        outln!("{}", path.display());
        return Ok(ExitCode::SUCCESS);
    }
    let options = RunOptions { plan: Some(plan), ..options };
    let outcome = driver::run(data.clone(), options).await?;
    if let Some(state) = with_executions(data, async |execs| execs.load(&task_id).await).await? {
        for line in goal_lines(&state) {
            errln!("{line}");
        }
    }
    Ok(print_outcome(&outcome, json))
}

/// The goal of an execution in a few lines (empty without a goal): status and budget, then one
/// line per check.
fn goal_lines(state: &ExecutionState) -> Vec<String> {
    let goal = &state.goal;
    if crate::engine::goal::condition(&state.plan).is_none() && goal.is_untouched() {
        return Vec::new();
    }
    let mut lines = vec![format!(
        "goal {}: {} check(s), {} of {} round-out cycle(s) used",
        goal.status.as_str(),
        goal.checks.len(),
        goal.amend_cycles_used,
        state.plan.max_amend_cycles
    )];
    for c in &goal.checks {
        lines.push(format!("  {} {} (phase {}): {}", c.check_id, c.step_id, c.phase_id, c.decision));
    }
    lines
}

/// `execute status`: the goal lines, indented under the execution's line.
pub(crate) fn print_goal(state: &ExecutionState) {
    for line in goal_lines(state) {
        outln!("  {line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_task_id_is_safe_for_refs_and_paths() {
        for condition in ["The README documents every flag!", "ünïcödé ∀", "  ", "a--b  c/../d"] {
            let id = default_task_id(condition);
            assert!(crate::engine::unsafe_id_reason(&id).is_none(), "{condition:?} → {id}");
            assert!(id.starts_with("goal-"), "{id}");
        }
        assert!(
            default_task_id("The README documents every flag!").starts_with("goal-the-readme-documents-every-flag-")
        );
    }
}
