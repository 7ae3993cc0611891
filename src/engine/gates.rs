//! What a phase's gate runs: the plan's command with `{files}` expanded, the accepted agent
//! additions, and whether anything is left to run at all (issue 14.4). A command that names
//! `{files}` is dropped when the phase changed no file (it would otherwise run with no file and
//! check nothing); a gate left with nothing to run is *skipped* with a reason, never passed.
//!
//! A `ci` or `review` gate with nothing to run is not skipped (issue 19.2): [`GatePlan::check`]
//! says who checks it instead, the forge's CI ([`GateCheck::ForgeCi`]) or the reviewer
//! ([`GateCheck::Reviewer`]).
//!
//! Pure: `actions` builds the GATE action from [`plan`], `check` accepts a `gate_skipped` event
//! only when [`plan`] says there is nothing to run. This module never runs a command.

use crate::engine::gate_additions;
use crate::model::action::GateCheck;
use crate::model::plan::PlanPhase;
use crate::model::state::ExecutionState;
use crate::model::text::shell_quote;

/// Skip reason of a gate whose commands all name `{files}` while the phase changed no file.
pub const NO_FILES_CHANGED: &str = "no files changed";
/// Skip reason of a gate with no command and no agent addition.
pub const NO_COMMAND: &str = "no command";

/// What the gate of `phase` runs now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatePlan {
    /// The plan's command, `{files}` replaced by the phase's changed files (each quoted for the
    /// shell it runs in); empty when the plan has none or it names `{files}` and no file changed.
    pub command: String,
    /// Accepted `GATE_ADDITION:` commands to run, in step order, each once; those naming
    /// `{files}` are left out when no file changed.
    pub additions: Vec<String>,
    /// `Some(reason)` ([`NO_FILES_CHANGED`] or [`NO_COMMAND`]) when nothing is left to run.
    pub skip_reason: Option<String>,
    /// `Some` for a `ci` or `review` gate with no command and no addition: who checks it.
    pub check: Option<GateCheck>,
}

/// Who checks a gate of `gate_type` that has nothing to run: `ci` the forge's CI, `review` the
/// reviewer; any other type is skipped.
pub fn external_check(gate_type: &str) -> Option<GateCheck> {
    match gate_type.trim() {
        "ci" => Some(GateCheck::ForgeCi),
        "review" => Some(GateCheck::Reviewer),
        _ => None,
    }
}

/// The files the steps of `phase` changed, sorted, each once.
pub fn phase_files<'a>(state: &'a ExecutionState, phase: &PlanPhase) -> Vec<&'a str> {
    let mut files: Vec<&str> = phase
        .steps
        .iter()
        .filter_map(|s| state.result(&s.step_id))
        .flat_map(|r| r.files_changed.iter().map(String::as_str))
        .collect();
    files.sort_unstable();
    files.dedup();
    files
}

/// The accepted `GATE_ADDITION:` commands of `phase`'s steps, in step order, each once.
fn phase_additions(state: &ExecutionState, phase: &PlanPhase) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for r in phase.steps.iter().filter_map(|s| state.result(&s.step_id)) {
        for a in &r.gate_additions {
            if !out.contains(a) {
                out.push(a.clone());
            }
        }
    }
    out
}

/// Whether an addition has a `{files}` word (the driver replaces it by one word per file).
fn addition_names_files(addition: &str) -> bool {
    gate_additions::split(addition).is_some_and(|words| words.iter().any(|w| w == "{files}"))
}

/// What the gate of `phase` runs now (an empty plan when the phase has no gate).
pub fn plan(state: &ExecutionState, phase: &PlanPhase) -> GatePlan {
    let planned = phase.gate.as_ref().map_or("", |g| g.command.trim());
    let files = phase_files(state, phase);
    let mut dropped_for_files = false;
    let command = if planned.contains("{files}") {
        if files.is_empty() {
            dropped_for_files = true;
            String::new()
        } else {
            let quoted: Vec<String> = files.iter().map(|f| shell_quote(f)).collect();
            planned.replace("{files}", &quoted.join(" "))
        }
    } else {
        planned.to_string()
    };
    let mut additions = phase_additions(state, phase);
    if files.is_empty() {
        let before = additions.len();
        additions.retain(|a| !addition_names_files(a));
        dropped_for_files |= additions.len() != before;
    }
    let nothing = command.is_empty() && additions.is_empty();
    // A `ci` or `review` gate with no command at all is checked by the forge or the reviewer;
    // one whose command names `{files}` with no file changed is still skipped.
    let check = (nothing && planned.is_empty())
        .then(|| phase.gate.as_ref().and_then(|g| external_check(&g.gate_type)))
        .flatten();
    let skip_reason =
        (nothing && check.is_none()).then(|| if dropped_for_files { NO_FILES_CHANGED } else { NO_COMMAND }.to_string());
    GatePlan { command, additions, skip_reason, check }
}
