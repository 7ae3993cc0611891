//! Specs over REST (`/api/v1/specs`): create, list, show, edit, enrich, upload a plan, submit,
//! review, fire, cancel; and the board (`/api/v1/board`).
//!
//! Every handler calls [`Specs`](crate::runtime::specs::Specs); an illegal transition is 409
//! with `details.current_status`.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use crate::model::spec::SpecStage;
use crate::runtime::board::{self, Board, BoardQuery};
use crate::runtime::forge::{import_from, Cursor, ImportRequest, ImportedItem, Pacing};
use crate::runtime::specs::{SpecEdit, SpecInput};
use crate::store::{SpecEventRow, SpecFilter, SpecRow};
use crate::web::error::AppError;
use crate::web::extract::{Actor, ApiJson};
use crate::web::AppState;

/// Routes under `/api/v1/specs`.
pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/", get(list).post(create))
        .route("/import", post(import))
        .route("/{id}", get(show).patch(edit))
        .route("/{id}/enrich", post(enrich))
        .route("/{id}/plan", axum::routing::put(upload_plan))
        .route("/{id}/submit", post(submit))
        .route("/{id}/review", post(review))
        .route("/{id}/fire", post(fire))
        .route("/{id}/cancel", post(cancel))
}

/// The board route, `/api/v1/board`.
pub(crate) fn board_router() -> Router<AppState> {
    Router::new().route("/api/v1/board", get(board_json))
}

/// `POST /api/v1/specs/import` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ImportBody {
    /// The project the specs join.
    project: String,
    /// `github:OWNER/REPO#N`, `ado:ORG/PROJECT#ID`; with `label`: `github:OWNER/REPO`; with
    /// `wiql`: `ado:ORG/PROJECT`.
    #[serde(rename = "ref")]
    reference: String,
    #[serde(default)]
    label: Option<String>,
    #[serde(default)]
    wiql: Option<String>,
    /// A bulk import's resume point: the `details.cursor` of the 503 that stopped it.
    #[serde(default)]
    cursor: Option<String>,
}

/// `POST /api/v1/specs/import`: 201 when a spec was created, else 200; `items` in the
/// forge's order. A bulk import stopped by a rate limit keeps what it imported and answers 503
/// `forge_rate_limited` with `Retry-After` and `details` `{cursor, retry_after_secs, imported,
/// created, items}`; the same request with that `cursor` goes on from there.
async fn import(
    State(app): State<AppState>,
    actor: Actor,
    ApiJson(b): ApiJson<ImportBody>,
) -> Result<(StatusCode, Json<serde_json::Value>), AppError> {
    let request = ImportRequest::parse(&b.reference, b.label.as_deref(), b.wiql.as_deref())?;
    let cursor = b.cursor.as_deref().map(Cursor::parse).transpose()?;
    let imported = import_from(&app.specs, &app.forges, &b.project, &request, cursor, Pacing::Stop, &actor.0).await?;
    let items: Vec<ImportedItem> = imported.outcomes.iter().map(ImportedItem::of).collect();
    let created = items.iter().filter(|i| i.outcome == "created").count();
    if let Some(stopped) = imported.stopped {
        let retry_after = stopped.retry_after_secs();
        let message = format!(
            "{}; {} item(s) imported before it; send the same request with \"cursor\": \"{}\" to go on",
            stopped.error,
            items.len(),
            stopped.cursor
        );
        let details = serde_json::json!({
            "cursor": stopped.cursor.to_string(),
            "retry_after_secs": retry_after,
            "imported": items.len(),
            "created": created,
            "items": items,
        });
        return Err(AppError::Upstream {
            status: StatusCode::SERVICE_UNAVAILABLE,
            code: "forge_rate_limited",
            message,
            retry_after: Some(retry_after),
            details: Some(Box::new(details)),
        });
    }
    let status = if created > 0 { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, Json(serde_json::json!({ "imported": items.len(), "created": created, "items": items }))))
}

/// A spec's id in a path: a positive integer.
pub(crate) fn spec_id(raw: &str) -> Result<i64, AppError> {
    raw.parse::<i64>()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| AppError::NotFound(format!("no spec with id {raw:?} (spec ids are positive integers)")))
}

/// `GET /api/v1/specs` query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    status: Option<String>,
    project: Option<String>,
    #[serde(default = "default_limit")]
    limit: i64,
    #[serde(default)]
    offset: i64,
}

fn default_limit() -> i64 {
    50
}

async fn list(
    State(app): State<AppState>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Vec<SpecRow>>, AppError> {
    let Query(q) = query?;
    if !(1..=500).contains(&q.limit) || q.offset < 0 {
        return Err(AppError::BadRequest("limit must be 1-500 and offset 0 or more".into()));
    }
    let project = q.project.filter(|p| !p.is_empty());
    let filter = SpecFilter { status: q.status, project, limit: q.limit, offset: q.offset };
    Ok(Json(app.specs.list(&filter).await?))
}

async fn create(
    State(app): State<AppState>,
    actor: Actor,
    ApiJson(body): ApiJson<SpecInput>,
) -> Result<(StatusCode, Json<SpecView>), AppError> {
    let row = app.specs.create(body, "board", "", &actor.0).await?;
    Ok((StatusCode::CREATED, Json(view(&app, row).await?)))
}

/// A spec with its plan and forecast as JSON, where it stands, and its lifecycle events.
#[derive(Debug, Serialize)]
pub struct SpecView {
    /// The spec (plan and forecast as JSON values, not text).
    #[serde(flatten)]
    pub spec: SpecRow,
    /// Where it stands (`queued`, `awaiting_human`, …).
    pub stage: SpecStage,
    /// The plan, once enriched.
    pub plan: Option<serde_json::Value>,
    /// The forecast, once enriched.
    pub forecast: Option<serde_json::Value>,
    /// Every transition, oldest first.
    pub events: Vec<SpecEventRow>,
}

async fn view(app: &AppState, mut spec: SpecRow) -> Result<SpecView, AppError> {
    let exec_status = match &spec.task_id {
        Some(t) => app.execs.summary(t).await?.map(|s| s.status),
        None => None,
    };
    let stage = board::stage_of(&spec.status, exec_status.as_deref());
    let parse = |t: Option<String>| t.and_then(|t| serde_json::from_str(&t).ok());
    let plan = parse(spec.plan_json.take());
    let forecast = parse(spec.forecast_json.take());
    let events = app.specs.events(spec.spec_id).await?;
    Ok(SpecView { spec, stage, plan, forecast, events })
}

async fn show(State(app): State<AppState>, Path(id): Path<String>) -> Result<Json<SpecView>, AppError> {
    let row = app.specs.get(spec_id(&id)?).await?;
    Ok(Json(view(&app, row).await?))
}

async fn edit(
    State(app): State<AppState>,
    Path(id): Path<String>,
    actor: Actor,
    ApiJson(body): ApiJson<SpecEdit>,
) -> Result<Json<SpecView>, AppError> {
    let id = spec_id(&id)?;
    let row = app.specs.edit(id, body, &actor.0).await?;
    Ok(Json(view(&app, row).await?))
}

async fn enrich(State(app): State<AppState>, Path(id): Path<String>, actor: Actor) -> Result<Json<SpecView>, AppError> {
    let row = app.specs.enrich(spec_id(&id)?, &actor.0).await?;
    Ok(Json(view(&app, row).await?))
}

async fn upload_plan(
    State(app): State<AppState>,
    Path(id): Path<String>,
    actor: Actor,
    ApiJson(plan): ApiJson<serde_json::Value>,
) -> Result<Json<SpecView>, AppError> {
    let row = app.specs.upload_plan(spec_id(&id)?, plan, &actor.0).await?;
    Ok(Json(view(&app, row).await?))
}

async fn submit(State(app): State<AppState>, Path(id): Path<String>, actor: Actor) -> Result<Json<SpecView>, AppError> {
    let row = app.specs.submit(spec_id(&id)?, &actor.0).await?;
    Ok(Json(view(&app, row).await?))
}

/// `POST …/review` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReviewBody {
    /// `approve` or `bounce`.
    pub decision: ReviewDecision,
    /// Why (required for a bounce).
    #[serde(default)]
    pub reason: String,
    /// With `approve`: the USD ceiling of its execution (default: the project's).
    #[serde(default)]
    pub budget_usd: Option<f64>,
}

/// A review's decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReviewDecision {
    /// The spec may be fired.
    Approve,
    /// Back to the author with a reason.
    Bounce,
}

async fn review(
    State(app): State<AppState>,
    Path(id): Path<String>,
    actor: Actor,
    ApiJson(b): ApiJson<ReviewBody>,
) -> Result<Json<SpecView>, AppError> {
    let row = app
        .specs
        .review(spec_id(&id)?, b.decision == ReviewDecision::Approve, &b.reason, &actor.0, b.budget_usd)
        .await?;
    Ok(Json(view(&app, row).await?))
}

async fn fire(State(app): State<AppState>, Path(id): Path<String>, actor: Actor) -> Result<Json<SpecView>, AppError> {
    let row = app.specs.fire(spec_id(&id)?, &actor.0).await?;
    Ok(Json(view(&app, row).await?))
}

/// `POST …/cancel` body.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelBody {
    /// Why.
    #[serde(default)]
    pub reason: String,
}

async fn cancel(
    State(app): State<AppState>,
    Path(id): Path<String>,
    actor: Actor,
    ApiJson(b): ApiJson<CancelBody>,
) -> Result<Json<SpecView>, AppError> {
    let row = app.specs.cancel(spec_id(&id)?, &b.reason, &actor.0).await?;
    Ok(Json(view(&app, row).await?))
}

async fn board_json(
    State(app): State<AppState>,
    query: Result<Query<BoardQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Board>, AppError> {
    let Query(q) = query?;
    let q = q.checked().map_err(AppError::BadRequest)?;
    Ok(Json(board::load(&app.execs, &app.board_cache, &q).await?))
}
