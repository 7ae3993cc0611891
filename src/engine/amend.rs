//! Amendments: inserting phases and steps into a live plan, with an audit record.
//!
//! Phases are inserted after the current phase (or after a later phase the caller names), never
//! before it: work that has started keeps its ids. Inserted phases and every phase after them
//! are renumbered (`previous id + 1`), steps named `"<old phase>.<n>"` follow their phase, and
//! every reference is remapped at once (depends_on, results, pending approval, gate, approval
//! and feedback records, earlier amendments) — the original lost several (seed-spec §5 #12, #13).
//! This module never does IO.

use std::collections::{HashMap, HashSet};

use crate::engine::validate::{unsafe_id_reason, validate};
use crate::engine::EngineError;
use crate::model::event::AddedStep;
use crate::model::plan::{PlanAmendment, PlanPhase, PlanStep, TeamMember};
use crate::model::state::{ExecutionState, ExecutionStatus, FeedbackResult};

const DEFAULT_AGENT: &str = "backend-engineer";

/// Index at which new phases go: after `after_phase`, or after the current phase.
///
/// New phases may go before the current phase only while no work started there (seed-spec
/// §2.11): no step (or team member) of it, nor of any phase between, was ever dispatched, no
/// gate ran and no decision was taken there. The first new phase then becomes current.
/// Errors: an unknown `after_phase`; a phase in the way where work started, naming it and the
/// step (or gate, or decision).
fn insertion_index(state: &ExecutionState, after_phase: Option<i64>) -> Result<usize, EngineError> {
    let len = state.plan.phases.len();
    let index = match after_phase {
        Some(id) => state.plan.phase_index(id).map(|i| i + 1).ok_or(EngineError::UnknownPhase { phase_id: id })?,
        None => (state.current_phase + 1).min(len),
    };
    let all_done = state.current_phase >= len;
    if index > state.current_phase || (all_done && index == len) {
        return Ok(index);
    }
    let refuse = |why: String| Err(EngineError::InvalidAmendment(format!("cannot insert phases before phase {why}")));
    for phase in &state.plan.phases[index..=state.current_phase.min(len - 1)] {
        let ids: Vec<&str> = phase.steps.iter().map(|s| s.step_id.as_str()).collect();
        let member_of =
            |key: &str| ids.iter().any(|id| key == *id || key.strip_prefix(id).is_some_and(|r| r.starts_with('.')));
        let mut started: Vec<&String> = state
            .step_results
            .iter()
            .filter(|(key, r)| {
                member_of(key) && (r.attempt > 0 || r.status != crate::model::state::StepStatus::Pending)
            })
            .map(|(key, _)| key)
            .collect();
        started.sort();
        if let Some(step) = started.first() {
            return refuse(format!("{}: step {step} was dispatched there", phase.phase_id));
        }
        if state.gate_runs(phase.phase_id) > 0 {
            return refuse(format!("{}: its gate ran", phase.phase_id));
        }
        if state.approval_results.iter().any(|a| a.phase_id == phase.phase_id)
            || state.pending_approval_request.as_ref().is_some_and(|r| r.phase_id == phase.phase_id)
        {
            return refuse(format!("{}: it has an approval (asked or decided)", phase.phase_id));
        }
        if state.feedback_results.iter().any(|f| f.phase_id == phase.phase_id) {
            return refuse(format!("{}: its feedback was answered", phase.phase_id));
        }
    }
    Ok(index)
}

/// Validates an amendment without changing anything.
pub(crate) fn check(
    state: &ExecutionState,
    phases: &[PlanPhase],
    after_phase: Option<i64>,
    steps: &[AddedStep],
) -> Result<(), EngineError> {
    let bad = |m: String| Err(EngineError::InvalidAmendment(m));
    if phases.is_empty() && steps.is_empty() {
        return bad("it adds no phase and no step".into());
    }
    let index = if phases.is_empty() { state.current_phase } else { insertion_index(state, after_phase)? };
    let mut known: HashSet<&str> = state.plan.steps().map(|(_, s)| s.step_id.as_str()).collect();
    // Steps that may be depended on by new phases: those in phases before the insertion point.
    let before: HashSet<&str> =
        state.plan.phases.iter().take(index).flat_map(|p| p.steps.iter().map(|s| s.step_id.as_str())).collect();
    let mut earlier = before.clone();
    for phase in phases {
        if phase.name.trim().is_empty() {
            return bad("a new phase has an empty name".into());
        }
        for step in &phase.steps {
            check_new_step(step, &mut known, &earlier)?;
            if !step.step_id.is_empty() {
                earlier.insert(step.step_id.as_str());
            }
        }
    }
    for added in steps {
        let Some(pi) = state.plan.phase_index(added.phase_id) else {
            return Err(EngineError::UnknownPhase { phase_id: added.phase_id });
        };
        if pi < state.current_phase {
            return bad(format!("phase {} is already done", added.phase_id));
        }
        if pi == state.current_phase && !matches!(state.status, ExecutionStatus::Running | ExecutionStatus::Failed) {
            return bad(format!(
                "phase {} is {}; add the step to a later phase",
                added.phase_id,
                state.status.as_str()
            ));
        }
        let reachable: HashSet<&str> =
            state.plan.phases.iter().take(pi + 1).flat_map(|p| p.steps.iter().map(|s| s.step_id.as_str())).collect();
        check_new_step(&added.step, &mut known, &reachable)?;
    }
    // Renumbering renames later steps: the amended plan as a whole must still be valid (unique
    // ids, answerable questions, …).
    // Only the plan's shape is checked, so the trial copies the plan, not the execution's
    // records (results, journal keys), which may be large.
    let mut trial = ExecutionState::fresh(state.plan.clone(), "");
    trial.current_phase = state.current_phase;
    trial.status = state.status;
    apply(&mut trial, "", "", phases, after_phase, steps, "");
    validate(&trial.plan).or_else(|problems| bad(problems.iter().map(|p| p.to_string()).collect::<Vec<_>>().join("; ")))
}

fn check_new_step<'a>(
    step: &'a PlanStep,
    known: &mut HashSet<&'a str>,
    earlier: &HashSet<&str>,
) -> Result<(), EngineError> {
    let bad = |m: String| Err(EngineError::InvalidAmendment(m));
    let name = if step.step_id.is_empty() { "new step".to_string() } else { format!("step {}", step.step_id) };
    if step.agent_name.trim().is_empty() {
        return bad(format!("{name}: agent_name is empty"));
    }
    if step.task_description.trim().is_empty() {
        return bad(format!("{name}: task_description is empty"));
    }
    if !step.team.is_empty() {
        return bad(format!("{name}: an amendment cannot add a team step (add its members as steps)"));
    }
    if !step.step_id.is_empty() {
        if let Some(why) = unsafe_id_reason(&step.step_id) {
            return bad(format!("{name}: step_id {why}"));
        }
        if !known.insert(step.step_id.as_str()) {
            return bad(format!("{name}: step_id is already used"));
        }
    }
    for dep in &step.depends_on {
        if !earlier.contains(dep.as_str()) {
            return bad(format!("{name}: depends_on names {dep}, which is not an earlier step"));
        }
    }
    Ok(())
}

/// Applies a checked amendment and records it.
pub(crate) fn apply(
    state: &mut ExecutionState,
    description: &str,
    trigger: &str,
    phases: &[PlanPhase],
    after_phase: Option<i64>,
    steps: &[AddedStep],
    now: &str,
) {
    let mut steps_added = Vec::new();
    for added in steps {
        if let Some(pi) = state.plan.phase_index(added.phase_id) {
            let id = append_step(state, pi, added.step.clone());
            steps_added.push(id);
        }
    }
    let mut phases_added = Vec::new();
    if !phases.is_empty() {
        let index = insertion_index(state, after_phase).unwrap_or(state.plan.phases.len());
        let (ids, new_steps) = insert_phases(state, index, phases.to_vec());
        phases_added = ids;
        steps_added.extend(new_steps);
    }
    let trigger_phase_id = state.current().map_or(0, |p| p.phase_id);
    record(state, trigger, trigger_phase_id, description, phases_added, steps_added, "", now);
}

pub(crate) fn append_step(state: &mut ExecutionState, pi: usize, mut step: PlanStep) -> String {
    let phase_id = state.plan.phases[pi].phase_id;
    if step.step_id.is_empty() {
        step.step_id = fresh_step_id(state, phase_id, state.plan.phases[pi].steps.len() + 1);
    }
    let id = step.step_id.clone();
    state.plan.phases[pi].steps.push(Box::new(step));
    let si = state.plan.phases[pi].steps.len() - 1;
    state.index.0.insert(&state.plan, pi, si);
    id
}

fn fresh_step_id(state: &ExecutionState, phase_id: i64, mut n: usize) -> String {
    loop {
        let id = format!("{phase_id}.{n}");
        if state.locate(&id).is_none() {
            return id;
        }
        n += 1;
    }
}

#[expect(clippy::too_many_arguments, reason = "one audit record, field by field")]
pub(crate) fn record(
    state: &mut ExecutionState,
    trigger: &str,
    trigger_phase_id: i64,
    description: &str,
    phases_added: Vec<i64>,
    steps_added: Vec<String>,
    feedback: &str,
    now: &str,
) {
    let n = state.amendments.len() + 1;
    state.amendments.push(PlanAmendment {
        amendment_id: format!("amend-{n}"),
        trigger: trigger.to_string(),
        trigger_phase_id,
        description: description.to_string(),
        phases_added,
        steps_added,
        created_at: now.to_string(),
        feedback: feedback.to_string(),
        metadata: Default::default(),
        extra: Default::default(),
    });
}

/// Inserts `phases` at `index`, renumbers from there and remaps every reference.
/// Returns the new phases' ids and their step ids.
fn insert_phases(state: &mut ExecutionState, index: usize, phases: Vec<PlanPhase>) -> (Vec<i64>, Vec<String>) {
    let count = phases.len();
    let old_ids: Vec<Option<i64>> = state
        .plan
        .phases
        .iter()
        .map(|p| Some(p.phase_id))
        .take(index)
        .chain(std::iter::repeat_n(None, count))
        .chain(state.plan.phases.iter().skip(index).map(|p| Some(p.phase_id)))
        .collect();
    for (offset, phase) in phases.into_iter().enumerate() {
        state.plan.phases.insert(index + offset, phase);
    }
    let mut phase_map: HashMap<i64, i64> = HashMap::new();
    let mut step_map: HashMap<String, String> = HashMap::new();
    let mut new_phase_ids = Vec::new();
    let mut new_step_ids = Vec::new();
    #[expect(clippy::needless_range_loop, reason = "reads the previous phase's new id while renumbering")]
    for i in index..state.plan.phases.len() {
        let new_id = if i == 0 { 1 } else { state.plan.phases[i - 1].phase_id + 1 };
        let phase = &mut state.plan.phases[i];
        match old_ids[i] {
            None => {
                phase.phase_id = new_id;
                new_phase_ids.push(new_id);
                for (pos, step) in phase.steps.iter_mut().enumerate() {
                    if step.step_id.is_empty() {
                        step.step_id = format!("{new_id}.{}", pos + 1);
                    }
                    new_step_ids.push(step.step_id.clone());
                }
            }
            Some(old) => {
                if old != new_id {
                    phase_map.insert(old, new_id);
                    let prefix = format!("{old}.");
                    for step in &mut phase.steps {
                        if let Some(rest) = step.step_id.strip_prefix(&prefix) {
                            let renamed = format!("{new_id}.{rest}");
                            step_map.insert(step.step_id.clone(), renamed.clone());
                            step.step_id = renamed;
                        }
                        renumber(step, &prefix, &format!("{new_id}."), &mut step_map);
                    }
                }
                phase.phase_id = new_id;
            }
        }
    }
    remap(state, &phase_map, &step_map);
    state.reindex();
    (new_phase_ids, new_step_ids)
}

fn remap(state: &mut ExecutionState, phases: &HashMap<i64, i64>, steps: &HashMap<String, String>) {
    if phases.is_empty() && steps.is_empty() {
        return;
    }
    let p = |id: &mut i64| {
        if let Some(n) = phases.get(id) {
            *id = *n;
        }
    };
    let s = |id: &mut String| {
        if let Some(n) = steps.get(id.as_str()) {
            *id = n.clone();
        }
    };
    for phase in &mut state.plan.phases {
        for step in &mut phase.steps {
            step.depends_on.iter_mut().for_each(s);
        }
    }
    if !steps.is_empty() {
        let results = std::mem::take(&mut state.step_results);
        state.step_results = results
            .into_iter()
            .map(|(mut k, mut r)| {
                s(&mut k);
                s(&mut r.step_id);
                (k, r)
            })
            .collect();
    }
    state.gate_results.iter_mut().for_each(|g| p(&mut g.phase_id));
    state.approval_results.iter_mut().for_each(|a| p(&mut a.phase_id));
    for f in &mut state.feedback_results {
        p(&mut f.phase_id);
        s(&mut f.dispatched_step_id);
    }
    if let Some(r) = &mut state.pending_approval_request {
        p(&mut r.phase_id);
    }
    state.gate_redispatched = state.gate_redispatched.iter().map(|id| *phases.get(id).unwrap_or(id)).collect();
    state.gate_failures_forgiven =
        state.gate_failures_forgiven.iter().map(|(id, n)| (*phases.get(id).unwrap_or(id), *n)).collect();
    for a in &mut state.amendments {
        p(&mut a.trigger_phase_id);
        a.phases_added.iter_mut().for_each(p);
        a.steps_added.iter_mut().for_each(s);
    }
}

/// Scope-expansion phases in one execution, at most.
pub(crate) const MAX_SCOPE_EXPANSIONS: usize = 3;

/// At the end of phase `phase_id` (its gate passed, its approval given): each
/// `SCOPE_EXPANSION:` its steps reported becomes a phase appended to the plan, one step on the
/// reporting step's agent, while the execution has had fewer than [`MAX_SCOPE_EXPANSIONS`];
/// recorded as amendments (trigger `scope_expansion`). Expansions over the bound stay on their
/// step results only.
pub(crate) fn append_scope_expansions(state: &mut ExecutionState, phase_id: i64, now: &str) {
    let Some(pi) = state.plan.phase_index(phase_id) else { return };
    let wanted: Vec<(String, String, String)> = state.plan.phases[pi]
        .steps
        .iter()
        .filter_map(|s| state.result(&s.step_id))
        .flat_map(|r| r.scope_expansions.iter().map(|x| (r.step_id.clone(), r.agent_name.clone(), x.clone())))
        .collect();
    for (step_id, agent, work) in wanted {
        let earlier: Vec<&PlanAmendment> = state.amendments.iter().filter(|a| a.trigger == "scope_expansion").collect();
        if earlier.len() >= MAX_SCOPE_EXPANSIONS {
            return;
        }
        // The same work reported twice (by two steps, or again later) is one phase.
        let suffix = format!(": {work}");
        if earlier.iter().any(|a| a.description.to_lowercase().ends_with(&suffix.to_lowercase())) {
            continue;
        }
        let agent = if agent.is_empty() { DEFAULT_AGENT.to_string() } else { agent };
        let mut phase = PlanPhase::new(0, "Scope expansion");
        phase.steps.push(Box::new(PlanStep::new(
            "",
            &agent,
            format!("Scope expansion reported by step {step_id}: {work}"),
        )));
        // Work an agent added is reviewed by a human before the execution goes on.
        phase.approval_required = true;
        phase.approval_description =
            format!("Step {step_id} asked for more work than the plan had ({work}); review what this phase did.");
        let index = state.plan.phases.len();
        let (ids, steps) = insert_phases(state, index, vec![phase]);
        let description = format!("Scope expansion from step {step_id}: {work}");
        record(state, "scope_expansion", phase_id, &description, ids, steps, "", now);
    }
}

/// approve-with-feedback: a "Remediation" phase right after the approved phase.
pub(crate) fn insert_remediation(state: &mut ExecutionState, phase_id: i64, feedback: &str, now: &str) {
    let pi = state.plan.phase_index(phase_id).unwrap_or(state.current_phase);
    let agent =
        state.plan.phases.get(pi).and_then(|p| p.steps.first()).map_or(DEFAULT_AGENT, |s| s.agent_name.as_str());
    let mut phase = PlanPhase::new(0, "Remediation");
    phase.steps.push(Box::new(PlanStep::new(
        "",
        agent,
        format!("Address feedback from phase {phase_id} review: {feedback}"),
    )));
    let (ids, steps) = insert_phases(state, pi + 1, vec![phase]);
    let description = format!("Remediation of phase {phase_id} after approve-with-feedback");
    record(state, "approval_feedback", phase_id, &description, ids, steps, feedback, now);
}

/// approve-with-feedback on the pre-flight approval: the feedback joins the shared context.
pub(crate) fn note_preflight_feedback(state: &mut ExecutionState, phase_id: i64, feedback: &str, now: &str) {
    if !feedback.trim().is_empty() {
        let context = &mut state.plan.shared_context;
        if !context.is_empty() {
            context.push_str("\n\n");
        }
        context.push_str(&format!("Reviewer feedback (pre-flight approval): {}", feedback.trim()));
    }
    let description = "Pre-flight approval feedback added to the shared context";
    record(state, "approval_feedback", phase_id, description, Vec::new(), Vec::new(), feedback, now);
}

/// A feedback answer: a "Feedback-Dispatch (<question>)" phase after the current phase (after
/// those of earlier answers), whose one step carries the chosen option.
pub(crate) fn insert_feedback_dispatch(
    state: &mut ExecutionState,
    phase_id: i64,
    question_id: &str,
    chosen_index: usize,
    actor: &str,
    now: &str,
) {
    let pi = state.current_phase;
    let Some(question) =
        state.plan.phases[pi].feedback_questions.iter().find(|q| q.question_id == question_id).cloned()
    else {
        return;
    };
    let option = question.options.get(chosen_index).cloned().unwrap_or_default();
    let agent =
        question.option_agents.get(chosen_index).filter(|a| !a.trim().is_empty()).map_or(DEFAULT_AGENT, String::as_str);
    let prompt = question.option_prompts.get(chosen_index).filter(|p| !p.trim().is_empty()).unwrap_or(&option);
    let task = prompt.replace("{task}", &state.plan.task_summary);
    let earlier = state.feedback_results.iter().filter(|f| f.phase_id == phase_id).count();
    let mut phase = PlanPhase::new(0, format!("Feedback-Dispatch ({question_id})"));
    phase.steps.push(Box::new(PlanStep::new("", agent.to_string(), task)));
    let (ids, steps) = insert_phases(state, pi + 1 + earlier, vec![phase]);
    state.feedback_results.push(FeedbackResult {
        phase_id,
        question_id: question_id.to_string(),
        chosen_option: option.clone(),
        chosen_index,
        dispatched_step_id: steps.first().cloned().unwrap_or_default(),
        decided_at: now.to_string(),
        actor: actor.to_string(),
    });
    let description = format!("Feedback {question_id}: {option}");
    record(state, "feedback", phase_id, &description, ids, steps, "", now);
}

/// Renumbering after an amendment: members whose id starts with `old` (`"3."`) follow their
/// step to `new` (`"4."`), with their intra-team `depends_on`; each renamed id goes in `map`.
fn renumber(step: &mut PlanStep, old: &str, new: &str, map: &mut HashMap<String, String>) {
    fn walk(members: &mut [TeamMember], old: &str, new: &str, map: &mut HashMap<String, String>) {
        for m in members {
            if let Some(rest) = m.member_id.strip_prefix(old) {
                let renamed = format!("{new}{rest}");
                map.insert(m.member_id.clone(), renamed.clone());
                m.member_id = renamed;
            }
            walk(&mut m.sub_team, old, new, map);
        }
    }
    fn deps(members: &mut [TeamMember], map: &HashMap<String, String>) {
        for m in members {
            for d in &mut m.depends_on {
                if let Some(n) = map.get(d.as_str()) {
                    *d = n.clone();
                }
            }
            deps(&mut m.sub_team, map);
        }
    }
    walk(&mut step.team, old, new, map);
    deps(&mut step.team, map);
}
