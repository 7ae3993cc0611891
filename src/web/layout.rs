//! What every page shares: the layout's view model ([`Layout`]) and a page's failure
//! ([`PageError`], the API's status rendered as the HTML error page). The pages and the auth
//! middleware render through it; it imports neither.

use askama::Template;
use axum::response::{Html, IntoResponse, Response};

use crate::web::error::AppError;

/// What every page's layout shows.
#[derive(Debug, Clone)]
pub struct Layout {
    /// The CSRF token forms carry.
    pub csrf: String,
    /// No users configured: the server runs open (said on every page).
    pub open_mode: bool,
    /// The signed-in user and role (`None` in open mode or signed out).
    pub user: Option<(String, &'static str)>,
    /// Executions waiting for a human decision.
    pub decisions_waiting: usize,
    /// Whether the page follows live updates (`data-live`).
    pub live: &'static str,
    /// A fresh value per rendered page: decision forms send it (with the form's name) as
    /// their idempotency key, so a double submit is one decision and a later form another.
    pub submission: String,
}

/// A page's failure: the API's status, rendered as HTML.
#[derive(Debug)]
pub struct PageError {
    pub(crate) error: AppError,
    pub(crate) back: String,
}

impl<E: Into<AppError>> From<E> for PageError {
    fn from(e: E) -> PageError {
        PageError { error: e.into(), back: "/".into() }
    }
}

#[derive(Template)]
#[template(path = "error.html")]
struct ErrorTemplate {
    layout: Layout,
    status: String,
    message: String,
    back: String,
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let (status, _) = self.error.parts();
        let message = match &self.error {
            AppError::Internal(e) => {
                tracing::error!(error = %format!("{e:#}"), "page failed");
                "internal error (see the server log)".to_string()
            }
            other => other.message(),
        };
        let t = ErrorTemplate {
            layout: Layout {
                csrf: String::new(),
                open_mode: false,
                user: None,
                decisions_waiting: 0,
                live: "off",
                submission: String::new(),
            },
            status: status.to_string(),
            message,
            back: self.back,
        };
        let html = t.render().unwrap_or_else(|e| format!("<p>{status}</p><!-- {e} -->"));
        (status, Html(html)).into_response()
    }
}

/// Maps an error to a page error whose page links back to `back`.
pub(crate) fn back_to(back: impl Into<String>) -> impl FnOnce(AppError) -> PageError {
    let back = back.into();
    move |error| PageError { error, back }
}
