//! The board family of pages: the board of live specs, the archive, and the portfolio (metrics
//! and plots). Read-only pages: this file handles no form and decides nothing.

use askama::Template;
use axum::extract::{Query, State};
use axum::http::HeaderMap;

use super::shared::{layout, render, Page, Who};
use crate::runtime::board::{self, Board, BoardQuery};
use crate::web::error::AppError;
use crate::web::layout::{Layout, PageError};
use crate::web::plots;
use crate::web::AppState;

#[derive(Template)]
#[template(path = "board.html")]
struct BoardTemplate {
    layout: Layout,
    board: Board,
}

pub(super) async fn board_page(
    State(app): State<AppState>,
    who: Who,
    headers: HeaderMap,
    query: Result<Query<BoardQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Page, PageError> {
    let Query(q) = query?;
    let q = q.checked().map_err(AppError::bad_query)?;
    let (layout, set) = layout(&app, &who, &headers, true).await?;
    let board = board::load(&app.execs, &app.board_cache, &q).await?;
    render(&BoardTemplate { layout, board }, set)
}

pub(super) async fn archive_page(
    State(app): State<AppState>,
    who: Who,
    headers: HeaderMap,
    query: Result<Query<BoardQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Page, PageError> {
    let Query(q) = query?;
    let mut q = q.checked().map_err(AppError::bad_query)?;
    q.archived = true;
    let (layout, set) = layout(&app, &who, &headers, false).await?;
    let board = board::load(&app.execs, &app.board_cache, &q).await?;
    render(&BoardTemplate { layout, board }, set)
}

/// The metrics page: the portfolio's figures, each as a server-drawn SVG plot and a table.
#[derive(Template)]
#[template(path = "metrics.html")]
struct MetricsTemplate {
    layout: Layout,
    p: crate::runtime::portfolio::Portfolio,
    /// The plots (SVG documents from `web::plots`, whose text plotters escapes).
    flow_svg: String,
    cycle_svg: String,
    forecast_svg: String,
    spend_svg: String,
    gates_svg: String,
}

impl MetricsTemplate {
    /// Whether the project filter names `name`.
    fn selected(&self, name: &str) -> bool {
        self.p.project.as_deref() == Some(name)
    }

    /// The page's filter as a query string (for the JSON link).
    fn query(&self) -> String {
        let mut q = url::form_urlencoded::Serializer::new(String::new());
        if let Some(name) = &self.p.project {
            q.append_pair("project", name);
        }
        q.append_pair("from", &self.p.from).append_pair("to", &self.p.to);
        q.finish()
    }
}

pub(super) async fn portfolio_page(
    State(app): State<AppState>,
    who: Who,
    headers: HeaderMap,
    query: Result<Query<crate::runtime::portfolio::PortfolioQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Page, PageError> {
    let Query(q) = query?;
    let range = q.checked(app.ops.clock().now().date_naive()).map_err(AppError::BadRequest)?;
    let (layout, set) = layout(&app, &who, &headers, false).await?;
    let p = crate::runtime::portfolio::load(&app.execs, &range).await?;
    let t = MetricsTemplate {
        layout,
        flow_svg: plots::cumulative_flow(&p.flow),
        cycle_svg: plots::cycle_time(&p.cycle_time),
        forecast_svg: plots::forecast_vs_actual(&p.forecasts),
        spend_svg: plots::weekly_spend(&p.spend),
        gates_svg: plots::gate_failures(&p.gates),
        p,
    };
    render(&t, set)
}
