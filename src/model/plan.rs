//! The MachinePlan: phases of steps with gates, approvals and feedback questions.
//!
//! Field names, defaults and omit-empty rules follow agent-baton's `plan.json` (seed-spec
//! §1.3–§1.9), so a plan written for agent-baton loads here and re-serializes to the same JSON
//! value. Keys the model does not type are kept verbatim in `extra` maps: incidental keys of the
//! original (`foresight_insights`, `knowledge`, …) pass through silently, unknown keys pass through
//! and are reported by [`MachinePlan::unknown_keys`]. This module never does IO.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Extra JSON keys of a record, kept verbatim so a plan round-trips unchanged.
pub type Extra = BTreeMap<String, Value>;

fn is_false(b: &bool) -> bool {
    !*b
}
fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}
fn default_risk() -> String {
    "LOW".into()
}
fn default_budget_tier() -> String {
    "standard".into()
}
fn default_execution_mode() -> String {
    "phased".into()
}
fn default_git_strategy() -> String {
    "commit-per-agent".into()
}
fn default_intervention() -> String {
    "low".into()
}
fn default_archetype() -> String {
    "phased".into()
}
fn default_max_amend_cycles() -> u32 {
    3
}
fn default_model() -> String {
    "sonnet".into()
}
fn default_step_type() -> String {
    "developing".into()
}
fn default_max_turns() -> u32 {
    10
}
fn default_role() -> String {
    "implementer".into()
}
fn default_strategy() -> String {
    "concatenate".into()
}
fn default_synthesis_agent() -> String {
    "code-reviewer".into()
}
fn default_conflict_handling() -> String {
    "auto_merge".into()
}

/// A whole plan (agent-baton's `plan.json`, seed-spec §1.3).
///
/// `task_id` names the execution; `phases` run in list order. Validation lives in
/// `engine::validate`; a value of this type is only known to be well-shaped, not valid.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MachinePlan {
    /// Execution id (`YYYY-MM-DD-<slug>-<8hex>` from agent-baton's planner; any ref-safe string).
    pub task_id: String,
    /// One-line summary, injected into every delegation prompt.
    pub task_summary: String,
    /// `LOW`, `MEDIUM`, `HIGH` or `CRITICAL`; HIGH/CRITICAL start with a pre-flight approval.
    #[serde(default = "default_risk")]
    pub risk_level: String,
    /// `lean`, `standard` or `full`.
    #[serde(default = "default_budget_tier")]
    pub budget_tier: String,
    /// Display only: `phased`, `parallel` or `sequential`.
    #[serde(default = "default_execution_mode")]
    pub execution_mode: String,
    /// `commit-per-agent` (default), `branch-per-agent`, `none`.
    #[serde(default = "default_git_strategy")]
    pub git_strategy: String,
    /// The phases, in execution order.
    #[serde(default)]
    pub phases: Vec<PlanPhase>,
    /// Preamble for every delegation prompt.
    #[serde(default)]
    pub shared_context: String,
    /// `low`, `medium` or `high` (knowledge-gap escalation).
    #[serde(default = "default_intervention")]
    pub intervention_level: String,
    /// `direct`, `phased` or `investigative`.
    #[serde(default = "default_archetype")]
    pub archetype: String,
    /// Investigative phase retries.
    #[serde(default)]
    pub max_retry_phases: u32,
    /// Goal for goal-driven execution; `null` when there is none.
    #[serde(default)]
    pub completion_condition: Option<String>,
    /// Goal round-out budget.
    #[serde(default = "default_max_amend_cycles")]
    pub max_amend_cycles: u32,
    /// Concurrency limits; omitted when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_limits: Option<ResourceLimits>,
    /// Every other key, verbatim (see [`MachinePlan::unknown_keys`]).
    #[serde(flatten)]
    #[schema(ignore)]
    pub extra: Extra,
}

/// Keys of agent-baton's `MachinePlan` that Baton keeps verbatim without typing them.
const PLAN_PASSTHROUGH: &[&str] = &[
    "pattern_source",
    "created_at",
    "task_type",
    "explicit_knowledge_packs",
    "explicit_knowledge_docs",
    "complexity",
    "classification_source",
    "classification_signals",
    "classification_confidence",
    "detected_stack",
    "foresight_insights",
    "depends_on_task",
    "plan_diagnostics",
    "compliance_fail_closed",
    "manager_mode",
    "token_budget",
    // Baton's own: the agent that evaluates `completion_condition` (engine::goal).
    "goal_evaluator",
];
const PHASE_PASSTHROUGH: &[&str] = &[];
const STEP_PASSTHROUGH: &[&str] = &["knowledge", "parallel_safe", "max_estimated_minutes"];
const GATE_PASSTHROUGH: &[&str] = &["description", "fail_on"];
const MEMBER_PASSTHROUGH: &[&str] = &["deliverables"];

/// Concurrency limits of a plan (seed-spec §1.3 `resource_limits`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ResourceLimits {
    /// Concurrent executions.
    #[serde(default)]
    pub max_concurrent_executions: u32,
    /// Concurrent agent processes for this execution; lowers the runtime's cap when smaller.
    #[serde(default)]
    pub max_concurrent_agents: u32,
    /// Token rate limit; 0 = none.
    #[serde(default)]
    pub max_tokens_per_minute: u64,
    /// Concurrent executions per project.
    #[serde(default)]
    pub max_concurrent_per_project: u32,
    /// Other keys, verbatim.
    #[serde(flatten)]
    #[schema(ignore)]
    pub extra: Extra,
}

/// One phase: steps, then (in order) approval, feedback questions and gate (seed-spec §1.4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PlanPhase {
    /// Phase id; 1-based from the planner; renumbered after amendments.
    pub phase_id: i64,
    /// Display name.
    pub name: String,
    /// Steps; an empty phase goes straight to its gate or advances.
    // Boxed: every CLI call without a server decodes the plan, and a `Vec` of 392-byte steps
    // moved each step again on every regrowth (and a 5,000-step phase touched 8 MB of memory
    // for 2 MB of steps); boxes move 8 bytes (issue 14.8). Same JSON, same schema.
    #[serde(default)]
    pub steps: Vec<Box<PlanStep>>,
    /// QA gate run after the steps (and approval, feedback).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<PlanGate>,
    /// Human approval at the end of the phase.
    #[serde(default, skip_serializing_if = "is_false")]
    pub approval_required: bool,
    /// Context shown to the approver, verbatim when non-empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub approval_description: String,
    /// Questions asked after the approval; each answer inserts a phase.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub feedback_questions: Vec<FeedbackQuestion>,
    /// Per-phase risk override.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub risk_level: String,
    /// Other keys, verbatim.
    #[serde(flatten)]
    #[schema(ignore)]
    pub extra: Extra,
}

/// One unit of agent work (seed-spec §1.5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PlanStep {
    /// `"<phase>.<n>"` by convention; any ref- and path-safe id is accepted.
    pub step_id: String,
    /// Roster name of the agent that carries the step out.
    pub agent_name: String,
    /// What to do; the heart of the delegation prompt.
    pub task_description: String,
    /// Model alias passed to the agent profile.
    #[serde(default = "default_model")]
    pub model: String,
    /// Steps (same or earlier phase, declared earlier) that must be complete first.
    #[serde(default)]
    pub depends_on: Vec<String>,
    /// Files the step should produce.
    #[serde(default)]
    pub deliverables: Vec<String>,
    /// Path prefixes the step may change (empty = anywhere).
    #[serde(default)]
    pub allowed_paths: Vec<String>,
    /// Path prefixes the step must not change.
    #[serde(default)]
    pub blocked_paths: Vec<String>,
    /// Files to read first.
    #[serde(default)]
    pub context_files: Vec<String>,
    /// `developing`, `planning`, `reviewing`, `testing`, `task`, `consulting` or `automation`.
    #[serde(default = "default_step_type")]
    pub step_type: String,
    /// Team members; non-empty makes this a team step.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub team: Vec<TeamMember>,
    /// How team members' outputs are combined.
    // Boxed: most steps have none, and a plan step is decoded by every CLI call without a
    // server; inline it took 112 of the step's 504 bytes (issue 14.8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synthesis: Option<Box<SynthesisSpec>>,
    /// Interactive step: the agent and a human take turns.
    #[serde(default, skip_serializing_if = "is_false")]
    pub interactive: bool,
    /// Turn limit of an interactive step; `None` means the default of 10
    /// (see [`PlanStep::max_turns`]).
    #[serde(default, rename = "max_turns", skip_serializing_if = "Option::is_none")]
    pub max_turns_field: Option<u32>,
    /// Shell command of an `automation` step.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub command: String,
    /// What success looks like; echoed on DISPATCH.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub expected_outcome: String,
    /// Per-step timeout in seconds; 0 = the runtime default.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub timeout_seconds: u64,
    /// `false` says the step may legitimately change nothing: an attempt that reports zero
    /// tokens and zero cost and leaves no commit then still completes. Absent (or `true`), such
    /// an attempt fails as "agent did no work" (see [`PlanStep::expects_changes`]; issue 15.7).
    /// Kept as written, so `true` and `false` both round-trip.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect_changes: Option<bool>,
    /// `true` lets an attempt's commit delete more than half of the files tracked at its base;
    /// absent (or `false`), consolidation refuses such a commit (see
    /// [`PlanStep::allows_mass_deletion`]; issue 15.8). Kept as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_mass_deletion: Option<bool>,
    /// Names of the MCP servers the step's agent gets, each defined in `baton.toml`'s
    /// `[mcp_servers.<name>]` (seed-spec §3.10; an unknown name is refused when the execution
    /// is created). Empty: Baton passes none (the agent CLI keeps its own configuration).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_servers: Vec<String>,
    /// Other keys, verbatim.
    #[serde(flatten)]
    #[schema(ignore)]
    pub extra: Extra,
}

impl PlanStep {
    /// A plain step with defaults for every optional field.
    pub fn new(step_id: impl Into<String>, agent_name: impl Into<String>, task: impl Into<String>) -> Self {
        PlanStep {
            step_id: step_id.into(),
            agent_name: agent_name.into(),
            task_description: task.into(),
            model: default_model(),
            depends_on: Vec::new(),
            deliverables: Vec::new(),
            allowed_paths: Vec::new(),
            blocked_paths: Vec::new(),
            context_files: Vec::new(),
            step_type: default_step_type(),
            team: Vec::new(),
            synthesis: None,
            interactive: false,
            max_turns_field: None,
            command: String::new(),
            expected_outcome: String::new(),
            timeout_seconds: 0,
            expect_changes: None,
            allow_mass_deletion: None,
            mcp_servers: Vec::new(),
            extra: Extra::new(),
        }
    }

    /// Turn limit of an interactive step (default 10).
    pub fn max_turns(&self) -> u32 {
        self.max_turns_field.unwrap_or_else(default_max_turns)
    }

    /// Whether an attempt of this step must leave some trace of work (tokens, cost, a commit or
    /// changed files): `expect_changes`, default `true`.
    pub fn expects_changes(&self) -> bool {
        self.expect_changes.unwrap_or(true)
    }

    /// Whether an attempt's commit may delete more than half of the tracked files:
    /// `allow_mass_deletion`, default `false`.
    pub fn allows_mass_deletion(&self) -> bool {
        self.allow_mass_deletion.unwrap_or(false)
    }

    /// True for a step whose work is a shell command rather than an agent.
    pub fn is_automation(&self) -> bool {
        self.step_type == "automation"
    }

    /// Every member of a team step, flattened depth-first with each lead before its
    /// `sub_team` (seed-spec §3.6); empty for an ordinary step.
    pub fn flat_members(&self) -> Vec<&TeamMember> {
        fn walk<'a>(out: &mut Vec<&'a TeamMember>, members: &'a [TeamMember]) {
            for m in members {
                out.push(m);
                walk(out, &m.sub_team);
            }
        }
        let mut out = Vec::new();
        walk(&mut out, &self.team);
        out
    }

    /// The synthesis strategy of a team step: `concatenate` (the default), `merge_files` or
    /// `agent_synthesis`.
    pub fn synthesis_strategy(&self) -> &str {
        self.synthesis.as_ref().map_or("concatenate", |s| s.strategy.as_str())
    }

    /// Id of the synthesis dispatch of an `agent_synthesis` team step: `<step_id>.synthesis`.
    pub fn synthesis_id(&self) -> String {
        format!("{}.synthesis", self.step_id)
    }
}

impl PlanPhase {
    /// An empty phase with no gate, approval or questions.
    pub fn new(phase_id: i64, name: impl Into<String>) -> Self {
        PlanPhase {
            phase_id,
            name: name.into(),
            steps: Vec::new(),
            gate: None,
            approval_required: false,
            approval_description: String::new(),
            feedback_questions: Vec::new(),
            risk_level: String::new(),
            extra: Extra::new(),
        }
    }
}

/// A QA gate (seed-spec §1.6). Accepts `type` as an alias of `gate_type` on input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PlanGate {
    /// `build`, `test`, `lint`, `spec`, `review` or `ci`.
    #[serde(alias = "type")]
    pub gate_type: String,
    /// Shell command (plan authors write shell); `{files}` becomes the phase's changed files.
    #[serde(default)]
    pub command: String,
    /// Other keys (`description`, `fail_on`, …), verbatim.
    #[serde(flatten)]
    #[schema(ignore)]
    pub extra: Extra,
}

/// A member of a team step (seed-spec §1.7).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TeamMember {
    /// `"<phase>.<n>.<letter>"`.
    pub member_id: String,
    /// Roster name.
    pub agent_name: String,
    /// `lead`, `implementer` or `reviewer`.
    #[serde(default = "default_role")]
    pub role: String,
    /// The member's task.
    #[serde(default)]
    pub task_description: String,
    /// Model alias.
    #[serde(default = "default_model")]
    pub model: String,
    /// Other member ids of the same step.
    #[serde(default)]
    pub depends_on: Vec<String>,
    /// Nested members (lead only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(no_recursion)]
    pub sub_team: Vec<TeamMember>,
    /// Synthesis of the sub-team.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synthesis: Option<SynthesisSpec>,
    /// Other keys (`deliverables`, …), verbatim.
    #[serde(flatten)]
    #[schema(ignore)]
    pub extra: Extra,
}

impl TeamMember {
    /// The member's `deliverables` (kept verbatim in its extra keys): the strings of the list.
    pub fn deliverables(&self) -> Vec<String> {
        self.extra
            .get("deliverables")
            .and_then(|v| v.as_array())
            .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
            .unwrap_or_default()
    }
}

/// How a team's outputs are combined (seed-spec §1.7).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SynthesisSpec {
    /// `concatenate`, `merge_files` or `agent_synthesis`.
    #[serde(default = "default_strategy")]
    pub strategy: String,
    /// Agent of `agent_synthesis`.
    #[serde(default = "default_synthesis_agent")]
    pub synthesis_agent: String,
    /// Prompt; `{member_outcomes}` is substituted.
    #[serde(default)]
    pub synthesis_prompt: String,
    /// `auto_merge`, `escalate` or `fail`.
    #[serde(default = "default_conflict_handling")]
    pub conflict_handling: String,
    /// Other keys, verbatim.
    #[serde(flatten)]
    #[schema(ignore)]
    pub extra: Extra,
}

/// A question asked at the end of a phase; the chosen option dispatches a step (seed-spec §1.8).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FeedbackQuestion {
    /// Unique within the phase.
    pub question_id: String,
    /// The question.
    #[serde(default)]
    pub question: String,
    /// Why it is asked.
    #[serde(default)]
    pub context: String,
    /// 2–6 options.
    #[serde(default)]
    pub options: Vec<String>,
    /// Agent per option (missing → `backend-engineer`).
    #[serde(default)]
    pub option_agents: Vec<String>,
    /// Prompt per option (missing → the option text); `{task}` → the plan's summary.
    #[serde(default)]
    pub option_prompts: Vec<String>,
    /// Other keys, verbatim.
    #[serde(flatten)]
    #[schema(ignore)]
    pub extra: Extra,
}

/// The audit record of one amendment (seed-spec §1.9).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PlanAmendment {
    /// `amend-<n>`.
    pub amendment_id: String,
    /// `manual`, `approval_feedback`, `feedback`, `gate_feedback`, …
    #[serde(default)]
    pub trigger: String,
    /// Phase that triggered it.
    #[serde(default)]
    pub trigger_phase_id: i64,
    /// Why.
    #[serde(default)]
    pub description: String,
    /// Ids (after renumbering) of the inserted phases.
    #[serde(default)]
    pub phases_added: Vec<i64>,
    /// Ids (after renumbering) of the inserted steps.
    #[serde(default)]
    pub steps_added: Vec<String>,
    /// When (RFC 3339).
    #[serde(default)]
    pub created_at: String,
    /// Reviewer feedback that caused it.
    #[serde(default)]
    pub feedback: String,
    /// Free-form strings.
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    /// Other keys, verbatim.
    #[serde(flatten)]
    #[schema(ignore)]
    pub extra: Extra,
}

/// A plan file that did not parse: the JSON path of the offending field and what was wrong.
/// Displayed as `phases[0].steps[1]: missing field `agent_name` at line 4 column 9`; text
/// that is not JSON at all as `not valid JSON: EOF while parsing a value at line 1 column 16`,
/// and a document of the wrong shape as `the plan: invalid type: …` (no path to name).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}: {message}", self.subject())]
pub struct PlanParseError {
    /// JSON path such as `phases[0].steps[1].agent_name` (`.` for the document itself, `?`
    /// where the text stopped being JSON before a path was known).
    pub path: String,
    /// serde's description: missing field, invalid type, …
    pub message: String,
    /// Whether the text is not JSON (a syntax error or an early end), rather than JSON of the
    /// wrong shape.
    pub syntax: bool,
}

impl PlanParseError {
    fn from_serde(path: &serde_path_to_error::Path, err: &serde_json::Error) -> PlanParseError {
        use serde_json::error::Category;
        let syntax = matches!(err.classify(), Category::Syntax | Category::Eof);
        let mut message = err.to_string();
        // serde_json's words for a token that starts no JSON value (`not json` fails at its `o`,
        // read as the start of `null`).
        for jargon in ["expected ident", "expected value"] {
            if let Some(rest) = message.strip_prefix(jargon).filter(|_| syntax) {
                message = format!("expected a JSON value{rest}");
                break;
            }
        }
        let path = path.to_string();
        if !syntax {
            message = in_json_words(&message);
            // A document of the wrong type fails before its first character is read, where
            // serde_json counts column 0: the position says nothing the subject does not.
            if matches!(path.as_str(), "." | "?" | "") {
                message = message.strip_suffix(" at line 1 column 0").map_or(message.clone(), str::to_string);
            }
        }
        PlanParseError { path, message, syntax }
    }

    /// What the error is about: the path, or the document when there is no path to name.
    fn subject(&self) -> &str {
        match self.path.as_str() {
            _ if self.syntax => "not valid JSON",
            "." | "?" | "" => "the plan",
            path => path,
        }
    }
}

/// serde's words for a JSON shape in a type error, in JSON's own: `invalid type: sequence,
/// expected struct PlanPhase` reads `invalid type: array, expected a PlanPhase object`.
fn in_json_words(message: &str) -> String {
    let mut out = message.to_string();
    for (serde, json) in
        [("invalid type: sequence,", "invalid type: array,"), ("invalid type: map,", "invalid type: object,")]
    {
        if let Some(rest) = out.strip_prefix(serde) {
            out = format!("{json}{rest}");
        }
    }
    if let Some(at) = out.find("expected struct ") {
        let name_at = at + "expected struct ".len();
        let name_len = out[name_at..].find(|c: char| !c.is_alphanumeric() && c != '_').unwrap_or(out.len() - name_at);
        let name = out[name_at..name_at + name_len].to_string();
        out.replace_range(at..name_at + name_len, &format!("expected a {name} object"));
    }
    out
}

/// An unknown key found in a plan: kept verbatim, reported as a warning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownKey {
    /// JSON path of the key, e.g. `phases[0].requires_approval`.
    pub path: String,
}

impl std::fmt::Display for UnknownKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "unknown key `{}` (kept, but Baton does not use it)", self.path)
    }
}

impl MachinePlan {
    /// Parses a plan from JSON text.
    ///
    /// Errors name the JSON path and the missing or mistyped field
    /// (`phases[0].steps[1]: missing field \`agent_name\``).
    pub fn from_json(text: &str) -> Result<MachinePlan, PlanParseError> {
        // Editors on some platforms start UTF-8 files with a byte-order mark.
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let de = &mut serde_json::Deserializer::from_str(text);
        serde_path_to_error::deserialize(de).map_err(|err| PlanParseError::from_serde(err.path(), err.inner()))
    }

    /// Parses a plan from an already-parsed JSON value (same errors as [`MachinePlan::from_json`]).
    pub fn from_value(value: Value) -> Result<MachinePlan, PlanParseError> {
        serde_path_to_error::deserialize(value).map_err(|err| PlanParseError::from_serde(err.path(), err.inner()))
    }

    /// Keys of the plan that agent-baton does not define either: kept verbatim, reported as
    /// warnings (a misspelt `requires_approval` must not pass silently, seed-spec §5 #4).
    pub fn unknown_keys(&self) -> Vec<UnknownKey> {
        let mut out = Vec::new();
        collect_unknown(&mut out, "", &self.extra, PLAN_PASSTHROUGH);
        if let Some(limits) = &self.resource_limits {
            collect_unknown(&mut out, "resource_limits.", &limits.extra, &[]);
        }
        for (pi, phase) in self.phases.iter().enumerate() {
            let p = format!("phases[{pi}].");
            collect_unknown(&mut out, &p, &phase.extra, PHASE_PASSTHROUGH);
            if let Some(gate) = &phase.gate {
                collect_unknown(&mut out, &format!("{p}gate."), &gate.extra, GATE_PASSTHROUGH);
            }
            for (qi, q) in phase.feedback_questions.iter().enumerate() {
                collect_unknown(&mut out, &format!("{p}feedback_questions[{qi}]."), &q.extra, &[]);
            }
            for (si, step) in phase.steps.iter().enumerate() {
                let s = format!("{p}steps[{si}].");
                collect_unknown(&mut out, &s, &step.extra, STEP_PASSTHROUGH);
                if let Some(syn) = &step.synthesis {
                    collect_unknown(&mut out, &format!("{s}synthesis."), &syn.extra, &[]);
                }
                collect_members(&mut out, &format!("{s}team"), &step.team);
            }
        }
        out
    }

    /// Every step of the plan in plan order, with the index of its phase.
    pub fn steps(&self) -> impl Iterator<Item = (usize, &PlanStep)> {
        self.phases.iter().enumerate().flat_map(|(pi, p)| p.steps.iter().map(move |s| (pi, &**s)))
    }

    /// Finds a step by id: (phase index, step index).
    pub fn find_step(&self, step_id: &str) -> Option<(usize, usize)> {
        self.phases
            .iter()
            .enumerate()
            .find_map(|(pi, p)| p.steps.iter().position(|s| s.step_id == step_id).map(|si| (pi, si)))
    }

    /// Finds a phase index by phase id.
    pub fn phase_index(&self, phase_id: i64) -> Option<usize> {
        self.phases.iter().position(|p| p.phase_id == phase_id)
    }

    /// Total number of steps.
    pub fn step_count(&self) -> usize {
        self.phases.iter().map(|p| p.steps.len()).sum()
    }
}

fn collect_members(out: &mut Vec<UnknownKey>, prefix: &str, members: &[TeamMember]) {
    for (mi, m) in members.iter().enumerate() {
        let p = format!("{prefix}[{mi}].");
        collect_unknown(out, &p, &m.extra, MEMBER_PASSTHROUGH);
        if let Some(syn) = &m.synthesis {
            collect_unknown(out, &format!("{p}synthesis."), &syn.extra, &[]);
        }
        collect_members(out, &format!("{p}sub_team"), &m.sub_team);
    }
}

fn collect_unknown(out: &mut Vec<UnknownKey>, prefix: &str, extra: &Extra, known: &[&str]) {
    for key in extra.keys() {
        if !known.contains(&key.as_str()) {
            out.push(UnknownKey { path: format!("{prefix}{key}") });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gate_accepts_type_as_alias_of_gate_type() {
        let gate: PlanGate = serde_json::from_str(r#"{"type":"lint","command":"ruff ."}"#).unwrap();
        assert_eq!(gate.gate_type, "lint");
        assert!(gate.extra.is_empty());
    }

    #[test]
    fn missing_field_error_names_the_json_path() {
        let err = MachinePlan::from_json(
            r#"{"task_id":"t","task_summary":"s","phases":[{"phase_id":1,"name":"p","steps":[{"step_id":"1.1","task_description":"x"}]}]}"#,
        )
        .unwrap_err();
        assert_eq!(err.path, "phases[0].steps[0]");
        assert!(err.message.contains("agent_name"), "{err}");
    }

    /// A fresh-clone tester's report: text that is not JSON read `.: expected ident …` or
    /// `?: EOF while parsing …`, serde's empty paths as if they were fields.
    #[test]
    fn text_that_is_not_json_or_not_a_plan_says_so_without_an_empty_path() {
        for (text, shown) in [
            ("not json", "not valid JSON: expected a JSON value at line 1 column 2"),
            ("{\"task_id\": nope}", "not valid JSON: expected a JSON value at line 1 column 14"),
            ("{\"task_id\": }", "not valid JSON: expected a JSON value at line 1 column 13"),
            (r#"{"task_id": "x","#, "not valid JSON: EOF while parsing a value at line 1 column 16"),
            ("[1, 2]", "the plan: invalid type: array, expected a MachinePlan object"),
            ("7", "the plan: invalid type: integer `7`, expected a MachinePlan object at line 1 column 1"),
        ] {
            let err = MachinePlan::from_json(text).unwrap_err();
            assert_eq!(err.to_string(), shown, "{text}");
        }
        let err = MachinePlan::from_value(serde_json::json!("a plan")).unwrap_err();
        assert!(err.to_string().starts_with("the plan: invalid type: string"), "{err}");
    }

    /// serde's words for a wrong shape (`sequence`, `map`, `struct PlanStep`) read as JSON's,
    /// and a position inside the document is kept.
    #[test]
    fn a_field_of_the_wrong_shape_is_named_in_json_words() {
        let err = MachinePlan::from_json(
            r#"{"task_id":"t","task_summary":"s","phases":[{"phase_id":1,"name":"p","steps":[[1]]}]}"#,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "phases[0].steps[0]: invalid type: array, expected a PlanStep object at line 1 column 78"
        );
        let err = MachinePlan::from_json(r#"{"task_id":"t","task_summary":{"a":1}}"#).unwrap_err();
        assert_eq!(err.to_string(), "task_summary: invalid type: object, expected a string at line 1 column 30");
    }

    #[test]
    fn mistyped_field_error_names_the_field() {
        let err =
            MachinePlan::from_json(r#"{"task_id":"t","task_summary":"s","phases":[{"phase_id":"one","name":"p"}]}"#)
                .unwrap_err();
        assert_eq!(err.path, "phases[0].phase_id");
    }

    #[test]
    fn misspelt_key_is_kept_and_reported() {
        let text =
            r#"{"task_id":"t","task_summary":"s","phases":[{"phase_id":1,"name":"p","requires_approval":true}]}"#;
        let plan = MachinePlan::from_json(text).unwrap();
        let unknown = plan.unknown_keys();
        assert_eq!(unknown, vec![UnknownKey { path: "phases[0].requires_approval".into() }]);
        let back = serde_json::to_value(&plan).unwrap();
        assert_eq!(back["phases"][0]["requires_approval"], Value::Bool(true));
    }

    #[test]
    fn safety_fields_default_to_expecting_changes_and_refusing_mass_deletion() {
        let step: PlanStep =
            serde_json::from_str(r#"{"step_id":"1.1","agent_name":"dev","task_description":"x"}"#).unwrap();
        assert!(step.expects_changes());
        assert!(!step.allows_mass_deletion());
        let step: PlanStep = serde_json::from_str(
            r#"{"step_id":"1.1","agent_name":"dev","task_description":"x","expect_changes":false,"allow_mass_deletion":true}"#,
        )
        .unwrap();
        assert!(!step.expects_changes());
        assert!(step.allows_mass_deletion());
        assert!(step.extra.is_empty(), "typed, not passed through: {:?}", step.extra);
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config { cases: 64, failure_persistence: None, ..Default::default() })]
        /// A step with any mix of the optional fields (absent, or either value) re-serializes
        /// to the same JSON value, and none of them is reported as unknown.
        #[test]
        fn optional_step_fields_round_trip_unchanged(
            expect in proptest::option::of(proptest::bool::ANY),
            mass in proptest::option::of(proptest::bool::ANY),
            interactive in proptest::bool::ANY,
            timeout in proptest::option::of(1u64..10_000),
        ) {
            let mut step = serde_json::json!({"step_id": "1.1", "agent_name": "dev", "task_description": "x",
                "model": "sonnet", "depends_on": [], "deliverables": [], "allowed_paths": [],
                "blocked_paths": [], "context_files": [], "step_type": "developing"});
            let obj = step.as_object_mut().unwrap();
            if let Some(v) = expect { obj.insert("expect_changes".into(), v.into()); }
            if let Some(v) = mass { obj.insert("allow_mass_deletion".into(), v.into()); }
            if interactive { obj.insert("interactive".into(), true.into()); }
            if let Some(t) = timeout { obj.insert("timeout_seconds".into(), t.into()); }
            let plan = serde_json::json!({"task_id": "t", "task_summary": "s",
                "phases": [{"phase_id": 1, "name": "p", "steps": [step]}]});
            let typed = MachinePlan::from_json(&plan.to_string()).unwrap();
            proptest::prop_assert_eq!(typed.unknown_keys(), vec![]);
            let back = serde_json::to_value(&typed).unwrap();
            proptest::prop_assert_eq!(&back["phases"][0]["steps"][0], &plan["phases"][0]["steps"][0]);
            let step = &typed.phases[0].steps[0];
            proptest::prop_assert_eq!(step.expects_changes(), expect.unwrap_or(true));
            proptest::prop_assert_eq!(step.allows_mass_deletion(), mass.unwrap_or(false));
        }
    }
}
