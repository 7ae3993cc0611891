//! The REST API under `/api/v1`: one router per resource, merged here.

pub mod executions;

use axum::Router;

use crate::web::AppState;

/// Every `/api/v1` route.
pub(crate) fn router() -> Router<AppState> {
    Router::new().nest("/api/v1/executions", executions::router())
}
