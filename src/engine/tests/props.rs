//! Property tests: random valid plans driven by random legal event orders.

use std::collections::HashSet;

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::strategy::ValueTree;
use proptest::test_runner::Config;

use super::*;

#[derive(Debug, Clone)]
struct StepSpec {
    deps: Vec<Index>,
    interactive: bool,
}

#[derive(Debug, Clone)]
struct PhaseSpec {
    steps: Vec<StepSpec>,
    gate: bool,
    approval: bool,
    options: Option<usize>,
}

fn step_spec() -> impl Strategy<Value = StepSpec> {
    (prop::collection::vec(any::<Index>(), 0..3), prop::bool::weighted(0.15))
        .prop_map(|(deps, interactive)| StepSpec { deps, interactive })
}

fn phase_spec() -> impl Strategy<Value = PhaseSpec> {
    (
        prop::collection::vec(step_spec(), 1..=5),
        prop::bool::weighted(0.4),
        prop::bool::weighted(0.25),
        prop::option::weighted(0.25, 2usize..=4),
    )
        .prop_map(|(steps, gate, approval, options)| PhaseSpec { steps, gate, approval, options })
}

fn build_plan(phases: &[PhaseSpec], high: bool) -> MachinePlan {
    let mut earlier: Vec<String> = Vec::new();
    let mut out = Vec::new();
    for (pi, spec) in phases.iter().enumerate() {
        let id = pi as i64 + 1;
        let mut steps = Vec::new();
        for (si, s) in spec.steps.iter().enumerate() {
            let sid = format!("{id}.{}", si + 1);
            let mut st = step(&sid, &[]);
            if !earlier.is_empty() {
                for d in &s.deps {
                    let dep = d.get(&earlier).clone();
                    if !st.depends_on.contains(&dep) {
                        st.depends_on.push(dep);
                    }
                }
            }
            st.interactive = s.interactive;
            st.max_turns_field = s.interactive.then_some(3);
            earlier.push(sid);
            steps.push(st);
        }
        let mut p = phase(id, steps);
        p.gate = spec.gate.then(|| gate("make check {files}"));
        p.approval_required = spec.approval;
        if let Some(n) = spec.options {
            let options: Vec<String> = (0..n).map(|i| format!("option {i}")).collect();
            let refs: Vec<&str> = options.iter().map(String::as_str).collect();
            p.feedback_questions = vec![question("q", &refs)];
        }
        out.push(p);
    }
    let mut plan = plan_of(out);
    if high {
        plan.risk_level = "HIGH".into();
    }
    plan
}

fn deps_done(state: &ExecutionState, step_id: &str) -> bool {
    state
        .locate(step_id)
        .map(|(pi, si)| &state.plan.phases[pi].steps[si])
        .is_some_and(|s| s.depends_on.iter().all(|d| state.step_status(d).is_done()))
}

/// Events a driver or operator could send now (mostly legal), in a fixed order.
fn candidates(state: &ExecutionState, n: usize, choice: u32) -> Vec<Event> {
    let mut out = Vec::new();
    if state.status.is_final() {
        return out;
    }
    let outcome = |kind: RecordStatus, step_id: &str| {
        let mut e = record(step_id, kind);
        if let EventKind::StepRecorded { outcome, files_changed, error, .. } = &mut e.kind {
            *outcome = format!("result {n} of {step_id}");
            *files_changed = vec![format!("src/f{}.rs", n % 3)];
            if kind == RecordStatus::Failed {
                *error = format!("error {n}");
            }
        }
        e
    };
    let current = state.current();
    match state.status {
        ExecutionStatus::Running => match current {
            None => out.push(ev(EventKind::Completed)),
            Some(phase) => {
                for s in &phase.steps {
                    let id = s.step_id.as_str();
                    let st = state.step_status(id);
                    let ready =
                        matches!(st, StepStatus::Pending | StepStatus::InteractDispatched) && deps_done(state, id);
                    if ready || st == StepStatus::Dispatched {
                        if ready {
                            out.push(ev(EventKind::StepDispatched {
                                step_id: id.into(),
                                agent_name: s.agent_name.clone(),
                            }));
                        }
                        out.push(outcome(RecordStatus::Complete, id));
                        out.push(outcome(RecordStatus::Complete, id));
                        out.push(outcome(RecordStatus::Failed, id));
                        if s.interactive {
                            let mut e = outcome(RecordStatus::Interacting, id);
                            if choice.is_multiple_of(5) {
                                if let EventKind::StepRecorded { outcome, .. } = &mut e.kind {
                                    outcome.push_str("\nINTERACT_COMPLETE");
                                }
                            }
                            out.push(e);
                        }
                    }
                    match st {
                        StepStatus::Interacting => {
                            out.push(ev(EventKind::InteractInput { step_id: id.into(), input: format!("reply {n}") }));
                            out.push(ev(EventKind::InteractCompleted { step_id: id.into() }));
                        }
                        StepStatus::Failed => {
                            out.push(ev(EventKind::StepRetried { step_id: id.into() }));
                            out.push(ev(EventKind::StepSkipped { step_id: id.into(), reason: format!("skip {n}") }));
                        }
                        StepStatus::Pending if choice.is_multiple_of(11) => {
                            out.push(ev(EventKind::StepSkipped { step_id: id.into(), reason: format!("skip {n}") }));
                        }
                        _ => {}
                    }
                }
                if state.checkpoint.due {
                    out.push(ev(EventKind::CheckpointAcknowledged));
                }
            }
        },
        ExecutionStatus::ApprovalPending => {
            let phase_id = state.pending_approval_request.as_ref().map_or(-1, |r| r.phase_id);
            out.push(approval(phase_id, ApprovalDecision::Approve, ""));
            out.push(approval(phase_id, ApprovalDecision::Approve, ""));
            out.push(approval(phase_id, ApprovalDecision::Reject, &format!("no {n}")));
            out.push(approval(phase_id, ApprovalDecision::ApproveWithFeedback, &format!("fix {n}")));
        }
        ExecutionStatus::FeedbackPending => {
            if let Some(phase) = current {
                for q in &phase.feedback_questions {
                    for i in 0..q.options.len() {
                        out.push(answer(phase.phase_id, &q.question_id, i));
                    }
                }
            }
        }
        ExecutionStatus::GatePending | ExecutionStatus::GateFailed => {
            if let Some(phase) = current {
                out.push(gate_result(phase.phase_id, true, &format!("ok {n}")));
                out.push(gate_result(phase.phase_id, false, &format!("red {n}")));
                if state.status == ExecutionStatus::GateFailed {
                    out.push(ev(EventKind::GateRetried { phase_id: phase.phase_id }));
                }
            }
        }
        ExecutionStatus::Failed => {
            if let Some(phase) = current {
                for s in &phase.steps {
                    if state.step_status(&s.step_id) == StepStatus::Failed {
                        out.push(ev(EventKind::StepRetried { step_id: s.step_id.clone() }));
                        out.push(ev(EventKind::StepSkipped { step_id: s.step_id.clone(), reason: String::new() }));
                    }
                }
                out.push(ev(EventKind::GateRetried { phase_id: phase.phase_id }));
            }
        }
        ExecutionStatus::Complete | ExecutionStatus::Cancelled => {}
        ExecutionStatus::BudgetExceeded => out.push(ev(EventKind::BudgetRaised { by_usd: 1.0 })),
    }
    if choice.is_multiple_of(13) {
        let earlier: Vec<&str> = state
            .plan
            .phases
            .iter()
            .take(state.current_phase + 1)
            .flat_map(|p| p.steps.iter())
            .map(|s| s.step_id.as_str())
            .collect();
        let deps: Vec<&str> = earlier.get(choice as usize % earlier.len().max(1)).into_iter().copied().collect();
        let mut p = phase(0, vec![step("", &deps)]);
        p.name = format!("Amended {n}");
        out.push(ev(EventKind::Amended {
            description: format!("amend {n}"),
            trigger: "manual".into(),
            phases: vec![p],
            after_phase: None,
            steps: vec![],
        }));
    }
    if choice.is_multiple_of(53) {
        out.push(ev(EventKind::Cancelled { reason: format!("stop {n}") }));
    }
    out
}

fn check_invariants(state: &ExecutionState, ever_done: &HashSet<String>) -> Result<(), TestCaseError> {
    let done = state.plan.steps().filter(|(_, s)| state.step_status(&s.step_id).is_done()).count() as u64;
    prop_assert_eq!(state.counters.steps_done, done, "steps_done counter");
    prop_assert!(crate::engine::settle::tally_is_true(state), "the kept phase tally is not a count of its phase");
    prop_assert_eq!(state.status == ExecutionStatus::ApprovalPending, state.pending_approval_request.is_some(), "I1");
    prop_assert_eq!(state.status.is_terminal(), !state.completed_at.is_empty(), "I2: {:?}", state.status);

    for (_, s) in state.plan.steps() {
        let st = state.step_status(&s.step_id);
        if !matches!(st, StepStatus::Pending | StepStatus::Skipped) {
            prop_assert!(deps_done(state, &s.step_id), "{} is {} before its deps are done", s.step_id, st.as_str());
        }
    }

    let first = next_action(state);
    let all = next_actions(state);
    match &first {
        Action::Dispatch(d) => {
            prop_assert_eq!(state.status, ExecutionStatus::Running);
            prop_assert!(!all.is_empty());
            prop_assert_eq!(&all[0], &first);
            prop_assert_eq!(d.isolation.as_str(), if all.len() >= 2 { "worktree" } else { "" });
        }
        other => prop_assert!(all.is_empty(), "next_actions {:?} while next_action is {:?}", all, other),
    }
    let expected = match state.status {
        ExecutionStatus::ApprovalPending => Some(ActionType::Approval),
        ExecutionStatus::FeedbackPending => Some(ActionType::Feedback),
        ExecutionStatus::GatePending | ExecutionStatus::GateFailed => Some(ActionType::Gate),
        ExecutionStatus::Failed | ExecutionStatus::Cancelled => Some(ActionType::Failed),
        ExecutionStatus::Complete => Some(ActionType::Complete),
        ExecutionStatus::BudgetExceeded => Some(ActionType::Budget),
        ExecutionStatus::Running => None,
    };
    if let Some(t) = expected {
        prop_assert_eq!(first.action_type(), t);
    }
    let current = state.current().map(|p| p.phase_id);
    for a in &all {
        let Action::Dispatch(d) = a else { return Err(TestCaseError::fail(format!("{a:?}"))) };
        prop_assert_eq!(Some(d.phase_id), current);
        let st = state.step_status(&d.step_id);
        prop_assert!(
            matches!(st, StepStatus::Pending | StepStatus::InteractDispatched),
            "{} offered while {}",
            d.step_id,
            st.as_str()
        );
        prop_assert!(deps_done(state, &d.step_id));
        if ever_done.contains(&d.step_id) && st == StepStatus::Pending {
            let phase = state.current();
            let last = phase.and_then(|p| p.steps.last()).is_some_and(|s| s.step_id == d.step_id);
            let redispatched = phase.is_some_and(|p| state.gate_redispatched.contains(&p.phase_id));
            prop_assert!(last && redispatched, "completed step {} offered again", d.step_id);
        }
    }

    let json = serde_json::to_string(state).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let mut back: ExecutionState = serde_json::from_str(&json).map_err(|e| TestCaseError::fail(e.to_string()))?;
    same_up_to_float_parsing(&mut back, state)?;
    // The keys stay in the journal (`engine::recall_key`): the JSON leaves them out.
    prop_assert!(back.applied_keys.is_empty(), "applied keys serialized");
    back.applied_keys.clone_from(&state.applied_keys);
    prop_assert_eq!(&back, state, "serde round trip");
    let snapshot = crate::model::snapshot::encode(state).map_err(|e| TestCaseError::fail(e.to_string()))?;
    // This build's snapshot: its results are read back lazily, each status at decode time.
    let mut back = crate::model::snapshot::decode(&snapshot).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert!(back.step_results.values().all(|r| !r.is_decoded()), "results decoded at load");
    for id in state.step_results.keys() {
        prop_assert_eq!(back.step_status(id), state.step_status(id), "status of {} before decoding", id);
    }
    same_up_to_float_parsing(&mut back, state)?;
    prop_assert!(back.applied_keys.is_empty(), "applied keys in the snapshot");
    back.applied_keys.clone_from(&state.applied_keys);
    prop_assert_eq!(&back, state, "snapshot round trip");
    Ok(())
}

/// serde_json parses floats without `float_roundtrip` up to one ULP off (see
/// `state_json_round_trip_is_exact_for_costs`): the float fields must be that close, and are
/// then copied so that everything else is compared exactly.
fn same_up_to_float_parsing(back: &mut ExecutionState, state: &ExecutionState) -> Result<(), TestCaseError> {
    let close = |a: f64, b: f64| (a - b).abs() <= f64::EPSILON * a.abs().max(b.abs()).max(1.0);
    prop_assert!(close(back.counters.spend_usd, state.counters.spend_usd));
    back.counters.spend_usd = state.counters.spend_usd;
    for (id, r) in &state.step_results {
        if let Some(b) = back.step_results.get_mut(id) {
            prop_assert!(close(b.cost_usd, r.cost_usd) && close(b.duration_seconds, r.duration_seconds));
            b.cost_usd = r.cost_usd;
            b.duration_seconds = r.duration_seconds;
        }
    }
    Ok(())
}

fn run(plan: MachinePlan, choices: &[u32]) -> Result<(), TestCaseError> {
    let mut state = start(plan.clone(), T0).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let mut journal: Vec<(Event, String)> = Vec::new();
    let mut ever_done: HashSet<String> = HashSet::new();
    check_invariants(&state, &ever_done)?;
    for (n, &choice) in choices.iter().enumerate() {
        let options = candidates(&state, n, choice);
        if options.is_empty() {
            break;
        }
        let event = options[choice as usize % options.len()].clone();
        let now = format!("2026-01-01T00:{:02}:{:02}+00:00", n / 60, n % 60);
        let before = state.clone();
        let dispatching = match &event.kind {
            EventKind::StepDispatched { step_id, .. } => Some(step_id.clone()),
            EventKind::StepRecorded { step_id, .. } if state.step_status(step_id) != StepStatus::Dispatched => {
                Some(step_id.clone())
            }
            _ => None,
        };
        match apply(&mut state, &event, &now) {
            Err(_) => {
                prop_assert_eq!(&state, &before, "a rejected {:?} changed the state", event);
                continue;
            }
            Ok(applied) => {
                prop_assert!(!applied.duplicate, "fresh {:?} taken for a duplicate", event);
                if let Some(id) = dispatching {
                    prop_assert!(deps_done(&before, &id), "{} started before its deps were done", id);
                }
                journal.push((event.clone(), now.clone()));
                let after = state.clone();
                let again = apply(&mut state, &event, "2030-01-01T00:00:00+00:00");
                let gate_rerun =
                    matches!(event.kind, EventKind::GateRecorded { .. }) && after.status == ExecutionStatus::GateFailed;
                if !gate_rerun {
                    prop_assert_eq!(again, Ok(Applied { key: applied.key, duplicate: true }), "resent {:?}", event);
                    prop_assert_eq!(&state, &after, "a duplicate changed the state");
                } else {
                    state = after;
                }
            }
        }
        for (_, s) in state.plan.steps() {
            if state.step_status(&s.step_id).is_done() {
                ever_done.insert(s.step_id.clone());
            }
        }
        check_invariants(&state, &ever_done)?;
        if n % 8 == 0 {
            let rebuilt = replay(plan.clone(), T0, journal.iter().map(|(e, t)| (e, t.as_str())))
                .map_err(|e| TestCaseError::fail(format!("replay: {e}")))?;
            prop_assert_eq!(&rebuilt, &state, "replay after {} events", journal.len());
        }
    }
    let rebuilt = replay(plan, T0, journal.iter().map(|(e, t)| (e, t.as_str())))
        .map_err(|e| TestCaseError::fail(format!("replay: {e}")))?;
    prop_assert_eq!(&rebuilt, &state, "replay of the whole journal");
    Ok(())
}

proptest! {
    #![proptest_config(Config { cases: 64, failure_persistence: None, ..Config::default() })]

    #[test]
    fn random_runs_keep_every_invariant(
        phases in prop::collection::vec(phase_spec(), 1..=4),
        high in prop::bool::weighted(0.2),
        choices in prop::collection::vec(any::<u32>(), 1..150),
    ) {
        run(build_plan(&phases, high), &choices)?;
    }
}

#[test]
fn random_runs_reach_every_status() {
    // A fixed seed: with a random one, 48 runs occasionally missed a status (a flaky test).
    let config = Config { cases: 1, failure_persistence: None, ..Config::default() };
    let rng = proptest::test_runner::TestRng::deterministic_rng(proptest::test_runner::RngAlgorithm::ChaCha);
    let mut runner = proptest::test_runner::TestRunner::new_with_rng(config, rng);
    let strategy = (
        prop::collection::vec(phase_spec(), 1..=4),
        prop::bool::weighted(0.2),
        prop::collection::vec(any::<u32>(), 150),
    );
    let mut seen = HashSet::new();
    for _ in 0..48 {
        let (phases, high, choices) = strategy.new_tree(&mut runner).unwrap().current();
        let plan = build_plan(&phases, high);
        let mut state = start(plan, T0).unwrap();
        seen.insert(state.status);
        for (n, &choice) in choices.iter().enumerate() {
            let options = candidates(&state, n, choice);
            if options.is_empty() {
                break;
            }
            let _ = apply(&mut state, &options[choice as usize % options.len()], T0);
            seen.insert(state.status);
        }
    }
    assert_eq!(seen.len(), 8, "the generator only reached {seen:?}");
}

#[test]
fn state_json_round_trip_is_exact_for_costs() {
    let ids: Vec<String> = (1..=10).map(|i| format!("1.{i}")).collect();
    let mut state = started(vec![phase(1, ids.iter().map(|id| step(id, &[])).collect())]);
    for id in &ids {
        ok(&mut state, &record(id, RecordStatus::Complete));
    }
    assert_eq!(state.counters.spend_usd, 0.09999999999999999);
    let mut back: ExecutionState = serde_json::from_str(&serde_json::to_string(&state).unwrap()).unwrap();
    back.applied_keys.clone_from(&state.applied_keys);
    assert_eq!(back, state);
}
