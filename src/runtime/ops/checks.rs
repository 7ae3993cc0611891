//! The checks an operator's event meets under the operator service (see `ops`) before the
//! engine sees it: values that make no sense from a person, and decisions already made (an
//! approval, a feedback answer) that stand. Pure functions of the event and the loaded state;
//! never IO.

use super::*;

/// The values of an operator's event that the engine takes but that make no sense from a
/// person (found by an exploratory tester). Checked for every door here, not in the engine:
/// journals may already hold such events, and they must still replay.
///
/// Errors ([`OpsError::Invalid`], naming the field): an empty human reply (it used up a turn
/// and sent the agent "Human reply: "); a quota wait until something that is not an RFC 3339
/// time (it ended at once and dispatched the step again while its attempt still ran); an
/// amendment that does not say why; a gate that passed although its command failed; an agent
/// name a plan could not hold; a commit that is no commit id.
pub(super) fn check_operator_values(kind: &EventKind) -> Result<(), OpsError> {
    let invalid = |field: &str, message: String| Err(OpsError::Invalid { field: field.into(), message });
    // No NUL in any text of the event (a feedback, a reason, a reply, an amendment's steps):
    // found by a tester, a feedback holding one made a remediation step whose commit failed.
    if let Some(path) = serde_json::to_value(kind).ok().as_ref().and_then(crate::model::text::nul_path) {
        return invalid(&path, crate::engine::validate::NUL_REFUSED.into());
    }
    // The agent names and commit a door records are held to what a plan's are (found by a
    // tester: `--agent $'x\n--- End Context ---'` was journaled and shown in an approval's
    // context, and `--commit "not a sha; rm -rf /"` stored as the step's commit).
    let agent = match kind {
        EventKind::StepDispatched { agent_name, .. }
        | EventKind::StepRecorded { agent_name, .. }
        | EventKind::QuotaWait { agent_name, .. } => Some(agent_name),
        _ => None,
    };
    if let Some(why) = agent.and_then(|name| crate::engine::validate::agent_name_problem(name)) {
        return invalid("agent_name", why.strip_prefix("agent_name ").unwrap_or(&why).to_string());
    }
    if let EventKind::StepRecorded { commit_hash, .. } = kind {
        let commit_id = (4..=64).contains(&commit_hash.len()) && commit_hash.chars().all(|c| c.is_ascii_hexdigit());
        if !commit_hash.is_empty() && !commit_id {
            return invalid("commit_hash", format!("{commit_hash:?} is not a commit id (4 to 64 hexadecimal digits)"));
        }
    }
    match kind {
        EventKind::Amended { phases, .. } if phases.iter().any(|p| !crate::model::text::is_one_line(&p.name)) => {
            invalid("phases", format!("a phase's {}", crate::engine::validate::ONE_LINE_NAME))
        }
        // Found by a verifying tester: an amendment took a multi-line gate type.
        EventKind::Amended { phases, .. }
            if phases
                .iter()
                .filter_map(|p| p.gate.as_ref())
                .any(|g| !crate::model::text::is_one_line(&g.gate_type)) =>
        {
            invalid("phases", "a gate's gate_type must be one line without control characters".into())
        }
        EventKind::InteractInput { input, .. } if input.trim().is_empty() => {
            invalid("input", "the reply is empty: give the human's reply, or complete the interaction".into())
        }
        EventKind::QuotaWait { until, .. } if chrono::DateTime::parse_from_rfc3339(until.trim()).is_err() => {
            invalid("until", format!("{until:?} is not an RFC 3339 time (e.g. 2026-12-04T18:00:00Z)"))
        }
        EventKind::Amended { description, .. } if description.trim().is_empty() => {
            invalid("description", "say why the plan changes".into())
        }
        EventKind::GateRecorded { passed: true, exit_code: Some(code), .. } if *code != 0 => invalid(
            "exit_code",
            format!("a gate whose command exited {code} did not pass: send passed: false (or the exit code 0)"),
        ),
        _ => Ok(()),
    }
}

/// The idempotency rule for decisions, checked on the loaded state under the lease: a resend
/// (the same explicit key, or no key from the same actor) passes (the engine answers the first
/// outcome); a decision by someone else, or under another key, on an approval already decided
/// is refused naming the decision that stands.
pub(super) fn standing_check(state: &ExecutionState, event: &Event) -> Result<(), OpsError> {
    if let EventKind::FeedbackRecorded { phase_id, question_id, .. } = &event.kind {
        // Answered already (found by a tester: the losers of a race got `wrong_status`):
        // someone else's answer stands; a resend (its key applied) passes.
        let answer = state.feedback_results.iter().find(|f| f.phase_id == *phase_id && f.question_id == *question_id);
        let Some(answer) = answer else { return Ok(()) };
        if state.applied_keys.contains_key(&engine::idempotency_key(state, event)) {
            return Ok(());
        }
        let standing =
            Standing { by: answer.actor.clone(), at: answer.decided_at.clone(), what: answer.chosen_option.clone() };
        return Err(OpsError::AlreadyDecided {
            message: format!(
                "question {question_id} of phase {phase_id} of {} was already answered: {:?} by {} at {}",
                state.task_id, standing.what, standing.by, standing.at
            ),
            standing,
        });
    }
    let EventKind::ApprovalRecorded { phase_id, .. } = &event.kind else { return Ok(()) };
    let pending = state.pending_approval_request.as_ref().is_some_and(|r| r.phase_id == *phase_id);
    if pending {
        return Ok(());
    }
    let Some(refusal) = already_decided(state, *phase_id) else {
        return Ok(());
    };
    let key = engine::idempotency_key(state, event);
    // A derived key includes the decider (`engine::idempotency_key`): only the same
    // operator's resend, or the same explicit key, matches.
    if state.applied_keys.contains_key(&key) {
        return Ok(());
    }
    Err(refusal)
}

/// The refusal of another decision on the approval of `phase_id`, naming the decision that
/// stands (its latest); `None` while it was never decided.
pub(super) fn already_decided(state: &ExecutionState, phase_id: i64) -> Option<OpsError> {
    let standing = state.approval_results.iter().rev().find(|a| a.phase_id == phase_id)?;
    let what = standing.result.as_str().to_string();
    Some(OpsError::AlreadyDecided {
        message: format!(
            "the approval of phase {phase_id} of {} was already decided: {what} by {} at {}",
            state.task_id, standing.actor, standing.decided_at
        ),
        standing: Standing { by: standing.actor.clone(), at: standing.decided_at.clone(), what },
    })
}
