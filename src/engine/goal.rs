//! Goal-driven execution: a plan with a `completion_condition` is judged at every phase
//! boundary, and rounded out with the phases the judge suggests (seed-spec §2.12).
//!
//! # How an evaluation runs
//!
//! When a phase is finished — its steps done, its approval given, its feedback answered, its
//! gate passed — and before the engine advances, `request_evaluation` appends one step to
//! that phase: `goal.<n>` (n = 1, 2, … over the execution), `step_type` [`GOAL_STEP_TYPE`], on
//! the agent named by the plan's extra key `goal_evaluator` (default [`DEFAULT_EVALUATOR`]).
//! From there it is an ordinary step: DISPATCH offers it, drivers run it like any step (the
//! headless driver in a fresh worktree of the feature branch, committing nothing it writes),
//! it has attempts, it is recovered after a crash like any step, and the board shows it inside
//! the phase it judges. Its prompt is [`crate::engine::prompt::goal_prompt`]. When its result
//! is recorded, `take_verdict` reads the verdict from the outcome and decides; the phase is
//! then done again and the engine advances.
//!
//! Why a real step rather than a virtual one kept beside the plan: every piece of machinery
//! that makes a step safe (journaled dispatch before launch, idempotent records, recovery of
//! in-flight attempts, retry, skip, the board) applies unchanged, and nothing outside this
//! module needs to know about goal ids. Why appended to the judged phase rather than a new
//! "Goal check" phase: no renumbering of later phases, and the phase's gate and approval have
//! already passed, so they are not asked again.
//!
//! # The verdict
//!
//! The outcome must hold one JSON object with a boolean `met`, in a fenced ```` ```json ````
//! block or bare in the text ([`parse_verdict`]): `{"met": false, "missing": ["…"],
//! "suggested_phases": [{PlanPhase-shaped}], "reasoning": "…", "confidence": 0.8}`. Anything
//! else is an invalid verdict: the evaluator step fails with `invalid goal verdict: <why>`, so
//! the execution fails saying so (nothing is guessed) and naming the command that asks again,
//! `baton execute retry-step --task-id <task> --step-id goal.<n>`.
//!
//! # The rules
//!
//! * **met** → recorded; the execution advances (and completes after the last phase). Later
//!   boundaries are judged again: the latest verdict is the goal's status.
//! * **not met, with usable suggestions and a round-out cycle left** (fewer than the plan's
//!   `max_amend_cycles`, default 3, used) → the suggested phases are amended in right after the
//!   judged phase, before any phase still planned (amendment trigger `goal_round_out`), and one
//!   cycle is used. Each of them is judged at its own boundary.
//! * **not met otherwise, at a boundary with phases still planned** → the execution goes on:
//!   the planned phases were reviewed work and may still meet the condition; only the last
//!   boundary can end the execution.
//! * **not met otherwise, at the last boundary** (no cycle left, or no usable suggestion) → the
//!   execution FAILS with the reason (the condition, what is missing, why nothing more can be
//!   tried); the goal's status is `exhausted`. An operator amend reopens it like any failure.
//!
//! A plan may place its own `goal_evaluation` step in a phase; that phase then gets no other,
//! and its step's verdict is read the same way. Skipping an evaluator step (`execute skip`)
//! skips that check.
//!
//! A suggestion is usable when it reads as a phase with at least one step and the amendment
//! rules accept it (unique step ids, `depends_on` on earlier steps, no team steps). An
//! evaluator writes free text, which never reaches a shell: automation steps are refused and a
//! suggested `gate` is dropped (noted in the check). Missing `phase_id`/`step_id` are assigned;
//! a step without `agent_name` goes to `backend-engineer`. At most [`MAX_SUGGESTED_PHASES`] per
//! check. Every check (verdict, what was done with it) and the cycles used are kept in
//! `ExecutionState::goal`, so a replay or a resume restores them (the original lost them:
//! seed-spec §5 #17).
//!
//! This module never does IO.

use serde_json::{Map, Value};

use crate::engine::amend;
use crate::model::goal::{GoalCheck, GoalStatus};
use crate::model::plan::{MachinePlan, PlanPhase, PlanStep};
use crate::model::state::{ExecutionState, StepStatus};
use crate::model::text::cut;

/// `step_type` of a goal evaluator step.
pub const GOAL_STEP_TYPE: &str = "goal_evaluation";
/// Evaluator agent when the plan does not name one.
pub const DEFAULT_EVALUATOR: &str = "code-reviewer";
/// The plan's extra key naming the evaluator agent.
pub const EVALUATOR_KEY: &str = "goal_evaluator";
/// Suggested phases considered per check, at most.
pub const MAX_SUGGESTED_PHASES: usize = 5;
/// Trigger of the amendments that round out a goal.
pub const ROUND_OUT_TRIGGER: &str = "goal_round_out";

const DEFAULT_WORKER: &str = "backend-engineer";
const DEFAULT_PHASE_NAME: &str = "Goal round-out";
const MAX_MISSING: usize = 20;
const MAX_ITEM_CHARS: usize = 500;
const MAX_REASONING_CHARS: usize = 4000;
/// Bare-object search: outcome characters scanned and `{` tried, at most.
const MAX_SCAN_CHARS: usize = 200_000;
const MAX_OBJECT_TRIES: usize = 500;

/// The plan's completion condition, trimmed; None when absent or blank (no goal).
pub fn condition(plan: &MachinePlan) -> Option<&str> {
    plan.completion_condition.as_deref().map(str::trim).filter(|c| !c.is_empty())
}

/// The evaluator agent: the plan's `goal_evaluator` (a non-blank string), else
/// [`DEFAULT_EVALUATOR`].
pub fn evaluator_agent(plan: &MachinePlan) -> String {
    plan.extra
        .get(EVALUATOR_KEY)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .unwrap_or(DEFAULT_EVALUATOR)
        .to_string()
}

/// True for a goal evaluator step.
pub fn is_evaluation(step: &PlanStep) -> bool {
    step.step_type == GOAL_STEP_TYPE
}

/// At the end of the current phase: appends its evaluator step when the plan has a goal and
/// the phase has none yet. Returns true when it appended one (the phase is not done again
/// until the step is).
pub(crate) fn request_evaluation(state: &mut ExecutionState) -> bool {
    if condition(&state.plan).is_none() {
        return false;
    }
    let pi = state.current_phase;
    let Some(phase) = state.plan.phases.get(pi) else { return false };
    if phase.steps.iter().any(|s| is_evaluation(s)) {
        return false;
    }
    let (phase_id, name) = (phase.phase_id, phase.name.clone());
    let mut n = state.plan.steps().filter(|(_, s)| is_evaluation(s)).count() + 1;
    while state.locate(&format!("goal.{n}")).is_some() {
        n += 1;
    }
    let mut step = PlanStep::new(
        format!("goal.{n}"),
        evaluator_agent(&state.plan),
        format!(
            "Judge whether the execution has met its completion condition at the end of phase {phase_id} ({name})."
        ),
    );
    step.step_type = GOAL_STEP_TYPE.to_string();
    step.expected_outcome = "A JSON verdict: {\"met\": true|false, \"missing\": [...], \"suggested_phases\": [...], \
                             \"reasoning\": \"...\"}"
        .to_string();
    state.plan.phases[pi].steps.push(Box::new(step));
    // Once per phase boundary: the plain rebuild keeps this module off the index's layout.
    state.reindex();
    true
}

/// A verdict read from an evaluator's outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// Is the condition met?
    pub met: bool,
    /// Confidence 0–1, when given.
    pub confidence: Option<f64>,
    /// What is missing (at most 20 items of 500 characters).
    pub missing: Vec<String>,
    /// Suggested phases, as written (JSON objects).
    pub suggested_phases: Vec<Value>,
    /// Why (at most 4000 characters).
    pub reasoning: String,
}

/// Reads the verdict in an evaluator's outcome: the first ```` ```json ```` (or unlabelled)
/// fenced block holding a JSON object with `met`, else the first bare top-level JSON object with
/// `met` (an object nested in another is not a verdict).
///
/// Errors (the reason, for `invalid goal verdict: <reason>`): no such object; a ```` ```json ````
/// block that is not valid JSON; `met` not a boolean; `missing` not a list of strings;
/// `suggested_phases` not a list of objects; `reasoning` not a string; `confidence` not a
/// number from 0 to 1.
pub fn parse_verdict(outcome: &str) -> Result<Verdict, String> {
    let object = find_object(outcome)?;
    let met = match object.get("met") {
        Some(Value::Bool(b)) => *b,
        Some(other) => return Err(format!("`met` must be true or false, not {}", shown(other))),
        None => return Err("the JSON object has no `met`".into()),
    };
    let missing = match object.get("missing") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => {
            let mut out = Vec::new();
            for item in items {
                let Value::String(s) = item else {
                    return Err(format!("`missing` must be a list of strings; it holds {}", shown(item)));
                };
                if !s.trim().is_empty() && out.len() < MAX_MISSING {
                    out.push(cut(s.trim(), MAX_ITEM_CHARS));
                }
            }
            out
        }
        Some(other) => return Err(format!("`missing` must be a list of strings, not {}", shown(other))),
    };
    let suggested_phases = match object.get("suggested_phases") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => {
            if let Some(bad) = items.iter().find(|v| !v.is_object()) {
                return Err(format!("`suggested_phases` must be a list of phase objects; it holds {}", shown(bad)));
            }
            items.clone()
        }
        Some(other) => return Err(format!("`suggested_phases` must be a list of phase objects, not {}", shown(other))),
    };
    let reasoning = match object.get("reasoning") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => cut(s.trim(), MAX_REASONING_CHARS),
        Some(other) => return Err(format!("`reasoning` must be a string, not {}", shown(other))),
    };
    let confidence = match object.get("confidence") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => match n.as_f64() {
            Some(c) if (0.0..=1.0).contains(&c) => Some(c),
            _ => return Err(format!("`confidence` must be a number from 0 to 1, not {n}")),
        },
        Some(other) => return Err(format!("`confidence` must be a number from 0 to 1, not {}", shown(other))),
    };
    Ok(Verdict { met, confidence, missing, suggested_phases, reasoning })
}

fn find_object(outcome: &str) -> Result<Map<String, Value>, String> {
    find_object_with(outcome, "met")
}

/// The first fenced ```` ```json ```` (or unlabelled) block holding a JSON object with `key`,
/// else the first bare top-level JSON object with `key` (shared by the goal and review verdicts).
///
/// Errors: no such object; a ```` ```json ```` block that is not valid JSON.
pub(crate) fn find_object_with(outcome: &str, key: &str) -> Result<Map<String, Value>, String> {
    // Fenced blocks first: the shape the prompt asks for.
    let mut lines = outcome.lines();
    while let Some(line) = lines.next() {
        let Some(tag) = line.trim().strip_prefix("```") else { continue };
        let tag = tag.trim().to_ascii_lowercase();
        let body: Vec<&str> = lines.by_ref().take_while(|l| !l.trim().starts_with("```")).collect();
        if tag != "json" && !tag.is_empty() {
            continue;
        }
        match serde_json::from_str::<Value>(&body.join("\n")) {
            Ok(Value::Object(map)) if map.contains_key(key) => return Ok(map),
            Ok(_) => {}
            Err(e) if tag == "json" => return Err(format!("the ```json block is not valid JSON ({e})")),
            Err(_) => {}
        }
    }
    let text: &str = match outcome.char_indices().nth(MAX_SCAN_CHARS) {
        Some((end, _)) => &outcome[..end],
        None => outcome,
    };
    // Top-level objects only: an object's inner objects are not verdicts of their own.
    let mut pos = 0;
    for _ in 0..MAX_OBJECT_TRIES {
        let Some(offset) = text[pos..].find('{') else { break };
        let start = pos + offset;
        let mut stream = serde_json::Deserializer::from_str(&text[start..]).into_iter::<Value>();
        match stream.next() {
            Some(Ok(Value::Object(map))) if map.contains_key(key) => return Ok(map),
            Some(Ok(_)) => pos = start + stream.byte_offset().max(1),
            _ => pos = start + 1,
        }
    }
    let what = if key == "met" { "a boolean `met`".to_string() } else { format!("`{key}`") };
    Err(format!("no JSON verdict found: expected a ```json block (or a bare JSON object) with {what}"))
}

fn shown(value: &Value) -> String {
    cut(&value.to_string(), 60)
}

/// After a result of `step_id` was applied: when it is a complete goal evaluator step, reads
/// its verdict and applies the rules of the module doc. An invalid verdict turns the step
/// into a failed one (settling then fails the execution with the reason).
pub(crate) fn take_verdict(state: &mut ExecutionState, step_id: &str, now: &str) {
    let Some(condition) = condition(&state.plan).map(str::to_string) else { return };
    let Some((pi, si)) = state.locate(step_id) else { return };
    let step = &state.plan.phases[pi].steps[si];
    if !is_evaluation(step) || state.step_status(step_id) != StepStatus::Complete {
        return;
    }
    let phase_id = state.plan.phases[pi].phase_id;
    let last_gate_passed = state.plan.phases[pi].gate.as_ref().map(|_| state.gate_passed(phase_id));
    let Some((verdict, evaluator)) =
        crate::engine::edits::take_judgement(state, step_id, "goal", "evaluator", parse_verdict)
    else {
        return;
    };
    let n = state.goal.checks.len() + 1;
    let mut check = GoalCheck {
        check_id: format!("g{n}"),
        step_id: step_id.to_string(),
        phase_id,
        completion_condition: condition.clone(),
        last_gate_passed,
        met: verdict.met,
        confidence: verdict.confidence,
        missing: verdict.missing.clone(),
        suggested_phases: verdict.suggested_phases.iter().take(MAX_SUGGESTED_PHASES).cloned().collect(),
        phases_added: Vec::new(),
        rejected_suggestions: Vec::new(),
        reasoning: verdict.reasoning.clone(),
        evaluator,
        decision: String::new(),
        evaluated_at: now.to_string(),
    };
    let last_boundary = pi + 1 >= state.plan.phases.len();
    if verdict.met {
        state.goal.status = GoalStatus::Met;
        check.decision =
            if last_boundary { "met: the execution completes".into() } else { "met: the planned phases go on".into() };
        state.goal.checks.push(check);
        return;
    }
    let max = state.plan.max_amend_cycles;
    let used = state.goal.amend_cycles_used;
    let mut suggestion_note = "the evaluator suggested no phase".to_string();
    if !verdict.suggested_phases.is_empty() {
        let (phases, rejected) = usable_phases(state, &verdict.suggested_phases);
        check.rejected_suggestions = rejected;
        if phases.is_empty() {
            suggestion_note = format!(
                "none of the {} suggested phases could be amended in ({})",
                verdict.suggested_phases.len(),
                check.rejected_suggestions.join("; ")
            );
        } else if used >= max {
            suggestion_note = format!("the round-out budget is spent ({used} of {max} cycles used)");
        } else {
            let missing = if check.missing.is_empty() { "condition not met".into() } else { check.missing.join("; ") };
            let description = format!("Goal round-out after check g{n} (phase {phase_id}): {}", cut(&missing, 300));
            amend::apply(state, &description, ROUND_OUT_TRIGGER, &phases, None, &[], now);
            check.phases_added = state.amendments.last().map(|a| a.phases_added.clone()).unwrap_or_default();
            state.goal.amend_cycles_used += 1;
            state.goal.status = GoalStatus::NotMet;
            check.decision = format!(
                "not met: amended in {} phase(s) {:?} (round-out cycle {} of {max})",
                phases.len(),
                check.phases_added,
                used + 1
            );
            state.goal.checks.push(check);
            return;
        }
    } else if used >= max {
        suggestion_note = format!(
            "the evaluator suggested no phase, and the round-out budget is spent ({used} of {max} cycles used)"
        );
    }
    if last_boundary {
        let missing =
            if check.missing.is_empty() { String::new() } else { format!("; missing: {}", check.missing.join("; ")) };
        let reason = format!(
            "goal not met at the last phase boundary (check g{n}, phase {phase_id}): {}{missing}; {suggestion_note}",
            cut(&condition, 300)
        );
        state.goal.status = GoalStatus::Exhausted;
        check.decision = format!("failed: {suggestion_note}");
        state.goal.checks.push(check);
        crate::engine::edits::fail(state, reason, now);
    } else {
        state.goal.status = GoalStatus::NotMet;
        check.decision = format!("not met: {suggestion_note}; the planned phases go on");
        state.goal.checks.push(check);
    }
}

/// The goal check a step `step_id` answered, in lines for a page (empty for other steps):
/// `goal g<n>: met|not met`, then `missing: …`, `reasoning: …`, `decision: …`, and each refused
/// suggestion.
pub fn check_lines(state: &ExecutionState, step_id: &str) -> Vec<String> {
    let Some(c) = state.goal.checks.iter().rev().find(|c| c.step_id == step_id) else { return Vec::new() };
    let mut out = vec![format!("goal {}: {}", c.check_id, if c.met { "met" } else { "not met" })];
    if !c.missing.is_empty() {
        out.push(format!("missing: {}", c.missing.join("; ")));
    }
    if !c.reasoning.is_empty() {
        out.push(format!("reasoning: {}", c.reasoning));
    }
    out.push(format!("decision: {}", c.decision));
    out.extend(c.rejected_suggestions.iter().map(|r| format!("refused suggestion: {r}")));
    out
}

/// The suggestions that can be amended in after the current phase, in order, and the reasons
/// the others cannot.
fn usable_phases(state: &ExecutionState, suggested: &[Value]) -> (Vec<PlanPhase>, Vec<String>) {
    let mut accepted: Vec<PlanPhase> = Vec::new();
    let mut rejected = Vec::new();
    for (i, raw) in suggested.iter().enumerate() {
        let n = i + 1;
        if i >= MAX_SUGGESTED_PHASES {
            rejected.push(format!("suggested phase {n}: over the limit of {MAX_SUGGESTED_PHASES} per check"));
            continue;
        }
        let (phase, dropped_gate) = match suggested_phase(raw) {
            Ok(p) => p,
            Err(why) => {
                rejected.push(format!("suggested phase {n}: {why}"));
                continue;
            }
        };
        if dropped_gate {
            rejected.push(format!(
                "suggested phase {n} ({}): its gate was dropped (an evaluator's command never runs through a shell)",
                phase.name
            ));
        }
        let mut trial = accepted.clone();
        trial.push(phase.clone());
        match amend::check(state, &trial, None, &[]) {
            Ok(()) => accepted.push(phase),
            Err(e) => rejected.push(format!("suggested phase {n} ({}): {e}", phase.name)),
        }
    }
    (accepted, rejected)
}

/// One suggested phase as a [`PlanPhase`] (defaults filled in), and whether a gate was dropped.
fn suggested_phase(raw: &Value) -> Result<(PlanPhase, bool), String> {
    let Value::Object(map) = raw else { return Err("not a JSON object".into()) };
    let mut map = map.clone();
    map.insert("phase_id".into(), Value::from(0));
    let named = map.get("name").and_then(Value::as_str).is_some_and(|n| !n.trim().is_empty());
    if !named {
        map.insert("name".into(), Value::from(DEFAULT_PHASE_NAME));
    }
    let dropped_gate = map.remove("gate").is_some_and(|g| !g.is_null());
    match map.get_mut("steps") {
        Some(Value::Array(steps)) if !steps.is_empty() => {
            for (si, step) in steps.iter_mut().enumerate() {
                let Value::Object(s) = step else { return Err(format!("step {} is not a JSON object", si + 1)) };
                s.entry("step_id").or_insert_with(|| Value::from(""));
                let has_agent = s.get("agent_name").and_then(Value::as_str).is_some_and(|a| !a.trim().is_empty());
                if !has_agent {
                    s.insert("agent_name".into(), Value::from(DEFAULT_WORKER));
                }
                match s.get("step_type").and_then(Value::as_str) {
                    Some("automation") => {
                        return Err(format!("step {} is an automation step (a shell command from an agent)", si + 1))
                    }
                    Some(GOAL_STEP_TYPE) => {
                        return Err(format!("step {} is a goal evaluation; Baton adds those itself", si + 1))
                    }
                    _ => {}
                }
            }
        }
        _ => return Err("it has no steps".into()),
    }
    let phase: PlanPhase = serde_json::from_value(Value::Object(map)).map_err(|e| format!("not a phase ({e})"))?;
    Ok((phase, dropped_gate))
}
