//! The PMO lead's portfolio figures, for the metrics page, `GET /api/v1/metrics` and the
//! aggregates of `/metrics`: specs per stage over time (cumulative flow), cycle time from fire
//! to merge, the execution's own forecast against its actual spend, spend per agent and model
//! per week, and gate failure rate per gate type.
//!
//! A read-side view: [`load`] validates nothing (the door checks the query with
//! [`PortfolioQuery::checked`]), reads the store's rows once ([`Store::portfolio_rows`]) and
//! computes every figure here. Days and weeks are UTC. This module never writes, never serves
//! HTTP and never draws (the pages render these figures as SVG).
//!
//! [`Store::portfolio_rows`]: crate::store::Store::portfolio_rows

use chrono::{Datelike as _, Duration, NaiveDate};
use serde::Serialize;

use crate::model::spec::{SpecStage, SpecStatus, BOARD_STAGES};
use crate::runtime::executions::Executions;
use crate::runtime::specs::SpecError;
use crate::store::{PortfolioFilter, PortfolioRows, SpecTransitionRow};

/// Longest range a query may ask for, days.
pub const MAX_RANGE_DAYS: i64 = 366;

/// The range when a query names none: the 30 days ending today.
pub const DEFAULT_RANGE_DAYS: i64 = 30;

/// The stages the cumulative flow draws, in order (cancelled specs leave the flow).
pub const FLOW_STAGES: [SpecStage; 7] = [
    SpecStage::Queued,
    SpecStage::InReview,
    SpecStage::Executing,
    SpecStage::ChangelistReview,
    SpecStage::PrOpen,
    SpecStage::Merged,
    SpecStage::Failed,
];

/// What a portfolio is asked for (`?project=&from=&to=`, dates `YYYY-MM-DD`, UTC, both
/// included).
#[derive(Debug, Clone, Default, serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct PortfolioQuery {
    /// Only this project (empty or absent: every project).
    pub project: Option<String>,
    /// First day (default: 29 days before `to`).
    pub from: Option<String>,
    /// Last day (default: today).
    pub to: Option<String>,
}

/// A checked query: a project filter and an inclusive range of days.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortfolioRange {
    /// Only this project.
    pub project: Option<String>,
    /// First day.
    pub from: NaiveDate,
    /// Last day (included).
    pub to: NaiveDate,
}

impl PortfolioQuery {
    /// The query as a range, `today` filling what it leaves out.
    ///
    /// Errors (for a 400), naming the parameter: a date that is not `YYYY-MM-DD`, `from` after
    /// `to`, a range longer than [`MAX_RANGE_DAYS`].
    pub fn checked(&self, today: NaiveDate) -> Result<PortfolioRange, String> {
        let date = |name: &str, v: &Option<String>| -> Result<Option<NaiveDate>, String> {
            match v.as_deref().filter(|s| !s.is_empty()) {
                None => Ok(None),
                Some(s) => parse_day(s)
                    .map(Some)
                    .ok_or_else(|| format!("{name}: {:?} is not a date (YYYY-MM-DD)", crate::model::text::cut(s, 40))),
            }
        };
        let to = date("to", &self.to)?.unwrap_or(today);
        let from = match date("from", &self.from)? {
            Some(from) => from,
            None => to
                .checked_sub_signed(Duration::days(DEFAULT_RANGE_DAYS - 1))
                .ok_or_else(|| format!("to: {to} leaves no room for the default range"))?,
        };
        if from > to {
            return Err(format!("from: {from} is after to: {to}"));
        }
        let days = (to - from).num_days() + 1;
        if days > MAX_RANGE_DAYS {
            return Err(format!("from, to: the range spans {days} days; at most {MAX_RANGE_DAYS}"));
        }
        let project = self.project.as_deref().map(str::trim).filter(|p| !p.is_empty()).map(String::from);
        Ok(PortfolioRange { project, from, to })
    }
}

/// A day written exactly `YYYY-MM-DD` (four-digit year, two-digit month and day), so every
/// date a query names is one `from - 29 days` and `to + 1 day` can be computed for.
fn parse_day(text: &str) -> Option<NaiveDate> {
    let b = text.as_bytes();
    let shaped = b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && b.iter().enumerate().all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit());
    shaped.then(|| NaiveDate::parse_from_str(text, "%Y-%m-%d").ok()).flatten()
}

/// Every figure of a portfolio.
#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
pub struct Portfolio {
    /// The project filter (`None`: every project).
    pub project: Option<String>,
    /// First day (`YYYY-MM-DD`).
    pub from: String,
    /// Last day, included.
    pub to: String,
    /// Every project name, for the filter.
    pub projects: Vec<String>,
    /// Specs per stage at the end of each day.
    pub flow: CumulativeFlow,
    /// Fire-to-merge times of the specs merged in the range.
    pub cycle_time: CycleTimes,
    /// Each execution's forecast against its spend (executions created in the range).
    pub forecasts: ForecastAccuracy,
    /// Spend per agent and model per week.
    pub spend: WeeklySpend,
    /// Gate runs and failures per gate type.
    pub gates: Vec<GateFailures>,
}

/// Specs per stage at the end of each day (UTC).
#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
pub struct CumulativeFlow {
    /// The days, `YYYY-MM-DD`, oldest first.
    pub days: Vec<String>,
    /// One series per stage of [`FLOW_STAGES`], counts aligned with `days`.
    pub series: Vec<FlowSeries>,
}

/// One stage's counts over the days.
#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
pub struct FlowSeries {
    /// The stage.
    pub stage: SpecStage,
    /// Its board heading.
    pub title: &'static str,
    /// Specs in it at the end of each day.
    pub counts: Vec<u32>,
}

/// Fire-to-merge times.
#[derive(Debug, Clone, Serialize, PartialEq, Default, utoipa::ToSchema)]
pub struct CycleTimes {
    /// One per spec merged in the range (with a fire before its merge), by merge time.
    pub specs: Vec<CycleTime>,
    /// The median, hours (`None` without any).
    pub median_hours: Option<f64>,
    /// The 90th percentile (nearest rank), hours.
    pub p90_hours: Option<f64>,
    /// The mean, hours.
    pub mean_hours: Option<f64>,
}

/// One spec's fire-to-merge time.
#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
pub struct CycleTime {
    /// The spec.
    pub spec_id: i64,
    /// Its title (untrusted text: escaped when rendered).
    pub title: String,
    /// Its latest fire before the merge (RFC 3339).
    pub fired_at: String,
    /// Its merge (RFC 3339).
    pub merged_at: String,
    /// From one to the other, hours (two decimals).
    pub hours: f64,
}

/// How good the forecasts are: each execution's own forecast (the sum of its steps' mid
/// forecasts, recorded when it started) against what it spent.
#[derive(Debug, Clone, Serialize, PartialEq, Default, utoipa::ToSchema)]
pub struct ForecastAccuracy {
    /// One per execution created in the range, oldest first.
    pub executions: Vec<ForecastVsActual>,
    /// Mean of `|error_pct|` over the ended executions (complete, failed, cancelled) with a
    /// forecast above zero; `None` without any.
    pub mean_abs_error_pct: Option<f64>,
    /// How many executions that mean is over.
    pub ended_with_forecast: usize,
}

/// One execution's forecast and spend.
#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
pub struct ForecastVsActual {
    /// The execution.
    pub task_id: String,
    /// Its spec's title, when fired from one (untrusted text).
    pub title: Option<String>,
    /// Its summary status.
    pub status: String,
    /// Its forecast, USD (`None`: it recorded none).
    pub forecast_usd: Option<f64>,
    /// What it spent, USD.
    pub actual_usd: f64,
    /// `(actual - forecast) / forecast`, percent (one decimal); `None` without a forecast
    /// above zero.
    pub error_pct: Option<f64>,
}

/// Spend per agent and model per week.
#[derive(Debug, Clone, Serialize, PartialEq, Default, utoipa::ToSchema)]
pub struct WeeklySpend {
    /// Each week of the range by its Monday (`YYYY-MM-DD`), oldest first.
    pub weeks: Vec<String>,
    /// One series per (agent, model) with spend in the range, by total spend, largest first.
    pub series: Vec<SpendSeries>,
    /// All of it, USD.
    pub total_usd: f64,
}

/// One agent on one model.
#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
pub struct SpendSeries {
    /// Agent name (plan text: escaped when rendered).
    pub agent: String,
    /// Model (`unknown` when the attempts did not say).
    pub model: String,
    /// USD per week, aligned with `weeks`.
    pub usd: Vec<f64>,
    /// Recorded attempts in the range.
    pub attempts: i64,
    /// Its total, USD.
    pub total_usd: f64,
}

/// One gate type's runs.
#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
pub struct GateFailures {
    /// The gate type (`test`, `lint`, …; plan text), or `phase N` for a phase the stored plan
    /// no longer has.
    pub gate_type: String,
    /// Runs in the range.
    pub runs: i64,
    /// Failed runs.
    pub failed: i64,
    /// `failed / runs`, 0–1 (three decimals).
    pub failure_rate: f64,
}

/// The portfolio of `range`, from the store.
///
/// Errors: a project filter naming no project (404, naming it); the database (500).
pub async fn load(execs: &Executions, range: &PortfolioRange) -> Result<Portfolio, SpecError> {
    let store = execs.store();
    if let Some(name) = &range.project {
        if store.project(name).await?.is_none() {
            return Err(SpecError::NotFound(format!("no project named {name}")));
        }
    }
    let filter = PortfolioFilter {
        project: range.project.clone(),
        from: range.from.to_string(),
        until: range.to.succ_opt().unwrap_or(range.to).to_string(),
    };
    let rows = store.portfolio_rows(&filter).await?;
    let projects = store.list_projects().await?.into_iter().map(|p| p.name).collect();
    Ok(compute(range, projects, &rows))
}

/// Every figure of `range` from the store's `rows`.
pub fn compute(range: &PortfolioRange, projects: Vec<String>, rows: &PortfolioRows) -> Portfolio {
    Portfolio {
        project: range.project.clone(),
        from: range.from.to_string(),
        to: range.to.to_string(),
        projects,
        flow: flow(range, &rows.transitions),
        cycle_time: cycle_times(rows),
        forecasts: forecasts(rows),
        spend: weekly_spend(range, rows),
        gates: rows
            .gates
            .iter()
            .map(|g| GateFailures {
                gate_type: g.gate_type.clone(),
                runs: g.runs,
                failed: g.failed,
                failure_rate: if g.runs > 0 { round(g.failed as f64 / g.runs as f64, 3) } else { 0.0 },
            })
            .collect(),
    }
}

/// Where a spec stood just before `end` (RFC 3339 or a date), from its transitions in order:
/// `None` before it existed or once cancelled. An executing spec whose execution ended before
/// `end` stands where that ending puts it (changelist review, failed), or in `pr_open` once
/// its pull request was open before `end`.
pub fn stage_at(transitions: &[&SpecTransitionRow], end: &str) -> Option<SpecStage> {
    let last = transitions.iter().rev().find(|t| t.at.as_str() < end)?;
    let status = SpecStatus::parse(&last.to_status)?;
    let ended = match (&last.execution_status, &last.execution_updated_at) {
        (Some(s), Some(at)) if matches!(s.as_str(), "complete" | "failed" | "cancelled") && at.as_str() < end => {
            Some(s.as_str())
        }
        _ => None,
    };
    let pr_open = last.pr_opened_at.as_deref().is_some_and(|at| at < end);
    match SpecStage::of_pull(status, ended, pr_open) {
        SpecStage::Cancelled => None,
        stage => Some(stage),
    }
}

/// The cumulative flow: specs per stage at the end of each day of the range.
fn flow(range: &PortfolioRange, transitions: &[SpecTransitionRow]) -> CumulativeFlow {
    let days: Vec<NaiveDate> = range.from.iter_days().take_while(|d| *d <= range.to).collect();
    let mut specs: Vec<Vec<&SpecTransitionRow>> = Vec::new();
    for t in transitions {
        match specs.last_mut() {
            Some(group) if group.first().is_some_and(|f| f.spec_id == t.spec_id) => group.push(t),
            _ => specs.push(vec![t]),
        }
    }
    let mut counts = vec![vec![0u32; days.len()]; FLOW_STAGES.len()];
    for (i, day) in days.iter().enumerate() {
        let end = (*day + Duration::days(1)).to_string();
        for spec in &specs {
            if let Some(stage) = stage_at(spec, &end) {
                if let Some(k) = FLOW_STAGES.iter().position(|s| *s == stage) {
                    counts[k][i] += 1;
                }
            }
        }
    }
    CumulativeFlow {
        days: days.iter().map(ToString::to_string).collect(),
        series: FLOW_STAGES
            .iter()
            .zip(counts)
            .map(|(stage, counts)| FlowSeries { stage: *stage, title: stage.title(), counts })
            .collect(),
    }
}

fn cycle_times(rows: &PortfolioRows) -> CycleTimes {
    let specs: Vec<CycleTime> = rows
        .merged
        .iter()
        .filter_map(|m| {
            let fired_at = m.fired_at.clone()?;
            let fired = chrono::DateTime::parse_from_rfc3339(&fired_at).ok()?;
            let merged = chrono::DateTime::parse_from_rfc3339(&m.merged_at).ok()?;
            let hours = (merged - fired).num_seconds() as f64 / 3600.0;
            Some(CycleTime {
                spec_id: m.spec_id,
                title: m.title.clone(),
                fired_at,
                merged_at: m.merged_at.clone(),
                hours: round(hours, 2),
            })
        })
        .collect();
    let mut hours: Vec<f64> = specs.iter().map(|c| c.hours).collect();
    hours.sort_by(f64::total_cmp);
    CycleTimes {
        median_hours: median(&hours),
        p90_hours: nearest_rank(&hours, 0.9),
        mean_hours: (!hours.is_empty()).then(|| round(hours.iter().sum::<f64>() / hours.len() as f64, 2)),
        specs,
    }
}

fn forecasts(rows: &PortfolioRows) -> ForecastAccuracy {
    let executions: Vec<ForecastVsActual> = rows
        .executions
        .iter()
        .map(|e| {
            let forecast = e.forecast_usd.map(|f| round(f, 2));
            ForecastVsActual {
                task_id: e.task_id.clone(),
                title: e.title.clone(),
                status: e.status.clone(),
                forecast_usd: forecast,
                actual_usd: round(e.spend_usd, 2),
                error_pct: forecast.filter(|f| *f > 0.0).map(|f| round((e.spend_usd - f) / f * 100.0, 1)),
            }
        })
        .collect();
    let ended: Vec<f64> = executions
        .iter()
        .filter(|e| matches!(e.status.as_str(), "complete" | "failed" | "cancelled"))
        .filter_map(|e| e.error_pct.map(f64::abs))
        .collect();
    ForecastAccuracy {
        mean_abs_error_pct: (!ended.is_empty()).then(|| round(ended.iter().sum::<f64>() / ended.len() as f64, 1)),
        ended_with_forecast: ended.len(),
        executions,
    }
}

/// The Monday of `day`'s week.
fn monday(day: NaiveDate) -> NaiveDate {
    day - Duration::days(i64::from(day.weekday().num_days_from_monday()))
}

fn weekly_spend(range: &PortfolioRange, rows: &PortfolioRows) -> WeeklySpend {
    let mut weeks = Vec::new();
    let mut week = monday(range.from);
    while week <= range.to {
        weeks.push(week.to_string());
        week += Duration::days(7);
    }
    let mut series: Vec<SpendSeries> = Vec::new();
    for r in &rows.weekly_spend {
        let model = if r.model.is_empty() { "unknown".to_string() } else { r.model.clone() };
        let i = match series.iter().position(|s| s.agent == r.agent_name && s.model == model) {
            Some(i) => i,
            None => {
                let usd = vec![0.0; weeks.len()];
                series.push(SpendSeries { agent: r.agent_name.clone(), model, usd, attempts: 0, total_usd: 0.0 });
                series.len() - 1
            }
        };
        let s = &mut series[i];
        if let Some(w) = weeks.iter().position(|w| *w == r.week) {
            s.usd[w] = round(s.usd[w] + r.usd, 2);
        }
        s.attempts += r.attempts;
        s.total_usd = round(s.total_usd + r.usd, 2);
    }
    series.sort_by(|a, b| {
        b.total_usd.total_cmp(&a.total_usd).then_with(|| (&a.agent, &a.model).cmp(&(&b.agent, &b.model)))
    });
    let total_usd = round(series.iter().map(|s| s.total_usd).sum(), 2);
    WeeklySpend { weeks, series, total_usd }
}

/// Gate types `/metrics` labels by name; any other (plan text, unbounded) is `other`.
pub const KNOWN_GATE_TYPES: [&str; 6] = ["build", "ci", "lint", "review", "spec", "test"];

/// The all-time aggregates `/metrics` exposes (no filter: a scrape is the whole service).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Aggregates {
    /// Specs per stage now, for every board stage and cancelled.
    pub specs_by_stage: Vec<(SpecStage, u64)>,
    /// Fire-to-merge time of every merged spec, seconds.
    pub cycle_seconds: Vec<f64>,
    /// Mean `|error|` of the ended executions' forecasts, percent (`None` without any).
    pub forecast_mean_abs_error_pct: Option<f64>,
    /// How many ended executions with a forecast that mean is over.
    pub forecast_executions: usize,
    /// (gate type of [`KNOWN_GATE_TYPES`] or `other`, runs, failed runs).
    pub gates: Vec<(&'static str, i64, i64)>,
}

/// The all-time aggregates for `/metrics`.
///
/// Errors: the database.
pub async fn aggregates(execs: &Executions) -> anyhow::Result<Aggregates> {
    let filter = PortfolioFilter { project: None, from: "0000-01-01".into(), until: "9999-12-31".into() };
    let rows = execs.store().portfolio_rows(&filter).await?;
    Ok(aggregate(&rows))
}

/// The aggregates of all-time `rows`.
pub fn aggregate(rows: &PortfolioRows) -> Aggregates {
    let mut stages: Vec<(SpecStage, u64)> =
        BOARD_STAGES.iter().chain([&SpecStage::Cancelled]).map(|s| (*s, 0)).collect();
    // Each spec's newest transition (rows come by spec, then order) with its execution's status.
    let newest = rows
        .transitions
        .iter()
        .enumerate()
        .filter(|(i, t)| rows.transitions.get(i + 1).is_none_or(|next| next.spec_id != t.spec_id));
    for (_, t) in newest {
        let Some(status) = SpecStatus::parse(&t.to_status) else { continue };
        let stage = SpecStage::of_pull(status, t.execution_status.as_deref(), t.pr_opened_at.is_some());
        if let Some(entry) = stages.iter_mut().find(|(s, _)| *s == stage) {
            entry.1 += 1;
        }
    }
    let cycle = cycle_times(rows);
    let forecasts = forecasts(rows);
    let mut gates: Vec<(&'static str, i64, i64)> = Vec::new();
    for g in &rows.gates {
        let name = KNOWN_GATE_TYPES.iter().find(|k| **k == g.gate_type).copied().unwrap_or("other");
        match gates.iter_mut().find(|(n, _, _)| *n == name) {
            Some(entry) => {
                entry.1 += g.runs;
                entry.2 += g.failed;
            }
            None => gates.push((name, g.runs, g.failed)),
        }
    }
    gates.sort();
    Aggregates {
        specs_by_stage: stages,
        cycle_seconds: cycle.specs.iter().map(|c| c.hours * 3600.0).collect(),
        forecast_mean_abs_error_pct: forecasts.mean_abs_error_pct,
        forecast_executions: forecasts.ended_with_forecast,
        gates,
    }
}

/// `x` rounded to `places` decimals.
fn round(x: f64, places: i32) -> f64 {
    let f = 10f64.powi(places);
    // `+ 0.0` turns a negative zero (the sum of nothing is -0.0) into 0.0.
    (x * f).round() / f + 0.0
}

/// The median of sorted `xs` (two decimals).
fn median(xs: &[f64]) -> Option<f64> {
    let n = xs.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(xs[n / 2]),
        _ => Some(round((xs[n / 2 - 1] + xs[n / 2]) / 2.0, 2)),
    }
}

/// The `q` quantile of sorted `xs` by nearest rank.
fn nearest_rank(xs: &[f64], q: f64) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    let rank = (q * xs.len() as f64).ceil() as usize;
    xs.get(rank.clamp(1, xs.len()) - 1).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn day(s: &str) -> NaiveDate {
        NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap()
    }

    fn query(from: Option<&str>, to: Option<&str>) -> PortfolioQuery {
        PortfolioQuery { project: Some(" ".into()), from: from.map(String::from), to: to.map(String::from) }
    }

    #[test]
    fn a_spec_whose_pull_request_is_open_counts_as_pr_open_not_changelist_review() {
        let row = |spec_id: i64, pr_opened_at: Option<&str>| SpecTransitionRow {
            spec_id,
            to_status: "executing".into(),
            at: "2026-11-01T10:00:00+00:00".into(),
            execution_status: Some("complete".into()),
            execution_updated_at: Some("2026-11-01T11:00:00+00:00".into()),
            pr_opened_at: pr_opened_at.map(String::from),
        };
        let rows = PortfolioRows {
            transitions: vec![row(1, None), row(2, Some("2026-11-01T12:00:00+00:00"))],
            ..PortfolioRows::default()
        };
        let counts = aggregate(&rows).specs_by_stage;
        let count = |stage| counts.iter().find(|(s, _)| *s == stage).map(|(_, n)| *n);
        assert_eq!(count(SpecStage::ChangelistReview), Some(1));
        assert_eq!(count(SpecStage::PrOpen), Some(1));
        // In the flow, the pull request counts from the moment it opened.
        let spec2 = [&rows.transitions[1]];
        assert_eq!(stage_at(&spec2, "2026-11-01T11:30:00+00:00"), Some(SpecStage::ChangelistReview));
        assert_eq!(stage_at(&spec2, "2026-11-02"), Some(SpecStage::PrOpen));
        assert!(FLOW_STAGES.contains(&SpecStage::PrOpen));
    }

    #[test]
    fn a_query_without_dates_is_the_30_days_ending_today() {
        let r = query(None, None).checked(day("2026-12-01")).unwrap();
        assert_eq!((r.from, r.to, r.project), (day("2026-11-02"), day("2026-12-01"), None));
    }

    /// Dates at chrono's ends once panicked computing the default `from` or `to + 1 day`, and
    /// loose spellings were accepted; a 10 KB value was echoed whole.
    #[test]
    fn dates_out_of_shape_or_at_the_ends_of_time_are_refused_not_a_panic() {
        let today = day("2026-12-01");
        for bad in ["-262143-01-05", "+262142-12-31", "2026-1-1", " 2026-01-01", "+2026-01-01", "20260101"] {
            let err = query(None, Some(bad)).checked(today).unwrap_err();
            assert!(err.starts_with("to: ") && err.contains("is not a date"), "{bad}: {err}");
            let err = query(Some(bad), Some("2026-12-01")).checked(today).unwrap_err();
            assert!(err.starts_with("from: ") && err.contains("is not a date"), "{bad}: {err}");
        }
        let long = "9".repeat(10_000);
        let err = query(Some(&long), None).checked(today).unwrap_err();
        assert!(err.len() < 120, "the value is cut in the message: {} chars", err.len());
        // The ends of the four-digit years work, and `to + 1 day` of the last is computed.
        let r = query(Some("9999-12-01"), Some("9999-12-31")).checked(today).unwrap();
        assert_eq!(r.to.succ_opt().map(|d| d.to_string()).as_deref(), Some("+10000-01-01"));
        query(None, Some("0000-01-05")).checked(today).unwrap();
    }

    #[test]
    fn the_sum_of_no_spend_is_zero_not_negative_zero() {
        assert!(round(std::iter::empty::<f64>().sum(), 2).is_sign_positive());
    }

    #[test]
    fn bad_ranges_are_refused_naming_the_parameter() {
        let today = day("2026-12-01");
        assert_eq!(
            query(Some("yesterday"), None).checked(today).unwrap_err(),
            "from: \"yesterday\" is not a date (YYYY-MM-DD)"
        );
        assert!(query(None, Some("2026-13-01")).checked(today).unwrap_err().starts_with("to: "));
        assert_eq!(
            query(Some("2026-12-02"), Some("2026-12-01")).checked(today).unwrap_err(),
            "from: 2026-12-02 is after to: 2026-12-01"
        );
        assert!(query(Some("2025-01-01"), Some("2026-12-01")).checked(today).unwrap_err().contains("at most 366"));
    }

    #[test]
    fn quantiles_of_cycle_times() {
        assert_eq!(median(&[1.0, 2.0, 10.0]), Some(2.0));
        assert_eq!(median(&[1.0, 2.0]), Some(1.5));
        assert_eq!(nearest_rank(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0], 0.9), Some(9.0));
        assert_eq!(nearest_rank(&[4.0], 0.9), Some(4.0));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn weeks_start_on_monday() {
        assert_eq!(monday(day("2026-12-06")), day("2026-11-30"));
        assert_eq!(monday(day("2026-11-30")), day("2026-11-30"));
    }
}
