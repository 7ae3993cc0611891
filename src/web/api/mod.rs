//! The REST API under `/api/v1`: one router per resource, merged here, each route registered
//! with its OpenAPI operation (utoipa-axum), so the served router and the generated document
//! ([`openapi`]) come from the same list.

pub mod executions;
pub mod openapi;
pub mod portfolio;
pub mod projects;
mod query;
pub mod specs;
pub mod stream;

use axum::Router;
use utoipa_axum::router::OpenApiRouter;

use crate::web::AppState;

/// Every `/api/v1` route with its OpenAPI operation.
pub(crate) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .nest("/api/v1/executions", executions::router())
        .nest("/api/v1/projects", projects::router())
        .nest("/api/v1/specs", specs::router())
        .merge(specs::board_router())
        .merge(stream::router())
        .merge(portfolio::router())
        .merge(openapi::routes())
}

/// Every `/api/v1` route, each refusing a query parameter its operation does not declare
/// (`query.rs`).
pub(crate) fn router() -> Router<AppState> {
    routes().split_for_parts().0.route_layer(axum::middleware::from_fn(query::known_query))
}
