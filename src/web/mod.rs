//! `baton serve`: the HTTP doors (REST API, board pages, approval links, webhooks) over the
//! runtime's services.
//!
//! Handlers parse, call a runtime service and format its answer; they never touch the store,
//! git or a forge, and decide nothing. Where each rule lives: every operator decision
//! (record, approve, links, budget, pause, cancel, who may do it, idempotency) in
//! `runtime::ops`; the spec queue in `runtime::specs`; reads in `runtime::views` and
//! `runtime::board`; users and tokens in `runtime::users`; webhook delivery bookkeeping in
//! `runtime::intake`. Errors are one [`AppError`](crate::web::AppError) (`error.rs` maps
//! each service error to a status once). `auth.rs` authenticates every request and checks the
//! route's role; with no users the server runs open, and [`check_bind`](crate::web::check_bind)
//! then refuses any address but loopback.

pub mod api;
pub mod auth;
pub mod error;
pub mod escape;
pub mod extract;
pub mod health;
pub mod layout;
pub mod metrics;
pub mod pages;
pub mod plots;
pub mod webhooks;
pub mod when;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use tower_http::compression::CompressionLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::timeout::RequestBodyTimeoutLayer;
use tower_http::trace::TraceLayer;

use crate::forge::{ForgeSettings, RetryPolicy};
use crate::runtime::app::App;
use crate::runtime::auth::ServerKey;
use crate::runtime::executions::Executions;
use crate::runtime::forge::Forges;
use crate::runtime::ops::Ops;
use crate::runtime::pool::{Pool, DEFAULT_MAX_AGENTS};
use crate::runtime::specs::Specs;
use crate::runtime::BadInput;
pub use crate::web::error::AppError;
use crate::web::metrics::Metrics;
pub use crate::web::webhooks::WebhookConfig;

/// Default `--bind` address.
pub const DEFAULT_BIND: &str = "127.0.0.1:8741";

/// Longest a request may take (a cancel may wait up to 10 s for a driver to stop, then up to
/// 10 s for the lease).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How long "no users" is trusted before the database is asked again.
pub const NO_USERS_RECHECK: Duration = Duration::from_secs(1);

/// Longest a client may take to send a request body (then 408).
pub const BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest the server waits, after a shutdown signal, for open connections to finish.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// Longest a client may take to send a request's head (request line and headers) once it has
/// begun one, or to begin the next on a kept-alive connection; then the connection is closed
/// (a client trickling headers would otherwise hold it open for ever).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// What every handler shares.
#[derive(Debug, Clone)]
pub struct AppState {
    /// The execution service over the data dir's database.
    pub execs: Executions,
    /// The spec queue, with the worker pool it fires into.
    pub specs: Specs,
    /// The server key (sessions, approval links, decision signatures).
    pub key: ServerKey,
    /// Set once a user is known to exist: auth stays on from then (users are never deleted).
    users_known: Arc<std::sync::atomic::AtomicBool>,
    /// When the database last said there are no users.
    no_users_checked: Arc<std::sync::Mutex<Option<crate::clock::Stopwatch>>>,
    /// Turns true when the server begins its shutdown: event streams end.
    closing: Arc<tokio::sync::watch::Sender<bool>>,
    /// What this process measures for `/metrics` (HTTP latency).
    pub metrics: Metrics,
    /// The operator service: every decision a request makes goes through it.
    pub ops: Ops,
    /// Forge webhook secrets and limits (none set: the webhook routes answer 503).
    pub webhooks: Arc<WebhookConfig>,
    /// The forge clients (imports, pull requests, report-back comments).
    pub forges: Forges,
    /// Remediation of open pull requests (CI notices, reviews, the polling pass), over
    /// [`AppState::forges`].
    pub remediation: crate::runtime::remediation::Remediation,
    /// Boards built, served again while nothing changed.
    pub board_cache: Arc<crate::runtime::board::BoardCache>,
    /// Longest a request may take before it is answered 503 (default [`REQUEST_TIMEOUT`]).
    pub request_timeout: Duration,
    /// Longest a client may take to send a request's head (default [`HEADER_READ_TIMEOUT`]).
    pub header_read_timeout: Duration,
    /// Rings when any replica commits a change (PostgreSQL); event streams wake on it and poll
    /// as their fallback.
    pub bell: crate::runtime::changes::Bell,
    /// Serve only /healthz, /readyz and /metrics (`baton serve --role worker`).
    pub health_only: bool,
}

impl AppState {
    /// State over `execs`, with a pool of [`DEFAULT_MAX_AGENTS`] agents.
    ///
    /// Errors: as [`AppState::with_pool`].
    pub fn new(execs: Executions) -> anyhow::Result<AppState> {
        AppState::with_pool(Pool::new(execs, DEFAULT_MAX_AGENTS))
    }

    /// State over `pool` and its executions, with the data dir's server key (created on
    /// first use) and the wall clock.
    ///
    /// Errors: the key file cannot be read or created.
    pub fn with_pool(pool: Pool) -> anyhow::Result<AppState> {
        AppState::from_app(App::over_pool(pool, crate::clock::Clock::system())?)
    }

    /// State over the services of the composition root.
    ///
    /// Errors: the default forge clients cannot be built.
    pub fn from_app(app: App) -> anyhow::Result<AppState> {
        let forges = Forges::new(ForgeSettings::default(), RetryPolicy::default())?;
        let remediation =
            crate::runtime::remediation::Remediation::new(app.execs.clone(), app.ops.clone(), forges.clone());
        Ok(AppState {
            execs: app.execs,
            specs: app.specs,
            key: app.key,
            ops: app.ops,
            metrics: Metrics::new(),
            users_known: Arc::default(),
            no_users_checked: Arc::default(),
            closing: Arc::new(tokio::sync::watch::channel(false).0),
            webhooks: Arc::default(),
            forges,
            remediation,
            board_cache: Arc::default(),
            request_timeout: REQUEST_TIMEOUT,
            header_read_timeout: HEADER_READ_TIMEOUT,
            bell: crate::runtime::changes::Bell::silent(),
            health_only: false,
        })
    }

    /// The state with this change bell (the server starts one on its store).
    #[must_use]
    pub fn with_bell(mut self, bell: crate::runtime::changes::Bell) -> AppState {
        self.bell = bell;
        self
    }

    /// The state of a worker replica when `on`: [`serve`] answers only /healthz, /readyz and
    /// /metrics ([`health_app`]).
    #[must_use]
    pub fn with_health_only(mut self, on: bool) -> AppState {
        self.health_only = on;
        self
    }

    /// The state with these forge clients (the server builds them from `baton.toml` and the
    /// environment; tests point them at mock servers).
    #[must_use]
    pub fn with_forges(mut self, forges: Forges) -> AppState {
        self.remediation = self.remediation.with_forges(forges.clone());
        self.forges = forges;
        self
    }

    /// The state with these webhook settings (the server reads them from the environment at
    /// start; tests pass their own).
    #[must_use]
    pub fn with_webhooks(mut self, config: WebhookConfig) -> AppState {
        self.webhooks = Arc::new(config);
        self
    }

    /// The state with another request time limit (tests use a short one).
    #[must_use]
    pub fn with_request_timeout(mut self, limit: Duration) -> AppState {
        self.request_timeout = limit;
        self
    }

    /// The state with another header-read time limit (tests use a short one).
    #[must_use]
    pub fn with_header_read_timeout(mut self, limit: Duration) -> AppState {
        self.header_read_timeout = limit;
        self
    }

    /// A receiver that turns true when the server begins its shutdown.
    pub fn closing(&self) -> tokio::sync::watch::Receiver<bool> {
        self.closing.subscribe()
    }

    /// Whether any user exists (then every non-public route needs a credential).
    ///
    /// Errors: the database (500).
    pub async fn auth_enabled(&self) -> Result<bool, AppError> {
        use std::sync::atomic::Ordering;
        if self.users_known.load(Ordering::Relaxed) {
            return Ok(true);
        }
        // "No users" is remembered for a second: a user created meanwhile (by the CLI, in
        // another process) turns auth on within that second, and a request costs no query.
        let fresh = {
            let checked = self.no_users_checked.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            checked.as_ref().is_some_and(|w| w.elapsed() < NO_USERS_RECHECK)
        };
        if fresh {
            return Ok(false);
        }
        let known = crate::runtime::users::any(&self.execs).await?;
        if known {
            self.users_known.store(true, Ordering::Relaxed);
        } else {
            let mut checked = self.no_users_checked.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            *checked = Some(crate::clock::Stopwatch::start());
        }
        Ok(known)
    }

    /// The worker pool.
    pub fn pool(&self) -> &Pool {
        self.specs.pool()
    }
}

/// The whole application: routes, a JSON 404 for unknown paths, and the layers (request id,
/// trace, HTTP latency metrics, timeout, gzip).
pub fn app(state: AppState) -> Router {
    let http_metrics = state.metrics.clone();
    let time_limit = state.request_timeout;
    let webhooks = webhooks::router(&state.webhooks);
    Router::new()
        .merge(health::router())
        .merge(metrics::router())
        .merge(webhooks)
        .merge(api::router())
        .merge(pages::router())
        .route_layer(axum::middleware::from_fn_with_state(state.clone(), auth::authorize))
        // Runs only for matched routes: hands the matched path to the latency layer
        // below (outside auth, so a refusal is recorded under its route too).
        .route_layer(axum::middleware::from_fn(metrics::record_route))
        .fallback(|| async { AppError::NotFound("no such route".into()) })
        .method_not_allowed_fallback(|method: axum::http::Method| async move {
            AppError::MethodNotAllowed(format!("{method} is not allowed on this route"))
        })
        .with_state(state)
        .layer(axum::middleware::map_response_with_state((), error::problem_bodies))
        .layer(CompressionLayer::new())
        .layer(axum::middleware::from_fn(move |req, next| limit_time(time_limit, req, next)))
        .layer(RequestBodyTimeoutLayer::new(BODY_TIMEOUT))
        .layer(axum::middleware::from_fn_with_state(http_metrics, metrics::track))
        .layer(PropagateRequestIdLayer::x_request_id())
        .layer(TraceLayer::new_for_http())
        .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
}

/// The router of a worker replica (`baton serve --role worker`): /healthz, /readyz and /metrics,
/// nothing else (every other path is 404). Workers drive executions; people and forges talk to
/// the API replicas.
pub fn health_app(state: AppState) -> Router {
    let http_metrics = state.metrics.clone();
    Router::new()
        .merge(health::router())
        .merge(metrics::router())
        .route_layer(axum::middleware::from_fn_with_state(state.clone(), auth::authorize))
        .route_layer(axum::middleware::from_fn(metrics::record_route))
        .fallback(|| async { AppError::NotFound("no such route: this replica is a worker (role worker)".into()) })
        .with_state(state)
        .layer(axum::middleware::map_response_with_state((), error::problem_bodies))
        .layer(axum::middleware::from_fn_with_state(http_metrics, metrics::track))
        .layer(TraceLayer::new_for_http())
}

/// Answers a request that takes longer than `limit` with 503 in the JSON error shape (the
/// handler is dropped; what it wrote before stays written). Streams are limited only until
/// their response head, like every answer.
async fn limit_time(
    limit: Duration,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    match tokio::time::timeout(limit, next.run(req)).await {
        Ok(response) => response,
        Err(_) => AppError::Unavailable(format!(
            "the request took longer than {} s and was stopped; what it did before that stays done, so check \
             before sending it again",
            limit.as_secs_f64()
        ))
        .into_response(),
    }
}

/// Refuses an address other than loopback while no user is configured (the server would be
/// open to the network).
///
/// Errors ([`BadInput`]): a non-loopback address without users, saying what to do.
pub fn check_bind(addr: SocketAddr, has_users: bool) -> Result<(), BadInput> {
    if addr.ip().is_loopback() || has_users {
        return Ok(());
    }
    Err(BadInput(format!(
        "--bind {addr}: no users are configured, so the server would be open to the network; create one first \
         (baton token create --user NAME --role admin) or bind a loopback address (127.0.0.1, ::1)"
    )))
}

/// Serves [`app`] on `listener` until `shutdown` completes, then lets in-flight requests finish
/// for up to [`DRAIN_TIMEOUT`] (a stalled client or an open event stream cannot hold the
/// shutdown longer).
///
/// Each connection is HTTP/1.1 through hyper, with the state's header-read timeout
/// ([`HEADER_READ_TIMEOUT`] by default): a client that begins a request and never finishes its
/// headers is disconnected.
///
/// Errors: none today; an accept error (such as running out of file descriptors) is logged
/// and the loop goes on after a short pause.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    use hyper_util::rt::{TokioIo, TokioTimer};
    let closing = state.closing.clone();
    let header_read_timeout = state.header_read_timeout;
    let router = if state.health_only { health_app(state) } else { app(state) };
    let service = hyper_util::service::TowerToHyperService::new(router);
    let connections = hyper_util::server::graceful::GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let stream = match accepted {
            Ok((stream, _peer)) => stream,
            Err(e) => {
                tracing::warn!("accepting a connection: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(header_read_timeout)
            .serve_connection(TokioIo::new(stream), service.clone());
        let connection = connections.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!("connection ended: {e}");
            }
        });
    }
    drop(listener);
    // Event streams end when `closing` turns true; other requests finish on their own.
    let _ = closing.send(true);
    tokio::select! {
        () = connections.shutdown() => {}
        () = tokio::time::sleep(DRAIN_TIMEOUT) => {
            tracing::warn!("connections still open after {DRAIN_TIMEOUT:?}; closing them");
        }
    }
    Ok(())
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
