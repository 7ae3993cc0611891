//! `baton serve` start-up: checks the address, locks the data directory, builds the app, has
//! its server key checked against the other replicas' (`runtime::auth::check_shared_key`), builds
//! the web state, recovers executions, serves until a signal, then stops the drivers. It
//! decides nothing about executions itself; requests are the web layer's.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context as _;

use super::{daemon, demo};
use crate::runtime;
use crate::runtime::app::{App, AppConfig};
use crate::runtime::config::DataDir;

/// What a replica of `baton serve` does (`--role`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Role {
    /// The API and the board; no drivers, no periodic jobs.
    Api,
    /// Drivers and periodic jobs; over HTTP only /healthz, /readyz and /metrics.
    Worker,
    /// Both.
    All,
}

impl Role {
    fn drives(self) -> bool {
        matches!(self, Role::Worker | Role::All)
    }
}

/// How long `baton serve` waits for its drivers to stop on shutdown.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(30);

/// `baton serve`: checks the address, locks the data dir, recovers every execution it was
/// driving, seeds the demo when asked, publishes its address in `serve.json` (for `baton daemon
/// status`), serves until SIGINT/SIGTERM, then stops its drivers.
pub(super) async fn serve(
    data_dir: &Path,
    bind: std::net::SocketAddr,
    demo: bool,
    max_agents: usize,
    role: Role,
) -> anyhow::Result<ExitCode> {
    let data = DataDir::open(data_dir)?;
    if let Some(secs) = data.config()?.cluster.lease_secs {
        if secs < 1 {
            return Err(runtime::BadInput(format!("[cluster] lease_secs = {secs}: expected 1 or more seconds")).into());
        }
        runtime::lease::set_ttl_secs(secs);
    }
    // A bad ceiling in the environment would fail every fired spec's driver: refuse it now.
    runtime::spend::ceiling_from_env(|k| std::env::var(k).ok())?;
    let _lock = crate::runtime::server_lock(&data)?;
    let app = App::build_in(data.clone(), AppConfig::new(data.root()).max_agents(max_agents)).await?;
    // Every replica of one database signs with one key: a replica with another refuses to start.
    let check = runtime::auth::check_shared_key(&app.execs, &app.key, &app.clock.now_rfc3339()).await?;
    if let runtime::auth::KeyCheck::Replaced { previous } = check {
        errln!(
            "warning: {} is not the key this data dir had (fingerprint {previous}, now {}): decisions signed \
             before no longer verify (`baton audit verify`); restore the old key from a backup if this was not meant",
            data.root().join(runtime::auth::KEY_FILE).display(),
            app.key.fingerprint()
        );
    }
    let has_users = runtime::users::any(&app.execs).await?;
    crate::web::check_bind(bind, has_users)?;
    let pool = app.pool.clone();
    pool.set_drives(role.drives());
    let env = |k: &str| std::env::var(k).ok();
    let settings = data.config()?.forge_settings(env);
    let forges = crate::runtime::forge::Forges::new(settings.clone(), crate::forge::RetryPolicy::default())?;
    let state = crate::web::AppState::from_app(app)?
        .with_webhooks(crate::web::WebhookConfig::from_settings(&settings, env))
        .with_forges(forges)
        .with_health_only(role == Role::Worker);
    let bell = runtime::changes::Bell::start(&state.execs, state.closing());
    let state = state.with_bell(bell);
    state.specs.load_project_caps().await?;
    let recovered = state.specs.recover_fires().await?;
    if recovered > 0 {
        errln!("recovered {recovered} specs whose fire was interrupted");
    }
    if demo {
        demo::seed_board(&data, &state.specs).await?;
    }
    let listener = tokio::net::TcpListener::bind(bind).await.map_err(|e| {
        runtime::BadInput(format!("--bind {bind}: {e} (is another server listening there? pick another port)"))
    })?;
    let addr = listener.local_addr().context("reading the listening address")?;
    let _published = daemon::publish(&data, addr)?;
    let public_url = std::env::var("BATON_PUBLIC_URL")
        .ok()
        .filter(|u| !u.trim().is_empty())
        .unwrap_or_else(|| format!("http://{addr}"));
    let reporter = crate::runtime::report::Reporter::new(
        state.execs.clone(),
        state.forges.clone(),
        &public_url,
        state.ops.clock().clone(),
    );
    // `baton execute …` calls on this data dir are run here (see `relay`).
    let _relay = super::relay::listen(&data, state.ops.clone()).await?;
    if role.drives() {
        tokio::spawn(reporter.run(state.closing()));
        tokio::spawn(state.remediation.clone().run(state.closing()));
        let recovered = pool.recover().await?;
        if recovered > 0 {
            errln!("resumed {recovered} executions");
        }
        tokio::spawn(pool.clone().claim_loop());
    }
    let what = match role {
        Role::All => "serving",
        Role::Api => "serving the API and board (role api: no drivers) at",
        Role::Worker => "driving executions (role worker: only /healthz, /readyz and /metrics at",
    };
    let close = if role == Role::Worker { ")" } else { "" };
    errln!("baton {what} http://{addr}/{close} (data dir {})", data_dir.display());
    if has_users {
        errln!("authentication on: API calls need a token (Authorization: Bearer …), browsers sign in at /login");
    } else {
        errln!(
            "open mode: no users are configured and the server only listens on loopback; anyone on this machine \
             may act (create users with `baton token create --user NAME --role ROLE`)"
        );
    }
    tracing::info!(%addr, "serving");
    crate::web::serve(listener, state, crate::web::shutdown_signal()).await?;
    errln!("stopping: drivers stop now; running agents keep going and are picked up at the next start");
    pool.shutdown(SHUTDOWN_GRACE).await;
    errln!("baton serve stopped");
    Ok(ExitCode::SUCCESS)
}
