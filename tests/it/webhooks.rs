//! Forge webhooks (`/webhooks/github`, `/webhooks/ado`) driven with `oneshot` requests over a
//! real SQLite file and a real git repository: the GitHub and Azure DevOps delivery fixtures of
//! `tests/fixtures` (exact bytes and headers), and variants of them re-signed with the test
//! secret.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use baton::model::plan::MachinePlan;
use baton::runtime::config::DataDir;
use baton::runtime::executions::Executions;
use baton::store::{ForgeIdentity, SpecChange, Workload};
use baton::web::{self, AppState, WebhookConfig};
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use tower::ServiceExt as _;

use crate::common::{fixture_bytes, fixture_json, Workspace};

/// GitHub's documented test secret, which the delivery fixtures are signed with.
pub(crate) const SECRET: &str = "It's a Secret to Everybody";
/// `Basic` of `ado-hooks:pa55:word` (a password may hold a colon).
const ADO_AUTH: &str = "Basic YWRvLWhvb2tzOnBhNTU6d29yZA==";
/// `Basic` of `ado-hooks:wrong`.
const ADO_WRONG: &str = "Basic YWRvLWhvb2tzOndyb25n";
const REPO: &str = "lumen-labs/lantern";
const ISSUE_URL: &str = "https://github.com/lumen-labs/lantern/issues/7";
/// The title and body of issue 7 in the `issues.opened` delivery fixture.
const ISSUE_TITLE: &str = "Typo in the install guide's cargo command";
const ISSUE_BODY: &str = "The install guide says `cargo instal lantern`; the command is `cargo install lantern`. \
                          Copying the line as written fails with \"no such command: `instal`\".";

struct App {
    ws: Workspace,
    execs: Executions,
    state: AppState,
}

fn config() -> WebhookConfig {
    WebhookConfig {
        github_secret: Some(SECRET.into()),
        ado_user: Some("ado-hooks".into()),
        ado_password: Some("pa55:word".into()),
        ..WebhookConfig::default()
    }
}

impl App {
    async fn new() -> App {
        App::with_config(config()).await
    }

    async fn with_config(config: WebhookConfig) -> App {
        App::on(config, None).await
    }

    /// An app whose store is a fresh PostgreSQL database (`[database] url` in the data
    /// directory's `baton.toml`); `None` outside CI when there is no test cluster.
    async fn on_postgres() -> Option<App> {
        let url = std::thread::spawn(crate::common::postgres_database).join().unwrap()?;
        Some(App::on(config(), Some(url)).await)
    }

    async fn on(config: WebhookConfig, database_url: Option<String>) -> App {
        let ws = Workspace::with_repo(&[("README.md", "hello\n")]);
        let data = DataDir::open(&ws.data()).unwrap();
        if let Some(url) = database_url {
            std::fs::write(data.config_path(), format!("[database]\nurl = \"{url}\"\n")).unwrap();
        }
        let execs = Executions::open(data).await.unwrap();
        let state = AppState::new(execs.clone()).unwrap().with_webhooks(config);
        App { ws, execs, state }
    }

    async fn send(&self, req: Request<Body>) -> (StatusCode, Value) {
        let response = web::app(self.state.clone()).oneshot(req).await.unwrap();
        let status = response.status();
        let bytes = http_body_util::BodyExt::collect(response.into_body()).await.unwrap().to_bytes();
        let body = serde_json::from_slice(&bytes).unwrap_or_else(|_| json!(String::from_utf8_lossy(&bytes)));
        (status, body)
    }

    async fn project(&self, name: &str, forge_repo: &str, trigger_label: &str) {
        let body = json!({"name": name, "repo_path": self.ws.repo(), "agent_profile": "demo",
                          "forge_repo": forge_repo, "trigger_label": trigger_label});
        let req = Request::post("/api/v1/projects").header("content-type", "application/json");
        let (status, body) = self.send(req.body(Body::from(body.to_string())).unwrap()).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        assert_eq!(body["forge_repo"], forge_repo);
    }

    /// The fixture `github-webhooks/<name>.json` and its headers.
    fn fixture(&self, name: &str) -> (Vec<u8>, Vec<(String, String)>) {
        github_delivery(name)
    }

    /// Posts the fixture `name` as written.
    async fn deliver(&self, name: &str) -> (StatusCode, Value) {
        let (body, headers) = self.fixture(name);
        self.post_github(body, &headers).await
    }

    /// Posts `payload` as a variant of fixture `name`: re-signed, with delivery id `delivery`.
    async fn deliver_variant(&self, name: &str, payload: &Value, delivery: &str) -> (StatusCode, Value) {
        let (_, headers) = self.fixture(name);
        let body = payload.to_string().into_bytes();
        let headers: Vec<(String, String)> = headers
            .into_iter()
            .map(|(k, v)| match k.as_str() {
                "X-Hub-Signature-256" => (k, sign(&body)),
                "X-GitHub-Delivery" => (k, delivery.to_string()),
                _ => (k, v),
            })
            .collect();
        self.post_github(body, &headers).await
    }

    fn payload(&self, name: &str) -> Value {
        serde_json::from_slice(&self.fixture(name).0).unwrap()
    }

    async fn post_github(&self, body: Vec<u8>, headers: &[(String, String)]) -> (StatusCode, Value) {
        let mut req = Request::post("/webhooks/github");
        for (k, v) in headers {
            req = req.header(k.as_str(), v.as_str());
        }
        self.send(req.body(Body::from(body)).unwrap()).await
    }

    async fn post_ado(&self, body: &[u8], auth: Option<&str>) -> (StatusCode, Value) {
        let mut req = Request::post("/webhooks/ado").header("content-type", "application/json");
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        self.send(req.body(Body::from(body.to_vec())).unwrap()).await
    }

    fn ado_fixture(&self, name: &str) -> Vec<u8> {
        fixture_bytes(&format!("azure-devops/hooks/{name}"))
    }

    /// Every spec, as the API shows them (read from the store: auth may be on).
    async fn specs(&self) -> Vec<Value> {
        let filter = baton::store::SpecFilter { limit: 500, ..Default::default() };
        let rows = self.execs.store().list_specs(&filter).await.unwrap();
        rows.iter().map(|r| serde_json::to_value(r).unwrap()).collect()
    }

    async fn deliveries(&self, source: &str) -> usize {
        self.execs.store().deliveries(source).await.unwrap().len()
    }
}

/// The GitHub delivery fixture `github-webhooks/<name>.json` (signed with [`SECRET`]) and its
/// headers but `Host` and `Content-Length`.
pub(crate) fn github_delivery(name: &str) -> (Vec<u8>, Vec<(String, String)>) {
    let body = fixture_bytes(&format!("github-webhooks/{name}.json"));
    let headers = fixture_json(&format!("github-webhooks/{name}.headers.json"));
    let headers = headers
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "Host" | "Content-Length"))
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
        .collect();
    (body, headers)
}

fn sign(body: &[u8]) -> String {
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

#[tokio::test]
async fn github_delivery_fixtures_import_once_and_the_rest_is_acknowledged() {
    github_fixtures_import_once(App::new().await).await;
}

#[tokio::test]
async fn github_delivery_fixtures_import_once_and_the_rest_is_acknowledged_on_postgres() {
    if let Some(app) = App::on_postgres().await {
        assert_eq!(app.execs.store().backend_name(), "postgres");
        github_fixtures_import_once(app).await;
    }
}

/// Deliveries of one issue under different delivery ids, all at once (as a forge's retries or
/// several replicas receive them), make one spec; each delivery is recorded once.
#[tokio::test]
async fn deliveries_of_one_issue_at_once_make_one_spec() {
    deliveries_at_once_make_one_spec(App::new().await).await;
}

#[tokio::test]
async fn deliveries_of_one_issue_at_once_make_one_spec_on_postgres() {
    if let Some(app) = App::on_postgres().await {
        deliveries_at_once_make_one_spec(app).await;
    }
}

async fn deliveries_at_once_make_one_spec(app: App) {
    app.project("p", REPO, "bug").await;
    let payload = app.payload("issues.opened");
    let sends = (0..6).map(|i| {
        let (app, payload) = (&app, &payload);
        async move { app.deliver_variant("issues.opened", payload, &format!("d-{i}")).await }
    });
    let answers = futures_util::future::join_all(sends).await;
    let created = answers.iter().filter(|(status, _)| *status == StatusCode::CREATED).count();
    assert_eq!(created, 1, "{answers:?}");
    assert!(answers.iter().all(|(status, _)| status.is_success()), "{answers:?}");
    assert_eq!(app.specs().await.len(), 1);
    assert_eq!(app.execs.store().deliveries("github").await.unwrap().len(), 6);
}

async fn github_fixtures_import_once(app: App) {
    app.project("p", REPO, "bug").await;

    let (status, body) = app.deliver("ping").await;
    assert_eq!(status, StatusCode::OK, "{body}");

    let (status, body) = app.deliver("issues.opened").await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["outcome"], "created");
    let specs = app.specs().await;
    assert_eq!(specs.len(), 1);
    assert_eq!(specs[0]["source"], "github");
    assert_eq!(specs[0]["source_url"], ISSUE_URL);
    assert_eq!(specs[0]["status"], "imported");
    assert_eq!(specs[0]["title"], ISSUE_TITLE);
    assert_eq!(specs[0]["body"], ISSUE_BODY);
    assert_eq!(specs[0]["created_by"], "github:tessa-lumen");

    // A redelivery (same X-GitHub-Delivery) applies nothing.
    let (status, body) = app.deliver("issues.opened").await;
    assert_eq!((status, body), (StatusCode::OK, json!({"duplicate": true})));
    assert_eq!(app.specs().await, specs);

    // One spec per issue: labelling it again finds the same spec, unchanged.
    let (status, body) = app.deliver("issues.labeled").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["outcome"], "unchanged");
    assert_eq!(app.specs().await.len(), 1);

    for (name, reason) in [
        ("pull_request.opened", "pull_request opened is not handled"),
        ("pull_request.closed.merged", "pull request #9 (fix-install-typo) is not a baton/<task_id> branch"),
        ("issue_comment.created", "the comment is not a /baton approve or /baton reject command"),
    ] {
        let (status, body) = app.deliver(name).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{name}: {body}");
        assert_eq!(body["ignored"], reason, "{name}");
    }
    assert_eq!(app.specs().await.len(), 1);
    // Every authenticated delivery but the ping is remembered once, with what it did.
    let recorded = app.execs.store().deliveries("github").await.unwrap();
    assert_eq!(recorded.len(), 5, "{recorded:?}");
    assert!(recorded.iter().any(|(_, outcome)| outcome.contains("\"created\"")), "{recorded:?}");

    let mut other = app.payload("issues.opened");
    other["action"] = json!("closed");
    let (status, body) = app.deliver_variant("issues.opened", &other, "d-closed").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let (_, headers) = app.fixture("ping");
    let headers: Vec<_> = headers
        .into_iter()
        .map(|(k, v)| if k == "X-GitHub-Event" { (k, "star".to_string()) } else { (k, v) })
        .collect();
    let (status, body) = app.post_github(app.fixture("ping").0, &headers).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["ignored"], "event star is not handled");
}

#[tokio::test]
async fn unsigned_sha1_only_tampered_and_unconfigured_deliveries_store_nothing() {
    let app = App::new().await;
    app.project("p", REPO, "bug").await;
    let (body, headers) = app.fixture("issues.opened");

    let unsigned: Vec<_> = headers.iter().filter(|(k, _)| !k.starts_with("X-Hub-Signature")).cloned().collect();
    let (status, reply) = app.post_github(body.clone(), &unsigned).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{reply}");

    let sha1_only: Vec<_> = headers.iter().filter(|(k, _)| k != "X-Hub-Signature-256").cloned().collect();
    let (status, reply) = app.post_github(body.clone(), &sha1_only).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{reply}");
    assert!(reply.to_string().contains("SHA-1"), "{reply}");

    let mut tampered = body.clone();
    let at = tampered.windows(7).position(|w| w == b"install").unwrap();
    tampered[at] = b'I';
    let (status, reply) = app.post_github(tampered, &headers).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{reply}");
    assert!(!reply.to_string().contains(SECRET));

    // A signed `null` is well authenticated but no event: 400, nothing stored.
    let nulls: Vec<_> = headers
        .iter()
        .map(|(k, v)| if k == "X-Hub-Signature-256" { (k.clone(), sign(b"null")) } else { (k.clone(), v.clone()) })
        .collect();
    let (status, reply) = app.post_github(b"null".to_vec(), &nulls).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{reply}");

    assert!(app.specs().await.is_empty());
    assert_eq!(app.deliveries("github").await, 0);

    // The real delivery still applies afterwards (the refusals claimed nothing).
    let (status, reply) = app.post_github(body.clone(), &headers).await;
    assert_eq!(status, StatusCode::CREATED, "{reply}");

    let unconfigured = App::with_config(WebhookConfig::default()).await;
    let (status, reply) = unconfigured.post_github(body, &headers).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{reply}");
    assert!(reply.to_string().contains("not configured"), "{reply}");
    let (status, _) = unconfigured.post_ado(b"{}", Some(ADO_AUTH)).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
}

#[tokio::test]
async fn issues_without_a_project_or_the_trigger_label_or_that_are_pull_requests_are_ignored() {
    let app = App::new().await;
    let (status, body) = app.deliver("issues.opened").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body, json!({"ignored": format!("no project for {REPO}")}));

    app.project("p", REPO, "baton").await;
    let (status, body) = app.deliver("issues.labeled").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert!(body["ignored"].as_str().unwrap().contains("\"baton\""), "{body}");

    // Labelled with the trigger label: imported.
    let mut labelled = app.payload("issues.labeled");
    labelled["label"] = json!({"name": "baton"});
    labelled["issue"]["labels"] = json!([{"name": "bug"}, {"name": "Baton"}]);
    let (status, body) = app.deliver_variant("issues.labeled", &labelled, "d-labelled").await;
    assert_eq!(status, StatusCode::CREATED, "{body}");

    let mut pr = labelled.clone();
    pr["issue"]["pull_request"] = json!({"url": "https://api.github.com/repos/x/y/pulls/1"});
    let (status, body) = app.deliver_variant("issues.labeled", &pr, "d-pr").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["ignored"], "#7 is a pull request, not an issue");
    assert_eq!(app.specs().await.len(), 1);
}

#[tokio::test]
async fn a_64_kib_unicode_body_is_imported_and_edits_update_the_spec() {
    let app = App::new().await;
    app.project("p", REPO, "bug").await;
    let mut body = String::from("# Ünïcödé spec ✓\n\n");
    while body.len() + "- 日本語のテキスト 🚀\n".len() <= 64 * 1024 {
        body.push_str("- 日本語のテキスト 🚀\n");
    }
    let mut payload = app.payload("issues.opened");
    payload["issue"]["body"] = json!(body);
    let (status, reply) = app.deliver_variant("issues.opened", &payload, "d-big").await;
    assert_eq!(status, StatusCode::CREATED, "{reply}");
    let specs = app.specs().await;
    assert_eq!(specs[0]["body"], body.as_str());

    payload["action"] = json!("edited");
    payload["issue"]["title"] = json!("Typo in the install guide (edited)");
    let (status, reply) = app.deliver_variant("issues.opened", &payload, "d-edit").await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    assert_eq!(reply["outcome"], "updated");
    let specs = app.specs().await;
    assert_eq!(specs.len(), 1);
    assert_eq!(specs[0]["title"], "Typo in the install guide (edited)");
    assert_eq!(specs[0]["status"], "imported");

    // Over the configured limit: 413, nothing stored.
    let huge = vec![b' '; web::webhooks::DEFAULT_MAX_BODY_BYTES + 1];
    let (_, headers) = app.fixture("issues.opened");
    let (status, reply) = app.post_github(huge, &headers).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(reply["error"].is_string(), "a JSON error: {reply}");
    // Between axum's 2 MB default and the 5 MiB limit: accepted, the text cut to fit a spec.
    let mut large = app.payload("issues.opened");
    large["issue"]["html_url"] = json!("https://github.com/lumen-labs/lantern/issues/8");
    large["issue"]["body"] = json!("ß".repeat(1_500_000));
    let (status, reply) = app.deliver_variant("issues.opened", &large, "d-large").await;
    assert_eq!(status, StatusCode::CREATED, "{reply}");
    let spec = app.execs.store().spec(reply["spec_id"].as_i64().unwrap()).await.unwrap().unwrap();
    assert!(spec.body.len() <= 64 * 1024 && spec.body.ends_with("/issues/8)"), "cut with a note");
    let small = App::with_config(WebhookConfig { max_body_bytes: 1024, ..config() }).await;
    let (status, _) = small.deliver("issues.opened").await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(app.deliveries("github").await, 3);
}

/// A plan whose phase 1 asks for an approval after its step.
fn approval_plan(task_id: &str) -> MachinePlan {
    let plan = json!({
        "task_id": task_id,
        "task_summary": "Fix the spelling",
        "phases": [
            {"phase_id": 1, "name": "Fix", "approval_required": true, "steps": [
                {"step_id": "1.1", "agent_name": "alpha", "task_description": "Fix it."}]},
            {"phase_id": 2, "name": "Check", "steps": [
                {"step_id": "2.1", "agent_name": "beta", "task_description": "Check it."}]}
        ]
    });
    MachinePlan::from_json(&plan.to_string()).unwrap()
}

/// Fires imported spec `spec_id` by hand: execution `task_id` of [`approval_plan`], its step
/// done so it waits for the approval of phase 1, linked to the spec.
async fn fire_by_hand(app: &App, spec_id: i64, task_id: &str) {
    app.execs.create(approval_plan(task_id)).await.unwrap();
    let step = json!({"kind": "step_recorded", "step_id": "1.1", "agent_name": "alpha", "status": "complete", "outcome": "done"});
    let req = Request::post(format!("/api/v1/executions/{task_id}/events")).header("content-type", "application/json");
    let (status, body) = app.send(req.body(Body::from(step.to_string())).unwrap()).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["next_action"]["action_type"], "approval");
    let fire = SpecChange {
        action: "fire".into(),
        expected: "imported".into(),
        to: "executing".into(),
        actor: "lead".into(),
        at: "2026-01-01T00:00:00Z".into(),
        ..SpecChange::default()
    };
    app.execs.store().change_spec(spec_id, &fire).await.unwrap();
    app.execs.store().attach_execution(spec_id, task_id).await.unwrap();
}

#[tokio::test]
async fn a_baton_approve_comment_decides_the_approval_and_a_merged_pull_request_closes_the_spec() {
    let app = App::new().await;
    app.project("p", REPO, "bug").await;
    let (status, body) = app.deliver("issues.opened").await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let spec_id = body["spec_id"].as_i64().unwrap();

    let task_id = "hook-approve";
    fire_by_hand(&app, spec_id, task_id).await;
    let store = app.execs.store();

    // Users: a reviewer mapped to the commenter.
    store.add_token("rev", "reviewer", "hash-1", "", "2026-01-01T00:00:00Z").await.unwrap();
    store.add_token("watcher", "viewer", "hash-2", "", "2026-01-01T00:00:00Z").await.unwrap();
    assert!(store.set_identity("watcher", ForgeIdentity::GitHubLogin, "example-watcher").await.unwrap());

    let mut comment = app.payload("issue_comment.created");
    comment["comment"]["body"] = json!("/baton approve");
    comment["comment"]["user"]["login"] = json!("someone-else");
    let (status, body) = app.deliver_variant("issue_comment.created", &comment, "c-unknown").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["ignored"], "GitHub user someone-else is not mapped to a Baton user");

    comment["comment"]["user"]["login"] = json!("example-watcher");
    let (status, body) = app.deliver_variant("issue_comment.created", &comment, "c-viewer").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert!(body["ignored"].as_str().unwrap().contains("reviewer role"), "{body}");

    assert!(store.set_identity("rev", ForgeIdentity::GitHubLogin, "Ben-Lumen").await.unwrap());
    comment["comment"]["user"]["login"] = json!("ben-lumen");
    // The fixture's comment was written in May, long before this approval was asked for: a
    // late delivery of an old comment never decides a later approval.
    let (status, body) = app.deliver_variant("issue_comment.created", &comment, "c-old").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let why = body["ignored"].as_str().unwrap();
    assert!(why.contains("written at 2026-05-11") && why.contains("before phase 1"), "{body}");
    assert!(app.execs.get(task_id).await.unwrap().pending_approval_request.is_some());
    // A time that is no time (a number, garbage) once skipped the check and decided.
    for (n, garbled) in [json!(12345), json!("yesterday"), json!("2026-13-40T00:00:00Z")].into_iter().enumerate() {
        comment["comment"]["created_at"] = garbled.clone();
        let (status, body) = app.deliver_variant("issue_comment.created", &comment, &format!("c-garbled-{n}")).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{garbled}: {body}");
        assert!(body["ignored"].as_str().unwrap().contains("is not an RFC 3339 time"), "{garbled}: {body}");
    }
    assert!(app.execs.get(task_id).await.unwrap().pending_approval_request.is_some());
    comment["comment"]["created_at"] = json!(baton::clock::now_rfc3339());
    let (status, body) = app.deliver_variant("issue_comment.created", &comment, "c-approve").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["decision"], "approve");
    assert_eq!(body["by"], "rev");
    let state = app.execs.get(task_id).await.unwrap();
    assert!(state.pending_approval_request.is_none());
    let events = store.events(task_id, 0).await.unwrap();
    let approval = events.iter().find(|e| e.kind == "approval_recorded").expect("an approval is journaled");
    assert!(approval.payload.contains("\"rev\""), "{}", approval.payload);
    assert_eq!(store.decision_signatures(task_id).await.unwrap().len(), 1, "signed like the web form's");

    // Redelivered: nothing more. Commenting again: nothing is waiting.
    let (status, body) = app.deliver_variant("issue_comment.created", &comment, "c-approve").await;
    assert_eq!((status, body), (StatusCode::OK, json!({"duplicate": true})));
    let (status, body) = app.deliver_variant("issue_comment.created", &comment, "c-again").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert!(body["ignored"].as_str().unwrap().contains("not waiting for an approval"), "{body}");
    assert_eq!(store.events(task_id, 0).await.unwrap().len(), events.len());

    // An edit of a fired spec's issue keeps its text and plan, and says so.
    let mut edited = app.payload("issues.opened");
    edited["action"] = json!("edited");
    edited["issue"]["body"] = json!("Changed after firing.");
    let (status, body) = app.deliver_variant("issues.opened", &edited, "e-1").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["outcome"], "ignored");
    let spec = store.spec(spec_id).await.unwrap().unwrap();
    assert_eq!(spec.body, ISSUE_BODY);
    let spec_events = store.spec_events(spec_id).await.unwrap();
    assert_eq!(spec_events.last().unwrap().action, "import_update_ignored");

    // Its pull request merged: the spec is merged. From another repository, merged or closed:
    // nothing.
    let mut pr = app.payload("pull_request.closed.merged");
    pr["pull_request"]["head"]["ref"] = json!(format!("baton/{task_id}"));
    pr["pull_request"]["merged"] = json!(false);
    pr["repository"]["full_name"] = json!("someone/else");
    let (status, body) = app.deliver_variant("pull_request.closed.merged", &pr, "m-0").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    pr["pull_request"]["merged"] = json!(true);
    pr["repository"]["full_name"] = json!("someone/else");
    let (status, body) = app.deliver_variant("pull_request.closed.merged", &pr, "m-1").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(store.spec(spec_id).await.unwrap().unwrap().status, "executing");
    pr["repository"]["full_name"] = json!(REPO);
    let (status, body) = app.deliver_variant("pull_request.closed.merged", &pr, "m-2").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "merged");
    let spec = store.spec(spec_id).await.unwrap().unwrap();
    assert_eq!(spec.status, "merged");
    assert!(spec.status_reason.contains("/pull/9"), "{}", spec.status_reason);
}

#[tokio::test]
async fn a_reject_comment_needs_a_reason_and_records_the_rejection() {
    let app = App::new().await;
    app.project("p", REPO, "bug").await;
    let (_, body) = app.deliver("issues.opened").await;
    let spec_id = body["spec_id"].as_i64().unwrap();
    let task_id = "hook-reject";
    app.execs.create(approval_plan(task_id)).await.unwrap();
    let step = json!({"kind": "step_recorded", "step_id": "1.1", "agent_name": "alpha", "status": "complete", "outcome": "done"});
    let req = Request::post(format!("/api/v1/executions/{task_id}/events")).header("content-type", "application/json");
    let (status, _) = app.send(req.body(Body::from(step.to_string())).unwrap()).await;
    assert_eq!(status, StatusCode::CREATED);
    let store = app.execs.store();
    let fire = SpecChange {
        action: "fire".into(),
        expected: "imported".into(),
        to: "executing".into(),
        actor: "lead".into(),
        at: "2026-01-01T00:00:00Z".into(),
        ..SpecChange::default()
    };
    store.change_spec(spec_id, &fire).await.unwrap();
    store.attach_execution(spec_id, task_id).await.unwrap();
    store.add_token("rev", "reviewer", "hash-1", "", "2026-01-01T00:00:00Z").await.unwrap();
    store.set_identity("rev", ForgeIdentity::GitHubLogin, "ben-lumen").await.unwrap();

    let mut comment = app.payload("issue_comment.created");
    comment["comment"]["body"] = json!("/baton reject");
    comment["comment"]["created_at"] = json!(baton::clock::now_rfc3339());
    let (status, body) = app.deliver_variant("issue_comment.created", &comment, "r-0").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    comment["comment"]["body"] = json!("/baton reject the fix is wrong");
    let (status, body) = app.deliver_variant("issue_comment.created", &comment, "r-1").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["decision"], "reject");
    let events = store.events(task_id, 0).await.unwrap();
    assert!(events.iter().any(|e| e.kind == "approval_recorded" && e.payload.contains("the fix is wrong")));
}

#[tokio::test]
async fn azure_devops_work_items_import_with_basic_auth_once() {
    let app = App::new().await;
    app.project("fab", "ado:lumenlabs/Lantern", "").await;
    app.project("server", "Beacon", "").await;
    let created = app.ado_fixture("workitem.created.json");
    // With users (auth on), the hook's Basic header is its own credential, not a token.
    app.execs.store().add_token("ada", "admin", "hash-a", "", "2026-01-01T00:00:00Z").await.unwrap();
    // The server trusts "no users" for up to NO_USERS_RECHECK (the projects above were
    // registered in open mode).
    tokio::time::sleep(baton::web::NO_USERS_RECHECK).await;
    let (status, _) = app.send(Request::get("/api/v1/specs").body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "auth is on");

    let (status, _) = app.post_ado(&created, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) = app.post_ado(&created, Some(ADO_WRONG)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) = app.post_ado(&created, Some("Bearer pa55:word")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(app.specs().await.is_empty());
    assert_eq!(app.deliveries("ado").await, 0);

    let (status, body) = app.post_ado(&created, Some(ADO_AUTH)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["project"], "fab");
    let specs = app.specs().await;
    assert_eq!(specs.len(), 1);
    assert_eq!(specs[0]["source"], "ado");
    assert_eq!(specs[0]["status"], "imported");
    assert_eq!(specs[0]["title"], "Show when the status feed last refreshed");
    assert_eq!(specs[0]["body"], "Put the time of the last refresh under the page title.");
    assert_eq!(specs[0]["source_url"], "https://dev.azure.com/lumenlabs/_apis/wit/workItems/301");

    let (status, body) = app.post_ado(&created, Some(ADO_AUTH)).await;
    assert_eq!((status, body), (StatusCode::OK, json!({"duplicate": true})));
    assert_eq!(app.specs().await.len(), 1);

    // The update fixture changes state and priority only: nothing to re-import.
    let updated = app.ado_fixture("workitem.updated.json");
    let (status, body) = app.post_ado(&updated, Some(ADO_AUTH)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert!(body["ignored"].as_str().unwrap().contains("no title"), "{body}");

    // A title and description change: imported (the work item had no spec in `server` yet),
    // then updated in place by the next change.
    let mut change: Value = serde_json::from_slice(&updated).unwrap();
    change["id"] = json!("update-with-text");
    change["resource"]["fields"]["System.Title"] =
        json!({"oldValue": "Beacon drops the last reading of each hour", "newValue": "A better idea"});
    change["resource"]["revision"]["fields"]["System.Title"] = json!("A better idea");
    change["resource"]["revision"]["fields"]["System.Description"] =
        json!("<div>Make it <b>faster</b>&nbsp;&amp; smaller.</div><ul><li>one</li><li>two</li></ul>");
    change["resource"]["revision"]["fields"]["Microsoft.VSTS.Common.AcceptanceCriteria"] =
        json!("<p>Loads in &lt; 1&nbsp;s</p>");
    let (status, body) = app.post_ado(change.to_string().as_bytes(), Some(ADO_AUTH)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["project"], "server");
    let spec = app.execs.store().spec(body["spec_id"].as_i64().unwrap()).await.unwrap().unwrap();
    assert_eq!(spec.title, "A better idea");
    assert_eq!(spec.body, "Make it faster & smaller.\n\n- one\n- two\n\n## Acceptance criteria\n\nLoads in < 1 s");
    assert_eq!(spec.source_url, "https://devops.lumen.example/LumenCollection/_apis/wit/workItems/88");

    change["id"] = json!("update-2");
    change["resource"]["revision"]["rev"] = json!(4);
    change["resource"]["revision"]["fields"]["System.Title"] = json!("The best idea");
    let (status, body) = app.post_ado(change.to_string().as_bytes(), Some(ADO_AUTH)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["outcome"], "updated");
    assert_eq!(app.specs().await.len(), 2);

    // Revision 3 arrives after revision 4 (another notification id): too old, ignored.
    change["id"] = json!("update-late");
    change["resource"]["revision"]["rev"] = json!(3);
    change["resource"]["revision"]["fields"]["System.Title"] = json!("An older idea");
    let (status, body) = app.post_ado(change.to_string().as_bytes(), Some(ADO_AUTH)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["ignored"], "revision 3 is not newer than the imported revision 4");
    let titles: Vec<Value> = app.specs().await.iter().map(|s| s["title"].clone()).collect();
    assert!(titles.contains(&json!("The best idea")), "{titles:?}");

    let other = json!({"id": "n-3", "eventType": "git.push", "resource": {}});
    let (status, body) = app.post_ado(other.to_string().as_bytes(), Some(ADO_AUTH)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["ignored"], "event git.push is not handled");
    // Seen: the three work-item deliveries that were applied and the git.push; the two
    // ignored work-item updates (no text change, an old revision) are forgotten, so a
    // redelivery of either is handled afresh.
    assert_eq!(app.deliveries("ado").await, 4);
}

#[tokio::test]
async fn a_baton_approve_work_item_comment_decides_the_approval_and_a_merged_ado_pull_request_closes_the_spec() {
    let app = App::new().await;
    app.project("fab", "ado:lumenlabs/Lantern", "").await;
    let created = app.ado_fixture("workitem.created.json");
    let (status, body) = app.post_ado(&created, Some(ADO_AUTH)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let spec_id = body["spec_id"].as_i64().unwrap();
    let task_id = "ado-approve";
    fire_by_hand(&app, spec_id, task_id).await;
    let store = app.execs.store();
    store.add_token("rita", "reviewer", "hash-r", "", "2026-01-01T00:00:00Z").await.unwrap();

    // The created delivery fixture, as a comment.
    let mut comment: Value = serde_json::from_slice(&created).unwrap();
    comment["eventType"] = json!("workitem.commented");
    comment["id"] = json!("comment-1");
    comment["resource"]["fields"]["System.History"] = json!("<div>/baton approve</div>");
    comment["resource"]["fields"]["System.ChangedBy"] = json!("Rita Reviewer <Rita@Example.com>");
    let (status, body) = app.post_ado(comment.to_string().as_bytes(), Some(ADO_AUTH)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["ignored"], "Azure DevOps user \"Rita@Example.com\" is not mapped to a Baton user");

    assert!(store.set_identity("rita", ForgeIdentity::AdoEmail, "rita@example.com").await.unwrap());
    // The fixture's revision is older than the approval request: it decides nothing.
    comment["id"] = json!("comment-old");
    let (status, body) = app.post_ado(comment.to_string().as_bytes(), Some(ADO_AUTH)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert!(body["ignored"].as_str().unwrap().contains("before phase 1"), "{body}");
    comment["resource"]["fields"]["System.ChangedDate"] = json!(baton::clock::now_rfc3339());
    comment["id"] = json!("comment-2");
    let (status, body) = app.post_ado(comment.to_string().as_bytes(), Some(ADO_AUTH)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!((body["decision"].as_str(), body["by"].as_str()), (Some("approve"), Some("rita")));
    assert!(app.execs.get(task_id).await.unwrap().pending_approval_request.is_none());
    let (status, body) = app.post_ado(comment.to_string().as_bytes(), Some(ADO_AUTH)).await;
    assert_eq!((status, body), (StatusCode::OK, json!({"duplicate": true})));

    // Its pull request merged on Azure DevOps (the documented `git.pullrequest.merged` shape,
    // no fixture file): the spec is merged; another repository's changes nothing.
    let mut merged = json!({"id": "pr-merged-1", "eventType": "git.pullrequest.merged", "resource": {
        "pullRequestId": 9, "status": "completed", "mergeStatus": "succeeded",
        "sourceRefName": format!("refs/heads/baton/{task_id}"), "targetRefName": "refs/heads/main",
        "repository": {"name": "Other", "webUrl": "https://dev.azure.com/lumenlabs/Lantern/_git/Other",
                       "project": {"name": "Lantern"}}}});
    let (status, body) = app.post_ado(merged.to_string().as_bytes(), Some(ADO_AUTH)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(store.spec(spec_id).await.unwrap().unwrap().status, "executing");
    merged["id"] = json!("pr-merged-2");
    merged["resource"]["repository"]["name"] = json!("Lantern");
    merged["resource"]["repository"]["webUrl"] = json!("https://dev.azure.com/lumenlabs/Lantern/_git/Lantern");
    let (status, body) = app.post_ado(merged.to_string().as_bytes(), Some(ADO_AUTH)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let spec = store.spec(spec_id).await.unwrap().unwrap();
    assert_eq!(spec.status, "merged");
    assert!(spec.status_reason.contains("/pullrequest/9"), "{}", spec.status_reason);

    // A plain comment is acknowledged and ignored.
    comment["id"] = json!("comment-3");
    comment["resource"]["fields"]["System.History"] = json!("<div>Looks good to me</div>");
    let (status, body) = app.post_ado(comment.to_string().as_bytes(), Some(ADO_AUTH)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
}

#[test]
fn token_create_maps_an_ado_email_and_refuses_a_bad_or_taken_one() {
    let ws = Workspace::with_repo(&[("README.md", "hello\n")]);
    let create = |user: &str, email: &str| {
        let args = ["token", "create", "--user", user, "--role", "reviewer", "--ado-email", email];
        ws.baton().args(args).output().unwrap()
    };
    let out = create("rita", "rita@example.com");
    assert_eq!(crate::common::code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    let out = create("bob", "RITA@example.com");
    assert_eq!(crate::common::code(&out), 2);
    assert!(String::from_utf8_lossy(&out.stderr).contains("already the e-mail of rita"));
    let out = create("bob", "not an email");
    assert_eq!(crate::common::code(&out), 2);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--ado-email"));
    assert!(out.stdout.is_empty(), "no token is printed for a refused e-mail");
}

#[test]
fn token_create_maps_a_github_login_and_refuses_another_users_login() {
    let ws = Workspace::with_repo(&[("README.md", "hello\n")]);
    let args = ["token", "create", "--user", "rita", "--role", "reviewer", "--github-login", "rita-gh"];
    let out = ws.baton().args(args).output().unwrap();
    assert_eq!(crate::common::code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    let args = ["token", "create", "--user", "bob", "--role", "reviewer", "--github-login", "Rita-GH"];
    let out = ws.baton().args(args).output().unwrap();
    assert_eq!(crate::common::code(&out), 2, "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("already the login of rita"));
    assert!(out.stdout.is_empty(), "no token is printed");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let execs = Executions::open(DataDir::open(&ws.data()).unwrap()).await.unwrap();
        let user =
            execs.store().user_by_identity(ForgeIdentity::GitHubLogin, "RITA-gh").await.unwrap().expect("mapped");
        assert_eq!(user.name, "rita");
        assert!(execs.store().user("bob").await.unwrap().is_none(), "the refused user was not created");
    });
}

#[tokio::test]
async fn an_issue_delivery_ignored_before_its_project_exists_is_imported_when_redelivered() {
    // Found trying Baton: the ignored delivery was remembered, so GitHub's "Redeliver" (the
    // same delivery id) after registering the project answered `duplicate` and the issue was
    // never imported.
    let app = App::new().await;
    let (status, body) = app.deliver("issues.opened").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body, json!({"ignored": format!("no project for {REPO}")}));
    assert_eq!(app.deliveries("github").await, 0, "not applied: not remembered");

    app.project("p", REPO, "bug").await;
    let (status, body) = app.deliver("issues.opened").await;
    assert_eq!(status, StatusCode::CREATED, "the redelivery imports the issue: {body}");
    assert_eq!(body["outcome"], "created");
    let (status, body) = app.deliver("issues.opened").await;
    assert_eq!((status, body), (StatusCode::OK, json!({"duplicate": true})), "applied: now it is seen");
    assert_eq!(app.specs().await.len(), 1);

    // Azure DevOps likewise: `workitem.created` before the project exists, then retried.
    let created = app.ado_fixture("workitem.created.json");
    let (status, body) = app.post_ado(&created, Some(ADO_AUTH)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["ignored"], "no project for Azure DevOps project Lantern");
    assert_eq!(app.deliveries("ado").await, 0);
    app.project("fab", "ado:lumenlabs/Lantern", "").await;
    let (status, body) = app.post_ado(&created, Some(ADO_AUTH)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = app.post_ado(&created, Some(ADO_AUTH)).await;
    assert_eq!((status, body), (StatusCode::OK, json!({"duplicate": true})));
    assert_eq!(app.specs().await.len(), 2);
}

#[tokio::test]
async fn a_delivered_comment_never_decides_a_later_approval() {
    let app = App::new().await;
    app.project("p", REPO, "bug").await;
    let (_, body) = app.deliver("issues.opened").await;
    let spec_id = body["spec_id"].as_i64().unwrap();
    let store = app.execs.store();
    store.add_token("rev", "reviewer", "hash-1", "", "2026-01-01T00:00:00Z").await.unwrap();
    store.set_identity("rev", ForgeIdentity::GitHubLogin, "ben-lumen").await.unwrap();
    let mut comment = app.payload("issue_comment.created");
    comment["comment"]["body"] = json!("/baton approve");

    // Delivered while the spec is not fired: nothing to decide.
    let (status, body) = app.deliver_variant("issue_comment.created", &comment, "early").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert!(body["ignored"].as_str().unwrap().contains("has not been fired"), "{body}");

    // Fired, its execution not waiting yet: another comment decides nothing either.
    let task_id = "late-approval";
    app.execs.create(approval_plan(task_id)).await.unwrap();
    let fire = SpecChange {
        action: "fire".into(),
        expected: "imported".into(),
        to: "executing".into(),
        actor: "lead".into(),
        at: "2026-01-01T00:00:00Z".into(),
        ..SpecChange::default()
    };
    store.change_spec(spec_id, &fire).await.unwrap();
    store.attach_execution(spec_id, task_id).await.unwrap();
    let (status, body) = app.deliver_variant("issue_comment.created", &comment, "running").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert!(body["ignored"].as_str().unwrap().contains("not waiting for an approval"), "{body}");
    // By someone not mapped yet: nothing.
    comment["comment"]["user"]["login"] = json!("not-yet-mapped");
    let (status, body) = app.deliver_variant("issue_comment.created", &comment, "unmapped").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");

    // Now the approval is pending, and the unmapped commenter is a reviewer.
    let step = json!({"kind": "step_recorded", "step_id": "1.1", "agent_name": "alpha", "status": "complete", "outcome": "done"});
    let req = Request::post(format!("/api/v1/executions/{task_id}/events")).header("content-type", "application/json");
    let (status, body) = app.send(req.body(Body::from(step.to_string())).unwrap()).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["next_action"]["action_type"], "approval");
    store.add_token("rev2", "reviewer", "hash-2", "", "2026-01-01T00:00:00Z").await.unwrap();
    store.set_identity("rev2", ForgeIdentity::GitHubLogin, "not-yet-mapped").await.unwrap();
    let journal = store.events(task_id, 0).await.unwrap().len();

    // The forge redelivers each of the three comments: none decides the approval.
    for (delivery, login) in [("early", "ben-lumen"), ("running", "ben-lumen"), ("unmapped", "not-yet-mapped")] {
        comment["comment"]["user"]["login"] = json!(login);
        let (status, body) = app.deliver_variant("issue_comment.created", &comment, delivery).await;
        assert_eq!((status, body), (StatusCode::OK, json!({"duplicate": true})), "{delivery}");
    }
    assert!(app.execs.get(task_id).await.unwrap().pending_approval_request.is_some(), "still waiting");
    assert_eq!(store.events(task_id, 0).await.unwrap().len(), journal, "nothing journaled");

    // Azure DevOps' comments likewise: delivered before the approval, redelivered after.
    let mut ado_comment: Value = serde_json::from_slice(&app.ado_fixture("workitem.created.json")).unwrap();
    app.project("fab", "ado:lumenlabs/Lantern", "").await;
    let (status, body) = app.post_ado(ado_comment.to_string().as_bytes(), Some(ADO_AUTH)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let ado_spec = body["spec_id"].as_i64().unwrap();
    store.set_identity("rev", ForgeIdentity::AdoEmail, "rita@example.com").await.unwrap();
    ado_comment["eventType"] = json!("workitem.commented");
    ado_comment["id"] = json!("ado-early");
    ado_comment["resource"]["fields"]["System.History"] = json!("<div>/baton approve</div>");
    ado_comment["resource"]["fields"]["System.ChangedBy"] = json!("Rita Reviewer <rita@example.com>");
    let (status, body) = app.post_ado(ado_comment.to_string().as_bytes(), Some(ADO_AUTH)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    fire_by_hand(&app, ado_spec, "ado-late-approval").await;
    let (status, body) = app.post_ado(ado_comment.to_string().as_bytes(), Some(ADO_AUTH)).await;
    assert_eq!((status, body), (StatusCode::OK, json!({"duplicate": true})));
    assert!(app.execs.get("ado-late-approval").await.unwrap().pending_approval_request.is_some());
}

/// The migrations up to `last` (copied from `migrations/`) applied to a new database at `db`,
/// as an older Baton left it.
async fn database_at(db: &std::path::Path, last: &str) -> sqlx::SqlitePool {
    let dir = tempfile::tempdir().unwrap();
    let mut names: Vec<_> = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sql"))
        .collect();
    names.sort();
    for path in names.iter().filter(|p| p.file_name().unwrap().to_str().unwrap() <= last) {
        std::fs::copy(path, dir.path().join(path.file_name().unwrap())).unwrap();
    }
    let options = sqlx::sqlite::SqliteConnectOptions::new().filename(db).create_if_missing(true);
    let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect_with(options).await.unwrap();
    sqlx::migrate::Migrator::new(dir.path()).await.unwrap().run(&pool).await.unwrap();
    pool
}

#[tokio::test]
async fn duplicates_already_in_a_database_keep_the_oldest_spec_as_the_items() {
    let ws = Workspace::with_repo(&[("README.md", "hello\n")]);
    let data = DataDir::open(&ws.data()).unwrap();
    // A database as the check-then-insert left it: issue 7 imported three times (one address
    // with other letter case), work item 301 twice (the hook's API address, the import's web
    // address), and specs of their own.
    let pool = database_at(&data.db_path(), "0009_spend.sql").await;
    sqlx::query(
        "insert into projects (name, repo_path, default_branch, agent_profile, created_at, forge_repo, trigger_label) \
         values ('p', ?, 'main', 'demo', '2026-01-01T00:00:00Z', ?, 'bug')",
    )
    .bind(ws.repo().display().to_string())
    .bind(REPO)
    .execute(&pool)
    .await
    .unwrap();
    let legacy = [
        ("github", ISSUE_URL),
        ("github", ISSUE_URL),
        ("github", "https://github.com/Lumen-Labs/Lantern/issues/7"),
        ("ado", "https://dev.azure.com/lumenlabs/_apis/wit/workItems/301"),
        ("ado", "https://dev.azure.com/lumenlabs/6f1c2a3b-4d5e-4f60-8a71-92b3c4d5e6f7/_workitems/edit/301"),
        ("board", ""),
        ("github", "https://github.com/lumen-labs/lantern/issues/8"),
    ];
    for (n, (source, url)) in legacy.iter().enumerate() {
        let id: i64 = sqlx::query_scalar(
            "insert into specs (project, title, body, source, source_url, status, created_by, created_at, updated_at) \
             values ('p', ?, '', ?, ?, 'imported', 'old', '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z') \
             returning spec_id",
        )
        .bind(format!("legacy {n}"))
        .bind(source)
        .bind(url)
        .fetch_one(&pool)
        .await
        .unwrap();
        sqlx::query(
            "insert into spec_events (spec_id, seq, action, from_status, to_status, actor, at) \
             values (?, 1, 'create', '', 'imported', 'old', '2026-01-01T00:00:00Z')",
        )
        .bind(id)
        .execute(&pool)
        .await
        .unwrap();
    }
    pool.close().await;

    // Opened by this Baton, first by a one-shot CLI process (a user's first command after the
    // upgrade): migrated, the keys filled, the oldest of each item kept.
    let execs = Executions::open_for(data.clone(), Workload::OneShot).await.unwrap();
    let store = execs.store();
    assert!(!store.ran_no_migration(), "this process migrated the file");
    let holder = |key: &'static str| async move { store.spec_by_source_key(key).await.unwrap().map(|s| s.spec_id) };
    assert_eq!(holder("github:github.com/lumen-labs/lantern#7").await, Some(1));
    assert_eq!(holder("ado:lumenlabs#301").await, Some(4));
    assert_eq!(holder("github:github.com/lumen-labs/lantern#8").await, Some(7));
    for (duplicate, kept) in [(2, 1), (3, 1), (5, 4)] {
        let events = store.spec_events(duplicate).await.unwrap();
        let last = events.last().unwrap();
        assert_eq!(last.action, "superseded_duplicate", "spec {duplicate}");
        assert!(last.reason.starts_with(&format!("spec {kept} was imported from the same")), "{}", last.reason);
        let row = store.spec(duplicate).await.unwrap().unwrap();
        assert_eq!(
            (row.status.as_str(), row.title.as_str()),
            ("imported", format!("legacy {}", duplicate - 1).as_str())
        );
    }
    for kept in [1, 4, 6, 7] {
        assert_eq!(store.spec_events(kept).await.unwrap().len(), 1, "spec {kept} untouched");
    }
    // Opening again changes nothing. A one-shot process on the current schema runs no
    // migration and leaves the (done) backfill alone; a server runs it at every start.
    drop(execs);
    let once = Executions::open_for(data.clone(), Workload::OneShot).await.unwrap();
    assert!(once.store().ran_no_migration());
    drop(once);
    let execs = Executions::open(data).await.unwrap();
    assert!(!execs.store().ran_no_migration());
    assert_eq!(execs.store().spec_events(2).await.unwrap().len(), 2);

    // A delivery of issue 7 finds the oldest spec; nothing new is created.
    let state = AppState::new(execs.clone()).unwrap().with_webhooks(config());
    let app = App { ws, execs, state };
    let (status, body) = app.deliver("issues.opened").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!((body["spec_id"].as_i64(), body["outcome"].as_str()), (Some(1), Some("updated")), "{body}");
    assert_eq!(app.specs().await.len(), legacy.len());
}

/// Issue 19.5: a pull request closed without merging ends its spec in `closed_unmerged`, a
/// final state shown in its own board column; a later event changes nothing.
#[tokio::test]
async fn a_pull_request_closed_without_merging_ends_the_spec_closed_unmerged() {
    let app = App::new().await;
    app.project("p", REPO, "bug").await;
    let (status, body) = app.deliver("issues.opened").await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let spec_id = body["spec_id"].as_i64().unwrap();
    let task_id = "hook-closed";
    fire_by_hand(&app, spec_id, task_id).await;
    let store = app.execs.store();

    let mut pr = app.payload("pull_request.closed.merged");
    pr["pull_request"]["head"]["ref"] = json!(format!("baton/{task_id}"));
    pr["pull_request"]["merged"] = json!(false);
    pr["repository"]["full_name"] = json!(REPO);
    let (status, body) = app.deliver_variant("pull_request.closed.merged", &pr, "close-1").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "closed_unmerged");
    let spec = store.spec(spec_id).await.unwrap().unwrap();
    assert_eq!(spec.status, "closed_unmerged");
    assert!(spec.status_reason.starts_with("closed without merging: "), "{}", spec.status_reason);
    assert_eq!(store.spec_events(spec_id).await.unwrap().last().unwrap().action, "closed_unmerged");

    // Final: a merge afterwards (reopened and merged by hand) is acknowledged and ignored.
    pr["pull_request"]["merged"] = json!(true);
    let (status, body) = app.deliver_variant("pull_request.closed.merged", &pr, "close-2").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(store.spec(spec_id).await.unwrap().unwrap().status, "closed_unmerged");

    // The board shows it in its own column.
    let req = Request::get("/api/v1/board");
    let (status, board) = app.send(req.body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::OK, "{board}");
    let column = board["columns"].as_array().unwrap().iter().find(|c| c["stage"] == "closed_unmerged").unwrap();
    assert_eq!(column["title"], "Closed unmerged");
    assert_eq!(column["cards"][0]["spec_id"], spec_id, "{column}");
}

/// Issue 19.5 on Azure DevOps: `git.pullrequest.updated` with `status: abandoned` ends the spec
/// in `closed_unmerged`; an update that leaves the pull request active changes nothing.
#[tokio::test]
async fn an_abandoned_ado_pull_request_ends_the_spec_closed_unmerged() {
    let app = App::new().await;
    app.project("fab", "ado:lumenlabs/Lantern", "").await;
    let (status, body) = app.post_ado(&app.ado_fixture("workitem.created.json"), Some(ADO_AUTH)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let spec_id = body["spec_id"].as_i64().unwrap();
    let task_id = "ado-abandoned";
    fire_by_hand(&app, spec_id, task_id).await;
    let store = app.execs.store();

    let mut updated = json!({"id": "pr-upd-1", "eventType": "git.pullrequest.updated", "resource": {
        "pullRequestId": 12, "status": "active",
        "sourceRefName": format!("refs/heads/baton/{task_id}"), "targetRefName": "refs/heads/main",
        "repository": {"name": "Lantern", "webUrl": "https://dev.azure.com/lumenlabs/Lantern/_git/Lantern",
                       "project": {"name": "Lantern"}}}});
    let (status, body) = app.post_ado(updated.to_string().as_bytes(), Some(ADO_AUTH)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(store.spec(spec_id).await.unwrap().unwrap().status, "executing");

    updated["id"] = json!("pr-upd-2");
    updated["resource"]["status"] = json!("abandoned");
    let (status, body) = app.post_ado(updated.to_string().as_bytes(), Some(ADO_AUTH)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let spec = store.spec(spec_id).await.unwrap().unwrap();
    assert_eq!(spec.status, "closed_unmerged");
    assert!(spec.status_reason.ends_with("/pullrequest/12"), "{}", spec.status_reason);
}
