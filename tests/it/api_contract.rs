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
