//! `POST /api/v1/projects`: every field that ends up in a ref name, a path or a command is
//! checked, so a client's mistake is a 422 naming the field, never a 5xx (issue 14.6: an
//! invalid `default_branch` answered 500).

use axum::body::Body;
use axum::http::{Request, StatusCode};
use baton::runtime::app::{App, AppConfig};
use baton::web::{self, AppState};
use proptest::prelude::*;
use serde_json::{json, Value};
use tower::ServiceExt as _;

use crate::common::Workspace;

async fn post_project(ws: &Workspace, body: Value) -> (StatusCode, Value) {
    let app = App::build(AppConfig::new(ws.data())).await.unwrap();
    let router = web::app(AppState::from_app(app).unwrap());
    let req = Request::post("/api/v1/projects")
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    let response = router.oneshot(req).await.unwrap();
    let status = response.status();
    let bytes = http_body_util::BodyExt::collect(response.into_body()).await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

#[tokio::test]
async fn an_invalid_default_branch_is_422_naming_the_field_and_gits_rules() {
    let ws = Workspace::with_repo(&[("a", "a")]);
    for (i, branch) in [
        "a b",
        "a..b",
        "x:y",
        "-x",
        "a@{b",
        "topic.lock",
        "a~1",
        "a^",
        "a?",
        "a*",
        "a[",
        "a\\b",
        "/a",
        "a/",
        "a.",
        ".a",
    ]
    .into_iter()
    .enumerate()
    {
        let body = json!({"name": format!("p{i}"), "repo_path": ws.repo(), "default_branch": branch});
        let (status, answer) = post_project(&ws, body).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{branch:?}: {answer}");
        assert_eq!(answer["details"]["field"], "default_branch", "{branch:?}: {answer}");
        assert!(answer["message"].as_str().unwrap().contains("git branch name"), "{branch:?}: {answer}");
    }
    let (status, _) = post_project(&ws, json!({"name": "ok", "repo_path": ws.repo(), "default_branch": "main"})).await;
    assert_eq!(status, StatusCode::CREATED, "a real branch is accepted");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// One field at a time takes an arbitrary value while the others are valid, so every
    /// field's own check is reached.
    #[test]
    fn no_field_value_makes_project_registration_a_server_error(
        field in 0usize..7,
        value in any::<String>(),
    ) {
        let ws = Workspace::with_repo(&[("a", "a")]);
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let mut body = json!({"name": "p", "repo_path": ws.repo(), "agent_profile": "demo"});
        let key = ["name", "default_branch", "agent_profile", "forge_repo", "trigger_label", "test_command", "forge_url"][field];
        body[key] = Value::String(value);
        let (status, answer) = rt.block_on(post_project(&ws, body));
        prop_assert!(status.as_u16() < 500, "{key}: {status}: {answer}");
    }
}
