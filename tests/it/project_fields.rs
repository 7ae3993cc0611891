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

/// Found by a tester: a `test_command` holding a NUL was taken and written into every plan's
/// gate, refused only when a spec was fired (after it left a branch behind); `forge_url` "not
/// a url", `forge_repo` "no/slash here!!" and a label with an escape character were taken too.
#[tokio::test]
async fn texts_that_reach_a_command_a_link_or_a_forge_are_checked_at_registration() {
    let app = TestApp::with_repo(&[("a", "a")]).await;
    for (i, (field, value, says)) in [
        ("test_command", "a\u{0}b", "holds a NUL character"),
        ("forge_url", "not a url", "is not an http(s) URL"),
        ("forge_url", "javascript:alert(1)", "is not an http(s) URL"),
        ("trigger_label", "a\u{1b}b", "one line without control characters"),
        ("trigger_label", &"x".repeat(51), "at most 50 characters"),
        ("forge_repo", "owner/na me!", "is not a forge repository"),
        ("forge_repo", "ado:org", "is not a forge repository"),
        ("forge_repo", "a\nb", "one line without control characters"),
    ]
    .into_iter()
    .enumerate()
    {
        let body = json!({"name": format!("t{i}"), "repo_path": app.ws.repo(), field: value});
        let (status, answer) = app.post("/api/v1/projects", body).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{field} {value:?}: {answer}");
        assert_eq!(answer["details"]["field"], field, "{field} {value:?}: {answer}");
        assert!(answer["message"].as_str().unwrap().contains(says), "{field} {value:?}: {answer}");
    }
    let (_, list) = app.get("/api/v1/projects").await;
    assert!(!list.to_string().contains("\"t0\""), "nothing registered: {list}");
    let body = json!({"name": "fine", "repo_path": app.ws.repo(), "test_command": "make test",
        "forge_url": "https://github.com/o/r", "trigger_label": "baton", "forge_repo": "o/r.js"});
    let (status, answer) = app.post("/api/v1/projects", body).await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    for (name, repo) in [("gh", "github:o/r"), ("ado", "ado:org/Project"), ("bare", "My Project")] {
        let body = json!({"name": name, "repo_path": app.ws.repo(), "forge_repo": repo});
        assert_eq!(app.post("/api/v1/projects", body).await.0, StatusCode::CREATED, "{repo}");
    }
}
