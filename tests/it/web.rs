//! `baton serve`'s router, driven with `oneshot` requests over a real SQLite file in a temp
//! data dir; one smoke test serves on 127.0.0.1:0.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use baton::web;
use serde_json::{json, Value};
use tower::ServiceExt as _;

use crate::app::TestApp;

/// Creates an execution of a two-phase plan: step 1.1 behind an approval, then step 2.1.
async fn with_approval_plan(app: &TestApp, task_id: &str) {
    let plan = json!({
        "task_id": task_id,
        "task_summary": "Plan for the API tests",
        "phases": [
            {"phase_id": 1, "name": "Design", "approval_required": true, "steps": [
                {"step_id": "1.1", "agent_name": "alpha", "task_description": "Design it."}]},
            {"phase_id": 2, "name": "Build", "steps": [
                {"step_id": "2.1", "agent_name": "beta", "task_description": "Build it."}]}
        ]
    });
    app.execution(&plan).await;
}

async fn journal_len(app: &TestApp, task_id: &str) -> usize {
    let (status, body) = app.get(&format!("/api/v1/executions/{task_id}/journal")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body.as_array().unwrap().len()
}

fn record_step(step_id: &str, agent: &str) -> Value {
    json!({"kind": "step_recorded", "step_id": step_id, "agent_name": agent, "status": "complete", "outcome": "done"})
}

#[tokio::test]
async fn health_and_readiness_answer_ok() {
    let app = TestApp::new().await;
    assert_eq!(app.get("/healthz").await, (StatusCode::OK, json!({"status": "ok"})));
    let (status, body) = app.get("/readyz").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = app.get("/no/such/route").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["error"], "not_found");
}

#[tokio::test]
async fn executions_are_listed_and_shown_with_their_next_action() {
    let app = TestApp::new().await;
    let (status, body) = app.get("/api/v1/executions").await;
    assert_eq!((status, body), (StatusCode::OK, json!([])));
    with_approval_plan(&app, "web-list").await;
    let (status, body) = app.get("/api/v1/executions").await;
    assert_eq!(status, StatusCode::OK);
    let item = &body[0];
    assert_eq!(item["task_id"], "web-list");
    assert_eq!(item["status"], "running");
    assert_eq!(item["steps_done"], 0);
    assert_eq!(item["steps_total"], 2);
    assert!(item["created_at"].is_string() && item["updated_at"].is_string(), "{item}");
    let (status, body) = app.get("/api/v1/executions/web-list").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["task_id"], "web-list");
    assert_eq!(body["plan"]["phases"][0]["name"], "Design");
    assert_eq!(body["next_action"]["action_type"], "dispatch");
    assert_eq!(body["next_action"]["step_id"], "1.1");
    let (status, body) = app.get("/api/v1/executions/web-list/next?all=true").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body.as_array().unwrap().len(), 1, "{body}");
    assert_eq!(body[0]["step_id"], "1.1");
}

#[tokio::test]
async fn an_approval_is_asked_after_the_step_and_decided_over_the_api() {
    let app = TestApp::new().await;
    with_approval_plan(&app, "web-approve").await;
    assert_eq!(journal_len(&app, "web-approve").await, 0);

    let (status, body) = app.post("/api/v1/executions/web-approve/events", record_step("1.1", "alpha")).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["recorded"], true);
    assert!(body["idempotency_key"].as_str().is_some_and(|k| !k.is_empty()), "{body}");
    assert_eq!(body["next_action"]["action_type"], "approval");

    let (_, journal) = app.get("/api/v1/executions/web-approve/journal").await;
    assert_eq!(journal.as_array().unwrap().len(), 1);
    assert_eq!(journal[0]["seq"], 1);
    assert_eq!(journal[0]["kind"], "step_recorded");
    assert_eq!(journal[0]["payload"]["step_id"], "1.1");
    assert_eq!(journal[0]["payload"]["actor"], "api");
    assert!(journal[0]["hash"].is_string());

    let (status, next) = app.get("/api/v1/executions/web-approve/next").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(next["action_type"], "approval");

    let req = Request::post("/api/v1/executions/web-approve/approve")
        .header("content-type", "application/json")
        .header("x-baton-actor", "reviewer@example")
        .body(Body::from(json!({"phase_id": 1, "result": "approve", "feedback": "fine"}).to_string()))
        .unwrap();
    let (status, body) = app.send(req).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["next_action"]["action_type"], "dispatch");
    assert_eq!(body["next_action"]["step_id"], "2.1");
    let (_, journal) = app.get("/api/v1/executions/web-approve/journal").await;
    assert_eq!(journal[1]["payload"]["actor"], "reviewer@example");

    let (status, body) = app.post("/api/v1/executions/web-approve/events", record_step("2.1", "beta")).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["next_action"]["action_type"], "complete");
    let (_, next) = app.get("/api/v1/executions/web-approve/next").await;
    assert_eq!(next["action_type"], "complete");
}

#[tokio::test]
async fn the_same_record_twice_is_applied_once() {
    let app = TestApp::new().await;
    with_approval_plan(&app, "web-dup").await;
    let mut event = record_step("1.1", "alpha");
    event["idempotency_key"] = json!("client-key-1");
    let (status, first) = app.post("/api/v1/executions/web-dup/events", event.clone()).await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    assert_eq!(first["idempotency_key"], "client-key-1");
    let (status, second) = app.post("/api/v1/executions/web-dup/events", event).await;
    assert_eq!(status, StatusCode::OK, "{second}");
    assert_eq!(second["recorded"], false);
    assert_eq!(second["idempotency_key"], "client-key-1");
    assert_eq!(journal_len(&app, "web-dup").await, 1);
    // The same key for a different event is a conflict.
    let mut other = record_step("1.1", "alpha");
    other["idempotency_key"] = json!("client-key-1");
    other["outcome"] = json!("something else");
    let (status, body) = app.post("/api/v1/executions/web-dup/events", other).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["details"]["reason"], "key_conflict");
}

#[tokio::test]
async fn malformed_bodies_are_client_errors_naming_the_problem() {
    let app = TestApp::new().await;
    with_approval_plan(&app, "web-bad").await;
    let uri = "/api/v1/executions/web-bad/events";

    let (status, body) = app.post_raw(uri, "{ not json").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"], "invalid_body");
    assert!(body["message"].is_string() && body.get("details").is_some(), "{body}");

    let (status, body) = app.post(uri, json!({"kind": "step_teleported", "step_id": "1.1"})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(body["message"].as_str().unwrap().contains("step_teleported"), "{body}");

    let (status, body) = app.post("/api/v1/executions/web-bad/approve", json!({"phase_id": "one"})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(body["message"].as_str().unwrap().contains("phase_id"), "{body}");

    let req = Request::post(uri).body(Body::from(record_step("1.1", "alpha").to_string())).unwrap();
    let (status, body) = app.send(req).await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{body}");
    assert_eq!(body["error"], "invalid_body");

    let (status, body) = app.get("/api/v1/executions/web-bad/next?all=maybe").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(journal_len(&app, "web-bad").await, 0);
}

#[tokio::test]
async fn an_unknown_execution_is_404_everywhere() {
    let app = TestApp::new().await;
    for uri in ["/api/v1/executions/nope", "/api/v1/executions/nope/journal", "/api/v1/executions/nope/next"] {
        let (status, body) = app.get(uri).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{uri}: {body}");
        assert_eq!(body["error"], "not_found");
        assert!(body["message"].as_str().unwrap().contains("nope"), "{body}");
    }
    let (status, body) = app.post("/api/v1/executions/nope/events", record_step("1.1", "alpha")).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (status, _) = app.post("/api/v1/executions/nope/cancel", json!({"reason": "x"})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_record_for_an_unknown_step_is_422_and_writes_nothing() {
    let app = TestApp::new().await;
    with_approval_plan(&app, "web-unknown-step").await;
    let (status, body) = app.post("/api/v1/executions/web-unknown-step/events", record_step("9.9", "x")).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"], "unprocessable");
    assert_eq!(body["message"], "unknown step 9.9");
    assert_eq!(journal_len(&app, "web-unknown-step").await, 0);
    let (status, body) = app.post("/api/v1/executions/web-unknown-step/skip", json!({"step_id": "9.9"})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(journal_len(&app, "web-unknown-step").await, 0);
}

#[tokio::test]
async fn state_conflicts_are_409_and_write_nothing() {
    let app = TestApp::new().await;
    with_approval_plan(&app, "web-conflict").await;
    // No approval is pending yet.
    let approve = json!({"phase_id": 1, "result": "approve"});
    let (status, body) = app.post("/api/v1/executions/web-conflict/approve", approve).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"], "conflict");
    // An approval for another phase than the pending one.
    let (status, _) = app.post("/api/v1/executions/web-conflict/events", record_step("1.1", "alpha")).await;
    assert_eq!(status, StatusCode::CREATED);
    let wrong = json!({"phase_id": 2, "result": "approve"});
    let (status, body) = app.post("/api/v1/executions/web-conflict/approve", wrong).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(journal_len(&app, "web-conflict").await, 1);
    // Cancelled is final.
    let (status, body) = app.post("/api/v1/executions/web-conflict/cancel", json!({"reason": "test"})).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["next_action"]["action_type"], "failed");
    let (status, body) = app.post("/api/v1/executions/web-conflict/retry-step", json!({"step_id": "1.1"})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["details"]["reason"], "final");
    assert_eq!(journal_len(&app, "web-conflict").await, 2);
}

#[test]
fn without_users_only_loopback_addresses_may_be_bound() {
    assert!(web::check_bind("127.0.0.1:8741".parse().unwrap(), false).is_ok());
    assert!(web::check_bind("[::1]:0".parse().unwrap(), false).is_ok());
    let err = web::check_bind("0.0.0.0:8741".parse().unwrap(), false).unwrap_err();
    assert!(err.to_string().contains("loopback") && err.to_string().contains("token create"), "{err}");
    assert!(web::check_bind("192.168.1.10:80".parse().unwrap(), false).is_err());
    assert!(web::check_bind("0.0.0.0:8741".parse().unwrap(), true).is_ok(), "with users, any address");
}

#[test]
fn serve_refuses_a_non_loopback_bind_without_users_with_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .arg("--data-dir")
        .arg(tmp.path().join("data"))
        .args(["serve", "--bind", "0.0.0.0:8741"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no users are configured"), "{out:?}");
}

#[tokio::test]
async fn the_server_serves_on_a_real_socket_and_shuts_down_gracefully() {
    let app = TestApp::new().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(web::serve(listener, app.state(), async {
        let _ = stopped.await;
    }));
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.to_ascii_lowercase().contains("x-request-id"), "{response}");
    assert!(response.ends_with(r#"{"status":"ok"}"#), "{response}");
    stop.send(()).unwrap();
    server.await.unwrap().unwrap();
}

#[tokio::test]
async fn two_concurrent_decisions_on_one_approval_record_exactly_one() {
    let app = TestApp::new().await;
    with_approval_plan(&app, "web-race").await;
    let (status, _) = app.post("/api/v1/executions/web-race/events", record_step("1.1", "alpha")).await;
    assert_eq!(status, StatusCode::CREATED);
    let router = app.router();
    let decide = |result: &str| {
        let body = json!({"phase_id": 1, "result": result, "feedback": "why"}).to_string();
        let req = Request::post("/api/v1/executions/web-race/approve")
            .header("content-type", "application/json")
            .body(Body::from(body))
            .unwrap();
        router.clone().oneshot(req)
    };
    let (a, b) = tokio::join!(decide("approve"), decide("reject"));
    let mut statuses = [a.unwrap().status(), b.unwrap().status()];
    statuses.sort();
    assert_eq!(statuses, [StatusCode::CREATED, StatusCode::CONFLICT]);
    assert_eq!(journal_len(&app, "web-race").await, 2);
}

#[tokio::test]
async fn a_record_while_a_driver_holds_the_lease_is_409() {
    let app = TestApp::new().await;
    with_approval_plan(&app, "web-leased").await;
    let lease = baton::runtime::lease::acquire_as_driver(app.store(), "web-leased", std::path::Path::new("/srv/baton"))
        .await
        .unwrap();
    let (status, body) = app.post("/api/v1/executions/web-leased/events", record_step("1.1", "alpha")).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(body["message"].as_str().unwrap().contains("driven by another process"), "{body}");
    lease.release().await.unwrap();
    assert_eq!(journal_len(&app, "web-leased").await, 0);
    let (status, body) = app.post("/api/v1/executions/web-leased/events", record_step("1.1", "alpha")).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

#[tokio::test]
async fn wrong_methods_and_unknown_fields_get_json_errors() {
    let app = TestApp::new().await;
    with_approval_plan(&app, "web-shape").await;
    let req = Request::delete("/api/v1/executions/web-shape/journal").body(Body::empty()).unwrap();
    let (status, body) = app.send(req).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(body["error"], "method_not_allowed", "{body}");
    let (status, body) = app
        .post("/api/v1/executions/web-shape/approve", json!({"phase_id": 1, "result": "approve", "feedbak": "typo"}))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "a misspelt field is not silently dropped: {body}");
    assert!(body["message"].as_str().unwrap().contains("feedbak"), "{body}");
}

#[tokio::test]
async fn a_body_serde_refuses_names_the_field_in_details_like_our_own_validation() {
    // Found by a tester: our own 422s carry `details.field`, the JSON extractor's did not.
    let app = TestApp::new().await;
    with_approval_plan(&app, "web-field").await;
    let approve = "/api/v1/executions/web-field/approve";
    let cases = [
        (approve, json!({"phase_id": "one", "result": "approve"}), "phase_id"),
        (approve, json!({"result": "approve"}), "phase_id"),
        (approve, json!({"phase_id": 1, "result": "approve", "feedbak": "typo"}), "feedbak"),
        (approve, json!({"phase_id": 1, "result": "maybe"}), "result"),
        ("/api/v1/specs", json!({"project": "p", "title": 5}), "title"),
        ("/api/v1/projects", json!({"name": "x", "repo_path": "/tmp", "max_agents": -1}), "max_agents"),
    ];
    for (uri, body, field) in cases {
        let (status, answer) = app.post(uri, body.clone()).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {answer}");
        assert_eq!(answer["error"], "invalid_body", "{answer}");
        assert_eq!(answer["details"]["field"], field, "{body}: {answer}");
        assert!(answer["message"].as_str().unwrap().contains(field), "{answer}");
    }
    // Syntax errors stay 400 without a field.
    let (status, answer) = app.post_raw(approve, "{ not json").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert_eq!(journal_len(&app, "web-field").await, 0);
}

#[tokio::test]
async fn a_body_that_is_not_a_json_object_is_refused_before_it_is_decoded() {
    // serde fills a struct from an array's items by position: this array approved phase 1.
    let app = TestApp::new().await;
    with_approval_plan(&app, "web-array").await;
    let (status, body) = app.post("/api/v1/executions/web-array/events", record_step("1.1", "alpha")).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["next_action"]["action_type"], "approval", "phase 1 waits for its approval");
    let approve = "/api/v1/executions/web-array/approve";
    for (body, kind) in
        [(r#"[1, "approve"]"#, "an array"), (r#""approve""#, "a string"), ("1", "a number"), ("null", "null")]
    {
        let (status, answer) = app.post_raw(approve, body).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {answer}");
        assert_eq!(answer["error"], "invalid_body", "{answer}");
        let message = answer["message"].as_str().unwrap();
        assert!(message.contains("must be a JSON object") && message.contains(kind), "{body}: {answer}");
    }
    // Text that is no JSON at all is a syntax error (400), even when it starts like `null`.
    for body in ["not json", "nul", "[1,"] {
        let (status, answer) = app.post_raw(approve, body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
        assert!(!answer["message"].as_str().unwrap().contains("must be a JSON object"), "{body}: {answer}");
    }
    assert_eq!(journal_len(&app, "web-array").await, 1, "no decision was recorded");
    // The object form still works, whitespace first included.
    let (status, answer) = app.post_raw(approve, r#"  {"phase_id": 1, "result": "approve"}"#).await;
    assert!(status.is_success(), "{answer}");
    assert_eq!(journal_len(&app, "web-array").await, 2);
}

#[tokio::test]
async fn an_open_event_stream_does_not_hold_up_shutdown() {
    let app = TestApp::new().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(web::serve(listener, app.state(), async {
        let _ = stopped.await;
    }));
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(b"GET /api/v1/stream HTTP/1.1\r\nHost: localhost\r\n\r\n").await.unwrap();
    let mut head = [0u8; 64];
    let n = stream.read(&mut head).await.unwrap();
    assert!(String::from_utf8_lossy(&head[..n]).starts_with("HTTP/1.1 200"), "the stream is open");
    stop.send(()).unwrap();
    let done = tokio::time::timeout(std::time::Duration::from_secs(5), server).await;
    assert!(done.is_ok(), "the server stopped without waiting for the stream's client");
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest).await;
}

#[tokio::test]
async fn a_client_that_never_finishes_its_headers_is_disconnected() {
    let app = TestApp::new().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let state = app.state().with_header_read_timeout(std::time::Duration::from_millis(300));
    let server = tokio::spawn(web::serve(listener, state, async {
        let _ = stopped.await;
    }));
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Trickle: 1").await.unwrap();
    // The server closes the connection (hyper answers 408 first); without a header-read
    // timeout this read waits for ever, so it is bounded here only to fail instead of hang.
    let mut answer = Vec::new();
    let closed = tokio::time::timeout(std::time::Duration::from_secs(20), slow.read_to_end(&mut answer)).await;
    assert!(closed.is_ok(), "the connection was still open");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.is_empty() || answer.starts_with("HTTP/1.1 408"), "{answer}");
    // A client that sends its request in time is served.
    let mut quick = tokio::net::TcpStream::connect(addr).await.unwrap();
    quick.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").await.unwrap();
    let mut answer = Vec::new();
    quick.read_to_end(&mut answer).await.unwrap();
    assert!(String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 200"), "{}", String::from_utf8_lossy(&answer));
    stop.send(()).unwrap();
    server.await.unwrap().unwrap();
}

#[tokio::test]
async fn the_driver_routes_for_gate_interact_and_amend_record_their_events() {
    let app = TestApp::new().await;
    with_approval_plan(&app, "web-driver").await;
    let (status, body) = app
        .post(
            "/api/v1/executions/web-driver/amend",
            json!({"description": "one more step", "steps": [{"phase_id": 2, "step": {"step_id": "2.2", "agent_name": "gamma", "task_description": "More."}}]}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (_, state) = app.get("/api/v1/executions/web-driver").await;
    assert_eq!(state["plan"]["phases"][1]["steps"].as_array().unwrap().len(), 2, "{state}");
    // Each refusal names the field it refuses (`details.field`).
    let (status, body) = app.post("/api/v1/executions/web-driver/amend", json!({"kind": "cancelled"})).await;
    assert_eq!((status, &body["details"]["field"]), (StatusCode::UNPROCESSABLE_ENTITY, &json!("kind")), "{body}");
    // An amendment's own fields are named too, however deep (they used to come back without
    // `details.field`).
    for (amendment, field) in [
        (json!({"description": "x", "phases": [{"phase_id": 3}]}), "phases[0].name"),
        (json!({"description": "x", "steps": "2.2"}), "steps"),
        (
            json!({"description": "x", "steps": [{"phase_id": 2, "step": {"step_id": "2.3"}}]}),
            "steps[0].step.agent_name",
        ),
        (json!({"phases": []}), "description"),
        // Found by a tester: an amendment that says nothing of why was taken.
        (
            json!({"description": "  ", "steps": [{"phase_id": 2, "step": {"step_id": "2.3", "agent_name": "g", "task_description": "x"}}]}),
            "description",
        ),
    ] {
        let (status, body) = app.post("/api/v1/executions/web-driver/amend", amendment.clone()).await;
        assert_eq!(
            (status, &body["details"]["field"]),
            (StatusCode::UNPROCESSABLE_ENTITY, &json!(field)),
            "{amendment}: {body}"
        );
    }
    let (status, body) = app
        .post("/api/v1/executions/web-driver/interact", json!({"step_id": "1.1", "input": "x", "complete": true}))
        .await;
    assert_eq!((status, &body["details"]["field"]), (StatusCode::UNPROCESSABLE_ENTITY, &json!("complete")), "{body}");
    let (status, body) =
        app.post("/api/v1/executions/web-driver/gate", json!({"phase_id": 1, "passed": true, "skipped": true})).await;
    assert_eq!((status, &body["details"]["field"]), (StatusCode::UNPROCESSABLE_ENTITY, &json!("skipped")), "{body}");
    // Found by a tester: a pass whose command failed was taken.
    let (status, body) =
        app.post("/api/v1/executions/web-driver/gate", json!({"phase_id": 1, "passed": true, "exit_code": 1})).await;
    assert_eq!((status, &body["details"]["field"]), (StatusCode::UNPROCESSABLE_ENTITY, &json!("exit_code")), "{body}");
    let (status, body) =
        app.post("/api/v1/executions/web-driver/gate", json!({"phase_id": 1, "passed": true, "colour": 1})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let (status, body) = app.post("/api/v1/executions/web-driver/gate", json!({"phase_id": 1, "passed": true})).await;
    assert_eq!(status, StatusCode::CONFLICT, "phase 1 has no gate to record now: {body}");
    assert_eq!(journal_len(&app, "web-driver").await, 1, "only the amendment was journaled");
}

/// `X-Baton-Actor` is UTF-8 text: `élodie` is journaled as the actor (it was refused as not
/// visible ASCII, found by a tester); a name over 200 bytes is a 400 naming the header.
#[tokio::test]
async fn an_actor_header_in_utf8_is_a_name_and_an_overlong_one_is_refused() {
    let app = TestApp::new().await;
    with_approval_plan(&app, "web-actor").await;
    let uri = "/api/v1/executions/web-actor/events";
    let (status, body) = app.post_as(uri, &"x".repeat(201), record_step("1.1", "alpha")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["message"].as_str().unwrap().to_lowercase().contains("x-baton-actor"), "{body}");
    let (status, body) = app.post_as(uri, "élodie", record_step("1.1", "alpha")).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (_, journal) = app.get("/api/v1/executions/web-actor/journal").await;
    let last = journal.as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["payload"]["actor"], "élodie", "{last}");
}

/// Found by a tester: `/events` dropped fields its event does not have, so a typo lost data
/// (`"outcom": "LGTM"` journaled an empty outcome, `"toknes"` zero tokens). Such a field is
/// refused naming it, as every other body's is, and nothing is journaled.
#[tokio::test]
async fn an_event_field_its_kind_does_not_have_is_refused_naming_it() {
    let app = TestApp::new().await;
    with_approval_plan(&app, "web-typo").await;
    let uri = "/api/v1/executions/web-typo/events";
    let before = journal_len(&app, "web-typo").await;
    for (event, field) in [
        (
            json!({"kind": "step_recorded", "step_id": "1.1", "agent_name": "alpha", "status": "complete", "outcom": "LGTM"}),
            "outcom",
        ),
        (json!({"kind": "step_skipped", "step_id": "2.1", "reason": "x", "extra": true}), "extra"),
    ] {
        let (status, body) = app.post(uri, event.clone()).await;
        assert_eq!((status, &body["details"]["field"]), (StatusCode::UNPROCESSABLE_ENTITY, &json!(field)), "{body}");
        assert!(body["message"].as_str().unwrap().contains(&format!("unknown field `{field}`")), "{body}");
    }
    assert_eq!(journal_len(&app, "web-typo").await, before);
    // The envelope's own fields are fields of every kind.
    let event = json!({"kind": "step_recorded", "step_id": "1.1", "agent_name": "alpha", "status": "complete",
        "outcome": "LGTM", "tokens": 500, "idempotency_key": "typo-1", "actor": "ignored"});
    let (status, body) = app.post(uri, event).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

/// Found by a tester: a `quota_wait` "until garbage" was journaled through the API; its wait
/// ended at once and the step was dispatched again while its first attempt still ran. The
/// time must be RFC 3339: anything else is a 422 naming `until`, and nothing is journaled.
#[tokio::test]
async fn a_quota_wait_until_a_time_that_is_no_time_is_refused_naming_until() {
    let app = TestApp::new().await;
    with_approval_plan(&app, "web-quota").await;
    let before = journal_len(&app, "web-quota").await;
    for until in ["garbage", "", "2026-13-40T99:00:00Z"] {
        let wait =
            json!({"kind": "quota_wait", "step_id": "1.1", "agent_name": "alpha", "account": "claude", "until": until});
        let (status, body) = app.post("/api/v1/executions/web-quota/events", wait).await;
        assert_eq!(
            (status, &body["details"]["field"]),
            (StatusCode::UNPROCESSABLE_ENTITY, &json!("until")),
            "{until:?}: {body}"
        );
    }
    assert_eq!(journal_len(&app, "web-quota").await, before);
}

/// Found by a tester: a `quota_wait` from a door was refused only while this process's
/// driver ran the attempt; with replicas, an attempt that another replica's driver launched
/// (its run directory elsewhere, its lease its own) could still be given one, and the driver
/// would have dispatched the step again beside it. The journal says who dispatched the
/// attempt, which every replica reads: a wait for a driver's attempt is refused (409), and
/// one for an attempt dispatched from outside (the driver contract) is taken.
#[tokio::test]
async fn a_quota_wait_requeue_or_result_for_an_attempt_a_driver_launched_is_refused() {
    use baton::model::event::{Event, EventKind};
    use baton::runtime::ops::Operator;
    let app = TestApp::new().await;
    with_approval_plan(&app, "web-replica").await;
    let dispatch = EventKind::StepDispatched { step_id: "1.1".into(), agent_name: "alpha".into() };
    let key = baton::runtime::runs::dispatch_key("web-replica", "1.1", 1);
    app.app.ops.record("web-replica", Event::new(dispatch).with_key(key), &Operator::baton()).await.unwrap();
    let before = journal_len(&app, "web-replica").await;
    let wait = |step: &str, agent: &str| {
        json!({"kind": "quota_wait", "step_id": step, "agent_name": agent, "account": "claude",
            "until": "2099-01-01T00:00:00Z"})
    };
    let (status, body) = app.post("/api/v1/executions/web-replica/events", wait("1.1", "alpha")).await;
    assert_eq!((status, &body["details"]["reason"]), (StatusCode::CONFLICT, &json!("lease_held")), "{body}");
    assert!(body["message"].as_str().unwrap().contains("its driver dispatched attempt 1"), "{body}");
    // The same for a requeue (it started a second attempt beside the first) and for a result
    // (a failure ended the step while its agent ran on): found by a verifying tester.
    for event in [
        json!({"kind": "step_requeued", "step_id": "1.1"}),
        json!({"kind": "step_recorded", "step_id": "1.1", "agent_name": "alpha", "status": "failed", "error": "x"}),
    ] {
        let (status, body) = app.post("/api/v1/executions/web-replica/events", event.clone()).await;
        assert_eq!(
            (status, &body["details"]["reason"]),
            (StatusCode::CONFLICT, &json!("lease_held")),
            "{event}: {body}"
        );
    }
    assert_eq!(journal_len(&app, "web-replica").await, before);

    // The driver contract: the orchestrator dispatched the attempt, and reports its wait.
    with_approval_plan(&app, "web-outside").await;
    let dispatched = json!({"kind": "step_dispatched", "step_id": "1.1", "agent_name": "alpha"});
    let (status, body) = app.post("/api/v1/executions/web-outside/events", dispatched).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = app.post("/api/v1/executions/web-outside/events", wait("1.1", "alpha")).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

/// Found by a verifying tester: the engine's 422s named the field in their message only,
/// while every other 422 names it in `details.field` too (a client highlights the input from
/// it). Each refused value, unknown step and unknown phase now does; nothing is journaled.
#[tokio::test]
async fn the_engines_422s_name_the_field_in_details() {
    let app = TestApp::new().await;
    with_approval_plan(&app, "web-fields").await;
    let before = journal_len(&app, "web-fields").await;
    let events = "/api/v1/executions/web-fields/events";
    for (uri, body, field) in [
        (events, json!({"kind": "budget_raised", "by_usd": -1.0}), "by_usd"),
        (
            events,
            json!({"kind": "step_recorded", "step_id": "1.1", "agent_name": "alpha", "status": "complete",
                "duration_seconds": 1e300}),
            "duration_seconds",
        ),
        (
            events,
            json!({"kind": "step_recorded", "step_id": "1.1", "agent_name": "alpha", "status": "complete",
                "cost_usd": -5.0}),
            "cost_usd",
        ),
        (events, record_step("9.9", "alpha"), "step_id"),
        (events, json!({"kind": "approval_recorded", "phase_id": 7, "result": "approve"}), "phase_id"),
        ("/api/v1/executions/web-fields/interact", json!({"step_id": "9.9", "input": "hello"}), "step_id"),
    ] {
        let (status, answer) = app.post(uri, body.clone()).await;
        assert_eq!(
            (status, &answer["details"]["field"]),
            (StatusCode::UNPROCESSABLE_ENTITY, &json!(field)),
            "{body}: {answer}"
        );
    }
    assert_eq!(journal_len(&app, "web-fields").await, before);
}

/// Found by a tester: an approval's feedback holding a NUL made a remediation step whose
/// commit failed on every attempt. Any text of an operator's event holding one is refused,
/// naming the field, and nothing is journaled.
#[tokio::test]
async fn an_event_text_holding_a_nul_is_refused_naming_the_field() {
    let app = TestApp::new().await;
    with_approval_plan(&app, "web-nul").await;
    let (status, body) = app.post("/api/v1/executions/web-nul/events", record_step("1.1", "alpha")).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let before = journal_len(&app, "web-nul").await;
    for (uri, body, field) in [
        (
            "/api/v1/executions/web-nul/approve",
            json!({"phase_id": 1, "result": "approve-with-feedback", "feedback": "fix\u{0}it"}),
            "feedback",
        ),
        ("/api/v1/executions/web-nul/cancel", json!({"reason": "no\u{0}"}), "reason"),
    ] {
        let (status, answer) = app.post(uri, body.clone()).await;
        assert_eq!(
            (status, &answer["details"]["field"]),
            (StatusCode::UNPROCESSABLE_ENTITY, &json!(field)),
            "{body}: {answer}"
        );
        assert!(answer["message"].as_str().unwrap().contains("NUL"), "{answer}");
    }
    assert_eq!(journal_len(&app, "web-nul").await, before);
}

/// Found by a tester: an execution paused, then cancelled, read "paused" for ever (page, card,
/// API). A cancel ends the pause with the execution.
#[tokio::test]
async fn a_cancelled_execution_is_no_longer_paused() {
    let app = TestApp::new().await;
    with_approval_plan(&app, "web-paused").await;
    let (status, body) = app.post("/api/v1/executions/web-paused/pause", json!({})).await;
    assert!(status.is_success(), "{body}");
    let (_, exec) = app.get("/api/v1/executions/web-paused").await;
    assert_eq!(exec["paused"], true, "{exec}");
    let (status, body) = app.post("/api/v1/executions/web-paused/cancel", json!({"reason": "done with it"})).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (_, exec) = app.get("/api/v1/executions/web-paused").await;
    assert_eq!((exec["status"].as_str(), &exec["paused"]), (Some("cancelled"), &json!(false)), "{exec}");
}

/// Found by a verifying tester: an amendment took a gate type with a line break (or U+2028),
/// which a new plan refuses; it was shown raw by `execute status` and the page.
#[tokio::test]
async fn an_amended_gate_type_on_two_lines_is_refused() {
    let app = TestApp::new().await;
    with_approval_plan(&app, "web-amend-gate").await;
    let before = journal_len(&app, "web-amend-gate").await;
    for gate_type in ["te\nst", "te\u{2028}st"] {
        let amend = json!({"description": "add a phase", "phases": [{"phase_id": 0, "name": "New",
            "gate": {"gate_type": gate_type, "command": "true"},
            "steps": [{"step_id": "9.1", "agent_name": "alpha", "task_description": "x"}]}]});
        let (status, body) = app.post("/api/v1/executions/web-amend-gate/amend", amend).await;
        assert_eq!((status, &body["details"]["field"]), (StatusCode::UNPROCESSABLE_ENTITY, &json!("phases")), "{body}");
    }
    assert_eq!(journal_len(&app, "web-amend-gate").await, before);
}

/// Found by a tester: an interact without input (`{"step_id": "1.1"}`, or only blanks)
/// journaled an empty human reply, used a turn and sent the agent an empty "Human reply". It
/// is refused naming `input`, nothing is journaled, and a reply or a completion still works.
#[tokio::test]
async fn an_empty_human_reply_is_refused_naming_the_input() {
    let app = TestApp::new().await;
    let plan = json!({
        "task_id": "web-interact",
        "task_summary": "Interactive step",
        "phases": [{"phase_id": 1, "name": "Talk", "steps": [
            {"step_id": "1.1", "agent_name": "helper", "task_description": "Ask.", "interactive": true}]}]
    });
    app.execution(&plan).await;
    let asked = json!({"kind": "step_recorded", "step_id": "1.1", "agent_name": "helper", "status": "interacting", "outcome": "Which DB?"});
    let (status, body) = app.post("/api/v1/executions/web-interact/events", asked).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let before = journal_len(&app, "web-interact").await;
    for reply in [json!({"step_id": "1.1"}), json!({"step_id": "1.1", "input": " \n "})] {
        let (status, body) = app.post("/api/v1/executions/web-interact/interact", reply.clone()).await;
        assert_eq!(
            (status, &body["details"]["field"]),
            (StatusCode::UNPROCESSABLE_ENTITY, &json!("input")),
            "{reply}: {body}"
        );
        assert!(body["message"].as_str().unwrap().contains("the reply is empty"), "{body}");
    }
    assert_eq!(journal_len(&app, "web-interact").await, before);
    let (status, body) =
        app.post("/api/v1/executions/web-interact/interact", json!({"step_id": "1.1", "input": "Postgres"})).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (_, state) = app.get("/api/v1/executions/web-interact").await;
    let history = state["step_results"]["1.1"]["interaction_history"].as_array().unwrap();
    assert_eq!(history.last().unwrap()["content"], "Postgres", "{state}");
}

/// Issue 14.4 through the API and the execution page: `ruff check {files}` after a step that
/// changed no file is offered as a skip, a skip that claims a pass is refused, the skip is
/// journaled as `gate_skipped` and shown as skipped (never passed), and a skip of a gate that
/// has files to check is refused.
#[tokio::test]
async fn a_gate_with_nothing_to_run_is_recorded_and_shown_as_skipped() {
    let app = TestApp::new().await;
    let plan = json!({
        "task_id": "web-skip",
        "task_summary": "Skipped gate",
        "phases": [
            {"phase_id": 1, "name": "Look", "steps": [
                {"step_id": "1.1", "agent_name": "alpha", "task_description": "Read."}],
             "gate": {"gate_type": "lint", "command": "ruff check {files}"}},
            {"phase_id": 2, "name": "Build", "steps": [
                {"step_id": "2.1", "agent_name": "beta", "task_description": "Build it."}],
             "gate": {"gate_type": "test", "command": "cargo test {files}"}}
        ]
    });
    app.execution(&plan).await;
    let (status, body) = app.post("/api/v1/executions/web-skip/events", record_step("1.1", "alpha")).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (_, next) = app.get("/api/v1/executions/web-skip/next").await;
    assert_eq!(
        (next["action_type"].as_str(), next["skip_reason"].as_str()),
        (Some("gate"), Some("no files changed")),
        "{next}"
    );
    assert_eq!(next["gate_command"], "", "{next}");
    let (status, body) =
        app.post("/api/v1/executions/web-skip/gate", json!({"phase_id": 1, "passed": true, "skipped": true})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    // A plain pass on a gate with nothing to run (an external driver ignoring `Skip:`) was
    // once recorded as a pass: it is refused, and nothing is journaled.
    let (status, body) = app.post("/api/v1/executions/web-skip/gate", json!({"phase_id": 1, "passed": true})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("nothing to run (no files changed): record it as skipped"),
        "{body}"
    );
    let (_, journal) = app.get("/api/v1/executions/web-skip/journal").await;
    assert_eq!(journal.as_array().unwrap().len(), 1, "{journal}");
    let (status, body) =
        app.post("/api/v1/executions/web-skip/gate", json!({"phase_id": 1, "passed": false, "skipped": true})).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["next_action"]["step_id"], "2.1", "the phase went on: {body}");
    let (_, journal) = app.get("/api/v1/executions/web-skip/journal").await;
    assert_eq!(journal[1]["kind"], "gate_skipped", "{journal}");
    let (_, state) = app.get("/api/v1/executions/web-skip").await;
    let gate = &state["gate_results"][0];
    assert_eq!((gate["passed"].as_bool(), gate["skipped"].as_str()), (Some(false), Some("no files changed")), "{gate}");
    let (status, html) = app.page("/executions/web-skip", crate::app::Caller::Anonymous).await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("Gate lint: skipped (no files changed, not a pass)"), "{html}");
    assert!(!html.contains("Gate lint: passed"), "{html}");

    // Phase 2's step changed a file: its gate has something to run and cannot be skipped.
    let mut rec = record_step("2.1", "beta");
    rec["files_changed"] = json!(["src/lib.rs"]);
    let (status, body) = app.post("/api/v1/executions/web-skip/events", rec).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (_, next) = app.get("/api/v1/executions/web-skip/next").await;
    assert_eq!(next["gate_command"], "cargo test src/lib.rs", "{next}");
    assert!(next.get("skip_reason").is_none(), "{next}");
    let (status, body) =
        app.post("/api/v1/executions/web-skip/gate", json!({"phase_id": 2, "passed": false, "skipped": true})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(body["message"].as_str().unwrap_or_default().contains("has something to run"), "{body}");
}

/// Issue 14.5 through the API and the page: a parked execution shows why, and resuming clears it.
#[tokio::test]
async fn a_parked_execution_shows_its_reason_until_resumed() {
    let app = TestApp::new().await;
    with_approval_plan(&app, "web-park").await;
    let reason = "feature branch `baton/web-park` is checked out at /home/u/repo: switch away and resume";
    app.store().park("web-park", reason).await.unwrap();
    let (_, view) = app.get("/api/v1/executions/web-park").await;
    assert_eq!((view["paused"].as_bool(), view["parked"].as_str()), (Some(true), Some(reason)), "{view}");
    let (status, html) = app.page("/executions/web-park", crate::app::Caller::Anonymous).await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("parked: feature branch `baton/web-park` is checked out at /home/u/repo"), "{html}");
    let (status, body) = app.post("/api/v1/executions/web-park/resume", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, view) = app.get("/api/v1/executions/web-park").await;
    assert_eq!(view["paused"], false, "{view}");
    assert!(view.get("parked").is_none(), "{view}");
}

#[tokio::test]
async fn the_execution_page_lists_a_steps_signals_escaped() {
    let app = TestApp::new().await;
    with_approval_plan(&app, "signals-1").await;
    let outcome = "Done.\nGATE_ADDITION: cargo test --lib\nGATE_ADDITION: rm -rf /\nKNOWLEDGE_GAP: <script>alert(1)</script>\n## Deviations\nUsed a ring buffer.";
    let body = json!({"kind": "step_recorded", "step_id": "1.1", "agent_name": "alpha", "status": "complete", "outcome": outcome});
    let (status, answer) = app.post("/api/v1/executions/signals-1/events", body).await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    let response = app
        .router()
        .oneshot(Request::get("/executions/signals-1").header("host", "localhost").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let bytes = http_body_util::BodyExt::collect(response.into_body()).await.unwrap().to_bytes();
    let html = String::from_utf8(bytes.to_vec()).unwrap();
    for line in [
        "gate addition: cargo test --lib",
        "refused gate addition: rm -rf / (destructive: removes files recursively or by force)",
        "deviation: Used a ring buffer.",
    ] {
        assert!(html.contains(&format!("<li>{line}</li>")), "missing {line:?} in the page");
    }
    let gap = html.split("<li>knowledge gap: ").nth(1).expect("the knowledge gap is listed");
    let gap = &gap[..gap.find("</li>").unwrap()];
    assert!(gap.contains("alert(1)") && !gap.contains('<'), "the agent's text is escaped: {gap}");
    // The approval asks with the gap in its context.
    let (_, next) = app.get("/api/v1/executions/signals-1/next").await;
    assert!(next["approval_context"].as_str().unwrap().contains("Knowledge gaps"), "{next}");
}

/// An execution `task_id` (`with_approval_plan`) parked at its $1 ceiling before step 2.1.
async fn parked_at_its_ceiling(app: &TestApp, task_id: &str) {
    with_approval_plan(app, task_id).await;
    let events = format!("/api/v1/executions/{task_id}/events");
    let forecast = json!({"kind": "forecasted", "steps": {
        "1.1": {"low_usd": 0.1, "mid_usd": 0.2, "high_usd": 0.4}, "2.1": {"low_usd": 0.1, "mid_usd": 0.2, "high_usd": 0.4}},
        "default_usd": 0.2});
    assert_eq!(app.post(&events, forecast).await.0, StatusCode::CREATED);
    let ceiling = json!({"kind": "budget_set", "ceiling_usd": 1.0, "source": "spec"});
    assert_eq!(app.post(&events, ceiling).await.0, StatusCode::CREATED);
    let mut record = record_step("1.1", "alpha");
    record["cost_usd"] = json!(0.95);
    assert_eq!(app.post(&events, record).await.0, StatusCode::CREATED);
    let approve = json!({"phase_id": 1, "result": "approve"});
    assert_eq!(app.post(&format!("/api/v1/executions/{task_id}/approve"), approve).await.0, StatusCode::CREATED);
    let (_, state) = app.get(&format!("/api/v1/executions/{task_id}")).await;
    assert_eq!(state["status"], "budget_exceeded", "{state}");
}

/// Of `people` deciding at once (their `answers`, in order), the one whose decision was
/// recorded (201); every other got 409 `already_decided` naming that one as the decider.
fn the_one_winner<'a>(people: &'a [String], answers: &[(StatusCode, Value)]) -> &'a str {
    let winners: Vec<&String> =
        people.iter().zip(answers).filter(|(_, (status, _))| *status == StatusCode::CREATED).map(|(w, _)| w).collect();
    assert_eq!(winners.len(), 1, "{answers:?}");
    for (who, (status, body)) in people.iter().zip(answers).filter(|(who, _)| *who != winners[0]) {
        assert_eq!(status, &StatusCode::CONFLICT, "{who}: {body}");
        assert_eq!(body["details"]["reason"], "already_decided", "{body}");
        assert_eq!(body["details"]["standing"]["by"], json!(winners[0]), "{body}");
    }
    winners[0]
}

/// Found by a tester: ten people stopping an execution parked at its ceiling at once all got
/// 200 `recorded: false` (a stop's derived key has no decider, so every later stop was a
/// "duplicate" of the first); and raises from several people at once could each pass the
/// "parked?" look before the first was recorded, and add up. One decision wins; every other
/// person gets 409 `already_decided` naming it; the winner's own resend is answered 200.
#[tokio::test]
async fn one_budget_decision_wins_and_the_others_are_told_whose_stands() {
    for (task_id, decision) in
        [("budget-stops", json!({"decision": "stop"})), ("budget-raises", json!({"decision": "raise", "by_usd": 0.5}))]
    {
        let app = TestApp::new().await;
        parked_at_its_ceiling(&app, task_id).await;
        let uri = format!("/api/v1/executions/{task_id}/budget");
        let people: Vec<String> = (0..8).map(|i| format!("person-{i}")).collect();
        let answers =
            futures_util::future::join_all(people.iter().map(|who| app.post_as(&uri, who, decision.clone()))).await;
        let winner = the_one_winner(&people, &answers);
        let (status, body) = app.post_as(&uri, winner, decision.clone()).await;
        assert_eq!((status, &body["recorded"]), (StatusCode::OK, &json!(false)), "the winner's resend: {body}");
        let (_, state) = app.get(&format!("/api/v1/executions/{task_id}")).await;
        if task_id == "budget-raises" {
            assert_eq!(state["budget"]["ceiling_usd"], 1.5, "raised once: {state}");
        } else {
            assert_eq!(state["status"], "cancelled", "{state}");
        }
    }
}

/// Found by a tester: of several people answering one feedback question at once, the losers
/// got `wrong_status` (the execution had moved on). They get 409 `already_decided` naming
/// the answer that stands, as for approvals; its author's resend is answered 200.
#[tokio::test]
async fn one_feedback_answer_wins_and_the_others_are_told_whose_stands() {
    let app = TestApp::new().await;
    let plan = json!({
        "task_id": "web-feedback",
        "task_summary": "Feedback race",
        "phases": [
            {"phase_id": 1, "name": "Design", "steps": [{"step_id": "1.1", "agent_name": "alpha", "task_description": "Design it."}],
             "feedback_questions": [{"question_id": "q1", "question": "Strict or lax?", "context": "",
                "options": ["Strict", "Lax"], "option_agents": ["alpha", "beta"]}]},
            {"phase_id": 2, "name": "Build", "steps": [{"step_id": "2.1", "agent_name": "beta", "task_description": "Build it."}]}
        ]
    });
    app.execution(&plan).await;
    let (status, body) = app.post("/api/v1/executions/web-feedback/events", record_step("1.1", "alpha")).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let uri = "/api/v1/executions/web-feedback/feedback";
    let answer = json!({"phase_id": 1, "question_id": "q1", "chosen_index": 0});
    let people: Vec<String> = (0..6).map(|i| format!("person-{i}")).collect();
    let answers = futures_util::future::join_all(people.iter().map(|who| app.post_as(uri, who, answer.clone()))).await;
    let winner = the_one_winner(&people, &answers);
    for (_, body) in answers.iter().filter(|(status, _)| *status == StatusCode::CONFLICT) {
        assert_eq!(body["details"]["standing"]["what"], "Strict", "{body}");
    }
    let (status, body) = app.post_as(uri, winner, answer).await;
    assert_eq!((status, &body["recorded"]), (StatusCode::OK, &json!(false)), "{body}");
}

#[tokio::test]
async fn a_parked_execution_shows_its_budget_decision_and_a_raise_over_the_api_resumes_it() {
    let app = TestApp::new().await;
    with_approval_plan(&app, "budget-web").await;
    let forecast = json!({"kind": "forecasted", "steps": {
        "1.1": {"low_usd": 0.1, "mid_usd": 0.2, "high_usd": 0.4, "samples": 3, "basis": "median of 3 <attempts>"},
        "2.1": {"low_usd": 0.1, "mid_usd": 0.2, "high_usd": 0.4}}, "default_usd": 0.2});
    assert_eq!(app.post("/api/v1/executions/budget-web/events", forecast).await.0, StatusCode::CREATED);
    let ceiling = json!({"kind": "budget_set", "ceiling_usd": 1.0, "source": "spec"});
    assert_eq!(app.post("/api/v1/executions/budget-web/events", ceiling).await.0, StatusCode::CREATED);
    // Nothing is parked yet: stop is refused, a raise too (a raise answers a BUDGET action).
    let (status, body) = app.post("/api/v1/executions/budget-web/budget", json!({"decision": "stop"})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let mut record = record_step("1.1", "alpha");
    record["cost_usd"] = json!(0.95);
    assert_eq!(app.post("/api/v1/executions/budget-web/events", record).await.0, StatusCode::CREATED);
    let approve = json!({"phase_id": 1, "result": "approve"});
    assert_eq!(app.post("/api/v1/executions/budget-web/approve", approve).await.0, StatusCode::CREATED);
    let (_, next) = app.get("/api/v1/executions/budget-web/next").await;
    assert_eq!(next["action_type"], "budget", "{next}");
    assert_eq!(next["step_id"], "2.1");
    assert_eq!(next["needed_usd"], 0.15);

    let response = app
        .router()
        .oneshot(Request::get("/executions/budget-web").header("host", "localhost").body(Body::empty()).unwrap())
        .await
        .unwrap();
    let bytes = http_body_util::BodyExt::collect(response.into_body()).await.unwrap().to_bytes();
    let html = String::from_utf8(bytes.to_vec()).unwrap();
    assert!(html.contains("id=\"budget-form\""), "the decision form is shown");
    assert!(html.contains("value=\"0.15\""), "the smallest raise is prefilled");
    assert!(
        html.contains("$0.95 / <span title=\"median of 3 &#60;attempts&#62;\">~$0.20</span>"),
        "forecast vs actual per step: {html}"
    );
    assert!(html.contains("ceiling <span id=\"ceiling\">$1.00</span> (spec)"), "the ceiling and its source");

    // Bad decisions are 422 naming the field and change nothing.
    let (status, body) = app.post("/api/v1/executions/budget-web/budget", json!({"decision": "raise"})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["details"]["field"], "by_usd");
    let (status, body) = app.post("/api/v1/executions/budget-web/budget", json!({"decision": "spend"})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let (status, body) =
        app.post("/api/v1/executions/budget-web/budget", json!({"decision": "raise", "by_usd": -1})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let (status, body) =
        app.post("/api/v1/executions/budget-web/budget", json!({"decision": "raise", "by_usd": 0.5})).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["next_action"]["action_type"], "dispatch", "{body}");
    assert_eq!(body["next_action"]["step_id"], "2.1");
    let (_, shown) = app.get("/api/v1/executions/budget-web").await;
    assert_eq!(shown["status"], "running", "{shown}");
}

/// Found by a tester: routes that read no query ignored any (`GET /executions?x=1`, `POST
/// …/pause?zzz=1`) while the others refused unknown keys. Every `/api/v1` operation refuses
/// a parameter the OpenAPI document does not declare for it (400 naming it, nothing done), and
/// takes the ones it does.
#[tokio::test]
async fn a_query_parameter_the_operation_does_not_declare_is_refused() {
    let app = TestApp::new().await;
    with_approval_plan(&app, "web-query").await;
    for uri in [
        "/api/v1/executions?x=1",
        "/api/v1/projects?zzz=1",
        "/api/v1/executions/web-query?zzz=1",
        "/api/v1/executions/web-query/journal?x=1",
        "/api/v1/executions/web-query/next?all=true&bogus=2",
    ] {
        let (status, body) = app.get(uri).await;
        assert_eq!((status, body["error"].as_str()), (StatusCode::BAD_REQUEST, Some("bad_request")), "{uri}: {body}");
        assert!(body["message"].as_str().unwrap().starts_with("unknown query parameter"), "{uri}: {body}");
        assert!(body["details"]["field"].is_string(), "{uri}: {body}");
    }
    let (status, body) = app.post("/api/v1/executions/web-query/pause?zzz=1", json!({})).await;
    assert_eq!((status, &body["details"]["field"]), (StatusCode::BAD_REQUEST, &json!("zzz")), "{body}");
    let (_, exec) = app.get("/api/v1/executions/web-query").await;
    assert_eq!(exec["paused"], false, "refused: nothing done: {exec}");
    let (status, body) = app.get("/api/v1/executions/web-query/next?all=true").await;
    assert_eq!(status, StatusCode::OK, "a declared parameter is taken: {body}");
}
