//! `GET /metrics`: Prometheus exposition of the service, and the HTTP latency middleware.
//!
//! Owns the HTTP request histogram (`baton_http_request_duration_seconds`, labelled by method,
//! matched route and status) and the rendering of one scrape. Everything else is read at
//! scrape time: executions by status, spend, dispatches, agent seconds and gate results from
//! the database ([`Executions::metric_totals`](crate::runtime::executions::Executions::metric_totals)), and the worker
//! pool's drivers and free agent slots, and the portfolio's all-time aggregates (specs per
//! stage, cycle time, forecast error, gate runs per gate type: `runtime::portfolio`). Each scrape builds a fresh [`Registry`], so there is
//! no global state and no family keeps a status that left the database.
//!
//! The route label is axum's [`MatchedPath`] (`/api/v1/specs/{id}`), never the request's URI,
//! and `unmatched` for what the router's fallbacks answer (404 for an unknown path, 405 for a
//! method the path does not serve: neither runs the route layers), so the label's cardinality
//! is bounded by the router. Methods outside the standard nine are `other`. The latency is the
//! time until the response head (for an SSE stream: until it opens).
//!
//! The encoder is OpenMetrics text. A scraper that asks for it (`Accept:
//! application/openmetrics-text`, as Prometheus does) gets it as is; anything else gets the
//! Prometheus text format 0.0.4 (`text/plain; version=0.0.4`), whose only differences for
//! the families here are a counter's `HELP`/`TYPE` lines naming the `_total` sample and no
//! `# EOF` line ([`to_prometheus_text`]).
//!
//! This module never writes to the database, and never labels by anything a client chooses.

use std::borrow::Cow;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};

use axum::extract::{MatchedPath, Request, State};
use axum::http::header::{ACCEPT, CONTENT_TYPE};
use axum::http::{HeaderMap, HeaderValue, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::clock::Stopwatch;
use crate::model::state::ExecutionStatus;
use crate::runtime::portfolio::Aggregates;
use crate::store::MetricTotals;
use crate::web::error::AppError;
use crate::web::health::{pool_report, PoolReport};
use crate::web::AppState;

/// Content type of the Prometheus text format 0.0.4.
pub const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Content type of OpenMetrics text 1.0.0.
pub const OPENMETRICS_TEXT: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Upper bounds (seconds) of the HTTP latency buckets: 1 ms to 30 s (the request timeout).
pub const LATENCY_BUCKETS: [f64; 14] =
    [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

/// The `route` label of a request no route matched.
pub const UNMATCHED: &str = "unmatched";

/// Every execution status, so each has a series (0 when no execution has it).
const STATUSES: [ExecutionStatus; 8] = [
    ExecutionStatus::Running,
    ExecutionStatus::ApprovalPending,
    ExecutionStatus::FeedbackPending,
    ExecutionStatus::GatePending,
    ExecutionStatus::GateFailed,
    ExecutionStatus::Complete,
    ExecutionStatus::Failed,
    ExecutionStatus::Cancelled,
];

/// Labels of one HTTP latency series.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct HttpLabels {
    method: Cow<'static, str>,
    route: Cow<'static, str>,
    status: u16,
}

type HistogramFamily = Family<HttpLabels, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

/// The metrics this process accumulates (HTTP latency); cheap to clone (shared families).
#[derive(Debug, Clone)]
pub struct Metrics {
    http: HistogramFamily,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics { http: Family::new_with_constructor(latency_histogram) }
    }
}

impl Metrics {
    /// Empty metrics.
    pub fn new() -> Metrics {
        Metrics::default()
    }

    /// Records one request's latency.
    fn observe(&self, method: Cow<'static, str>, route: Cow<'static, str>, status: u16, seconds: f64) {
        self.http.get_or_create(&HttpLabels { method, route, status }).observe(seconds);
    }

    /// One scrape as OpenMetrics text: the HTTP histogram, `totals` from the database and the
    /// pool's state.
    ///
    /// Errors: only a formatting failure of the encoder (writing to a `String` does not fail).
    pub fn render(
        &self,
        totals: &MetricTotals,
        pool: &PoolReport,
        portfolio: &Aggregates,
    ) -> Result<String, std::fmt::Error> {
        let mut registry = Registry::default();
        register_portfolio(&mut registry, portfolio);

        let executions = Family::<Vec<(&'static str, String)>, Gauge>::default();
        for status in STATUSES {
            executions.get_or_create(&vec![("status", status.as_str().to_string())]).set(0);
        }
        for (status, n) in &totals.executions_by_status {
            executions.get_or_create(&vec![("status", status.clone())]).set(*n);
        }
        registry.register("baton_executions", "Executions by summary status", executions);

        let dispatches = Counter::<u64>::default();
        dispatches.inc_by(u64::try_from(totals.dispatches).unwrap_or(0));
        registry.register(
            "baton_step_dispatches",
            "Step attempts dispatched to agents (step_dispatched events)",
            dispatches,
        );

        let agent_seconds = Counter::<f64, AtomicU64>::default();
        agent_seconds.inc_by(totals.agent_seconds.max(0.0));
        registry.register(
            "baton_agent_seconds",
            "Agent wall time of finished step attempts, seconds (step_recorded duration_seconds)",
            agent_seconds,
        );

        let spend = Counter::<f64, AtomicU64>::default();
        spend.inc_by(totals.spend_usd.max(0.0));
        registry.register("baton_spend_usd", "Spend of every execution, US dollars", spend);

        let gates = Family::<Vec<(&'static str, &'static str)>, Counter>::default();
        gates.get_or_create(&vec![("result", "passed")]).inc_by(u64::try_from(totals.gates_passed).unwrap_or(0));
        gates.get_or_create(&vec![("result", "failed")]).inc_by(u64::try_from(totals.gates_failed).unwrap_or(0));
        gates.get_or_create(&vec![("result", "skipped")]).inc_by(u64::try_from(totals.gates_skipped).unwrap_or(0));
        registry.register(
            "baton_gate_results",
            "Gate runs by result (gate_recorded events; skipped: gate_skipped events, never a pass)",
            gates,
        );

        let commits = Counter::<u64>::default();
        commits.inc_by(totals.journal_commits);
        registry.register(
            "baton_journal_group_commits",
            "Journal commits (one fsync each) of single-event appends, grouped, since this process started",
            commits,
        );
        let appends = Counter::<u64>::default();
        appends.inc_by(totals.journal_appends);
        registry.register(
            "baton_journal_group_appends",
            "Events appended by those commits; appends / commits is the mean group size",
            appends,
        );

        let open = Gauge::<i64>::default();
        open.set(i64::from(pool.open));
        registry.register("baton_pool_open", "1 while the worker pool accepts work, 0 once it shut down", open);
        let drivers = Family::<Vec<(&'static str, &'static str)>, Gauge>::default();
        for (state, n) in
            [("running", pool.drivers.running), ("parked", pool.drivers.parked), ("errored", pool.drivers.errored)]
        {
            drivers.get_or_create(&vec![("state", state)]).set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        registry.register("baton_pool_drivers", "Execution drivers of the worker pool by state", drivers);
        let slots = Gauge::<i64>::default();
        slots.set(i64::try_from(pool.free_agent_slots).unwrap_or(i64::MAX));
        registry.register("baton_pool_free_agent_slots", "Agent slots free under the global agent cap", slots);

        registry.register(
            "baton_http_request_duration_seconds",
            "HTTP request latency until the response head, by method, matched route and status",
            self.http.clone(),
        );

        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry)?;
        Ok(text)
    }
}

/// Upper bounds (seconds) of the cycle time buckets: 1 hour to 30 days.
pub const CYCLE_TIME_BUCKETS: [f64; 8] = [3600.0, 14400.0, 43200.0, 86400.0, 172800.0, 604800.0, 1209600.0, 2592000.0];

/// The portfolio's all-time aggregates (the metrics page's figures, `runtime::portfolio`):
/// specs per stage, the cycle time histogram, forecast accuracy and gate runs per gate type.
fn register_portfolio(registry: &mut Registry, p: &Aggregates) {
    let specs = Family::<Vec<(&'static str, &'static str)>, Gauge>::default();
    for (stage, n) in &p.specs_by_stage {
        specs.get_or_create(&vec![("stage", stage.as_str())]).set(i64::try_from(*n).unwrap_or(i64::MAX));
    }
    registry.register("baton_specs", "Specs per board stage now (cancelled included)", specs);

    let cycle = Histogram::new(CYCLE_TIME_BUCKETS);
    for seconds in &p.cycle_seconds {
        cycle.observe(*seconds);
    }
    registry.register("baton_cycle_time_seconds", "Time from a spec's fire to its merge, merged specs", cycle);

    let error = Gauge::<f64, AtomicU64>::default();
    error.set(p.forecast_mean_abs_error_pct.unwrap_or(0.0));
    registry.register(
        "baton_forecast_mean_abs_error_percent",
        "Mean absolute error of ended executions' forecasts against their spend, percent (0 without any)",
        error,
    );
    let forecasted = Gauge::<i64>::default();
    forecasted.set(i64::try_from(p.forecast_executions).unwrap_or(i64::MAX));
    registry.register(
        "baton_forecast_executions",
        "Ended executions with a forecast, which the forecast error is the mean over",
        forecasted,
    );

    let gates = Family::<Vec<(&'static str, &'static str)>, Counter>::default();
    for (gate_type, runs, failed) in &p.gates {
        let passed = u64::try_from(runs - failed).unwrap_or(0);
        gates.get_or_create(&vec![("gate_type", *gate_type), ("result", "passed")]).inc_by(passed);
        gates
            .get_or_create(&vec![("gate_type", *gate_type), ("result", "failed")])
            .inc_by(u64::try_from(*failed).unwrap_or(0));
    }
    registry.register(
        "baton_gate_runs",
        "Gate runs by the phase's gate type (build, ci, lint, review, spec, test, other) and result",
        gates,
    );
}

/// Converts this module's OpenMetrics text to the Prometheus text format 0.0.4: a counter
/// family's `HELP` and `TYPE` lines name its `_total` sample (OpenMetrics names the family
/// without the suffix), and the `# EOF` and `# UNIT` lines go.
pub fn to_prometheus_text(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    let mut help: Option<&str> = None;
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            if let Some(pending) = help.replace(rest) {
                push_line(&mut out, "# HELP ", pending);
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, ""));
            let suffix = if kind == "counter" && !name.ends_with("_total") { "_total" } else { "" };
            if let Some(pending) = help.take() {
                let (help_name, text) = pending.split_once(' ').unwrap_or((pending, ""));
                if help_name == name {
                    out.push_str(&format!("# HELP {name}{suffix} {text}\n"));
                } else {
                    push_line(&mut out, "# HELP ", pending);
                }
            }
            out.push_str(&format!("# TYPE {name}{suffix} {kind}\n"));
            continue;
        }
        if let Some(pending) = help.take() {
            push_line(&mut out, "# HELP ", pending);
        }
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        push_line(&mut out, "", line);
    }
    if let Some(pending) = help {
        push_line(&mut out, "# HELP ", pending);
    }
    out
}

fn push_line(out: &mut String, prefix: &str, body: &str) {
    out.push_str(prefix);
    out.push_str(body);
    out.push('\n');
}

/// The `/metrics` route.
pub(crate) fn router() -> Router<AppState> {
    Router::new().route("/metrics", get(scrape))
}

/// `GET /metrics`: OpenMetrics when the `Accept` header asks for it, else Prometheus text 0.0.4.
async fn scrape(State(app): State<AppState>, headers: HeaderMap) -> Result<Response, AppError> {
    let totals = app.execs.metric_totals().await?;
    let portfolio = crate::runtime::portfolio::aggregates(&app.execs).await?;
    let text = app.metrics.render(&totals, &pool_report(app.pool()), &portfolio).map_err(anyhow::Error::from)?;
    let openmetrics = headers
        .get_all(ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("application/openmetrics-text"));
    let response = if openmetrics {
        ([(CONTENT_TYPE, HeaderValue::from_static(OPENMETRICS_TEXT))], text).into_response()
    } else {
        ([(CONTENT_TYPE, HeaderValue::from_static(PROMETHEUS_TEXT))], to_prometheus_text(&text)).into_response()
    };
    Ok(response)
}

/// Where the inner [`record_route`] layer leaves the request's matched route for [`track`].
#[derive(Debug, Clone, Default)]
struct RouteSlot(Arc<OnceLock<MatchedPath>>);

/// The `method` label: the nine standard methods by name, anything else `other`.
fn method_label(method: &Method) -> Cow<'static, str> {
    let name = match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        Method::CONNECT => "CONNECT",
        Method::TRACE => "TRACE",
        _ => "other",
    };
    Cow::Borrowed(name)
}

/// Middleware around the whole router: times each request and records it under its method,
/// matched route (see [`record_route`]) and status. Outside the timeout layer, so a request
/// that timed out is recorded (503) under its route.
pub(crate) async fn track(State(metrics): State<Metrics>, mut req: Request, next: Next) -> Response {
    let slot = RouteSlot::default();
    req.extensions_mut().insert(slot.clone());
    let method = method_label(req.method());
    let watch = Stopwatch::start();
    let response = next.run(req).await;
    let route = slot.0.get().map_or(Cow::Borrowed(UNMATCHED), |m| Cow::Owned(m.as_str().to_string()));
    metrics.observe(method, route, response.status().as_u16(), watch.elapsed().as_secs_f64());
    response
}

/// Route layer (runs only once a route matched): hands the [`MatchedPath`] to [`track`].
pub(crate) async fn record_route(req: Request, next: Next) -> Response {
    if let (Some(slot), Some(path)) = (req.extensions().get::<RouteSlot>(), req.extensions().get::<MatchedPath>()) {
        let _ = slot.0.set(path.clone());
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_text_names_the_total_sample_of_a_counter_and_drops_eof() {
        let om = "# HELP a_seconds Agent time.\n# TYPE a_seconds counter\na_seconds_total 1.5\n\
                  # HELP g Gauge.\n# TYPE g gauge\ng{x=\"1\"} 2\n# HELP h Latency.\n# TYPE h histogram\n\
                  h_sum 0.1\nh_count 1\nh_bucket{le=\"+Inf\"} 1\n# EOF\n";
        let text = to_prometheus_text(om);
        assert_eq!(
            text,
            "# HELP a_seconds_total Agent time.\n# TYPE a_seconds_total counter\na_seconds_total 1.5\n\
             # HELP g Gauge.\n# TYPE g gauge\ng{x=\"1\"} 2\n# HELP h Latency.\n# TYPE h histogram\n\
             h_sum 0.1\nh_count 1\nh_bucket{le=\"+Inf\"} 1\n"
        );
    }

    #[test]
    fn a_scrape_has_every_family_and_a_zero_for_each_status() {
        let metrics = Metrics::new();
        metrics.observe("GET".into(), "/api/v1/specs/{id}".into(), 200, 0.003);
        let totals = MetricTotals {
            executions_by_status: vec![("running".into(), 2)],
            spend_usd: 1.25,
            dispatches: 3,
            agent_seconds: 4.5,
            gates_passed: 1,
            gates_failed: 2,
            gates_skipped: 5,
            journal_commits: 4,
            journal_appends: 10,
        };
        let pool = PoolReport { open: true, drivers: Default::default(), free_agent_slots: 3 };
        let text = to_prometheus_text(&metrics.render(&totals, &pool, &Aggregates::default()).unwrap());
        for line in [
            "baton_executions{status=\"running\"} 2",
            "baton_executions{status=\"complete\"} 0",
            "# TYPE baton_step_dispatches_total counter",
            "baton_step_dispatches_total 3",
            "baton_agent_seconds_total 4.5",
            "baton_spend_usd_total 1.25",
            "baton_gate_results_total{result=\"failed\"} 2",
            "baton_gate_results_total{result=\"skipped\"} 5",
            "baton_journal_group_commits_total 4",
            "baton_journal_group_appends_total 10",
            "baton_pool_open 1",
            "baton_pool_free_agent_slots 3",
            "baton_http_request_duration_seconds_bucket{le=\"0.005\",method=\"GET\",route=\"/api/v1/specs/{id}\",status=\"200\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
    }

    #[test]
    fn unknown_methods_share_one_label() {
        assert_eq!(method_label(&Method::GET), "GET");
        assert_eq!(method_label(&Method::from_bytes(b"BREW").unwrap()), "other");
    }
}
