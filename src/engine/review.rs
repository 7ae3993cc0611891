//! The `review` gate without a command (issue 19.2): the project's reviewer agent judges the
//! phase, or a human does when none is configured — never a silent pass.
//!
//! # How a review runs
//!
//! The GATE action of such a gate says `check: reviewer`. A driver with a reviewer agent
//! configured (`baton.toml` `[review] agent`, or the project's) records `review_requested`;
//! the engine then appends one step to the phase, `review.<n>` (n = 1, 2, … over the
//! execution), `step_type` [`REVIEW_STEP_TYPE`], on that agent, exactly as a goal evaluation is
//! appended ([`crate::engine::goal`]): an ordinary step with journaled dispatch, attempts,
//! recovery and spend, whose writes are never kept. Its prompt is [`review_prompt`]. When its
//! result is recorded, `take_verdict` reads the verdict and records the gate's result:
//! `pass` passes the gate (the phase advances), `fail` fails it with the findings as its
//! output (the phase's last working step runs again with them, then the gate is asked again,
//! up to the gate failure cap). An unreadable verdict fails the review step with
//! `invalid review verdict: <why>`.
//!
//! A driver with no reviewer agent records `gate_approval_requested`: the execution waits for
//! an approval of the phase ([`crate::model::state::PendingApprovalRequest::gate`]); approve
//! passes the gate, reject fails it with the feedback.
//!
//! # The verdict
//!
//! One JSON object with a string `verdict` (`pass` or `fail`), in a fenced ```` ```json ````
//! block or bare in the text, parsed like the goal verdict: `{"verdict": "fail", "findings":
//! ["src/a.rs:12: the error is dropped"], "summary": "…"}`. A finding may also be an object
//! `{"file": …, "line": …, "message": …}`. A `fail` without findings is read as is.
//!
//! This module never does IO.

use std::fmt::Write as _;

use serde_json::Value;

use crate::model::plan::PlanStep;
use crate::model::state::{ExecutionState, StepStatus};
use crate::model::text::{cut, first_line};

/// `step_type` of a reviewer step.
pub const REVIEW_STEP_TYPE: &str = "gate_review";
/// Findings kept per verdict, at most.
const MAX_FINDINGS: usize = 30;
/// Characters per finding, at most.
const MAX_FINDING_CHARS: usize = 500;
/// Characters of the summary, at most.
const MAX_SUMMARY_CHARS: usize = 2000;

/// True for a reviewer step.
pub fn is_review(step: &PlanStep) -> bool {
    step.step_type == REVIEW_STEP_TYPE
}

/// A reviewer's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReviewVerdict {
    /// `pass`.
    pub pass: bool,
    /// What the reviewer found (trimmed; at most 30 of 500 characters).
    pub findings: Vec<String>,
    /// Its summary (at most 2000 characters).
    pub summary: String,
}

impl ReviewVerdict {
    /// The gate output: `review by <agent>: pass|fail`, the summary, then `- finding` lines.
    pub fn output(&self, agent: &str) -> String {
        let mut out = format!("review by {agent}: {}\n", if self.pass { "pass" } else { "fail" });
        if !self.summary.is_empty() {
            let _ = writeln!(out, "{}", self.summary);
        }
        for f in &self.findings {
            let _ = writeln!(out, "- {f}");
        }
        out
    }
}

/// Reads the verdict in a reviewer's outcome (see the module doc).
///
/// Errors (the reason, for `invalid review verdict: <reason>`): no JSON object with `verdict`;
/// a ```` ```json ```` block that is not valid JSON; `verdict` neither `pass` nor `fail`;
/// `findings` not a list; `summary` not a string.
pub fn parse_verdict(outcome: &str) -> Result<ReviewVerdict, String> {
    let object = crate::engine::goal::find_object_with(outcome, "verdict")?;
    let pass = match object.get("verdict") {
        Some(Value::String(s)) if s.trim().eq_ignore_ascii_case("pass") => true,
        Some(Value::String(s)) if s.trim().eq_ignore_ascii_case("fail") => false,
        Some(other) => {
            return Err(format!("`verdict` must be \"pass\" or \"fail\", not {}", cut(&other.to_string(), 60)))
        }
        None => return Err("the JSON object has no `verdict`".into()),
    };
    let findings = match object.get("findings") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items.iter().filter_map(finding).take(MAX_FINDINGS).collect(),
        Some(other) => return Err(format!("`findings` must be a list, not {}", cut(&other.to_string(), 60))),
    };
    let summary = match object.get("summary") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => cut(s.trim(), MAX_SUMMARY_CHARS),
        Some(other) => return Err(format!("`summary` must be a string, not {}", cut(&other.to_string(), 60))),
    };
    Ok(ReviewVerdict { pass, findings, summary })
}

/// One finding as a line: a string as it is, an object as `file:line: message`.
fn finding(item: &Value) -> Option<String> {
    let text = match item {
        Value::String(s) => s.trim().to_string(),
        Value::Object(o) => {
            let text = |k: &str| o.get(k).map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string));
            let message = text("message").or_else(|| text("text")).unwrap_or_default();
            match (text("file"), text("line")) {
                (Some(f), Some(l)) => format!("{f}:{l}: {message}"),
                (Some(f), None) => format!("{f}: {message}"),
                _ => message,
            }
        }
        other => other.to_string(),
    };
    let text = text.trim().replace(['\r', '\n'], " ");
    (!text.is_empty()).then(|| cut(&text, MAX_FINDING_CHARS))
}

/// Appends the reviewer step `review.<n>` on `agent` to the current phase (see the module doc).
pub(crate) fn request(state: &mut ExecutionState, agent: &str) {
    let pi = state.current_phase;
    let Some(phase) = state.plan.phases.get(pi) else { return };
    let (phase_id, name) = (phase.phase_id, phase.name.clone());
    let mut n = state.plan.steps().filter(|(_, s)| is_review(s)).count() + 1;
    while state.locate(&format!("review.{n}")).is_some() {
        n += 1;
    }
    let mut step = PlanStep::new(
        format!("review.{n}"),
        agent.to_string(),
        format!("Review the changes of phase {phase_id} ({name}) for its review gate."),
    );
    step.step_type = REVIEW_STEP_TYPE.to_string();
    step.expected_outcome =
        "A JSON verdict: {\"verdict\": \"pass\"|\"fail\", \"findings\": [...], \"summary\": \"...\"}".to_string();
    state.plan.phases[pi].steps.push(Box::new(step));
    state.reindex();
}

/// The prompt of reviewer step `step`: the phase, what its steps did and changed, earlier
/// findings of this gate, and the verdict format.
pub fn review_prompt(state: &ExecutionState, step: &PlanStep) -> String {
    let phase = state.locate(&step.step_id).and_then(|(pi, _)| state.plan.phases.get(pi));
    let mut out = String::with_capacity(2048);
    let _ = writeln!(out, "# Baton review: step {} of {}\n", step.step_id, state.task_id);
    let _ = writeln!(out, "You are **{}**, the reviewer of this change.\n", step.agent_name);
    let _ = writeln!(out, "## Task summary\n{}\n", state.plan.task_summary.trim());
    if let Some(phase) = phase {
        let _ = writeln!(out, "## Phase under review\nPhase {} ({}).\n", phase.phase_id, phase.name);
        let _ = writeln!(out, "## What its steps did");
        let mut files: Vec<&str> = Vec::new();
        for s in phase.steps.iter().filter(|s| !is_review(s) && !crate::engine::goal::is_evaluation(s)) {
            if let Some(r) = state.result(&s.step_id) {
                let _ = writeln!(out, "- {} ({}): {}", s.step_id, r.agent_name, cut(first_line(&r.outcome), 200));
                files.extend(r.files_changed.iter().map(String::as_str));
            }
        }
        files.sort_unstable();
        files.dedup();
        if !files.is_empty() {
            let _ = writeln!(
                out,
                "\n## Files changed\n{}",
                files.iter().map(|f| format!("- {f}")).collect::<Vec<_>>().join("\n")
            );
        }
        let earlier: Vec<_> = state.gate_results.iter().filter(|g| g.phase_id == phase.phase_id && !g.passed).collect();
        if !earlier.is_empty() {
            let _ = writeln!(out, "\n## Earlier failed reviews of this phase");
            for g in earlier {
                let _ = writeln!(out, "{}", cut(g.output.trim(), 1500));
            }
        }
        out.push('\n');
    }
    out.push_str(
        "## How to answer\nThe working directory holds the feature branch with the phase's changes. Read the \
         changes; do not modify any file (nothing you write is kept). End your answer with one JSON object in a \
         ```json block:\n\n```json\n{\"verdict\": \"pass\", \"findings\": [], \"summary\": \"...\"}\n```\n\n\
         `verdict` is \"pass\" or \"fail\"; `fail` only for problems that must be fixed before the change can \
         merge, each one in `findings` as \"file:line: what is wrong\".\n",
    );
    out
}

/// The gate result a reviewer's verdict gives (recorded by `mutate`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GateVerdict {
    /// The phase whose gate it decides.
    pub(crate) phase_id: i64,
    /// Pass or fail.
    pub(crate) passed: bool,
    /// The gate output ([`ReviewVerdict::output`]).
    pub(crate) output: String,
    /// What checked (`reviewer agent <name> (<step>)`).
    pub(crate) command: String,
}

/// After a result of `step_id` was applied: when it is a complete reviewer step, reads its
/// verdict and returns the gate result it gives (see the module doc). An invalid verdict turns
/// the step into a failed one (settling then fails the execution with the reason).
pub(crate) fn take_verdict(state: &mut ExecutionState, step_id: &str) -> Option<GateVerdict> {
    let (pi, si) = state.locate(step_id)?;
    if !is_review(&state.plan.phases[pi].steps[si]) || state.step_status(step_id) != StepStatus::Complete {
        return None;
    }
    let phase_id = state.plan.phases[pi].phase_id;
    let (verdict, agent) = crate::engine::edits::take_judgement(state, step_id, "review", "reviewer", parse_verdict)?;
    Some(GateVerdict {
        phase_id,
        passed: verdict.pass,
        output: verdict.output(&agent),
        command: format!("reviewer agent {agent} ({step_id})"),
    })
}
