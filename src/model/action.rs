//! `Action`: what the engine tells a driver to do next (seed-spec §1.15, §2.3).
//!
//! agent-baton's nine action types and BUDGET, each with its own payload. The JSON form is the action object with a
//! lowercase `action_type`; the `ACTION:` text form lives in `cli::wire`. This module never does IO.

use serde::{Deserialize, Serialize};

use crate::model::plan::FeedbackQuestion;

/// The action types, in wire spelling: agent-baton's nine, and BUDGET.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ActionType {
    /// Run a step.
    Dispatch,
    /// Run a phase's gate.
    Gate,
    /// Ask a human to approve.
    Approval,
    /// Ask a human the phase's feedback questions.
    Feedback,
    /// An interactive step waits for a human reply.
    Interact,
    /// Nothing to do until in-flight work reports.
    Wait,
    /// Every phase is done.
    Complete,
    /// The execution failed or was cancelled.
    Failed,
    /// A context checkpoint is due at a phase boundary.
    Checkpoint,
    /// The USD ceiling stops dispatch: a human raises it or stops the execution.
    Budget,
}

impl ActionType {
    /// Upper-case name used by the text wire format (`DISPATCH`, …).
    pub fn upper(self) -> &'static str {
        match self {
            ActionType::Dispatch => "DISPATCH",
            ActionType::Gate => "GATE",
            ActionType::Approval => "APPROVAL",
            ActionType::Feedback => "FEEDBACK",
            ActionType::Interact => "INTERACT",
            ActionType::Wait => "WAIT",
            ActionType::Complete => "COMPLETE",
            ActionType::Failed => "FAILED",
            ActionType::Checkpoint => "CHECKPOINT",
            ActionType::Budget => "BUDGET",
        }
    }
}

/// DISPATCH: launch one step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DispatchAction {
    /// Human-readable summary.
    pub message: String,
    /// Step to run.
    pub step_id: String,
    /// Phase of the step.
    pub phase_id: i64,
    /// Roster name.
    pub agent_name: String,
    /// Model alias.
    pub agent_model: String,
    /// `developing`, `automation`, …
    pub step_type: String,
    /// Attempt number this dispatch starts (1-based).
    pub attempt: u32,
    /// The full prompt for the agent.
    pub delegation_prompt: String,
    /// Shell command of an automation step (empty otherwise).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub command: String,
    /// Interactive step.
    #[serde(default)]
    pub interactive: bool,
    /// Turn limit when interactive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interact_max_turns: Option<u32>,
    /// `"worktree"` when the wave has two or more steps.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub isolation: String,
    /// What success looks like.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub expected_outcome: String,
    /// Path prefixes the step may change (empty = anywhere).
    #[serde(default)]
    pub allowed_paths: Vec<String>,
    /// Path prefixes the step must not change.
    #[serde(default)]
    pub blocked_paths: Vec<String>,
    /// Per-step timeout, seconds (0 = runtime default).
    #[serde(default)]
    pub timeout_seconds: u64,
    /// A member of a team step (seed-spec §3.6), or its synthesis: `step_id` is then the member
    /// id (`1.1.a`, `1.1.a.b`) or `<step>.synthesis`, and `parent_step_id` the team step.
    #[serde(default)]
    pub is_team_member: bool,
    /// The team step this member belongs to; empty (and omitted) for an ordinary step.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub parent_step_id: String,
    /// Names of the MCP servers the step's agent gets (the step's `mcp_servers`, a team
    /// member's from its team step; seed-spec §3.10); empty (and omitted) for none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_servers: Vec<String>,
}

/// GATE: run a phase's QA gate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct GateAction {
    /// Human-readable summary.
    pub message: String,
    /// Phase whose gate runs.
    pub phase_id: i64,
    /// Gate type.
    pub gate_type: String,
    /// Shell command, `{files}` replaced by the phase's changed files; empty when there is no
    /// command or it names `{files}` and no file changed (it is then not run).
    pub gate_command: String,
    /// 1-based run number of this gate.
    pub attempt: u32,
    /// Failures so far that count towards the cap.
    pub failures: u32,
    /// Failure cap: reaching it fails the execution.
    pub max_failures: u32,
    /// Accepted `GATE_ADDITION:` commands of the phase's steps, in step order: each runs as its
    /// own argv after the gate command (`{files}` a word per changed file), and all must pass.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub additions: Vec<String>,
    /// Set when the gate has nothing to run (`no files changed`: every command names `{files}`
    /// and the phase changed no file; `no command`: the gate has none): record a `gate_skipped`
    /// event instead of running anything. A skipped gate lets the phase advance but is never a
    /// pass (issue 14.4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_reason: Option<String>,
    /// Set for a `ci` or `review` gate with nothing to run: it is checked by the forge's CI or
    /// the reviewer instead of being skipped (issue 19.2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<GateCheck>,
}

/// Who checks a `ci` or `review` gate that has no command (issue 19.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum GateCheck {
    /// A `ci` gate: push `baton/<task_id>` to the forge and wait for the checks of its head
    /// commit (record `ci_started`, `ci_checked`, then `gate_recorded`).
    ForgeCi,
    /// A `review` gate: the project's reviewer agent judges the phase (record
    /// `review_requested`), or a human does when none is configured (record
    /// `gate_approval_requested`).
    Reviewer,
}

/// APPROVAL: a human decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ApprovalAction {
    /// Human-readable summary.
    pub message: String,
    /// Phase to approve.
    pub phase_id: i64,
    /// What the approver should look at (markdown).
    pub approval_context: String,
    /// `approve`, `reject`, `approve-with-feedback`.
    pub approval_options: Vec<String>,
    /// Pre-flight approval of a HIGH/CRITICAL plan.
    #[serde(default)]
    pub preflight: bool,
}

/// FEEDBACK: questions for a human.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FeedbackAction {
    /// Human-readable summary.
    pub message: String,
    /// Phase asking.
    pub phase_id: i64,
    /// Unanswered questions.
    pub feedback_questions: Vec<FeedbackQuestion>,
    /// Context (phase outcomes).
    pub feedback_context: String,
}

/// INTERACT: an interactive step waits for a human reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct InteractAction {
    /// Human-readable summary.
    pub message: String,
    /// The step.
    pub interact_step_id: String,
    /// Its agent.
    pub interact_agent_name: String,
    /// The agent's latest output.
    pub interact_prompt: String,
    /// Agent turns so far.
    pub interact_turn: u32,
    /// Turn limit.
    pub interact_max_turns: u32,
}

/// CHECKPOINT: save a compact hand-off at a phase boundary; drivers acknowledge it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CheckpointAction {
    /// Human-readable summary.
    pub message: String,
    /// Why it is due.
    pub reason: String,
    /// Phase about to start.
    pub phase_id: i64,
    /// Compact hand-off text (goal, recent outcomes, decisions, changed files, next step).
    pub handoff: String,
}

/// BUDGET: the execution is parked at its USD ceiling (status `budget_exceeded`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BudgetAction {
    /// Human-readable summary.
    pub message: String,
    /// The ceiling, USD.
    pub ceiling_usd: f64,
    /// Spent so far, USD.
    pub spent_usd: f64,
    /// The step that cannot run within the ceiling.
    pub step_id: String,
    /// Its forecast, USD.
    pub forecast_usd: f64,
    /// The smallest raise that lets it run, USD (spend + forecast − ceiling, at least a cent).
    pub needed_usd: f64,
    /// What happened.
    pub reason: String,
    /// `raise` (by an amount) or `stop`.
    pub budget_options: Vec<String>,
}

/// What a driver should do next.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "action_type", rename_all = "lowercase")]
pub enum Action {
    /// Run a step.
    Dispatch(DispatchAction),
    /// Run a gate.
    Gate(GateAction),
    /// Ask for approval.
    Approval(ApprovalAction),
    /// Ask feedback questions.
    Feedback(FeedbackAction),
    /// Wait for a human reply to an interactive step.
    Interact(InteractAction),
    /// Wait for in-flight work, or for an account's quota to reset.
    Wait {
        /// Why.
        message: String,
        /// When the wait ends by itself (RFC 3339, UTC): the earliest quota reset of a waiting
        /// step; absent when it waits for in-flight work or a human.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        until: Option<String>,
    },
    /// Every phase is done; finalize with the `complete` event.
    Complete {
        /// Human-readable summary.
        message: String,
        /// Outcome summary.
        summary: String,
    },
    /// Failed or cancelled.
    Failed {
        /// Human-readable summary.
        message: String,
        /// Reason.
        summary: String,
    },
    /// Checkpoint due.
    Checkpoint(CheckpointAction),
    /// Parked at the USD ceiling.
    Budget(BudgetAction),
}

impl Action {
    /// The action's type.
    pub fn action_type(&self) -> ActionType {
        match self {
            Action::Dispatch(_) => ActionType::Dispatch,
            Action::Gate(_) => ActionType::Gate,
            Action::Approval(_) => ActionType::Approval,
            Action::Feedback(_) => ActionType::Feedback,
            Action::Interact(_) => ActionType::Interact,
            Action::Wait { .. } => ActionType::Wait,
            Action::Complete { .. } => ActionType::Complete,
            Action::Failed { .. } => ActionType::Failed,
            Action::Checkpoint(_) => ActionType::Checkpoint,
            Action::Budget(_) => ActionType::Budget,
        }
    }

    /// The human-readable message.
    pub fn message(&self) -> &str {
        match self {
            Action::Dispatch(a) => &a.message,
            Action::Gate(a) => &a.message,
            Action::Approval(a) => &a.message,
            Action::Feedback(a) => &a.message,
            Action::Interact(a) => &a.message,
            Action::Checkpoint(a) => &a.message,
            Action::Budget(a) => &a.message,
            Action::Wait { message, .. } | Action::Complete { message, .. } | Action::Failed { message, .. } => message,
        }
    }
}
