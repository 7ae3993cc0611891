//! `ExecutionState`: one run of a plan, and the records it accumulates.
//!
//! The state is plain data, changed only by `engine::apply`. It holds its own amendable copy of
//! the plan, per-step results, gate/approval/feedback records and the amendment audit trail.
//! This module never does IO and never reads the clock: timestamps are RFC 3339 strings given
//! by the caller.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use crate::model::budget::Budget;
use crate::model::goal::GoalState;
use crate::model::lazy_result::LazyResult;
use crate::model::locations::Locations;
use crate::model::plan::{MachinePlan, PlanAmendment};

/// Status of an execution (seed-spec §1.1, less the states this issue does not implement).
///
/// `complete` and `cancelled` are final. `failed` is final except for the explicit operator
/// events that reopen it (retry a step, retry a gate, skip a step, amend).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ExecutionStatus {
    /// Steps are being dispatched or are in flight.
    Running,
    /// Waiting for a human approval (`pending_approval_request` is set).
    ApprovalPending,
    /// Waiting for answers to the current phase's feedback questions.
    FeedbackPending,
    /// The current phase's gate must run.
    GatePending,
    /// The gate failed and is to be re-run (until the failure cap).
    GateFailed,
    /// Dispatch reached the USD ceiling: waits for a human to raise it or stop (see
    /// `budget.shortfall`). Nothing is in flight in this status.
    BudgetExceeded,
    /// Finished successfully (final).
    Complete,
    /// Stopped by a failure; see `failure` (reopenable by operator events).
    Failed,
    /// Stopped by an operator (final).
    Cancelled,
}

impl ExecutionStatus {
    /// The wire string (`running`, `approval_pending`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            ExecutionStatus::Running => "running",
            ExecutionStatus::ApprovalPending => "approval_pending",
            ExecutionStatus::FeedbackPending => "feedback_pending",
            ExecutionStatus::GatePending => "gate_pending",
            ExecutionStatus::GateFailed => "gate_failed",
            ExecutionStatus::BudgetExceeded => "budget_exceeded",
            ExecutionStatus::Complete => "complete",
            ExecutionStatus::Failed => "failed",
            ExecutionStatus::Cancelled => "cancelled",
        }
    }

    /// True for `complete` and `cancelled`, which nothing reopens.
    pub fn is_final(self) -> bool {
        matches!(self, ExecutionStatus::Complete | ExecutionStatus::Cancelled)
    }

    /// True for `complete`, `cancelled` and `failed`.
    pub fn is_terminal(self) -> bool {
        self.is_final() || self == ExecutionStatus::Failed
    }
}

impl std::fmt::Display for ExecutionStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

// The step-result types live in their own module (`model::lazy_result` decodes them and is
// read by this one); they are re-exported here, where the API has always named them.
pub use crate::model::step_result::{InteractionTurn, RejectedAddition, StepResult, StepStatus, TeamConflict};

/// One gate run (seed-spec §1.12).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct GateResult {
    /// Phase whose gate ran.
    pub phase_id: i64,
    /// Gate type.
    pub gate_type: String,
    /// True only for a pass: false for a failure and for a skipped gate.
    pub passed: bool,
    /// `Some(reason)` when the gate had nothing to run and was skipped (`no files changed`,
    /// `no command`): the phase went on, but this is not a pass (issue 14.4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// Output tail.
    pub output: String,
    /// Command that ran (the plan's, for a skipped gate).
    pub command: String,
    /// Exit code (None = manual result or skipped).
    pub exit_code: Option<i32>,
    /// When (RFC 3339).
    pub checked_at: String,
    /// 1-based run of this gate.
    pub attempt: u32,
}

/// How a gate run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateOutcome {
    /// Its commands ran and passed.
    Passed,
    /// Its commands ran and one failed (or a human recorded a failure).
    Failed,
    /// It had nothing to run: the phase went on, but nothing was checked.
    Skipped,
}

impl GateOutcome {
    /// `passed`, `failed` or `skipped`: the word the API, CLI, board and metrics use.
    pub fn as_str(self) -> &'static str {
        match self {
            GateOutcome::Passed => "passed",
            GateOutcome::Failed => "failed",
            GateOutcome::Skipped => "skipped",
        }
    }
}

impl GateResult {
    /// Passed, failed or skipped (a skip reason wins over `passed`).
    pub fn outcome(&self) -> GateOutcome {
        match (&self.skipped, self.passed) {
            (Some(_), _) => GateOutcome::Skipped,
            (None, true) => GateOutcome::Passed,
            (None, false) => GateOutcome::Failed,
        }
    }
}

/// An approval decision (seed-spec §1.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub enum ApprovalDecision {
    /// Go on.
    #[serde(rename = "approve")]
    Approve,
    /// Stop: the execution fails.
    #[serde(rename = "reject")]
    Reject,
    /// Go on, after a Remediation phase that addresses the feedback.
    #[serde(rename = "approve-with-feedback")]
    ApproveWithFeedback,
}

impl ApprovalDecision {
    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalDecision::Approve => "approve",
            ApprovalDecision::Reject => "reject",
            ApprovalDecision::ApproveWithFeedback => "approve-with-feedback",
        }
    }

    /// Parses `approve`, `reject` or `approve-with-feedback`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "approve" => Some(ApprovalDecision::Approve),
            "reject" => Some(ApprovalDecision::Reject),
            "approve-with-feedback" => Some(ApprovalDecision::ApproveWithFeedback),
            _ => None,
        }
    }
}

/// A recorded approval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ApprovalResult {
    /// Phase approved.
    pub phase_id: i64,
    /// The decision.
    pub result: ApprovalDecision,
    /// Reviewer's feedback.
    #[serde(default)]
    pub feedback: String,
    /// Who decided.
    #[serde(default)]
    pub actor: String,
    /// When (RFC 3339).
    pub decided_at: String,
    /// The pre-flight approval of a HIGH/CRITICAL plan (before phase 1), not a phase's own.
    #[serde(default)]
    pub preflight: bool,
    /// The team step whose escalated file conflict this decided (seed-spec §3.6), not the
    /// phase's own approval; empty otherwise.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub team_step: String,
}

/// An outstanding approval request; present exactly when status is `approval_pending`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PendingApprovalRequest {
    /// Phase awaiting approval.
    pub phase_id: i64,
    /// When requested (RFC 3339).
    pub requested_at: String,
    /// Pre-flight (before phase 1) rather than end-of-phase.
    #[serde(default)]
    pub preflight: bool,
    /// A team step whose members changed the same file under `conflict_handling: escalate`
    /// (the approval decides the conflict, not the phase); empty otherwise.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub team_step: String,
    /// The phase's `review` gate, which has no command and no reviewer agent, asks a human
    /// (issue 19.2): approving passes the gate, rejecting fails it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gate: bool,
}

/// An answered feedback question.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FeedbackResult {
    /// Phase that asked.
    pub phase_id: i64,
    /// Question answered.
    pub question_id: String,
    /// Text of the chosen option.
    pub chosen_option: String,
    /// Index of the chosen option.
    pub chosen_index: usize,
    /// The step the answer inserted (kept current through renumbering).
    pub dispatched_step_id: String,
    /// When (RFC 3339).
    pub decided_at: String,
    /// Who answered (the event's actor; empty in states journaled before it was kept).
    #[serde(default)]
    pub actor: String,
}

/// Context-rot checkpoint bookkeeping (seed-spec §2.17 design (b)).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CheckpointMarks {
    /// A checkpoint is due and not yet acknowledged.
    pub due: bool,
    /// Why it is due.
    #[serde(default)]
    pub reason: String,
    /// Phases advanced since the last checkpoint.
    pub phases_since: u32,
    /// Recorded results since the last checkpoint.
    pub turns_since: u64,
    /// Tokens since the last checkpoint.
    pub tokens_since: u64,
    /// Checkpoints acknowledged so far.
    pub count: u32,
}

/// Live counters kept incrementally so no event costs a scan of the plan.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Counters {
    /// Steps complete or skipped, whole plan.
    pub steps_done: u64,
    /// Total spend in USD.
    pub spend_usd: f64,
    /// Total tokens.
    pub tokens: u64,
    /// Results recorded (the original's `turn_count`, persisted here).
    pub turn_count: u64,
}

/// Where each step lives in the plan (step id → (phase index, step index)), which team step
/// each team member and synthesis dispatch belongs to (id → team step id), and the current
/// phase's tally (`PhaseTally`): a cache rebuilt from the plan, never serialized and ignored by
/// equality.
#[derive(Debug, Clone, Default)]
pub struct StepIndex(pub(crate) Locations, pub(crate) HashMap<String, String>, pub(crate) Option<PhaseTally>);

/// How many of one phase's steps are in each status that ends or holds a phase, so that
/// settling after an event needs no scan of the phase (`engine::settle` keeps it; a phase of
/// 5,000 steps was scanned after every replayed event). Counts, no units. Only for phases
/// without team steps, in plans without a completion condition; any event other than a
/// step's dispatch or record drops it and the next settle counts again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PhaseTally {
    /// Index of the phase counted.
    pub(crate) phase: usize,
    /// Its number of steps when counted (an amendment that changes it drops the tally).
    pub(crate) steps: usize,
    /// Steps whose latest attempt failed.
    pub(crate) failed: usize,
    /// Steps with an attempt in flight.
    pub(crate) dispatched: usize,
    /// Steps neither complete nor skipped.
    pub(crate) not_done: usize,
    /// Steps waiting for a human reply.
    pub(crate) interacting: usize,
    /// How many steps at the head of the phase are all done (complete or skipped): none of
    /// them can be dispatched, so the pass to the next ready step starts after them instead
    /// of looking up every completed step again (at step 4,700 of a 5,000-step phase, 4,700
    /// lookups a call).
    pub(crate) done_prefix: usize,
}

impl PhaseTally {
    /// Adds (`by` = 1) or removes (`by` = -1) one step in `status`.
    pub(crate) fn count(&mut self, status: StepStatus, by: isize) {
        let bump = |n: &mut usize| *n = n.saturating_add_signed(by);
        if status == StepStatus::Failed {
            bump(&mut self.failed);
        }
        if status == StepStatus::Dispatched {
            bump(&mut self.dispatched);
        }
        if !status.is_done() {
            bump(&mut self.not_done);
        }
        if status == StepStatus::Interacting {
            bump(&mut self.interacting);
        }
    }
}

impl PartialEq for StepIndex {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// A step waiting for its agent's account to leave its usage limit (issue 18.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct QuotaWait {
    /// The waiting step.
    pub step_id: String,
    /// The agent whose account is exhausted.
    pub agent_name: String,
    /// The account: the agent's profile (`claude`, `codex`, …).
    pub account: String,
    /// When the wait ends (RFC 3339, UTC): the reset the agent gave, or a backoff.
    pub until: String,
    /// What the agent said.
    #[serde(default)]
    pub reason: String,
}

impl QuotaWait {
    /// `waiting for claude quota until 16:00 UTC` (see [`quota_note`]).
    pub fn note(&self) -> String {
        quota_note(&self.account, &self.until)
    }
}

/// `waiting for <account> quota until <HH:MM> UTC`, from an RFC 3339 UTC `until`
/// (`2026-12-02T16:00:00+00:00`); the whole `until` when it is not in that form. What the
/// engine's WAIT, `execute status`, the API and the board card say.
pub fn quota_note(account: &str, until: &str) -> String {
    let utc = until.ends_with("+00:00") || until.ends_with('Z');
    let at = match until.get(11..16) {
        Some(hm) if utc && until.as_bytes().get(10) == Some(&b'T') => format!("{hm} UTC"),
        _ => until.to_string(),
    };
    format!("waiting for {account} quota until {at}")
}

/// How one reported CI check stands (issue 19.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CiCheckState {
    /// Queued or running.
    Pending,
    /// Finished and passed (GitHub `success`, `neutral`, `skipped`; Azure DevOps `succeeded`).
    Passed,
    /// Finished and did not pass (failure, error, cancelled, timed out, …).
    Failed,
}

/// One CI check of the head commit, as the forge reported it (names and summaries are
/// untrusted forge text: trimmed here, escaped wherever they are shown).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CiCheck {
    /// The check run's name, the status's context, or the build's definition name.
    pub name: String,
    /// How it stands.
    pub state: CiCheckState,
    /// Its summary (check run output title/summary, status description, build result), trimmed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub summary: String,
}

/// A `ci` gate without a command waiting for the forge's checks of the pushed head commit
/// (issue 19.2): set by `ci_started`, updated by `ci_checked`, cleared by the verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CiWait {
    /// The phase whose gate waits.
    pub phase_id: i64,
    /// The pushed head commit of `baton/<task_id>` whose checks decide.
    pub sha: String,
    /// When the wait times out (RFC 3339, UTC).
    pub until: String,
    /// When it began (RFC 3339).
    pub started_at: String,
    /// The checks reported so far (the latest poll or webhook that changed them).
    #[serde(default)]
    pub checks: Vec<CiCheck>,
    /// `ci_checked` events applied to this wait (the round of their derived keys).
    #[serde(default)]
    pub polls: u32,
}

impl CiWait {
    /// Checks finished (passed or failed).
    pub fn done(&self) -> usize {
        self.checks.iter().filter(|c| c.state != CiCheckState::Pending).count()
    }

    /// `waiting for CI: 3 of 5 checks done` (or `waiting for CI: no checks reported yet`):
    /// what the WAIT, `execute status`, the API and the board card say.
    pub fn note(&self) -> String {
        ci_note(self.done(), self.checks.len())
    }
}

/// `waiting for CI: <done> of <total> checks done`, or `waiting for CI: no checks reported
/// yet` when `total` is 0.
pub fn ci_note(done: usize, total: usize) -> String {
    if total == 0 {
        "waiting for CI: no checks reported yet".to_string()
    } else {
        format!("waiting for CI: {done} of {total} checks done")
    }
}

/// Why a remediation round was started on an execution's open pull request (issue 19.3/4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RemediationCause {
    /// A required check of the pull request's head failed (a CI fix round).
    Ci,
    /// A reviewer asked for changes (a review remediation round).
    Review,
}

impl RemediationCause {
    /// The wire string (`ci`, `review`).
    pub fn as_str(self) -> &'static str {
        match self {
            RemediationCause::Ci => "ci",
            RemediationCause::Review => "review",
        }
    }
}

/// A review comment (thread) a remediation round answers: after the fix is pushed, Baton
/// replies on it with the commit that addressed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ReviewThread {
    /// The forge's id: a GitHub review comment id, an Azure DevOps pull request thread id;
    /// `review-<id>` for a GitHub review's body (nothing to reply to: it marks the review as
    /// answered), empty for a body whose review id is not known.
    pub id: String,
    /// The file the comment is on (empty for a review's body).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub path: String,
    /// The line it is on, where the forge says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<i64>,
}

/// A review comment that arrived while a round ran (issue 19.4): journaled with
/// `review_queued`, answered by the next review round once the running one pushed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct QueuedComment {
    /// The forge's id (GitHub review comment id, Azure DevOps thread id); `review-<id>` for a
    /// GitHub review's body, empty when its review id is not known.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
    /// The file it is on (empty: the pull request as a whole).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub path: String,
    /// The line it is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<i64>,
    /// The diff around it, where the forge gives it (trimmed).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub diff_hunk: String,
    /// What the reviewer wrote.
    pub body: String,
    /// Who wrote it (their forge login or e-mail).
    pub author: String,
}

/// One remediation round: a fix phase appended to a completed execution whose pull request
/// is open.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RemediationRound {
    /// The round's number among the rounds of its cause (1-based).
    pub round: u32,
    /// Why it started.
    pub cause: RemediationCause,
    /// The pull request head it fixes.
    pub sha: String,
    /// The appended phase.
    pub phase_id: i64,
    /// The agent its one step went to.
    pub agent_name: String,
    /// When it started (RFC 3339).
    pub started_at: String,
    /// The head pushed once its fix was consolidated (empty until then).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pushed_sha: String,
    /// The review comments it answers (review rounds).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub threads: Vec<ReviewThread>,
}

/// Remediation of an execution's open pull request (issue 19.3/4): the rounds run, and why
/// Baton stopped starting them (rounds exhausted, `/baton stop`), if it did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Remediation {
    /// Every round, oldest first.
    #[serde(default)]
    pub rounds: Vec<RemediationRound>,
    /// Why no more rounds start: a human is asked (set by `remediation_parked`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parked: Option<String>,
    /// Review comments that arrived while a round ran, oldest first: the next review round
    /// answers them (`review_queued`; taken by `remediation_started`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queued: Vec<QueuedComment>,
}

impl Remediation {
    /// Nothing happened yet (kept out of snapshots then).
    pub fn is_untouched(&self) -> bool {
        self.rounds.is_empty() && self.parked.is_none() && self.queued.is_empty()
    }

    /// Whether the review comment with forge id `id` was answered by a round or waits in the
    /// queue (an empty id — a review's body — never is).
    pub fn knows_comment(&self, id: &str) -> bool {
        !id.is_empty()
            && (self.queued.iter().any(|q| q.id == id)
                || self.rounds.iter().any(|r| r.threads.iter().any(|t| t.id == id)))
    }

    /// Rounds of `cause` started.
    pub fn used(&self, cause: RemediationCause) -> u32 {
        u32::try_from(self.rounds.iter().filter(|r| r.cause == cause).count()).unwrap_or(u32::MAX)
    }

    /// The newest round, when its fix is not pushed yet.
    pub fn unpushed(&self) -> Option<&RemediationRound> {
        self.rounds.last().filter(|r| r.pushed_sha.is_empty())
    }
}

/// A state's latest result per step id, in step-id order (byte order of the ids: `1.10` before
/// `1.2`): one sorted `Vec` of entries, looked up by binary search. Serialized as a JSON object
/// in that order, as a `BTreeMap` would be; decoding appends entries that arrive in order (a
/// snapshot's all do) and inserts any other, so every input decodes to the map a `BTreeMap`
/// would hold. Why not a tree: decoding 4,560 results into one took three blocks of fresh
/// memory (the entries collected, the sort's scratch, the nodes) that the kernel zeroed on
/// every CLI call without a server (issue 14.8); inserting a new step's result moves the
/// entries after it, a few microseconds at 5,000 steps, once per step.
pub type StepResults = litemap::LiteMap<String, LazyResult>;

/// One run of a plan (seed-spec §1.14), changed only by `engine::apply`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ExecutionState {
    /// The execution id (= `plan.task_id`).
    pub task_id: String,
    /// The execution's own, amendable copy of the plan.
    pub plan: MachinePlan,
    /// Index (not id) of the current phase; `plan.phases.len()` once every phase is done.
    pub current_phase: usize,
    /// Status.
    pub status: ExecutionStatus,
    /// Why the execution failed or was cancelled.
    #[serde(default)]
    pub failure: Option<String>,
    /// The phase whose approval a human rejected, while that rejection is why the execution
    /// failed. A rejection stands until the plan is amended (or the execution is cancelled): a
    /// retried or skipped step does not reopen the execution, which would ask for the same
    /// approval again, of anyone (seed-spec §2: "`reject` → status failed; FAILED message
    /// suggests amend").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejected_phase: Option<i64>,
    /// Latest result per step id.
    // A state decoded from a snapshot of this build decodes each result when it is first read
    // (`LazyResult`): a CLI call then pays only for the results it reads (issue 14.8).
    #[serde(default)]
    #[schema(value_type = BTreeMap<String, StepResult>)]
    pub step_results: StepResults,
    /// Every gate run.
    #[serde(default)]
    pub gate_results: Vec<GateResult>,
    /// Every approval.
    #[serde(default)]
    pub approval_results: Vec<ApprovalResult>,
    /// Every feedback answer.
    #[serde(default)]
    pub feedback_results: Vec<FeedbackResult>,
    /// Amendment audit trail.
    #[serde(default)]
    pub amendments: Vec<PlanAmendment>,
    /// Outstanding approval request (iff `approval_pending`).
    #[serde(default)]
    pub pending_approval_request: Option<PendingApprovalRequest>,
    /// Phase ids whose gate already re-dispatched the phase's last step.
    #[serde(default)]
    pub gate_redispatched: BTreeSet<i64>,
    /// Per phase id: gate failures that an operator `retry-gate` forgave.
    #[serde(default)]
    pub gate_failures_forgiven: BTreeMap<i64, u32>,
    /// Checkpoint bookkeeping.
    #[serde(default)]
    pub checkpoint: CheckpointMarks,
    /// Goal-driven execution: verdicts and the round-out budget spent (`engine::goal`).
    #[serde(default, skip_serializing_if = "GoalState::is_untouched")]
    pub goal: GoalState,
    /// Incremental counters.
    #[serde(default)]
    pub counters: Counters,
    /// Forecast, ceiling, reservations and the pending budget decision.
    #[serde(default)]
    pub budget: Budget,
    /// Steps waiting for their agent's account to leave its quota (issue 18.1), one entry a
    /// step, set by `quota_wait` and cleared by `quota_resumed` or the step's next dispatch.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub quota_waits: Vec<QuotaWait>,
    /// The current phase's `ci` gate waiting for the forge's checks (issue 19.2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ci_wait: Option<CiWait>,
    /// Remediation rounds on the open pull request (issue 19.3/4).
    #[serde(default, skip_serializing_if = "Remediation::is_untouched")]
    pub remediation: Remediation,
    /// Idempotency key → fingerprint of its event's payload, for each event applied to this
    /// state in memory, so a key reused for a different event is caught. Never serialized (not
    /// in snapshots, the API or `status --json`): the journal holds every applied key with its
    /// event (unique per execution), so a state decoded from a snapshot starts without the
    /// earlier keys, and the execution service recalls from the journal the key of each event
    /// it is about to apply (`engine::recall_key`). A snapshot's size and its decoding so stop
    /// growing by two keys a step (issue 14.8). Older snapshots that hold keys still decode.
    #[serde(default, skip_serializing)]
    pub applied_keys: BTreeMap<String, String>,
    /// Events applied (journal length, duplicates excluded).
    #[serde(default)]
    pub events_applied: u64,
    /// When the execution started (RFC 3339).
    pub started_at: String,
    /// When it reached a terminal status (RFC 3339), empty before.
    #[serde(default)]
    pub completed_at: String,
    /// Step locations (cache).
    #[serde(skip)]
    pub(crate) index: StepIndex,
}

impl ExecutionState {
    /// A state for `plan` with no records yet: `running`, at the first phase, started at
    /// `started_at` (RFC 3339). Plain construction: validation and the pre-flight approval
    /// are `engine::start`'s job.
    pub fn fresh(plan: MachinePlan, started_at: &str) -> ExecutionState {
        let mut state = ExecutionState {
            task_id: plan.task_id.clone(),
            plan,
            current_phase: 0,
            status: ExecutionStatus::Running,
            failure: None,
            rejected_phase: None,
            step_results: StepResults::new(),
            gate_results: Vec::new(),
            approval_results: Vec::new(),
            feedback_results: Vec::new(),
            amendments: Vec::new(),
            pending_approval_request: None,
            gate_redispatched: BTreeSet::new(),
            gate_failures_forgiven: BTreeMap::new(),
            checkpoint: CheckpointMarks::default(),
            goal: GoalState::default(),
            counters: Counters::default(),
            budget: Budget::default(),
            quota_waits: Vec::new(),
            ci_wait: None,
            remediation: Remediation::default(),
            applied_keys: BTreeMap::new(),
            events_applied: 0,
            started_at: started_at.to_string(),
            completed_at: String::new(),
            index: StepIndex::default(),
        };
        state.reindex();
        state
    }

    /// Whether `self` and `other` are the same state of the same execution, whichever of them
    /// knows more of its applied idempotency keys ([`ExecutionState::applied_keys`]: a state
    /// decoded from a snapshot knows only the keys applied since, a full replay knows all):
    /// every other field is equal, and each key both know has the same fingerprint in both.
    /// What `baton replay` checks between the stored state and the journal's replay.
    pub fn same_as(&self, other: &ExecutionState) -> bool {
        let (fewer, more) =
            if self.applied_keys.len() <= other.applied_keys.len() { (self, other) } else { (other, self) };
        if !fewer.applied_keys.iter().all(|(key, fingerprint)| more.applied_keys.get(key) == Some(fingerprint)) {
            return false;
        }
        let mut fewer = fewer.clone();
        fewer.applied_keys.clone_from(&more.applied_keys);
        fewer == *more
    }

    /// Result of a step, if it has one.
    pub fn result(&self, step_id: &str) -> Option<&StepResult> {
        self.step_results.get(step_id).map(LazyResult::get)
    }

    /// Effective status of a step (`Pending` when it has no result).
    pub fn step_status(&self, step_id: &str) -> StepStatus {
        self.step_results.get(step_id).map_or(StepStatus::Pending, LazyResult::status)
    }

    /// The current phase, or None once every phase is done.
    pub fn current(&self) -> Option<&crate::model::plan::PlanPhase> {
        self.plan.phases.get(self.current_phase)
    }

    /// Gate failures for a phase that still count towards the cap (a skipped gate is none).
    pub fn gate_failures(&self, phase_id: i64) -> u32 {
        let all =
            self.gate_results.iter().filter(|g| g.phase_id == phase_id && g.outcome() == GateOutcome::Failed).count();
        let forgiven = self.gate_failures_forgiven.get(&phase_id).copied().unwrap_or(0);
        u32::try_from(all).unwrap_or(u32::MAX).saturating_sub(forgiven)
    }

    /// Gate runs recorded for a phase.
    pub fn gate_runs(&self, phase_id: i64) -> u32 {
        let n = self.gate_results.iter().filter(|g| g.phase_id == phase_id).count();
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// True when the phase's gate has a passing result (a skipped gate is not one).
    pub fn gate_passed(&self, phase_id: i64) -> bool {
        self.gate_results.iter().any(|g| g.phase_id == phase_id && g.outcome() == GateOutcome::Passed)
    }

    /// True when the phase's gate no longer holds the phase: it passed or it was skipped.
    pub fn gate_cleared(&self, phase_id: i64) -> bool {
        self.gate_results.iter().any(|g| g.phase_id == phase_id && g.outcome() != GateOutcome::Failed)
    }

    /// The reason the phase's gate was skipped, when its latest result is a skip.
    pub fn gate_skipped(&self, phase_id: i64) -> Option<&str> {
        self.gate_results.iter().rev().find(|g| g.phase_id == phase_id).and_then(|g| g.skipped.as_deref())
    }

    /// Where a step lives: (phase index, step index). Uses the cache; falls back to a scan.
    pub fn locate(&self, step_id: &str) -> Option<(usize, usize)> {
        if self.index.0.is_empty() && self.plan.step_count() > 0 {
            return self.plan.find_step(step_id);
        }
        self.index.0.get(&self.plan, step_id)
    }

    /// Rebuilds the step-location cache from the plan (after deserializing or amending).
    pub fn reindex(&mut self) {
        let mut map = Locations::with_capacity(self.plan.step_count());
        let mut members = HashMap::new();
        for (pi, phase) in self.plan.phases.iter().enumerate() {
            for (si, step) in phase.steps.iter().enumerate() {
                map.insert(&self.plan, pi, si);
                for m in step.flat_members() {
                    members.insert(m.member_id.clone(), step.step_id.clone());
                }
                if !step.team.is_empty() && step.synthesis_strategy() == "agent_synthesis" {
                    members.insert(step.synthesis_id(), step.step_id.clone());
                }
            }
        }
        self.index = StepIndex(map, members, None);
    }

    /// The team step a team member (or a team step's synthesis dispatch) belongs to, by id;
    /// None for an ordinary step id or an unknown id.
    pub fn team_parent(&self, id: &str) -> Option<&str> {
        if self.index.0.is_empty() && self.plan.step_count() > 0 {
            return self.plan.steps().find_map(|(_, s)| {
                let member = s.flat_members().iter().any(|m| m.member_id == id);
                let synthesis =
                    !s.team.is_empty() && s.synthesis_strategy() == "agent_synthesis" && s.synthesis_id() == id;
                (member || synthesis).then_some(s.step_id.as_str())
            });
        }
        self.index.1.get(id).map(String::as_str)
    }

    /// The engine's kept tally of the current phase, while it still counts that phase as it
    /// is (an amendment that changed its steps makes it stale).
    pub(crate) fn current_tally(&self) -> Option<PhaseTally> {
        let phase = self.current()?;
        self.index.2.filter(|t| t.phase == self.current_phase && t.steps == phase.steps.len())
    }

    /// Where the current phase's pass to its next ready step starts: after the steps at its
    /// head that are all done, when the engine's tally of the phase knows them, else 0.
    pub(crate) fn first_open_step(&self) -> usize {
        self.current_tally().map_or(0, |t| t.done_prefix)
    }

    /// True when a step of the current phase has failed (its latest attempt). Reads the
    /// engine's tally of the phase when it has one, else looks at every step.
    pub fn any_failed_in_current_phase(&self) -> bool {
        let Some(phase) = self.current() else { return false };
        match self.current_tally() {
            Some(t) => t.failed > 0,
            None => phase.steps.iter().any(|s| self.step_status(&s.step_id) == StepStatus::Failed),
        }
    }

    /// Steps complete or skipped / total steps.
    pub fn progress(&self) -> (u64, u64) {
        (self.counters.steps_done, self.plan.step_count() as u64)
    }
}
