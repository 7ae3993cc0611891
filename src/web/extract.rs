//! Extractors whose rejections are [`AppError`]s (JSON bodies, the acting user).
//! They never check roles: `auth.rs` has done that before a handler runs.

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::Json;
use serde::de::DeserializeOwned;

use crate::web::error::AppError;

/// A JSON body; a malformed or wrongly shaped body is an [`AppError::Body`] naming the field.
#[derive(Debug, Clone)]
pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = AppError;

    async fn from_request(req: Request, state: &S) -> Result<Self, AppError> {
        let Json(value) = Json::<T>::from_request(req, state).await?;
        Ok(ApiJson(value))
    }
}

/// Header naming who acts (until auth exists): `X-Baton-Actor`.
pub const ACTOR_HEADER: &str = "x-baton-actor";

/// Longest accepted actor name, bytes.
const ACTOR_MAX: usize = 200;

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
        let bad =
            || AppError::BadRequest(format!("header {ACTOR_HEADER}: expected 1 to {ACTOR_MAX} visible characters"));
        let text = value.to_str().map_err(|_| bad())?.trim();
        if text.is_empty() || text.len() > ACTOR_MAX {
            return Err(bad());
        }
        Ok(Actor(text.to_string()))
    }
}
