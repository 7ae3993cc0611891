//! Rule-based enrichment: a spec's text and its project's roster become a MachinePlan, a risk
//! tier and a cost forecast.
//!
//! Every rule is a table in this file, and every result says which rule made it (the plan's
//! `classification_signals`, the forecast's `rule` and per-step `basis`), so a reviewer can see
//! why. Pure: the caller passes in the roster, the test command and the spend history.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::model::plan::{MachinePlan, PlanParseError};

/// What enrichment reads.
#[derive(Debug, Clone, Default)]
pub struct EnrichInput<'a> {
    /// The execution id the plan gets (the service makes it unique when the spec is fired).
    pub task_id: &'a str,
    /// The spec's title.
    pub title: &'a str,
    /// The spec's body (free text, untrusted: it only ever lands in JSON strings).
    pub body: &'a str,
    /// Agent names the project's roster defines (`agents/*.md`, `.claude/agents/*.md`,
    /// `baton.toml`); a role missing from it gets its standard name.
    pub roster: Vec<String>,
    /// The project's test command (configured or detected); `None`: the plan has no gate.
    pub test_command: Option<String>,
    /// Spend history per agent name, from recorded steps.
    pub history: BTreeMap<String, AgentHistory>,
}

/// Recorded spend of one agent.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AgentHistory {
    /// Recorded steps with a cost.
    pub runs: u32,
    /// Their mean cost, USD.
    pub mean_cost_usd: f64,
}

/// What enrichment produces.
#[derive(Debug, Clone)]
pub struct Enrichment {
    /// The generated plan.
    pub plan: MachinePlan,
    /// `LOW`, `MEDIUM`, `HIGH` or `CRITICAL` (also the plan's `risk_level`).
    pub risk: String,
    /// The cost forecast of the plan.
    pub forecast: Forecast,
}

/// A cost forecast: low / mid / high in USD, with the line per step and the rule used.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Forecast {
    /// Optimistic total, USD.
    pub low_usd: f64,
    /// Expected total, USD.
    pub mid_usd: f64,
    /// Pessimistic total, USD.
    pub high_usd: f64,
    /// How the totals were made.
    pub rule: String,
    /// One line per agent step.
    pub steps: Vec<StepForecast>,
}

/// The forecast of one step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepForecast {
    /// Step id.
    pub step_id: String,
    /// Agent name.
    pub agent_name: String,
    /// Model the estimate assumed.
    pub model: String,
    /// Expected cost, USD.
    pub mid_usd: f64,
    /// Where the number comes from (history or the default table).
    pub basis: String,
}

/// Low and high as multiples of mid.
pub const FORECAST_SPREAD: (f64, f64) = (0.5, 2.0);

/// Blended USD per million tokens by model family, used when an agent has no history.
/// From the public list prices (input and output blended 3:1), rounded.
pub const MODEL_RATES: &[(&str, f64)] = &[("opus", 30.0), ("sonnet", 6.0), ("haiku", 1.6)];

/// Tokens a step of each type is assumed to use when its agent has no history.
pub const STEP_TOKENS: &[(&str, u64)] = &[
    ("planning", 40_000),
    ("developing", 120_000),
    ("testing", 80_000),
    ("reviewing", 30_000),
    ("documenting", 40_000),
];

/// Words that raise the risk tier: two or more HIGH words make it CRITICAL.
pub const HIGH_RISK_WORDS: &[&str] = &[
    "auth",
    "authentication",
    "security",
    "secret",
    "password",
    "payment",
    "billing",
    "migration",
    "schema",
    "database",
    "delete",
    "production",
    "encryption",
    "permissions",
];

/// Words that make a spec at least MEDIUM.
pub const MEDIUM_RISK_WORDS: &[&str] =
    &["api", "refactor", "performance", "concurrency", "cache", "config", "dependency", "upgrade"];

/// A kind of work, chosen from the spec's words; each has a phase template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkType {
    /// fix, bug, crash, error, regression, broken.
    Bugfix,
    /// doc, docs, documentation, readme, guide.
    Docs,
    /// refactor, cleanup, rename.
    Refactor,
    /// Anything else.
    Feature,
}

/// Words that choose a work type, checked in this order.
pub const WORK_WORDS: &[(WorkType, &[&str])] = &[
    (WorkType::Bugfix, &["fix", "bug", "crash", "error", "regression", "broken", "fails"]),
    (WorkType::Docs, &["doc", "docs", "documentation", "readme", "guide"]),
    (WorkType::Refactor, &["refactor", "cleanup", "clean", "rename", "simplify"]),
];

impl WorkType {
    /// The plan's `task_type`.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkType::Bugfix => "bugfix",
            WorkType::Docs => "documentation",
            WorkType::Refactor => "refactor",
            WorkType::Feature => "feature",
        }
    }
}

/// A role of a phase template: the agent names that fill it, in order of preference.
struct Role {
    names: &'static [&'static str],
    model: &'static str,
    step_type: &'static str,
    allowed: &'static str,
    task: &'static str,
}

const ARCHITECT: Role = Role {
    names: &["architect", "solution-architect"],
    model: "opus",
    step_type: "planning",
    allowed: "docs/",
    task: "Design the change and write the design note the build follows",
};
const INVESTIGATOR: Role = Role {
    names: &["debugger", "investigator", "architect"],
    model: "sonnet",
    step_type: "planning",
    allowed: "docs/",
    task: "Reproduce the problem, find its cause and write it down",
};
const BUILDER: Role = Role {
    names: &["backend-engineer", "developer", "engineer", "frontend-engineer"],
    model: "sonnet",
    step_type: "developing",
    allowed: "src/",
    task: "Implement the change",
};
const TESTER: Role = Role {
    names: &["test-engineer", "tester", "qa-engineer"],
    model: "sonnet",
    step_type: "testing",
    allowed: "tests/",
    task: "Write the tests that prove the change",
};
const REVIEWER: Role = Role {
    names: &["code-reviewer", "reviewer"],
    model: "sonnet",
    step_type: "reviewing",
    allowed: "docs/",
    task: "Review the change and write the review notes",
};
const WRITER: Role = Role {
    names: &["technical-writer", "writer", "docs-writer"],
    model: "sonnet",
    step_type: "documenting",
    allowed: "docs/",
    task: "Write the documentation",
};

struct PhaseTemplate {
    name: &'static str,
    roles: &'static [Role],
    approval: bool,
    gate: bool,
}

fn template(work: WorkType) -> &'static [PhaseTemplate] {
    match work {
        WorkType::Feature => &[
            PhaseTemplate { name: "Design", roles: &[ARCHITECT], approval: true, gate: false },
            PhaseTemplate { name: "Build", roles: &[BUILDER, TESTER], approval: false, gate: true },
            PhaseTemplate { name: "Review", roles: &[REVIEWER], approval: false, gate: false },
        ],
        WorkType::Bugfix => &[
            PhaseTemplate { name: "Investigate", roles: &[INVESTIGATOR], approval: true, gate: false },
            PhaseTemplate { name: "Fix", roles: &[BUILDER, TESTER], approval: false, gate: true },
            PhaseTemplate { name: "Review", roles: &[REVIEWER], approval: false, gate: false },
        ],
        WorkType::Refactor => &[
            PhaseTemplate { name: "Plan", roles: &[ARCHITECT], approval: true, gate: false },
            PhaseTemplate { name: "Refactor", roles: &[BUILDER], approval: false, gate: true },
            PhaseTemplate { name: "Review", roles: &[REVIEWER], approval: false, gate: false },
        ],
        WorkType::Docs => &[
            PhaseTemplate { name: "Write", roles: &[WRITER], approval: true, gate: false },
            PhaseTemplate { name: "Review", roles: &[REVIEWER], approval: false, gate: false },
        ],
    }
}

/// Lower-case words of `text` (letters and digits).
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_lowercase).collect()
}

/// The work type of a spec: the first [`WORK_WORDS`] row with a word in the title, else in
/// the body, else [`WorkType::Feature`].
pub fn work_type(title: &str, body: &str) -> WorkType {
    for text in [title, body] {
        let w = words(text);
        if let Some((t, _)) = WORK_WORDS.iter().find(|(_, list)| w.iter().any(|x| list.contains(&x.as_str()))) {
            return *t;
        }
    }
    WorkType::Feature
}

/// The risk tier and the words that set it: two or more distinct [`HIGH_RISK_WORDS`] →
/// CRITICAL, one → HIGH, any [`MEDIUM_RISK_WORDS`] → MEDIUM, else LOW.
pub fn risk_tier(title: &str, body: &str) -> (String, Vec<String>) {
    let mut w = words(title);
    w.extend(words(body));
    w.sort();
    w.dedup();
    let high: Vec<String> = w.iter().filter(|x| HIGH_RISK_WORDS.contains(&x.as_str())).cloned().collect();
    let medium: Vec<String> = w.iter().filter(|x| MEDIUM_RISK_WORDS.contains(&x.as_str())).cloned().collect();
    match high.len() {
        0 if medium.is_empty() => ("LOW".into(), Vec::new()),
        0 => ("MEDIUM".into(), medium),
        1 => ("HIGH".into(), high),
        _ => ("CRITICAL".into(), high),
    }
}

fn pick_agent(role: &Role, roster: &[String]) -> String {
    role.names.iter().find(|n| roster.iter().any(|r| r == *n)).unwrap_or(&role.names[0]).to_string()
}

fn rate_of(model: &str) -> (&'static str, f64) {
    let m = model.to_lowercase();
    MODEL_RATES.iter().find(|(family, _)| m.contains(family)).copied().unwrap_or(MODEL_RATES[1])
}

/// Rounds to the cent.
fn cents(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// Forecasts `plan`'s cost: per agent step, the agent's mean recorded cost when it has
/// history, else [`STEP_TOKENS`] of its step type × [`MODEL_RATES`] of its model; low and high
/// are [`FORECAST_SPREAD`] × mid. Automation steps cost nothing.
pub fn forecast(plan: &MachinePlan, history: &BTreeMap<String, AgentHistory>) -> Forecast {
    let mut steps = Vec::new();
    let mut from_history = 0;
    for (_, step) in plan.steps().filter(|(_, s)| !s.is_automation()) {
        let model = if step.model.is_empty() { "sonnet".to_string() } else { step.model.clone() };
        let (mid, basis) = match history.get(&step.agent_name).filter(|h| h.runs > 0) {
            Some(h) => {
                from_history += 1;
                (h.mean_cost_usd, format!("history: mean of {} recorded steps of {}", h.runs, step.agent_name))
            }
            None => {
                let tokens = STEP_TOKENS.iter().find(|(t, _)| *t == step.step_type).map_or(80_000, |(_, n)| *n);
                let (family, rate) = rate_of(&model);
                let mid = tokens as f64 / 1e6 * rate;
                (mid, format!("default: {tokens} tokens of a {} step at ${rate}/M ({family})", step.step_type))
            }
        };
        steps.push(StepForecast {
            step_id: step.step_id.clone(),
            agent_name: step.agent_name.clone(),
            model,
            mid_usd: cents(mid),
            basis,
        });
    }
    let mid: f64 = steps.iter().map(|s| s.mid_usd).sum();
    let rule = format!(
        "sum of {} agent steps ({} from recorded history, {} from the default token table); low = {}×, high = {}× the expected total",
        steps.len(),
        from_history,
        steps.len() - from_history,
        FORECAST_SPREAD.0,
        FORECAST_SPREAD.1
    );
    Forecast {
        low_usd: cents(mid * FORECAST_SPREAD.0),
        mid_usd: cents(mid),
        high_usd: cents(mid * FORECAST_SPREAD.1),
        rule,
        steps,
    }
}

/// Builds the plan, risk tier and forecast of a spec.
///
/// The plan follows the work type's phase template (the first phase asks for an approval; the
/// building phase has a `test` gate running `test_command` when there is one), each role
/// filled by the first of its standard names the roster has. Errors: a `task_id` the plan
/// model refuses ([`PlanParseError`]).
pub fn enrich(input: &EnrichInput<'_>) -> Result<Enrichment, PlanParseError> {
    let work = work_type(input.title, input.body);
    let (risk, risk_words) = risk_tier(input.title, input.body);
    let mut phases = Vec::new();
    let mut previous: Vec<String> = Vec::new();
    for (i, t) in template(work).iter().enumerate() {
        let phase_id = i + 1;
        let mut steps = Vec::new();
        let mut ids = Vec::new();
        for (j, role) in t.roles.iter().enumerate() {
            let step_id = format!("{phase_id}.{}", j + 1);
            steps.push(json!({
                "step_id": step_id,
                "agent_name": pick_agent(role, &input.roster),
                "model": role.model,
                "task_description": format!("{}: {}", role.task, input.title),
                "step_type": role.step_type,
                "depends_on": previous,
                "allowed_paths": [role.allowed],
            }));
            ids.push(step_id);
        }
        let mut phase = json!({ "phase_id": phase_id, "name": t.name, "steps": steps });
        if t.approval {
            phase["approval_required"] = json!(true);
            phase["approval_description"] =
                json!(format!("Review the {} phase's output before work continues.", t.name));
        }
        if let (true, Some(cmd)) = (t.gate, input.test_command.as_deref().filter(|c| !c.trim().is_empty())) {
            phase["gate"] = json!({ "gate_type": "test", "command": cmd, "description": "The project's tests pass." });
        }
        phases.push(phase);
        previous = ids;
    }
    let summary = input.title.trim();
    let plan = json!({
        "task_id": input.task_id,
        "task_summary": if summary.is_empty() { "(untitled spec)" } else { summary },
        "risk_level": risk,
        "task_type": work.as_str(),
        "classification_source": "baton rule-based enrichment",
        "classification_signals": risk_words,
        "shared_context": input.body,
        "phases": phases,
    });
    let plan = MachinePlan::from_value(plan)?;
    let forecast = forecast(&plan, &input.history);
    Ok(Enrichment { plan, risk, forecast })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input<'a>(title: &'a str, body: &'a str) -> EnrichInput<'a> {
        EnrichInput { task_id: "spec-1", title, body, ..EnrichInput::default() }
    }

    #[test]
    fn work_type_follows_the_words() {
        assert_eq!(work_type("Fix the login crash", ""), WorkType::Bugfix);
        assert_eq!(work_type("Update the README", ""), WorkType::Docs);
        assert_eq!(work_type("Add a greeting", "it should say hello"), WorkType::Feature);
        assert_eq!(work_type("Greeting", "please refactor the module"), WorkType::Refactor);
    }

    #[test]
    fn risk_tiers() {
        assert_eq!(risk_tier("Add a greeting", "").0, "LOW");
        assert_eq!(risk_tier("Speed up the API", "").0, "MEDIUM");
        assert_eq!(risk_tier("Database migration", "").0, "CRITICAL");
        let (tier, why) = risk_tier("Rotate the password", "");
        assert_eq!((tier.as_str(), why), ("HIGH", vec!["password".to_string()]));
    }

    #[test]
    fn the_plan_validates_uses_the_roster_and_gates_on_the_test_command() {
        let mut i = input("Add a greeting", "Say hello.");
        i.roster = vec!["developer".into()];
        i.test_command = Some("cargo test".into());
        let e = enrich(&i).expect("enrich");
        crate::engine::validate::validate(&e.plan).expect("valid plan");
        assert_eq!(e.plan.phases.len(), 3);
        assert!(e.plan.phases[0].approval_required);
        assert_eq!(e.plan.phases[1].steps[0].agent_name, "developer", "roster name preferred");
        assert_eq!(e.plan.phases[1].steps[1].agent_name, "test-engineer", "standard name otherwise");
        assert_eq!(e.plan.phases[1].gate.as_ref().map(|g| g.command.as_str()), Some("cargo test"));
        assert_eq!(e.plan.phases[2].steps[0].depends_on, ["2.1", "2.2"]);
        let no_gate = enrich(&input("Add a greeting", "")).expect("enrich");
        assert!(no_gate.plan.phases.iter().all(|p| p.gate.is_none()));
    }

    #[test]
    fn hostile_text_stays_data() {
        let e = enrich(&input("<script>alert(1)</script> \"; rm -rf /", "$(reboot)")).expect("enrich");
        assert_eq!(e.plan.task_summary, "<script>alert(1)</script> \"; rm -rf /");
        assert_eq!(e.plan.shared_context, "$(reboot)");
        assert!(e.plan.phases.iter().all(|p| p.gate.is_none()));
    }

    #[test]
    fn forecast_uses_history_when_there_is_some() {
        let e = enrich(&input("Add a greeting", "")).expect("enrich");
        // Defaults: architect 40k opus = 1.20, builder 120k sonnet = 0.72, tester 80k sonnet = 0.48,
        // reviewer 30k sonnet = 0.18.
        assert_eq!(e.forecast.mid_usd, 2.58);
        assert_eq!(e.forecast.low_usd, 1.29);
        assert_eq!(e.forecast.high_usd, 5.16);
        let mut history = BTreeMap::new();
        history.insert("architect".to_string(), AgentHistory { runs: 4, mean_cost_usd: 0.2 });
        let f = forecast(&e.plan, &history);
        assert_eq!(f.mid_usd, 1.58);
        assert!(f.steps[0].basis.starts_with("history: mean of 4"), "{}", f.steps[0].basis);
        assert!(f.rule.contains("1 from recorded history"), "{}", f.rule);
    }
}
