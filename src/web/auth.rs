//! Authentication and authorization for every route.
//!
//! One middleware ([`authorize`]) resolves who calls — a bearer API token, a signed session
//! cookie from `/login`, or, when no user exists, the open local mode — and checks the role the
//! route needs ([`required_role`], the one table of the role matrix). API routes answer 401/403
//! as JSON; pages redirect to `/login` or show the error page. The resolved [`Identity`] is put
//! in the request's extensions for handlers. This module never records events.

use axum::extract::{MatchedPath, Request, State};
use axum::http::header::{AUTHORIZATION, COOKIE};
use axum::http::{HeaderMap, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::clock;
use crate::runtime::auth::Role;
use crate::runtime::users;
use crate::web::error::AppError;
use crate::web::AppState;

/// Header naming who acts in open mode (no users): `X-Baton-Actor`.
pub const ACTOR_HEADER: &str = "x-baton-actor";

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "baton_session";

/// How long a browser session lasts, seconds.
pub const SESSION_SECS: i64 = 12 * 3600;

/// Who calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The user's name (in open mode: the `X-Baton-Actor` header, else `local`).
    pub name: String,
    /// The user's role (admin in open mode).
    pub role: Role,
    /// No users are configured: the server runs open on loopback.
    pub open: bool,
}

/// The role `method` on the route `path` (axum's matched path, e.g.
/// `/api/v1/specs/{id}/fire`) needs; `None` for public routes.
///
/// Public: health, login/logout, static files, approval links (they carry their own
/// signature) and forge webhooks (they authenticate by their own signature or credentials). Reading: viewer. Deciding (approve, feedback, interact): reviewer. Managing
/// projects (any write under `/api/v1/projects`): admin. Every other write: lead.
pub fn required_role(method: &Method, path: &str) -> Option<Role> {
    let public = matches!(path, "/healthz" | "/readyz" | "/login" | "/logout")
        || path.starts_with("/static/")
        || path.starts_with("/approve/")
        || path.starts_with("/webhooks/");
    if public {
        return None;
    }
    if matches!(*method, Method::GET | Method::HEAD) {
        return Some(Role::Viewer);
    }
    if path.starts_with("/api/v1/projects") {
        return Some(Role::Admin);
    }
    let deciding = ["/approve", "/feedback", "/interact"].iter().any(|end| path.ends_with(end))
        && (path.starts_with("/api/v1/executions/") || path.starts_with("/executions/"));
    Some(if deciding { Role::Reviewer } else { Role::Lead })
}

/// A cookie's value from the request's `Cookie` headers.
pub fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_string())
}

/// Who the request comes from; `None` when auth is on and it carries no valid credential.
///
/// Errors: a malformed or unknown bearer token (401), the database.
pub async fn identify(app: &AppState, headers: &HeaderMap) -> Result<Option<Identity>, AppError> {
    if !app.auth_enabled().await? {
        let name = headers
            .get(ACTOR_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty() && v.len() <= 200)
            .unwrap_or("local")
            .to_string();
        return Ok(Some(Identity { name, role: Role::Admin, open: true }));
    }
    if let Some(value) = headers.get(AUTHORIZATION) {
        let token = value
            .to_str()
            .ok()
            .and_then(|v| v.split_once(' ').filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer")))
            .map(|(_, token)| token)
            .map(str::trim)
            .ok_or_else(|| AppError::Unauthorized("Authorization: expected `Bearer <token>`".into()))?;
        let user = users::of_token(&app.execs, token).await?;
        let user = user.ok_or_else(|| AppError::Unauthorized("unknown or revoked API token".into()))?;
        return Ok(Some(to_identity(user)));
    }
    if let Some(value) = cookie(headers, SESSION_COOKIE) {
        if let Some((name, token_id)) = app.key.session_user(&value, clock::now().timestamp()) {
            // A revoked token ends the sessions signed in with it.
            if let Some(user) = users::of_session(&app.execs, &name, token_id).await? {
                return Ok(Some(to_identity(user)));
            }
        }
    }
    Ok(None)
}

fn to_identity(user: crate::store::UserRow) -> Identity {
    Identity { role: users::role_of(&user), name: user.name, open: false }
}

/// The middleware: resolves the caller, checks the route's role, and passes the request on
/// with the [`Identity`] in its extensions (public routes get one too when the caller has one).
pub async fn authorize(State(app): State<AppState>, mut req: Request, next: Next) -> Response {
    let path =
        req.extensions().get::<MatchedPath>().map_or_else(|| req.uri().path().to_string(), |m| m.as_str().to_string());
    let api = path.starts_with("/api/");
    if let Err(e) = same_origin(req.method(), req.headers()) {
        return refuse(e, api);
    }
    let need = required_role(req.method(), &path);
    // Public routes (health, sign-in, links, webhooks) carry their own proof or reveal
    // nothing, and health must answer while the database does not.
    if need.is_some() {
        if let Err(e) = loopback_host_in_open_mode(&app, req.headers()).await {
            return refuse(e, api);
        }
    }
    let identity = match identify(&app, req.headers()).await {
        Ok(i) => i,
        Err(e) if need.is_none() => {
            tracing::debug!("ignoring a bad credential on a public route: {}", e.message());
            None
        }
        Err(e) => return refuse(e, api),
    };
    if let Some(need) = need {
        match &identity {
            None => {
                if !api && matches!(*req.method(), Method::GET | Method::HEAD) {
                    let next_path = req.uri().path_and_query().map_or("/", |p| p.as_str()).to_string();
                    let target = format!("/login?next={}", urlencode(&next_path));
                    return axum::response::Redirect::to(&target).into_response();
                }
                return refuse(
                    AppError::Unauthorized("sign in, or send an API token (Authorization: Bearer …)".into()),
                    api,
                );
            }
            Some(who) if who.role < need => {
                let message = format!("{} is a {}; this needs the {} role", who.name, who.role.as_str(), need.as_str());
                return refuse(AppError::Forbidden(message), api);
            }
            Some(_) => {}
        }
    }
    if let Some(identity) = identity {
        req.extensions_mut().insert(identity);
    }
    next.run(req).await
}

/// In open mode (no users), refuses a request whose `Host` is not a loopback name
/// (`127.0.0.1`, `[::1]`, `localhost`, any port): a page that rebinds its own DNS name to
/// 127.0.0.1 would otherwise reach the open API as a same-origin page (403).
///
/// Errors: [`AppError::Forbidden`]; the database.
pub async fn loopback_host_in_open_mode(app: &AppState, headers: &HeaderMap) -> Result<(), AppError> {
    if app.auth_enabled().await? {
        return Ok(());
    }
    // No Host at all (HTTP/1.0, in-process calls) is no browser: only a browser can be rebound.
    let Some(host) = headers.get(axum::http::header::HOST) else { return Ok(()) };
    let host = host.to_str().unwrap_or("");
    if is_loopback_host(host) {
        return Ok(());
    }
    Err(AppError::Forbidden(format!(
        "Host {host:?}: in open mode (no users) the server only answers 127.0.0.1, [::1] or localhost"
    )))
}

/// Whether a `Host` header names a loopback address (with or without a port).
pub fn is_loopback_host(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split_once(']').map_or(rest, |(h, _)| h)
    } else {
        host.rsplit_once(':').map_or(host, |(h, _)| h)
    };
    name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Refuses a state-changing request a browser sent from another site (403): its `Origin` is
/// not this server's `Host`, or `Sec-Fetch-Site` says `cross-site` or `same-site` (another
/// port or host name of the same machine, e.g. `localhost` against `127.0.0.1`). Without
/// those headers (curl, scripts) nothing is refused: they carry no ambient credential but a
/// token. This is what protects the API's body-less POSTs, which no CSRF token guards.
///
/// Errors: [`AppError::Forbidden`] naming the origin.
pub fn same_origin(method: &Method, headers: &HeaderMap) -> Result<(), AppError> {
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return Ok(());
    }
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    if let Some(site) = text("sec-fetch-site") {
        if matches!(site, "cross-site" | "same-site") {
            return Err(AppError::Forbidden(format!(
                "a {site} request from another page may not change anything here (Sec-Fetch-Site)"
            )));
        }
    }
    if let (Some(origin), Some(host)) = (text("origin"), text("host")) {
        let origin_host = origin.split_once("://").map_or(origin, |(_, rest)| rest);
        if origin == "null" || !origin_host.eq_ignore_ascii_case(host) {
            return Err(AppError::Forbidden(format!("a request from {origin} may not change anything on {host}")));
        }
    }
    Ok(())
}

fn refuse(e: AppError, api: bool) -> Response {
    if api {
        e.into_response()
    } else {
        crate::web::layout::PageError::from(e).into_response()
    }
}

/// Percent-encodes everything but unreserved characters and `/`.
pub fn urlencode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_role_table() {
        let post = Method::POST;
        assert_eq!(required_role(&Method::GET, "/"), Some(Role::Viewer));
        assert_eq!(required_role(&Method::GET, "/healthz"), None);
        assert_eq!(required_role(&post, "/approve/{token}"), None);
        assert_eq!(required_role(&post, "/webhooks/github"), None);
        assert_eq!(required_role(&post, "/webhooks/ado"), None);
        assert_eq!(required_role(&post, "/api/v1/executions/{task_id}/approve"), Some(Role::Reviewer));
        assert_eq!(required_role(&post, "/executions/{task_id}/{action}"), Some(Role::Lead));
        assert_eq!(required_role(&post, "/api/v1/specs/{id}/fire"), Some(Role::Lead));
        assert_eq!(required_role(&Method::DELETE, "/api/v1/projects/{name}"), Some(Role::Admin));
        assert_eq!(urlencode("/specs/1?x=a b"), "/specs/1%3Fx%3Da%20b");
    }

    #[test]
    fn cross_site_writes_are_refused_and_plain_clients_pass() {
        let headers = |pairs: &[(&'static str, &str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.insert(*k, v.parse().unwrap());
            }
            h
        };
        let post = Method::POST;
        assert!(same_origin(&post, &headers(&[])).is_ok(), "curl sends neither header");
        assert!(
            same_origin(&post, &headers(&[("origin", "http://127.0.0.1:8741"), ("host", "127.0.0.1:8741")])).is_ok()
        );
        assert!(same_origin(&post, &headers(&[("sec-fetch-site", "same-origin")])).is_ok());
        assert!(
            same_origin(&post, &headers(&[("origin", "http://localhost:8741"), ("host", "127.0.0.1:8741")])).is_err()
        );
        assert!(same_origin(&post, &headers(&[("origin", "null"), ("host", "127.0.0.1:8741")])).is_err());
        assert!(same_origin(&post, &headers(&[("sec-fetch-site", "same-site")])).is_err());
        assert!(same_origin(&post, &headers(&[("sec-fetch-site", "cross-site")])).is_err());
        assert!(same_origin(&Method::GET, &headers(&[("sec-fetch-site", "cross-site")])).is_ok(), "reads pass");
        for ok in ["127.0.0.1:8741", "localhost", "LOCALHOST:1", "[::1]:8741", "127.1.2.3"] {
            assert!(is_loopback_host(ok), "{ok}");
        }
        for bad in ["rebind.attacker.example:8741", "", "10.0.0.1:80", "localhost.evil.example"] {
            assert!(!is_loopback_host(bad), "{bad}");
        }
    }
}
