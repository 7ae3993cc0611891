//! `AppError`: every failure of a request, rendered as JSON `{error, message, details}`.
//!
//! Status mapping (the one place it is decided):
//! - a body that is not JSON or not the expected shape: 400 (syntax) or 422 (shape), with
//!   axum's text naming the field, and a 422 also with `details.field` (its JSON path) when
//!   serde gives one; a missing JSON content type: 415;
//! - an unknown execution: 404;
//! - an event naming something the plan lacks or carrying an out-of-range value (unknown step,
//!   phase or question, an option index out of range, an invalid event or amendment): 422;
//! - an event the execution's state refuses (wrong status, not the current phase, a pending
//!   approval for another phase, an idempotency key reused for another event, a final or failed
//!   execution) and a lease another process holds: 409;
//! - a decision already taken by someone else or under another key: 409 with
//!   `details.reason = "already_decided"` and `details.standing` (who, when, what);
//! - a dependency that does not answer: 503 (`/readyz` builds its own 503 in this shape, with
//!   its checks as `details`);
//! - anything else: 500 with a generic message; the real one is logged, never sent.

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use crate::engine::EngineError;
use crate::forge::ForgeError;
use crate::runtime::forge::ImportError;
use crate::runtime::merge::MergeError;
use crate::runtime::ops::{OpsError, Standing};
use crate::runtime::specs::SpecError;
use crate::runtime::BadInput;
use crate::store::StoreError;

/// The `error` code of a problem body: every code the API and the webhooks answer (the
/// OpenAPI document's `Error.error` enum is generated from this type).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// 400: a malformed request (query string, header, path).
    BadRequest,
    /// 400, 413, 415 or 422: a body the extractor refused (not JSON, too large, not sent as
    /// JSON, the wrong shape).
    InvalidBody,
    /// 422: well-formed, but naming something that does not exist or a value out of range.
    Unprocessable,
    /// 409: the current state refuses the request.
    Conflict,
    /// 401: no valid credential.
    Unauthorized,
    /// 403: not allowed.
    Forbidden,
    /// 404: no such resource or route.
    NotFound,
    /// 410: an expired approval link.
    Gone,
    /// 405: the route does not serve this method.
    MethodNotAllowed,
    /// 503 (or 408): a dependency does not answer, or the request timed out.
    Unavailable,
    /// 500: the server's own failure.
    Internal,
    /// 404: the forge has no such item.
    ForgeNotFound,
    /// 422: the forge refused the request's content.
    ForgeValidation,
    /// 502: the forge refused Baton's credentials.
    ForgeBadCredentials,
    /// 503: the forge's rate limit (with `Retry-After`).
    ForgeRateLimited,
    /// 503: the forge is not configured (no token or URL).
    ForgeUnconfigured,
    /// 502: the forge failed or answered something unreadable.
    ForgeUnavailable,
    /// 502: the forge refused the operation.
    ForgeRefused,
    /// 502: pushing the feature branch failed.
    PushFailed,
}

impl ErrorCode {
    /// The code as sent (`not_found`, `forge_rate_limited`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::InvalidBody => "invalid_body",
            ErrorCode::Unprocessable => "unprocessable",
            ErrorCode::Conflict => "conflict",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::NotFound => "not_found",
            ErrorCode::Gone => "gone",
            ErrorCode::MethodNotAllowed => "method_not_allowed",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Internal => "internal",
            ErrorCode::ForgeNotFound => "forge_not_found",
            ErrorCode::ForgeValidation => "forge_validation",
            ErrorCode::ForgeBadCredentials => "forge_bad_credentials",
            ErrorCode::ForgeRateLimited => "forge_rate_limited",
            ErrorCode::ForgeUnconfigured => "forge_unconfigured",
            ErrorCode::ForgeUnavailable => "forge_unavailable",
            ErrorCode::ForgeRefused => "forge_refused",
            ErrorCode::PushFailed => "push_failed",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Every error answer of the API: `{error, message, details}` (the shape of [`AppError`]'s
/// and `problem_bodies`' responses; the OpenAPI document's `Error` schema).
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
#[schema(as = Error)]
pub struct Problem {
    /// Stable error code.
    pub error: ErrorCode,
    /// What went wrong, for a person (names the field for a bad body).
    pub message: String,
    /// Machine-readable detail, null when none: `field` (the JSON path of a bad field),
    /// `problems` (a plan's), `current_status` (a spec's status that refuses), `reason` (409
    /// from the engine: `wrong_status`, `final`, `key_conflict`, …; `already_decided` with
    /// `standing`: who decided, when, what); a bulk import stopped by a rate limit (503
    /// `forge_rate_limited`): `cursor`, `retry_after_secs`, `imported`, `created`, `items`.
    #[schema(value_type = Option<Object>, required = true)]
    pub details: Option<Value>,
}

/// A request's failure; see the module doc for the status of each variant.
#[derive(Debug)]
pub enum AppError {
    /// 400: a malformed request (bad header, bad query string, a body that is not JSON).
    BadRequest(String),
    /// 400: a query parameter the operation does not declare, or a declared query parameter
    /// or header whose value is out of its schema (`details.field` names it; see
    /// `AppError::bad_query`).
    BadQuery {
        /// What is wrong, and what the operation takes.
        message: String,
        /// The parameter.
        field: String,
    },
    /// A body axum's extractor refused, with the extractor's status (400, 413, 415 or 422).
    Body {
        /// Status the extractor chose.
        status: StatusCode,
        /// Its text (names the field and position).
        message: String,
        /// The JSON path of the offending field (`phase_id`, `max_agents`), when serde gives
        /// one; answered as `details.field`.
        field: Option<String>,
        /// Where text that is not JSON stops parsing: (line, column), both from 1; answered as
        /// `details.line` and `details.column` (a syntax error had `details: null`).
        at: Option<(usize, usize)>,
    },
    /// 422: well-formed, but it names something the plan lacks or a value out of range.
    Unprocessable(String),
    /// 422 with details (the field, the plan's problems).
    Invalid {
        /// What is wrong.
        message: String,
        /// `{field}` or `{field, problems}`.
        details: Value,
    },
    /// 409: a spec's (or project's) status refuses the request; `details.current_status`.
    StatusConflict {
        /// What was refused.
        message: String,
        /// The status now.
        current: String,
    },
    /// 401: no valid credential (sign in or send an API token).
    Unauthorized(String),
    /// 403: the request is not allowed (a role too low, a form whose CSRF token does not
    /// match, a tampered approval link, deciding one's own approval).
    Forbidden(String),
    /// 410: an expired approval link.
    Gone(String),
    /// 405: the route exists, not with this method.
    MethodNotAllowed(String),
    /// 404: no such execution (or route).
    NotFound(String),
    /// 409: the execution's current state refuses the request.
    Conflict {
        /// What was refused and why.
        message: String,
        /// The engine's refusal kind, when it is one (`wrong_status`, `key_conflict`, …).
        reason: Option<&'static str>,
    },
    /// 409: a decision someone else (or another submission) already took;
    /// `details.reason` is `already_decided`, `details.standing` the decision that stands.
    Decided {
        /// What was refused, naming the standing decision.
        message: String,
        /// Who decided, when, what.
        standing: Standing,
    },
    /// 503: a dependency (the database) does not answer.
    Unavailable(String),
    /// A forge call failed: 404 (no such item), 422 (a bad reference, the forge's validation),
    /// 502 (bad credentials, the forge failing), 503 (rate limited, with `Retry-After`; a
    /// setting missing); `error` names the forge call's outcome, and a bulk import stopped by
    /// a rate limit says in `details` where to resume.
    Upstream {
        /// The status answered.
        status: StatusCode,
        /// The `error` code (`forge_not_found`, `forge_rate_limited`, …).
        code: ErrorCode,
        /// What failed and what to do.
        message: String,
        /// Seconds until a retry may succeed.
        retry_after: Option<u64>,
        /// `details` of the answer (a stopped bulk import: its `cursor` and what it imported);
        /// `None`: `null`.
        details: Option<Box<Value>>,
    },
    /// 500: a failure that is not the client's; the cause is logged, not returned.
    Internal(anyhow::Error),
}

impl AppError {
    /// 422 naming the offending `field` (`details.field`); the message is `field: message`.
    pub fn invalid_field(field: &str, message: &str) -> AppError {
        AppError::Invalid { message: format!("{field}: {message}"), details: serde_json::json!({ "field": field }) }
    }

    /// The message shown to the client (a generic one for internal errors).
    pub fn message(&self) -> String {
        match self {
            AppError::BadRequest(m)
            | AppError::Body { message: m, .. }
            | AppError::BadQuery { message: m, .. }
            | AppError::Unprocessable(m)
            | AppError::NotFound(m)
            | AppError::Forbidden(m)
            | AppError::Unauthorized(m)
            | AppError::Gone(m)
            | AppError::MethodNotAllowed(m)
            | AppError::Unavailable(m)
            | AppError::Invalid { message: m, .. }
            | AppError::StatusConflict { message: m, .. }
            | AppError::Conflict { message: m, .. }
            | AppError::Decided { message: m, .. }
            | AppError::Upstream { message: m, .. } => m.clone(),
            AppError::Internal(_) => "internal error (see the server log)".into(),
        }
    }

    /// The status code and the `error` code of the JSON body.
    pub fn parts(&self) -> (StatusCode, ErrorCode) {
        match self {
            AppError::BadRequest(_) => (StatusCode::BAD_REQUEST, ErrorCode::BadRequest),
            AppError::Body { status, .. } => (*status, ErrorCode::InvalidBody),
            AppError::BadQuery { .. } => (StatusCode::BAD_REQUEST, ErrorCode::BadRequest),
            AppError::Unprocessable(_) | AppError::Invalid { .. } => {
                (StatusCode::UNPROCESSABLE_ENTITY, ErrorCode::Unprocessable)
            }
            AppError::StatusConflict { .. } => (StatusCode::CONFLICT, ErrorCode::Conflict),
            AppError::NotFound(_) => (StatusCode::NOT_FOUND, ErrorCode::NotFound),
            AppError::Forbidden(_) => (StatusCode::FORBIDDEN, ErrorCode::Forbidden),
            AppError::Unauthorized(_) => (StatusCode::UNAUTHORIZED, ErrorCode::Unauthorized),
            AppError::Gone(_) => (StatusCode::GONE, ErrorCode::Gone),
            AppError::MethodNotAllowed(_) => (StatusCode::METHOD_NOT_ALLOWED, ErrorCode::MethodNotAllowed),
            AppError::Conflict { .. } | AppError::Decided { .. } => (StatusCode::CONFLICT, ErrorCode::Conflict),
            AppError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, ErrorCode::Unavailable),
            AppError::Upstream { status, code, .. } => (*status, *code),
            AppError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, ErrorCode::Internal),
        }
    }
}

/// The 422 / 409 split of the engine's refusals, with a stable reason code.
fn classify_engine(e: &EngineError) -> AppError {
    let message = e.to_string();
    let conflict = |reason| AppError::Conflict { message: message.clone(), reason: Some(reason) };
    match e {
        EngineError::UnknownStep { .. }
        | EngineError::UnknownPhase { .. }
        | EngineError::UnknownQuestion { .. }
        | EngineError::OptionOutOfRange { .. }
        | EngineError::InvalidEvent { .. } => match e.field() {
            Some(field) => AppError::Invalid { message, details: json!({ "field": field }) },
            None => AppError::Unprocessable(message),
        },
        EngineError::InvalidAmendment(_) | EngineError::InvalidPlan(_) => AppError::Unprocessable(message),
        EngineError::Final { .. } => conflict("final"),
        EngineError::ExecutionFailed { .. } | EngineError::RejectionStands { .. } => conflict("execution_failed"),
        EngineError::NotCurrentPhase { .. } => conflict("not_current_phase"),
        EngineError::StepState { .. } => conflict("step_state"),
        EngineError::WrongStatus { .. } => conflict("wrong_status"),
        EngineError::ApprovalPhaseMismatch { .. } => conflict("approval_phase_mismatch"),
        EngineError::QuestionAnswered { .. } => conflict("question_answered"),
        EngineError::NotFinished { .. } => conflict("not_finished"),
        EngineError::KeyConflict { .. } => conflict("key_conflict"),
        EngineError::OverBudget { .. } => conflict("over_budget"),
    }
}

impl From<anyhow::Error> for AppError {
    /// Classifies by the first recognised cause in the chain: engine refusals, store
    /// conflicts, then [`BadInput`] (a lease held by another process, …) as 409.
    fn from(e: anyhow::Error) -> Self {
        for cause in e.chain() {
            if let Some(engine) = cause.downcast_ref::<EngineError>() {
                return classify_engine(engine);
            }
            if let Some(store) = cause.downcast_ref::<StoreError>() {
                match store {
                    StoreError::NotFound { .. } => return AppError::NotFound(store.to_string()),
                    StoreError::AlreadyExists { .. } | StoreError::LeaseHeld { .. } => {
                        return AppError::Conflict { message: store.to_string(), reason: None }
                    }
                    _ => {}
                }
            }
            if let Some(bad) = cause.downcast_ref::<BadInput>() {
                return AppError::Conflict { message: bad.to_string(), reason: None };
            }
        }
        AppError::Internal(e)
    }
}

impl From<OpsError> for AppError {
    /// The operator service's refusals: unknown → 404, a bad field → 422 (`details.field`),
    /// not allowed → 403, not a user → 401, refused by the state → 409 (`details.reason`; an
    /// already-taken decision also `details.standing`: who, when, what), an expired link →
    /// 410, the engine's refusals as for a request (409 or 422).
    fn from(e: OpsError) -> Self {
        match e {
            OpsError::NotFound(m) => AppError::NotFound(m),
            OpsError::Invalid { field, message } => {
                AppError::Invalid { message: format!("{field}: {message}"), details: json!({ "field": field }) }
            }
            OpsError::Forbidden(m) => AppError::Forbidden(m),
            OpsError::Unknown(m) => AppError::Unauthorized(m),
            OpsError::Conflict { message, reason } => AppError::Conflict { message, reason: Some(reason) },
            OpsError::AlreadyDecided { message, standing } => AppError::Decided { message, standing },
            OpsError::Gone(m) => AppError::Gone(m),
            OpsError::Engine(e) => classify_engine(&e),
            OpsError::Internal(e) => AppError::from(e),
        }
    }
}

impl From<SpecError> for AppError {
    /// Not found → 404, a bad field or plan → 422 (`details.field` / `details.problems`), a
    /// status that refuses → 409 (`details.current_status`).
    fn from(e: SpecError) -> Self {
        match e {
            SpecError::NotFound(m) => AppError::NotFound(m),
            SpecError::Invalid { field, message } => {
                AppError::Invalid { message: format!("{field}: {message}"), details: json!({ "field": field }) }
            }
            SpecError::InvalidPlan(problems) => AppError::Invalid {
                message: format!("the plan has {} problems", problems.len()),
                details: json!({ "field": "plan", "problems": problems }),
            },
            // A conflict about a name (a project that exists or still has specs) has no status.
            SpecError::Conflict { message, current } if current.is_empty() => {
                AppError::Conflict { message, reason: None }
            }
            SpecError::Conflict { message, current } => AppError::StatusConflict { message, current },
            SpecError::Internal(e) => AppError::from(e),
        }
    }
}

impl From<ForgeError> for AppError {
    /// Each forge outcome its own status and `error` code (see [`AppError::Upstream`]).
    fn from(e: ForgeError) -> Self {
        let (status, code, retry_after) = match &e {
            ForgeError::NotFound { .. } => (StatusCode::NOT_FOUND, ErrorCode::ForgeNotFound, None),
            // A reference Baton refuses: the request's `ref` (or `label` / `wiql`) is wrong.
            ForgeError::Invalid(m) => {
                return AppError::Invalid { message: m.clone(), details: json!({ "field": "ref" }) };
            }
            ForgeError::Validation { .. } => (StatusCode::UNPROCESSABLE_ENTITY, ErrorCode::ForgeValidation, None),
            ForgeError::BadCredentials { .. } => (StatusCode::BAD_GATEWAY, ErrorCode::ForgeBadCredentials, None),
            ForgeError::RateLimited { retry_after_secs, .. } => {
                (StatusCode::SERVICE_UNAVAILABLE, ErrorCode::ForgeRateLimited, *retry_after_secs)
            }
            ForgeError::Unconfigured(_) => (StatusCode::SERVICE_UNAVAILABLE, ErrorCode::ForgeUnconfigured, None),
            ForgeError::Server { .. } | ForgeError::Network { .. } | ForgeError::Malformed { .. } => {
                (StatusCode::BAD_GATEWAY, ErrorCode::ForgeUnavailable, None)
            }
            ForgeError::Refused { .. } => (StatusCode::BAD_GATEWAY, ErrorCode::ForgeRefused, None),
        };
        AppError::Upstream { status, code, message: e.to_string(), retry_after, details: None }
    }
}

impl From<ImportError> for AppError {
    fn from(e: ImportError) -> Self {
        match e {
            ImportError::Forge(f) => f.into(),
            ImportError::Spec(s) => s.into(),
        }
    }
}

impl From<MergeError> for AppError {
    /// No execution → 404; not mergeable (not completed, no forge link) → 409; a failed push →
    /// 502; forge failures as [`From<ForgeError>`].
    fn from(e: MergeError) -> Self {
        match e {
            MergeError::NotFound(m) => AppError::NotFound(m),
            MergeError::Refused(m) => AppError::Conflict { message: m, reason: Some("not_mergeable") },
            e @ MergeError::Push { .. } => AppError::Upstream {
                status: StatusCode::BAD_GATEWAY,
                code: ErrorCode::PushFailed,
                message: e.to_string(),
                retry_after: None,
                details: None,
            },
            MergeError::Forge(f) => f.into(),
            MergeError::Internal(e) => e.into(),
        }
    }
}

impl From<JsonRejection> for AppError {
    fn from(rejection: JsonRejection) -> Self {
        let field = body_field(&rejection);
        let at = syntax_error_at(&rejection);
        AppError::Body { status: rejection.status(), message: rejection.body_text(), field, at }
    }
}

/// `e` and its sources, outermost first (where axum's rejections keep serde's error).
fn causes<'a>(e: &'a (dyn std::error::Error + 'static)) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(e), |e| e.source())
}

/// Where a body that is not JSON (400) stops parsing, as serde_json counts: (line, column).
/// `None` for other rejections.
fn syntax_error_at(rejection: &JsonRejection) -> Option<(usize, usize)> {
    let JsonRejection::JsonSyntaxError(syntax) = rejection else { return None };
    let err = causes(syntax).find_map(|e| {
        e.downcast_ref::<serde_path_to_error::Error<serde_json::Error>>()
            .map(serde_path_to_error::Error::inner)
            .or_else(|| e.downcast_ref::<serde_json::Error>())
    })?;
    (err.line() > 0).then(|| (err.line(), err.column()))
}

/// The field a wrongly shaped JSON body (422) is refused for: the path serde was at (axum's
/// extractor deserializes through `serde_path_to_error`; its error is in the rejection's
/// source chain), with the field a `missing` or `duplicate field` error names appended
/// when the path does not end with it yet. `None` for other rejections and for an error at the root naming no field.
fn body_field(rejection: &JsonRejection) -> Option<String> {
    let JsonRejection::JsonDataError(data) = rejection else { return None };
    let err = causes(data).find_map(|e| e.downcast_ref::<serde_path_to_error::Error<serde_json::Error>>())?;
    let path = err.path().to_string();
    let message = err.inner().to_string();
    let named = ["missing field `", "unknown field `", "duplicate field `"]
        .iter()
        .find_map(|prefix| message.strip_prefix(prefix)?.split('`').next())
        .filter(|name| !name.is_empty());
    // An unknown field's path already ends with it; a missing one's is its parent's.
    let ends_with_name = |name: &str| matches!(err.path().iter().next_back(), Some(serde_path_to_error::Segment::Map { key }) if key == name);
    match (path.as_str(), named) {
        (".", None) => None,
        (".", Some(name)) => Some(name.to_string()),
        (path, Some(name)) if !ends_with_name(name) => Some(format!("{path}.{name}")),
        (path, _) => Some(path.to_string()),
    }
}

/// Every error answer of the API and the webhooks is a JSON problem body: an error that
/// reaches the client in another shape (axum's own rejections of a path that is not UTF-8, a
/// body over the limit, …: plain text) is rewritten into `{error, message, details}` with the
/// same status. Pages keep their HTML error page.
pub(crate) async fn problem_bodies(
    axum::extract::State(()): axum::extract::State<()>,
    uri: axum::http::Uri,
    response: Response,
) -> Response {
    let status = response.status();
    let api = uri.path().starts_with("/api/") || uri.path().starts_with("/webhooks/");
    let json = response
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json") || v.starts_with("application/problem+json"));
    if !api || json || !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, 64 * 1024).await.map(|b| String::from_utf8_lossy(&b).trim().to_string());
    let message = match text {
        Ok(t) if !t.is_empty() => t,
        _ => status.canonical_reason().unwrap_or("error").to_string(),
    };
    let code = match status {
        StatusCode::BAD_REQUEST => ErrorCode::BadRequest,
        StatusCode::NOT_FOUND => ErrorCode::NotFound,
        StatusCode::METHOD_NOT_ALLOWED => ErrorCode::MethodNotAllowed,
        StatusCode::PAYLOAD_TOO_LARGE | StatusCode::UNSUPPORTED_MEDIA_TYPE => ErrorCode::InvalidBody,
        StatusCode::UNPROCESSABLE_ENTITY => ErrorCode::Unprocessable,
        StatusCode::REQUEST_TIMEOUT | StatusCode::SERVICE_UNAVAILABLE => ErrorCode::Unavailable,
        s if s.is_server_error() => ErrorCode::Internal,
        _ => ErrorCode::BadRequest,
    };
    let mut out = (status, Json(Problem { error: code, message, details: None })).into_response();
    for (name, value) in &parts.headers {
        if name != axum::http::header::CONTENT_TYPE && name != axum::http::header::CONTENT_LENGTH {
            out.headers_mut().insert(name, value.clone());
        }
    }
    out
}

impl From<QueryRejection> for AppError {
    fn from(rejection: QueryRejection) -> Self {
        AppError::bad_query(rejection.body_text())
    }
}

impl AppError {
    /// 400 for a query string whose value `message` describes: [`AppError::BadQuery`] naming
    /// the parameter when `message` (less axum's "Failed to deserialize query string: ")
    /// opens with `name: ` (what axum's `Query` says through `serde_path_to_error`, and how
    /// handlers word their own checks: "page: pages count from 1") or says "duplicate field
    /// `name`", else [`AppError::BadRequest`]. A bad `/board?page=0` had answered
    /// `details: null`.
    pub(crate) fn bad_query(message: impl Into<String>) -> AppError {
        let message = message.into();
        // axum's wording of where it failed says nothing to a client.
        let said = message.strip_prefix("Failed to deserialize query string: ").unwrap_or(&message).to_string();
        let is_name = |name: &&str| !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        let field = said
            .split_once(": ")
            .map(|(name, _)| name)
            .filter(is_name)
            .or_else(|| said.strip_prefix("duplicate field `")?.split('`').next().filter(is_name))
            .map(str::to_string);
        match field {
            Some(field) => AppError::BadQuery { message: said, field },
            None => AppError::BadRequest(said),
        }
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let (status, error) = self.parts();
        let message = self.message();
        let retry_after = match &self {
            AppError::Upstream { retry_after: Some(secs), .. } => Some(*secs),
            _ => None,
        };
        let details = match self {
            AppError::Conflict { reason, .. } => reason.map_or(Value::Null, |r| json!({ "reason": r })),
            AppError::Decided { standing, .. } => json!({ "reason": "already_decided", "standing": standing }),
            AppError::Invalid { details, .. } => details,
            AppError::StatusConflict { current, .. } => json!({ "current_status": current }),
            AppError::Upstream { details, .. } => details.map_or(Value::Null, |d| *d),
            AppError::Body { field: Some(field), .. } | AppError::BadQuery { field, .. } => {
                json!({ "field": field })
            }
            AppError::Body { at: Some((line, column)), .. } => json!({ "line": line, "column": column }),
            AppError::Internal(e) => {
                tracing::error!(error = %format!("{e:#}"), "request failed");
                Value::Null
            }
            _ => Value::Null,
        };
        let mut response = (status, Json(Problem { error, message, details: Some(details) })).into_response();
        if let Some(secs) = retry_after {
            response.headers_mut().insert(axum::http::header::RETRY_AFTER, axum::http::HeaderValue::from(secs));
        }
        response
    }
}
