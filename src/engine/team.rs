//! Team steps (seed-spec §1.7, §3.6): a step whose work is split between members.
//!
//! * Members are flattened depth-first, each lead before its `sub_team`. Every member is an
//!   ordinary dispatch whose step id is its member id (`1.1.a`, `1.1.a.b`): its own attempts, its
//!   own worktree, its own [`StepResult`] keyed by member id, recorded with the plain
//!   `step_recorded` event. A member is dispatchable once the team step's `depends_on` and the
//!   member's (intra-team) `depends_on` are done; no member starts after one has failed.
//! * An `agent_synthesis` team step has one more dispatch, `<step>.synthesis`, to the synthesis
//!   agent, once every member is done; its prompt is the `synthesis_prompt` with
//!   `{member_outcomes}` filled in.
//! * The team step's own result (agent `team`) is derived after every member event
//!   (`refresh`): pending before any member started; dispatched while members run or wait;
//!   failed when a member failed (the error names it) and none is in flight; complete when every
//!   member (and the synthesis) is done. Its outcome and files follow the strategy:
//!   `concatenate` joins the member outcomes with `"; "` and keeps every file (duplicates
//!   included), `merge_files` keeps each file once (first seen first), `agent_synthesis` takes
//!   the synthesis agent's outcome and commit.
//! * Two members that changed the same file are a conflict ([`TeamConflict`], on the team
//!   step's result): `auto_merge` keeps git's merge (consolidation already merged them),
//!   `fail` fails the team step naming the file and the members, `escalate` asks for an
//!   approval once nothing of the phase is in flight (approve keeps the merged result, reject
//!   fails the step, approve-with-feedback adds a resolution step to the phase).
//!
//! This module never does IO.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashSet};

use crate::engine::edits::{push_approval_result, result_entry};
use crate::engine::guards::{check_quota_values, check_record_values, checkpoint_due, current_step};
use crate::engine::EngineError;
use crate::model::action::ApprovalAction;
use crate::model::budget::TokenCounts;
use crate::model::event::{Event, EventKind, RecordStatus};
use crate::model::plan::{PlanPhase, PlanStep, TeamMember};
use crate::model::state::{
    ApprovalDecision, ExecutionState, ExecutionStatus, PendingApprovalRequest, StepResult, StepStatus, TeamConflict,
};
use crate::model::text::first_line;

/// Agent name of a team step's own (derived) result.
pub const TEAM_AGENT: &str = "team";

fn handling(step: &PlanStep) -> &str {
    step.synthesis.as_ref().map_or("auto_merge", |s| s.conflict_handling.as_str())
}

fn synthesises(step: &PlanStep) -> bool {
    !step.team.is_empty() && step.synthesis_strategy() == "agent_synthesis"
}

/// The dispatch ids of a team step: its members (flattened), then `<step>.synthesis` for
/// `agent_synthesis`. Empty for an ordinary step.
pub fn unit_ids(step: &PlanStep) -> Vec<String> {
    let mut ids: Vec<String> = step.flat_members().iter().map(|m| m.member_id.clone()).collect();
    if synthesises(step) {
        ids.push(step.synthesis_id());
    }
    ids
}

/// The agents a team step's dispatches run: each member's, and the synthesis agent of an
/// `agent_synthesis` step. Empty for an ordinary step.
pub fn agents(step: &PlanStep) -> Vec<&str> {
    let mut out: Vec<&str> = step.flat_members().iter().map(|m| m.agent_name.as_str()).collect();
    if synthesises(step) {
        out.push(step.synthesis.as_ref().map_or("code-reviewer", |s| s.synthesis_agent.as_str()));
    }
    out
}

/// Every id of `phase` that an agent attempt runs under, in plan order: each ordinary step's
/// id, and each team step's member ids and synthesis id (never the team step's own id).
pub fn dispatch_ids(phase: &PlanPhase) -> Vec<String> {
    phase.steps.iter().flat_map(|s| if s.team.is_empty() { vec![s.step_id.clone()] } else { unit_ids(s) }).collect()
}

/// True when an attempt of `step` runs: the step's own, or for a team step one of its members'
/// or its synthesis' (a team step waiting between members has nothing in flight).
pub(crate) fn in_flight(state: &ExecutionState, step: &PlanStep) -> bool {
    if step.team.is_empty() {
        return state.step_status(&step.step_id) == StepStatus::Dispatched;
    }
    unit_ids(step).iter().any(|id| state.step_status(id) == StepStatus::Dispatched)
}

/// The team step an id belongs to (a member or synthesis id), with its phase index.
fn parent_of<'a>(state: &'a ExecutionState, id: &str) -> Option<&'a PlanStep> {
    let parent_id = state.team_parent(id)?;
    let (pi, si) = state.locate(parent_id)?;
    state.plan.phases.get(pi)?.steps.get(si).map(|s| &**s)
}

/// The step a dispatch id runs: the plan's own step, a team member as a step of its own (its
/// id, agent, model and task — the team's task when it has none —, the team step's
/// dependencies, paths, context files, timeout and MCP servers, its `deliverables`), or the
/// synthesis dispatch of an `agent_synthesis` team step (with the team step's MCP servers).
/// None for an unknown id.
pub fn work_step<'a>(state: &'a ExecutionState, id: &str) -> Option<Cow<'a, PlanStep>> {
    if let Some(parent) = parent_of(state, id) {
        if id == parent.synthesis_id() && synthesises(parent) {
            return Some(Cow::Owned(synthesis_step(state, parent)));
        }
        let member = parent.flat_members().into_iter().find(|m| m.member_id == id)?;
        return Some(Cow::Owned(member_step(parent, member)));
    }
    let (pi, si) = state.locate(id)?;
    Some(Cow::Borrowed(&state.plan.phases[pi].steps[si]))
}

fn member_step(parent: &PlanStep, m: &TeamMember) -> PlanStep {
    let task = if m.task_description.trim().is_empty() { &parent.task_description } else { &m.task_description };
    let mut s = PlanStep::new(&m.member_id, &m.agent_name, task.clone());
    s.model = m.model.clone();
    s.depends_on = parent.depends_on.iter().chain(&m.depends_on).cloned().collect();
    s.deliverables = m.deliverables();
    s.allowed_paths = parent.allowed_paths.clone();
    s.blocked_paths = parent.blocked_paths.clone();
    s.context_files = parent.context_files.clone();
    if !parent.is_automation() {
        s.step_type = parent.step_type.clone();
    }
    s.timeout_seconds = parent.timeout_seconds;
    s.expect_changes = parent.expect_changes;
    s.allow_mass_deletion = parent.allow_mass_deletion;
    s.mcp_servers = parent.mcp_servers.clone();
    s
}

/// `- <member> (<agent>, <role>): <outcome>` (+ files) for every member with a result.
pub fn member_outcomes(state: &ExecutionState, step: &PlanStep) -> String {
    let mut out = Vec::new();
    for m in step.flat_members() {
        let Some(r) = state.result(&m.member_id) else { continue };
        let mut line = format!("- {} ({}, {}): {}", m.member_id, m.agent_name, m.role, r.outcome.trim());
        if !r.files_changed.is_empty() {
            line.push_str(&format!("\n  Files: {}", r.files_changed.join(", ")));
        }
        out.push(line);
    }
    out.join("\n")
}

fn synthesis_step(state: &ExecutionState, parent: &PlanStep) -> PlanStep {
    let spec = parent.synthesis.as_ref();
    let agent = spec.map_or("code-reviewer", |s| s.synthesis_agent.as_str());
    let template = spec.map(|s| s.synthesis_prompt.trim()).filter(|p| !p.is_empty()).map_or_else(
        || {
            format!(
                "Synthesise the work of the members of team step {}. Their changes are all in your working \
                 tree: reconcile them into one coherent result and report it.\n\n{{member_outcomes}}",
                parent.step_id
            )
        },
        str::to_string,
    );
    let task = template.replace("{member_outcomes}", &member_outcomes(state, parent));
    let mut s = PlanStep::new(parent.synthesis_id(), agent, task);
    s.model = parent.model.clone();
    s.depends_on = parent.depends_on.clone();
    s.allowed_paths = parent.allowed_paths.clone();
    s.blocked_paths = parent.blocked_paths.clone();
    s.context_files = parent.context_files.clone();
    s.timeout_seconds = parent.timeout_seconds;
    s.expect_changes = parent.expect_changes;
    s.allow_mass_deletion = parent.allow_mass_deletion;
    s.mcp_servers = parent.mcp_servers.clone();
    s
}

/// The team section of a member's or synthesis' delegation prompt, or None for another id.
pub(crate) fn prompt_section(state: &ExecutionState, id: &str) -> Option<String> {
    let parent = parent_of(state, id)?;
    let members = parent.flat_members();
    let overview: Vec<String> = members.iter().map(|m| format!("{} ({})", m.agent_name, m.role)).collect();
    let mut out = String::from("## Team\n");
    if id == parent.synthesis_id() {
        out.push_str(&format!(
            "You synthesise the work of team step {} ({}).\n- Parent step: {}\n",
            parent.step_id,
            overview.join(", "),
            parent.step_id
        ));
    } else {
        let m = members.iter().find(|m| m.member_id == id)?;
        out.push_str(&format!(
            "You are one member of team step {}.\n- Member id: {}\n- Role: {}\n- Parent step: {}\n- Team: {}\n",
            parent.step_id,
            m.member_id,
            m.role,
            parent.step_id,
            overview.join(", ")
        ));
        if !m.depends_on.is_empty() {
            out.push_str(&format!("- Builds on: {}\n", m.depends_on.join(", ")));
        }
        if !m.task_description.trim().is_empty() && !parent.task_description.trim().is_empty() {
            out.push_str(&format!("\nThe team's task: {}\n", parent.task_description.trim()));
        }
    }
    out.push('\n');
    Some(out)
}

/// The dispatches of team step `step` that may start now (see the module doc).
pub(crate) fn ready(state: &ExecutionState, step: &PlanStep) -> Vec<PlanStep> {
    let status = |id: &str| state.step_status(id);
    if matches!(status(&step.step_id), StepStatus::Complete | StepStatus::Skipped | StepStatus::Failed)
        || !step.depends_on.iter().all(|d| status(d).is_done())
    {
        return Vec::new();
    }
    let members = step.flat_members();
    if members.iter().any(|m| status(&m.member_id) == StepStatus::Failed) || awaiting_decision(state, step) {
        return Vec::new();
    }
    let mut out: Vec<PlanStep> = members
        .iter()
        .filter(|m| status(&m.member_id) == StepStatus::Pending && m.depends_on.iter().all(|d| status(d).is_done()))
        .map(|m| member_step(step, m))
        .collect();
    if out.is_empty()
        && synthesises(step)
        && members.iter().all(|m| status(&m.member_id).is_done())
        && status(&step.synthesis_id()) == StepStatus::Pending
    {
        out.push(synthesis_step(state, step));
    }
    out
}

/// Files changed by two or more members, in first-seen order.
fn overlaps(state: &ExecutionState, step: &PlanStep) -> Vec<TeamConflict> {
    let mut by_file: BTreeMap<&str, (usize, Vec<String>)> = BTreeMap::new();
    let mut order = 0;
    for m in step.flat_members() {
        let Some(r) = state.result(&m.member_id) else { continue };
        for f in &r.files_changed {
            let entry = by_file.entry(f.as_str()).or_insert_with(|| {
                order += 1;
                (order, Vec::new())
            });
            if !entry.1.contains(&m.member_id) {
                entry.1.push(m.member_id.clone());
            }
        }
    }
    let mut found: Vec<(usize, TeamConflict)> = by_file
        .into_iter()
        .filter(|(_, (_, ms))| ms.len() >= 2)
        .map(|(f, (o, members))| (o, TeamConflict { file: f.to_string(), members }))
        .collect();
    found.sort_by_key(|(o, _)| *o);
    found.into_iter().map(|(_, c)| c).collect()
}

fn describe(conflicts: &[TeamConflict]) -> String {
    conflicts
        .iter()
        .map(|c| format!("{} (changed by {})", c.file, c.members.join(" and ")))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The human decision on an escalated conflict of `step`, if one was recorded.
fn decision(state: &ExecutionState, step_id: &str) -> Option<ApprovalDecision> {
    state.approval_results.iter().rev().find(|a| a.team_step == step_id).map(|a| a.result)
}

/// An `escalate` team step whose members are done, that has a conflict and no decision yet.
fn awaiting_decision(state: &ExecutionState, step: &PlanStep) -> bool {
    handling(step) == "escalate"
        && decision(state, &step.step_id).is_none()
        && state.result(&step.step_id).is_some_and(|r| !r.team_conflicts.is_empty())
        && step.flat_members().iter().all(|m| state.step_status(&m.member_id).is_done())
}

/// Checks an event about a member, a synthesis or a team step; None for any other event.
pub(crate) fn check(state: &ExecutionState, kind: &EventKind) -> Option<Result<(), EngineError>> {
    let step_id = event_step(kind)?;
    if state.team_parent(step_id).is_some() {
        return Some(check_member(state, kind, step_id));
    }
    let (pi, si) = state.locate(step_id)?;
    let step = &state.plan.phases[pi].steps[si];
    if step.team.is_empty() {
        return None;
    }
    match kind {
        EventKind::StepDispatched { .. }
        | EventKind::StepRecorded { .. }
        | EventKind::StepRequeued { .. }
        | EventKind::QuotaWait { .. } => Some(Err(EngineError::StepState {
            step_id: step_id.to_string(),
            status: state.step_status(step_id).as_str().into(),
            reason: format!(
                "it is a team step: its members ({}) are dispatched and recorded by their own ids",
                unit_ids(step).join(", ")
            ),
        })),
        _ => None,
    }
}

fn event_step(kind: &EventKind) -> Option<&str> {
    match kind {
        EventKind::StepDispatched { step_id, .. }
        | EventKind::StepRecorded { step_id, .. }
        | EventKind::StepRetried { step_id }
        | EventKind::StepRequeued { step_id }
        | EventKind::StepSkipped { step_id, .. }
        | EventKind::InteractInput { step_id, .. }
        | EventKind::InteractCompleted { step_id }
        | EventKind::QuotaWait { step_id, .. }
        | EventKind::QuotaResumed { step_id } => Some(step_id),
        _ => None,
    }
}

fn check_member(state: &ExecutionState, kind: &EventKind, id: &str) -> Result<(), EngineError> {
    let parent_id = state.team_parent(id).unwrap_or_default().to_string();
    let parent = current_step(state, &parent_id)?;
    let status = state.status;
    let st = state.step_status(id);
    let state_error =
        |reason: String| EngineError::StepState { step_id: id.to_string(), status: st.as_str().into(), reason };
    let is_ready = || ready(state, parent).iter().any(|s| s.step_id == id);
    let not_ready = |what: &str| {
        let waiting: Vec<String> = parent
            .depends_on
            .iter()
            .chain(parent.flat_members().iter().filter(|m| m.member_id == id).flat_map(|m| m.depends_on.iter()))
            .filter(|d| !state.step_status(d).is_done())
            .cloned()
            .collect();
        if st == StepStatus::Pending && !waiting.is_empty() {
            state_error(format!("{what}: it waits for {}", waiting.join(", ")))
        } else {
            state_error(what.to_string())
        }
    };
    match kind {
        EventKind::StepDispatched { .. } => {
            if status != ExecutionStatus::Running {
                return Err(EngineError::WrongStatus { event: "step_dispatched", status });
            }
            if !is_ready() {
                return Err(not_ready("it cannot be dispatched now"));
            }
            if state.checkpoint.due {
                return Err(checkpoint_due(id));
            }
            crate::engine::budget::check_dispatch(state, id)
        }
        EventKind::StepRecorded { status: rec, .. } => {
            check_record_values(state, kind)?;
            if status != ExecutionStatus::Running {
                return Err(EngineError::WrongStatus { event: "step_recorded", status });
            }
            if st != StepStatus::Dispatched && !is_ready() {
                return Err(not_ready("it has no attempt to record"));
            }
            if *rec == RecordStatus::BudgetStopped {
                crate::engine::budget::check_stopped(state, id)?;
            }
            if st != StepStatus::Dispatched && state.checkpoint.due {
                return Err(checkpoint_due(id));
            }
            if *rec == RecordStatus::Interacting {
                return Err(state_error("team members are not interactive".into()));
            }
            Ok(())
        }
        EventKind::StepRetried { .. } if st != StepStatus::Failed => {
            Err(state_error("only a failed step can be retried".into()))
        }
        EventKind::StepRequeued { .. } if status != ExecutionStatus::Running => {
            Err(EngineError::WrongStatus { event: "step_requeued", status })
        }
        EventKind::StepRequeued { .. } if st != StepStatus::Dispatched => {
            Err(state_error("only a dispatched step can be requeued".into()))
        }
        EventKind::StepSkipped { .. } if !matches!(st, StepStatus::Pending | StepStatus::Failed) => {
            Err(state_error("only a pending or failed step can be skipped".into()))
        }
        EventKind::InteractInput { .. } | EventKind::InteractCompleted { .. } => {
            Err(state_error("it is not waiting for a human reply".into()))
        }
        EventKind::QuotaWait { .. } => {
            if status != ExecutionStatus::Running {
                return Err(EngineError::WrongStatus { event: "quota_wait", status });
            }
            check_quota_values(kind)?;
            if st != StepStatus::Dispatched && !is_ready() {
                return Err(not_ready("only a dispatched or ready member can wait for quota"));
            }
            Ok(())
        }
        EventKind::QuotaResumed { .. } if !state.quota_waits.iter().any(|w| w.step_id == id) => {
            Err(state_error("it does not wait for quota".into()))
        }
        _ => Ok(()),
    }
}

/// After an event was applied: a member's or synthesis' event re-derives its team step (the
/// generic bookkeeping counted the member as a step: `steps_done_before` undoes that); a retry
/// of a failed team step makes its failed members (and synthesis) pending again.
pub(crate) fn after(state: &mut ExecutionState, kind: &EventKind, steps_done_before: u64, now: &str) {
    let Some(step_id) = event_step(kind) else { return };
    if let Some(parent) = state.team_parent(step_id).map(str::to_string) {
        state.counters.steps_done = steps_done_before;
        refresh(state, &parent, now);
        return;
    }
    if !matches!(kind, EventKind::StepRetried { .. }) {
        return;
    }
    let Some((pi, si)) = state.locate(step_id) else { return };
    let step = &state.plan.phases[pi].steps[si];
    if step.team.is_empty() {
        return;
    }
    for id in unit_ids(step) {
        if let Some(r) = state.step_results.get_mut(&id).filter(|r| r.status == StepStatus::Failed) {
            r.status = StepStatus::Pending;
            r.error.clear();
        }
    }
    let step_id = step_id.to_string();
    refresh(state, &step_id, now);
}

/// A failed gate re-dispatches a team step through one of its dispatches: the synthesis of an
/// `agent_synthesis` step, else its last member, which gets the gate output in its prompt.
pub(crate) fn gate_redispatch(state: &mut ExecutionState, step_id: &str, now: &str) {
    let Some((pi, si)) = state.locate(step_id) else { return };
    let step = &state.plan.phases[pi].steps[si];
    let Some(unit) = unit_ids(step).pop() else { return };
    let feedback = state.step_results.get_mut(step_id).and_then(|r| r.gate_feedback.take());
    if let Some(r) = state.step_results.get_mut(&unit) {
        r.status = StepStatus::Pending;
        r.gate_feedback = feedback;
    }
    let step_id = step_id.to_string();
    refresh(state, &step_id, now);
}

/// Re-derives the result of team step `step_id` from its members (see the module doc).
pub(crate) fn refresh(state: &mut ExecutionState, step_id: &str, now: &str) {
    let Some((pi, si)) = state.locate(step_id) else { return };
    let step = state.plan.phases[pi].steps[si].clone();
    if step.team.is_empty() || state.step_status(step_id) == StepStatus::Skipped {
        return;
    }
    let members = step.flat_members();
    let member_ids: Vec<&str> = members.iter().map(|m| m.member_id.as_str()).collect();
    let synth = synthesises(&step).then(|| step.synthesis_id());
    let units: Vec<&str> = member_ids.iter().copied().chain(synth.as_deref()).collect();
    let status_of = |id: &str| state.step_status(id);
    let in_flight = units.iter().any(|id| status_of(id) == StepStatus::Dispatched);
    let failed: Vec<String> = units
        .iter()
        .filter_map(|id| state.result(id).filter(|r| r.status == StepStatus::Failed))
        .map(|r| if r.error.is_empty() { r.step_id.clone() } else { format!("{} ({})", r.step_id, r.error) })
        .collect();
    let members_done = member_ids.iter().all(|id| status_of(id).is_done());
    let started = units.iter().any(|id| state.result(id).is_some_and(|r| r.attempt > 0 || r.status.is_done()));
    let conflicts = if members_done { overlaps(state, &step) } else { Vec::new() };
    let decided = decision(state, step_id);
    let (status, error) = if in_flight {
        (StepStatus::Dispatched, String::new())
    } else if !failed.is_empty() {
        (StepStatus::Failed, format!("team member(s) failed: {}", failed.join("; ")))
    } else if members_done {
        match (handling(&step), conflicts.is_empty(), decided) {
            ("fail", false, _) => {
                (StepStatus::Failed, format!("conflict: {} (conflict_handling is fail)", describe(&conflicts)))
            }
            ("escalate", false, None) => (StepStatus::Dispatched, String::new()),
            ("escalate", false, Some(ApprovalDecision::Reject)) => {
                (StepStatus::Failed, format!("conflict rejected by the reviewer: {}", describe(&conflicts)))
            }
            _ => match &synth {
                Some(id) if !status_of(id).is_done() => (StepStatus::Dispatched, String::new()),
                _ => (StepStatus::Complete, String::new()),
            },
        }
    } else if started {
        (StepStatus::Dispatched, String::new())
    } else {
        (StepStatus::Pending, String::new())
    };

    let results: Vec<&StepResult> = member_ids.iter().filter_map(|id| state.result(id)).collect();
    let synth_result = synth.as_deref().and_then(|id| state.result(id)).filter(|r| r.status.is_done());
    let strategy = step.synthesis_strategy();
    let joined: Vec<&str> = results.iter().map(|r| r.outcome.trim()).filter(|o| !o.is_empty()).collect();
    let outcome = match synth_result {
        Some(s) if strategy == "agent_synthesis" => s.outcome.clone(),
        _ => joined.join("; "),
    };
    let mut files: Vec<String> =
        results.iter().chain(synth_result.iter()).flat_map(|r| r.files_changed.clone()).collect();
    if strategy != "concatenate" {
        let mut seen = HashSet::new();
        files.retain(|f| seen.insert(f.clone()));
    }
    let latest_member = results
        .iter()
        .enumerate()
        .filter(|(_, r)| !r.commit_hash.is_empty())
        .max_by(|(i, a), (j, b)| (a.completed_at.as_str(), i).cmp(&(b.completed_at.as_str(), j)))
        .map(|(_, r)| r.commit_hash.clone());
    let commit = synth_result.filter(|s| !s.commit_hash.is_empty()).map(|s| s.commit_hash.clone()).or(latest_member);
    let all: Vec<&StepResult> = results.iter().copied().chain(synth_result).collect();
    let prefixed = |pick: fn(&StepResult) -> &Vec<String>| -> Vec<String> {
        all.iter().flat_map(|r| pick(r).iter().map(move |x| format!("{}: {x}", r.step_id))).collect()
    };
    let mut deviations = prefixed(|r| &r.deviations);
    if !conflicts.is_empty() && status == StepStatus::Complete {
        deviations.push(format!("files changed by more than one member, merged by git: {}", describe(&conflicts)));
    }
    let knowledge_gaps = prefixed(|r| &r.knowledge_gaps);
    let scope_expansions: Vec<String> = all.iter().flat_map(|r| r.scope_expansions.clone()).collect();
    let mut gate_additions: Vec<String> = Vec::new();
    for a in all.iter().flat_map(|r| &r.gate_additions) {
        if !gate_additions.contains(a) {
            gate_additions.push(a.clone());
        }
    }
    let rejected = all.iter().flat_map(|r| r.rejected_gate_additions.clone()).collect();
    let units_all: Vec<&StepResult> = units.iter().filter_map(|id| state.result(id)).collect();
    let attempt: u32 = units_all.iter().map(|r| r.attempt).sum();
    let tokens: u64 = units_all.iter().map(|r| r.estimated_tokens).sum();
    let cost: f64 = units_all.iter().map(|r| r.cost_usd).sum();
    let token_kinds = units_all.iter().fold(TokenCounts::default(), |sum, r| sum.plus(&r.token_kinds));
    let cost_estimated = units_all.iter().any(|r| r.cost_estimated);
    let duration: f64 = units_all.iter().map(|r| r.duration_seconds).sum();
    let dispatched_at =
        units_all.iter().map(|r| r.dispatched_at.as_str()).filter(|d| !d.is_empty()).min().unwrap_or("").to_string();

    let was_done = state.step_status(step_id).is_done();
    let r = result_entry(state, step_id, TEAM_AGENT);
    r.agent_name = TEAM_AGENT.to_string();
    r.status = status;
    r.attempt = attempt;
    r.outcome = outcome;
    r.files_changed = files;
    r.commit_hash = commit.unwrap_or_default();
    r.estimated_tokens = tokens;
    r.cost_usd = cost;
    r.token_kinds = token_kinds;
    r.cost_estimated = cost_estimated;
    r.duration_seconds = duration;
    r.error = error;
    r.dispatched_at = dispatched_at;
    if status.is_done() || status == StepStatus::Failed {
        if r.completed_at.is_empty() || !was_done {
            r.completed_at = now.to_string();
        }
        r.gate_feedback = None;
    }
    r.gate_additions = gate_additions;
    r.rejected_gate_additions = rejected;
    r.knowledge_gaps = knowledge_gaps;
    r.deviations = deviations;
    r.scope_expansions = scope_expansions;
    r.team_conflicts = conflicts;
    let is_done = status.is_done();
    if is_done && !was_done {
        state.counters.steps_done += 1;
    } else if was_done && !is_done {
        state.counters.steps_done = state.counters.steps_done.saturating_sub(1);
    }
}

/// At the end of a settle round: an `escalate` team step of the current phase whose members
/// are done with a conflict and no decision asks for an approval once nothing of the phase is
/// in flight. True when the phase waits for such a decision (settling stops there).
pub(crate) fn escalate(state: &mut ExecutionState, now: &str) -> bool {
    let Some(phase) = state.current() else { return false };
    let Some(step_id) = phase.steps.iter().find(|s| awaiting_decision(state, s)).map(|s| s.step_id.clone()) else {
        return false;
    };
    let busy = dispatch_ids(phase).iter().any(|id| state.step_status(id) == StepStatus::Dispatched);
    if !busy {
        let phase_id = phase.phase_id;
        state.status = ExecutionStatus::ApprovalPending;
        state.pending_approval_request = Some(PendingApprovalRequest {
            phase_id,
            requested_at: now.to_string(),
            preflight: false,
            team_step: step_id,
            gate: false,
        });
    }
    true
}

/// The APPROVAL for an escalated team conflict, or None when the pending approval is another.
pub(crate) fn approval_action(state: &ExecutionState) -> Option<ApprovalAction> {
    let request = state.pending_approval_request.as_ref().filter(|r| !r.team_step.is_empty())?;
    let step_id = request.team_step.as_str();
    let (pi, si) = state.locate(step_id)?;
    let step = &state.plan.phases[pi].steps[si];
    let conflicts = state.result(step_id).map(|r| r.team_conflicts.clone()).unwrap_or_default();
    let mut context = format!(
        "## Conflict in team step {step_id}\n\nTwo or more members changed the same files. Git merged their \
         changes on the feature branch; decide whether the merged result stands.\n"
    );
    for c in &conflicts {
        context.push_str(&format!("\n### {}\n", c.file));
        for id in &c.members {
            let Some(r) = state.result(id) else { continue };
            let short = r.commit_hash.get(..12).unwrap_or(&r.commit_hash);
            context.push_str(&format!("\n#### {id} ({}, commit {short})\n{}\n", r.agent_name, r.outcome.trim()));
            if !r.commit_hash.is_empty() {
                context.push_str(&format!("Its change: `git show {short} -- {}`\n", c.file));
            }
        }
    }
    context.push_str(&format!(
        "\nApprove to keep the merged result; reject to fail step {step_id}; approve with feedback to add a \
         step that resolves the conflict as you describe."
    ));
    Some(ApprovalAction {
        message: format!(
            "Decide the file conflict of team step {step_id} ({}): {}.",
            first_line(&step.task_description),
            conflicts.iter().map(|c| c.file.as_str()).collect::<Vec<_>>().join(", ")
        ),
        phase_id: request.phase_id,
        approval_context: context,
        approval_options: vec!["approve".into(), "reject".into(), "approve-with-feedback".into()],
        preflight: false,
    })
}

/// Applies a decision on an escalated team conflict; false (nothing done) for any other event.
/// Approve keeps the merged result; reject fails the team step; approve-with-feedback also
/// appends a resolution step (on the first member's agent, after the team step) to the phase.
pub(crate) fn decide(state: &mut ExecutionState, event: &Event, now: &str) -> bool {
    let EventKind::ApprovalRecorded { phase_id, result, feedback } = &event.kind else { return false };
    let Some(step_id) =
        state.pending_approval_request.as_ref().filter(|r| !r.team_step.is_empty()).map(|r| r.team_step.clone())
    else {
        return false;
    };
    state.pending_approval_request = None;
    push_approval_result(state, event, now, false, step_id.clone());
    state.status = ExecutionStatus::Running;
    if *result == ApprovalDecision::ApproveWithFeedback {
        if let Some((pi, si)) = state.locate(&step_id) {
            let step = &state.plan.phases[pi].steps[si];
            let agent = step.flat_members().first().map_or(TEAM_AGENT.to_string(), |m| m.agent_name.clone());
            let files: Vec<String> = state
                .result(&step_id)
                .map(|r| r.team_conflicts.iter().map(|c| c.file.clone()).collect())
                .unwrap_or_default();
            let mut resolution = PlanStep::new(
                "",
                agent,
                format!("Resolve the conflict of team step {step_id} in {}: {}", files.join(", "), feedback.trim()),
            );
            resolution.depends_on = vec![step_id.clone()];
            resolution.allowed_paths = step.allowed_paths.clone();
            resolution.blocked_paths = step.blocked_paths.clone();
            let id = crate::engine::amend::append_step(state, pi, resolution);
            let description = format!("Conflict resolution for team step {step_id}");
            crate::engine::amend::record(
                state,
                "team_conflict",
                *phase_id,
                &description,
                Vec::new(),
                vec![id],
                feedback,
                now,
            );
        }
    }
    refresh(state, &step_id, now);
    true
}
