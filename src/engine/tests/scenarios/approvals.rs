//! APPROVAL and FEEDBACK scenarios: phase and pre-flight approvals, approve / reject / feedback,
//! knowledge gaps and scope expansions, the phase-end order, and feedback answers turned into
//! phases. It never covers gates or interactive steps.

use super::*;

#[test]
fn approve_continues_to_the_next_phase() {
    let mut state = awaiting_approval();
    assert_eq!(state.status, ExecutionStatus::ApprovalPending);
    assert!(next_actions(&state).is_empty());
    let a = approval_action_of(&state);
    assert_eq!(a.phase_id, 1);
    assert!(!a.preflight);
    assert_eq!(a.approval_options, vec!["approve", "reject", "approve-with-feedback"]);
    assert!(a.approval_context.contains("### Step 1.1 (dev, complete)\ndid 1.1"), "{}", a.approval_context);
    let pending = state.pending_approval_request.clone().unwrap();
    assert_eq!((pending.phase_id, pending.preflight), (1, false));
    ok(&mut state, &approval(1, ApprovalDecision::Approve, ""));
    assert_eq!(state.pending_approval_request, None);
    assert_eq!((state.status, state.current_phase), (ExecutionStatus::Running, 1));
}

#[test]
fn knowledge_gaps_and_deviations_are_kept_and_gaps_reach_the_next_approval() {
    let mut p = approval_phase(vec![step("1.1", &[]), step("1.2", &[])]);
    p.approval_description = "Check the schema".into();
    let mut state = started(vec![p, phase(2, vec![step("2.1", &[])])]);
    let mut e = record("1.1", RecordStatus::Complete);
    if let EventKind::StepRecorded { outcome, .. } = &mut e.kind {
        *outcome = "Done.\nKNOWLEDGE_GAP: which database?\n## Deviations\nUsed SQLite.".into();
    }
    ok(&mut state, &e);
    ok(&mut state, &record("1.2", RecordStatus::Complete));
    let r = state.result("1.1").unwrap();
    assert_eq!(r.knowledge_gaps, ["which database?"]);
    assert_eq!(r.deviations, ["Used SQLite."]);
    let a = approval_action_of(&state);
    assert!(
        a.approval_context
            .starts_with("Check the schema\n\n## Knowledge gaps the agents reported\n\n- 1.1 (dev): which database?"),
        "{}",
        a.approval_context
    );
    // Survives a replay: it is derived from the journal.
    let json = serde_json::to_string(&state).unwrap();
    let back: ExecutionState = serde_json::from_str(&json).unwrap();
    assert_eq!(back.result("1.1").unwrap().deviations, ["Used SQLite."]);
}

#[test]
fn scope_expansions_become_phases_appended_when_their_phase_ends_at_most_three() {
    let mut state = started(vec![phase(1, vec![step("1.1", &[]), step("1.2", &[])]), phase(2, vec![step("2.1", &[])])]);
    let mut e = record("1.1", RecordStatus::Complete);
    if let EventKind::StepRecorded { outcome, .. } = &mut e.kind {
        *outcome = "Done.\nSCOPE_EXPANSION: migrate the old table\nSCOPE_EXPANSION: document the API".into();
    }
    ok(&mut state, &e);
    assert_eq!(state.plan.phases.len(), 2, "nothing is appended before the phase ends");
    let mut e = record("1.2", RecordStatus::Complete);
    if let EventKind::StepRecorded { outcome, .. } = &mut e.kind {
        *outcome =
            "SCOPE_EXPANSION: Migrate the old table\nSCOPE_EXPANSION: add metrics\nSCOPE_EXPANSION: and a fourth"
                .into();
    }
    ok(&mut state, &e);
    let names: Vec<(i64, String)> = phase_names(&state);
    assert_eq!(
        names,
        vec![
            (1, "P1".into()),
            (2, "P2".into()),
            (3, "Scope expansion".into()),
            (4, "Scope expansion".into()),
            (5, "Scope expansion".into())
        ]
    );
    assert_eq!(state.current_phase, 1, "phase 2 runs next; the expansions after it");
    let step = &state.plan.phases[2].steps[0];
    assert_eq!(step.step_id, "3.1");
    assert_eq!(step.task_description, "Scope expansion reported by step 1.1: migrate the old table");
    let triggers: Vec<&str> = state.amendments.iter().map(|a| a.trigger.as_str()).collect();
    assert_eq!(triggers, ["scope_expansion"; 3]);
    assert!(state.plan.phases[2].approval_required, "a human reviews work an agent added");
    assert_eq!(
        state.amendments[2].description, "Scope expansion from step 1.2: add metrics",
        "the repeat is one phase"
    );
    assert_eq!(
        state.result("1.2").unwrap().scope_expansions,
        ["Migrate the old table", "add metrics", "and a fourth"],
        "kept on the result"
    );
}

#[test]
fn approval_description_is_the_context_when_set() {
    let mut p = approval_phase(vec![step("1.1", &[])]);
    p.approval_description = "Check the schema".into();
    let mut state = started(vec![p]);
    ok(&mut state, &record("1.1", RecordStatus::Complete));
    assert_eq!(approval_action_of(&state).approval_context, "Check the schema");
}

#[test]
fn reject_fails_the_execution_naming_the_phase() {
    let mut state = awaiting_approval();
    ok(&mut state, &approval(1, ApprovalDecision::Reject, "wrong design").by("alice"));
    assert_eq!(state.status, ExecutionStatus::Failed);
    assert_eq!(state.pending_approval_request, None);
    assert_eq!(failed_summary(&state), "phase 1 was rejected by alice: wrong design; amend the plan to continue");
}

/// Found by a tester: after alice's rejection, skipping an unrelated step of phase 2 reopened
/// the execution, which asked for phase 1's approval again, and mallory approved it. A
/// rejection stands: a skip, a retry or another approval is refused naming it, and only an
/// amendment goes on (after which a later failure reopens as any failure does).
#[test]
fn a_rejection_stands_until_the_plan_is_amended() {
    let mut state = awaiting_approval();
    ok(&mut state, &approval(1, ApprovalDecision::Reject, "wrong design").by("alice"));
    assert_eq!(state.rejected_phase, Some(1));
    for event in [
        ev(EventKind::StepSkipped { step_id: "2.1".into(), reason: "x".into() }),
        ev(EventKind::StepRetried { step_id: "1.1".into() }),
        approval(1, ApprovalDecision::Approve, "").by("mallory"),
    ] {
        let err = refused(&mut state, &event);
        assert_eq!(
            err,
            EngineError::RejectionStands {
                phase_id: 1,
                reason: "phase 1 was rejected by alice: wrong design; amend the plan to continue".into()
            },
            "{}",
            event.kind.name()
        );
        assert!(err.to_string().contains("amend the plan to go on"), "{err}");
    }
    // The rework goes into the rejected phase, whose approval is asked again once it is done.
    let add = crate::model::event::AddedStep { phase_id: 1, step: step("1.3", &[]) };
    ok(
        &mut state,
        &ev(EventKind::Amended {
            description: "redo the design".into(),
            trigger: "manual".into(),
            phases: vec![],
            after_phase: None,
            steps: vec![add],
        }),
    );
    assert_eq!(state.status, ExecutionStatus::Running);
    assert_eq!(state.rejected_phase, None);
    ok(&mut state, &record("1.3", RecordStatus::Failed));
    assert_eq!(state.status, ExecutionStatus::Failed);
    ok(&mut state, &ev(EventKind::StepRetried { step_id: "1.3".into() }));
    assert_eq!(state.status, ExecutionStatus::Running, "a step's failure still reopens on a retry");
    ok(&mut state, &record("1.3", RecordStatus::Complete));
    assert_eq!(state.status, ExecutionStatus::ApprovalPending, "phase 1 is asked again, after its rework");
}

#[test]
fn approve_with_feedback_inserts_a_remediation_phase_for_the_first_agent() {
    let mut state = awaiting_approval();
    ok(&mut state, &approval(1, ApprovalDecision::ApproveWithFeedback, "add docs"));
    assert_eq!(phase_names(&state), vec![(1, "P1".to_string()), (2, "Remediation".to_string()), (3, "P2".to_string())]);
    assert_eq!(state.plan.phases[2].steps[0].step_id, "3.1", "the old phase 2 was renumbered");
    assert_eq!(state.current_phase, 1);
    let d = dispatch_of(&state, "2.1");
    assert_eq!(d.agent_name, "architect");
    assert!(d.delegation_prompt.contains("Address feedback from phase 1 review: add docs"), "{}", d.delegation_prompt);
    let a = state.amendments.last().unwrap();
    assert_eq!(
        (a.trigger.as_str(), a.phases_added.clone(), a.steps_added.clone()),
        ("approval_feedback", vec![2], vec!["2.1".to_string()])
    );
    assert_eq!(a.feedback, "add docs");
}

#[test]
fn preflight_approval_only_for_high_and_critical_plans() {
    for (risk, preflight) in [("LOW", false), ("MEDIUM", false), ("HIGH", true), ("CRITICAL", true), ("high", true)] {
        let mut plan = plan_of(vec![phase(1, vec![step("1.1", &[])])]);
        plan.risk_level = risk.into();
        let state = start(plan, T0).unwrap();
        if preflight {
            assert_eq!(state.status, ExecutionStatus::ApprovalPending, "{risk}");
            let a = approval_action_of(&state);
            assert!(a.preflight, "{risk}");
            assert_eq!(a.phase_id, 1);
            assert!(
                a.approval_context.starts_with(&format!("Pre-flight approval: this plan is {risk} risk.")),
                "{}",
                a.approval_context
            );
            assert!(next_actions(&state).is_empty());
        } else {
            assert_eq!(state.status, ExecutionStatus::Running, "{risk}");
            assert_eq!(dispatch_ids(&state), vec!["1.1"]);
        }
    }
}

#[test]
fn preflight_approval_is_separate_from_the_phase_approval() {
    // Phase 1 has no approval of its own: the pre-flight one is asked first, and only it.
    let mut plan = plan_of(vec![phase(1, vec![step("1.1", &[])]), {
        let mut p = phase(2, vec![step("2.1", &[])]);
        p.approval_required = true;
        p
    }]);
    plan.risk_level = "HIGH".into();
    let mut state = start(plan, T0).unwrap();
    assert!(approval_action_of(&state).preflight);
    ok(&mut state, &approval(1, ApprovalDecision::Approve, ""));
    assert!(state.approval_results[0].preflight);
    assert_eq!(dispatch_ids(&state), vec!["1.1"]);
    ok(&mut state, &record("1.1", RecordStatus::Complete));
    assert_eq!(dispatch_ids(&state), vec!["2.1"], "phase 1 asks nothing more");
    ok(&mut state, &record("2.1", RecordStatus::Complete));
    assert_eq!(state.status, ExecutionStatus::ApprovalPending, "phase 2's own approval is asked");
    assert!(!approval_action_of(&state).preflight);
}

/// Issue 14.1 (seed-spec §2.1 step 2): a HIGH plan whose first phase already requires an
/// approval gets no generated pre-flight approval besides it.
#[test]
fn a_high_risk_plan_whose_first_phase_requires_approval_gets_no_second_preflight_approval() {
    for risk in ["HIGH", "CRITICAL"] {
        let mut plan = plan_of(vec![approval_phase(vec![step("1.1", &[])]), phase(2, vec![step("2.1", &[])])]);
        plan.risk_level = risk.into();
        let mut state = start(plan, T0).unwrap();
        assert_eq!(state.status, ExecutionStatus::Running, "{risk}: no pre-flight approval at start");
        assert_eq!(dispatch_ids(&state), vec!["1.1"]);
        ok(&mut state, &record("1.1", RecordStatus::Complete));
        assert_eq!(state.status, ExecutionStatus::ApprovalPending, "{risk}: phase 1's own approval");
        ok(&mut state, &approval(1, ApprovalDecision::Approve, ""));
        assert_eq!(dispatch_ids(&state), vec!["2.1"]);
        assert_eq!(state.approval_results.len(), 1, "{risk}: one approval in all");
    }
}

#[test]
fn preflight_feedback_joins_the_shared_context_and_reject_fails() {
    let mut plan = plan_of(vec![phase(1, vec![step("1.1", &[])])]);
    plan.risk_level = "CRITICAL".into();
    let mut state = start(plan.clone(), T0).unwrap();
    ok(&mut state, &approval(1, ApprovalDecision::ApproveWithFeedback, "be careful"));
    assert_eq!(state.plan.phases.len(), 1, "no Remediation phase for a pre-flight approval");
    assert!(dispatch_of(&state, "1.1")
        .delegation_prompt
        .contains("Reviewer feedback (pre-flight approval): be careful"));

    let mut state = start(plan, T0).unwrap();
    ok(&mut state, &approval(1, ApprovalDecision::Reject, ""));
    assert_eq!(state.status, ExecutionStatus::Failed);
    assert!(failed_summary(&state).starts_with("phase 1 was rejected"));
}

#[test]
fn phase_end_order_is_approval_then_feedback_then_gate() {
    let mut p = approval_phase(vec![step("1.1", &[])]);
    p.feedback_questions = vec![question("q1", &["a", "b"])];
    p.gate = Some(gate("true"));
    let mut state = started(vec![p, phase(2, vec![step("2.1", &[])])]);
    ok(&mut state, &record("1.1", RecordStatus::Complete));
    assert_eq!(action_type(&state), ActionType::Approval);
    ok(&mut state, &approval(1, ApprovalDecision::Approve, ""));
    assert_eq!(action_type(&state), ActionType::Feedback);
    ok(&mut state, &answer(1, "q1", 0));
    assert_eq!(action_type(&state), ActionType::Gate);
    ok(&mut state, &gate_result(1, true, ""));
    assert_eq!(dispatch_ids(&state), vec!["2.1"], "the feedback phase goes first");
    assert_eq!(state.plan.phases[1].name, "Feedback-Dispatch (q1)");
}

fn awaiting_feedback() -> ExecutionState {
    let mut q1 = question("q1", &["Strict", "Permissive"]);
    q1.option_agents = vec!["python-dev".into(), String::new()];
    q1.option_prompts = vec!["Apply strict validation for {task}".into()];
    let mut p = phase(1, vec![step("1.1", &[])]);
    p.feedback_questions = vec![q1, question("q2", &["x", "y", "z"])];
    let mut state = started(vec![p, phase(2, vec![step("2.1", &[])])]);
    ok(&mut state, &record("1.1", RecordStatus::Complete));
    state
}

#[test]
fn feedback_answers_insert_feedback_dispatch_phases() {
    let mut state = awaiting_feedback();
    assert_eq!(state.status, ExecutionStatus::FeedbackPending);
    assert!(next_actions(&state).is_empty());
    let Action::Feedback(f) = next_action(&state) else { panic!() };
    assert_eq!(f.feedback_questions.iter().map(|q| q.question_id.as_str()).collect::<Vec<_>>(), vec!["q1", "q2"]);

    ok(&mut state, &answer(1, "q1", 0));
    assert_eq!(state.status, ExecutionStatus::FeedbackPending, "q2 is still open");
    let Action::Feedback(f) = next_action(&state) else { panic!() };
    assert_eq!(f.feedback_questions.iter().map(|q| q.question_id.as_str()).collect::<Vec<_>>(), vec!["q2"]);
    ok(&mut state, &answer(1, "q2", 2));
    assert_eq!(
        phase_names(&state),
        vec![
            (1, "P1".to_string()),
            (2, "Feedback-Dispatch (q1)".to_string()),
            (3, "Feedback-Dispatch (q2)".to_string()),
            (4, "P2".to_string())
        ]
    );
    let s = &state.plan.phases[1].steps[0];
    assert_eq!((s.step_id.as_str(), s.agent_name.as_str()), ("2.1", "python-dev"));
    assert_eq!(s.task_description, "Apply strict validation for Build the thing");
    let s = &state.plan.phases[2].steps[0];
    assert_eq!((s.agent_name.as_str(), s.task_description.as_str()), ("backend-engineer", "z"));
    assert_eq!(state.plan.phases[3].steps[0].step_id, "4.1");
    let ids: Vec<&str> = state.feedback_results.iter().map(|f| f.dispatched_step_id.as_str()).collect();
    assert_eq!(ids, vec!["2.1", "3.1"]);
    assert_eq!(state.feedback_results[1].chosen_option, "z");
    assert_eq!(dispatch_ids(&state), vec!["2.1"]);
}

#[test]
fn feedback_option_without_agent_or_prompt_uses_defaults_and_substitutes_task() {
    let mut state = awaiting_feedback();
    ok(&mut state, &answer(1, "q1", 1));
    let s = &state.plan.phases[1].steps[0];
    assert_eq!((s.agent_name.as_str(), s.task_description.as_str()), ("backend-engineer", "Permissive"));
}

#[test]
fn bad_feedback_answers_are_errors() {
    let mut state = awaiting_feedback();
    assert_eq!(
        refused(&mut state, &answer(1, "q1", 2)),
        EngineError::OptionOutOfRange { question_id: "q1".into(), index: 2, count: 2 }
    );
    assert_eq!(
        refused(&mut state, &answer(1, "nope", 0)),
        EngineError::UnknownQuestion { phase_id: 1, question_id: "nope".into() }
    );
    assert_eq!(refused(&mut state, &answer(7, "q1", 0)), EngineError::UnknownPhase { phase_id: 7 });
    ok(&mut state, &answer(1, "q1", 0));
    assert_eq!(
        refused(&mut state, &answer(1, "q1", 1)),
        EngineError::QuestionAnswered { phase_id: 1, question_id: "q1".into() }
    );
}
