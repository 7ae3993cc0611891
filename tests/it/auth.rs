//! Who may do what, through the router: the role matrix (each role × each mutating endpoint),
//! API tokens, browser sessions from `/login`, and the actor recorded being the signed-in user.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use baton::runtime::auth::{hash_token, new_token};
use serde_json::{json, Value};
use tower::ServiceExt as _;

use crate::app::{set_cookie, TestApp};

/// The app and a token of each role.
struct App {
    app: TestApp,
    tokens: std::collections::HashMap<&'static str, String>,
}

const ROLES: [&str; 4] = ["viewer", "reviewer", "lead", "admin"];

impl App {
    /// Users `viewer`, `reviewer`, `lead` and `admin` (each with its role and a token),
    /// project `p` and spec 1, enriched.
    async fn new() -> App {
        let app = TestApp::with_repo(&[("README.md", "hello\n")]).await;
        let mut tokens = std::collections::HashMap::new();
        for role in ROLES {
            let token = new_token().unwrap();
            app.store().add_token(role, role, &hash_token(&token), "", "2026-11-29T00:00:00Z").await.unwrap();
            tokens.insert(role, token);
        }
        let app = App { app, tokens };
        let repo = app.app.ws.repo();
        let (s, b) = app
            .call(Method::POST, "/api/v1/projects", Some("admin"), Some(json!({"name": "p", "repo_path": repo})))
            .await;
        assert_eq!(s, StatusCode::CREATED, "{b}");
        let (s, b) =
            app.call(Method::POST, "/api/v1/specs", Some("lead"), Some(json!({"project": "p", "title": "t"}))).await;
        assert_eq!(s, StatusCode::CREATED, "{b}");
        let (s, b) = app.call(Method::POST, "/api/v1/specs/1/enrich", Some("lead"), None).await;
        assert_eq!(s, StatusCode::OK, "{b}");
        app
    }

    /// `method uri` as `mallory` (`X-Baton-Actor`, ignored once users exist), with the token
    /// of `role` if any.
    async fn call(&self, method: Method, uri: &str, role: Option<&str>, body: Option<Value>) -> (StatusCode, Value) {
        let mut req = Request::builder().method(method).uri(uri).header("x-baton-actor", "mallory");
        if let Some(role) = role {
            req = req.header("authorization", format!("Bearer {}", self.tokens[role]));
        }
        let req = match body {
            Some(b) => req.header("content-type", "application/json").body(Body::from(b.to_string())),
            None => req.body(Body::empty()),
        };
        self.app.send(req.unwrap()).await
    }
}

/// Every mutating API endpoint with the role it needs and a body.
fn endpoints() -> Vec<(Method, &'static str, &'static str, Option<Value>)> {
    let post = Method::POST;
    vec![
        (post.clone(), "/api/v1/projects", "admin", Some(json!({"name": "q", "repo_path": "/nowhere"}))),
        (Method::DELETE, "/api/v1/projects/none", "admin", None),
        (post.clone(), "/api/v1/specs", "lead", Some(json!({"project": "p", "title": "x"}))),
        (Method::PATCH, "/api/v1/specs/1", "lead", Some(json!({"priority": 1}))),
        (post.clone(), "/api/v1/specs/1/enrich", "lead", None),
        (Method::PUT, "/api/v1/specs/1/plan", "lead", Some(json!({}))),
        (post.clone(), "/api/v1/specs/1/submit", "lead", None),
        (post.clone(), "/api/v1/specs/1/review", "lead", Some(json!({"decision": "bounce"}))),
        (post.clone(), "/api/v1/specs/1/fire", "lead", None),
        (post.clone(), "/api/v1/specs/1/cancel", "lead", Some(json!({}))),
        (post.clone(), "/api/v1/executions/none/events", "lead", Some(json!({"kind": "cancelled"}))),
        (
            post.clone(),
            "/api/v1/executions/none/approve",
            "reviewer",
            Some(json!({"phase_id": 1, "result": "approve"})),
        ),
        (
            post.clone(),
            "/api/v1/executions/none/feedback",
            "reviewer",
            Some(json!({"phase_id": 1, "question_id": "q", "chosen_index": 0})),
        ),
        (post.clone(), "/api/v1/executions/none/cancel", "lead", Some(json!({}))),
        (post.clone(), "/api/v1/executions/none/retry-step", "lead", Some(json!({"step_id": "1.1"}))),
        (post.clone(), "/api/v1/executions/none/skip", "lead", Some(json!({"step_id": "1.1"}))),
        (post.clone(), "/api/v1/executions/none/pause", "lead", None),
        (post, "/api/v1/executions/none/resume", "lead", None),
    ]
}

#[tokio::test]
async fn each_role_may_call_exactly_the_endpoints_of_its_rank() {
    let app = App::new().await;
    let rank = |r: &str| ROLES.iter().position(|x| *x == r).unwrap();
    for (method, uri, needs, body) in endpoints() {
        let (status, answer) = app.call(method.clone(), uri, None, body.clone()).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {uri} without a token: {answer}");
        for role in ROLES {
            let (status, answer) = app.call(method.clone(), uri, Some(role), body.clone()).await;
            if rank(role) < rank(needs) {
                assert_eq!(status, StatusCode::FORBIDDEN, "{role} on {method} {uri}: {answer}");
                assert_eq!(answer["error"], "forbidden");
                assert!(answer["message"].as_str().unwrap().contains(needs), "{answer}");
            } else {
                assert!(
                    ![StatusCode::UNAUTHORIZED, StatusCode::FORBIDDEN].contains(&status),
                    "{role} may {method} {uri}, got {status}: {answer}"
                );
            }
        }
    }
    for role in ROLES {
        let (status, _) = app.call(Method::GET, "/api/v1/board", Some(role), None).await;
        assert_eq!(status, StatusCode::OK, "{role} reads");
    }
    assert_eq!(app.call(Method::GET, "/api/v1/board", None, None).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(app.call(Method::GET, "/healthz", None, None).await.0, StatusCode::OK, "health is public");
}

#[tokio::test]
async fn bad_and_revoked_tokens_are_401_and_the_actor_is_the_tokens_user() {
    let app = App::new().await;
    let req = Request::get("/api/v1/board").header("authorization", "Bearer nope").body(Body::empty()).unwrap();
    assert_eq!(app.app.router().oneshot(req).await.unwrap().status(), StatusCode::UNAUTHORIZED);
    let req = Request::get("/api/v1/board").header("authorization", "Basic abc").body(Body::empty()).unwrap();
    assert_eq!(app.app.router().oneshot(req).await.unwrap().status(), StatusCode::UNAUTHORIZED);
    let (_, spec) = app.call(Method::GET, "/api/v1/specs/1", Some("viewer"), None).await;
    let actors: Vec<&str> = spec["events"].as_array().unwrap().iter().map(|e| e["actor"].as_str().unwrap()).collect();
    assert_eq!(actors, ["lead", "lead"], "X-Baton-Actor is ignored once users exist");
}

#[tokio::test]
async fn the_browser_signs_in_with_a_token_and_gets_its_role() {
    let app = App::new().await;
    let send = |req: Request<Body>| app.app.router().oneshot(req);
    let r = send(Request::get("/specs/1").body(Body::empty()).unwrap()).await.unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(r.headers()["location"], "/login?next=/specs/1");
    let r = send(Request::get("/login?next=/specs/1").body(Body::empty()).unwrap()).await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let csrf = set_cookie(r.headers(), "baton_csrf").unwrap();
    let token = csrf.split_once('=').unwrap().1.to_string();
    let login = |t: &str, next: &str| {
        Request::post("/login")
            .header("content-type", "application/x-www-form-urlencoded")
            .header("cookie", &csrf)
            .body(Body::from(format!("csrf={token}&token={t}&next={next}")))
            .unwrap()
    };
    let r = send(login("baton_wrong", "/")).await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let r = send(login(&app.tokens["reviewer"], "https://evil.example/")).await.unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(r.headers()["location"], "/", "never redirects off the site");
    let session = set_cookie(r.headers(), "baton_session").unwrap();
    let cookies = format!("{csrf}; {session}");
    let r = send(Request::get("/specs/1").header("cookie", &cookies).body(Body::empty()).unwrap()).await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let html =
        String::from_utf8(http_body_util::BodyExt::collect(r.into_body()).await.unwrap().to_bytes().to_vec()).unwrap();
    assert!(html.contains("reviewer (reviewer)"), "the header names the user");
    assert!(!html.contains("id=\"open-mode\""), "not open once users exist");
    let fire = Request::post("/specs/1/fire")
        .header("content-type", "application/x-www-form-urlencoded")
        .header("cookie", &cookies)
        .body(Body::from(format!("csrf={token}")))
        .unwrap();
    assert_eq!(send(fire).await.unwrap().status(), StatusCode::FORBIDDEN, "a reviewer may not fire");
    let tampered = cookies.replace("reviewer|", "admin|");
    let r = send(Request::get("/specs/1").header("cookie", &tampered).body(Body::empty()).unwrap()).await.unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER, "a forged session is no session");
    // Revoking the token a browser signed in with ends that session (found by a tester: it
    // used to live on until it expired).
    let token_id =
        app.app.store().list_tokens().await.unwrap().into_iter().find(|t| t.user_name == "reviewer").unwrap().token_id;
    assert!(app.app.store().revoke_token(token_id, "2026-11-29T00:00:01Z").await.unwrap());
    let r = send(Request::get("/specs/1").header("cookie", &cookies).body(Body::empty()).unwrap()).await.unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER, "a revoked token's session is over");
}
