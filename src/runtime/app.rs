//! The composition root: [`App::build`] wires a data dir's store, clock, worker pool and
//! services, the same way for `baton serve`, every CLI command and the tests.
//!
//! It owns no rule: it only builds the services that do ([`Executions`], [`Specs`], [`Ops`])
//! and hands them out. It never serves HTTP and never starts a driver: `baton serve` starts
//! the pool's work (recovery) itself; a one-shot CLI process builds the same services and
//! leaves the pool idle.

use std::path::PathBuf;

use crate::clock::Clock;
use crate::runtime::auth::ServerKey;
use crate::runtime::config::DataDir;
use crate::runtime::executions::Executions;
use crate::runtime::ops::Ops;
use crate::runtime::pool::{Pool, DEFAULT_MAX_AGENTS};
use crate::runtime::specs::Specs;
use crate::store::Workload;

/// What [`App::build`] needs.
#[derive(Debug, Clone)]
pub struct AppConfig {
    /// The data directory (database, worktrees, run directories, `baton.toml`, server key);
    /// created when missing.
    pub data_dir: PathBuf,
    /// Agents running at once across every execution (at least 1).
    pub max_agents: usize,
    /// The clock services read ([`Clock::system`], or a manual one in tests).
    pub clock: Clock,
    /// How the process uses its store ([`Workload::Service`] unless said otherwise).
    pub workload: Workload,
}

impl AppConfig {
    /// The defaults for `data_dir`: [`DEFAULT_MAX_AGENTS`], the wall clock.
    pub fn new(data_dir: impl Into<PathBuf>) -> AppConfig {
        AppConfig {
            data_dir: data_dir.into(),
            max_agents: DEFAULT_MAX_AGENTS,
            clock: Clock::system(),
            workload: Workload::Service,
        }
    }

    /// For a process that runs one command and exits ([`Workload::OneShot`]).
    #[must_use]
    pub fn one_shot(mut self) -> AppConfig {
        self.workload = Workload::OneShot;
        self
    }

    /// With another agent cap.
    #[must_use]
    pub fn max_agents(mut self, n: usize) -> AppConfig {
        self.max_agents = n;
        self
    }

    /// With another clock.
    #[must_use]
    pub fn clock(mut self, clock: Clock) -> AppConfig {
        self.clock = clock;
        self
    }
}

/// Every service of one data dir; cheap to clone.
#[derive(Debug, Clone)]
pub struct App {
    /// The data directory.
    pub data: DataDir,
    /// Durable executions over the data dir's store.
    pub execs: Executions,
    /// The worker pool (idle until something drives it).
    pub pool: Pool,
    /// The spec queue.
    pub specs: Specs,
    /// The operator service: every decision.
    pub ops: Ops,
    /// The server key (sessions, approval links, decision signatures).
    pub key: ServerKey,
    /// The clock.
    pub clock: Clock,
}

impl App {
    /// Opens (creating when missing) the data dir and its database, loads (or creates) the
    /// server key, and builds the services.
    ///
    /// Errors: the data dir cannot be created, the database cannot be opened or migrated, the
    /// key file is unreadable.
    pub async fn build(config: AppConfig) -> anyhow::Result<App> {
        let data = DataDir::open(&config.data_dir)?;
        App::build_in(data, config).await
    }

    /// [`App::build`] over a data dir the caller has opened already (a CLI command's door
    /// opens it once, to report a bad `--data-dir` before anything else); `config.data_dir`
    /// is not read.
    ///
    /// Errors: the database cannot be opened or migrated, the key file is unreadable.
    pub async fn build_in(data: DataDir, config: AppConfig) -> anyhow::Result<App> {
        let execs = Executions::open_for(data, config.workload).await?;
        App::over_pool(Pool::new(execs, config.max_agents), config.clock)
    }

    /// The services over an existing pool (and its executions).
    ///
    /// Errors: the key file is unreadable.
    pub fn over_pool(pool: Pool, clock: Clock) -> anyhow::Result<App> {
        let execs = pool.execs().clone();
        let data = execs.data().clone();
        let key = ServerKey::load_or_create(&data)?;
        let ops = Ops::new(execs.clone(), Some(pool.clone()), key.clone(), clock.clone());
        let specs = Specs::new(pool.clone());
        Ok(App { data, execs, pool, specs, ops, key, clock })
    }
}
