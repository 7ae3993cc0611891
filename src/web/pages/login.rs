//! Signing in and out in a browser: the login page, the login form (a token exchanged for a
//! session cookie) and the logout form. Checking a token is `auth`'s; this file never decides
//! a role.

use askama::Template;
use axum::extract::{Query, State};
use axum::http::header::SET_COOKIE;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::Response;
use serde::Deserialize;

use super::shared::{check_csrf, layout, render, see_other, Page, Who};
use crate::web::auth::{SESSION_COOKIE, SESSION_SECS};
use crate::web::error::AppError;
use crate::web::extract::PageForm;
use crate::web::layout::{back_to, Layout, PageError};
use crate::web::AppState;

#[derive(Template)]
#[template(path = "login.html")]
struct LoginTemplate {
    layout: Layout,
    next: String,
}

/// `?next=` of the login page: a local path only (never another site).
#[derive(Debug, Deserialize)]
pub(super) struct NextQuery {
    next: Option<String>,
}

/// A redirect target after sign-in: a path on this site only (`/`, then no `/` or `\`; only
/// visible ASCII, so no tab or newline a browser would strip into `//other.site`).
fn local_path(next: Option<String>) -> String {
    next.filter(|n| {
        n.starts_with('/') && !n[1..].starts_with(['/', '\\']) && n.bytes().all(|b| b.is_ascii_graphic() && b != b'\\')
    })
    .unwrap_or_else(|| "/".into())
}

pub(super) async fn login_page(
    State(app): State<AppState>,
    who: Who,
    headers: HeaderMap,
    Query(q): Query<NextQuery>,
) -> Result<Page, PageError> {
    let (layout, set) = layout(&app, &who, &headers, false).await?;
    render(&LoginTemplate { layout, next: local_path(q.next) }, set)
}

/// The login form.
#[derive(Debug, Deserialize)]
pub(super) struct LoginForm {
    /// Missing: empty, which `check_csrf` refuses (403) like a wrong token.
    #[serde(default)]
    csrf: String,
    token: String,
    #[serde(default)]
    next: Option<String>,
}

pub(super) async fn login(
    State(app): State<AppState>,
    headers: HeaderMap,
    form: Result<PageForm<LoginForm>, AppError>,
) -> Result<Response, PageError> {
    let back = || back_to("/login");
    let PageForm(f) = form.map_err(back())?;
    check_csrf(&headers, &f.csrf).map_err(back())?;
    let (user, token_id) = crate::runtime::users::sign_in(&app.execs, f.token.trim())
        .await
        .map_err(|e| back()(e.into()))?
        .ok_or_else(|| back()(AppError::Unauthorized("unknown or revoked token".into())))?;
    let value = app.key.session(&user.name, token_id, crate::clock::now().timestamp() + SESSION_SECS);
    let mut response = see_other(&local_path(f.next));
    let cookie = format!("{SESSION_COOKIE}={value}; Path=/; HttpOnly; SameSite=Lax; Max-Age={SESSION_SECS}");
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        response.headers_mut().append(SET_COOKIE, v);
    }
    Ok(response)
}

/// The logout form (only the CSRF token).
#[derive(Debug, Deserialize)]
pub(super) struct CsrfOnly {
    /// Missing: empty, which `check_csrf` refuses (403) like a wrong token.
    #[serde(default)]
    csrf: String,
}

pub(super) async fn logout(
    headers: HeaderMap,
    form: Result<PageForm<CsrfOnly>, AppError>,
) -> Result<Response, PageError> {
    let PageForm(f) = form?;
    check_csrf(&headers, &f.csrf)?;
    let mut response = see_other("/login");
    let cookie = format!("{SESSION_COOKIE}=; Path=/; HttpOnly; SameSite=Lax; Max-Age=0");
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        response.headers_mut().append(SET_COOKIE, v);
    }
    Ok(response)
}
