//! One scenario per action type and transition (seed-spec §2.2–§2.18, engine design decisions),
//! grouped by engine topic, one file each: [`dispatch`] (start, dispatch waves, waits and step
//! failures, skips, the phase tally), [`gates`], [`approvals`] (approvals, pre-flight approvals,
//! feedback), [`interact`], [`checkpoints`] (complete, checkpoints, cancel), [`ci_review`] (`ci` and
//! `review` gates without a command, issue 19.2) and [`amend`]. This
//! file holds only the helpers the topics share (reading the offered action, the approval
//! fixture); it asserts nothing itself. Budget and teams scenarios live in their own sibling
//! files of `engine/tests`.

use super::*;

mod amend;
mod approvals;
mod checkpoints;
mod ci_review;
mod dispatch;
mod gates;
mod interact;
mod quota;

fn dispatch_of(state: &ExecutionState, step_id: &str) -> crate::model::action::DispatchAction {
    next_actions(state)
        .into_iter()
        .find_map(|a| match a {
            Action::Dispatch(d) if d.step_id == step_id => Some(d),
            _ => None,
        })
        .unwrap_or_else(|| panic!("step {step_id} is not offered: {:?}", next_action(state)))
}

fn gate_action_of(state: &ExecutionState) -> crate::model::action::GateAction {
    match next_action(state) {
        Action::Gate(g) => g,
        other => panic!("expected GATE, got {other:?}"),
    }
}

fn approval_action_of(state: &ExecutionState) -> crate::model::action::ApprovalAction {
    match next_action(state) {
        Action::Approval(a) => a,
        other => panic!("expected APPROVAL, got {other:?}"),
    }
}

fn failed_summary(state: &ExecutionState) -> String {
    match next_action(state) {
        Action::Failed { summary, .. } => summary,
        other => panic!("expected FAILED, got {other:?}"),
    }
}

fn phase_names(state: &ExecutionState) -> Vec<(i64, String)> {
    state.plan.phases.iter().map(|p| (p.phase_id, p.name.clone())).collect()
}

fn approval_phase(steps: Vec<PlanStep>) -> PlanPhase {
    let mut p = phase(1, steps);
    p.approval_required = true;
    p
}

fn awaiting_approval() -> ExecutionState {
    let mut first = step("1.1", &[]);
    first.agent_name = "architect".into();
    let mut state = started(vec![approval_phase(vec![first, step("1.2", &[])]), phase(2, vec![step("2.1", &[])])]);
    for id in ["1.1", "1.2"] {
        ok(&mut state, &record(id, RecordStatus::Complete));
    }
    state
}
