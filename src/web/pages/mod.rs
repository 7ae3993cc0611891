//! Server-rendered pages (askama templates in `templates/`): the board, the archive, specs,
//! executions, the approvals queue and the changelist; and the plain HTML forms they post.
//!
//! Pages work without JavaScript: every action is a form that posts and is answered with a
//! 303 redirect to the page it came from (or an error page with the API's status). Every form
//! carries a CSRF token that must equal the `baton_csrf` cookie (double-submit: a cross-site
//! page can post a form but cannot read or set the cookie, which is also `SameSite=Strict`).
//! Every value is escaped by askama. Handlers call the same services as the REST API.
//!
//! One page family a file: `board` (board, archive, portfolio), `specs` (new spec, spec page,
//! spec actions, the import form), `execution` (the execution page and its forms),
//! `changelist` (a finished execution's changelist and its merge form), `approvals` (the
//! approvals queue and signed approval links), `login` (sign-in and sign-out); `shared` holds
//! the CSRF cookie, the layout and the rendering every page uses. This file mounts the routes
//! and serves the static assets.

mod approvals;
mod board;
mod changelist;
mod execution;
mod login;
mod shared;
mod specs;

use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

use crate::web::AppState;
use approvals::{approvals_page, link_decide, link_page, make_approval_link};
use board::{archive_page, board_page, portfolio_page};
use changelist::{changelist_page, merge_form};
use execution::{approve_form, execution_action, execution_page, feedback_form, interact_form};
use login::{login, login_page, logout};
use specs::{create_spec, import_form, new_spec_page, spec_action, spec_page};

pub use approvals::LINK_SECS;
pub use shared::Who;

/// The CSRF cookie's name.
pub const CSRF_COOKIE: &str = "baton_csrf";

const CSS: &str = include_str!("../../../static/baton.css");
const LIVE_JS: &str = include_str!("../../../static/live.js");

/// The page routes.
pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/", get(board_page))
        .route("/archive", get(archive_page))
        .route("/approvals", get(approvals_page))
        .route("/portfolio", get(portfolio_page))
        .route("/specs/new", get(new_spec_page))
        .route("/specs", post(create_spec))
        .route("/specs/{id}", get(spec_page))
        .route("/specs/{id}/{action}", post(spec_action))
        .route("/executions/{task_id}", get(execution_page))
        .route("/executions/{task_id}/changelist", get(changelist_page))
        .route("/executions/{task_id}/approve", post(approve_form))
        .route("/executions/{task_id}/feedback", post(feedback_form))
        .route("/executions/{task_id}/interact", post(interact_form))
        .route("/executions/{task_id}/approval-link", post(make_approval_link))
        .route("/executions/{task_id}/merge", post(merge_form))
        .route("/specs/import", post(import_form))
        .route("/executions/{task_id}/{action}", post(execution_action))
        .route("/login", get(login_page).post(login))
        .route("/logout", post(logout))
        .route("/approve/{token}", get(link_page).post(link_decide))
        .route("/static/baton.css", get(|| async { asset("text/css; charset=utf-8", CSS) }))
        .route("/static/live.js", get(|| async { asset("text/javascript; charset=utf-8", LIVE_JS) }))
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (CACHE_CONTROL, HeaderValue::from_static("max-age=300")),
        ],
        body,
    )
        .into_response()
}
