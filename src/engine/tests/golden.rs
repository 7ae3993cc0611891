//! agent-baton's golden records load into the model and re-serialize to the same JSON value.

use std::path::PathBuf;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::engine::validate;
use crate::model::plan::{
    FeedbackQuestion, MachinePlan, PlanAmendment, PlanGate, PlanPhase, PlanStep, SynthesisSpec, TeamMember,
};

/// The golden records, `tests/fixtures/agent-baton/golden` (see tests/fixtures/README.md).
fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/agent-baton/golden")
}

/// Golden record `name` as JSON; panics naming the file when it is missing or malformed.
fn read(name: &str) -> Value {
    let path = golden_dir().join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("fixture {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("fixture {}: {e}", path.display()))
}

fn round_trip<T: Serialize + DeserializeOwned>(name: &str) -> T {
    let value = read(name);
    let typed: T = serde_json::from_value(value.clone()).unwrap_or_else(|e| panic!("{name}: {e}"));
    let back = serde_json::to_value(&typed).unwrap();
    assert_eq!(diff("", &value, &back), Vec::<String>::new(), "{name} does not round-trip");
    assert_eq!(back, value, "{name}");
    typed
}

/// Paths where two JSON values differ (missing key, extra key, other value).
fn diff(path: &str, a: &Value, b: &Value) -> Vec<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut out = Vec::new();
            for (k, v) in x {
                match y.get(k) {
                    Some(w) => out.extend(diff(&format!("{path}.{k}"), v, w)),
                    None => out.push(format!("{path}.{k}: dropped")),
                }
            }
            out.extend(y.keys().filter(|k| !x.contains_key(*k)).map(|k| format!("{path}.{k}: added")));
            out
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            x.iter().zip(y).enumerate().flat_map(|(i, (v, w))| diff(&format!("{path}[{i}]"), v, w)).collect()
        }
        _ if a == b => Vec::new(),
        _ => vec![format!("{path}: {a} became {b}")],
    }
}

#[test]
fn golden_machine_plan_round_trips_reports_no_unknown_keys_and_validates() {
    let plan = round_trip::<MachinePlan>("MachinePlan.json");
    assert_eq!(plan.unknown_keys(), vec![]);
    assert_eq!(validate(&plan), Ok(()));
    assert_eq!(plan.task_id, "2026-05-18-csv-empty-header-7c1e9a42");
    assert_eq!(plan.phases.len(), 2);
    assert!(plan.phases[0].approval_required);
    assert_eq!(plan.phases[0].feedback_questions[0].question_id, "fq1");
    assert_eq!(plan.phases[0].gate.as_ref().map(|g| g.gate_type.as_str()), Some("test"));
    assert_eq!(plan.resource_limits.as_ref().map(|l| l.max_concurrent_agents), Some(8));
    // Passthrough keys are kept verbatim, typed keys are not duplicated there.
    assert_eq!(plan.extra["task_type"], "bug-fix");
    assert!(!plan.extra.contains_key("phases"));
}

#[test]
fn golden_plan_records_round_trip() {
    let phase = round_trip::<PlanPhase>("PlanPhase.json");
    assert_eq!(phase.steps.len(), 2);
    let step = round_trip::<PlanStep>("PlanStep.json");
    assert_eq!(step.team.len(), 2);
    assert!(step.synthesis.is_some());
    round_trip::<PlanGate>("PlanGate.json");
    let lead = round_trip::<TeamMember>("TeamMember.json");
    assert_eq!(lead.sub_team.len(), 2);
    round_trip::<SynthesisSpec>("SynthesisSpec.json");
    let question = round_trip::<FeedbackQuestion>("FeedbackQuestion.json");
    assert_eq!(question.options.len(), question.option_agents.len());
    round_trip::<PlanAmendment>("PlanAmendment.json");
}

#[test]
fn round_trip_detects_a_dropped_explicit_null() {
    let a: Value = serde_json::json!({"k": null, "n": [1, {"x": 2}]});
    let b: Value = serde_json::json!({"n": [1, {"x": 3}]});
    assert_eq!(diff("", &a, &b), vec![".k: dropped".to_string(), ".n[1].x: 2 became 3".to_string()]);
}
