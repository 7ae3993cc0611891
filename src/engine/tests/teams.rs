//! Team steps (seed-spec §3.6, §6.5): members as ordinary dispatches, parent derivation, the
//! three synthesis strategies and the three conflict policies.

use super::*;
use crate::model::action::DispatchAction;
use crate::model::plan::{SynthesisSpec, TeamMember};

fn member(id: &str, agent: &str, deps: &[&str]) -> TeamMember {
    TeamMember {
        member_id: id.into(),
        agent_name: agent.into(),
        role: "implementer".into(),
        task_description: format!("part {id}"),
        model: "sonnet".into(),
        depends_on: deps.iter().map(|d| d.to_string()).collect(),
        sub_team: vec![],
        synthesis: None,
        extra: Default::default(),
    }
}

fn team_step(id: &str, members: Vec<TeamMember>, strategy: &str, conflicts: &str) -> PlanStep {
    let mut s = PlanStep::new(id, "team-lead", format!("team work {id}"));
    s.team = members;
    s.synthesis = Some(Box::new(SynthesisSpec {
        strategy: strategy.into(),
        synthesis_agent: "reviewer".into(),
        synthesis_prompt: "Combine these:\n{member_outcomes}\nDone.".into(),
        conflict_handling: conflicts.into(),
        extra: Default::default(),
    }));
    s
}

fn two_members(strategy: &str, conflicts: &str) -> ExecutionState {
    let team = team_step("1.1", vec![member("1.1.a", "alpha", &[]), member("1.1.b", "beta", &[])], strategy, conflicts);
    started(vec![phase(1, vec![team]), phase(2, vec![step("2.1", &["1.1"])])])
}

fn dispatches(state: &ExecutionState) -> Vec<DispatchAction> {
    next_actions(state)
        .into_iter()
        .filter_map(|a| match a {
            Action::Dispatch(d) => Some(d),
            _ => None,
        })
        .collect()
}

fn member_record(id: &str, agent: &str, outcome: &str, files: &[&str], commit: &str) -> Event {
    ev(EventKind::StepRecorded {
        step_id: id.into(),
        agent_name: agent.into(),
        status: RecordStatus::Complete,
        outcome: outcome.into(),
        files_changed: files.iter().map(|f| f.to_string()).collect(),
        commit_hash: commit.into(),
        tokens: 10,
        cost_usd: 0.5,
        duration_seconds: 2.0,
        error: String::new(),
        usage: None,
    })
}

fn member_dispatched(id: &str, agent: &str) -> Event {
    ev(EventKind::StepDispatched { step_id: id.into(), agent_name: agent.into() })
}

#[test]
fn independent_members_are_dispatched_together_as_ordinary_dispatches_with_their_parent() {
    let state = two_members("concatenate", "auto_merge");
    let ds = dispatches(&state);
    assert_eq!(ds.iter().map(|d| d.step_id.as_str()).collect::<Vec<_>>(), ["1.1.a", "1.1.b"]);
    for d in &ds {
        assert!(d.is_team_member);
        assert_eq!(d.parent_step_id, "1.1");
        assert_eq!(d.isolation, "worktree");
        assert_eq!(d.attempt, 1);
        assert_eq!(d.phase_id, 1);
    }
    assert_eq!(ds[0].agent_name, "alpha");
    let prompt = &ds[1].delegation_prompt;
    for needle in [
        "## Team",
        "- Member id: 1.1.b",
        "- Role: implementer",
        "- Parent step: 1.1",
        "alpha (implementer), beta (implementer)",
        "part 1.1.b",
        "team work 1.1",
    ] {
        assert!(prompt.contains(needle), "{needle} missing from:\n{prompt}");
    }
    let json = serde_json::to_value(&ds[0]).unwrap();
    assert_eq!(json["parent_step_id"], "1.1");
    let plain = started(vec![phase(1, vec![step("1.1", &[])])]);
    let json = serde_json::to_value(&dispatches(&plain)[0]).unwrap();
    assert!(json.get("parent_step_id").is_none(), "omitted when empty: {json}");
    assert_eq!(json["is_team_member"], false);
}

#[test]
fn intra_team_depends_on_orders_the_members_and_the_parent_waits_for_all() {
    let team = team_step(
        "1.1",
        vec![member("1.1.a", "alpha", &[]), member("1.1.b", "beta", &["1.1.a"])],
        "concatenate",
        "auto_merge",
    );
    let mut state = started(vec![phase(1, vec![team, step("1.2", &["1.1"])])]);
    assert_eq!(dispatch_ids(&state), ["1.1.a"]);
    assert_eq!(dispatches(&state)[0].isolation, "", "one dispatch: no isolation needed");
    ok(&mut state, &member_dispatched("1.1.a", "alpha"));
    assert_eq!(state.step_status("1.1"), StepStatus::Dispatched);
    assert!(matches!(next_action(&state), Action::Wait { .. }));
    let early = refused(&mut state, &member_record("1.1.b", "beta", "b", &[], ""));
    assert!(early.to_string().contains("waits for 1.1.a"), "{early}");
    ok(&mut state, &member_record("1.1.a", "alpha", "did a", &["a.rs"], "c1"));
    assert_eq!(state.step_status("1.1"), StepStatus::Dispatched, "1 of 2 done");
    assert_eq!(dispatch_ids(&state), ["1.1.b"]);
    let prompt = &dispatches(&state)[0].delegation_prompt;
    assert!(prompt.contains("## Previous steps") && prompt.contains("1.1.a (alpha, complete): did a"), "{prompt}");
    assert!(prompt.contains("- Builds on: 1.1.a"), "{prompt}");
    ok(&mut state, &member_record("1.1.b", "beta", "did b", &["b.rs"], "c2"));
    assert_eq!(state.step_status("1.1"), StepStatus::Complete);
    assert_eq!(state.counters.steps_done, 1, "members do not count as steps");
    assert_eq!(dispatch_ids(&state), ["1.2"]);
}

#[test]
fn concatenate_joins_outcomes_and_keeps_duplicate_files_and_the_execution_completes() {
    let mut state = two_members("concatenate", "auto_merge");
    ok(&mut state, &member_record("1.1.b", "beta", "did b", &["b.rs", "lib.rs"], "c2"));
    ok(&mut state, &member_record("1.1.a", "alpha", "did a", &["a.rs", "lib.rs"], "c1"));
    let r = state.result("1.1").unwrap().clone();
    assert_eq!(r.status, StepStatus::Complete);
    assert_eq!(r.agent_name, "team");
    assert_eq!(r.outcome, "did a; did b", "member order, not completion order");
    assert_eq!(r.files_changed, ["a.rs", "lib.rs", "b.rs", "lib.rs"]);
    assert_eq!(r.cost_usd, 1.0);
    assert_eq!(r.estimated_tokens, 20);
    assert_eq!(
        r.team_conflicts,
        vec![crate::model::state::TeamConflict {
            file: "lib.rs".into(),
            members: vec!["1.1.a".into(), "1.1.b".into()]
        }]
    );
    assert!(r.deviations.iter().any(|d| d.contains("lib.rs (changed by 1.1.a and 1.1.b)")), "{:?}", r.deviations);
    assert_eq!(state.result("1.1.a").unwrap().status, StepStatus::Complete, "member results are kept");
    assert_eq!(state.counters.spend_usd, 1.0);
    ok(&mut state, &record("2.1", RecordStatus::Complete));
    ok(&mut state, &ev(EventKind::Completed));
    assert_eq!(state.status, ExecutionStatus::Complete);
    assert_eq!(state.progress(), (2, 2));
}

#[test]
fn merge_files_keeps_each_file_once_in_first_seen_order() {
    let mut state = two_members("merge_files", "auto_merge");
    ok(&mut state, &member_record("1.1.a", "alpha", "did a", &["z.rs", "lib.rs"], "c1"));
    ok(&mut state, &member_record("1.1.b", "beta", "did b", &["lib.rs", "b.rs", "z.rs"], "c2"));
    let r = state.result("1.1").unwrap();
    assert_eq!(r.files_changed, ["z.rs", "lib.rs", "b.rs"]);
    assert_eq!(r.outcome, "did a; did b");
    assert_eq!(r.commit_hash, "c2", "the last consolidated member commit");
}

#[test]
fn a_failed_member_fails_the_parent_naming_it_once_nothing_is_in_flight() {
    let team = team_step(
        "1.1",
        vec![member("1.1.a", "alpha", &[]), member("1.1.b", "beta", &[]), member("1.1.c", "gamma", &["1.1.a"])],
        "concatenate",
        "auto_merge",
    );
    let mut state = started(vec![phase(1, vec![team])]);
    ok(&mut state, &member_dispatched("1.1.a", "alpha"));
    ok(&mut state, &member_dispatched("1.1.b", "beta"));
    ok(&mut state, &failed_record("1.1.a", "compiler exploded"));
    assert_eq!(state.status, ExecutionStatus::Running, "1.1.b is still in flight");
    assert_eq!(state.step_status("1.1"), StepStatus::Dispatched);
    assert!(dispatch_ids(&state).is_empty(), "no member starts after one failed");
    ok(&mut state, &member_record("1.1.b", "beta", "did b", &[], ""));
    assert_eq!(state.step_status("1.1"), StepStatus::Failed);
    assert_eq!(state.status, ExecutionStatus::Failed);
    let failure = state.failure.clone().unwrap();
    assert!(failure.contains("step 1.1 failed") && failure.contains("1.1.a (compiler exploded)"), "{failure}");
    // Retrying the team step re-runs only the failed member.
    ok(&mut state, &ev(EventKind::StepRetried { step_id: "1.1".into() }));
    assert_eq!(state.status, ExecutionStatus::Running);
    assert_eq!(dispatch_ids(&state), ["1.1.a"]);
    let d = &dispatches(&state)[0];
    assert_eq!(d.attempt, 2);
    ok(&mut state, &member_record("1.1.a", "alpha", "did a", &[], ""));
    ok(&mut state, &member_record("1.1.c", "gamma", "did c", &[], ""));
    assert_eq!(state.step_status("1.1"), StepStatus::Complete);
    assert_eq!(state.result("1.1.b").unwrap().attempt, 1, "1.1.b never ran again");
}

#[test]
fn a_lead_with_a_sub_team_is_dispatched_first_in_one_wave_and_completion_waits_for_all() {
    let mut lead = member("1.1.a", "lead-dev", &[]);
    lead.role = "lead".into();
    lead.sub_team = vec![member("1.1.a.b", "sub-one", &[]), member("1.1.a.c", "sub-two", &[])];
    let team = team_step("1.1", vec![lead, member("1.1.d", "other", &[])], "merge_files", "auto_merge");
    let mut state = started(vec![phase(1, vec![team])]);
    assert_eq!(dispatch_ids(&state), ["1.1.a", "1.1.a.b", "1.1.a.c", "1.1.d"]);
    assert_eq!(state.team_parent("1.1.a.b"), Some("1.1"));
    let prompt = &dispatches(&state)[1].delegation_prompt;
    assert!(prompt.contains("lead-dev (lead), sub-one (implementer)"), "{prompt}");
    for (id, files) in [("1.1.a", vec!["x"]), ("1.1.a.b", vec!["y", "x"]), ("1.1.d", vec!["z"])] {
        ok(&mut state, &member_record(id, "dev", id, &files, ""));
        assert_eq!(state.step_status("1.1"), StepStatus::Dispatched, "after {id}");
    }
    ok(&mut state, &member_record("1.1.a.c", "sub-two", "c", &["y"], ""));
    assert_eq!(state.step_status("1.1"), StepStatus::Complete);
    assert_eq!(state.result("1.1").unwrap().files_changed, ["x", "y", "z"], "merge_files dedupes across levels");
}

#[test]
fn agent_synthesis_dispatches_the_synthesis_agent_after_all_members_and_takes_its_result() {
    let mut state = two_members("agent_synthesis", "auto_merge");
    ok(&mut state, &member_record("1.1.a", "alpha", "did a", &["a.rs"], "c1"));
    ok(&mut state, &member_record("1.1.b", "beta", "did b", &["b.rs"], "c2"));
    assert_eq!(state.step_status("1.1"), StepStatus::Dispatched, "waits for the synthesis");
    let ds = dispatches(&state);
    assert_eq!(ds.len(), 1);
    let d = &ds[0];
    assert_eq!(
        (d.step_id.as_str(), d.agent_name.as_str(), d.parent_step_id.as_str()),
        ("1.1.synthesis", "reviewer", "1.1")
    );
    assert!(d.is_team_member);
    assert!(
        d.delegation_prompt.contains(
            "Combine these:\n- 1.1.a (alpha, implementer): did a\n  Files: a.rs\n- 1.1.b (beta, implementer): did b"
        ),
        "{}",
        d.delegation_prompt
    );
    assert!(!d.delegation_prompt.contains("{member_outcomes}"));
    assert!(d.delegation_prompt.contains("You synthesise the work of team step 1.1"), "{}", d.delegation_prompt);
    ok(&mut state, &member_dispatched("1.1.synthesis", "reviewer"));
    ok(&mut state, &member_record("1.1.synthesis", "reviewer", "the team result", &["glue.rs"], "c3"));
    let r = state.result("1.1").unwrap();
    assert_eq!(r.status, StepStatus::Complete);
    assert_eq!((r.outcome.as_str(), r.commit_hash.as_str()), ("the team result", "c3"));
    assert_eq!(r.files_changed, ["a.rs", "b.rs", "glue.rs"]);
    assert_eq!(r.cost_usd, 1.5);
    assert_eq!(dispatch_ids(&state), ["2.1"]);
}

#[test]
fn a_failed_synthesis_fails_the_team_step() {
    let mut state = two_members("agent_synthesis", "auto_merge");
    ok(&mut state, &member_record("1.1.a", "alpha", "a", &[], ""));
    ok(&mut state, &member_record("1.1.b", "beta", "b", &[], ""));
    ok(&mut state, &failed_record("1.1.synthesis", "could not reconcile"));
    assert_eq!(state.status, ExecutionStatus::Failed);
    assert!(state.failure.as_deref().unwrap().contains("1.1.synthesis (could not reconcile)"), "{:?}", state.failure);
}

#[test]
fn the_team_step_itself_and_unknown_members_are_refused() {
    let mut state = two_members("concatenate", "auto_merge");
    let err = refused(&mut state, &dispatched("1.1"));
    assert!(err.to_string().contains("team step: its members (1.1.a, 1.1.b)"), "{err}");
    refused(&mut state, &record("1.1", RecordStatus::Complete));
    assert!(matches!(refused(&mut state, &record("1.1.z", RecordStatus::Complete)), EngineError::UnknownStep { .. }));
    let synth = refused(&mut state, &record("1.1.synthesis", RecordStatus::Complete));
    assert!(matches!(synth, EngineError::UnknownStep { .. }), "no synthesis without agent_synthesis: {synth}");
    let interacting = refused(&mut state, &interacting("1.1.a", "?"));
    assert!(interacting.to_string().contains("not interactive"), "{interacting}");
    // A member of a later phase is not current.
    let later = team_step("2.2", vec![member("2.2.a", "alpha", &[])], "concatenate", "auto_merge");
    let mut state = started(vec![phase(1, vec![step("1.1", &[])]), phase(2, vec![later])]);
    let err = refused(&mut state, &member_dispatched("2.2.a", "alpha"));
    assert!(err.to_string().contains("belongs to phase 2"), "{err}");
}

#[test]
fn budget_stopped_is_refused_for_a_member_that_was_never_dispatched() {
    let mut s = two_members("concatenate", "auto_merge");
    ok(&mut s, &ev(EventKind::BudgetSet { ceiling_usd: Some(10.0), source: "test".into() }));
    let mut stopped = member_record("1.1.a", "alpha", "", &[], "");
    if let EventKind::StepRecorded { status, .. } = &mut stopped.kind {
        *status = RecordStatus::BudgetStopped;
    }
    let err = refused(&mut s, &stopped);
    assert!(err.to_string().contains("never dispatched"), "{err}");
    ok(&mut s, &member_dispatched("1.1.a", "alpha"));
    ok(&mut s, &stopped);
    assert_eq!(s.status, ExecutionStatus::BudgetExceeded);
}

#[test]
fn recording_a_member_twice_is_one_event_and_replay_rebuilds_the_state() {
    let mut state = two_members("merge_files", "auto_merge");
    let mut journal = Vec::new();
    for e in [
        member_dispatched("1.1.a", "alpha"),
        member_record("1.1.a", "alpha", "a", &["x"], "c1"),
        member_record("1.1.b", "beta", "b", &["x"], "c2"),
    ] {
        let applied = apply(&mut state, &e, T0).unwrap();
        journal.push(e.with_key(applied.key));
    }
    let again = apply(&mut state, &member_record("1.1.a", "alpha", "a", &["x"], "c1"), T0).unwrap();
    assert!(again.duplicate, "the same record sent again is recognised");
    let other = refused(&mut state, &member_record("1.1.a", "alpha", "another", &["x"], "c9"));
    assert!(matches!(other, EngineError::StepState { .. }), "a complete member has no attempt to record: {other}");
    let dup = apply(&mut state, &journal[1], T0).unwrap();
    assert!(dup.duplicate);
    let replayed = replay(state.plan.clone(), T0, journal.iter().map(|e| (e, T0))).unwrap();
    assert_eq!(replayed, state);
}

#[test]
fn conflict_handling_fail_fails_the_team_step_naming_the_file_and_members() {
    let mut state = two_members("concatenate", "fail");
    ok(&mut state, &member_record("1.1.a", "alpha", "a", &["a.rs", "shared.rs"], "c1"));
    ok(&mut state, &member_record("1.1.b", "beta", "b", &["shared.rs"], "c2"));
    assert_eq!(state.status, ExecutionStatus::Failed);
    let failure = state.failure.clone().unwrap();
    assert!(failure.contains("conflict: shared.rs (changed by 1.1.a and 1.1.b)"), "{failure}");
    // Without an overlap the same policy completes.
    let mut state = two_members("concatenate", "fail");
    ok(&mut state, &member_record("1.1.a", "alpha", "a", &["a.rs"], "c1"));
    ok(&mut state, &member_record("1.1.b", "beta", "b", &["b.rs"], "c2"));
    assert_eq!(state.step_status("1.1"), StepStatus::Complete);
}

fn escalated() -> ExecutionState {
    let team =
        team_step("1.1", vec![member("1.1.a", "alpha", &[]), member("1.1.b", "beta", &[])], "merge_files", "escalate");
    let mut state = started(vec![phase(1, vec![team, step("1.2", &[])]), phase(2, vec![step("2.1", &[])])]);
    ok(&mut state, &member_dispatched("1.2", "dev"));
    ok(&mut state, &member_record("1.1.a", "alpha", "did a", &["shared.rs"], "aaaaaaaaaaaaaaaa"));
    ok(&mut state, &member_record("1.1.b", "beta", "did b", &["shared.rs", "b.rs"], "bbbbbbbbbbbbbbbb"));
    assert_eq!(state.status, ExecutionStatus::Running, "1.2 is in flight: the approval waits");
    assert!(matches!(next_action(&state), Action::Wait { .. }));
    ok(&mut state, &record("1.2", RecordStatus::Complete));
    assert_eq!(state.status, ExecutionStatus::ApprovalPending);
    state
}

#[test]
fn escalate_asks_for_an_approval_showing_both_members_changes_of_the_file() {
    let state = escalated();
    let Action::Approval(a) = next_action(&state) else { panic!("{:?}", next_action(&state)) };
    assert_eq!(a.phase_id, 1);
    assert!(a.message.contains("team step 1.1") && a.message.contains("shared.rs"), "{}", a.message);
    for needle in [
        "### shared.rs",
        "#### 1.1.a (alpha, commit aaaaaaaaaaaa)",
        "did a",
        "#### 1.1.b (beta",
        "did b",
        "git show bbbbbbbbbbbb -- shared.rs",
    ] {
        assert!(a.approval_context.contains(needle), "{needle} missing:\n{}", a.approval_context);
    }
    assert!(!a.approval_context.contains("b.rs\n"), "only the conflicting file");
}

#[test]
fn escalate_approve_keeps_the_merged_result_and_is_not_the_phase_approval() {
    let mut state = escalated();
    ok(&mut state, &approval(1, ApprovalDecision::Approve, ""));
    assert_eq!(state.step_status("1.1"), StepStatus::Complete);
    assert_eq!(state.approval_results[0].team_step, "1.1");
    assert_eq!(dispatch_ids(&state), ["2.1"], "the phase advanced");
    // A phase that also requires its own approval still asks for it.
    let team =
        team_step("1.1", vec![member("1.1.a", "alpha", &[]), member("1.1.b", "beta", &[])], "concatenate", "escalate");
    let mut p = phase(1, vec![team]);
    p.approval_required = true;
    let mut state = started(vec![p]);
    ok(&mut state, &member_record("1.1.a", "alpha", "a", &["s"], ""));
    ok(&mut state, &member_record("1.1.b", "beta", "b", &["s"], ""));
    ok(&mut state, &approval(1, ApprovalDecision::Approve, ""));
    assert_eq!(state.status, ExecutionStatus::ApprovalPending);
    let Action::Approval(a) = next_action(&state) else { panic!() };
    assert_eq!(a.message, "Approve phase 1 (P1).");
}

#[test]
fn escalate_reject_fails_the_step() {
    let mut state = escalated();
    ok(&mut state, &approval(1, ApprovalDecision::Reject, "no"));
    assert_eq!(state.step_status("1.1"), StepStatus::Failed);
    assert_eq!(state.status, ExecutionStatus::Failed);
    assert!(state.failure.as_deref().unwrap().contains("conflict rejected"), "{:?}", state.failure);
}

#[test]
fn escalate_approve_with_feedback_adds_a_resolution_step_with_the_feedback() {
    let mut state = escalated();
    ok(&mut state, &approval(1, ApprovalDecision::ApproveWithFeedback, "keep beta's version of the parser"));
    assert_eq!(state.step_status("1.1"), StepStatus::Complete);
    let ds = dispatches(&state);
    assert_eq!(ds.len(), 1, "{ds:?}");
    assert_eq!((ds[0].step_id.as_str(), ds[0].agent_name.as_str()), ("1.3", "alpha"));
    assert!(
        ds[0].delegation_prompt.contains("Resolve the conflict of team step 1.1 in shared.rs: keep beta's version"),
        "{}",
        ds[0].delegation_prompt
    );
    assert_eq!(state.amendments.last().unwrap().trigger, "team_conflict");
    ok(&mut state, &record("1.3", RecordStatus::Complete));
    assert_eq!(dispatch_ids(&state), ["2.1"]);
}

#[test]
fn escalate_without_an_overlap_completes() {
    let mut state = two_members("concatenate", "escalate");
    ok(&mut state, &member_record("1.1.a", "alpha", "a", &["a"], ""));
    ok(&mut state, &member_record("1.1.b", "beta", "b", &["b"], ""));
    assert_eq!(state.step_status("1.1"), StepStatus::Complete);
    assert_eq!(state.status, ExecutionStatus::Running);
}

#[test]
fn a_failed_gate_re_dispatches_the_last_member_with_the_gate_output() {
    let team = team_step(
        "1.1",
        vec![member("1.1.a", "alpha", &[]), member("1.1.b", "beta", &[])],
        "concatenate",
        "auto_merge",
    );
    let mut p = phase(1, vec![team]);
    p.gate = Some(gate("cargo test"));
    let mut state = started(vec![p]);
    ok(&mut state, &member_record("1.1.a", "alpha", "a", &[], ""));
    ok(&mut state, &member_record("1.1.b", "beta", "b", &[], ""));
    assert_eq!(state.status, ExecutionStatus::GatePending);
    ok(&mut state, &gate_result(1, false, "test parse ... FAILED"));
    assert_eq!(state.counters.steps_done, 0);
    let ds = dispatches(&state);
    assert_eq!(ds.iter().map(|d| d.step_id.as_str()).collect::<Vec<_>>(), ["1.1.b"]);
    assert!(ds[0].delegation_prompt.contains("test parse ... FAILED"), "{}", ds[0].delegation_prompt);
    ok(&mut state, &member_record("1.1.b", "beta", "b2", &[], ""));
    assert_eq!(state.step_status("1.1"), StepStatus::Complete);
    assert_eq!(state.counters.steps_done, 1);
    assert_eq!(state.status, ExecutionStatus::GatePending);
}

#[test]
fn a_failed_gate_re_dispatches_the_synthesis_of_an_agent_synthesis_team() {
    let team = team_step("1.1", vec![member("1.1.a", "alpha", &[])], "agent_synthesis", "auto_merge");
    let mut p = phase(1, vec![team]);
    p.gate = Some(gate("cargo test"));
    let mut state = started(vec![p]);
    ok(&mut state, &member_record("1.1.a", "alpha", "a", &[], ""));
    ok(&mut state, &member_record("1.1.synthesis", "reviewer", "s", &[], ""));
    ok(&mut state, &gate_result(1, false, "still red"));
    let ds = dispatches(&state);
    assert_eq!(ds.iter().map(|d| d.step_id.as_str()).collect::<Vec<_>>(), ["1.1.synthesis"]);
    assert!(ds[0].delegation_prompt.contains("still red"), "{}", ds[0].delegation_prompt);
    assert_eq!(ds[0].attempt, 2);
}

#[test]
fn invalid_teams_are_refused_with_every_problem() {
    let mut bad = team_step(
        "1.1",
        vec![
            member("1.1.a", "alpha", &["1.1.b"]),
            member("1.1.b", "beta", &["1.1.a"]),
            member("1.2", "gamma", &["9.9"]),
        ],
        "vote",
        "shrug",
    );
    bad.team[0].extra.insert("deliverables".into(), serde_json::json!(["../escape.md"]));
    let other = team_step("1.3", vec![member("1.1.a", "alpha", &[])], "concatenate", "auto_merge");
    let Err(EngineError::InvalidPlan(problems)) =
        start(plan_of(vec![phase(1, vec![bad, step("1.2", &[]), other])]), T0)
    else {
        panic!("accepted")
    };
    let text: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
    let text = text.join("\n");
    for needle in [
        "synthesis strategy \"vote\"",
        "conflict_handling \"shrug\"",
        "member 1.2: member_id is also a step id",
        "depends_on names 9.9, which is not a member of this step",
        "member dependency cycle: 1.1.a -> 1.1.b -> 1.1.a",
        "deliverables entry \"../escape.md\"",
        "step 1.3, member 1.1.a: member_id is used by another team step",
    ] {
        assert!(text.contains(needle), "{needle} missing from:\n{text}");
    }
}

/// A fresh-user tester's plan: a step with the id `1.1.synthesis` beside team step `1.1`
/// passed validation, was never run, and was marked complete with the synthesis's result
/// (the execution completed at "1/2 steps done"). The id is the synthesis's.
#[test]
fn a_step_with_a_team_steps_synthesis_id_is_refused() {
    for strategy in ["agent_synthesis", "concatenate"] {
        let team = team_step("1.1", vec![member("1.1.a", "alpha", &[])], strategy, "auto_merge");
        let Err(EngineError::InvalidPlan(problems)) =
            start(plan_of(vec![phase(1, vec![team, step("1.1.synthesis", &[])])]), T0)
        else {
            panic!("{strategy}: accepted")
        };
        let text: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
        assert!(
            text.iter().any(|t| t.contains("step id 1.1.synthesis is reserved for the synthesis of team step 1.1")),
            "{strategy}: {text:?}"
        );
    }
    let team = team_step("1.1", vec![member("1.1.a", "alpha", &[])], "agent_synthesis", "auto_merge");
    assert!(start(plan_of(vec![phase(1, vec![team, step("1.2.synthesis", &[])])]), T0).is_ok());
}

#[test]
fn renumbering_after_an_amendment_moves_the_members_of_later_team_steps() {
    let team = team_step(
        "2.1",
        vec![member("2.1.a", "alpha", &[]), member("2.1.b", "beta", &["2.1.a"])],
        "concatenate",
        "auto_merge",
    );
    let mut state = started(vec![phase(1, vec![step("1.1", &[])]), phase(2, vec![team])]);
    let mut inserted = PlanPhase::new(0, "Inserted");
    inserted.steps.push(Box::new(PlanStep::new("", "dev", "more")));
    ok(
        &mut state,
        &ev(EventKind::Amended {
            description: "more".into(),
            trigger: "manual".into(),
            phases: vec![inserted],
            after_phase: None,
            steps: vec![],
        }),
    );
    let moved = &state.plan.phases[2].steps[0];
    assert_eq!(moved.step_id, "3.1");
    assert_eq!(moved.team[0].member_id, "3.1.a");
    assert_eq!(moved.team[1].depends_on, ["3.1.a"]);
    assert_eq!(state.team_parent("3.1.b"), Some("3.1"));
    ok(&mut state, &record("1.1", RecordStatus::Complete));
    ok(&mut state, &record("2.1", RecordStatus::Complete));
    assert_eq!(dispatch_ids(&state), ["3.1.a"]);
}

#[test]
fn members_reserve_their_forecast_under_the_ceiling_and_a_member_that_does_not_fit_parks_the_execution() {
    use crate::model::budget::StepForecast;
    let team = team_step(
        "1.1",
        vec![member("1.1.a", "alpha", &[]), member("1.1.b", "beta", &[]), member("1.1.c", "gamma", &[])],
        "concatenate",
        "auto_merge",
    );
    let mut state = started(vec![phase(1, vec![team])]);
    let f = StepForecast { low_usd: 0.2, mid_usd: 0.4, high_usd: 0.8, samples: 0, basis: "test".into() };
    let steps = [("1.1".to_string(), f)].into_iter().collect();
    ok(&mut state, &ev(EventKind::Forecasted { steps, default_usd: 0.4 }));
    ok(&mut state, &ev(EventKind::BudgetSet { ceiling_usd: Some(1.0), source: "test".into() }));
    // Each member is forecast at the default ($0.40): two fit under $1.00, the third does not.
    assert_eq!(dispatch_ids(&state), ["1.1.a", "1.1.b"]);
    ok(&mut state, &member_dispatched("1.1.a", "alpha"));
    ok(&mut state, &member_dispatched("1.1.b", "beta"));
    let err = refused(&mut state, &member_dispatched("1.1.c", "gamma"));
    assert!(matches!(err, EngineError::OverBudget { ref step_id, .. } if step_id == "1.1.c"), "{err}");
    ok(&mut state, &member_record("1.1.a", "alpha", "a", &[], ""));
    ok(&mut state, &member_record("1.1.b", "beta", "b", &[], ""));
    assert_eq!(state.status, ExecutionStatus::BudgetExceeded, "1.1.c cannot be afforded: $1.00 spent");
    let Action::Budget(b) = next_action(&state) else { panic!("{:?}", next_action(&state)) };
    assert_eq!(b.step_id, "1.1.c");
    ok(&mut state, &ev(EventKind::BudgetRaised { by_usd: 1.0 }));
    assert_eq!(dispatch_ids(&state), ["1.1.c"]);
}

// ---------------------------------------------------------------------------------------------
// Property: random team shapes driven by random member events
// ---------------------------------------------------------------------------------------------

mod props {
    use proptest::prelude::*;
    use proptest::test_runner::Config;

    use super::*;

    /// A team step 1.1 of `n` members (each depending on a random earlier one, or not), with a
    /// lead holding a sub-team when `nested`, then a plain step 1.2 after it and a phase 2.
    fn plan(n: usize, deps: &[Option<usize>], nested: bool, strategy: &str, handling: &str) -> ExecutionState {
        let ids: Vec<String> = (0..n).map(|i| format!("1.1.{}", (b'a' + i as u8) as char)).collect();
        let mut members: Vec<TeamMember> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| {
                let dep: Vec<&str> =
                    deps.get(i).copied().flatten().filter(|d| *d < i).map(|d| ids[d].as_str()).into_iter().collect();
                member(id, &format!("agent-{i}"), &dep)
            })
            .collect();
        if nested {
            members[0].role = "lead".into();
            members[0].sub_team = vec![member("1.1.a.x", "sub", &[])];
        }
        let mut p = phase(1, vec![team_step("1.1", members, strategy, handling), step("1.2", &["1.1"])]);
        p.gate = Some(gate("make test"));
        started(vec![p, phase(2, vec![step("2.1", &[])])])
    }

    fn candidates(state: &ExecutionState, n: usize) -> Vec<Event> {
        let mut out = Vec::new();
        match state.status {
            ExecutionStatus::Running => {
                let Some(phase) = state.current() else {
                    out.push(ev(EventKind::Completed));
                    return out;
                };
                for id in team::dispatch_ids(phase) {
                    let agent = team::work_step(state, &id).map(|s| s.agent_name.clone()).unwrap_or_default();
                    out.push(member_dispatched(&id, &agent));
                    let file = format!("f{}.rs", n % 3);
                    out.push(member_record(&id, &agent, &format!("out {n}"), &[file.as_str()], &format!("c{n}")));
                    out.push(failed_record(&id, &format!("err {n}")));
                }
            }
            ExecutionStatus::Failed => {
                for s in state.current().map(|p| p.steps.clone()).unwrap_or_default() {
                    out.push(ev(EventKind::StepRetried { step_id: s.step_id.clone() }));
                    for id in team::unit_ids(&s) {
                        out.push(ev(EventKind::StepRetried { step_id: id }));
                    }
                }
            }
            ExecutionStatus::ApprovalPending => {
                let phase_id = state.pending_approval_request.as_ref().map_or(1, |r| r.phase_id);
                out.push(approval(phase_id, ApprovalDecision::Approve, ""));
                out.push(approval(phase_id, ApprovalDecision::Reject, "no"));
                out.push(approval(phase_id, ApprovalDecision::ApproveWithFeedback, &format!("fix {n}")));
            }
            ExecutionStatus::GatePending | ExecutionStatus::GateFailed => {
                let phase_id = state.current().map_or(1, |p| p.phase_id);
                out.push(gate_result(phase_id, true, "ok"));
                out.push(gate_result(phase_id, false, "red"));
            }
            _ => {}
        }
        out
    }

    fn check(state: &ExecutionState) -> Result<(), TestCaseError> {
        let done = state.plan.steps().filter(|(_, s)| state.step_status(&s.step_id).is_done()).count() as u64;
        prop_assert_eq!(state.counters.steps_done, done, "steps_done counts plan steps only");
        let team = &state.plan.phases[0].steps[0];
        let parent = state.step_status("1.1");
        let units = team::unit_ids(team);
        if units.iter().any(|u| state.step_status(u) == StepStatus::Dispatched) {
            prop_assert_eq!(parent, StepStatus::Dispatched, "a member in flight keeps the team step dispatched");
        }
        if parent == StepStatus::Complete {
            prop_assert!(units.iter().all(|u| state.step_status(u).is_done()), "complete before its members");
        }
        if let (Action::Wait { message, .. }, Some(phase)) = (next_action(state), state.current()) {
            let running = team::dispatch_ids(phase).iter().any(|id| state.step_status(id) == StepStatus::Dispatched);
            prop_assert!(running, "WAIT with nothing in flight (a driver would stop): {}", message);
        }
        for a in next_actions(state) {
            let Action::Dispatch(d) = a else { continue };
            prop_assert_eq!(d.is_team_member, state.team_parent(&d.step_id).is_some());
            prop_assert!(d.step_id != "1.1", "the team step itself is never dispatched");
            prop_assert!(state.step_status(&d.step_id) == StepStatus::Pending, "{} offered twice", d.step_id);
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(Config { cases: 96, failure_persistence: None, ..Config::default() })]

        #[test]
        fn random_member_events_keep_the_team_invariants_and_replay(
            n in 1usize..=4,
            deps in prop::collection::vec(prop::option::of(0usize..4), 4),
            nested in prop::bool::ANY,
            strategy in prop::sample::select(vec!["concatenate", "merge_files", "agent_synthesis"]),
            handling in prop::sample::select(vec!["auto_merge", "escalate", "fail"]),
            choices in prop::collection::vec(any::<u32>(), 1..80),
        ) {
            let mut state = plan(n, &deps, nested, strategy, handling);
            let plan = state.plan.clone();
            let mut journal: Vec<Event> = Vec::new();
            for (i, choice) in choices.iter().enumerate() {
                let options = candidates(&state, i);
                if options.is_empty() {
                    break;
                }
                let event = options[*choice as usize % options.len()].clone();
                let before = state.clone();
                match apply(&mut state, &event, T0) {
                    Ok(applied) => journal.push(event.with_key(applied.key)),
                    Err(_) => prop_assert_eq!(&state, &before, "a refused event changed the state"),
                }
                check(&state)?;
            }
            let rebuilt = replay(plan, T0, journal.iter().map(|e| (e, T0))).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(rebuilt, state);
        }
    }
}

#[test]
fn members_and_the_synthesis_get_the_team_steps_mcp_servers() {
    let mut team = team_step("1.1", vec![member("1.1.a", "alpha", &[])], "agent_synthesis", "auto_merge");
    team.mcp_servers = vec!["github".into()];
    let state = started(vec![phase(1, vec![team])]);
    for id in ["1.1.a", "1.1.synthesis"] {
        let step = team::work_step(&state, id).unwrap();
        assert_eq!(step.mcp_servers, ["github"], "{id}");
    }
}

#[test]
fn a_dispatch_carries_the_steps_mcp_servers_and_a_members_carries_its_teams() {
    let mut team = team_step("1.1", vec![member("1.1.a", "alpha", &[])], "concatenate", "auto_merge");
    team.mcp_servers = vec!["github".into()];
    let mut plain = step("1.2", &[]);
    plain.mcp_servers = vec!["docs".into(), "github".into()];
    let state = started(vec![phase(1, vec![team, plain, step("1.3", &[])])]);
    let by_id: std::collections::BTreeMap<String, Vec<String>> =
        dispatches(&state).into_iter().map(|d| (d.step_id, d.mcp_servers)).collect();
    assert_eq!(by_id["1.1.a"], ["github"]);
    assert_eq!(by_id["1.2"], ["docs", "github"]);
    assert!(by_id["1.3"].is_empty());
}

fn member_quota_wait(id: &str, agent: &str) -> Event {
    ev(EventKind::QuotaWait {
        step_id: id.into(),
        agent_name: agent.into(),
        account: "claude".into(),
        until: "2026-12-02T16:00:00+00:00".into(),
        reason: "Claude AI usage limit reached".into(),
        cost_usd: 0.1,
        tokens: 5,
    })
}

/// Issue 18.1 for teams: a member stopped on its account's limit waits like a plain step — no
/// failed member, no failed team step, a WAIT naming the reset while its sibling goes on — and
/// is offered again (a new attempt) once resumed.
#[test]
fn a_member_stopped_on_its_quota_waits_and_is_dispatched_again_once_resumed() {
    let mut state = two_members("concatenate", "auto_merge");
    ok(&mut state, &member_dispatched("1.1.a", "alpha"));
    ok(&mut state, &member_dispatched("1.1.b", "beta"));
    ok(&mut state, &member_quota_wait("1.1.a", "alpha"));
    assert_eq!(state.step_status("1.1.a"), StepStatus::Pending);
    assert_ne!(state.step_status("1.1"), StepStatus::Failed);
    assert!(state.failure.is_none());
    assert!((state.counters.spend_usd - 0.1).abs() < 1e-9, "the stopped attempt's spend counts");
    assert!(dispatches(&state).is_empty(), "a waiting member is not offered");
    ok(&mut state, &member_record("1.1.b", "beta", "b done", &["b.rs"], "bbb"));
    let Action::Wait { message, until } = next_action(&state) else { panic!("{:?}", next_action(&state)) };
    assert_eq!(until.as_deref(), Some("2026-12-02T16:00:00+00:00"));
    assert!(message.contains("1.1.a") && message.contains("claude quota"), "{message}");
    ok(&mut state, &ev(EventKind::QuotaResumed { step_id: "1.1.a".into() }));
    let ds = dispatches(&state);
    assert_eq!(ds.iter().map(|d| (d.step_id.as_str(), d.attempt)).collect::<Vec<_>>(), [("1.1.a", 2)]);
    ok(&mut state, &member_dispatched("1.1.a", "alpha"));
    ok(&mut state, &member_record("1.1.a", "alpha", "a done", &["a.rs"], "aaa"));
    assert_eq!(state.step_status("1.1"), StepStatus::Complete);
}

#[test]
fn member_quota_events_are_checked_like_a_steps() {
    let mut state = two_members("concatenate", "auto_merge");
    let err = refused(&mut state, &ev(EventKind::QuotaResumed { step_id: "1.1.a".into() }));
    assert!(err.to_string().contains("does not wait for quota"), "{err}");
    let mut blank = member_quota_wait("1.1.a", "alpha");
    if let EventKind::QuotaWait { until, .. } = &mut blank.kind {
        *until = " ".into();
    }
    let err = refused(&mut state, &blank);
    assert!(err.to_string().contains("until"), "{err}");
    let err = refused(&mut state, &member_quota_wait("1.1", "team-lead"));
    assert!(err.to_string().contains("team step"), "{err}");
}
