//! Specs over REST (`/api/v1/specs`): create, list, show, edit, enrich, upload a plan, submit,
//! review, fire, cancel; and the board (`/api/v1/board`).
//!
//! Every handler calls [`Specs`](crate::runtime::specs::Specs); an illegal transition is 409
//! with `details.current_status`.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::model::spec::{SpecStage, SpecStatus};
use crate::runtime::board::{self, Board, BoardQuery};
use crate::runtime::forge::{import_from, Cursor, ImportRequest, ImportedItem, Pacing};
use crate::runtime::specs::{SpecEdit, SpecInput};
use crate::store::{SpecEventRow, SpecFilter, SpecRow};
use crate::web::api::openapi::{BadGateway, BadRequest, Conflict, NotFound, Unprocessable};
use crate::web::error::{AppError, Problem};
use crate::web::extract::{Actor, ApiJson, ApiJsonOrEmpty};
use crate::web::AppState;

/// Routes under `/api/v1/specs`.
pub(crate) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list, create))
        .routes(routes!(import))
        .routes(routes!(show, edit))
        .routes(routes!(enrich))
        .routes(routes!(upload_plan))
        .routes(routes!(submit))
        .routes(routes!(review))
        .routes(routes!(fire))
        .routes(routes!(cancel))
}

/// The board route, `/api/v1/board`.
pub(crate) fn board_router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(board_json))
}

/// `POST /api/v1/specs/import` body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ImportBody {
    /// The project the specs join.
    pub project: String,
    /// `github:OWNER/REPO#N`, `ado:ORG/PROJECT#ID`; with `label`: `github:OWNER/REPO`; with
    /// `wiql`: `ado:ORG/PROJECT`.
    #[serde(rename = "ref")]
    pub reference: String,
    /// A bulk GitHub import: every open issue with this label.
    #[serde(default)]
    pub label: Option<String>,
    /// A bulk Azure DevOps import: the work items this WIQL query selects.
    #[serde(default)]
    pub wiql: Option<String>,
    /// A bulk import's resume point: the `details.cursor` of the 503 that stopped it.
    #[serde(default)]
    pub cursor: Option<String>,
}

/// `POST /api/v1/specs/import` answer.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ImportResult {
    /// Items the request went through.
    pub imported: usize,
    /// Of them, specs created.
    pub created: usize,
    /// Each item's outcome, in the forge's order.
    pub items: Vec<ImportedItem>,
}

/// `POST /api/v1/specs/import`: 201 when a spec was created, else 200; `items` in the
/// forge's order. A bulk import stopped by a rate limit keeps what it imported and answers 503
/// `forge_rate_limited` with `Retry-After` and `details` `{cursor, retry_after_secs, imported,
/// created, items}`; the same request with that `cursor` goes on from there.
#[utoipa::path(post, path = "/import", tag = "specs", operation_id = "import_specs", request_body = ImportBody,
    responses(
        (status = 200, description = "Nothing created (every item updated, unchanged or ignored).", body = ImportResult),
        (status = 201, description = "At least one spec created.", body = ImportResult),
        (status = 404, description = "No such project, or the forge has no such item (`not_found`, `forge_not_found`).", body = Problem),
        (status = 422, description = "A bad `ref`, `label`, `wiql` or `cursor`, or the forge's validation (`unprocessable`, `forge_validation`, `invalid_body`).", body = Problem),
        (status = 502, response = BadGateway),
        (status = 503, description = "Rate limited (`forge_rate_limited`, with `Retry-After` and `details.cursor`) or the forge is not configured (`forge_unconfigured`).", body = Problem),
    ))]
async fn import(
    State(app): State<AppState>,
    actor: Actor,
    ApiJson(b): ApiJson<ImportBody>,
) -> Result<(StatusCode, Json<ImportResult>), AppError> {
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
            code: crate::web::error::ErrorCode::ForgeRateLimited,
            message,
            retry_after: Some(retry_after),
            details: Some(Box::new(details)),
        });
    }
    let status = if created > 0 { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, Json(ImportResult { imported: items.len(), created, items })))
}

/// The `{id}` path parameter.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // Read as a string by `spec_id`, which answers 404 for anything else.
struct SpecIdParam {
    /// The spec's id (a positive integer; anything else is 404).
    #[param(minimum = 1)]
    id: i64,
}

/// A spec's id in a path: a positive integer.
pub(crate) fn spec_id(raw: &str) -> Result<i64, AppError> {
    raw.parse::<i64>()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| AppError::NotFound(format!("no spec with id {raw:?} (spec ids are positive integers)")))
}

/// `GET /api/v1/specs` query.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct ListQuery {
    /// Only specs with this stored status (another value is 400, as every query value out of
    /// its schema is).
    status: Option<SpecStatus>,
    /// Only this project (empty: every project).
    project: Option<String>,
    /// Specs per page.
    #[serde(default = "default_limit")]
    #[param(minimum = 1, maximum = 500, default = 50)]
    limit: i64,
    /// Specs to skip.
    #[serde(default)]
    #[param(minimum = 0, default = 0)]
    offset: i64,
}

fn default_limit() -> i64 {
    50
}

/// Specs, filtered and paginated.
#[utoipa::path(get, path = "/", tag = "specs", operation_id = "list_specs", params(ListQuery),
    responses(
        (status = 200, description = "The specs.", body = Vec<SpecRow>),
        (status = 400, response = BadRequest),
        (status = 404, response = NotFound),
    ))]
async fn list(
    State(app): State<AppState>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Vec<SpecRow>>, AppError> {
    let Query(q) = query?;
    if !(1..=500).contains(&q.limit) {
        return Err(AppError::bad_query(format!("limit: must be 1-500, not {}", q.limit)));
    }
    if q.offset < 0 {
        return Err(AppError::bad_query(format!("offset: must be 0 or more, not {}", q.offset)));
    }
    let project = q.project.filter(|p| !p.is_empty());
    let status = q.status.map(|s| s.as_str().to_string());
    let filter = SpecFilter { status, project, limit: q.limit, offset: q.offset };
    Ok(Json(app.specs.list(&filter).await?))
}

/// Writes a spec (`draft`).
#[utoipa::path(post, path = "/", tag = "specs", operation_id = "create_spec", request_body = SpecInput,
    responses(
        (status = 201, description = "Created.", body = SpecView),
        (status = 404, response = NotFound),
    ))]
async fn create(
    State(app): State<AppState>,
    actor: Actor,
    ApiJson(body): ApiJson<SpecInput>,
) -> Result<(StatusCode, Json<SpecView>), AppError> {
    let row = app.specs.create(body, "board", "", &actor.0).await?;
    Ok((StatusCode::CREATED, Json(view(&app, row).await?)))
}

/// A spec with its plan and forecast as JSON, where it stands, and its lifecycle events.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SpecView {
    /// The spec (plan and forecast as JSON values, not text).
    #[serde(flatten)]
    pub spec: SpecRow,
    /// Where it stands (`queued`, `awaiting_human`, …).
    pub stage: SpecStage,
    /// The plan, once enriched.
    #[schema(value_type = Option<crate::model::plan::MachinePlan>)]
    pub plan: Option<serde_json::Value>,
    /// The forecast, once enriched.
    #[schema(value_type = Option<crate::pmo::enrich::Forecast>)]
    pub forecast: Option<serde_json::Value>,
    /// Every transition, oldest first.
    pub events: Vec<SpecEventRow>,
}

async fn view(app: &AppState, mut spec: SpecRow) -> Result<SpecView, AppError> {
    let (exec_status, pr_opened) = match &spec.task_id {
        Some(t) => (app.execs.summary(t).await?.map(|s| s.status), app.execs.pull_request(t).await?.is_some()),
        None => (None, false),
    };
    let stage = board::stage_of_pull(&spec.status, exec_status.as_deref(), pr_opened);
    let parse = |t: Option<String>| t.and_then(|t| serde_json::from_str(&t).ok());
    let plan = parse(spec.plan_json.take());
    let forecast = parse(spec.forecast_json.take());
    let events = app.specs.events(spec.spec_id).await?;
    Ok(SpecView { spec, stage, plan, forecast, events })
}

/// One spec with its plan, forecast and events.
#[utoipa::path(get, path = "/{id}", tag = "specs", operation_id = "show_spec", params(SpecIdParam),
    responses((status = 200, description = "The spec.", body = SpecView)))]
async fn show(State(app): State<AppState>, Path(id): Path<String>) -> Result<Json<SpecView>, AppError> {
    let row = app.specs.get(spec_id(&id)?).await?;
    Ok(Json(view(&app, row).await?))
}

/// Changes a spec's title, body or priority (before it is fired): the spec becomes a draft again and
/// its plan is dropped (enrich it again). An edit that changes nothing is 422.
#[utoipa::path(patch, path = "/{id}", tag = "specs", operation_id = "edit_spec", params(SpecIdParam), request_body = SpecEdit,
    responses(
        (status = 200, description = "Changed.", body = SpecView),
        (status = 409, response = Conflict),
    ))]
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

/// Plans the spec: plan, risk tier, cost forecast (`enriched`).
#[utoipa::path(post, path = "/{id}/enrich", tag = "specs", operation_id = "enrich_spec", params(SpecIdParam),
    responses(
        (status = 200, description = "Enriched.", body = SpecView),
        (status = 409, response = Conflict),
        (status = 422, response = Unprocessable),
    ))]
async fn enrich(State(app): State<AppState>, Path(id): Path<String>, actor: Actor) -> Result<Json<SpecView>, AppError> {
    let row = app.specs.enrich(spec_id(&id)?, &actor.0).await?;
    Ok(Json(view(&app, row).await?))
}

/// Replaces the plan with an uploaded MachinePlan (validated).
#[utoipa::path(put, path = "/{id}/plan", tag = "specs", operation_id = "upload_plan", params(SpecIdParam),
    request_body = crate::model::plan::MachinePlan,
    responses(
        (status = 200, description = "The plan is stored.", body = SpecView),
        (status = 409, response = Conflict),
    ))]
async fn upload_plan(
    State(app): State<AppState>,
    Path(id): Path<String>,
    actor: Actor,
    ApiJson(plan): ApiJson<serde_json::Value>,
) -> Result<Json<SpecView>, AppError> {
    let row = app.specs.upload_plan(spec_id(&id)?, plan, &actor.0).await?;
    Ok(Json(view(&app, row).await?))
}

/// Submits an enriched spec for review (`in_review`).
#[utoipa::path(post, path = "/{id}/submit", tag = "specs", operation_id = "submit_spec", params(SpecIdParam),
    responses(
        (status = 200, description = "Submitted.", body = SpecView),
        (status = 409, response = Conflict),
    ))]
async fn submit(State(app): State<AppState>, Path(id): Path<String>, actor: Actor) -> Result<Json<SpecView>, AppError> {
    let row = app.specs.submit(spec_id(&id)?, &actor.0).await?;
    Ok(Json(view(&app, row).await?))
}

/// `POST …/review` body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReviewDecision {
    /// The spec may be fired.
    Approve,
    /// Back to the author with a reason.
    Bounce,
}

/// Approves a spec in review (with an optional USD ceiling) or bounces it with a reason.
#[utoipa::path(post, path = "/{id}/review", tag = "specs", operation_id = "review_spec", params(SpecIdParam), request_body = ReviewBody,
    responses(
        (status = 200, description = "Decided.", body = SpecView),
        (status = 409, response = Conflict),
    ))]
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

/// Fires an approved spec: starts its execution (`executing`).
#[utoipa::path(post, path = "/{id}/fire", tag = "specs", operation_id = "fire_spec", params(SpecIdParam),
    responses(
        (status = 200, description = "Fired.", body = SpecView),
        (status = 409, response = Conflict),
        (status = 422, response = Unprocessable),
    ))]
async fn fire(State(app): State<AppState>, Path(id): Path<String>, actor: Actor) -> Result<Json<SpecView>, AppError> {
    let row = app.specs.fire(spec_id(&id)?, &actor.0).await?;
    Ok(Json(view(&app, row).await?))
}

/// `POST …/cancel` body (optional: no body at all cancels without a reason).
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = SpecCancelBody)]
pub struct CancelBody {
    /// Why.
    #[serde(default)]
    pub reason: String,
}

/// Cancels a spec (and its open execution).
#[utoipa::path(post, path = "/{id}/cancel", tag = "specs", operation_id = "cancel_spec", params(SpecIdParam), request_body = CancelBody,
    responses(
        (status = 200, description = "Cancelled.", body = SpecView),
        (status = 409, response = Conflict),
    ))]
async fn cancel(
    State(app): State<AppState>,
    Path(id): Path<String>,
    actor: Actor,
    ApiJsonOrEmpty(b): ApiJsonOrEmpty<CancelBody>,
) -> Result<Json<SpecView>, AppError> {
    let row = app.specs.cancel(spec_id(&id)?, &b.reason, &actor.0).await?;
    Ok(Json(view(&app, row).await?))
}

/// The board (or the archive), each column paginated.
#[utoipa::path(get, path = "/api/v1/board", tag = "board", operation_id = "board", params(BoardQuery),
    responses(
        (status = 200, description = "The board.", body = Board),
        (status = 400, response = BadRequest),
        (status = 404, response = NotFound),
    ))]
async fn board_json(
    State(app): State<AppState>,
    query: Result<Query<BoardQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Board>, AppError> {
    let Query(q) = query?;
    let q = q.checked().map_err(AppError::bad_query)?;
    Ok(Json(board::load(&app.execs, &app.board_cache, &q).await?))
}
