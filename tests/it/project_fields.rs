//! `POST /api/v1/projects`: every field that ends up in a ref name, a path or a command is
//! checked, so a client's mistake is a 422 naming the field, never a 5xx (issue 14.6: an
//! invalid `default_branch` answered 500).

use axum::http::StatusCode;
use proptest::prelude::*;
use serde_json::{json, Value};

use crate::app::TestApp;

#[tokio::test]
async fn an_invalid_default_branch_is_422_naming_the_field_and_gits_rules() {
    let app = TestApp::with_repo(&[("a", "a")]).await;
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
        let body = json!({"name": format!("p{i}"), "repo_path": app.ws.repo(), "default_branch": branch});
        let (status, answer) = app.post("/api/v1/projects", body).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{branch:?}: {answer}");
        assert_eq!(answer["details"]["field"], "default_branch", "{branch:?}: {answer}");
        assert!(answer["message"].as_str().unwrap().contains("git branch name"), "{branch:?}: {answer}");
    }
    let body = json!({"name": "ok", "repo_path": app.ws.repo(), "default_branch": "main"});
    let (status, _) = app.post("/api/v1/projects", body).await;
    assert_eq!(status, StatusCode::CREATED, "a real branch is accepted");
}

#[tokio::test]
async fn a_repo_url_git_would_read_as_an_option_or_that_runs_a_command_is_422_naming_the_field() {
    let app = TestApp::with_repo(&[("a", "a")]).await;
    for (i, url) in [
        "-uhttps://example.com/x.git",
        "--upload-pack=touch /tmp/pwned",
        "https://example.com/x.git\n--upload-pack=x",
        "https://example.com/\u{7}x.git",
        "ext::sh -c touch% /tmp/pwned",
        "FD::17",
        " https://example.com/x.git",
        "   ",
    ]
    .into_iter()
    .enumerate()
    {
        let body = json!({"name": format!("p{i}"), "repo_path": app.ws.repo(), "repo_url": url});
        let (status, answer) = app.post("/api/v1/projects", body).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{url:?}: {answer}");
        assert_eq!(answer["details"]["field"], "repo_url", "{url:?}: {answer}");
    }
    let remote = app.ws.tmp.path().join("remote.git");
    let body = json!({"name": "ok", "repo_path": app.ws.repo(), "repo_url": remote});
    let (status, answer) = app.post("/api/v1/projects", body).await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    assert_eq!(answer["repo_url"], remote.display().to_string(), "{answer}");
    let (_, listed) = app.get("/api/v1/projects/ok").await;
    assert_eq!(listed["repo_url"], remote.display().to_string(), "{listed}");
}

/// `repo_path` may be left out only for a remote on PostgreSQL (each replica's clone is its
/// repository, `replicas::a_project_with_only_a_remote_runs_in_each_replicas_clone`): on SQLite,
/// or without `repo_url`, it is a 422 naming `repo_path`.
#[tokio::test]
async fn without_repo_path_a_project_on_sqlite_is_422_naming_the_field() {
    let app = TestApp::with_repo(&[("a", "a")]).await;
    let remote = app.ws.tmp.path().join("remote.git");
    for body in [json!({"name": "p", "repo_url": remote}), json!({"name": "p", "agent_profile": "demo"})] {
        let (status, answer) = app.post("/api/v1/projects", body.clone()).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {answer}");
        assert_eq!(answer["details"]["field"], "repo_path", "{body}: {answer}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// One field at a time takes an arbitrary value while the others are valid, so every
    /// field's own check is reached.
    #[test]
    fn no_field_value_makes_project_registration_a_server_error(
        field in 0usize..8,
        value in any::<String>(),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let key = ["name", "default_branch", "agent_profile", "forge_repo", "trigger_label", "test_command", "forge_url", "repo_url"][field];
        let (status, answer) = rt.block_on(async {
            let app = TestApp::with_repo(&[("a", "a")]).await;
            let mut body = json!({"name": "p", "repo_path": app.ws.repo(), "agent_profile": "demo"});
            body[key] = Value::String(value);
            app.post("/api/v1/projects", body).await
        });
        prop_assert!(status.as_u16() < 500, "{key}: {status}: {answer}");
    }
}
