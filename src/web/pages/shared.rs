//! What every page shares: the CSRF cookie (its token, the check of a posted form's token),
//! the caller (`Who`), the layout a page is drawn in, rendering a template into a page, and the
//! 303 redirect a form is answered with, and reading a form's USD amount. It serves no route
//! itself and decides nothing.

use askama::Template;
use axum::http::header::{LOCATION, SET_COOKIE};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Response};

use super::CSRF_COOKIE;
use crate::runtime::auth::Role;
use crate::runtime::ops::{Door, Operator};
use crate::web::auth::Identity;
use crate::web::error::AppError;
use crate::web::layout::{Layout, PageError};
use crate::web::AppState;

/// The `baton_csrf` cookie's value, if the request has a well-formed one.
fn cookie_token(headers: &HeaderMap) -> Option<String> {
    crate::web::auth::cookie(headers, CSRF_COOKIE).filter(|v| v.len() == 32 && v.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// 16 random bytes from the OS, hex.
fn new_token() -> String {
    use std::io::Read as _;
    let mut bytes = [0u8; 16];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        let _ = f.read_exact(&mut bytes);
    }
    hex::encode(bytes)
}

/// A rendered page, setting the CSRF cookie when the request had none.
pub(super) struct Page {
    status: StatusCode,
    html: String,
    set_cookie: Option<String>,
}

impl IntoResponse for Page {
    fn into_response(self) -> Response {
        let mut response = (self.status, Html(self.html)).into_response();
        if let Some(token) = self.set_cookie {
            let cookie = format!("{CSRF_COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict");
            if let Ok(v) = HeaderValue::from_str(&cookie) {
                response.headers_mut().append(SET_COOKIE, v);
            }
        }
        response
    }
}

/// The caller as `auth::authorize` resolved it (`None` on a public page without a sign-in).
#[derive(Debug, Clone)]
pub struct Who(pub Option<Identity>);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Who {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Who(parts.extensions.get::<Identity>().cloned()))
    }
}

impl Who {
    /// The actor recorded for this caller's forms: the user, or `board` in open mode.
    pub(super) fn actor(&self) -> String {
        match &self.0 {
            Some(i) if !i.open => i.name.clone(),
            _ => "board".into(),
        }
    }

    /// This caller as the operator of a board form (no identity: the least right).
    pub(super) fn operator(&self) -> Operator {
        let role = self.0.as_ref().map_or(Role::Viewer, |i| i.role);
        Operator::new(self.actor(), role, Door::Form)
    }
}

pub(super) async fn layout(
    app: &AppState,
    who: &Who,
    headers: &HeaderMap,
    live: bool,
) -> Result<(Layout, Option<String>), PageError> {
    let (csrf, set) = match cookie_token(headers) {
        Some(t) => (t, None),
        None => {
            let t = new_token();
            (t.clone(), Some(t))
        }
    };
    let decisions_waiting = app.execs.count_waiting().await?;
    let open_mode = who.0.as_ref().is_none_or(|i| i.open) && !app.auth_enabled().await?;
    let user = who.0.as_ref().filter(|i| !i.open).map(|i| (i.name.clone(), i.role.as_str()));
    let can_decide = who.0.as_ref().is_some_and(|i| i.role >= Role::Reviewer);
    let layout = Layout {
        csrf,
        open_mode,
        user,
        decisions_waiting: if can_decide { decisions_waiting } else { 0 },
        live: if live { "on" } else { "off" },
        submission: format!("form-{}", new_token()),
    };
    Ok((layout, set))
}

pub(super) fn render(t: &impl Template, set_cookie: Option<String>) -> Result<Page, PageError> {
    let html = t.render().map_err(|e| AppError::Internal(anyhow::anyhow!("rendering a page: {e}")))?;
    Ok(Page { status: StatusCode::OK, html, set_cookie })
}

/// Refuses a form whose `csrf` field is not the request's `baton_csrf` cookie (403).
pub(super) fn check_csrf(headers: &HeaderMap, token: &str) -> Result<(), AppError> {
    match cookie_token(headers) {
        Some(cookie) if !token.is_empty() && cookie.as_bytes() == token.as_bytes() => Ok(()),
        _ => Err(AppError::Forbidden(
            "the form's CSRF token does not match this browser's session: reload the page and submit again".into(),
        )),
    }
}

pub(super) fn see_other(location: &str) -> Response {
    let mut r = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = HeaderValue::from_str(location) {
        r.headers_mut().insert(LOCATION, v);
    }
    r
}

/// A form field holding a USD amount (`25`, `2.50`, `$3`), read as a number only: whether it is
/// an amount the operation takes (a ceiling from 0.01 to 1,000,000) the service decides, as it
/// does for the API's JSON number, so a `-5` is the same 422 through both doors (the board's
/// forms had refused it themselves, with a 400).
///
/// Errors: 400 naming `field` when the text is not a number.
/// `NaN`, `inf` and a number too large for an `f64` (`1e400`) are not numbers here, as they are
/// not in the API's JSON.
pub(super) fn form_usd(field: &str, raw: &str) -> Result<f64, AppError> {
    raw.trim().trim_start_matches('$').trim().parse::<f64>().ok().filter(|v| v.is_finite()).ok_or_else(|| {
        AppError::BadRequest(format!("{field}: {raw:?} is not a number: {}", crate::runtime::spend::USD_EXPECTED))
    })
}
