//! `GET /api/v1/openapi.json`: the OpenAPI 3.1 document of every `/api/v1` route.
//!
//! Owns serving the document, which is written by hand in `src/web/openapi.json` and embedded
//! at build time; `tests/it/metrics.rs` fails when a route of `src/web/api/` is missing from it
//! or it lists one the router lacks. This module never builds or changes the document at run
//! time.

use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use crate::web::AppState;

/// The document, as served.
pub const OPENAPI_JSON: &str = include_str!("../openapi.json");

/// The document's route.
pub(crate) fn router() -> Router<AppState> {
    Router::new().route("/api/v1/openapi.json", get(document))
}

async fn document() -> impl IntoResponse {
    ([(CONTENT_TYPE, "application/json")], OPENAPI_JSON)
}
