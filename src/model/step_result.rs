//! A step's latest result ([`StepResult`]) and the types it is made of: its status, the turns
//! of an interactive step, a team step's conflicts and the refused gate additions.
//!
//! Plain data, changed only by `engine::apply` through the state that holds it
//! (`ExecutionState::step_results`, re-exported from `model::state`). This module never does
//! IO and never reads the clock: timestamps are RFC 3339 strings given by the caller.

use serde::{Deserialize, Serialize};

use crate::model::budget::TokenCounts;

/// Status of one step's latest attempt. A step with no result is pending.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    /// To be dispatched again (after a gate re-dispatch or an operator retry).
    Pending,
    /// An attempt is in flight.
    Dispatched,
    /// Done.
    Complete,
    /// The latest attempt failed.
    Failed,
    /// Skipped by an operator: counts as done for its dependants.
    Skipped,
    /// An interactive step waiting for a human reply.
    Interacting,
    /// A human replied; the continuation is to be dispatched.
    InteractDispatched,
    /// Its attempt was in flight when the execution was cancelled, and was stopped with it
    /// (the status of a step that was `dispatched` at the cancel).
    Cancelled,
}

impl StepStatus {
    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            StepStatus::Pending => "pending",
            StepStatus::Dispatched => "dispatched",
            StepStatus::Complete => "complete",
            StepStatus::Failed => "failed",
            StepStatus::Skipped => "skipped",
            StepStatus::Interacting => "interacting",
            StepStatus::InteractDispatched => "interact_dispatched",
            StepStatus::Cancelled => "cancelled",
        }
    }

    /// Complete or skipped: satisfies `depends_on`.
    pub fn is_done(self) -> bool {
        matches!(self, StepStatus::Complete | StepStatus::Skipped)
    }
}

/// One turn of an interactive step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct InteractionTurn {
    /// `agent` or `human`.
    pub role: String,
    /// What was said.
    pub content: String,
    /// When (RFC 3339).
    pub timestamp: String,
    /// 1-based per role.
    pub turn_number: u32,
}

/// The latest result of one step (seed-spec §1.11), replaced by each new attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct StepResult {
    /// The step.
    pub step_id: String,
    /// Agent of the latest attempt.
    pub agent_name: String,
    /// Status of the latest attempt.
    pub status: StepStatus,
    /// Attempt number of the latest attempt (1-based; 0 = never dispatched).
    pub attempt: u32,
    /// The agent's final text.
    #[serde(default)]
    pub outcome: String,
    /// Repository-relative paths changed by the step.
    #[serde(default)]
    pub files_changed: Vec<String>,
    /// Commit on the feature branch, when the step changed files.
    #[serde(default)]
    pub commit_hash: String,
    /// Tokens used (input + output).
    #[serde(default)]
    pub estimated_tokens: u64,
    /// Spend in USD reported by the agent.
    #[serde(default)]
    pub cost_usd: f64,
    /// What each recorded attempt cost, USD (attempt 1 first; an interactive step's records
    /// add to their attempt's): the journal's `step_recorded` costs, as the spend ledger has
    /// them. A retry is forecast from them (`engine::budget::retry_forecast_usd`). Empty
    /// before its first record (and in states saved before it was kept here: see
    /// `Budget::attempts_usd`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts_usd: Vec<f64>,
    /// Its tokens by kind over its attempts (input, cache writes, cache reads, output), from
    /// the records' usage; absent when none was reported (and in states saved before).
    #[serde(default, skip_serializing_if = "TokenCounts::is_zero")]
    pub token_kinds: TokenCounts,
    /// Some of `cost_usd` is an estimate: an attempt reported tokens but no cost (codex,
    /// gemini), priced from the price table.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cost_estimated: bool,
    /// Wall time of the attempt, seconds.
    #[serde(default)]
    pub duration_seconds: f64,
    /// Why the attempt failed.
    #[serde(default)]
    pub error: String,
    /// When the latest attempt was dispatched (RFC 3339).
    #[serde(default)]
    pub dispatched_at: String,
    /// When the latest attempt finished (RFC 3339).
    #[serde(default)]
    pub completed_at: String,
    /// Gate output to include in the next attempt's prompt (gate re-dispatch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate_feedback: Option<String>,
    /// Turns of an interactive step.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interaction_history: Vec<InteractionTurn>,
    /// Accepted `GATE_ADDITION:` commands of its outcome: they join the phase's gate.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gate_additions: Vec<String>,
    /// `GATE_ADDITION:` lines the safety filter refused, with the reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rejected_gate_additions: Vec<RejectedAddition>,
    /// `SCOPE_EXPANSION:` lines of its outcome: each becomes a phase appended to the plan when
    /// its phase ends (at most 3 per execution).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scope_expansions: Vec<String>,
    /// `KNOWLEDGE_GAP:` lines of its outcome: shown in the next approval's context.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub knowledge_gaps: Vec<String>,
    /// The text of its outcome's `## Deviations` sections.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deviations: Vec<String>,
    /// Team steps only: files that two or more members changed (seed-spec §3.6).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub team_conflicts: Vec<TeamConflict>,
}

/// A file that two or more members of a team step changed (by their `files_changed`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TeamConflict {
    /// Repository-relative path.
    pub file: String,
    /// Member ids that changed it, in team order.
    pub members: Vec<String>,
}

/// A `GATE_ADDITION:` line the safety filter refused (seed-spec §2.7).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RejectedAddition {
    /// The command as the agent wrote it (cut at 300 characters).
    pub command: String,
    /// Why it was refused.
    pub reason: String,
}
