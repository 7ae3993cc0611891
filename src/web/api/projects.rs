//! Projects over REST: register, list, show, remove (`/api/v1/projects`).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};

use crate::runtime::specs::NewProject;
use crate::store::ProjectRow;
use crate::web::error::AppError;
use crate::web::extract::ApiJson;
use crate::web::AppState;

/// Routes under `/api/v1/projects`.
pub(crate) fn router() -> Router<AppState> {
    Router::new().route("/", get(list).post(register)).route("/{name}", get(show).delete(remove))
}

async fn list(State(app): State<AppState>) -> Result<Json<Vec<ProjectRow>>, AppError> {
    Ok(Json(app.specs.projects().await?))
}

async fn register(
    State(app): State<AppState>,
    ApiJson(body): ApiJson<NewProject>,
) -> Result<(StatusCode, Json<ProjectRow>), AppError> {
    Ok((StatusCode::CREATED, Json(app.specs.register_project(body).await?)))
}

async fn show(State(app): State<AppState>, Path(name): Path<String>) -> Result<Json<ProjectRow>, AppError> {
    Ok(Json(app.specs.project(&name).await?))
}

async fn remove(State(app): State<AppState>, Path(name): Path<String>) -> Result<StatusCode, AppError> {
    app.specs.remove_project(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}
