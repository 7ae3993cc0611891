//! agent-baton's golden records load into the model and re-serialize to the same JSON value.

use std::path::PathBuf;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::engine::validate;
use crate::model::plan::{
    FeedbackQuestion, MachinePlan, PlanAmendment, PlanGate, PlanPhase, PlanStep, SynthesisSpec, TeamMember,
};

fn golden_dir() -> Option<PathBuf> {
    let base = std::env::var("BATON_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures"));
    let dir = base.join("agent-baton/golden");
    if dir.is_dir() {
        return Some(dir);
    }
    assert!(std::env::var("CI").as_deref() != Ok("true"), "golden fixtures missing at {}", dir.display());
    eprintln!("notice: golden fixtures not found at {}; skipping", dir.display());
    None
}

fn read(name: &str) -> Option<Value> {
    let dir = golden_dir()?;
    let text = std::fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    Some(serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}")))
}

fn round_trip<T: Serialize + DeserializeOwned>(name: &str) -> Option<T> {
    let value = read(name)?;
    let typed: T = serde_json::from_value(value.clone()).unwrap_or_else(|e| panic!("{name}: {e}"));
    let back = serde_json::to_value(&typed).unwrap();
    assert_eq!(diff("", &value, &back), Vec::<String>::new(), "{name} does not round-trip");
    assert_eq!(back, value, "{name}");
    Some(typed)
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
    let Some(plan) = round_trip::<MachinePlan>("MachinePlan.json") else {
        return;
    };
    assert_eq!(plan.unknown_keys(), vec![]);
    assert_eq!(validate(&plan), Ok(()));
    assert_eq!(plan.phases.len(), 2);
    assert!(plan.phases[0].approval_required);
}

#[test]
fn golden_plan_records_round_trip() {
    let Some(phase) = round_trip::<PlanPhase>("PlanPhase.json") else {
        return;
    };
    assert!(!phase.steps.is_empty());
    round_trip::<PlanStep>("PlanStep.json");
    round_trip::<PlanGate>("PlanGate.json");
    round_trip::<TeamMember>("TeamMember.json");
    round_trip::<SynthesisSpec>("SynthesisSpec.json");
    round_trip::<FeedbackQuestion>("FeedbackQuestion.json");
    round_trip::<PlanAmendment>("PlanAmendment.json");
}

#[test]
fn round_trip_detects_a_dropped_explicit_null() {
    let a: Value = serde_json::json!({"k": null, "n": [1, {"x": 2}]});
    let b: Value = serde_json::json!({"n": [1, {"x": 3}]});
    assert_eq!(diff("", &a, &b), vec![".k: dropped".to_string(), ".n[1].x: 2 became 3".to_string()]);
}
