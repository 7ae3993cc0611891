//! Idempotency keys: the key of an event (explicit, or derived from its kind, subject, round
//! and payload), the check of an explicit key, and the payload fingerprint that tells a resend
//! from a different event under the same key. This module never does IO.

use sha2::{Digest, Sha256};

use crate::engine::EngineError;
use crate::model::event::{Event, EventKind};
use crate::model::state::{ExecutionState, ExecutionStatus, StepStatus};

/// The idempotency key of `event` against `state`: the explicit key, or a hash of the event's
/// kind, subject, round (attempt, gate run, approval round…) and payload, and for a decision
/// ([`is_decision`]) its actor.
///
/// The round is that of the subject the event answers: the same event sent again after it was
/// applied derives the same key, so it is recognised as a duplicate.
pub fn idempotency_key(state: &ExecutionState, event: &Event) -> String {
    if let Some(key) = &event.idempotency_key {
        return key.clone();
    }
    let round = default_round(state, &event.kind);
    if matches!(event.kind, EventKind::CheckpointAcknowledged) {
        // One key per checkpoint, whoever acknowledges it (the driver, `execute resume`, the
        // API): `checkpoint:<task>:<n>`.
        return format!("checkpoint:{}:{round}", state.task_id);
    }
    let payload = serde_json::to_string(&event.kind).unwrap_or_default();
    let mut hasher = Sha256::new();
    hasher.update(event.kind.name().as_bytes());
    hasher.update(b"\n");
    hasher.update(round.to_string().as_bytes());
    hasher.update(b"\n");
    hasher.update(payload.as_bytes());
    if is_decision(&event.kind) {
        // A human decision is its decider's: the same decision sent again by the same person
        // is a resend; the same words from someone else are a second decision.
        hasher.update(b"\n");
        hasher.update(event.actor.as_bytes());
    }
    let digest = hasher.finalize();
    format!("{}:{}", event.kind.name(), hex::encode(&digest[..16]))
}

/// Whether `kind` is a human decision (an approval, a feedback answer, a ceiling raise), whose
/// derived idempotency key includes who decided.
pub fn is_decision(kind: &EventKind) -> bool {
    matches!(
        kind,
        EventKind::ApprovalRecorded { .. } | EventKind::FeedbackRecorded { .. } | EventKind::BudgetRaised { .. }
    )
}

fn default_round(state: &ExecutionState, kind: &EventKind) -> u64 {
    let step_round = |step_id: &str| -> u64 {
        let (status, attempt) = state.result(step_id).map_or((StepStatus::Pending, 0), |r| (r.status, r.attempt));
        let open = matches!(status, StepStatus::Pending | StepStatus::InteractDispatched);
        u64::from(attempt) + u64::from(open)
    };
    match kind {
        EventKind::StepDispatched { step_id, .. } | EventKind::StepRecorded { step_id, .. } => step_round(step_id),
        EventKind::StepRetried { step_id }
        | EventKind::InteractCompleted { step_id }
        | EventKind::StepRequeued { step_id }
        | EventKind::QuotaWait { step_id, .. }
        | EventKind::QuotaResumed { step_id } => u64::from(state.result(step_id).map_or(0, |r| r.attempt)),
        EventKind::StepSkipped { step_id, .. } => {
            // A skipped step is pending again only after its phase's gate failed and re-dispatched it.
            let phase = state.locate(step_id).and_then(|(pi, _)| state.plan.phases.get(pi));
            let runs = phase.map_or(0, |p| state.gate_runs(p.phase_id));
            u64::from(state.result(step_id).map_or(0, |r| r.attempt)) + u64::from(runs)
        }
        EventKind::GateRecorded { phase_id, .. } | EventKind::GateSkipped { phase_id, .. } => {
            let open = matches!(state.status, ExecutionStatus::GatePending | ExecutionStatus::GateFailed)
                && state.current().is_some_and(|p| p.phase_id == *phase_id);
            u64::from(state.gate_runs(*phase_id)) + u64::from(open)
        }
        EventKind::GateRetried { phase_id } => u64::from(state.gate_runs(*phase_id)),
        EventKind::CiStarted { phase_id, .. }
        | EventKind::ReviewRequested { phase_id, .. }
        | EventKind::GateApprovalRequested { phase_id } => u64::from(state.gate_runs(*phase_id)),
        EventKind::CiChecked { .. } => u64::from(state.ci_wait.as_ref().map_or(0, |w| w.polls)),
        EventKind::ApprovalRecorded { phase_id, .. } => {
            let n = state.approval_results.iter().filter(|a| a.phase_id == *phase_id).count() as u64;
            n + u64::from(state.pending_approval_request.as_ref().is_some_and(|r| r.phase_id == *phase_id))
        }
        EventKind::InteractInput { step_id, .. } => {
            let r = state.result(step_id);
            let humans = r.map_or(0, |r| r.interaction_history.iter().filter(|t| t.role == "human").count()) as u64;
            humans + u64::from(r.is_some_and(|r| r.status == StepStatus::Interacting))
        }
        // Amending never moves the current phase, so a resent amendment derives the same key;
        // the same amendment in a later phase is a new one.
        EventKind::Amended { .. } => state.current_phase as u64,
        EventKind::CheckpointAcknowledged => u64::from(state.checkpoint.count) + u64::from(state.checkpoint.due),
        EventKind::BudgetSet { .. } => u64::from(state.budget.changes),
        // The execution's progress (results recorded): the same raise sent twice before any
        // step ran again (a double submit, a retry) is one raise, even when the first was too
        // small and the execution parked again.
        EventKind::BudgetRaised { .. } => state.counters.turn_count,
        EventKind::Forecasted { .. } => 0,
        // A completion after a remediation round is a new completion.
        EventKind::Completed | EventKind::RemediationStarted { .. } | EventKind::RemediationParked { .. } => {
            state.remediation.rounds.len() as u64
        }
        EventKind::RemediationPushed { round, .. } => u64::from(*round),
        // The same comments queued twice between two rounds are queued once.
        EventKind::ReviewQueued { .. } => state.remediation.rounds.len() as u64,
        EventKind::FeedbackRecorded { .. } | EventKind::Cancelled { .. } => 0,
    }
}

/// Longest explicit idempotency key, characters.
pub const MAX_KEY_LEN: usize = 256;

/// An explicit key must name something: 1–256 characters, no control characters (an empty
/// key would otherwise be one key shared by every client that sends it).
pub(crate) fn check_key(key: &str) -> Result<(), EngineError> {
    let len = key.chars().count();
    if key.trim().is_empty() || len > MAX_KEY_LEN || key.chars().any(char::is_control) {
        let shown: String = key.chars().take(40).collect();
        return Err(EngineError::invalid_field(
            "idempotency_key",
            format!(
                "idempotency key {shown:?}{}: expected 1 to {MAX_KEY_LEN} characters, no control characters",
                if len > 40 { "…" } else { "" }
            ),
        ));
    }
    Ok(())
}

/// A short hash of the event's payload: under one key, another fingerprint is another event.
pub(crate) fn payload_fingerprint(kind: &EventKind) -> String {
    let payload = serde_json::to_string(kind).unwrap_or_default();
    hex::encode(&Sha256::digest(payload.as_bytes())[..8])
}
