//! The approvals queue page and signed approval links: making a link on the execution page, the
//! link's page and its decision form (no sign-in needed: the signed token is the right).
//! Redeeming a link is the operator service's; this file only renders and redirects.

use askama::Template;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::shared::{check_csrf, layout, render, Page, Who};
use crate::engine;
use crate::model::action::{Action, ApprovalAction};
use crate::model::state::ApprovalDecision;
use crate::runtime::auth::LinkClaims;
use crate::runtime::review::{self, PhaseReview};
use crate::web::error::AppError;
use crate::web::extract::PageForm;
use crate::web::layout::{back_to, Layout, PageError};
use crate::web::AppState;

#[derive(Template)]
#[template(path = "approvals.html")]
struct ApprovalsTemplate {
    layout: Layout,
    rows: Vec<WaitingView>,
}

/// One row of the approvals page: what waits and, for an approval, what it approves.
struct WaitingView {
    row: crate::runtime::views::Waiting,
    approval: Option<ApprovalAction>,
    review: Option<PhaseReview>,
}

pub(super) async fn approvals_page(
    State(app): State<AppState>,
    who: Who,
    headers: HeaderMap,
) -> Result<Page, PageError> {
    let (layout, set) = layout(&app, &who, &headers, true).await?;
    let mut rows = Vec::new();
    for row in app.execs.waiting().await? {
        // Only an approval shows what is being approved: its state is read for the review;
        // feedback and budget decisions are listed from their summary rows alone.
        if row.status != "approval_pending" {
            rows.push(WaitingView { row, approval: None, review: None });
            continue;
        }
        let state = crate::web::api::executions::load(&app, &row.task_id).await?;
        let (approval, review) = match engine::next_action(&state) {
            Action::Approval(a) => {
                let review = review::phase_review(app.execs.data(), &state, a.phase_id).await;
                (Some(a), review)
            }
            _ => (None, None),
        };
        rows.push(WaitingView { row, approval, review });
    }
    render(&ApprovalsTemplate { layout, rows }, set)
}

/// How long an approval link made on the page lasts, seconds.
pub const LINK_SECS: i64 = 24 * 3600;

#[derive(Template)]
#[template(path = "link_made.html")]
struct LinkMadeTemplate {
    layout: Layout,
    task_id: String,
    link: String,
    reviewer: String,
}

/// The "make an approval link" form.
#[derive(Debug, Deserialize)]
pub(super) struct LinkForm {
    /// Missing: empty, which `check_csrf` refuses (403) like a wrong token.
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    reviewer: String,
}

pub(super) async fn make_approval_link(
    State(app): State<AppState>,
    who: Who,
    headers: HeaderMap,
    Path(task_id): Path<String>,
    form: Result<PageForm<LinkForm>, AppError>,
) -> Result<Page, PageError> {
    let page = format!("/executions/{task_id}");
    let PageForm(f) = form.map_err(back_to(page.clone()))?;
    check_csrf(&headers, &f.csrf).map_err(back_to(page.clone()))?;
    let reviewer = f.reviewer.trim();
    crate::runtime::auth::check_user_name(reviewer)
        .map_err(|e| back_to(page.clone())(AppError::BadRequest(format!("reviewer: {e}"))))?;
    let token = app
        .ops
        .mint_link(&task_id, reviewer, LINK_SECS, &who.operator())
        .await
        .map_err(|e| back_to(page.clone())(e.into()))?;
    let link = format!("/approve/{token}");
    let (layout, set) = layout(&app, &who, &headers, false).await?;
    let host = headers.get("host").and_then(|h| h.to_str().ok()).unwrap_or("127.0.0.1:8741");
    let t = LinkMadeTemplate { layout, task_id, link: format!("http://{host}{link}"), reviewer: reviewer.to_string() };
    render(&t, set)
}

#[derive(Template)]
#[template(path = "link_done.html")]
struct LinkDoneTemplate {
    layout: Layout,
    decision: String,
    task_id: String,
}

#[derive(Template)]
#[template(path = "link.html")]
struct LinkTemplate {
    layout: Layout,
    claims: LinkClaims,
    approval: ApprovalAction,
    summary: String,
    review: Option<PhaseReview>,
}

pub(super) async fn link_page(
    State(app): State<AppState>,
    who: Who,
    headers: HeaderMap,
    Path(token): Path<String>,
) -> Result<Page, PageError> {
    let (claims, approval, summary) = app.ops.check_link(&token).await?;
    let state = crate::web::api::executions::load(&app, &claims.task_id).await?;
    let review = review::phase_review(app.execs.data(), &state, approval.phase_id).await;
    let (layout, set) = layout(&app, &who, &headers, false).await?;
    render(&LinkTemplate { layout, claims, approval, summary, review }, set)
}

/// The approval link's form.
#[derive(Debug, Deserialize)]
pub(super) struct LinkDecisionForm {
    /// Missing: empty, which `check_csrf` refuses (403) like a wrong token.
    #[serde(default)]
    csrf: String,
    result: String,
    #[serde(default)]
    feedback: String,
    /// The form's idempotency key.
    #[serde(default)]
    submission: String,
}

pub(super) async fn link_decide(
    State(app): State<AppState>,
    headers: HeaderMap,
    Path(token): Path<String>,
    form: Result<PageForm<LinkDecisionForm>, AppError>,
) -> Result<Response, PageError> {
    let PageForm(f) = form?;
    check_csrf(&headers, &f.csrf)?;
    let result = ApprovalDecision::parse(&f.result)
        .ok_or_else(|| AppError::BadRequest(format!("result: {:?} is not an approval option", f.result)))?;
    let key = Some(f.submission.trim().to_string()).filter(|k| !k.is_empty());
    let (claims, _) = app.ops.redeem_link(&token, result, f.feedback, key).await?;
    let (layout, set) = layout(&app, &Who(None), &headers, false).await?;
    let t = LinkDoneTemplate { layout, decision: result.as_str().to_string(), task_id: claims.task_id };
    Ok(render(&t, set)?.into_response())
}
