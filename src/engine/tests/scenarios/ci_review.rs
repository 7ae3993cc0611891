//! `ci` and `review` gates without a command (issue 19.2): the forge's checks wait (WAIT with
//! how far they are), then pass or fail the gate; a reviewer agent's step gives a verdict; with
//! no reviewer a human approval decides. Never a skip, never a silent pass.

use super::*;
use crate::model::action::GateCheck;
use crate::model::state::{CiCheck, CiCheckState};

const SHA: &str = "0123456789abcdef0123456789abcdef01234567";
const UNTIL: &str = "2026-01-01T01:00:00+00:00";

fn with_gate(gate_type: &str) -> ExecutionState {
    let mut p = phase(1, vec![step("1.1", &[])]);
    p.gate = Some(PlanGate { gate_type: gate_type.into(), command: String::new(), extra: Default::default() });
    let mut state = started(vec![p, phase(2, vec![step("2.1", &[])])]);
    ok(&mut state, &record("1.1", RecordStatus::Complete));
    assert_eq!(state.status, ExecutionStatus::GatePending);
    state
}

fn check(name: &str, st: CiCheckState, summary: &str) -> CiCheck {
    CiCheck { name: name.into(), state: st, summary: summary.into() }
}

fn checked(checks: Vec<CiCheck>) -> Event {
    ev(EventKind::CiChecked { phase_id: 1, sha: SHA.into(), checks })
}

#[test]
fn a_ci_gate_without_a_command_is_checked_by_the_forge_not_skipped() {
    let mut state = with_gate("ci");
    let g = gate_action_of(&state);
    assert_eq!((g.check, g.skip_reason.as_deref()), (Some(GateCheck::ForgeCi), None));
    assert!(g.message.contains("push baton/"), "{}", g.message);
    let err = refused(&mut state, &ev(EventKind::GateSkipped { phase_id: 1, reason: String::new() }));
    assert!(err.to_string().contains("never skipped"), "{err}");
    let err = refused(&mut state, &gate_result(1, true, "looks fine"));
    assert!(err.to_string().contains("ci_started"), "{err}");
    ok(&mut state, &ev(EventKind::CiStarted { phase_id: 1, sha: SHA.into(), until: UNTIL.into() }));
    let Action::Wait { message, until } = next_action(&state) else { panic!("{:?}", next_action(&state)) };
    assert_eq!(until.as_deref(), Some(UNTIL));
    assert!(message.contains("waiting for CI: no checks reported yet"), "{message}");
    ok(
        &mut state,
        &checked(vec![
            check("build", CiCheckState::Passed, ""),
            check("lint", CiCheckState::Passed, ""),
            check("test", CiCheckState::Passed, ""),
            check("e2e", CiCheckState::Pending, ""),
            check("docs", CiCheckState::Pending, ""),
        ]),
    );
    let Action::Wait { message, .. } = next_action(&state) else { panic!() };
    assert!(message.contains("waiting for CI: 3 of 5 checks done"), "{message}");
    assert!(message.contains("running: e2e, docs"), "{message}");
    // The same checks again under another round are a new poll; the verdict passes the gate.
    ok(&mut state, &gate_result(1, true, "CI passed"));
    assert_eq!(state.ci_wait, None);
    assert_eq!(state.current_phase, 1);
    assert!(state.gate_passed(1));
}

#[test]
fn a_ci_wait_is_journaled_and_replays_and_a_failure_reruns_the_last_step() {
    let mut state = with_gate("ci");
    let events = [
        record("1.1", RecordStatus::Complete),
        ev(EventKind::CiStarted { phase_id: 1, sha: SHA.into(), until: UNTIL.into() }),
        checked(vec![check("lint", CiCheckState::Pending, "")]),
        checked(vec![check("lint", CiCheckState::Failed, "2 errors")]),
    ];
    for e in &events[1..] {
        ok(&mut state, e);
    }
    assert_eq!(state.ci_wait.as_ref().map(|w| w.polls), Some(2));
    let mut p = phase(1, vec![step("1.1", &[])]);
    p.gate = Some(PlanGate { gate_type: "ci".into(), command: String::new(), extra: Default::default() });
    let plan = plan_of(vec![p, phase(2, vec![step("2.1", &[])])]);
    let replayed = replay(plan, T0, events.iter().map(|e| (e, T0))).unwrap();
    assert_eq!(replayed, state, "a restart mid-wait finds the same wait");
    // Another sha is not this wait's; a second start while waiting is refused.
    let err = refused(&mut state, &ev(EventKind::CiChecked { phase_id: 1, sha: "abcdef0".into(), checks: vec![] }));
    assert!(err.to_string().contains("waits for"), "{err}");
    let again = ev(EventKind::CiStarted { phase_id: 1, sha: SHA.into(), until: UNTIL.into() });
    assert!(apply(&mut state, &again, T0).unwrap().duplicate, "the same start again is a duplicate");
    let err =
        refused(&mut state, &ev(EventKind::CiStarted { phase_id: 1, sha: "abcdef0".into(), until: UNTIL.into() }));
    assert!(err.to_string().contains("already waits"), "{err}");
    ok(&mut state, &gate_result(1, false, "CI failed: lint: 2 errors"));
    assert_eq!(state.ci_wait, None);
    assert_eq!(dispatch_ids(&state), vec!["1.1"], "the phase's last step runs again with the failure");
    let feedback = state.result("1.1").and_then(|r| r.gate_feedback.clone()).unwrap_or_default();
    assert!(feedback.starts_with("ci gate:\nCI failed: lint: 2 errors"), "{feedback}");
}

#[test]
fn a_ci_started_needs_a_ci_gate_without_a_command_and_a_commit() {
    let mut state = with_gate("review");
    let err = refused(&mut state, &ev(EventKind::CiStarted { phase_id: 1, sha: SHA.into(), until: UNTIL.into() }));
    assert!(err.to_string().contains("not a ci gate"), "{err}");
    let mut state = with_gate("ci");
    let err =
        refused(&mut state, &ev(EventKind::CiStarted { phase_id: 1, sha: "main; rm".into(), until: UNTIL.into() }));
    assert!(err.to_string().contains("not a commit id"), "{err}");
}

fn review_outcome(text: &str) -> Event {
    let mut e = record("review.1", RecordStatus::Complete);
    if let EventKind::StepRecorded { outcome, agent_name, .. } = &mut e.kind {
        *outcome = text.into();
        *agent_name = "reviewer".into();
    }
    e
}

#[test]
fn a_review_gate_dispatches_the_reviewer_whose_pass_passes_the_gate() {
    let mut state = with_gate("review");
    let g = gate_action_of(&state);
    assert_eq!((g.check, g.skip_reason.as_deref()), (Some(GateCheck::Reviewer), None));
    let err = refused(&mut state, &gate_result(1, true, "fine"));
    assert!(err.to_string().contains("decided by the reviewer"), "{err}");
    ok(&mut state, &ev(EventKind::ReviewRequested { phase_id: 1, agent_name: "reviewer".into() }));
    let d = dispatch_of(&state, "review.1");
    assert_eq!((d.agent_name.as_str(), d.step_type.as_str()), ("reviewer", "gate_review"));
    assert!(d.delegation_prompt.contains("\"verdict\""), "{}", d.delegation_prompt);
    assert!(d.delegation_prompt.contains("1.1 (dev): did 1.1"), "{}", d.delegation_prompt);
    ok(
        &mut state,
        &review_outcome("Looks good.\n```json\n{\"verdict\": \"pass\", \"findings\": [], \"summary\": \"ok\"}\n```"),
    );
    assert!(state.gate_passed(1));
    assert_eq!(state.current_phase, 1, "the phase advanced");
    assert!(state.gate_results[0].output.starts_with("review by reviewer: pass"), "{}", state.gate_results[0].output);
}

#[test]
fn a_failed_review_reruns_the_last_working_step_with_the_findings_then_asks_again() {
    let mut state = with_gate("review");
    ok(&mut state, &ev(EventKind::ReviewRequested { phase_id: 1, agent_name: "reviewer".into() }));
    let verdict = r#"{"verdict": "fail", "findings": [{"file": "src/a.rs", "line": 3, "message": "drops the error"}, "no test"]}"#;
    ok(&mut state, &review_outcome(verdict));
    assert!(!state.gate_cleared(1));
    assert_eq!(dispatch_ids(&state), vec!["1.1"], "the working step, not the reviewer, runs again");
    let feedback = state.result("1.1").and_then(|r| r.gate_feedback.clone()).unwrap_or_default();
    assert!(feedback.contains("- src/a.rs:3: drops the error\n- no test"), "{feedback}");
    ok(&mut state, &record("1.1", RecordStatus::Complete));
    assert_eq!(state.status, ExecutionStatus::GatePending, "the gate is asked again");
    ok(&mut state, &ev(EventKind::ReviewRequested { phase_id: 1, agent_name: "reviewer".into() }));
    assert_eq!(dispatch_ids(&state), vec!["review.2"]);
}

#[test]
fn an_unreadable_review_verdict_fails_the_reviewer_step_saying_why() {
    let mut state = with_gate("review");
    ok(&mut state, &ev(EventKind::ReviewRequested { phase_id: 1, agent_name: "reviewer".into() }));
    ok(&mut state, &review_outcome("I think it is fine."));
    assert_eq!(state.status, ExecutionStatus::Failed);
    assert!(state.failure.as_deref().unwrap_or_default().contains("invalid review verdict"), "{:?}", state.failure);
    assert!(!state.gate_passed(1));
}

#[test]
fn a_review_gate_without_a_reviewer_asks_a_human_whose_decision_is_the_gate() {
    let mut state = with_gate("review");
    ok(&mut state, &ev(EventKind::GateApprovalRequested { phase_id: 1 }));
    assert_eq!(state.status, ExecutionStatus::ApprovalPending);
    let Action::Approval(a) = next_action(&state) else { panic!("{:?}", next_action(&state)) };
    assert!(a.message.contains("review gate waits for a human"), "{}", a.message);
    assert!(a.approval_context.contains("no reviewer agent is configured"), "{}", a.approval_context);
    ok(&mut state, &approval(1, ApprovalDecision::Reject, "handle the empty input").by("rita"));
    assert!(!state.gate_cleared(1));
    assert_eq!(dispatch_ids(&state), vec!["1.1"]);
    let feedback = state.result("1.1").and_then(|r| r.gate_feedback.clone()).unwrap_or_default();
    assert!(feedback.contains("review by rita: rejected\nhandle the empty input"), "{feedback}");
    ok(&mut state, &record("1.1", RecordStatus::Complete));
    ok(&mut state, &ev(EventKind::GateApprovalRequested { phase_id: 1 }));
    ok(&mut state, &approval(1, ApprovalDecision::Approve, "").by("rita"));
    assert!(state.gate_passed(1));
    assert_eq!(state.current_phase, 1);
}
