//! The API's contract at its edges (issue 14.7): every 4xx is a JSON problem body
//! `{error, message, details}`, parameters are checked against their documented bounds, and a
//! form over the body limit is 413.

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use serde_json::Value;

use crate::app::TestApp;

/// Sends `req`: (status, content type, body).
async fn send(app: &TestApp, req: Request<Body>) -> (StatusCode, String, String) {
    let (status, headers, body) = app.text(req).await;
    let kind = headers.get(header::CONTENT_TYPE).map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
    (status, kind, body)
}

fn assert_problem(what: &str, status: StatusCode, want: StatusCode, kind: &str, body: &str) {
    assert_eq!(status, want, "{what}: {body}");
    assert!(kind.starts_with("application/json"), "{what}: content type {kind:?}: {body}");
    let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {body}"));
    assert!(v["error"].is_string() && v["message"].is_string() && v.get("details").is_some(), "{what}: {v}");
}

#[tokio::test]
async fn bad_parameters_and_paths_are_json_problems_with_the_documented_status() {
    let app = TestApp::new().await;
    let get = |uri: &str| Request::get(uri).body(Body::empty()).unwrap();
    for (what, uri) in [
        ("board page 0", "/api/v1/board?page=0"),
        ("stream after -1", "/api/v1/executions/t-1/stream?after=-1"),
        ("a path that is not UTF-8", "/api/v1/specs/%FF"),
        ("an execution id that is not UTF-8", "/api/v1/executions/%FF%FE/journal"),
    ] {
        let (status, kind, body) = send(&app, get(uri)).await;
        assert_problem(what, status, StatusCode::BAD_REQUEST, &kind, &body);
    }
    let import = Request::post("/api/v1/specs/import").body(Body::from(r#"{"project":"p","ref":"o/r#1"}"#)).unwrap();
    let (status, kind, body) = send(&app, import).await;
    assert_problem("an import without a content type", status, StatusCode::UNSUPPORTED_MEDIA_TYPE, &kind, &body);
}

#[tokio::test]
async fn a_page_form_over_the_body_limit_is_413() {
    let app = TestApp::new().await;
    let big = format!("csrf=x&project=p&title=t&body={}", "a".repeat(3 * 1024 * 1024));
    let req = Request::post("/specs")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(header::COOKIE, "baton_csrf=0123456789abcdef0123456789abcdef")
        .body(Body::from(big))
        .unwrap();
    let (status, _, body) = send(&app, req).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{}", &body[..body.len().min(300)]);
}

/// One documented operation of the generated OpenAPI document.
struct Operation {
    method: String,
    path: String,
    op: Value,
}

/// Every operation of `doc`.
fn operations(doc: &Value) -> Vec<Operation> {
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("a path item") {
            out.push(Operation { method: method.to_uppercase(), path: path.clone(), op: op.clone() });
        }
    }
    out
}

/// Resolves a local `$ref`.
fn resolved<'a>(doc: &'a Value, value: &'a Value) -> &'a Value {
    match value.get("$ref").and_then(Value::as_str) {
        Some(r) => doc.pointer(r.trim_start_matches('#')).unwrap_or_else(|| panic!("dangling {r}")),
        None => value,
    }
}

/// The operation's path with made-up ids that name nothing.
fn unknown_ids(path: &str) -> String {
    path.replace("{task_id}", "no-such-task").replace("{id}", "999999").replace("{name}", "no-such-project")
}

/// A JSON value of another type than `schema` declares (`None` when it accepts anything).
fn wrong_value(doc: &Value, schema: &Value) -> Option<Value> {
    let schema = resolved(doc, schema);
    let kind = match &schema["type"] {
        Value::String(t) => t.clone(),
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).find(|t| *t != "null")?.to_string(),
        _ if schema.get("oneOf").is_some() || schema.get("allOf").is_some() => "object".into(),
        _ => return None,
    };
    Some(match kind.as_str() {
        "string" => serde_json::json!(12),
        "integer" | "number" => serde_json::json!("twelve"),
        "boolean" => serde_json::json!("yes"),
        "array" => serde_json::json!({ "not": "an array" }),
        _ => serde_json::json!([1, 2]),
    })
}

/// Checks an answer to a bad request: a documented 4xx status of the operation, a JSON problem
/// body whose `error` is one of the document's codes.
fn assert_documented_problem(doc: &Value, o: &Operation, what: &str, status: StatusCode, kind: &str, body: &str) {
    let at = format!("{} {} ({what})", o.method, o.path);
    assert!(status.is_client_error(), "{at}: {status} is not a 4xx: {body}");
    let documented = o.op["responses"].as_object().expect("responses");
    assert!(documented.contains_key(status.as_str()), "{at}: {status} is not documented: {body}");
    assert!(kind.starts_with("application/json"), "{at}: content type {kind:?}: {body}");
    let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{at}: not JSON ({e}): {body}"));
    let codes = doc["components"]["schemas"]["Error"]["properties"]["error"]["$ref"]
        .as_str()
        .map_or(&doc["components"]["schemas"]["Error"]["properties"]["error"], |r| {
            doc.pointer(r.trim_start_matches('#')).expect("the error code schema")
        })["enum"]
        .as_array()
        .expect("the error code enum")
        .clone();
    assert!(codes.contains(&v["error"]), "{at}: error {} is not a documented code: {v}", v["error"]);
    assert!(v["message"].is_string() && v.get("details").is_some(), "{at}: not a problem body: {v}");
}

/// Walks every operation of the served, generated OpenAPI document and sends it bad input:
/// malformed JSON, a body of the wrong kind, each field with the wrong type, no content type,
/// ids that name nothing, query parameters out of their schema or unknown, a path that is not
/// UTF-8. Every answer must be a 4xx the operation documents, as a JSON problem body.
#[tokio::test]
async fn every_documented_operation_answers_bad_input_with_a_documented_problem() {
    let app = TestApp::new().await;
    let (status, _, text) = send(&app, Request::get("/api/v1/openapi.json").body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::OK);
    let doc: Value = serde_json::from_str(&text).unwrap();
    let ops = operations(&doc);
    assert!(ops.len() > 30, "{} operations", ops.len());
    let (mut sent, mut named) = (0, 0);
    for o in &ops {
        let uri = unknown_ids(&o.path);
        let has_body = o.op.get("requestBody").is_some();
        let json_req = |uri: &str, body: String| {
            Request::builder()
                .method(o.method.as_str())
                .uri(uri)
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(body))
                .unwrap()
        };
        let mut cases: Vec<(String, Request<Body>)> = Vec::new();
        if has_body {
            cases.push(("malformed JSON".into(), json_req(&uri, r#"{"kind": "#.into())));
            cases.push(("an array body".into(), json_req(&uri, "[1, 2]".into())));
            cases.push(("a string body".into(), json_req(&uri, r#""text""#.into())));
            let no_type = Request::builder().method(o.method.as_str()).uri(&uri).body(Body::from("{}")).unwrap();
            cases.push(("no content type".into(), no_type));
            let schema = &o.op["requestBody"]["content"]["application/json"]["schema"];
            let schema = resolved(&doc, schema);
            if let Some(props) = schema["properties"].as_object() {
                for (name, prop) in props {
                    if let Some(wrong) = wrong_value(&doc, prop) {
                        let body = serde_json::json!({ name: wrong }).to_string();
                        cases.push((format!("{name} of the wrong type"), json_req(&uri, body)));
                    }
                }
                cases.push(("an unknown field".into(), json_req(&uri, r#"{"no_such_field": 1}"#.into())));
            }
            cases.push(("unknown ids".into(), json_req(&uri, "{}".into())));
        } else if o.path.contains('{') {
            let req = Request::builder().method(o.method.as_str()).uri(&uri).body(Body::empty()).unwrap();
            cases.push(("unknown ids".into(), req));
        }
        if o.path.contains('{') {
            let bad =
                o.path.split('/').map(|s| if s.starts_with('{') { "%FF" } else { s }).collect::<Vec<_>>().join("/");
            let req = Request::builder().method(o.method.as_str()).uri(&bad).body(Body::empty()).unwrap();
            cases.push(("a path that is not UTF-8".into(), req));
        }
        let query: Vec<&Value> = o.op["parameters"]
            .as_array()
            .map(|ps| ps.iter().map(|p| resolved(&doc, p)).filter(|p| p["in"] == "query").collect())
            .unwrap_or_default();
        for p in &query {
            let name = p["name"].as_str().unwrap();
            let schema = resolved(&doc, &p["schema"]);
            let mut values = Vec::new();
            match schema["type"].as_str().or_else(|| schema["type"][0].as_str()) {
                Some("integer") => {
                    values.push("abc".to_string());
                    if let Some(min) = schema["minimum"].as_i64() {
                        values.push((min - 1).to_string());
                    }
                    if let Some(max) = schema["maximum"].as_i64() {
                        values.push((max + 1).to_string());
                    }
                }
                Some("boolean") => values.push("maybe".into()),
                _ if schema.get("enum").is_some()
                    || schema.get("$ref").is_some()
                    || p["schema"].get("oneOf").is_some() =>
                {
                    values.push("no-such-value".into())
                }
                _ => {}
            }
            for v in values {
                let sep = "?";
                let req = Request::builder()
                    .method(o.method.as_str())
                    .uri(format!("{uri}{sep}{name}={v}"))
                    .body(Body::empty())
                    .unwrap();
                cases.push((format!("?{name}={v}"), req));
            }
        }
        if !query.is_empty() {
            let req = Request::builder()
                .method(o.method.as_str())
                .uri(format!("{uri}?no_such_param=1"))
                .body(Body::empty())
                .unwrap();
            cases.push(("an unknown query parameter".into(), req));
        }
        for (what, req) in cases {
            let (status, kind, body) = send(&app, req).await;
            assert_documented_problem(&doc, o, &what, status, &kind, &body);
            // A query value out of its schema, or an unknown parameter, names the parameter
            // (a bad `/board?page=0` had answered `details: null`).
            let param = what
                .strip_prefix('?')
                .and_then(|q| q.split_once('='))
                .map(|(name, _)| name)
                .or((what == "an unknown query parameter").then_some("no_such_param"));
            if let (Some(param), StatusCode::BAD_REQUEST) = (param, status) {
                let v: Value = serde_json::from_str(&body).unwrap();
                assert_eq!(v["details"]["field"], param, "{} {} ({what}): {v}", o.method, o.path);
                named += 1;
            }
            sent += 1;
        }
    }
    assert!(sent > 150, "only {sent} bad requests sent");
    assert!(named > 10, "only {named} bad query strings named their parameter");
}

/// Once users exist, every documented operation answers a request without a credential with
/// its documented 401, and a viewer's write with its documented 403.
#[tokio::test]
async fn every_documented_operation_needs_its_credential_and_role() {
    let app = TestApp::new().await;
    // Before any request: the server remembers "no users" for a second.
    let viewer = app.user("vera", "viewer", None);
    let doc: Value = serde_json::from_str(baton::web::api::openapi::openapi_json()).unwrap();
    for o in operations(&doc) {
        let uri = unknown_ids(&o.path);
        let req = |token: Option<&str>| {
            let mut b =
                Request::builder().method(o.method.as_str()).uri(&uri).header(header::CONTENT_TYPE, "application/json");
            if let Some(t) = token {
                b = b.header(header::AUTHORIZATION, format!("Bearer {t}"));
            }
            let body = if o.op.get("requestBody").is_some() { Body::from("{}") } else { Body::empty() };
            b.body(body).unwrap()
        };
        let (status, kind, body) = send(&app, req(None)).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{} {uri} without a credential: {body}", o.method);
        assert_documented_problem(&doc, &o, "no credential", status, &kind, &body);
        if o.method != "GET" {
            let (status, kind, body) = send(&app, req(Some(&viewer))).await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{} {uri} as a viewer: {body}", o.method);
            assert_documented_problem(&doc, &o, "a viewer's write", status, &kind, &body);
        }
    }
}

/// Found by a tester: a repeated parameter, and a value a handler's own check refuses
/// (`/metrics?from=notadate`), answered 400 without naming the parameter, some in axum's own
/// words ("Failed to deserialize query string: …").
#[tokio::test]
async fn every_bad_query_value_names_its_parameter_in_plain_words() {
    let app = TestApp::new().await;
    for (uri, field) in [
        ("/api/v1/board?page=1&page=2", "page"),
        ("/api/v1/board?page=-1", "page"),
        ("/api/v1/metrics?from=notadate", "from"),
        ("/api/v1/metrics?to=2026-13-45", "to"),
        ("/api/v1/specs?offset=-1", "offset"),
    ] {
        let (status, kind, body) = send(&app, Request::get(uri).body(Body::empty()).unwrap()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{uri}: {body}");
        assert!(kind.starts_with("application/json"), "{uri}: {kind}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["details"]["field"], field, "{uri}: {v}");
        assert!(!v["message"].as_str().unwrap().starts_with("Failed to deserialize"), "{uri}: {v}");
    }
}

/// A bad `Last-Event-ID` names the header, and a body that is not JSON says where it stops
/// parsing (line and column): both had answered `details: null` (found by a tester).
#[tokio::test]
async fn a_bad_header_and_a_body_that_is_not_json_say_where() {
    let app = TestApp::new().await;
    for value in ["x", "-1"] {
        let req = Request::get("/api/v1/executions/t-1/stream").header("last-event-id", value).body(Body::empty());
        let (status, kind, body) = send(&app, req.unwrap()).await;
        assert_problem(value, status, StatusCode::BAD_REQUEST, &kind, &body);
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["details"]["field"], "Last-Event-ID", "{value}: {v}");
    }
    let (status, v) = app.post_raw("/api/v1/specs", "{\n  \"title\": \"x\",\n  oops\n}").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(v["error"], "invalid_body", "{v}");
    assert_eq!((v["details"]["line"].as_u64(), v["details"]["column"].as_u64()), (Some(3), Some(3)), "{v}");
}
