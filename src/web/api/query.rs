//! One rule for every `/api/v1` route's query string: a parameter the operation does not
//! declare in the OpenAPI document is refused (400, naming it and what the operation takes).
//! Routes whose handlers read a query (`?status=`, `?all=`) already refused unknown keys
//! through their `deny_unknown_fields` structs, while routes that read none ignored any
//! (`GET /executions?x=1`, `POST …/pause?zzz=1`: found by a tester). Reading the declared
//! parameters from the generated document keeps the rule and the document one.
//!
//! Owns only that check, as a layer run after routing (`route_layer`, so the route's
//! [`MatchedPath`] is known); never parses a parameter's value (the handler does).

use std::collections::{BTreeSet, HashMap};
use std::sync::OnceLock;

use axum::extract::{MatchedPath, Request};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use utoipa::openapi::path::{Operation, ParameterIn};

use crate::web::error::AppError;

/// The query parameters each operation declares, by (method, path template).
fn declared() -> &'static HashMap<(Method, String), BTreeSet<String>> {
    static DECLARED: OnceLock<HashMap<(Method, String), BTreeSet<String>>> = OnceLock::new();
    DECLARED.get_or_init(|| {
        let mut map = HashMap::new();
        for (path, item) in &super::openapi::openapi().paths.paths {
            let ops: [(Method, &Option<Operation>); 5] = [
                (Method::GET, &item.get),
                (Method::PUT, &item.put),
                (Method::POST, &item.post),
                (Method::DELETE, &item.delete),
                (Method::PATCH, &item.patch),
            ];
            for (method, op) in ops {
                let Some(op) = op else { continue };
                let names = op
                    .parameters
                    .iter()
                    .flatten()
                    .filter(|p| matches!(p.parameter_in, ParameterIn::Query))
                    .map(|p| p.name.clone())
                    .collect();
                map.insert((method, path.clone()), names);
            }
        }
        map
    })
}

/// The layer: refuses a request whose query names a parameter its operation does not declare.
pub(crate) async fn known_query(matched: Option<MatchedPath>, request: Request, next: Next) -> Response {
    if let (Some(path), Some(query)) = (matched, request.uri().query()) {
        // HEAD is answered by the GET route.
        let method = if request.method() == Method::HEAD { Method::GET } else { request.method().clone() };
        if let Some(names) = declared().get(&(method, path.as_str().to_string())) {
            let unknown =
                url::form_urlencoded::parse(query.as_bytes()).map(|(key, _)| key).find(|key| !names.contains(&**key));
            if let Some(key) = unknown {
                let takes = if names.is_empty() {
                    "this operation takes no query parameters".to_string()
                } else {
                    format!("it takes {}", names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", "))
                };
                return AppError::BadQuery {
                    message: format!("unknown query parameter `{}`: {takes}", crate::model::text::cut(&key, 60)),
                    field: key.into_owned(),
                }
                .into_response();
            }
        }
    }
    next.run(request).await
}
