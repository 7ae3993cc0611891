//! Extractors whose rejections are [`AppError`]s (JSON bodies, form bodies, the acting user).
//! They never check roles: `auth.rs` has done that before a handler runs.

use axum::body::Bytes;
use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::header::CONTENT_TYPE;
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use serde::de::DeserializeOwned;

use crate::web::error::AppError;

/// A JSON object body; a malformed or wrongly shaped body is an [`AppError::Body`] naming the
/// field.
///
/// Every body of the API is an object, so anything else (an array, a string, a number) is
/// refused with 422 before it is decoded: serde would otherwise fill a struct's fields from an
/// array's items by position.
#[derive(Debug, Clone)]
pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = AppError;

    async fn from_request(req: Request, state: &S) -> Result<Self, AppError> {
        if !json_content_type(req.headers()) {
            // axum's own extractor gives the 415 (missing or wrong content type).
            let Json(value) = Json::<T>::from_request(req, state).await?;
            return Ok(ApiJson(value));
        }
        let bytes = Bytes::from_request(req, state).await.map_err(JsonRejection::from)?;
        object_from_bytes(&bytes).map(ApiJson)
    }
}

/// A JSON object body's bytes decoded as `T` (see [`ApiJson`]).
fn object_from_bytes<T: DeserializeOwned>(bytes: &Bytes) -> Result<T, AppError> {
    let starts_an_object = matches!(bytes.iter().find(|b| !b.is_ascii_whitespace()), Some(b'{') | None);
    // Valid JSON of another kind is the wrong shape (422); text that is no JSON at all is
    // left to the decoder's syntax error (400).
    if let (false, Ok(other)) = (starts_an_object, serde_json::from_slice::<serde_json::Value>(bytes)) {
        return Err(AppError::Body {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            message: format!("the body must be a JSON object, not {}", json_kind(&other)),
            field: None,
            at: None,
        });
    }
    let Json(value) = Json::<T>::from_bytes(bytes)?;
    Ok(value)
}

/// A JSON object already read (as [`ApiJson`]`<serde_json::Value>`) decoded as `T`, with the
/// errors [`ApiJson`]`<T>` gives (422 naming the field).
///
/// # Errors
/// As [`ApiJson`]: a value that is not a `T` (422, naming the field).
pub(crate) fn decode_object<T: DeserializeOwned>(value: &serde_json::Value) -> Result<T, AppError> {
    let bytes = Bytes::from(value.to_string());
    object_from_bytes(&bytes)
}

/// A page's form body (`application/x-www-form-urlencoded`), decoded as axum's `Form` decodes
/// it, after a check that every name and value is UTF-8 once percent-decoded: axum's decoding
/// is lossy, so a title sent as `bad%FFutf` was stored as `bad\u{fffd}utf` (found by a tester),
/// where the API refuses a body that is not UTF-8. Such a field is refused (400, naming it);
/// the other rejections are axum's (400 malformed, 413 over the body limit, 415 not a form).
#[derive(Debug, Clone)]
pub struct PageForm<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for PageForm<T> {
    type Rejection = AppError;

    async fn from_request(req: Request, state: &S) -> Result<Self, AppError> {
        let (parts, body) = req.into_parts();
        let kept = parts.clone();
        let bytes = Bytes::from_request(Request::from_parts(parts, body), state).await.map_err(|e| AppError::Body {
            status: e.status(),
            message: e.body_text(),
            field: None,
            at: None,
        })?;
        if let Some(field) = not_utf8_field(&bytes) {
            return Err(AppError::Body {
                status: StatusCode::BAD_REQUEST,
                message: format!("form field `{field}` is not UTF-8 text once percent-decoded"),
                field: Some(field),
                at: None,
            });
        }
        let req = Request::from_parts(kept, axum::body::Body::from(bytes));
        let axum::Form(value) = axum::Form::<T>::from_request(req, state).await.map_err(|e| AppError::Body {
            status: e.status(),
            message: e.body_text(),
            field: None,
            at: None,
        })?;
        Ok(PageForm(value))
    }
}

/// The name of the first field of a urlencoded `body` whose name or value is not UTF-8 once
/// percent-decoded (`+` is a space), lossily decoded for the message; `None` when all are.
fn not_utf8_field(body: &[u8]) -> Option<String> {
    let decoded = |part: &[u8]| -> Vec<u8> {
        let spaced: Vec<u8> = part.iter().map(|&b| if b == b'+' { b' ' } else { b }).collect();
        percent_encoding::percent_decode(&spaced).collect()
    };
    body.split(|b| *b == b'&').filter(|pair| !pair.is_empty()).find_map(|pair| {
        let mut halves = pair.splitn(2, |b| *b == b'=');
        let name = decoded(halves.next().unwrap_or_default());
        let value = decoded(halves.next().unwrap_or_default());
        (std::str::from_utf8(&name).is_err() || std::str::from_utf8(&value).is_err())
            .then(|| String::from_utf8_lossy(&name).into_owned())
    })
}

/// An optional JSON object body: nothing (or only whitespace) sent, with or without a
/// `Content-Type`, is `T::default()`, as `curl -X POST …/cancel` expects; any body is read as
/// [`ApiJson`] reads it. A body without a JSON content type is still 415.
#[derive(Debug, Clone)]
pub struct ApiJsonOrEmpty<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Default> FromRequest<S> for ApiJsonOrEmpty<T> {
    type Rejection = AppError;

    async fn from_request(req: Request, state: &S) -> Result<Self, AppError> {
        let json = json_content_type(req.headers());
        let bytes = Bytes::from_request(req, state).await.map_err(JsonRejection::from)?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(ApiJsonOrEmpty(T::default()));
        }
        if !json {
            return Err(JsonRejection::from(axum::extract::rejection::MissingJsonContentType::default()).into());
        }
        object_from_bytes(&bytes).map(ApiJsonOrEmpty)
    }
}

/// Whether `Content-Type` is `application/json` or `application/<something>+json` (what
/// axum's `Json` accepts).
fn json_content_type(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()) else { return false };
    let essence = value.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    essence == "application/json" || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// What kind of JSON value `value` is, for the error message.
fn json_kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Null => "null",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::Object(_) => "an object",
    }
}

pub use crate::web::auth::ACTOR_HEADER;

/// Who records an event: the signed-in user (or the API token's); in open mode (no users)
/// the `X-Baton-Actor` header, else `api`.
#[derive(Debug, Clone)]
pub struct Actor(pub String);

impl<S: Send + Sync> FromRequestParts<S> for Actor {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, AppError> {
        if let Some(who) = parts.extensions.get::<crate::web::auth::Identity>().filter(|i| !i.open) {
            return Ok(Actor(who.name.clone()));
        }
        let Some(value) = parts.headers.get(ACTOR_HEADER) else { return Ok(Actor("api".into())) };
        // UTF-8, not only visible ASCII (`HeaderValue::to_str`): `élodie` is a name.
        let text = std::str::from_utf8(value.as_bytes())
            .map_err(|_| crate::runtime::BadInput("expected UTF-8 text".into()))
            .and_then(|text| crate::runtime::auth::check_actor_name(text).map(|()| text.trim()))
            .map_err(|e| AppError::BadRequest(format!("header {ACTOR_HEADER}: {}", e.0)))?;
        Ok(Actor(text.to_string()))
    }
}

/// The caller as an [`Operator`](crate::runtime::ops::Operator) of the API door: the signed-in
/// user (or the API token's) with their role; in open mode (no users) the `X-Baton-Actor`
/// header's name (else `api`) with every right.
#[derive(Debug, Clone)]
pub struct Caller(pub crate::runtime::ops::Operator);

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, AppError> {
        use crate::runtime::auth::Role;
        use crate::runtime::ops::{Door, Operator};
        let role = parts.extensions.get::<crate::web::auth::Identity>().map_or(Role::Viewer, |i| i.role);
        // No identity only on a public route (the middleware refuses the others): the least right.
        let Actor(name) = Actor::from_request_parts(parts, state).await?;
        Ok(Caller(Operator::new(name, role, Door::Api)))
    }
}

#[cfg(test)]
mod tests {
    use super::not_utf8_field;

    #[test]
    fn a_form_field_is_utf8_once_percent_decoded_or_named() {
        assert_eq!(not_utf8_field(b"csrf=x&title=Caf%C3%A9+au+lait&body=a%2Bb"), None);
        assert_eq!(not_utf8_field(b"title=bad%FFutf&body=x").as_deref(), Some("title"));
        assert_eq!(not_utf8_field(b"ti%FFtle=x").as_deref(), Some("ti\u{fffd}tle"));
        // A `%` not followed by two hex digits is kept as it is, as a browser's form decoder does.
        assert_eq!(not_utf8_field(b"title=100%&x=%G1%"), None);
    }
}
