//! Goal-driven execution records: the verdicts of the goal evaluator and the round-out budget
//! spent, kept in the `ExecutionState` (seed-spec §1.10, §2.12).
//!
//! The original kept these in memory only, so its amend budget reset with every process and
//! an exhausted goal never failed the run (seed-spec §5 #17). Here they are part of the state:
//! snapshotted, and rebuilt by replaying the journal. The rules that fill them live in
//! `engine::goal`. This module never does IO.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Where the goal stands after the latest evaluation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum GoalStatus {
    /// No verdict yet (or the plan has no `completion_condition`).
    #[default]
    Pending,
    /// The latest verdict said the condition is met.
    Met,
    /// The latest verdict said it is not met; the execution goes on.
    NotMet,
    /// Not met, and nothing is left to try: the execution failed with the reason.
    Exhausted,
}

impl GoalStatus {
    /// The wire string (`pending`, `met`, `not_met`, `exhausted`).
    pub fn as_str(self) -> &'static str {
        match self {
            GoalStatus::Pending => "pending",
            GoalStatus::Met => "met",
            GoalStatus::NotMet => "not_met",
            GoalStatus::Exhausted => "exhausted",
        }
    }
}

/// One evaluation of the completion condition at a phase boundary (seed-spec §1.10).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct GoalCheck {
    /// `g<n>`, 1-based in evaluation order.
    pub check_id: String,
    /// The evaluator step that answered (`goal.<n>`).
    pub step_id: String,
    /// The phase whose boundary was judged (its id when the check was made; phases before the
    /// current one are never renumbered, so it stays valid).
    pub phase_id: i64,
    /// The condition as it was judged.
    pub completion_condition: String,
    /// Whether the judged phase's gate had passed (None: the phase has no gate). Evaluation
    /// waits for the gate, so a recorded check never says false; kept for the original's
    /// `last_gate_passed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_gate_passed: Option<bool>,
    /// The verdict.
    pub met: bool,
    /// The evaluator's confidence, 0–1, when it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confidence: Option<f64>,
    /// What the evaluator says is still missing.
    #[serde(default)]
    pub missing: Vec<String>,
    /// The phases it suggested, as it wrote them (PlanPhase-shaped JSON objects).
    #[serde(default)]
    pub suggested_phases: Vec<Value>,
    /// Ids (after renumbering) of the phases amended in from the suggestions.
    #[serde(default)]
    pub phases_added: Vec<i64>,
    /// Suggestions that could not be amended in, each with the reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rejected_suggestions: Vec<String>,
    /// The evaluator's reasoning.
    #[serde(default)]
    pub reasoning: String,
    /// Agent that evaluated (the original's `evaluator_source`).
    #[serde(default)]
    pub evaluator: String,
    /// What the engine did with the verdict (`advance`, `amended 2 phases`, `failed: …`).
    #[serde(default)]
    pub decision: String,
    /// When the verdict was recorded (RFC 3339).
    pub evaluated_at: String,
}

/// The goal bookkeeping of one execution.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct GoalState {
    /// Where the goal stands.
    #[serde(default)]
    pub status: GoalStatus,
    /// Round-out amendments made so far (capped by the plan's `max_amend_cycles`).
    #[serde(default)]
    pub amend_cycles_used: u32,
    /// Every evaluation, in order.
    #[serde(default)]
    pub checks: Vec<GoalCheck>,
}

impl GoalState {
    /// True while nothing has been recorded (a plan without a goal keeps it so; the state's
    /// JSON then leaves the key out).
    pub fn is_untouched(&self) -> bool {
        *self == GoalState::default()
    }
}
