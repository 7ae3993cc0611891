//! `Event`: an input that changes an execution, journaled append-only.
//!
//! Every event carries an idempotency key (explicit, or derived by the engine from its kind,
//! subject, round and payload), so the same event applied twice has one effect. The JSON form
//! (`{"kind": "step_recorded", …}`) is what the journal stores. This module never does IO.

use serde::{Deserialize, Serialize};

use std::collections::BTreeMap;

use crate::model::budget::{StepForecast, TokenCounts};
use crate::model::plan::{PlanPhase, PlanStep};
use crate::model::state::{ApprovalDecision, QuotaWait};

/// Terminal status a driver may record for a step attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RecordStatus {
    /// The attempt succeeded.
    Complete,
    /// The attempt failed.
    Failed,
    /// An interactive step's agent turn (waits for a human reply).
    Interacting,
    /// The attempt was stopped because its streamed usage crossed the remaining budget: its
    /// spend counts, the step runs again once the ceiling is raised.
    BudgetStopped,
}

impl RecordStatus {
    /// Parses `complete`, `failed`, `interacting` or `budget_stopped`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "complete" => Some(RecordStatus::Complete),
            "failed" => Some(RecordStatus::Failed),
            "interacting" => Some(RecordStatus::Interacting),
            "budget_stopped" => Some(RecordStatus::BudgetStopped),
            _ => None,
        }
    }
}

/// What one attempt used: the spend ledger's columns beyond the step's cost and tokens.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AttemptUsage {
    /// Attempt number (1-based).
    #[serde(default)]
    pub attempt: u32,
    /// Model the agent reported, else the one it was asked for.
    #[serde(default)]
    pub model: String,
    /// Input tokens neither written to nor read from the prompt cache.
    #[serde(default)]
    pub input_tokens: u64,
    /// Output tokens (thinking included).
    #[serde(default)]
    pub output_tokens: u64,
    /// Input tokens written to the prompt cache (claude's `cache_creation_input_tokens`);
    /// absent in events journaled before token kinds were kept (0 then).
    #[serde(default)]
    pub cache_creation_tokens: u64,
    /// Input tokens read from the prompt cache (claude's `cache_read_input_tokens`, codex's
    /// `cached_input_tokens`, gemini's `cached`); absent before token kinds were kept.
    #[serde(default)]
    pub cache_read_tokens: u64,
    /// True when the agent reported tokens but no cost (codex, gemini) and the cost is its
    /// tokens, kind by kind, × the model's prices from the price table.
    #[serde(default)]
    pub cost_estimated: bool,
}

impl AttemptUsage {
    /// Its tokens by kind.
    pub fn tokens(&self) -> TokenCounts {
        TokenCounts {
            input: self.input_tokens,
            cache_write: self.cache_creation_tokens,
            cache_read: self.cache_read_tokens,
            output: self.output_tokens,
        }
    }
}

/// A step added by an amendment to an existing (current or later) phase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AddedStep {
    /// Phase to append the step to.
    pub phase_id: i64,
    /// The step; an empty `step_id` gets `"<phase>.<n>"`.
    pub step: PlanStep,
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EventKind {
    /// A driver launched an attempt of a step (agent-baton's `mark_dispatched`).
    StepDispatched {
        /// Step.
        step_id: String,
        /// Agent launched.
        agent_name: String,
    },
    /// A step attempt finished (agent-baton's `record_step_result`).
    StepRecorded {
        /// Step.
        step_id: String,
        /// Agent that ran it.
        agent_name: String,
        /// Outcome status.
        status: RecordStatus,
        /// Agent text.
        #[serde(default)]
        outcome: String,
        /// Changed paths.
        #[serde(default)]
        files_changed: Vec<String>,
        /// Commit on the feature branch.
        #[serde(default)]
        commit_hash: String,
        /// Tokens used, at most 10¹² (more is a broken report).
        #[serde(default)]
        #[schema(maximum = 1_000_000_000_000_u64)]
        tokens: u64,
        /// Spend, USD, at most 1,000,000.
        #[serde(default)]
        #[schema(minimum = 0.0, maximum = 1_000_000.0)]
        cost_usd: f64,
        /// The agent's wall time, seconds, at most 31,622,400 (366 days).
        #[serde(default)]
        #[schema(minimum = 0.0, maximum = 31_622_400.0)]
        duration_seconds: f64,
        /// Failure reason.
        #[serde(default)]
        error: String,
        /// What the attempt used, for the spend ledger (absent in older journals and from
        /// clients that only know the fields above).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<AttemptUsage>,
    },
    /// The cost forecast per step, recorded when the execution starts (issue 5 §1).
    Forecasted {
        /// Forecast per step id.
        #[serde(default)]
        steps: BTreeMap<String, StepForecast>,
        /// Forecast of a step without one (added later by an amendment), USD.
        #[serde(default)]
        default_usd: f64,
    },
    /// The USD ceiling was set (or removed with `null`).
    BudgetSet {
        /// The ceiling, USD (> 0), or `None` for no ceiling.
        ceiling_usd: Option<f64>,
        /// Where it came from (`spec`, `project`, `BATON_RUN_BUDGET_USD`, `--max-spend-usd`).
        #[serde(default)]
        source: String,
    },
    /// A human raised the ceiling of an execution (parked in `budget_exceeded` or not).
    BudgetRaised {
        /// By how much, USD (> 0).
        by_usd: f64,
    },
    /// A gate ran.
    GateRecorded {
        /// Phase (must be the current one).
        phase_id: i64,
        /// Pass or fail.
        passed: bool,
        /// Output tail.
        #[serde(default)]
        output: String,
        /// Command that ran (default: the plan's).
        #[serde(default)]
        command: Option<String>,
        /// Exit code (None = manual).
        #[serde(default)]
        exit_code: Option<i32>,
    },
    /// A gate had nothing to run (issue 14.4): the phase goes on, but the gate did not pass.
    /// Accepted only when the engine's GATE action says so (`skip_reason`).
    GateSkipped {
        /// Phase (must be the current one, its gate pending).
        phase_id: i64,
        /// Why (`no files changed`, `no command`); the engine records its own reason, this one
        /// is what the recorder saw (may be empty).
        #[serde(default)]
        reason: String,
    },
    /// A human approved, rejected or approved with feedback.
    ApprovalRecorded {
        /// Phase (must be the pending one).
        phase_id: i64,
        /// Decision.
        result: ApprovalDecision,
        /// Feedback text.
        #[serde(default)]
        feedback: String,
    },
    /// A feedback question was answered.
    FeedbackRecorded {
        /// Phase (must be current).
        phase_id: i64,
        /// Question.
        question_id: String,
        /// Chosen option index (0-based).
        chosen_index: usize,
    },
    /// A human replied to an interactive step.
    InteractInput {
        /// Step.
        step_id: String,
        /// Reply.
        input: String,
    },
    /// A human ended an interactive step; its last agent output becomes the result.
    InteractCompleted {
        /// Step.
        step_id: String,
    },
    /// The plan was amended: phases inserted and/or steps appended.
    Amended {
        /// Why.
        description: String,
        /// `manual` unless an internal rule amended.
        #[serde(default = "default_trigger")]
        trigger: String,
        /// New phases (their ids are assigned by renumbering).
        #[serde(default)]
        phases: Vec<PlanPhase>,
        /// Insert after the phase with this id (default: after the current phase).
        #[serde(default)]
        after_phase: Option<i64>,
        /// Steps appended to existing phases.
        #[serde(default)]
        steps: Vec<AddedStep>,
    },
    /// The driver saved a checkpoint hand-off.
    CheckpointAcknowledged,
    /// Finalize: every phase is done (agent-baton's `complete()`).
    Completed,
    /// An operator cancelled the execution.
    Cancelled {
        /// Why.
        #[serde(default)]
        reason: String,
    },
    /// An operator retried a failed step (reopens a failed execution).
    StepRetried {
        /// Step.
        step_id: String,
    },
    /// An operator retried a failed gate (reopens a failed execution).
    GateRetried {
        /// Phase.
        phase_id: i64,
    },
    /// A dispatched step whose attempt is lost (its driver died) is offered again
    /// (agent-baton's `recover_dispatched_steps`, run by `execute resume`).
    StepRequeued {
        /// Step.
        step_id: String,
    },
    /// The account behind a step's agent is out of quota (issue 18.1): an attempt stopped on
    /// its usage limit (the step is dispatched: it becomes pending again, its spend counts, and
    /// the stop is no failed attempt), or the step was about to be dispatched to an account
    /// known to be exhausted (the step is pending). Either way the step waits until `until`.
    QuotaWait {
        /// Step.
        step_id: String,
        /// The agent that hit the limit (or would have run).
        agent_name: String,
        /// The account: the agent's profile (`claude`, `codex`, …).
        account: String,
        /// When the wait ends (RFC 3339, UTC): the reset the agent gave, or a backoff.
        until: String,
        /// What the agent said.
        #[serde(default)]
        reason: String,
        /// USD the stopped attempt cost (0 when none ran).
        #[serde(default)]
        cost_usd: f64,
        /// Tokens the stopped attempt used.
        #[serde(default)]
        tokens: u64,
    },
    /// A step's quota wait is over (its time came, or a fallback agent runs it): it may be
    /// dispatched again.
    QuotaResumed {
        /// Step.
        step_id: String,
    },
    /// A `ci` gate without a command pushed `baton/<task_id>` (never forced) and waits for the
    /// forge's checks of `sha` until `until` (issue 19.2). Accepted only when the engine's GATE
    /// action says `check: forge_ci`.
    CiStarted {
        /// Phase (must be the current one, its gate pending).
        phase_id: i64,
        /// The pushed head commit.
        sha: String,
        /// When the wait times out (RFC 3339, UTC).
        until: String,
    },
    /// The checks of a waiting `ci` gate changed (a poll or a webhook saw another outcome).
    CiChecked {
        /// Phase (must be the one waiting).
        phase_id: i64,
        /// The commit checked (must be the one waiting).
        sha: String,
        /// Every check reported now.
        #[serde(default)]
        checks: Vec<crate::model::state::CiCheck>,
    },
    /// A `review` gate without a command is judged by the reviewer agent `agent_name`: the
    /// engine appends a `review.<n>` step to the phase; its verdict decides the gate.
    ReviewRequested {
        /// Phase (must be the current one, its gate pending).
        phase_id: i64,
        /// The reviewer agent.
        agent_name: String,
    },
    /// A `review` gate without a command and without a reviewer agent asks a human: the
    /// execution waits for an approval whose decision passes or fails the gate.
    GateApprovalRequested {
        /// Phase (must be the current one, its gate pending).
        phase_id: i64,
    },
    /// A remediation round starts on a completed execution whose pull request is open (issue
    /// 19.3/4): a fix phase with one step (`agent_name`, `task_description`) is appended and the
    /// execution runs again. Accepted only on a completed execution that is not parked, while
    /// fewer than `max_rounds` rounds of `cause` ran.
    RemediationStarted {
        /// Why (a failed check, a review).
        cause: crate::model::state::RemediationCause,
        /// The pull request head it fixes.
        sha: String,
        /// The agent the fix step goes to.
        agent_name: String,
        /// The fix step's prompt (failing checks or review comments, trimmed).
        task_description: String,
        /// The bound on rounds of `cause` (the runtime's setting, journaled with the round).
        max_rounds: u32,
        /// The review comments the round answers.
        #[serde(default)]
        threads: Vec<crate::model::state::ReviewThread>,
        /// How many queued review comments (`review_queued`, oldest first) the round answers:
        /// they leave the queue.
        #[serde(default, skip_serializing_if = "is_zero_u32")]
        queued: u32,
    },
    /// Review comments arrived on the open pull request while a remediation round ran (issue
    /// 19.4): they wait, journaled, for the next review round. Accepted on a running or
    /// completed execution that is not parked.
    ReviewQueued {
        /// The comments, in the order they came.
        comments: Vec<crate::model::state::QueuedComment>,
    },
    /// The newest remediation round's fix was consolidated and pushed (never forced) as `sha`.
    /// Accepted while the execution runs, every phase done.
    RemediationPushed {
        /// The round's position in the execution's rounds (1-based, all causes).
        round: u32,
        /// The pushed head.
        sha: String,
    },
    /// Baton starts no more remediation rounds and asks a human (rounds exhausted, a reviewer's
    /// `/baton stop`).
    RemediationParked {
        /// Why.
        reason: String,
    },
    /// An operator skipped a step: it counts as done for its dependants.
    StepSkipped {
        /// Step.
        step_id: String,
        /// Why.
        #[serde(default)]
        reason: String,
    },
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

/// The trigger of an amendment no internal rule made: `manual`.
pub fn default_trigger() -> String {
    "manual".into()
}

impl EventKind {
    /// The journal's `kind` column (`step_recorded`, …).
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::StepDispatched { .. } => "step_dispatched",
            EventKind::StepRecorded { .. } => "step_recorded",
            EventKind::GateRecorded { .. } => "gate_recorded",
            EventKind::GateSkipped { .. } => "gate_skipped",
            EventKind::ApprovalRecorded { .. } => "approval_recorded",
            EventKind::FeedbackRecorded { .. } => "feedback_recorded",
            EventKind::InteractInput { .. } => "interact_input",
            EventKind::InteractCompleted { .. } => "interact_completed",
            EventKind::Amended { .. } => "amended",
            EventKind::CheckpointAcknowledged => "checkpoint_acknowledged",
            EventKind::Completed => "completed",
            EventKind::Cancelled { .. } => "cancelled",
            EventKind::StepRetried { .. } => "step_retried",
            EventKind::GateRetried { .. } => "gate_retried",
            EventKind::StepRequeued { .. } => "step_requeued",
            EventKind::StepSkipped { .. } => "step_skipped",
            EventKind::RemediationStarted { .. } => "remediation_started",
            EventKind::RemediationPushed { .. } => "remediation_pushed",
            EventKind::RemediationParked { .. } => "remediation_parked",
            EventKind::ReviewQueued { .. } => "review_queued",
            EventKind::QuotaWait { .. } => "quota_wait",
            EventKind::QuotaResumed { .. } => "quota_resumed",
            EventKind::CiStarted { .. } => "ci_started",
            EventKind::CiChecked { .. } => "ci_checked",
            EventKind::ReviewRequested { .. } => "review_requested",
            EventKind::GateApprovalRequested { .. } => "gate_approval_requested",
            EventKind::Forecasted { .. } => "forecasted",
            EventKind::BudgetSet { .. } => "budget_set",
            EventKind::BudgetRaised { .. } => "budget_raised",
        }
    }
}

/// An event with its idempotency key and actor, as journaled.
///
/// Deserializing requires `kind` to be one of the snake_case names (serde alone would also
/// take a number as the variant's position, so `{"kind": 0}` read as `step_dispatched`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(try_from = "serde_json::Value")]
pub struct Event {
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
    /// Explicit idempotency key; `None` = derived by the engine (see `engine::idempotency_key`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// Who caused it (`user@host`, `baton`, a reviewer's login).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub actor: String,
}

/// The derived shape of [`Event`], read once `kind` is known to be a name.
#[derive(Deserialize)]
struct EventRepr {
    #[serde(flatten)]
    kind: EventKind,
    #[serde(default)]
    idempotency_key: Option<String>,
    #[serde(default)]
    actor: String,
}

impl TryFrom<serde_json::Value> for Event {
    type Error = String;

    fn try_from(value: serde_json::Value) -> Result<Self, Self::Error> {
        match value.get("kind") {
            None | Some(serde_json::Value::String(_)) => {}
            Some(other) => return Err(format!("`kind` must be an event name such as \"step_recorded\", not {other}")),
        }
        let repr: EventRepr = serde_json::from_value(value).map_err(|e| e.to_string())?;
        Ok(Event { kind: repr.kind, idempotency_key: repr.idempotency_key, actor: repr.actor })
    }
}

impl Event {
    /// An event with a derived key and no actor.
    pub fn new(kind: EventKind) -> Self {
        Event { kind, idempotency_key: None, actor: String::new() }
    }

    /// Sets the actor.
    pub fn by(mut self, actor: impl Into<String>) -> Self {
        self.actor = actor.into();
        self
    }

    /// Sets an explicit idempotency key.
    pub fn with_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// The end of `task_id`'s quota wait `wait`, by `baton`, under the key
    /// `quota-resumed:<task_id>:<step_id>:<until>`: whichever door resumes a wait (the
    /// driver, `execute next`, the status's preview), it is resumed once.
    pub fn quota_resumed(task_id: &str, wait: &QuotaWait) -> Event {
        let key = format!("quota-resumed:{task_id}:{}:{}", wait.step_id, wait.until);
        Event::new(EventKind::QuotaResumed { step_id: wait.step_id.clone() }).by("baton").with_key(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_must_be_a_name_not_a_variant_position() {
        let err = serde_json::from_str::<Event>(r#"{"kind":0,"step_id":"1.1","agent_name":"a"}"#).unwrap_err();
        assert!(err.to_string().contains("`kind` must be an event name"), "{err}");
        let ok: Event = serde_json::from_str(r#"{"kind":"step_dispatched","step_id":"1.1","agent_name":"a"}"#).unwrap();
        assert_eq!(ok.kind, EventKind::StepDispatched { step_id: "1.1".into(), agent_name: "a".into() });
        let round: Event =
            serde_json::from_str(&serde_json::to_string(&ok.clone().with_key("k").by("me")).unwrap()).unwrap();
        assert_eq!(round, ok.with_key("k").by("me"));
        let missing = serde_json::from_str::<Event>(r#"{"kind":"step_dispatched","agent_name":"a"}"#).unwrap_err();
        assert!(missing.to_string().contains("missing field `step_id`"), "{missing}");
    }
}
