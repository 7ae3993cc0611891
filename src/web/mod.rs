//! `baton serve`: the HTTP service over the runtime's services.
//!
//! Handlers extract, call [`Executions`](crate::runtime::executions::Executions),
//! `runtime::lease` or the engine, and return JSON; they never call git or the store's SQL
//! beyond its read functions. Errors are one [`AppError`](crate::web::AppError) (`error.rs`
//! documents the status of each case). There is no authentication yet, so
//! [`check_bind`](crate::web::check_bind) refuses any address but loopback.

pub mod api;
pub mod board;
pub mod error;
pub mod extract;
pub mod health;
pub mod pages;

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use axum::http::StatusCode;
use axum::Router;
use tower_http::compression::CompressionLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;

use crate::runtime::executions::Executions;
use crate::runtime::pool::{Pool, DEFAULT_MAX_AGENTS};
use crate::runtime::specs::Specs;
use crate::runtime::BadInput;
pub use crate::web::error::AppError;

/// Default `--bind` address.
pub const DEFAULT_BIND: &str = "127.0.0.1:8741";

/// Longest a request may take (a cancel may wait up to 10 s for a driver to stop, then up to
/// 10 s for the lease).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// What every handler shares.
#[derive(Debug, Clone)]
pub struct AppState {
    /// The execution service over the data dir's database.
    pub execs: Executions,
    /// The spec queue, with the worker pool it fires into.
    pub specs: Specs,
    /// One lock per execution, serialising the records this process makes on it: the
    /// execution lease is re-entrant for its holder (this process), so two requests on one
    /// execution must not interleave. Other executions are not held up.
    record_locks: Arc<std::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>,
}

impl AppState {
    /// State over `execs`, with a pool of [`DEFAULT_MAX_AGENTS`] agents.
    pub fn new(execs: Executions) -> AppState {
        AppState::with_pool(Pool::new(execs, DEFAULT_MAX_AGENTS))
    }

    /// State over `pool` and its executions.
    pub fn with_pool(pool: Pool) -> AppState {
        AppState { execs: pool.execs().clone(), specs: Specs::new(pool), record_locks: Arc::default() }
    }

    /// The worker pool.
    pub fn pool(&self) -> &Pool {
        self.specs.pool()
    }

    /// The record lock of `task_id` (created on first use; one entry per existing execution).
    pub fn record_lock(&self, task_id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.record_locks.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        locks.entry(task_id.to_string()).or_default().clone()
    }
}

/// The whole application: routes, a JSON 404 for unknown paths, and the tower-http layers
/// (request id, trace, timeout, gzip).
pub fn app(state: AppState) -> Router {
    Router::new()
        .merge(health::router())
        .merge(api::router())
        .merge(pages::router())
        .fallback(|| async { AppError::NotFound("no such route".into()) })
        .with_state(state)
        .layer(CompressionLayer::new())
        .layer(TimeoutLayer::with_status_code(StatusCode::SERVICE_UNAVAILABLE, REQUEST_TIMEOUT))
        .layer(PropagateRequestIdLayer::x_request_id())
        .layer(TraceLayer::new_for_http())
        .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
}

/// Refuses an address other than loopback: the server has no authentication yet.
///
/// Errors ([`BadInput`]): a non-loopback address, saying why.
pub fn check_bind(addr: SocketAddr) -> Result<(), BadInput> {
    if addr.ip().is_loopback() {
        return Ok(());
    }
    Err(BadInput(format!(
        "--bind {addr}: only a loopback address (127.0.0.1, ::1) is allowed; authentication is not built yet, \
         so the API would be open to the network"
    )))
}

/// Serves [`app`] on `listener` until `shutdown` completes, then lets in-flight requests finish.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    axum::serve(listener, app(state)).with_graceful_shutdown(shutdown).await.context("serving HTTP")
}

/// Completes on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
