//! The portfolio figures over REST: `GET /api/v1/metrics?project=&from=&to=` answers the
//! metrics page's figures as JSON (`runtime::portfolio::Portfolio`).

use axum::extract::{Query, State};
use axum::Json;
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::runtime::portfolio::{self, Portfolio, PortfolioQuery};
use crate::web::api::openapi::{BadRequest, NotFound};
use crate::web::error::AppError;
use crate::web::AppState;

/// The `/api/v1/metrics` route with its OpenAPI operation.
pub(crate) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(figures))
}

/// Errors: a bad filter (400, naming the parameter: an unknown one, a date that is not
/// `YYYY-MM-DD`, `from` after `to`, more than 366 days); an unknown project (404).
#[utoipa::path(get, path = "/api/v1/metrics", tag = "metrics", operation_id = "portfolio", params(PortfolioQuery),
    responses(
        (status = 200, description = "The portfolio figures of the metrics page.", body = Portfolio),
        (status = 400, response = BadRequest),
        (status = 404, response = NotFound),
    ))]
async fn figures(
    State(app): State<AppState>,
    query: Result<Query<PortfolioQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Portfolio>, AppError> {
    let Query(q) = query?;
    let range = q.checked(app.ops.clock().now().date_naive()).map_err(AppError::bad_query)?;
    Ok(Json(portfolio::load(&app.execs, &range).await?))
}
