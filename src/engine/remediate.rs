//! Remediation rounds on an open pull request (issue 19.3/4): a completed execution is
//! reopened the way an amendment reopens one — a fix phase with one step is appended and the
//! execution runs again — when a required check of its pull request fails or a reviewer asks
//! for changes; the round's fix is journaled as pushed before the execution completes again;
//! and Baton parks (asks a human) when the rounds are used up or a reviewer says stop.
//!
//! The bound is checked here from the event (`max_rounds`, the runtime's setting journaled
//! with the round), so a replay agrees whatever the configuration says later. Whether a
//! round should start (which checks failed, who may ask) is the runtime's decision
//! (`runtime::remediation`, `runtime::ops`). This module never does IO and never reads the
//! clock.

use crate::engine::{amend, budget, EngineError};
use crate::model::event::EventKind;
use crate::model::plan::{PlanPhase, PlanStep};
use crate::model::state::{ExecutionState, ExecutionStatus, RemediationCause, RemediationRound};
use crate::model::text::cut;

/// Longest fix prompt a round may carry, characters (the runtime trims to less).
pub const MAX_PROMPT_CHARS: usize = 64_000;
/// Most review threads one round may answer.
pub const MAX_THREADS: usize = 200;
/// Most review comments waiting for the next round.
pub const MAX_QUEUED: usize = 100;
/// Longest queued comment body, characters (the runtime trims to less).
pub const MAX_QUEUED_CHARS: usize = 16_000;

/// The fix phase's name.
pub fn phase_name(cause: RemediationCause, round: u32) -> String {
    match cause {
        RemediationCause::Ci => format!("Fix CI (round {round})"),
        RemediationCause::Review => format!("Address review (round {round})"),
    }
}

fn is_sha(sha: &str) -> bool {
    (7..=64).contains(&sha.len()) && sha.chars().all(|c| c.is_ascii_hexdigit())
}

/// Whether `kind` (a remediation event) may be applied to `state`. Remediation events are the
/// only ones a completed execution accepts.
pub(crate) fn check(state: &ExecutionState, kind: &EventKind) -> Result<(), EngineError> {
    let bad = |field: Option<&'static str>, message: String| Err(EngineError::InvalidEvent { field, message });
    let status = state.status;
    match kind {
        EventKind::RemediationStarted { cause, sha, agent_name, task_description, max_rounds, threads, queued } => {
            if status != ExecutionStatus::Complete {
                return Err(EngineError::WrongStatus { event: "remediation_started", status });
            }
            if let Some(why) = &state.remediation.parked {
                return bad(None, format!("remediation is parked ({why}): a human decides what happens next"));
            }
            let used = state.remediation.used(*cause);
            if used >= *max_rounds {
                return bad(
                    None,
                    format!("{used} of {max_rounds} {} rounds are used: no more rounds start", cause.as_str()),
                );
            }
            if !is_sha(sha) {
                return bad(Some("sha"), format!("remediation_started: sha {:?} is not a commit id", cut(sha, 80)));
            }
            if agent_name.trim().is_empty() {
                return bad(Some("agent_name"), "remediation_started: agent_name is empty".into());
            }
            if task_description.trim().is_empty() || task_description.chars().count() > MAX_PROMPT_CHARS {
                return bad(
                    Some("task_description"),
                    format!("remediation_started: task_description must be 1 to {MAX_PROMPT_CHARS} characters"),
                );
            }
            if threads.len() > MAX_THREADS {
                return bad(Some("threads"), format!("remediation_started: at most {MAX_THREADS} threads"));
            }
            if *queued as usize > state.remediation.queued.len() {
                return bad(
                    Some("queued"),
                    format!(
                        "remediation_started: {queued} queued comments answered, {} queued",
                        state.remediation.queued.len()
                    ),
                );
            }
            if *queued > 0 && *cause != RemediationCause::Review {
                return bad(Some("queued"), "remediation_started: only a review round answers queued comments".into());
            }
            Ok(())
        }
        EventKind::ReviewQueued { comments } => {
            // A round runs (in whatever state it stands), or one just completed.
            if status.is_final() && status != ExecutionStatus::Complete {
                return Err(EngineError::Final { status });
            }
            if let Some(why) = &state.remediation.parked {
                return bad(None, format!("remediation is parked ({why}): a human decides what happens next"));
            }
            if comments.is_empty() || state.remediation.queued.len() + comments.len() > MAX_QUEUED {
                return bad(Some("comments"), format!("review_queued: 1 to {MAX_QUEUED} comments may wait"));
            }
            if comments.iter().any(|c| c.body.trim().is_empty() || c.body.chars().count() > MAX_QUEUED_CHARS) {
                return bad(
                    Some("comments"),
                    format!("review_queued: each comment needs a body of 1 to {MAX_QUEUED_CHARS} characters"),
                );
            }
            Ok(())
        }
        EventKind::RemediationPushed { round, sha } => {
            if status != ExecutionStatus::Running || state.current().is_some() {
                return Err(EngineError::WrongStatus { event: "remediation_pushed", status });
            }
            let n = u32::try_from(state.remediation.rounds.len()).unwrap_or(u32::MAX);
            if *round != n || state.remediation.unpushed().is_none() {
                return bad(
                    Some("round"),
                    format!("remediation_pushed: round {round} is not the round waiting for its push"),
                );
            }
            if !is_sha(sha) {
                return bad(Some("sha"), format!("remediation_pushed: sha {:?} is not a commit id", cut(sha, 80)));
            }
            Ok(())
        }
        EventKind::RemediationParked { reason } => {
            if status.is_final() && status != ExecutionStatus::Complete {
                return Err(EngineError::Final { status });
            }
            if reason.trim().is_empty() {
                return bad(Some("reason"), "remediation_parked needs a reason".into());
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Applies a checked remediation event at `now`.
pub(crate) fn apply(state: &mut ExecutionState, kind: &EventKind, now: &str) {
    match kind {
        EventKind::RemediationStarted { cause, sha, agent_name, task_description, threads, queued, .. } => {
            let round = state.remediation.used(*cause) + 1;
            let mut phase = PlanPhase::new(0, phase_name(*cause, round));
            phase.steps.push(Box::new(PlanStep::new("", agent_name.clone(), task_description.clone())));
            let description = format!("{} round {round} for {sha}", cause.as_str());
            budget::reconsider(state);
            amend::apply(state, &description, &format!("{}_remediation", cause.as_str()), &[phase], None, &[], now);
            let phase_id = state.plan.phases.last().map_or(0, |p| p.phase_id);
            state.remediation.rounds.push(RemediationRound {
                round,
                cause: *cause,
                sha: sha.clone(),
                phase_id,
                agent_name: agent_name.clone(),
                started_at: now.to_string(),
                pushed_sha: String::new(),
                threads: threads.clone(),
            });
            let taken = (*queued as usize).min(state.remediation.queued.len());
            state.remediation.queued.drain(..taken);
            state.status = ExecutionStatus::Running;
            state.completed_at.clear();
        }
        EventKind::ReviewQueued { comments } => {
            for c in comments {
                if !state.remediation.knows_comment(&c.id) {
                    state.remediation.queued.push(c.clone());
                }
            }
        }
        EventKind::RemediationPushed { sha, .. } => {
            if let Some(r) = state.remediation.rounds.last_mut() {
                r.pushed_sha.clone_from(sha);
            }
        }
        EventKind::RemediationParked { reason } => {
            state.remediation.parked = Some(reason.clone());
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{apply as apply_event, next_action, start};
    use crate::model::action::Action;
    use crate::model::event::{Event, RecordStatus};
    use crate::model::plan::MachinePlan;

    const SHA: &str = "0123456789abcdef0123456789abcdef01234567";

    fn completed() -> ExecutionState {
        let mut plan = MachinePlan::from_json(r#"{"task_id":"t-1","task_summary":"s"}"#).unwrap();
        let mut phase = PlanPhase::new(1, "Build");
        phase.steps = vec![Box::new(PlanStep::new("1.1", "backend-engineer", "build it"))];
        plan.phases = vec![phase];
        let mut s = start(plan, "2026-01-01T00:00:00+00:00").unwrap();
        let dispatched = EventKind::StepDispatched { step_id: "1.1".into(), agent_name: "backend-engineer".into() };
        apply_event(&mut s, &Event::new(dispatched), "2026-01-01T00:01:00+00:00").unwrap();
        record(&mut s, "1.1", "2026-01-01T00:02:00+00:00");
        apply_event(&mut s, &Event::new(EventKind::Completed), "2026-01-01T00:03:00+00:00").unwrap();
        assert_eq!(s.status, ExecutionStatus::Complete);
        s
    }

    fn record(s: &mut ExecutionState, step: &str, now: &str) {
        let kind = EventKind::StepRecorded {
            step_id: step.into(),
            agent_name: "backend-engineer".into(),
            status: RecordStatus::Complete,
            outcome: "done".into(),
            files_changed: vec!["a.rs".into()],
            commit_hash: "abc1234".into(),
            tokens: 10,
            cost_usd: 0.1,
            duration_seconds: 1.0,
            error: String::new(),
            usage: None,
        };
        apply_event(s, &Event::new(kind), now).unwrap();
    }

    fn round(cause: RemediationCause, sha: &str, max: u32) -> Event {
        Event::new(EventKind::RemediationStarted {
            cause,
            sha: sha.into(),
            agent_name: "backend-engineer".into(),
            task_description: "fix the lint failure".into(),
            max_rounds: max,
            threads: Vec::new(),
            queued: 0,
        })
    }

    #[test]
    fn a_round_reopens_a_completed_execution_with_a_fix_phase_and_completes_again_after_its_push() {
        let mut s = completed();
        apply_event(&mut s, &round(RemediationCause::Ci, SHA, 2), "2026-01-01T01:00:00+00:00").unwrap();
        assert_eq!(s.status, ExecutionStatus::Running);
        assert_eq!(s.plan.phases.len(), 2);
        assert_eq!(s.plan.phases[1].name, "Fix CI (round 1)");
        let Action::Dispatch(d) = next_action(&s) else { panic!("{:?}", next_action(&s)) };
        assert_eq!((d.step_id.as_str(), d.agent_name.as_str()), ("2.1", "backend-engineer"));
        assert!(d.delegation_prompt.contains("fix the lint failure"));
        assert_eq!(s.remediation.rounds[0].phase_id, 2);

        let dispatched = EventKind::StepDispatched { step_id: "2.1".into(), agent_name: "backend-engineer".into() };
        apply_event(&mut s, &Event::new(dispatched), "2026-01-01T01:01:00+00:00").unwrap();
        record(&mut s, "2.1", "2026-01-01T01:02:00+00:00");
        assert!(matches!(next_action(&s), Action::Complete { .. }));
        let pushed = EventKind::RemediationPushed { round: 1, sha: "fedcba9876543210".into() };
        apply_event(&mut s, &Event::new(pushed.clone()), "2026-01-01T01:03:00+00:00").unwrap();
        assert_eq!(s.remediation.unpushed(), None);
        let again = apply_event(&mut s, &Event::new(pushed), "2026-01-01T01:03:00+00:00").unwrap();
        assert!(again.duplicate, "the same push twice is one push");
        apply_event(&mut s, &Event::new(EventKind::Completed), "2026-01-01T01:04:00+00:00").unwrap();
        assert_eq!(s.status, ExecutionStatus::Complete, "a second completion is a new event, not a duplicate");
    }

    #[test]
    fn rounds_are_bounded_per_cause_and_a_parked_execution_starts_none() {
        let mut s = completed();
        apply_event(&mut s, &round(RemediationCause::Ci, SHA, 1), "2026-01-01T01:00:00+00:00").unwrap();
        s.status = ExecutionStatus::Complete; // as if the round finished
        let err = apply_event(&mut s, &round(RemediationCause::Ci, "abcdef1", 1), "2026-01-01T02:00:00+00:00")
            .expect_err("one round allowed");
        assert!(err.to_string().contains("1 of 1 ci rounds are used"), "{err}");
        apply_event(&mut s, &round(RemediationCause::Review, "abcdef1", 1), "2026-01-01T02:00:00+00:00")
            .expect("review rounds have their own counter");
        s.status = ExecutionStatus::Complete;
        let parked = EventKind::RemediationParked { reason: "2 of 2 ci rounds used".into() };
        apply_event(&mut s, &Event::new(parked), "2026-01-01T03:00:00+00:00").unwrap();
        let err = apply_event(&mut s, &round(RemediationCause::Review, "abcdef2", 5), "2026-01-01T03:01:00+00:00")
            .expect_err("parked");
        assert!(err.to_string().contains("parked"), "{err}");
    }

    fn queued(id: &str, body: &str) -> crate::model::state::QueuedComment {
        crate::model::state::QueuedComment {
            id: id.into(),
            path: "src/lib.rs".into(),
            line: Some(3),
            diff_hunk: String::new(),
            body: body.into(),
            author: "tessa".into(),
        }
    }

    #[test]
    fn comments_during_a_round_wait_once_each_and_the_next_review_round_takes_them() {
        let mut s = completed();
        apply_event(&mut s, &round(RemediationCause::Review, SHA, 2), "2026-01-01T01:00:00+00:00").unwrap();
        let wait = |c: Vec<crate::model::state::QueuedComment>| Event::new(EventKind::ReviewQueued { comments: c });
        apply_event(
            &mut s,
            &wait(vec![queued("7", "rename"), queued("", "and the docs")]),
            "2026-01-01T01:01:00+00:00",
        )
        .unwrap();
        apply_event(&mut s, &wait(vec![queued("7", "rename")]), "2026-01-01T01:02:00+00:00").unwrap();
        assert_eq!(s.remediation.queued.len(), 2, "comment 7 waits once");
        assert!(s.remediation.knows_comment("7") && !s.remediation.knows_comment(""));
        let empty = apply_event(&mut s, &wait(Vec::new()), "2026-01-01T01:03:00+00:00");
        assert!(empty.is_err(), "nothing to queue");
        // A CI round cannot take them; the next review round takes them, oldest first.
        s.status = ExecutionStatus::Complete;
        let mut ci = round(RemediationCause::Ci, "abcdef1", 2);
        if let EventKind::RemediationStarted { queued, .. } = &mut ci.kind {
            *queued = 1;
        }
        assert!(apply_event(&mut s, &ci, "2026-01-01T02:00:00+00:00").is_err());
        let mut next = round(RemediationCause::Review, "abcdef1", 2);
        if let EventKind::RemediationStarted { queued, .. } = &mut next.kind {
            *queued = 2;
        }
        apply_event(&mut s, &next, "2026-01-01T02:00:00+00:00").unwrap();
        assert!(s.remediation.queued.is_empty());
        // Parked: nothing waits any more.
        s.status = ExecutionStatus::Complete;
        let parked = EventKind::RemediationParked { reason: "2 of 2 review rounds used".into() };
        apply_event(&mut s, &Event::new(parked), "2026-01-01T03:00:00+00:00").unwrap();
        assert!(apply_event(&mut s, &wait(vec![queued("8", "x")]), "2026-01-01T03:01:00+00:00").is_err());
    }

    #[test]
    fn a_round_needs_a_completed_execution_a_commit_and_a_prompt() {
        let mut s = completed();
        for (sha, prompt) in [("not-a-sha", "fix"), (SHA, "  ")] {
            let mut e = round(RemediationCause::Ci, sha, 2);
            if let EventKind::RemediationStarted { task_description, .. } = &mut e.kind {
                *task_description = prompt.into();
            }
            assert!(apply_event(&mut s, &e, "2026-01-01T01:00:00+00:00").is_err(), "{sha} {prompt:?}");
        }
        s.status = ExecutionStatus::Running;
        assert!(matches!(
            apply_event(&mut s, &round(RemediationCause::Ci, SHA, 2), "2026-01-01T01:00:00+00:00"),
            Err(EngineError::WrongStatus { .. })
        ));
    }
}
