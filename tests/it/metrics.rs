//! Operability of `baton serve`: `/metrics` (HTTP latency by matched route, the families read
//! from the database, the pool), `/readyz` with its checks, and the OpenAPI document checked
//! against the routes declared in `src/web/api/`. One router per test over a real SQLite file
//! in a temp data dir, driven with `oneshot` requests.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use baton::model::plan::MachinePlan;
use baton::runtime::config::DataDir;
use baton::runtime::executions::Executions;
use baton::web::{self, AppState};
use serde_json::{json, Value};
use tower::ServiceExt as _;

struct App {
    _tmp: tempfile::TempDir,
    state: AppState,
    router: Router,
}

impl App {
    async fn new() -> App {
        let tmp = tempfile::tempdir().unwrap();
        let execs = Executions::open(DataDir::open(&tmp.path().join("data")).unwrap()).await.unwrap();
        let state = AppState::new(execs).unwrap();
        let router = web::app(state.clone());
        App { _tmp: tmp, state, router }
    }

    async fn send(&self, req: Request<Body>) -> (StatusCode, axum::http::HeaderMap, String) {
        let response = self.router.clone().oneshot(req).await.unwrap();
        let (status, headers) = (response.status(), response.headers().clone());
        let bytes = http_body_util::BodyExt::collect(response.into_body()).await.unwrap().to_bytes();
        (status, headers, String::from_utf8(bytes.to_vec()).unwrap())
    }

    async fn get(&self, uri: &str) -> (StatusCode, Value) {
        let (status, _, text) = self.send(Request::get(uri).body(Body::empty()).unwrap()).await;
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    async fn post(&self, uri: &str, body: Value) -> (StatusCode, Value) {
        let req = Request::post(uri).header("content-type", "application/json").body(Body::from(body.to_string()));
        let (status, _, text) = self.send(req.unwrap()).await;
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    /// `GET /metrics` with `accept`, as text, with its content type.
    async fn scrape(&self, accept: Option<&str>) -> (String, String) {
        let mut req = Request::get("/metrics");
        if let Some(accept) = accept {
            req = req.header("accept", accept);
        }
        let (status, headers, text) = self.send(req.body(Body::empty()).unwrap()).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        (headers["content-type"].to_str().unwrap().to_string(), text)
    }

    /// An execution of one phase (one step, a gate): the step dispatched and recorded (2.5 s,
    /// $0.75), the gate failed (which re-dispatches the step), the step again (1 s, $0.25), the
    /// gate passed.
    async fn with_gated_execution(&self, task_id: &str) {
        let plan = json!({
            "task_id": task_id,
            "task_summary": "Plan for the metrics tests",
            "phases": [{"phase_id": 1, "name": "Build", "steps": [
                {"step_id": "1.1", "agent_name": "alpha", "task_description": "Build it."}],
                "gate": {"gate_type": "test", "command": "true"}}]
        });
        self.state.execs.create(MachinePlan::from_json(&plan.to_string()).unwrap()).await.unwrap();
        let events = [
            json!({"kind": "step_dispatched", "step_id": "1.1", "agent_name": "alpha"}),
            json!({"kind": "step_recorded", "step_id": "1.1", "agent_name": "alpha", "status": "complete",
                   "duration_seconds": 2.5, "cost_usd": 0.75}),
            json!({"kind": "gate_recorded", "phase_id": 1, "passed": false, "output": "1 test failed"}),
            json!({"kind": "step_dispatched", "step_id": "1.1", "agent_name": "alpha"}),
            json!({"kind": "step_recorded", "step_id": "1.1", "agent_name": "alpha", "status": "complete",
                   "duration_seconds": 1.0, "cost_usd": 0.25}),
            json!({"kind": "gate_recorded", "phase_id": 1, "passed": true}),
        ];
        for event in events {
            let (status, body) = self.post(&format!("/api/v1/executions/{task_id}/events"), event.clone()).await;
            assert_eq!(status, StatusCode::CREATED, "{event} → {body}");
        }
    }
}

/// The sample lines of `text` (no comments).
fn samples(text: &str) -> Vec<&str> {
    text.lines().filter(|l| !l.starts_with('#')).collect()
}

#[tokio::test]
async fn metrics_expose_latency_by_matched_route_and_the_database_families() {
    let app = App::new().await;
    app.with_gated_execution("met-1").await;
    assert_eq!(app.get("/api/v1/executions/met-1").await.0, StatusCode::OK);
    assert_eq!(app.get("/api/v1/executions/no-such-task").await.0, StatusCode::NOT_FOUND);
    assert_eq!(app.get("/no/such/route/4711").await.0, StatusCode::NOT_FOUND);
    let delete = Request::delete("/api/v1/board").body(Body::empty()).unwrap();
    assert_eq!(app.send(delete).await.0, StatusCode::METHOD_NOT_ALLOWED);

    let (content_type, text) = app.scrape(None).await;
    assert!(content_type.starts_with("text/plain; version=0.0.4"), "{content_type}");
    let lines = samples(&text);
    let has = |line: &str| lines.contains(&line);
    let hist = "baton_http_request_duration_seconds";
    for expected in [
        format!("{hist}_count{{method=\"GET\",route=\"/api/v1/executions/{{task_id}}\",status=\"200\"}} 1"),
        format!("{hist}_count{{method=\"GET\",route=\"/api/v1/executions/{{task_id}}\",status=\"404\"}} 1"),
        format!("{hist}_count{{method=\"POST\",route=\"/api/v1/executions/{{task_id}}/events\",status=\"201\"}} 6"),
        format!("{hist}_count{{method=\"GET\",route=\"unmatched\",status=\"404\"}} 1"),
        format!("{hist}_count{{method=\"DELETE\",route=\"unmatched\",status=\"405\"}} 1"),
        format!("{hist}_bucket{{le=\"+Inf\",method=\"GET\",route=\"unmatched\",status=\"404\"}} 1"),
    ] {
        assert!(has(&expected), "missing {expected:?} in\n{text}");
    }
    assert!(
        !text.contains("met-1") && !text.contains("no-such-task") && !text.contains("4711"),
        "raw URIs leak:\n{text}"
    );
    assert!(text.contains(&format!("# TYPE {hist} histogram")), "{text}");

    let status = app.get("/api/v1/executions/met-1").await.1["status"].as_str().unwrap().to_string();
    for expected in [
        format!("baton_executions{{status=\"{status}\"}} 1"),
        "baton_step_dispatches_total 2".to_string(),
        "baton_agent_seconds_total 3.5".to_string(),
        "baton_spend_usd_total 1.0".to_string(),
        "baton_gate_results_total{result=\"passed\"} 1".to_string(),
        "baton_gate_results_total{result=\"failed\"} 1".to_string(),
        "baton_pool_open 1".to_string(),
        "baton_pool_free_agent_slots 3".to_string(),
        "baton_pool_drivers{state=\"running\"} 0".to_string(),
    ] {
        assert!(has(&expected), "missing {expected:?} in\n{text}");
    }
    for status in ["running", "approval_pending", "complete", "cancelled"] {
        assert!(text.contains(&format!("baton_executions{{status=\"{status}\"}}")), "every status has a series");
    }
    // The events posted above went through the journal's group path: each commit carried at
    // least one of them.
    let value = |name: &str| -> u64 {
        let line =
            lines.iter().find(|l| l.starts_with(&format!("{name} "))).unwrap_or_else(|| panic!("{name}:\n{text}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    let (commits, appends) = (value("baton_journal_group_commits_total"), value("baton_journal_group_appends_total"));
    assert!(commits >= 1 && appends >= commits, "commits {commits}, appends {appends}");
    assert!(text.contains("# TYPE baton_step_dispatches_total counter"), "0.0.4 names the counter's sample:\n{text}");
    assert!(!text.contains("# EOF"), "{text}");

    // A scraper asking for OpenMetrics gets it as encoded.
    let (content_type, text) = app.scrape(Some("application/openmetrics-text;version=1.0.0,text/plain;q=0.5")).await;
    assert!(content_type.starts_with("application/openmetrics-text; version=1.0.0"), "{content_type}");
    assert!(text.contains("# TYPE baton_step_dispatches counter\n") && text.ends_with("# EOF\n"), "{text}");
    assert!(text.contains("\nbaton_step_dispatches_total 2\n"), "{text}");
    // The first scrape is measured too, under its own route.
    assert!(text.contains(&format!("{hist}_count{{method=\"GET\",route=\"/metrics\",status=\"200\"}} 1")), "{text}");
}

#[tokio::test]
async fn readyz_reports_the_database_and_the_pool_and_fails_once_the_pool_shut_down() {
    let app = App::new().await;
    let (status, body) = app.get("/readyz").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body,
        json!({
            "status": "ready",
            "database": {"ok": true},
            "pool": {"open": true, "drivers": {"running": 0, "parked": 0, "errored": 0}, "free_agent_slots": 3}
        })
    );

    app.state.pool().shutdown(Duration::from_secs(1)).await;
    let (status, body) = app.get("/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["error"], "unavailable", "the API's error shape: {body}");
    assert!(body["message"].as_str().unwrap().contains("worker pool is shut down"), "{body}");
    assert_eq!(body["details"]["pool"]["open"], false, "{body}");
    assert_eq!(body["details"]["database"]["ok"], true, "{body}");
    let (_, text) = app.scrape(None).await;
    assert!(samples(&text).contains(&"baton_pool_open 0"), "{text}");

    app.state.execs.store().close().await;
    let (status, body) = app.get("/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["details"]["database"]["ok"], false, "{body}");
    assert!(body["message"].as_str().unwrap().contains("database does not answer"), "{body}");
}

/// The handlers registered under `src/web/api/`: every name inside a `routes!(…)` call (one
/// OpenAPI operation each); fails when a module registers a route with a bare `.route(`, which
/// would be served without being documented.
fn registered_api_handlers() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/web/api");
    let mut handlers = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let source = std::fs::read_to_string(&path).unwrap();
        assert!(
            calls(&source, ".route(").is_empty(),
            "{}: a route registered with .route( is not in the OpenAPI document; use .routes(routes!(…))",
            path.display()
        );
        for call in calls(&source, "routes!(") {
            handlers.extend(call.split(',').map(|h| h.trim().to_string()).filter(|h| !h.is_empty()));
        }
    }
    handlers
}

/// The argument text of every `needle…)` call in `source` (parentheses balanced).
fn calls<'a>(source: &'a str, needle: &str) -> Vec<&'a str> {
    let mut out = Vec::new();
    let mut rest = source;
    while let Some(at) = rest.find(needle) {
        let args = &rest[at + needle.len()..];
        let mut depth = 1;
        let mut end = args.len();
        for (i, c) in args.char_indices() {
            match c {
                '(' => depth += 1,
                ')' => depth -= 1,
                _ => {}
            }
            if depth == 0 {
                end = i;
                break;
            }
        }
        out.push(&args[..end]);
        rest = &args[end..];
    }
    out
}

/// Resolves a local `$ref` (`#/components/…`) in `doc`.
fn resolve<'a>(doc: &'a Value, value: &'a Value) -> &'a Value {
    match value.get("$ref").and_then(Value::as_str) {
        Some(reference) => {
            let pointer = reference.strip_prefix('#').unwrap_or_else(|| panic!("non-local $ref {reference}"));
            doc.pointer(pointer).unwrap_or_else(|| panic!("dangling $ref {reference}"))
        }
        None => value,
    }
}

/// Every `$ref` string anywhere in `value`.
fn refs(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v) {
                    ("$ref", Value::String(r)) => out.push(r.clone()),
                    _ => refs(v, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| refs(v, out)),
        _ => {}
    }
}

#[tokio::test]
async fn the_openapi_document_lists_exactly_the_api_routes() {
    let app = App::new().await;
    let (status, headers, text) = app.send(Request::get("/api/v1/openapi.json").body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers["content-type"], "application/json");
    let doc: Value = serde_json::from_str(&text).expect("the document is JSON");
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."), "openapi: {}", doc["openapi"]);
    assert!(doc["info"]["title"].is_string() && doc["info"]["version"].is_string());

    let mut all_refs = Vec::new();
    refs(&doc, &mut all_refs);
    for r in &all_refs {
        resolve(&doc, &json!({ "$ref": r }));
    }
    let error = &doc["components"]["schemas"]["Error"];
    let required: BTreeSet<&str> = error["required"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(required, BTreeSet::from(["error", "message", "details"]), "the error shape");

    let mut documented = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        let params: BTreeSet<String> = path
            .split('/')
            .filter_map(|seg| seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
            .map(String::from)
            .collect();
        for (method, operation) in item.as_object().unwrap() {
            documented.insert((method.to_uppercase(), path.clone()));
            let declared: BTreeSet<String> = operation["parameters"]
                .as_array()
                .map(|ps| {
                    ps.iter()
                        .map(|p| resolve(&doc, p))
                        .filter(|p| p["in"] == "path")
                        .map(|p| p["name"].as_str().unwrap().to_string())
                        .collect()
                })
                .unwrap_or_default();
            assert_eq!(declared, params, "{method} {path}: path parameters");
            let responses =
                operation["responses"].as_object().unwrap_or_else(|| panic!("{method} {path}: no responses"));
            assert!(responses.keys().any(|c| c.starts_with('2')), "{method} {path}: no success response");
            for (code, response) in responses {
                if code.starts_with('4') || code.starts_with('5') {
                    let schema = &resolve(&doc, response)["content"]["application/json"]["schema"]["$ref"];
                    assert_eq!(schema, "#/components/schemas/Error", "{method} {path} {code}: not the error shape");
                }
            }
        }
    }

    let handlers = registered_api_handlers();
    assert!(handlers.len() > 20, "the source scan found too few handlers: {handlers:?}");
    assert_eq!(handlers.len(), documented.len(), "one operation per registered handler: {handlers:?} {documented:?}");

    // And the router really serves each documented route (the scan's prefixes are right): a
    // request with made-up parameters reaches a handler, never the fallback or a 405.
    for (method, path) in &documented {
        let uri =
            path.replace("{task_id}", "no-such-task").replace("{id}", "999999").replace("{name}", "no-such-project");
        let req = Request::builder().method(method.as_str()).uri(&uri);
        let req = if matches!(method.as_str(), "POST" | "PUT" | "PATCH") {
            req.header("content-type", "application/json").body(Body::from("{}"))
        } else {
            req.body(Body::empty())
        };
        let response = app.router.clone().oneshot(req.unwrap()).await.unwrap();
        let status = response.status();
        assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {uri}");
        if status == StatusCode::NOT_FOUND {
            let bytes = http_body_util::BodyExt::collect(response.into_body()).await.unwrap().to_bytes();
            let body: Value = serde_json::from_slice(&bytes).unwrap();
            assert_ne!(body["message"], "no such route", "{method} {uri} fell through to the fallback");
        }
    }
}
