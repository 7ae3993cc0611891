//! The REST API under `/api/v1`: one router per resource, merged here.

pub mod executions;
pub mod openapi;
pub mod portfolio;
pub mod projects;
pub mod specs;
pub mod stream;

use axum::Router;

use crate::web::AppState;

/// Every `/api/v1` route.
pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .nest("/api/v1/executions", executions::router())
        .nest("/api/v1/projects", projects::router())
        .nest("/api/v1/specs", specs::router())
        .merge(specs::board_router())
        .merge(stream::router())
        .merge(openapi::router())
        .merge(portfolio::router())
}
