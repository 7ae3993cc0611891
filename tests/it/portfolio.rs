//! The portfolio figures (issue 16 §5): computed from a real SQLite store seeded with specs,
//! executions and journal events at chosen times, answered as JSON by `GET /api/v1/metrics`,
//! drawn as SVG by the metrics page (`/portfolio`), and filtered by project and range (bad
//! filters: 400 naming the parameter).

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use baton::runtime::config::DataDir;
use baton::runtime::executions::Executions;
use baton::store::{NewEvent, NewSpec, ProjectRow, SpecChange, Store, Summary};
use baton::web::{self, AppState};
use serde_json::{json, Value};
use tower::ServiceExt as _;

/// The seeded range: November 2026.
pub(crate) const RANGE: &str = "from=2026-11-01&to=2026-11-30";

fn project(name: &str) -> ProjectRow {
    ProjectRow {
        name: name.into(),
        repo_path: "/nonexistent".into(),
        default_branch: "main".into(),
        agent_profile: "demo".into(),
        test_command: String::new(),
        forge_url: String::new(),
        max_agents: 0,
        created_at: "2026-10-01T00:00:00+00:00".into(),
        require_separate_reviewer: false,
        trigger_label: String::new(),
        forge_repo: String::new(),
        budget_usd: None,
        repo_url: String::new(),
    }
}

/// A spec of `project` created at `created`, moved through `moves` (action, to, at, task).
async fn spec(store: &Store, project: &str, title: &str, created: &str, moves: &[(&str, &str, &str, Option<&str>)]) {
    let id = match store
        .insert_spec(&NewSpec {
            project: project.into(),
            title: title.into(),
            body: "body".into(),
            source: "board".into(),
            source_url: String::new(),
            source_meta: "{}".into(),
            source_key: String::new(),
            priority: 2,
            status: "draft".into(),
            actor: "lead".into(),
            at: created.into(),
        })
        .await
        .unwrap()
    {
        baton::store::SpecInsert::Created(id) => id,
        baton::store::SpecInsert::Existing(id) => panic!("spec {id} exists"),
    };
    let mut status = "draft".to_string();
    for (action, to, at, task) in moves {
        let change = SpecChange {
            action: (*action).into(),
            expected: status.clone(),
            to: (*to).into(),
            actor: "lead".into(),
            at: (*at).into(),
            task_id: task.map(|t| Some(t.to_string())),
            ..SpecChange::default()
        };
        store.change_spec(id, &change).await.unwrap();
        status = (*to).into();
    }
}

fn summary(status: &str, spend_usd: f64) -> Summary {
    Summary { status: status.into(), current_phase: "1 Build".into(), steps_done: 1, steps_total: 2, spend_usd }
}

/// An execution created at `created` whose journal holds `events` (kind payload, at), ending
/// with `status` and `spend_usd`.
async fn execution(store: &Store, task_id: &str, created: &str, events: &[(Value, &str)], status: &str, spend: f64) {
    let plan = json!({"task_id": task_id, "task_summary": "seeded", "phases": [
        {"phase_id": 1, "name": "Build", "steps": [
            {"step_id": "1.1", "agent_name": "alpha", "task_description": "a"},
            {"step_id": "1.2", "agent_name": "beta", "task_description": "b"}],
         "gate": {"gate_type": "test", "command": "true"}}]});
    store.create_execution(task_id, &plan.to_string(), &summary("running", 0.0), created).await.unwrap();
    for (i, (payload, at)) in events.iter().enumerate() {
        let last = i + 1 == events.len();
        let s = if last { summary(status, spend) } else { summary("running", 0.0) };
        let event = NewEvent {
            kind: payload["kind"].as_str().unwrap().into(),
            payload: payload.to_string(),
            idempotency_key: format!("k{i}"),
            at: (*at).into(),
        };
        store.append(task_id, &[event], &s).await.unwrap();
    }
}

fn recorded(step: &str, agent: &str, model: &str, cost: f64) -> Value {
    json!({"kind": "step_recorded", "step_id": step, "agent_name": agent, "status": "complete", "cost_usd": cost,
           "usage": {"attempt": 1, "model": model, "input_tokens": 10, "output_tokens": 5}})
}

fn gate(passed: bool) -> Value {
    json!({"kind": "gate_recorded", "phase_id": 1, "passed": passed, "output": ""})
}

/// November 2026 in project `web` (and one spec of `other`):
/// - spec 1 fired 11-03 10:00, merged 11-04 16:00 (30 h); its execution `task-a` forecast
///   $1.60, spent $2.00 (alpha on sonnet $0.75 in the week of 11-02, beta on opus $1.25 in
///   the week of 11-09), its test gate failed once and passed once, complete;
/// - spec 2 fired 11-06 00:00, merged 11-06 06:00 (6 h); `task-b` forecast $1.00, spent
///   $0.90 (gamma on sonnet, week of 11-02), gate passed, complete;
/// - spec 3 stays a draft;
/// - spec 4, of project `other`, merged 11-20 after a 2 h cycle; `task-d` spent $5.00.
pub(crate) async fn seed(store: &Store) {
    store.insert_project(&project("web")).await.unwrap();
    store.insert_project(&project("other")).await.unwrap();
    let forecast = |a: f64, b: f64| {
        json!({"kind": "forecasted", "steps": {
            "1.1": {"low_usd": a, "mid_usd": a, "high_usd": a}, "1.2": {"low_usd": b, "mid_usd": b, "high_usd": b}}})
    };
    execution(
        store,
        "task-a",
        "2026-11-03T10:00:00+00:00",
        &[
            (forecast(1.0, 0.6), "2026-11-03T10:00:00+00:00"),
            (recorded("1.1", "alpha", "sonnet", 0.75), "2026-11-03T11:00:00+00:00"),
            (gate(false), "2026-11-03T12:00:00+00:00"),
            (recorded("1.2", "beta", "opus", 1.25), "2026-11-10T11:00:00+00:00"),
            (gate(true), "2026-11-10T12:00:00+00:00"),
        ],
        "complete",
        2.0,
    )
    .await;
    execution(
        store,
        "task-b",
        "2026-11-06T00:00:00+00:00",
        &[
            (forecast(0.5, 0.5), "2026-11-06T00:00:00+00:00"),
            (recorded("1.1", "gamma", "sonnet", 0.9), "2026-11-06T02:00:00+00:00"),
            (gate(true), "2026-11-06T03:00:00+00:00"),
        ],
        "complete",
        0.9,
    )
    .await;
    execution(
        store,
        "task-d",
        "2026-11-20T08:00:00+00:00",
        &[(recorded("1.1", "delta", "opus", 5.0), "2026-11-20T09:00:00+00:00")],
        "complete",
        5.0,
    )
    .await;
    let fired = |fire: &'static str, task: &'static str, merged: &'static str| {
        [
            ("enrich", "enriched", "2026-11-02T09:00:00+00:00", None),
            ("approve", "approved", "2026-11-02T10:00:00+00:00", None),
            ("fire", "executing", fire, Some(task)),
            ("merged", "merged", merged, None),
        ]
    };
    spec(
        store,
        "web",
        "Spec one",
        "2026-11-02T08:00:00+00:00",
        &fired("2026-11-03T10:00:00+00:00", "task-a", "2026-11-04T16:00:00+00:00"),
    )
    .await;
    spec(
        store,
        "web",
        "Spec two",
        "2026-11-02T08:30:00+00:00",
        &fired("2026-11-06T00:00:00+00:00", "task-b", "2026-11-06T06:00:00+00:00"),
    )
    .await;
    spec(store, "web", "Spec three", "2026-11-05T08:00:00+00:00", &[]).await;
    spec(
        store,
        "other",
        "Spec four",
        "2026-11-19T08:00:00+00:00",
        &fired("2026-11-20T08:00:00+00:00", "task-d", "2026-11-20T10:00:00+00:00"),
    )
    .await;
}

struct App {
    _tmp: tempfile::TempDir,
    router: Router,
}

impl App {
    async fn seeded() -> App {
        let tmp = tempfile::tempdir().unwrap();
        let execs = Executions::open(DataDir::open(&tmp.path().join("data")).unwrap()).await.unwrap();
        seed(execs.store()).await;
        let router = web::app(AppState::new(execs).unwrap());
        App { _tmp: tmp, router }
    }

    async fn get(&self, uri: &str) -> (StatusCode, String) {
        let response = self.router.clone().oneshot(Request::get(uri).body(Body::empty()).unwrap()).await.unwrap();
        let status = response.status();
        let bytes = http_body_util::BodyExt::collect(response.into_body()).await.unwrap().to_bytes();
        (status, String::from_utf8(bytes.to_vec()).unwrap())
    }

    async fn json(&self, uri: &str) -> Value {
        let (status, text) = self.get(uri).await;
        assert_eq!(status, StatusCode::OK, "{uri}: {text}");
        serde_json::from_str(&text).unwrap()
    }
}

fn stage_counts(p: &Value, day: usize) -> Vec<(String, u64)> {
    p["flow"]["series"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["stage"].as_str().unwrap().to_string(), s["counts"][day].as_u64().unwrap()))
        .filter(|(_, n)| *n > 0)
        .collect()
}

#[tokio::test]
async fn the_figures_are_computed_from_the_journal_and_the_spec_queue() {
    let app = App::seeded().await;
    let p = app.json(&format!("/api/v1/metrics?project=web&{RANGE}")).await;
    assert_eq!(
        (p["from"].as_str(), p["to"].as_str(), p["project"].as_str()),
        (Some("2026-11-01"), Some("2026-11-30"), Some("web"))
    );

    // Cumulative flow: nothing on 11-01; on 11-03 spec 1 executes, spec 2 is approved (queued)
    // (spec 3 is not written yet); by the end both fired specs are merged and spec 3 waits.
    assert_eq!(p["flow"]["days"].as_array().unwrap().len(), 30);
    assert!(stage_counts(&p, 0).is_empty());
    assert_eq!(stage_counts(&p, 2), [("queued".to_string(), 1), ("executing".to_string(), 1)]);
    assert_eq!(stage_counts(&p, 29), [("queued".to_string(), 1), ("merged".to_string(), 2)]);

    let cycle = &p["cycle_time"];
    let hours: Vec<f64> = cycle["specs"].as_array().unwrap().iter().map(|c| c["hours"].as_f64().unwrap()).collect();
    assert_eq!(hours, [30.0, 6.0]);
    assert_eq!((cycle["median_hours"].as_f64(), cycle["p90_hours"].as_f64()), (Some(18.0), Some(30.0)));

    let forecasts = &p["forecasts"];
    let rows: Vec<(&str, f64, f64, f64)> = forecasts["executions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let f = e["forecast_usd"].as_f64().unwrap();
            (e["task_id"].as_str().unwrap(), f, e["actual_usd"].as_f64().unwrap(), e["error_pct"].as_f64().unwrap())
        })
        .collect();
    assert_eq!(rows, [("task-a", 1.6, 2.0, 25.0), ("task-b", 1.0, 0.9, -10.0)]);
    assert_eq!(forecasts["mean_abs_error_pct"].as_f64(), Some(17.5));

    let spend = &p["spend"];
    assert_eq!(
        spend["weeks"].as_array().unwrap()[..3],
        [json!("2026-10-26"), json!("2026-11-02"), json!("2026-11-09")]
    );
    let series: Vec<(&str, &str, Vec<f64>)> = spend["series"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let usd = s["usd"].as_array().unwrap()[..3].iter().map(|u| u.as_f64().unwrap()).collect();
            (s["agent"].as_str().unwrap(), s["model"].as_str().unwrap(), usd)
        })
        .collect();
    assert_eq!(
        series,
        [
            ("beta", "opus", vec![0.0, 0.0, 1.25]),
            ("gamma", "sonnet", vec![0.0, 0.9, 0.0]),
            ("alpha", "sonnet", vec![0.0, 0.75, 0.0]),
        ]
    );
    assert_eq!(spend["total_usd"].as_f64(), Some(2.9));

    assert_eq!(p["gates"], json!([{"gate_type": "test", "runs": 3, "failed": 1, "failure_rate": 0.333}]));
}

#[tokio::test]
async fn the_filters_narrow_the_figures_by_project_and_range() {
    let app = App::seeded().await;
    let all = app.json(&format!("/api/v1/metrics?{RANGE}")).await;
    assert_eq!(all["cycle_time"]["specs"].as_array().unwrap().len(), 3, "every project");
    assert_eq!(all["spend"]["total_usd"].as_f64(), Some(7.9));

    let other = app.json(&format!("/api/v1/metrics?project=other&{RANGE}")).await;
    let ids: Vec<&str> =
        other["forecasts"]["executions"].as_array().unwrap().iter().map(|e| e["task_id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["task-d"]);
    assert_eq!(other["cycle_time"]["specs"][0]["hours"].as_f64(), Some(2.0));
    assert_eq!(other["gates"], json!([]));

    // Only the second week: spec 2's merge and beta's attempt; spec 1 merged before it.
    let week = app.json("/api/v1/metrics?project=web&from=2026-11-05&to=2026-11-11").await;
    let merged: Vec<i64> =
        week["cycle_time"]["specs"].as_array().unwrap().iter().map(|c| c["spec_id"].as_i64().unwrap()).collect();
    assert_eq!(merged, [2]);
    assert_eq!(week["spend"]["total_usd"].as_f64(), Some(2.15));
    assert_eq!(week["gates"][0]["runs"].as_i64(), Some(2));
    assert_eq!(week["flow"]["days"].as_array().unwrap().len(), 7);
}

#[tokio::test]
async fn bad_filters_are_refused_with_400_naming_the_parameter() {
    let app = App::seeded().await;
    for (query, says) in [
        ("from=yesterday", "from: \"yesterday\" is not a date (YYYY-MM-DD)"),
        ("to=2026-02-30", "to: \"2026-02-30\" is not a date"),
        ("from=2026-11-30&to=2026-11-01", "from: 2026-11-30 is after to: 2026-11-01"),
        ("from=2025-01-01&to=2026-11-30", "at most 366"),
        ("colour=red", "colour"),
    ] {
        for path in ["/api/v1/metrics", "/portfolio"] {
            let (status, text) = app.get(&format!("{path}?{query}")).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{path}?{query}: {text}");
            let shown = text.replace("&quot;", "\"").replace("&#34;", "\"").replace("\\\"", "\"");
            assert!(shown.contains(says), "{path}?{query}: {text}");
        }
    }
    let (status, text) = app.get("/api/v1/metrics?project=nope").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{text}");
    assert!(text.contains("no project named nope"), "{text}");
}

#[tokio::test]
async fn the_metrics_page_draws_each_figure_as_svg_with_its_values() {
    let app = App::seeded().await;
    let (status, html) = app.get(&format!("/portfolio?project=web&{RANGE}")).await;
    assert_eq!(status, StatusCode::OK, "{html}");
    assert_eq!(html.matches("<svg").count(), 5, "five plots");
    for expected in [
        // The cumulative flow's legend, with each stage's count on the last day.
        "Merged (2)",
        "Queued (1)",
        // Cycle times on their bars.
        "30.0 h",
        "6.0 h",
        // Forecast and actual of task-a.
        "$1.60",
        "$2.00",
        // Spend series and week totals.
        "beta · opus ($1.25)",
        "alpha · sonnet ($0.75)",
        "$1.65",
        // The gate's failure rate.
        "1/3 (33%)",
        // The link in the navigation and the filter's selected project.
        "href=\"/portfolio\"",
        "<option value=\"web\" selected>",
    ] {
        assert!(html.contains(expected), "the page lacks {expected:?}");
    }
    // Without data, each plot says so instead of drawing an empty frame.
    let (_, empty) = app.get("/portfolio?from=2026-01-01&to=2026-01-31").await;
    assert!(empty.contains("No specs in this range."), "{empty}");
    assert!(empty.contains("No gate ran in this range."));
}

#[tokio::test]
async fn metrics_exposes_the_all_time_aggregates() {
    let app = App::seeded().await;
    let (status, text) = app.get("/metrics").await;
    assert_eq!(status, StatusCode::OK, "{text}");
    for line in [
        "baton_specs{stage=\"merged\"} 3",
        "baton_specs{stage=\"queued\"} 1",
        "baton_specs{stage=\"executing\"} 0",
        "baton_cycle_time_seconds_count 3",
        // 30 h + 6 h + 2 h.
        "baton_cycle_time_seconds_sum 136800.0",
        "baton_cycle_time_seconds_bucket{le=\"43200.0\"} 2",
        "baton_forecast_mean_abs_error_percent 17.5",
        "baton_forecast_executions 2",
        "baton_gate_runs_total{gate_type=\"test\",result=\"failed\"} 1",
        "baton_gate_runs_total{gate_type=\"test\",result=\"passed\"} 2",
    ] {
        assert!(text.lines().any(|l| l == line), "/metrics lacks {line:?}:\n{text}");
    }
}

#[tokio::test]
async fn an_open_pull_request_counts_from_when_it_opened_not_from_the_last_write_to_its_merge_row() {
    let tmp = tempfile::tempdir().unwrap();
    let execs = Executions::open(DataDir::open(&tmp.path().join("data")).unwrap()).await.unwrap();
    let store = execs.store();
    store.insert_project(&project("pulls")).await.unwrap();
    execution(
        store,
        "task-p",
        "2026-11-10T08:00:00+00:00",
        &[(recorded("1.1", "alpha", "sonnet", 0.5), "2026-11-10T09:00:00+00:00")],
        "complete",
        0.5,
    )
    .await;
    spec(
        store,
        "pulls",
        "Spec with a pull request",
        "2026-11-09T08:00:00+00:00",
        &[
            ("enrich", "enriched", "2026-11-09T09:00:00+00:00", None),
            ("approve", "approved", "2026-11-09T10:00:00+00:00", None),
            ("fire", "executing", "2026-11-10T08:00:00+00:00", Some("task-p")),
        ],
    )
    .await;
    let spec_id = 1; // the fresh store's first spec
                     // The pull request opened on 11-10 at 10:00 (the merge notes it); a remediation round's
                     // push rewrote the merge row on 11-25.
    store.note_spec_event(spec_id, "pr_opened", "lead", "pull request #43", "2026-11-10T10:00:00+00:00").await.unwrap();
    store
        .put_merge(&baton::store::MergeRow {
            task_id: "task-p".into(),
            spec_id: Some(spec_id),
            forge_repo: "lumen-labs/lantern".into(),
            branch: "baton/task-p".into(),
            base_branch: "main".into(),
            state: "opened".into(),
            pushed_sha: "0123456789abcdef0123456789abcdef01234567".into(),
            pr_number: Some(43),
            pr_url: "https://github.com/lumen-labs/lantern/pull/43".into(),
            error: String::new(),
            updated_at: "2026-11-25T12:00:00+00:00".into(),
        })
        .await
        .unwrap();
    let router = web::app(AppState::new(execs).unwrap());
    let app = App { _tmp: tmp, router };
    let p = app.json(&format!("/api/v1/metrics?project=pulls&{RANGE}")).await;
    // 11-09: queued; from the end of 11-10 on (index 9): the pull request is open, also on the
    // days before the merge row was last written.
    assert_eq!(stage_counts(&p, 8), [("queued".to_string(), 1)]);
    for day in [9, 15, 23] {
        assert_eq!(stage_counts(&p, day), [("pr_open".to_string(), 1)], "day {}", day + 1);
    }
}
