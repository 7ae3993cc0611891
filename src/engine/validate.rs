//! Plan validation: every problem at once, each naming its phase and step.
//!
//! Rules (seed-spec §1.3 plus what Baton adds because ids become git refs and paths): at least
//! one phase; unique phase ids and step ids; a non-empty `agent_name`; `depends_on` names a step
//! declared earlier (no forward references, no cycles); ids safe in a ref and a path; automation
//! steps have a command; feedback questions have options; `sub_team` only on a lead; team
//! members unique in the plan, with intra-team `depends_on` and no cycles, a known synthesis
//! strategy and conflict handling, safe deliverables, no interactive or automation team step.
//! This module never does IO and knows nothing of an execution's state.

use std::collections::{HashMap, HashSet};

use crate::model::plan::{MachinePlan, PlanStep, TeamMember};

/// One problem found in a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanProblem {
    /// Where: `plan`, `phase 1 (Design)`, `phase 1 (Design), step 1.2`, …
    pub location: String,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for PlanProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.location, self.message)
    }
}

/// Why an id is unsafe as a git ref component and a path component, or None when it is safe.
///
/// Safe ids are 1–128 characters of `A-Z a-z 0-9 . _ -`, do not start with `-` or `.`, contain
/// no `..`, and do not end with `.` or `.lock`.
pub fn unsafe_id_reason(id: &str) -> Option<String> {
    if id.is_empty() {
        return Some("is empty".into());
    }
    if id.len() > 128 {
        return Some(format!("is {} characters long (at most 128)", id.len()));
    }
    if let Some(c) = id.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))) {
        let shown = if c.is_control() || c.is_whitespace() { format!("{:?}", c) } else { format!("`{c}`") };
        return Some(format!("contains {shown} (allowed: ASCII letters and digits, `.`, `_`, `-`)"));
    }
    if id.starts_with('-') {
        return Some("starts with `-`".into());
    }
    if id.starts_with('.') {
        return Some("starts with `.`".into());
    }
    if id.contains("..") {
        return Some("contains `..`".into());
    }
    if id.ends_with('.') || id.ends_with(".lock") {
        return Some("ends with `.` or `.lock`".into());
    }
    None
}

/// Validates a plan new to Baton (an execution started, a plan uploaded or checked): every
/// rule of [`validate`], then rules that an earlier build did not apply, which a journal's plan
/// is not held to when it is replayed: no NUL character anywhere (no commit message, file or
/// command can carry one: a step whose description held one failed at consolidation on every
/// attempt, found by a tester), and a phase name and a gate type on one line (they are shown
/// in one-line fields of the CLI's text output), and a risk level, gate type and step type
/// among those the spec lists (an unknown one had been taken, and a misspelt risk level
/// skipped the pre-flight approval).
///
/// Errors: every problem found, [`validate`]'s first.
pub fn validate_new(plan: &MachinePlan) -> Result<(), Vec<PlanProblem>> {
    let mut problems = validate(plan).err().unwrap_or_default();
    if let Some(path) = serde_json::to_value(plan).ok().as_ref().and_then(crate::model::text::nul_path) {
        problems.push(PlanProblem { location: "plan".into(), message: format!("{path} {NUL_REFUSED}") });
    }
    if let Some(why) = unknown_value("risk_level", &plan.risk_level.to_ascii_uppercase(), RISK_LEVELS) {
        problems.push(PlanProblem { location: "plan".into(), message: why });
    }
    for phase in &plan.phases {
        let location = format!("phase {}", phase.phase_id);
        if !crate::model::text::is_one_line(&phase.name) {
            problems.push(PlanProblem { location: location.clone(), message: ONE_LINE_NAME.into() });
        }
        if phase.gate.as_ref().is_some_and(|g| !crate::model::text::is_one_line(&g.gate_type)) {
            problems.push(PlanProblem {
                location: format!("{location}, gate"),
                message: "gate_type must be one line without control characters".into(),
            });
        } else if let Some(why) = phase.gate.as_ref().and_then(|g| unknown_value("gate_type", &g.gate_type, GATE_TYPES))
        {
            problems.push(PlanProblem { location: format!("{location}, gate"), message: why });
        }
        let risk = phase.risk_level.to_ascii_uppercase();
        if let Some(why) = unknown_value("risk_level", &risk, RISK_LEVELS).filter(|_| !risk.is_empty()) {
            problems.push(PlanProblem { location: location.clone(), message: why });
        }
        for step in &phase.steps {
            if let Some(why) = unknown_value("step_type", &step.step_type, STEP_TYPES) {
                let location = format!("{location}, step {}", step.step_id.escape_debug());
                problems.push(PlanProblem { location, message: why });
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

/// A plan's risk levels (seed-spec §1.1), compared without case: HIGH and CRITICAL start with
/// a pre-flight approval, so a misspelt one (`CRITCAL`, `EXTREME`) had silently skipped it
/// (found by a tester).
const RISK_LEVELS: &[&str] = &["LOW", "MEDIUM", "HIGH", "CRITICAL"];

/// Gate types (seed-spec §1.1): `ci` and `review` are checked by the forge and a reviewer.
const GATE_TYPES: &[&str] = &["build", "test", "lint", "spec", "review", "ci"];

/// Step types (seed-spec §1.1): `automation` runs its command without an agent.
const STEP_TYPES: &[&str] = &["developing", "planning", "reviewing", "testing", "task", "consulting", "automation"];

/// Why `value` of `field` is refused: none of `known`, which the message lists.
fn unknown_value(field: &str, value: &str, known: &[&str]) -> Option<String> {
    (!known.contains(&value)).then(|| format!("{field} {value:?} is not one of {}", known.join(", ")))
}

/// Why a text holding a NUL is refused (after the path of the value that holds it).
pub const NUL_REFUSED: &str = "holds a NUL character, which no commit message, file or command can carry";

/// Why a phase name with a control character is refused.
pub const ONE_LINE_NAME: &str = "name must be one line without control characters";

/// Validates a whole plan. `Ok(())` or every problem found, in plan order.
pub fn validate(plan: &MachinePlan) -> Result<(), Vec<PlanProblem>> {
    let mut problems = Vec::new();
    let mut push = |location: String, message: String| problems.push(PlanProblem { location, message });

    if let Some(why) = unsafe_id_reason(&plan.task_id) {
        push("plan".into(), format!("task_id {:?} {why}", plan.task_id));
    }
    if plan.phases.is_empty() {
        push("plan".into(), "has no phases".into());
    }
    // The goal evaluator is dispatched like a step's agent (`engine::goal`).
    match plan.extra.get("goal_evaluator") {
        None => {}
        Some(serde_json::Value::String(name)) => {
            if let Some(why) = agent_name_problem(name) {
                push("plan".into(), format!("goal_evaluator: {why}"));
            }
        }
        Some(other) => push("plan".into(), format!("goal_evaluator must be an agent name, not {other}")),
    }

    let mut phase_ids = HashSet::new();
    // step id -> position in plan order
    let mut position: HashMap<&str, usize> = HashMap::new();
    let mut order = 0usize;
    for phase in &plan.phases {
        for step in &phase.steps {
            position.entry(step.step_id.as_str()).or_insert(order);
            order += 1;
        }
    }

    let mut seen_steps: HashSet<&str> = HashSet::new();
    let mut order = 0usize;
    for phase in &plan.phases {
        let ploc = format!("phase {} ({})", phase.phase_id, phase.name.escape_debug());
        if !phase_ids.insert(phase.phase_id) {
            push(ploc.clone(), format!("duplicate phase_id {}", phase.phase_id));
        }
        let mut qids = HashSet::new();
        for q in &phase.feedback_questions {
            let qloc = format!("{ploc}, question {}", q.question_id);
            if !qids.insert(q.question_id.as_str()) {
                push(qloc.clone(), "duplicate question_id".into());
            }
            if q.options.is_empty() {
                push(qloc, "has no options".into());
            }
        }
        if let Some(gate) = &phase.gate {
            if gate.gate_type.trim().is_empty() {
                push(format!("{ploc}, gate"), "gate_type is empty".into());
            }
        }
        for step in &phase.steps {
            let sloc = format!("{ploc}, step {}", step.step_id.escape_debug());
            check_step(step, &sloc, &mut push);
            if !seen_steps.insert(step.step_id.as_str()) {
                push(sloc.clone(), format!("duplicate step_id {}", step.step_id.escape_debug()));
            }
            for dep in &step.depends_on {
                match position.get(dep.as_str()) {
                    None => push(sloc.clone(), format!("depends_on names unknown step {}", dep.escape_debug())),
                    Some(&p) if p == order => push(sloc.clone(), "depends on itself".into()),
                    Some(&p) if p > order => push(
                        sloc.clone(),
                        format!("depends_on names step {}, which comes later in the plan", dep.escape_debug()),
                    ),
                    Some(_) => {}
                }
            }
            order += 1;
        }
    }
    for (location, message) in team_problems(plan) {
        push(location, message);
    }
    for cycle in find_cycles(plan) {
        push("plan".into(), format!("dependency cycle: {}", cycle.join(" -> ")));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

/// Why a repository path of a plan (deliverable, allowed/blocked path, context file) could
/// leave the repository, or None when it stays inside: absolute paths and `..` components.
pub fn unsafe_path_reason(path: &str) -> Option<&'static str> {
    if path.starts_with('/') || path.starts_with('\\') {
        return Some("is absolute (paths are relative to the repository root)");
    }
    if path.split(['/', '\\']).any(|c| c == "..") {
        return Some("contains `..` (paths must stay inside the repository)");
    }
    if path.chars().any(char::is_control) {
        return Some("contains a control character");
    }
    None
}

fn check_step(step: &PlanStep, sloc: &str, push: &mut impl FnMut(String, String)) {
    for (field, paths) in [
        ("deliverables", &step.deliverables),
        ("allowed_paths", &step.allowed_paths),
        ("blocked_paths", &step.blocked_paths),
        ("context_files", &step.context_files),
    ] {
        for path in paths {
            if let Some(why) = unsafe_path_reason(path) {
                push(sloc.into(), format!("{field} entry {path:?} {why}"));
            }
        }
    }
    if let Some(why) = unsafe_id_reason(&step.step_id) {
        push(sloc.into(), format!("step_id {:?} {why}", step.step_id));
    }
    if let Some(why) = agent_name_problem(&step.agent_name) {
        push(sloc.into(), why);
    }
    if step.is_automation() && step.command.trim().is_empty() {
        push(sloc.into(), "automation step has no command".into());
    }
    if step.interactive && step.max_turns() == 0 {
        push(sloc.into(), "interactive step has max_turns 0".into());
    }
    let mut members = HashSet::new();
    check_members(&step.team, sloc, &mut members, push);
}

/// Longest agent name, characters.
pub const MAX_AGENT_NAME: usize = 64;

/// Why an agent name is unusable, if it is: it names a roster file, a git author and a log
/// line, so it must be 1–64 characters of letters, digits, `.`, `_`, `-`, `:` and `@` (found
/// by a tester: `<x>` broke the commit signature, a newline the consolidation).
/// Why `name` is no agent name (empty, over the length limit, or a character other than a
/// letter, a digit and `. _ - : @`), or None. Plans are held to it, and so are the agent
/// names a door records.
pub fn agent_name_problem(name: &str) -> Option<String> {
    if name.trim().is_empty() {
        return Some("agent_name is empty".into());
    }
    if name.chars().count() > MAX_AGENT_NAME {
        return Some(format!("agent_name is longer than {MAX_AGENT_NAME} characters"));
    }
    if !name.chars().all(|c| c.is_alphanumeric() || matches!(c, '.' | '_' | '-' | ':' | '@')) {
        return Some(format!("agent_name {name:?} may only hold letters, digits and . _ - : @"));
    }
    None
}

fn check_members<'a>(
    team: &'a [TeamMember],
    sloc: &str,
    seen: &mut HashSet<&'a str>,
    push: &mut impl FnMut(String, String),
) {
    for m in team {
        let mloc = format!("{sloc}, member {}", m.member_id);
        if let Some(why) = unsafe_id_reason(&m.member_id) {
            push(mloc.clone(), format!("member_id {:?} {why}", m.member_id));
        }
        if !seen.insert(m.member_id.as_str()) {
            push(mloc.clone(), "duplicate member_id".into());
        }
        if let Some(why) = agent_name_problem(&m.agent_name) {
            push(mloc.clone(), why);
        }
        if !m.sub_team.is_empty() && m.role != "lead" {
            push(mloc.clone(), format!("sub_team on a member whose role is {:?} (only a lead may have one)", m.role));
        }
        check_members(&m.sub_team, sloc, seen, push);
    }
}

/// Dependency cycles among steps (each as the list of step ids around the cycle).
fn find_cycles(plan: &MachinePlan) -> Vec<Vec<String>> {
    let deps: HashMap<&str, &[String]> =
        plan.steps().map(|(_, s)| (s.step_id.as_str(), s.depends_on.as_slice())).collect();
    // 0 = unvisited, 1 = on stack, 2 = done
    let mut mark: HashMap<&str, u8> = HashMap::new();
    let mut cycles = Vec::new();
    for (_, step) in plan.steps() {
        let mut stack: Vec<(&str, usize)> = vec![(step.step_id.as_str(), 0)];
        let mut path: Vec<&str> = Vec::new();
        if mark.get(step.step_id.as_str()).copied().unwrap_or(0) != 0 {
            continue;
        }
        while let Some((node, i)) = stack.pop() {
            if i == 0 {
                mark.insert(node, 1);
                path.push(node);
            }
            let next = deps.get(node).and_then(|d| d.get(i));
            match next {
                Some(dep) => {
                    stack.push((node, i + 1));
                    let dep = dep.as_str();
                    match mark.get(dep).copied().unwrap_or(0) {
                        0 if deps.contains_key(dep) => stack.push((dep, 0)),
                        1 => {
                            if let Some(start) = path.iter().position(|n| *n == dep) {
                                let mut cycle: Vec<String> = path[start..].iter().map(|s| s.to_string()).collect();
                                cycle.push(dep.to_string());
                                cycles.push(cycle);
                            }
                        }
                        _ => {}
                    }
                }
                None => {
                    mark.insert(node, 2);
                    path.pop();
                }
            }
        }
    }
    cycles
}

/// Synthesis strategies a team step accepts (seed-spec §1.7).
pub const STRATEGIES: &[&str] = &["concatenate", "merge_files", "agent_synthesis"];

/// Conflict handling values a team step accepts (seed-spec §1.7).
pub const CONFLICT_HANDLING: &[&str] = &["auto_merge", "escalate", "fail"];

/// Problems of the team steps of a plan, each as (location, message): member ids unique in the
/// plan and distinct from step ids, member `depends_on` naming members of the same step without
/// cycles, known strategy and conflict handling, safe member deliverables, no interactive or
/// automation team step.
fn team_problems(plan: &MachinePlan) -> Vec<(String, String)> {
    let step_ids: HashSet<&str> = plan.steps().map(|(_, s)| s.step_id.as_str()).collect();
    let mut seen: HashSet<String> = HashSet::new();
    let mut out = Vec::new();
    for phase in &plan.phases {
        for step in phase.steps.iter().filter(|s| !s.team.is_empty()) {
            let sloc = format!(
                "phase {} ({}), step {}",
                phase.phase_id,
                phase.name.escape_debug(),
                step.step_id.escape_debug()
            );
            // The synthesis is dispatched and recorded under this id: a step with it would
            // never run, and the synthesis's result would be taken for its own.
            if step_ids.contains(step.synthesis_id().as_str()) {
                out.push((
                    sloc.clone(),
                    format!(
                        "step id {} is reserved for the synthesis of team step {}",
                        step.synthesis_id(),
                        step.step_id
                    ),
                ));
            }
            if step.interactive {
                out.push((sloc.clone(), "a team step cannot be interactive".into()));
            }
            if step.is_automation() {
                out.push((sloc.clone(), "a team step cannot be an automation step".into()));
            }
            let specs = std::iter::once(step.synthesis.as_deref())
                .chain(step.flat_members().into_iter().map(|m| m.synthesis.as_ref()))
                .flatten();
            for spec in specs {
                if !STRATEGIES.contains(&spec.strategy.as_str()) {
                    out.push((
                        sloc.clone(),
                        format!("synthesis strategy {:?} (expected {})", spec.strategy, STRATEGIES.join(", ")),
                    ));
                }
                if !CONFLICT_HANDLING.contains(&spec.conflict_handling.as_str()) {
                    out.push((
                        sloc.clone(),
                        format!(
                            "conflict_handling {:?} (expected {})",
                            spec.conflict_handling,
                            CONFLICT_HANDLING.join(", ")
                        ),
                    ));
                }
            }
            let members = step.flat_members();
            let ids: HashSet<&str> = members.iter().map(|m| m.member_id.as_str()).collect();
            for m in &members {
                let mloc = format!("{sloc}, member {}", m.member_id);
                if step_ids.contains(m.member_id.as_str()) {
                    out.push((mloc.clone(), "member_id is also a step id".into()));
                } else if !seen.insert(m.member_id.clone())
                    && members.iter().filter(|o| o.member_id == m.member_id).count() == 1
                {
                    out.push((mloc.clone(), "member_id is used by another team step".into()));
                }
                if m.member_id == step.synthesis_id() {
                    out.push((mloc.clone(), format!("member_id {} is reserved for the synthesis", m.member_id)));
                }
                for dep in &m.depends_on {
                    if dep == &m.member_id {
                        out.push((mloc.clone(), "depends on itself".into()));
                    } else if !ids.contains(dep.as_str()) {
                        out.push((mloc.clone(), format!("depends_on names {dep}, which is not a member of this step")));
                    }
                }
                for d in m.deliverables() {
                    if let Some(why) = unsafe_path_reason(&d) {
                        out.push((mloc.clone(), format!("deliverables entry {d:?} {why}")));
                    }
                }
            }
            if let Some(cycle) = member_cycle(&members) {
                out.push((sloc.clone(), format!("member dependency cycle: {}", cycle.join(" -> "))));
            }
        }
    }
    out
}

/// One dependency cycle among members, if any (as the ids around it).
fn member_cycle(members: &[&TeamMember]) -> Option<Vec<String>> {
    let deps: HashMap<&str, &[String]> =
        members.iter().map(|m| (m.member_id.as_str(), m.depends_on.as_slice())).collect();
    // 0 = unvisited, 1 = on the path, 2 = done
    let mut mark: HashMap<&str, u8> = HashMap::new();
    fn visit<'a>(
        id: &'a str,
        deps: &HashMap<&'a str, &'a [String]>,
        mark: &mut HashMap<&'a str, u8>,
        path: &mut Vec<&'a str>,
    ) -> Option<Vec<String>> {
        match mark.get(id) {
            Some(2) => return None,
            Some(1) => {
                let start = path.iter().position(|p| *p == id).unwrap_or(0);
                let mut cycle: Vec<String> = path[start..].iter().map(|s| s.to_string()).collect();
                cycle.push(id.to_string());
                return Some(cycle);
            }
            _ => {}
        }
        mark.insert(id, 1);
        path.push(id);
        for dep in deps.get(id).copied().unwrap_or_default() {
            if deps.contains_key(dep.as_str()) {
                if let Some(c) = visit(dep.as_str(), deps, mark, path) {
                    return Some(c);
                }
            }
        }
        path.pop();
        mark.insert(id, 2);
        None
    }
    members.iter().find_map(|m| visit(m.member_id.as_str(), &deps, &mut mark, &mut Vec::new()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::plan::{PlanPhase, PlanStep};
    use serde_json::json;

    fn plan(phases: Vec<PlanPhase>) -> MachinePlan {
        let mut p = MachinePlan::from_json(r#"{"task_id":"t-1","task_summary":"s"}"#).unwrap();
        p.phases = phases;
        p
    }

    fn phase(id: i64, steps: Vec<PlanStep>) -> PlanPhase {
        let mut p = PlanPhase::new(id, format!("P{id}"));
        p.steps = steps.into_iter().map(Box::new).collect();
        p
    }

    fn step(id: &str, deps: &[&str]) -> PlanStep {
        let mut s = PlanStep::new(id, "dev", "do it");
        s.depends_on = deps.iter().map(|d| d.to_string()).collect();
        s
    }

    fn messages(plan: &MachinePlan) -> Vec<String> {
        validate(plan).unwrap_err().into_iter().map(|p| p.to_string()).collect()
    }

    #[test]
    fn a_valid_plan_passes() {
        assert_eq!(validate(&plan(vec![phase(1, vec![step("1.1", &[]), step("1.2", &["1.1"])])])), Ok(()));
    }

    /// A step id or dependency with a tab or a newline wrote them raw into the problem's
    /// location, breaking the line (found by a tester); they are escaped, as a phase name is.
    #[test]
    fn step_ids_in_problems_are_escaped() {
        let p = plan(vec![phase(1, vec![step("1.\t1", &["x\ny"]), step("1.\t1", &[])])]);
        let got = messages(&p);
        assert!(got.iter().all(|m| !m.contains('\t') && !m.contains('\n')), "{got:?}");
        assert!(
            got.iter().any(|m| m.starts_with("phase 1 (P1), step 1.\\t1: depends_on names unknown step x\\ny")),
            "{got:?}"
        );
        assert!(got.iter().any(|m| m.ends_with("duplicate step_id 1.\\t1")), "{got:?}");
    }

    #[test]
    fn empty_plan_is_rejected() {
        assert_eq!(messages(&plan(vec![])), vec!["plan: has no phases"]);
    }

    #[test]
    fn every_problem_is_reported_at_once_with_its_location() {
        let mut bad = step("1.2", &["9.9"]);
        bad.agent_name = " ".into();
        let p = plan(vec![phase(1, vec![step("1.1", &["1.3"]), bad, step("1.1", &[]), step("1.3", &[])])]);
        let got = messages(&p);
        assert!(
            got.contains(
                &"phase 1 (P1), step 1.1: depends_on names step 1.3, which comes later in the plan".to_string()
            ),
            "{got:?}"
        );
        assert!(got.contains(&"phase 1 (P1), step 1.2: agent_name is empty".to_string()), "{got:?}");
        assert!(got.contains(&"phase 1 (P1), step 1.2: depends_on names unknown step 9.9".to_string()), "{got:?}");
        assert!(got.contains(&"phase 1 (P1), step 1.1: duplicate step_id 1.1".to_string()), "{got:?}");
    }

    #[test]
    fn a_goal_evaluator_must_be_an_agent_name() {
        // Found by a tester: `baton goal --evaluator ../x` dispatched goal.1 to `../x`.
        for (value, why) in
            [(json!("../x"), "may only hold"), (json!(""), "is empty"), (json!(3), "must be an agent name")]
        {
            let mut p = plan(vec![PlanPhase::new(1, "p")]);
            p.extra.insert("goal_evaluator".into(), value);
            let problems = validate(&p).unwrap_err();
            assert!(
                problems.iter().any(|x| x.message.starts_with("goal_evaluator") && x.message.contains(why)),
                "{problems:?}"
            );
        }
    }

    #[test]
    fn agent_names_that_would_break_a_commit_or_a_path_are_refused() {
        for name in ["a<b>", "two\nlines", "../x", "sp ace"] {
            let mut s = step("1.1", &[]);
            s.agent_name = name.into();
            let got = messages(&plan(vec![phase(1, vec![s])]));
            assert!(got.iter().any(|g| g.contains("may only hold")), "{name:?}: {got:?}");
        }
        let mut s = step("1.1", &[]);
        s.agent_name = "x".repeat(65);
        assert!(messages(&plan(vec![phase(1, vec![s])]))[0].contains("longer than 64"));
        let mut s = step("1.1", &[]);
        s.agent_name = "backend-engineer--python".into();
        assert_eq!(validate(&plan(vec![phase(1, vec![s])])), Ok(()));
    }

    #[test]
    fn cycles_and_self_dependencies_are_reported() {
        let p = plan(vec![phase(1, vec![step("a", &["b"]), step("b", &["a"]), step("c", &["c"])])]);
        let got = messages(&p);
        assert!(got.iter().any(|m| m.starts_with("plan: dependency cycle: a -> b -> a")), "{got:?}");
        assert!(got.contains(&"phase 1 (P1), step c: depends on itself".to_string()), "{got:?}");
    }

    #[test]
    fn unsafe_ids_are_rejected() {
        for id in ["../x", "a b", "a\u{7}b", "..", "-rf", "x..y", ".hidden", "a/b", "ref.lock", ""] {
            assert!(unsafe_id_reason(id).is_some(), "{id:?} should be unsafe");
        }
        for id in ["1.1", "design-api", "step_2", "2026-01-15-add-api-v2-abc12345"] {
            assert_eq!(unsafe_id_reason(id), None, "{id:?} should be safe");
        }
        let got = messages(&plan(vec![phase(1, vec![step("../x", &[])])]));
        assert_eq!(
            got,
            vec!["phase 1 (P1), step ../x: step_id \"../x\" contains `/` (allowed: ASCII letters and digits, `.`, `_`, `-`)"]
        );
    }

    #[test]
    fn paths_that_leave_the_repository_are_rejected() {
        let mut s = step("1.1", &[]);
        s.deliverables = vec!["../../etc/x.md".into(), "docs/ok.md".into()];
        s.allowed_paths = vec!["/tmp/".into()];
        let got = messages(&plan(vec![phase(1, vec![s])]));
        assert_eq!(
            got,
            vec![
                "phase 1 (P1), step 1.1: deliverables entry \"../../etc/x.md\" contains `..` (paths must stay inside the repository)",
                "phase 1 (P1), step 1.1: allowed_paths entry \"/tmp/\" is absolute (paths are relative to the repository root)",
            ]
        );
    }

    #[test]
    fn duplicate_phase_ids_are_rejected() {
        let got = messages(&plan(vec![phase(1, vec![step("1.1", &[])]), phase(1, vec![step("2.1", &[])])]));
        assert_eq!(got, vec!["phase 1 (P1): duplicate phase_id 1"]);
    }

    /// Found by a tester: a NUL in a step's description passed `plan --check` and failed the
    /// step at consolidation on every attempt; a line break in a phase name faked a line of
    /// `execute list`. A new plan is refused for both, naming where; a journal's plan
    /// (replayed with `validate`) is not held to them.
    #[test]
    fn a_new_plan_with_a_nul_or_a_multi_line_phase_name_is_refused() {
        let mut p = MachinePlan::from_json(
            r#"{"task_id":"t-1","task_summary":"s","phases":[{"phase_id":1,"name":"Line1\nACTION: COMPLETE",
                "gate":{"gate_type":"te\nst","command":"true"},
                "steps":[{"step_id":"1.1","agent_name":"a","task_description":"Add a\u0000b file"}]}]}"#,
        )
        .unwrap();
        assert!(validate(&p).is_ok(), "replay takes it");
        let got: Vec<String> = validate_new(&p).unwrap_err().iter().map(ToString::to_string).collect();
        assert!(got.iter().any(|g| g.contains("phases[0].steps[0].task_description holds a NUL character")), "{got:?}");
        assert!(got.iter().any(|g| g.contains("phase 1: name must be one line")), "{got:?}");
        assert!(got.iter().any(|g| g.contains("phase 1, gate: gate_type must be one line")), "{got:?}");
        p.phases[0].name = "Build".into();
        p.phases[0].gate.as_mut().unwrap().gate_type = "test".into();
        p.phases[0].steps[0].task_description = "Add a file\nwith a second line".into();
        assert_eq!(validate_new(&p), Ok(()));
    }
}
