//! Liveness and readiness: `GET /healthz`, `GET /readyz`.
//!
//! Owns the readiness rule: ready while the database answers a query and the worker pool is
//! alive (it accepts work until [`Pool::shutdown`](crate::runtime::pool::Pool::shutdown)
//! began). Both checks are reported with detail either way. It never changes the pool or the
//! database.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;
use serde_json::{json, Value};

use crate::runtime::pool::{DriverState, Pool};
use crate::web::AppState;

/// The health routes.
pub(crate) fn router() -> Router<AppState> {
    Router::new().route("/healthz", get(healthz)).route("/readyz", get(readyz))
}

async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

/// Drivers of the pool by what they are doing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct DriverCounts {
    /// Driving: dispatching, waiting for agents or running a gate.
    pub running: usize,
    /// Waiting for a human decision or an operator event.
    pub parked: usize,
    /// Their last run failed; they try again later.
    pub errored: usize,
}

/// The worker pool as `/readyz` and `/metrics` report it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PoolReport {
    /// Whether the pool accepts work (false once shutdown began).
    pub open: bool,
    /// Its drivers by state.
    pub drivers: DriverCounts,
    /// Agent slots free under the global cap.
    pub free_agent_slots: usize,
}

/// What `pool` is doing now.
pub fn pool_report(pool: &Pool) -> PoolReport {
    let mut drivers = DriverCounts::default();
    for (_, state) in pool.drivers() {
        match state {
            DriverState::Running => drivers.running += 1,
            DriverState::Parked => drivers.parked += 1,
            DriverState::Errored(_) => drivers.errored += 1,
        }
    }
    PoolReport { open: pool.is_open(), drivers, free_agent_slots: pool.free_agent_slots() }
}

/// 200 `{"status": "ready", "database": {"ok": true}, "pool": {…}}` when the database answers
/// and the pool is open; otherwise 503 in the API's error shape (`error: "unavailable"`) with
/// the same checks under `details`.
async fn readyz(State(state): State<AppState>) -> Response {
    let database = match state.execs.ping().await {
        Ok(()) => json!({ "ok": true }),
        Err(e) => {
            tracing::warn!(error = %e, "readiness check: the database does not answer");
            json!({ "ok": false, "error": "the database does not answer" })
        }
    };
    let db_ok = database["ok"] == true;
    let pool = pool_report(state.pool());
    let checks = json!({ "database": database, "pool": pool });
    if db_ok && pool.open {
        let mut body = json!({ "status": "ready" });
        if let (Some(out), Value::Object(checks)) = (body.as_object_mut(), checks) {
            out.extend(checks);
        }
        return Json(body).into_response();
    }
    let reasons: Vec<&str> =
        [(!db_ok).then_some("the database does not answer"), (!pool.open).then_some("the worker pool is shut down")]
            .into_iter()
            .flatten()
            .collect();
    let body = json!({
        "error": "unavailable",
        "message": format!("not ready: {}", reasons.join("; ")),
        "details": checks,
    });
    (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
}
