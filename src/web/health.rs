//! Liveness and readiness: `GET /healthz`, `GET /readyz`.

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::web::error::AppError;
use crate::web::AppState;

/// The health routes.
pub(crate) fn router() -> Router<AppState> {
    Router::new().route("/healthz", get(healthz)).route("/readyz", get(readyz))
}

async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

/// Ready when the database answers a query (the worker pool does not exist yet).
async fn readyz(State(state): State<AppState>) -> Result<Json<Value>, AppError> {
    match state.execs.store().active_task().await {
        Ok(_) => Ok(Json(json!({ "status": "ready" }))),
        Err(e) => {
            tracing::warn!(error = %e, "readiness check: the database does not answer");
            Err(AppError::Unavailable("the database does not answer".into()))
        }
    }
}
