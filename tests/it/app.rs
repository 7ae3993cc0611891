//! `TestApp`: the services of one temp data dir, built by the composition root
//! (`App::build` with a manual clock), the router over them (`web::app`), and the `baton`
//! binary on the same data dir. Integration tests drive the API, the board's forms, approval
//! links, webhooks and the CLI through it instead of building their own.

use std::process::Output;

use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode};
use axum::Router;
use baton::clock::Clock;
use baton::model::plan::MachinePlan;
use baton::runtime::app::{App, AppConfig};
use baton::store::Store;
use baton::web::{self, AppState, WebhookConfig};
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use tower::ServiceExt as _;

use crate::common::{code, stderr, stdout, Workspace};

/// The GitHub webhook secret of every `TestApp`.
pub(crate) const WEBHOOK_SECRET: &str = "door-test-secret";

/// The files of the workspace's repository unless a test names its own.
const REPO_FILES: &[(&str, &str)] = &[("README.md", "hello\n"), ("Cargo.toml", "[package]\nname = \"x\"\n")];

/// Who a request comes from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Caller<'a> {
    /// No credential (in open mode: the server's `local`; with users: 401 on a private route).
    Anonymous,
    /// `X-Baton-Actor` (the actor in open mode; ignored once users exist).
    Actor(&'a str),
    /// `Authorization: Bearer <token>`.
    Token(&'a str),
}

/// The services of one data dir and the router over them.
pub(crate) struct TestApp {
    /// `<tmp>/data` (the data dir) and `<tmp>/repo` (a git repository).
    pub(crate) ws: Workspace,
    /// The composition root's services.
    pub(crate) app: App,
    state: AppState,
    router: Router,
    /// `X-Baton-Actor` of [`TestApp::post`] (none: the server's default).
    actor: Option<String>,
}

impl TestApp {
    /// A fresh data dir and a repository holding a README and a Cargo.toml.
    pub(crate) async fn new() -> TestApp {
        TestApp::with_repo(REPO_FILES).await
    }

    /// A fresh data dir and a repository holding `files`; the clock stands at the wall
    /// clock's time until [`TestApp::advance`] moves it.
    pub(crate) async fn with_repo(files: &[(&str, &str)]) -> TestApp {
        let ws = Workspace::with_repo(files);
        let clock = Clock::manual(baton::clock::now());
        let app = App::build(AppConfig::new(ws.data()).clock(clock)).await.unwrap();
        let webhooks = WebhookConfig { github_secret: Some(WEBHOOK_SECRET.into()), ..WebhookConfig::default() };
        let state = AppState::from_app(app.clone()).unwrap().with_webhooks(webhooks);
        let router = web::app(state.clone());
        TestApp { ws, app, state, router, actor: None }
    }

    /// The app with `actor` as the `X-Baton-Actor` of [`TestApp::post`].
    #[must_use]
    pub(crate) fn acting_as(mut self, actor: &str) -> TestApp {
        self.actor = Some(actor.to_string());
        self
    }

    /// The data dir's store.
    pub(crate) fn store(&self) -> &Store {
        self.app.execs.store()
    }

    /// The router's state (to serve it on a socket, or with other settings).
    pub(crate) fn state(&self) -> AppState {
        self.state.clone()
    }

    /// A router over the same state (for requests sent at once).
    pub(crate) fn router(&self) -> Router {
        self.router.clone()
    }

    /// Moves the services' clock forward.
    pub(crate) fn advance(&self, by: chrono::Duration) {
        self.app.clock.advance(by);
    }

    // ------------------------------------------------------------------------------------
    // HTTP
    // ------------------------------------------------------------------------------------

    /// Sends `req`: (status, headers, body text).
    pub(crate) async fn text(&self, req: Request<Body>) -> (StatusCode, HeaderMap, String) {
        let response = self.router.clone().oneshot(req).await.unwrap();
        let (status, headers) = (response.status(), response.headers().clone());
        let bytes = http_body_util::BodyExt::collect(response.into_body()).await.unwrap().to_bytes();
        (status, headers, String::from_utf8(bytes.to_vec()).unwrap())
    }

    /// Sends `req`: (status, JSON body, or Null when empty). A body that is not JSON fails the
    /// test.
    pub(crate) async fn send(&self, req: Request<Body>) -> (StatusCode, Value) {
        let (status, _, text) = self.text(req).await;
        let body = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{status}: not JSON ({e}): {text}"))
        };
        (status, body)
    }

    /// `method uri` from `caller` with a JSON `body`.
    pub(crate) async fn call(
        &self,
        method: Method,
        uri: &str,
        caller: Caller<'_>,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let req = with_caller(Request::builder().method(method).uri(uri), caller);
        let req = match body {
            Some(b) => req.header("content-type", "application/json").body(Body::from(b.to_string())),
            None => req.body(Body::empty()),
        };
        self.send(req.unwrap()).await
    }

    /// `GET uri` (JSON).
    pub(crate) async fn get(&self, uri: &str) -> (StatusCode, Value) {
        self.call(Method::GET, uri, Caller::Anonymous, None).await
    }

    /// `GET uri` with a bearer token (JSON).
    pub(crate) async fn get_with(&self, uri: &str, token: &str) -> (StatusCode, Value) {
        self.call(Method::GET, uri, Caller::Token(token), None).await
    }

    /// `GET uri` from `caller`: (status, HTML).
    pub(crate) async fn page(&self, uri: &str, caller: Caller<'_>) -> (StatusCode, String) {
        let req = with_caller(Request::get(uri), caller).body(Body::empty()).unwrap();
        let (status, _, html) = self.text(req).await;
        (status, html)
    }

    /// `POST uri` with `body` as it is (JSON content type).
    pub(crate) async fn post_raw(&self, uri: &str, body: &str) -> (StatusCode, Value) {
        let req = Request::post(uri).header("content-type", "application/json").body(Body::from(body.to_string()));
        self.send(req.unwrap()).await
    }

    /// `POST uri` with a JSON body, as the app's actor ([`TestApp::acting_as`]) if any.
    pub(crate) async fn post(&self, uri: &str, body: Value) -> (StatusCode, Value) {
        let caller = self.actor.as_deref().map_or(Caller::Anonymous, Caller::Actor);
        self.call(Method::POST, uri, caller, Some(body)).await
    }

    /// `POST uri` with a JSON body as `actor` (`X-Baton-Actor`, open mode).
    pub(crate) async fn post_as(&self, uri: &str, actor: &str, body: Value) -> (StatusCode, Value) {
        self.call(Method::POST, uri, Caller::Actor(actor), Some(body)).await
    }

    /// `POST uri` with a JSON body and a bearer token.
    pub(crate) async fn post_with(&self, uri: &str, token: &str, body: Value) -> (StatusCode, Value) {
        self.call(Method::POST, uri, Caller::Token(token), Some(body)).await
    }

    /// A CSRF cookie a page set (`baton_csrf=<token>`), from the public sign-in page.
    pub(crate) async fn csrf_cookie(&self) -> String {
        let (status, headers, _) = self.text(Request::get("/login").body(Body::empty()).unwrap()).await;
        assert_eq!(status, StatusCode::OK);
        set_cookie(&headers, "baton_csrf").expect("a page sets the CSRF cookie")
    }

    /// Posts a page form `body` to `uri` with the CSRF `cookie` (`baton_csrf=…`) from `caller`:
    /// (status, headers, page).
    pub(crate) async fn post_form_from(
        &self,
        uri: &str,
        cookie: &str,
        caller: Caller<'_>,
        body: String,
    ) -> (StatusCode, HeaderMap, String) {
        let req =
            Request::post(uri).header("content-type", "application/x-www-form-urlencoded").header("cookie", cookie);
        self.text(with_caller(req, caller).body(Body::from(body)).unwrap()).await
    }

    /// Posts a page form `body` to `uri` with the CSRF `cookie`: (status, page).
    pub(crate) async fn post_form(&self, uri: &str, cookie: &str, body: String) -> (StatusCode, String) {
        let (status, _, html) = self.post_form_from(uri, cookie, Caller::Anonymous, body).await;
        (status, html)
    }

    /// Posts a board form to `uri` from `caller`, with a fresh CSRF cookie and its token
    /// prepended to `fields`: (status, headers, page).
    pub(crate) async fn form(&self, uri: &str, caller: Caller<'_>, fields: &str) -> (StatusCode, HeaderMap, String) {
        let cookie = self.csrf_cookie().await;
        let token = cookie.split_once('=').unwrap().1;
        self.post_form_from(uri, &cookie, caller, format!("csrf={token}&{fields}")).await
    }

    /// Delivers a GitHub webhook `event` with `payload`, signed with [`WEBHOOK_SECRET`], as
    /// delivery `delivery`: (status, JSON answer).
    pub(crate) async fn github_webhook(&self, event: &str, delivery: &str, payload: &Value) -> (StatusCode, Value) {
        let body = payload.to_string();
        let req = Request::post("/webhooks/github")
            .header("content-type", "application/json")
            .header("x-github-event", event)
            .header("x-github-delivery", delivery)
            .header("x-hub-signature-256", github_signature(body.as_bytes()))
            .body(Body::from(body))
            .unwrap();
        self.send(req).await
    }

    // ------------------------------------------------------------------------------------
    // The CLI on the same data dir
    // ------------------------------------------------------------------------------------

    /// `baton --data-dir <data> <args>` with `env` set (and no `BATON_USER` but the one given).
    pub(crate) fn cli_env(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut cmd = self.ws.baton();
        cmd.env_remove("BATON_USER").envs(env.iter().copied()).args(args).output().unwrap()
    }

    /// `baton --data-dir <data> <args>`.
    pub(crate) fn cli(&self, args: &[&str]) -> Output {
        self.cli_env(args, &[])
    }

    /// `baton <args>` that must succeed: its stdout.
    pub(crate) fn cli_ok(&self, args: &[&str]) -> String {
        let out = self.cli(args);
        assert_eq!(code(&out), 0, "baton {args:?}: {}{}", stdout(&out), stderr(&out));
        stdout(&out)
    }

    /// Creates user `name` with `role` (and GitHub login `github`) through `baton token
    /// create`; returns the API token.
    pub(crate) fn user(&self, name: &str, role: &str, github: Option<&str>) -> String {
        let mut args = vec!["token", "create", "--user", name, "--role", role];
        if let Some(login) = github {
            args.extend(["--github-login", login]);
        }
        let token = self.cli_ok(&args).trim().to_string();
        assert!(token.starts_with("baton_"), "{token}");
        token
    }

    // ------------------------------------------------------------------------------------
    // Executions
    // ------------------------------------------------------------------------------------

    /// Creates an execution of the JSON `plan`; its task id.
    pub(crate) async fn execution(&self, plan: &Value) -> String {
        let plan = MachinePlan::from_json(&plan.to_string()).unwrap();
        self.app.execs.create(plan).await.unwrap().task_id
    }

    /// The journal of `task_id`, as the API shows it.
    pub(crate) async fn journal(&self, task_id: &str) -> Vec<Value> {
        let events = self.store().events(task_id, 0).await.unwrap();
        events
            .into_iter()
            .map(|e| serde_json::to_value(baton::web::api::executions::JournalEntry::from_stored(e)).unwrap())
            .collect()
    }
}

fn with_caller(req: axum::http::request::Builder, caller: Caller<'_>) -> axum::http::request::Builder {
    match caller {
        Caller::Anonymous => req,
        Caller::Actor(name) => req.header("x-baton-actor", name),
        Caller::Token(token) => req.header("authorization", format!("Bearer {token}")),
    }
}

/// `X-Hub-Signature-256` of `body` under [`WEBHOOK_SECRET`].
pub(crate) fn github_signature(body: &[u8]) -> String {
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(WEBHOOK_SECRET.as_bytes()).unwrap();
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// The `name=value` of the cookie `name` a response sets.
pub(crate) fn set_cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with(&format!("{name}=")))
        .map(|v| v.split(';').next().unwrap().to_string())
}

/// A plan of `phases` phases of one step each (`<n>.1`, agent `agent-<n>`); phase 1 asks for
/// an approval when `approval` is set.
pub(crate) fn phases_plan(task_id: &str, phases: usize, approval: bool) -> Value {
    let phases: Vec<Value> = (1..=phases)
        .map(|n| {
            json!({"phase_id": n, "name": format!("Phase {n}"), "approval_required": approval && n == 1,
                   "steps": [{"step_id": format!("{n}.1"), "agent_name": format!("agent-{n}"),
                              "task_description": format!("Do part {n}."), "deliverables": [format!("part{n}.md")]}]})
        })
        .collect();
    json!({"task_id": task_id, "task_summary": format!("Plan {task_id}"), "phases": phases})
}
