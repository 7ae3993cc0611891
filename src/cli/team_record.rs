//! `execute team-record` (agent-baton's spelling of `record` for a team member): its
//! `--member-id` must name a member (or the synthesis dispatch) of the team step `--step-id`
//! names (seed-spec §3.6).
//!
//! Owns that check, made on the execution's state before anything is recorded; it never
//! records, and it never changes state.

use crate::model::state::ExecutionState;
use crate::runtime::BadInput;

/// Checks that `member_id` belongs to the team step `step_id` of `state` (a member at any
/// depth of its team, or its `<step>.synthesis` dispatch).
///
/// Errors ([`BadInput`], one line naming both ids): an empty member id, a member of another
/// team step, an id that is no member, a step id that is not a team step.
pub(crate) fn check_member(state: &ExecutionState, step_id: &str, member_id: &str) -> Result<(), BadInput> {
    let parent = state.team_parent(member_id);
    if parent == Some(step_id) {
        return Ok(());
    }
    let team = state
        .locate(step_id)
        .and_then(|(pi, si)| state.plan.phases.get(pi)?.steps.get(si))
        .filter(|s| !s.team.is_empty());
    let members = team.map(|t| crate::engine::team::unit_ids(t).join(", "));
    let message = match (parent, members) {
        (Some(parent), _) => {
            format!("--member-id {member_id} is not a member of --step-id {step_id}: it belongs to team step {parent}")
        }
        (None, Some(members)) if member_id.trim().is_empty() => {
            format!("--member-id is empty: name a member of team step {step_id} (--step-id): {members}")
        }
        (None, Some(members)) => {
            format!("--member-id {member_id:?} is not a member of --step-id {step_id} (its members: {members})")
        }
        (None, None) => {
            let what = if state.locate(step_id).is_some() { "is not a team step" } else { "is no step of this plan" };
            format!("--member-id {member_id:?} cannot be recorded: --step-id {step_id} {what}")
        }
    };
    Err(BadInput(message))
}
