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
use crate::pmo::pricing::PriceTable;

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
    /// Recent attempt costs per agent and model, from the spend ledger.
    pub history: SpendHistory,
    /// The price table (each model's default step cost).
    pub prices: PriceTable,
}

/// Recent recorded attempt costs (USD) per (agent name, model), newest first, at most
/// [`HISTORY_SAMPLES`] each: the spend ledger's history the forecast takes medians of.
pub type SpendHistory = BTreeMap<(String, String), Vec<f64>>;

/// Attempts per agent and model a forecast looks back on.
pub const HISTORY_SAMPLES: usize = 20;

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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = ForecastLine)]
pub struct StepForecast {
    /// Step id.
    pub step_id: String,
    /// Agent name.
    pub agent_name: String,
    /// Model the estimate assumed.
    pub model: String,
    /// Optimistic cost, USD.
    #[serde(default)]
    pub low_usd: f64,
    /// Expected cost, USD.
    pub mid_usd: f64,
    /// Pessimistic cost, USD.
    #[serde(default)]
    pub high_usd: f64,
    /// Recorded attempts the median was taken of (0: the model's default).
    #[serde(default)]
    pub samples: u32,
    /// Where the number comes from (history or the price table's default).
    pub basis: String,
}

impl Forecast {
    /// The per-step forecasts as the engine keeps them (step id → low/mid/high).
    pub fn by_step(&self) -> BTreeMap<String, crate::model::budget::StepForecast> {
        self.steps
            .iter()
            .map(|s| {
                let f = crate::model::budget::StepForecast {
                    low_usd: s.low_usd,
                    mid_usd: s.mid_usd,
                    high_usd: s.high_usd,
                    samples: s.samples,
                    basis: s.basis.clone(),
                };
                (s.step_id.clone(), f)
            })
            .collect()
    }
}

/// Low and high as multiples of mid when there are fewer than four samples.
pub const FORECAST_SPREAD: (f64, f64) = (0.5, 2.0);

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
    // One of the spec's step types (`documenting` is none, found by a tester).
    step_type: "developing",
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

/// Rounds to the cent.
fn cents(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// Forecasts `plan`'s cost (issue 5 §1). Per agent step: the median of the ledger's recent
/// costs of that agent on that model (low/high the quartiles with four or more samples, else
/// [`FORECAST_SPREAD`] × mid), else the price table's default for the model with the spread.
/// Automation steps cost nothing. Totals are the sums.
pub fn forecast(plan: &MachinePlan, history: &SpendHistory, prices: &PriceTable) -> Forecast {
    let mut steps = Vec::new();
    let mut from_history = 0;
    for (step_id, agent_name, model) in dispatched_units(plan) {
        let model = if model.is_empty() { "sonnet".to_string() } else { model };
        let costs = history.get(&(agent_name.clone(), model.clone())).filter(|c| !c.is_empty());
        let (low, mid, high, samples, basis) = match costs {
            Some(costs) => {
                from_history += 1;
                let mut sorted: Vec<f64> = costs.iter().copied().filter(|c| c.is_finite()).collect();
                sorted.sort_by(f64::total_cmp);
                let mid = quantile(&sorted, 0.5);
                let (low, high) = if sorted.len() >= 4 {
                    (quantile(&sorted, 0.25), quantile(&sorted, 0.75))
                } else {
                    (mid * FORECAST_SPREAD.0, mid * FORECAST_SPREAD.1)
                };
                let n = sorted.len();
                (
                    low,
                    mid,
                    high,
                    n,
                    format!(
                        "median of {n} recorded attempt{} of {agent_name} on {model}",
                        if n == 1 { "" } else { "s" }
                    ),
                )
            }
            None => {
                let mid = prices.default_step_usd(&model);
                let basis = match prices.key_of(&model) {
                    Some(key) => format!("no history: the price table's default for {key}, ${mid:.2} a step"),
                    None => format!("no history and no price for {model}: ${mid:.2} a step"),
                };
                (mid * FORECAST_SPREAD.0, mid, mid * FORECAST_SPREAD.1, 0, basis)
            }
        };
        steps.push(StepForecast {
            step_id,
            agent_name,
            model,
            low_usd: cents(low),
            mid_usd: cents(mid),
            high_usd: cents(high),
            samples: u32::try_from(samples).unwrap_or(u32::MAX),
            basis,
        });
    }
    let sum = |f: fn(&StepForecast) -> f64| cents(steps.iter().map(f).sum());
    let rule = format!(
        "sum of {} agent steps ({} from the spend ledger's history, {} from the price table's defaults)",
        steps.len(),
        from_history,
        steps.len() - from_history,
    );
    Forecast { low_usd: sum(|s| s.low_usd), mid_usd: sum(|s| s.mid_usd), high_usd: sum(|s| s.high_usd), rule, steps }
}

/// What gets dispatched to an agent, as (id, agent, model): each agent step, and for a team
/// step each of its members instead (depth-first, a lead before its `sub_team`: the ids the
/// engine dispatches and reserves for). Automation steps cost nothing and are left out; a
/// team's `agent_synthesis` step takes the execution's default forecast.
fn dispatched_units(plan: &MachinePlan) -> Vec<(String, String, String)> {
    fn members(out: &mut Vec<(String, String, String)>, team: &[crate::model::plan::TeamMember]) {
        for m in team {
            out.push((m.member_id.clone(), m.agent_name.clone(), m.model.clone()));
            members(out, &m.sub_team);
        }
    }
    let mut out = Vec::new();
    for (_, step) in plan.steps().filter(|(_, s)| !s.is_automation()) {
        if step.team.is_empty() {
            out.push((step.step_id.clone(), step.agent_name.clone(), step.model.clone()));
        } else {
            members(&mut out, &step.team);
        }
    }
    out
}

/// The `q` quantile of sorted values by linear interpolation; 0 for none.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    match sorted.len() {
        0 => 0.0,
        1 => sorted[0],
        n => {
            let pos = q * (n - 1) as f64;
            let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
            sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
        }
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
    let forecast = forecast(&plan, &input.history, &input.prices);
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
    fn forecast_takes_the_median_of_the_agent_and_models_history() {
        let e = enrich(&input("Add a greeting", "")).expect("enrich");
        // No history: the price table's defaults, architect on opus $0.50, three sonnet steps
        // at $0.25; low and high are half and double.
        assert_eq!(e.forecast.mid_usd, 1.25);
        assert_eq!(e.forecast.high_usd, 2.5);
        assert!(e.forecast.steps.iter().all(|s| s.samples == 0));
        let mut history = SpendHistory::new();
        history.insert(("architect".to_string(), "opus".to_string()), vec![0.4, 10.0, 0.1, 0.3, 0.2]);
        // Same agent on another model is not its history.
        history.insert(("builder".to_string(), "opus".to_string()), vec![9.0]);
        let f = forecast(&e.plan, &history, &PriceTable::default());
        let architect = &f.steps[0];
        assert_eq!((architect.low_usd, architect.mid_usd, architect.high_usd), (0.2, 0.3, 0.4));
        assert_eq!(architect.samples, 5);
        assert!(
            architect.basis.starts_with("median of 5 recorded attempts of architect on opus"),
            "{}",
            architect.basis
        );
        assert_eq!(f.mid_usd, 1.05);
        assert!(f.rule.contains("1 from the spend ledger's history"), "{}", f.rule);
    }

    #[test]
    fn a_team_step_is_forecast_member_by_member() {
        let plan = MachinePlan::from_json(
            r#"{"task_id":"t","task_summary":"s","phases":[{"phase_id":1,"name":"p","steps":[
              {"step_id":"1.1","agent_name":"team","task_description":"x","team":[
                {"member_id":"1.1.a","agent_name":"lead","role":"lead","model":"opus","sub_team":[
                  {"member_id":"1.1.a.b","agent_name":"dev","model":"haiku"}]},
                {"member_id":"1.1.c","agent_name":"dev"}]}]}]}"#,
        )
        .unwrap();
        let f = forecast(&plan, &SpendHistory::new(), &PriceTable::default());
        let ids: Vec<(&str, f64)> = f.steps.iter().map(|s| (s.step_id.as_str(), s.mid_usd)).collect();
        // opus $0.50, haiku $0.05, sonnet $0.25: each member reserves its own.
        assert_eq!(ids, vec![("1.1.a", 0.5), ("1.1.a.b", 0.05), ("1.1.c", 0.25)]);
        assert_eq!(f.mid_usd, 0.8);
        assert!(f.by_step().contains_key("1.1.a.b"));
    }
}
