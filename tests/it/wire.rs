//! Golden files of the `ACTION:` text wire format, one per action type
//! (`tests/golden/wire/<type>.txt`; `BATON_BLESS=1` rewrites them after a deliberate change).

use baton::cli::wire::render;
use baton::engine::{apply, next_action, start};
use baton::model::action::{Action, ActionType};
use baton::model::event::{Event, EventKind, RecordStatus};
use baton::model::plan::MachinePlan;
use baton::model::state::ExecutionState;

const T: &str = "2026-01-15T09:00:00+00:00";

fn plan(json: serde_json::Value) -> MachinePlan {
    MachinePlan::from_value(json).unwrap()
}

fn two_step_plan(extra_phase: serde_json::Value) -> MachinePlan {
    let mut phase = serde_json::json!({"phase_id": 1, "name": "Build", "steps": [
        {"step_id": "1.1", "agent_name": "architect", "model": "opus", "task_description": "Design the schema.",
         "deliverables": ["docs/schema.md"], "allowed_paths": ["docs/"], "expected_outcome": "A schema."},
        {"step_id": "1.2", "agent_name": "backend-engineer", "task_description": "Implement it.", "depends_on": ["1.1"]}
    ]});
    if let (Some(p), Some(extra)) = (phase.as_object_mut(), extra_phase.as_object()) {
        p.extend(extra.clone());
    }
    plan(serde_json::json!({"task_id": "wire-1", "task_summary": "Golden wire format", "phases": [phase]}))
}

fn record(state: &mut ExecutionState, step: &str, status: RecordStatus) {
    let ev = Event::new(EventKind::StepRecorded {
        step_id: step.into(),
        agent_name: "agent".into(),
        status,
        outcome: format!("Finished {step}."),
        files_changed: vec![],
        commit_hash: String::new(),
        tokens: 100,
        cost_usd: 0.25,
        duration_seconds: 3.0,
        error: if status == RecordStatus::Failed { "exit code 1".into() } else { String::new() },
        usage: None,
    });
    apply(state, &ev, T).unwrap();
}

fn actions() -> Vec<Action> {
    let mut out = Vec::new();
    let mut s = start(two_step_plan(serde_json::json!({})), T).unwrap();
    out.push(next_action(&s)); // dispatch
    apply(&mut s, &Event::new(EventKind::StepDispatched { step_id: "1.1".into(), agent_name: "architect".into() }), T)
        .unwrap();
    out.push(next_action(&s)); // wait
    record(&mut s, "1.1", RecordStatus::Failed);
    out.push(next_action(&s)); // failed

    let mut s =
        start(two_step_plan(serde_json::json!({"gate": {"gate_type": "test", "command": "cargo test"}})), T).unwrap();
    record(&mut s, "1.1", RecordStatus::Complete);
    record(&mut s, "1.2", RecordStatus::Complete);
    out.push(next_action(&s)); // gate
    apply(
        &mut s,
        &Event::new(EventKind::GateRecorded {
            phase_id: 1,
            passed: true,
            output: String::new(),
            command: None,
            exit_code: Some(0),
        }),
        T,
    )
    .unwrap();
    out.push(next_action(&s)); // complete

    let mut s = start(
        two_step_plan(serde_json::json!({"approval_required": true, "approval_description": "Check the schema."})),
        T,
    )
    .unwrap();
    record(&mut s, "1.1", RecordStatus::Complete);
    record(&mut s, "1.2", RecordStatus::Complete);
    out.push(next_action(&s)); // approval

    let q = serde_json::json!({"feedback_questions": [{"question_id": "q1", "question": "Strict or lax?",
        "context": "Strict catches bugs.", "options": ["Strict", "Lax"], "option_agents": ["a", "b"]}]});
    let mut s = start(two_step_plan(q), T).unwrap();
    record(&mut s, "1.1", RecordStatus::Complete);
    record(&mut s, "1.2", RecordStatus::Complete);
    out.push(next_action(&s)); // feedback

    let p = plan(
        serde_json::json!({"task_id": "wire-1", "task_summary": "s", "phases": [{"phase_id": 1, "name": "Talk",
        "steps": [{"step_id": "1.1", "agent_name": "pm", "task_description": "Clarify.", "interactive": true, "max_turns": 4}]}]}),
    );
    let mut s = start(p, T).unwrap();
    let ev = Event::new(EventKind::StepRecorded {
        step_id: "1.1".into(),
        agent_name: "pm".into(),
        status: RecordStatus::Interacting,
        outcome: "Which database should I use?".into(),
        files_changed: vec![],
        commit_hash: String::new(),
        tokens: 0,
        cost_usd: 0.0,
        duration_seconds: 0.0,
        error: String::new(),
        usage: None,
    });
    apply(&mut s, &ev, T).unwrap();
    out.push(next_action(&s)); // interact

    let phases: Vec<serde_json::Value> = (1..=4)
        .map(|i| {
            serde_json::json!({"phase_id": i, "name": format!("P{i}"),
            "steps": [{"step_id": format!("{i}.1"), "agent_name": "dev", "task_description": format!("Do {i}.")}]})
        })
        .collect();
    let mut s =
        start(plan(serde_json::json!({"task_id": "wire-1", "task_summary": "Four phases", "phases": phases})), T)
            .unwrap();
    for i in 1..=3 {
        record(&mut s, &format!("{i}.1"), RecordStatus::Complete);
    }
    out.push(next_action(&s)); // checkpoint

    let mut s = start(two_step_plan(serde_json::json!({})), T).unwrap();
    let forecast = serde_json::json!({"kind": "forecasted", "steps": {
        "1.1": {"low_usd": 0.25, "mid_usd": 0.5, "high_usd": 1.0, "samples": 0, "basis": "default"}}, "default_usd": 0.25});
    apply(&mut s, &serde_json::from_value::<Event>(forecast).unwrap(), T).unwrap();
    let ceiling = EventKind::BudgetSet { ceiling_usd: Some(0.4), source: "--max-spend-usd".into() };
    apply(&mut s, &Event::new(ceiling), T).unwrap();
    out.push(next_action(&s)); // budget
    out
}

#[test]
fn every_action_type_matches_its_golden_file() {
    let actions = actions();
    let mut seen: Vec<ActionType> = actions.iter().map(Action::action_type).collect();
    seen.sort_by_key(|t| t.upper());
    seen.dedup();
    assert_eq!(seen.len(), 10, "one example per action type: {seen:?}");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/wire");
    let bless = std::env::var("BATON_BLESS").is_ok_and(|v| v == "1");
    for action in &actions {
        let name = action.action_type().upper().to_lowercase();
        let text = render(action, "wire-1");
        let path = dir.join(format!("{name}.txt"));
        if bless {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &text).unwrap();
            continue;
        }
        let golden = std::fs::read_to_string(&path)
            .unwrap_or_else(|_| panic!("missing {} (BATON_BLESS=1 writes it)", path.display()));
        assert_eq!(text, golden, "wire format of {name} changed (BATON_BLESS=1 to accept)");
    }
}

#[test]
fn json_form_uses_lowercase_action_type() {
    for action in actions() {
        let v = serde_json::to_value(&action).unwrap();
        let t = v["action_type"].as_str().unwrap();
        assert_eq!(t, action.action_type().upper().to_lowercase());
        let back: Action = serde_json::from_value(v).unwrap();
        assert_eq!(back, action);
    }
}
