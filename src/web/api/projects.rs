//! Projects over REST: register, list, show, remove (`/api/v1/projects`).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::runtime::specs::NewProject;
use crate::store::ProjectRow;
use crate::web::api::openapi::Conflict;
use crate::web::error::AppError;
use crate::web::extract::ApiJson;
use crate::web::AppState;

/// Routes under `/api/v1/projects`.
pub(crate) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list, register)).routes(routes!(show, remove))
}

/// Every project, by name.
#[utoipa::path(get, path = "/", tag = "projects", operation_id = "list_projects",
    responses((status = 200, description = "Every project.", body = Vec<ProjectRow>)))]
async fn list(State(app): State<AppState>) -> Result<Json<Vec<ProjectRow>>, AppError> {
    Ok(Json(app.specs.projects().await?))
}

/// Registers a project (admin).
#[utoipa::path(post, path = "/", tag = "projects", operation_id = "register_project", request_body = NewProject,
    responses(
        (status = 201, description = "Registered.", body = ProjectRow),
        (status = 409, response = Conflict),
    ))]
async fn register(
    State(app): State<AppState>,
    ApiJson(body): ApiJson<NewProject>,
) -> Result<(StatusCode, Json<ProjectRow>), AppError> {
    Ok((StatusCode::CREATED, Json(app.specs.register_project(body).await?)))
}

/// One project.
#[utoipa::path(get, path = "/{name}", tag = "projects", operation_id = "show_project",
    params(("name" = String, Path, description = "The project's name.")),
    responses((status = 200, description = "The project.", body = ProjectRow)))]
async fn show(State(app): State<AppState>, Path(name): Path<String>) -> Result<Json<ProjectRow>, AppError> {
    Ok(Json(app.specs.project(&name).await?))
}

/// Removes a project that has no specs (admin).
#[utoipa::path(delete, path = "/{name}", tag = "projects", operation_id = "remove_project",
    params(("name" = String, Path, description = "The project's name.")),
    responses(
        (status = 204, description = "Removed."),
        (status = 409, response = Conflict),
    ))]
async fn remove(State(app): State<AppState>, Path(name): Path<String>) -> Result<StatusCode, AppError> {
    app.specs.remove_project(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}
