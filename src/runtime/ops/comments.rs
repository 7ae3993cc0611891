//! Decisions by forge comment (part of the operator service, see `ops`): `/baton approve` or
//! `/baton reject` on the issue or work item a spec came from decides its execution's pending
//! approval, as the web form would. It never parses webhook payloads and never prints.

use super::*;

impl Ops {
    // Forge comments

    /// Decides the approval that the execution of the spec imported from `source_url` (on
    /// forge `source`: `github`, `ado`) waits for, by `op` (the forge user's Baton user), as the
    /// web form would. `written_at` (RFC 3339) is when the comment was written, where the forge
    /// says: a comment written before the pending approval was asked for decides nothing. `Ok(Err(reason))` when the comment decides nothing (no such spec, not
    /// fired, nothing pending, a role too low or the separate-reviewer rule, a reject without a
    /// reason): the webhook answers it as ignored.
    ///
    /// Errors: as [`Ops::record`].
    pub async fn decide_from_comment(
        &self,
        source: &str,
        source_url: &str,
        written_at: Option<&str>,
        op: &Operator,
        result: ApprovalDecision,
        feedback: String,
    ) -> Result<Result<CommentDecision, String>, OpsError> {
        if result == ApprovalDecision::Reject && feedback.is_empty() {
            return Ok(Err("/baton reject needs a reason: /baton reject <reason>".into()));
        }
        if op.role < Role::Reviewer {
            return Ok(Err(format!("{} is a {}; deciding needs the reviewer role", op.name, op.role.as_str())));
        }
        let store = self.execs.store();
        let Some(spec) = store.spec_by_source_url(source, source_url).await? else {
            return Ok(Err(format!("no spec was imported from {source_url}")));
        };
        let Some(task_id) = spec.task_id.clone() else {
            return Ok(Err(format!("spec {} has not been fired", spec.spec_id)));
        };
        let state = self.get(&task_id).await?;
        let Some(pending) = state.pending_approval_request.as_ref() else {
            // A comment written while an approval was pending, arriving after it was decided:
            // the decision that stands, as every door names it.
            let standing = state.approval_results.last().and_then(|a| already_decided(&state, a.phase_id));
            let standing = standing.map(|e| format!(" ({e})")).unwrap_or_default();
            return Ok(Err(format!(
                "execution {task_id} of spec {} is not waiting for an approval{standing}",
                spec.spec_id
            )));
        };
        let phase_id = pending.phase_id;
        // A comment answers the approval that was pending when it was written: one written
        // before this approval was asked for (it decided, or came too late for, an earlier
        // one) never decides it.
        let written = match written_at {
            None => None,
            Some(text) => match parse_time(text) {
                Some(t) => Some(t),
                // A time the forge always sends well-formed: a payload that garbles it cannot
                // say which approval it answers.
                None => {
                    return Ok(Err(format!(
                        "the comment's time {:?} is not an RFC 3339 time: it decides nothing",
                        crate::model::text::cut(text, 40)
                    )))
                }
            },
        };
        if let Some((written, asked)) = written.zip(parse_time(&pending.requested_at)) {
            if written < asked {
                return Ok(Err(format!(
                    "the comment was written at {} before phase {phase_id} of {task_id} asked for approval at {}: \
                     comment again to decide it",
                    written.to_rfc3339(),
                    asked.to_rfc3339()
                )));
            }
        }
        let decided = match self.approve(&task_id, phase_id, result, feedback, None, op).await {
            Ok(decided) => decided,
            // Refused like a role too low: the comment decides nothing (the separate-reviewer
            // rule answered 403, so the forge saw a failed delivery and the refusal no outcome).
            Err(OpsError::Forbidden(why)) => return Ok(Err(why)),
            Err(e) => return Err(e),
        };
        Ok(Ok(CommentDecision { spec_id: spec.spec_id, task_id, phase_id, decided }))
    }
}

/// What a forge comment decided.
#[derive(Debug, Clone)]
pub struct CommentDecision {
    /// The spec the item was imported as.
    pub spec_id: i64,
    /// Its execution.
    pub task_id: String,
    /// The phase decided.
    pub phase_id: i64,
    /// The record.
    pub decided: Decided,
}
