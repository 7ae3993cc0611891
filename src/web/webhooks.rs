//! Forge webhooks: `POST /webhooks/github` and `POST /webhooks/ado`.
//!
//! Owns authenticating a delivery — GitHub's `X-Hub-Signature-256` HMAC over the raw body,
//! Azure DevOps's Basic credentials, both compared in constant time before the body is
//! parsed — de-duplicating it (`X-GitHub-Delivery`, the ADO notification `id`; when a
//! delivery counts as seen is [`DeliveryKind`]'s rule), and turning its event into a spec
//! import, an approval, a merge, or a CI notice for a waiting `ci` gate (GitHub `check_run`,
//! `check_suite`, `status`; Azure DevOps `build.complete`: read into a
//! [`CiNotice`](crate::runtime::ci_events::CiNotice), decided by [`crate::runtime::ci_events::CiService`]
//! and, for open pull requests, `runtime::remediation`), and a review on a Baton pull request
//! (GitHub `pull_request_review`, `pull_request_review_comment`, Azure DevOps
//! `ms.vss-code.git-pullrequest-comment-event`: read into a
//! [`ReviewRequest`](crate::runtime::ops::ReviewRequest), decided by the operator service). The routes are public to the auth
//! middleware because they authenticate themselves. The secrets live in [`WebhookConfig`],
//! read once at server start; this module never logs or echoes them, and never calls a forge
//! back (no outbound HTTP).

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::{Digest as _, Sha256};

use crate::forge::html_to_text;
use crate::forge::item::ADO_TEXT_FIELDS;
use crate::model::state::ApprovalDecision;
use crate::runtime::forge::ForgeItem;
use crate::runtime::intake::{self, DeliveryKind};
use crate::runtime::ops::Operator;
use crate::runtime::pulls::{self, PullEnded, PullOutcome, PullRepo};
use crate::runtime::specs::ImportOutcome;
use crate::web::error::AppError;
use crate::web::AppState;

/// Default largest delivery body, bytes (5 MiB; GitHub caps payloads at 25 MB, issue texts at
/// 64 KiB).
pub const DEFAULT_MAX_BODY_BYTES: usize = 5 * 1024 * 1024;

/// Webhook settings, read once at server start ([`WebhookConfig::from_env`]). Its `Debug`
/// never shows the secrets.
#[derive(Clone)]
pub struct WebhookConfig {
    /// `BATON_GITHUB_WEBHOOK_SECRET`: GitHub deliveries are signed with it; unset: 503.
    pub github_secret: Option<String>,
    /// `BATON_ADO_WEBHOOK_USER`: the Basic user of Azure DevOps service hooks.
    pub ado_user: Option<String>,
    /// `BATON_ADO_WEBHOOK_PASSWORD`: their Basic password; either unset: 503.
    pub ado_password: Option<String>,
    /// `BATON_WEBHOOK_MAX_BODY_BYTES`: larger bodies get 413 (default 5 MiB).
    pub max_body_bytes: usize,
}

impl Default for WebhookConfig {
    fn default() -> WebhookConfig {
        WebhookConfig {
            github_secret: None,
            ado_user: None,
            ado_password: None,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
        }
    }
}

impl std::fmt::Debug for WebhookConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let set = |v: &Option<String>| if v.is_some() { "<set>" } else { "<unset>" };
        f.debug_struct("WebhookConfig")
            .field("github_secret", &set(&self.github_secret))
            .field("ado_user", &self.ado_user)
            .field("ado_password", &set(&self.ado_password))
            .field("max_body_bytes", &self.max_body_bytes)
            .finish()
    }
}

impl WebhookConfig {
    /// The settings from the process environment alone (empty values count as unset).
    pub fn from_env() -> WebhookConfig {
        WebhookConfig::from_lookup(|k| std::env::var(k).ok())
    }

    /// The settings from `lookup` (an environment) alone.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> WebhookConfig {
        let settings = crate::forge::ForgeSettings::default().with_env(&lookup);
        WebhookConfig::from_settings(&settings, lookup)
    }

    /// The secrets of `settings` (`baton.toml` with the environment on top), and the body
    /// limit `BATON_WEBHOOK_MAX_BODY_BYTES` from `lookup` (default 5 MiB).
    pub fn from_settings(
        settings: &crate::forge::ForgeSettings,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> WebhookConfig {
        let secret =
            |s: &Option<crate::forge::Secret>| s.as_ref().map(|v| v.expose().to_string()).filter(|v| !v.is_empty());
        WebhookConfig {
            github_secret: secret(&settings.github.webhook_secret),
            ado_user: settings.ado.webhook_user.clone().filter(|v| !v.is_empty()),
            ado_password: secret(&settings.ado.webhook_password),
            max_body_bytes: lookup("BATON_WEBHOOK_MAX_BODY_BYTES")
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(DEFAULT_MAX_BODY_BYTES),
        }
    }
}

/// The webhook routes, with the configured body limit.
pub(crate) fn router(config: &WebhookConfig) -> Router<AppState> {
    Router::new()
        .route("/webhooks/github", post(github))
        .route("/webhooks/ado", post(ado))
        .layer(DefaultBodyLimit::max(config.max_body_bytes))
}

/// A handled delivery: its status and JSON answer (also stored as the delivery's outcome).
type Handled = (StatusCode, Value);

fn ignored(reason: impl Into<String>) -> Handled {
    (StatusCode::ACCEPTED, json!({ "ignored": reason.into() }))
}

/// A body that could not be read (over the limit: 413) as the JSON error every route gives.
fn refused_body(e: &BytesRejection) -> Response {
    AppError::Body { status: e.status(), message: e.body_text(), field: None, at: None }.into_response()
}

fn not_configured(what: &str) -> Response {
    AppError::Unavailable(format!("not configured: set {what} to receive these webhooks")).into_response()
}

/// Whether `signature` (the `X-Hub-Signature-256` value) is `sha256=` + the hex HMAC-SHA256
/// of `body` under `secret`, compared in constant time.
pub fn github_signature_ok(secret: &[u8], body: &[u8], signature: &str) -> bool {
    let Some(hex_mac) = signature.trim().strip_prefix("sha256=") else { return false };
    let Ok(expected) = hex::decode(hex_mac) else { return false };
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret) else { return false };
    mac.update(body);
    mac.verify_slice(&expected).is_ok()
}

/// Compares two secrets in constant time (over their SHA-256, so lengths leak nothing).
fn same_secret(a: &str, b: &str) -> bool {
    let (x, y) = (Sha256::digest(a.as_bytes()), Sha256::digest(b.as_bytes()));
    x.iter().zip(y.iter()).fold(0u8, |acc, (p, q)| acc | (p ^ q)) == 0
}

fn header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim).filter(|v| !v.is_empty())
}

/// Claims the delivery, runs `handle`, and settles it by its `kind`
/// ([`intake::finish`], [`intake::failed`]): a redelivery of a delivery that counts as seen
/// answers `{"duplicate": true}` and applies nothing; an item import answered "ignored" and a
/// failure (but a comment's) are forgotten, so the forge's redelivery applies.
async fn once<F>(app: &AppState, source: &str, delivery: &str, kind: DeliveryKind, handle: F) -> Response
where
    F: std::future::Future<Output = Result<Handled, AppError>>,
{
    match intake::claim(&app.execs, source, delivery).await {
        Ok(true) => {}
        Ok(false) => return (StatusCode::OK, Json(json!({ "duplicate": true }))).into_response(),
        Err(e) => return AppError::from(e).into_response(),
    }
    match handle.await {
        Ok((status, body)) => {
            let applied = status != StatusCode::ACCEPTED;
            if let Err(e) = intake::finish(&app.execs, source, delivery, kind, applied, &body.to_string()).await {
                tracing::warn!("storing the outcome of {source} delivery {delivery}: {e}");
            }
            tracing::info!(webhook.source = source, webhook.delivery = delivery, "webhook: {body}");
            (status, Json(body)).into_response()
        }
        Err(e) => {
            if let Err(e) = intake::failed(&app.execs, source, delivery, kind, &e.message()).await {
                tracing::warn!("settling the failed {source} delivery {delivery}: {e}");
            }
            e.into_response()
        }
    }
}

/// `POST /webhooks/github`.
async fn github(State(app): State<AppState>, headers: HeaderMap, body: Result<Bytes, BytesRejection>) -> Response {
    let body = match body {
        Ok(b) => b,
        Err(e) => return refused_body(&e),
    };
    let Some(secret) = app.webhooks.github_secret.as_deref() else {
        return not_configured("BATON_GITHUB_WEBHOOK_SECRET");
    };
    let Some(signature) = header(&headers, "x-hub-signature-256") else {
        let why = if header(&headers, "x-hub-signature").is_some() {
            "only a SHA-1 X-Hub-Signature was sent; Baton needs X-Hub-Signature-256"
        } else {
            "unsigned delivery: X-Hub-Signature-256 is missing"
        };
        return AppError::Unauthorized(why.into()).into_response();
    };
    if !github_signature_ok(secret.as_bytes(), &body, signature) {
        return AppError::Unauthorized("X-Hub-Signature-256 does not match the body".into()).into_response();
    }
    let Some(event) = header(&headers, "x-github-event").map(str::to_string) else {
        return AppError::BadRequest("X-GitHub-Event is missing".into()).into_response();
    };
    let Some(delivery) = header(&headers, "x-github-delivery").map(str::to_string) else {
        return AppError::BadRequest("X-GitHub-Delivery is missing".into()).into_response();
    };
    let payload: Value = match serde_json::from_slice(&body) {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) => return AppError::BadRequest("the payload is not a JSON object".into()).into_response(),
        Err(e) => return AppError::BadRequest(format!("the payload is not JSON: {e}")).into_response(),
    };
    if event == "ping" {
        return (StatusCode::OK, Json(json!({ "pong": true }))).into_response();
    }
    let kind = DeliveryKind::of_github(&event, text(&payload, "/action"));
    once(&app, "github", &delivery, kind, github_event(&app, &event, &delivery, &payload)).await
}

fn text<'v>(v: &'v Value, pointer: &str) -> &'v str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or_default()
}

async fn github_event(app: &AppState, event: &str, delivery: &str, p: &Value) -> Result<Handled, AppError> {
    let action = text(p, "/action");
    let actor = format!("github:{}", text(p, "/sender/login"));
    match (event, action) {
        ("issues", "opened" | "labeled" | "edited") => issue(app, action, p, &actor).await,
        ("issue_comment", "created") => comment(app, delivery, p).await,
        ("pull_request", "closed") => pull_request_closed(app, p, &actor).await,
        ("check_run" | "check_suite" | "status", _) => ci_notice(app, github_ci_notice(event, p)).await,
        ("pull_request_review", "submitted") | ("pull_request_review_comment", "created") => {
            match github_review(app, event, p) {
                Some(request) => review(app, request).await,
                None => Ok(ignored("the review asks for no change (not changes_requested, no comment)")),
            }
        }
        ("pull_request_review" | "pull_request_review_comment", _) => {
            Ok(ignored(format!("{event} {action} is not handled")))
        }
        ("issues" | "issue_comment" | "pull_request", _) => Ok(ignored(format!("{event} {action} is not handled"))),
        _ => Ok(ignored(format!("event {event} is not handled"))),
    }
}

fn issue_item(p: &Value) -> ForgeItem {
    ForgeItem::from_github_issue(p.get("issue").unwrap_or(&Value::Null), text(p, "/repository/full_name"))
}

fn outcome_body(o: &ImportOutcome) -> Handled {
    let spec = o.spec();
    let mut body =
        json!({ "spec_id": spec.spec_id, "project": spec.project, "outcome": o.as_str(), "status": spec.status });
    match o {
        ImportOutcome::Ignored { reason, .. } => body["reason"] = json!(reason),
        ImportOutcome::Updated { changed, .. } => body["changed"] = json!(changed),
        _ => {}
    }
    let status = if matches!(o, ImportOutcome::Created(_)) { StatusCode::CREATED } else { StatusCode::OK };
    (status, body)
}

async fn issue(app: &AppState, action: &str, p: &Value, actor: &str) -> Result<Handled, AppError> {
    let number = p.pointer("/issue/number").and_then(Value::as_i64).unwrap_or_default();
    if p.pointer("/issue/pull_request").is_some_and(|v| !v.is_null()) {
        return Ok(ignored(format!("#{number} is a pull request, not an issue")));
    }
    let item = issue_item(p);
    if item.url.is_empty() {
        return Err(AppError::BadRequest("issue.html_url is missing".into()));
    }
    if action == "edited" {
        return Ok(match app.specs.reimport(item, actor).await? {
            Some(o) => outcome_body(&o),
            None => ignored(format!("no spec was imported from {}", text(p, "/issue/html_url"))),
        });
    }
    let repo = text(p, "/repository/full_name");
    let prefixed = format!("github:{repo}");
    let projects = intake::projects_for(&app.execs, &[repo, prefixed.as_str()]).await?;
    if projects.is_empty() {
        return Ok(ignored(format!("no project for {repo}")));
    }
    let labels: Vec<&str> = p
        .pointer("/issue/labels")
        .and_then(Value::as_array)
        .map(|ls| ls.iter().filter_map(|l| l.get("name").and_then(Value::as_str)).collect())
        .unwrap_or_default();
    let labelled = |want: &str| !want.is_empty() && labels.iter().any(|l| l.eq_ignore_ascii_case(want));
    let Some(project) = projects.iter().find(|pr| labelled(&pr.trigger_label)) else {
        let wanted: Vec<String> = projects
            .iter()
            .map(|pr| {
                if pr.trigger_label.is_empty() {
                    format!("project {} has no trigger label", pr.name)
                } else {
                    format!("project {} imports issues labelled {:?}", pr.name, pr.trigger_label)
                }
            })
            .collect();
        return Ok(ignored(format!("issue #{number} carries no trigger label ({})", wanted.join("; "))));
    };
    Ok(outcome_body(&app.specs.import(&project.name, item, actor).await?))
}

/// A `/baton approve` or `/baton reject <reason>` comment: (decision, feedback).
fn command(body: &str) -> Option<(ApprovalDecision, String)> {
    let line = body.trim().lines().next().unwrap_or_default().trim();
    let rest = line.strip_prefix("/baton")?;
    let mut words = rest.trim_start().splitn(2, char::is_whitespace);
    let verb = words.next().unwrap_or_default();
    let arg = words.next().unwrap_or_default().trim().to_string();
    match verb {
        "approve" => Some((ApprovalDecision::Approve, arg)),
        "reject" => Some((ApprovalDecision::Reject, arg)),
        _ => None,
    }
}

async fn comment(app: &AppState, delivery: &str, p: &Value) -> Result<Handled, AppError> {
    let Some((decision, feedback)) = command(text(p, "/comment/body")) else {
        return Ok(ignored("the comment is not a /baton approve or /baton reject command"));
    };
    let login = text(p, "/comment/user/login");
    let user = app.ops.forge_operator(crate::store::ForgeIdentity::GitHubLogin, login).await?;
    let Some(user) = user else {
        return Ok(ignored(format!("GitHub user {login} is not mapped to a Baton user")));
    };
    let url = intake::spec_url(&app.execs, "github", text(p, "/issue/html_url")).await?;
    let written_at = comment_time(p.pointer("/comment/created_at"));
    let decided = Decided { source: "github", url: &url, who: login, delivery, written_at: written_at.as_deref() };
    decide(app, &decided, &user, decision, feedback).await
}

/// A comment's time as the payload gives it: `None` when absent, null or empty; a value that
/// is not a string is passed on as its JSON text (the operator service refuses it as no time).
fn comment_time(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::Null => None,
        Value::String(s) if s.is_empty() => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

/// Where a comment command came from.
struct Decided<'a> {
    /// `github` or `ado`.
    source: &'static str,
    /// The item's address (the spec's `source_url`).
    url: &'a str,
    /// The forge identity that wrote it (login, e-mail).
    who: &'a str,
    /// The delivery.
    delivery: &'a str,
    /// When the comment was written (RFC 3339), where the payload says.
    written_at: Option<&'a str>,
}

/// Decides, through the operator service, the approval the execution of the spec imported
/// from `from.url` waits for, as `user` (their Baton user); what it refuses as no decision is
/// answered `ignored`.
async fn decide(
    app: &AppState,
    from: &Decided<'_>,
    user: &Operator,
    decision: ApprovalDecision,
    feedback: String,
) -> Result<Handled, AppError> {
    let outcome = app.ops.decide_from_comment(from.source, from.url, from.written_at, user, decision, feedback).await?;
    let d = match outcome {
        Ok(d) => d,
        Err(reason) => return Ok(ignored(format!("{reason} ({})", from.who))),
    };
    tracing::info!(task.id = %d.task_id, "approval by {} from {} delivery {}", user.name, from.source, from.delivery);
    Ok((
        StatusCode::OK,
        json!({
            "spec_id": d.spec_id,
            "task_id": d.task_id,
            "phase_id": d.phase_id,
            "decision": decision.as_str(),
            "by": user.name,
            "recorded": d.decided.recorded,
        }),
    ))
}

/// The e-mail of an Azure DevOps identity: an object's `uniqueName`, or the `<…>` of a
/// `Display Name <email>` string.
fn ado_identity_email(v: Option<&Value>) -> &str {
    match v {
        Some(Value::Object(o)) => o.get("uniqueName").and_then(Value::as_str).unwrap_or_default(),
        Some(Value::String(s)) => match (s.rfind('<'), s.rfind('>')) {
            (Some(a), Some(b)) if a < b => &s[a + 1..b],
            _ => s.as_str(),
        },
        _ => "",
    }
}

/// `git.pullrequest.merged` (merged: `mergeStatus: succeeded` or `status: completed`) and
/// `git.pullrequest.updated` with `status: abandoned` (closed without merging) → read into a
/// [`PullEnded`] for [`pulls::pull_request_ended`], which decides; other updates are ignored.
async fn ado_pull_request(app: &AppState, event: &str, resource: &Value) -> Result<Handled, AppError> {
    let id = resource.get("pullRequestId").and_then(Value::as_i64).unwrap_or_default();
    let status = text(resource, "/status");
    let merged = match event {
        "git.pullrequest.merged" if text(resource, "/mergeStatus") == "succeeded" || status == "completed" => true,
        "git.pullrequest.updated" if status == "abandoned" => false,
        _ => return Ok(ignored(format!("pull request {id} is neither merged nor abandoned ({status})"))),
    };
    let web = text(resource, "/repository/webUrl");
    let url = if web.is_empty() { String::new() } else { format!("{web}/pullrequest/{id}") };
    let ended = PullEnded {
        repo: PullRepo::Ado {
            project: text(resource, "/repository/project/name"),
            repository: text(resource, "/repository/name"),
        },
        number: id,
        head: text(resource, "/sourceRefName"),
        merged,
        url: &url,
        actor: "ado",
    };
    pull_answer(pulls::pull_request_ended(&app.execs, &app.specs, &ended).await?)
}

/// The webhook's answer for what [`pulls::pull_request_ended`] did.
fn pull_answer(outcome: PullOutcome) -> Result<Handled, AppError> {
    Ok(match outcome {
        PullOutcome::Changed(row) => (StatusCode::OK, json!({ "spec_id": row.spec_id, "status": row.status })),
        PullOutcome::Ignored(why) => ignored(why),
    })
}

/// `workitem.commented`: a `/baton approve` or `/baton reject <reason>` comment (the
/// `System.History` of the revision, HTML) by a user mapped by `ado_email`.
async fn ado_comment(app: &AppState, delivery: &str, resource: &Value) -> Result<Handled, AppError> {
    let fields = resource.get("fields").unwrap_or(&Value::Null);
    let comment = html_to_text(text(fields, "/System.History"));
    let Some((decision, feedback)) = command(&comment) else {
        return Ok(ignored("the comment is not a /baton approve or /baton reject command"));
    };
    let email = ado_identity_email(fields.get("System.ChangedBy"));
    let email = if email.is_empty() { ado_identity_email(resource.get("revisedBy")) } else { email };
    let user = app.ops.forge_operator(crate::store::ForgeIdentity::AdoEmail, email).await?;
    let Some(user) = user else {
        return Ok(ignored(format!("Azure DevOps user {email:?} is not mapped to a Baton user")));
    };
    let url = intake::spec_url(&app.execs, "ado", &ado_url(resource, false)).await?;
    let written_at = comment_time(fields.get("System.ChangedDate"));
    let decided = Decided { source: "ado", url: &url, who: email, delivery, written_at: written_at.as_deref() };
    decide(app, &decided, &user, decision, feedback).await
}

/// `pull_request` `closed`, merged or not → read into a [`PullEnded`] for
/// [`pulls::pull_request_ended`], which decides.
async fn pull_request_closed(app: &AppState, p: &Value, actor: &str) -> Result<Handled, AppError> {
    let ended = PullEnded {
        repo: PullRepo::GitHub(text(p, "/repository/full_name")),
        number: p.pointer("/pull_request/number").and_then(Value::as_i64).unwrap_or_default(),
        head: text(p, "/pull_request/head/ref"),
        merged: p.pointer("/pull_request/merged").and_then(Value::as_bool) == Some(true),
        url: text(p, "/pull_request/html_url"),
        actor,
    };
    pull_answer(pulls::pull_request_ended(&app.execs, &app.specs, &ended).await?)
}

/// Whether a comment is `/baton stop` (its first line).
fn is_stop(body: &str) -> bool {
    let line = body.trim().lines().next().unwrap_or_default().trim();
    line.strip_prefix("/baton").is_some_and(|rest| rest.trim() == "stop")
}

/// Whether `body` is one Baton wrote (its reports and replies end with a hidden marker).
fn written_by_baton(body: &str) -> bool {
    body.contains("<!-- baton-")
}

/// A GitHub `pull_request_review` (`submitted` with state `changes_requested`, or any review
/// whose body is `/baton stop`) or `pull_request_review_comment` (`created`) read into a
/// [`ReviewRequest`](crate::runtime::ops::ReviewRequest); `None` for a review that asks for
/// nothing.
fn github_review(app: &AppState, event: &str, p: &Value) -> Option<crate::runtime::ops::ReviewRequest> {
    use crate::runtime::fixes::ReviewComment;
    let (login, body, comment) = if event == "pull_request_review" {
        let body = text(p, "/review/body");
        let changes = text(p, "/review/state").eq_ignore_ascii_case("changes_requested");
        if !changes && !is_stop(body) {
            return None;
        }
        // The review's body answers nothing to reply to; its id lets a round that read the
        // review (from one of its line comments' deliveries) know it.
        let id = p
            .pointer("/review/id")
            .and_then(Value::as_u64)
            .map(crate::runtime::fixes::review_body_id)
            .unwrap_or_default();
        let c = ReviewComment {
            id,
            path: String::new(),
            line: None,
            diff_hunk: String::new(),
            body: body.to_string(),
            author: text(p, "/review/user/login").to_string(),
        };
        (text(p, "/review/user/login"), body, c)
    } else {
        let line = p.pointer("/comment/line").or_else(|| p.pointer("/comment/original_line")).and_then(Value::as_i64);
        let id = p.pointer("/comment/id").and_then(Value::as_u64).map(|n| n.to_string()).unwrap_or_default();
        let body = text(p, "/comment/body");
        let c = ReviewComment {
            id,
            path: text(p, "/comment/path").to_string(),
            line,
            diff_hunk: crate::forge::review::trim_hunk(text(p, "/comment/diff_hunk")),
            body: body.to_string(),
            author: text(p, "/comment/user/login").to_string(),
        };
        (text(p, "/comment/user/login"), body, c)
    };
    let own_login = app.forges.settings().github.login.as_deref().unwrap_or_default();
    let own = (!own_login.is_empty() && own_login.eq_ignore_ascii_case(login)) || written_by_baton(body);
    Some(crate::runtime::ops::ReviewRequest {
        forge: "github",
        identity: (crate::store::ForgeIdentity::GitHubLogin, login.to_string()),
        branch: text(p, "/pull_request/head/ref").to_string(),
        sha: text(p, "/pull_request/head/sha").to_string(),
        stop: is_stop(body),
        comments: vec![comment],
        // A line comment names its review: the review's other comments and its body are read
        // with it, so a review whose comments are delivered first is still one round.
        review_id: if event == "pull_request_review" {
            p.pointer("/review/id").and_then(Value::as_u64)
        } else {
            p.pointer("/comment/pull_request_review_id").and_then(Value::as_u64)
        },
        own,
    })
}

/// An Azure DevOps `ms.vss-code.git-pullrequest-comment-event` read into a
/// [`ReviewRequest`](crate::runtime::ops::ReviewRequest): the comment, its thread (from the
/// comment's `threads` link or its own address), and the pull request's source branch and head.
fn ado_review(app: &AppState, resource: &Value) -> crate::runtime::ops::ReviewRequest {
    use crate::runtime::fixes::ReviewComment;
    let comment = resource.get("comment").unwrap_or(&Value::Null);
    let thread_of = |href: &str| -> Option<String> {
        let rest = href.split("/threads/").nth(1)?;
        let id: String = rest.chars().take_while(char::is_ascii_digit).collect();
        (!id.is_empty()).then_some(id)
    };
    let thread = thread_of(text(comment, "/_links/threads/href"))
        .or_else(|| thread_of(text(comment, "/_links/self/href")))
        .unwrap_or_default();
    let email = ado_identity_email(comment.get("author")).to_string();
    let body = text(comment, "/content");
    let own_email = app.forges.settings().ado.user_email.as_deref().unwrap_or_default();
    let own = (!own_email.is_empty() && own_email.eq_ignore_ascii_case(&email)) || written_by_baton(body);
    let pr = resource.get("pullRequest").unwrap_or(&Value::Null);
    crate::runtime::ops::ReviewRequest {
        forge: "ado",
        identity: (crate::store::ForgeIdentity::AdoEmail, email.clone()),
        branch: text(pr, "/sourceRefName").to_string(),
        sha: text(pr, "/lastMergeSourceCommit/commitId").to_string(),
        stop: is_stop(body),
        comments: vec![ReviewComment {
            id: thread,
            path: String::new(),
            line: None,
            diff_hunk: String::new(),
            body: body.to_string(),
            author: email,
        }],
        review_id: None,
        own,
    }
}

/// A review on a Baton pull request → [`Remediation::review`](crate::runtime::remediation::Remediation::review),
/// which reads its comments' context and asks the operator service whether it may start a
/// round (or wait for the next one, or stop the loop).
async fn review(app: &AppState, request: crate::runtime::ops::ReviewRequest) -> Result<Handled, AppError> {
    let who = request.identity.1.clone();
    match app.remediation.review(request).await? {
        Ok((task_id, outcome)) => Ok((StatusCode::OK, round_json(&task_id, &outcome))),
        Err(reason) => Ok(ignored(format!("{reason} ({who})"))),
    }
}

/// What a GitHub `check_run`, `check_suite` or `status` delivery names: its head commit and
/// branches.
fn github_ci_notice(event: &str, p: &Value) -> crate::runtime::ci_events::CiNotice {
    let (sha, branches) = match event {
        "check_run" => {
            (text(p, "/check_run/head_sha"), vec![text(p, "/check_run/check_suite/head_branch").to_string()])
        }
        "check_suite" => (text(p, "/check_suite/head_sha"), vec![text(p, "/check_suite/head_branch").to_string()]),
        _ => (
            text(p, "/sha"),
            p.get("branches")
                .and_then(Value::as_array)
                .map(|bs| bs.iter().map(|b| text(b, "/name").to_string()).collect())
                .unwrap_or_default(),
        ),
    };
    crate::runtime::ci_events::CiNotice {
        sha: Some(sha.to_string()).filter(|s| !s.is_empty()),
        branches: branches.into_iter().filter(|b| !b.is_empty()).collect(),
    }
}

/// What an Azure DevOps `build.complete` resource names: `sourceVersion` and `sourceBranch`
/// (resource version 2.0), else the `LG:<ref>:<sha>` of `sourceGetVersion` (the older shape).
fn ado_build_notice(resource: &Value) -> crate::runtime::ci_events::CiNotice {
    let (mut branch, mut sha) =
        (text(resource, "/sourceBranch").to_string(), text(resource, "/sourceVersion").to_string());
    if let Some(rest) = text(resource, "/sourceGetVersion").strip_prefix("LG:") {
        if let Some((r, s)) = rest.rsplit_once(':') {
            if branch.is_empty() {
                branch = r.to_string();
            }
            if sha.is_empty() {
                sha = s.to_string();
            }
        }
    }
    let branch = branch.strip_prefix("refs/heads/").unwrap_or(&branch).to_string();
    crate::runtime::ci_events::CiNotice {
        sha: Some(sha).filter(|s| !s.is_empty()),
        branches: Some(branch).filter(|b| !b.is_empty()).into_iter().collect(),
    }
}

/// A CI notice → [`crate::runtime::ci_events::CiService::notice`], which decides which waiting gate
/// (if any) it concerns and wakes its driver, and
/// [`crate::runtime::remediation::Remediation::ci_notice`], which decides whether a failed check
/// of an open pull request starts a CI fix round.
async fn ci_notice(app: &AppState, notice: crate::runtime::ci_events::CiNotice) -> Result<Handled, AppError> {
    let remediation = &app.remediation;
    let service = crate::runtime::ci_events::CiService::new(app.execs.clone(), app.specs.pool().clone());
    let woken = service.notice(&notice).await?;
    let rounds = remediation.ci_notice(&notice).await?;
    let rounds: Vec<Value> = rounds.iter().map(|(task_id, o)| round_json(task_id, o)).collect();
    if woken.is_empty() && rounds.is_empty() {
        let what = notice.sha.clone().or_else(|| notice.branches.first().cloned()).unwrap_or_default();
        return Ok(ignored(format!("no ci gate waits for {}", crate::model::text::cut(&what, 80))));
    }
    let mut body = json!({ "ci": "checking", "task_ids": woken });
    if !rounds.is_empty() {
        body["pull_requests"] = json!(rounds);
    }
    Ok((StatusCode::OK, body))
}

/// The answer's part for one remediation outcome.
fn round_json(task_id: &str, outcome: &crate::runtime::ops::RoundOutcome) -> Value {
    use crate::runtime::ops::RoundOutcome;
    match outcome {
        RoundOutcome::Started { round, agent } => {
            json!({ "task_id": task_id, "round": round, "agent": agent, "outcome": "started" })
        }
        RoundOutcome::Parked(why) => json!({ "task_id": task_id, "outcome": "parked", "reason": why }),
        RoundOutcome::Queued(waiting) => json!({ "task_id": task_id, "outcome": "queued", "waiting": waiting }),
        RoundOutcome::Ignored(why) => json!({ "task_id": task_id, "outcome": "ignored", "reason": why }),
    }
}

/// Decodes standard base64 (with or without padding); `None` when malformed.
fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in s.trim().trim_end_matches('=').bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push(u8::try_from((acc >> bits) & 0xff).ok()?);
        }
    }
    Some(out)
}

/// Whether the request's Basic credentials are `user`:`password` (constant-time).
fn basic_auth_ok(headers: &HeaderMap, user: &str, password: &str) -> bool {
    let Some(encoded) = header(headers, "authorization").and_then(|v| v.strip_prefix("Basic ")) else {
        return false;
    };
    let Some(decoded) = base64_decode(encoded).and_then(|b| String::from_utf8(b).ok()) else { return false };
    let Some((u, pw)) = decoded.split_once(':') else { return false };
    // Both compared, always: no early exit on the user name.
    let user_ok = same_secret(u, user);
    let password_ok = same_secret(pw, password);
    user_ok & password_ok
}

/// `POST /webhooks/ado`.
async fn ado(State(app): State<AppState>, headers: HeaderMap, body: Result<Bytes, BytesRejection>) -> Response {
    let body = match body {
        Ok(b) => b,
        Err(e) => return refused_body(&e),
    };
    let (Some(user), Some(password)) = (app.webhooks.ado_user.as_deref(), app.webhooks.ado_password.as_deref()) else {
        return not_configured("BATON_ADO_WEBHOOK_USER and BATON_ADO_WEBHOOK_PASSWORD");
    };
    if !basic_auth_ok(&headers, user, password) {
        return AppError::Unauthorized("Basic credentials are missing or wrong".into()).into_response();
    }
    let payload: Value = match serde_json::from_slice(&body) {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) => return AppError::BadRequest("the payload is not a JSON object".into()).into_response(),
        Err(e) => return AppError::BadRequest(format!("the payload is not JSON: {e}")).into_response(),
    };
    let id = text(&payload, "/id").to_string();
    if id.is_empty() {
        return AppError::BadRequest("the notification id is missing".into()).into_response();
    }
    let kind = DeliveryKind::of_ado(text(&payload, "/eventType"));
    once(&app, "ado", &id, kind, ado_event(&app, &payload)).await
}

/// The organisation in an Azure DevOps address (`dev.azure.com/<org>/…`, `<org>.visualstudio.com`).
fn ado_org(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    if host.eq_ignore_ascii_case("dev.azure.com") {
        return path.split('/').next().filter(|s| !s.is_empty());
    }
    host.strip_suffix(".visualstudio.com")
}

/// The work item's own address: its `html` link, else its API address without the
/// `/updates/<n>` or `/revisions/<n>` of the delivery.
fn ado_url(resource: &Value, updated: bool) -> String {
    let html = text(resource, "/_links/html/href");
    let html = if html.is_empty() { text(resource, "/revision/_links/html/href") } else { html };
    if !html.is_empty() {
        return html.to_string();
    }
    let parent = if updated { text(resource, "/_links/parent/href") } else { "" };
    let url = if parent.is_empty() { text(resource, "/url") } else { parent };
    let cut = ["/updates/", "/revisions/"].iter().filter_map(|m| url.find(m)).min().unwrap_or(url.len());
    url[..cut].to_string()
}

async fn ado_event(app: &AppState, p: &Value) -> Result<Handled, AppError> {
    let event = text(p, "/eventType");
    let resource = p.get("resource").unwrap_or(&Value::Null);
    let updated = match event {
        "workitem.created" => false,
        "workitem.updated" => true,
        "workitem.commented" => return ado_comment(app, text(p, "/id"), resource).await,
        "git.pullrequest.merged" | "git.pullrequest.updated" => return ado_pull_request(app, event, resource).await,
        "build.complete" => return ci_notice(app, ado_build_notice(resource)).await,
        "ms.vss-code.git-pullrequest-comment-event" => return review(app, ado_review(app, resource)).await,
        _ => return Ok(ignored(format!("event {event} is not handled"))),
    };
    let fields = if updated { resource.pointer("/revision/fields") } else { resource.get("fields") };
    let Some(fields) = fields.filter(|f| f.is_object()) else {
        return Err(AppError::BadRequest(format!("{event}: the resource carries no fields")));
    };
    if updated {
        let changed = resource.get("fields").and_then(Value::as_object);
        if !changed.is_some_and(|c| ADO_TEXT_FIELDS.iter().any(|f| c.contains_key(*f))) {
            return Ok(ignored("the update changed no title, description or acceptance criteria"));
        }
    }
    let team_project = fields.get("System.TeamProject").and_then(Value::as_str).unwrap_or_default();
    let url = ado_url(resource, updated);
    if url.is_empty() {
        return Err(AppError::BadRequest(format!("{event}: the work item has no address")));
    }
    let mut names = Vec::new();
    if let Some(org) = ado_org(&url) {
        names.push(format!("ado:{org}/{team_project}"));
    }
    names.push(team_project.to_string());
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let projects = intake::projects_for(&app.execs, &refs).await?;
    let Some(project) = projects.first() else {
        return Ok(ignored(format!("no project for Azure DevOps project {team_project}")));
    };
    let rev = if updated { resource.pointer("/revision/rev") } else { resource.get("rev") }.and_then(Value::as_i64);
    if let Some(rev) = rev {
        if let Some(seen) = intake::older_revision(&app.execs, "ado", &url, rev).await? {
            return Ok(ignored(format!("revision {rev} is not newer than the imported revision {seen}")));
        }
    }
    let id = resource.get("workItemId").or_else(|| resource.get("id")).and_then(Value::as_u64).unwrap_or_default();
    let id = if updated { resource.pointer("/revision/id").and_then(Value::as_u64).unwrap_or(id) } else { id };
    let item_ref = match ado_org(&url) {
        Some(org) if id > 0 && !team_project.is_empty() => format!("ado:{org}/{team_project}#{id}"),
        _ => String::new(),
    };
    let item = ForgeItem::from_ado_fields(fields, url.clone(), item_ref);
    let outcome = app.specs.import(&project.name, item, "ado").await?;
    if let Some(rev) = rev {
        intake::imported_revision(&app.execs, "ado", &url, rev).await?;
    }
    Ok(outcome_body(&outcome))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn githubs_documented_test_vector_verifies() {
        let sig = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
        assert!(github_signature_ok(b"It's a Secret to Everybody", b"Hello, World!", sig));
        assert!(!github_signature_ok(b"It's a Secret to Everybody", b"Hello, World?", sig));
        assert!(!github_signature_ok(b"another secret", b"Hello, World!", sig));
        assert!(!github_signature_ok(b"It's a Secret to Everybody", b"Hello, World!", "sha1=757107"));
        assert!(!github_signature_ok(b"It's a Secret to Everybody", b"Hello, World!", "sha256=zz"));
    }

    #[test]
    fn commands_base64_and_addresses() {
        assert_eq!(command("/baton approve"), Some((ApprovalDecision::Approve, String::new())));
        assert_eq!(command("  /baton reject too risky\nmore"), Some((ApprovalDecision::Reject, "too risky".into())));
        assert_eq!(command("please /baton approve"), None);
        assert_eq!(command("/baton merge"), None);
        assert_eq!(base64_decode("dXNlcjpwYXNz").as_deref(), Some(&b"user:pass"[..]));
        assert_eq!(base64_decode("YQ==").as_deref(), Some(&b"a"[..]));
        assert_eq!(base64_decode("*"), None);
        assert_eq!(ado_org("https://dev.azure.com/fabrikam/DefaultCollection/_apis"), Some("fabrikam"));
        assert_eq!(
            ado_identity_email(Some(&json!("Jamal Hartnett <fabrikamfiber4@hotmail.com>"))),
            "fabrikamfiber4@hotmail.com"
        );
        assert_eq!(ado_identity_email(Some(&json!({"uniqueName": "a@b.c", "displayName": "A"}))), "a@b.c");
        assert_eq!(ado_identity_email(None), "");
        assert_eq!(ado_org("https://fabrikam.visualstudio.com/x"), Some("fabrikam"));
        assert_eq!(ado_org("http://tfs.example/x"), None);
        let r = json!({"url": "https://h/_apis/wit/workItems/5/updates/2", "_links": {"parent": {"href": "https://h/_apis/wit/workItems/5"}}});
        assert_eq!(ado_url(&r, true), "https://h/_apis/wit/workItems/5");
        assert_eq!(
            ado_url(&json!({"url": "https://h/_apis/wit/workItems/5/revisions/3"}), false),
            "https://h/_apis/wit/workItems/5"
        );
        assert!(!format!("{:?}", WebhookConfig { github_secret: Some("s3cr3t".into()), ..WebhookConfig::default() })
            .contains("s3cr3t"));
    }
}
