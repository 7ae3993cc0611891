//! What `execute run` is asked to do ([`RunOptions`]) and how a run ended ([`RunOutcome`],
//! [`Interrupted`], the feature branch's log): the driver's public types. This module holds
//! data only; it never runs anything.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::{watch, Semaphore};

use crate::git::{self, GitRepo};
use crate::model::action::Action;
use crate::model::plan::MachinePlan;
use crate::runtime::blocking;
use crate::runtime::executions::Executions;

/// What `execute run` is asked to do.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// A parsed plan (its task id resumes a live execution of the same plan).
    pub plan: Option<MachinePlan>,
    /// The execution to resume, when no plan is given.
    pub task_id: Option<String>,
    /// The repository (default `.` for a new execution, the execution's own when resuming).
    pub repo: Option<PathBuf>,
    /// Default agent profile (default `claude`, or the execution's own when resuming).
    pub agent: Option<String>,
    /// Base of the feature branch (default: the repository's current branch tip).
    pub base: Option<String>,
    /// Concurrent agents (default: baton.toml).
    pub max_parallel: Option<usize>,
    /// Approve every approval automatically with a printed notice (`baton demo`).
    pub auto_approve: bool,
    /// Agent slots shared with other drivers (`baton serve`: the global and the project's
    /// cap): an attempt launches only when every one of them has a free permit, and holds one
    /// permit of each until it finishes.
    pub slots: Vec<Arc<Semaphore>>,
    /// Stops the run when it turns `true` (`baton serve` shutting down, pausing or cancelling):
    /// the run returns [`Interrupted`] exactly as after Ctrl-C. Without it, Ctrl-C stops the run.
    pub stop: Option<watch::Receiver<bool>>,
    /// The USD ceiling and where it comes from (`--max-spend-usd`, `spec`, `project`): set on
    /// the execution when it differs from its current one. Without it, a new execution takes
    /// `BATON_RUN_BUDGET_USD` (or its alias) when set.
    pub budget: Option<(f64, String)>,
    /// The executions (and so the store) to drive with, shared with the caller's other drivers
    /// (`baton serve`: one store, so concurrent drivers' appends share group commits). Without
    /// it, the run opens its own.
    pub execs: Option<Executions>,
    /// Notified when a forge webhook concerns the execution's ci gate (`baton serve`'s pool
    /// passes its driver's wake): the ci wait reads the checks at once instead of at its next
    /// poll.
    pub wake: Option<Arc<tokio::sync::Notify>>,
    /// The forge link (`forge_repo`) of the project a new execution is fired for; `None` (or
    /// empty) for none. A `ci` gate without a command needs one (refused at plan check).
    pub forge_repo: Option<String>,
    /// The registered project a new execution is fired for (its `[projects.<name>]` settings,
    /// e.g. `review_agent`, apply at plan check); `None` for a headless run.
    pub project: Option<String>,
}

/// How a run ended: the action it stopped on (COMPLETE, FAILED, or a human decision).
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// The execution.
    pub task_id: String,
    /// The action the run stopped on.
    pub action: Action,
    /// The feature branch, `baton/<task_id>`.
    pub branch: String,
    /// The repository the execution works on.
    pub repo: PathBuf,
}

/// Agent profiles `--agent` and `baton.toml` accept.
pub const PROFILES: &[&str] = &["demo", "claude", "codex", "gemini", "command"];

/// `execute run` was interrupted (Ctrl-C); the CLI exits 130.
#[derive(Debug, thiserror::Error)]
#[error(
    "interrupted: execution {task_id} is saved and its running agents keep going; \
     `baton execute run --task-id {task_id}` picks them up"
)]
pub struct Interrupted {
    /// The execution.
    pub task_id: String,
}

/// The run parked its execution (paused, with this reason) instead of failing paid-for work:
/// consolidation would move the feature branch under a working tree that has it checked out
/// (issue 14.5). Every step commit is kept (the finished attempt stays dispatched, its commit
/// under its attempt ref); resuming (`execute resume` then `execute run`, or the board's
/// resume) harvests it again. The CLI exits 3 (waiting for a human).
#[derive(Debug, thiserror::Error)]
#[error("parked: {reason}")]
pub struct Parked {
    /// The execution.
    pub task_id: String,
    /// What the human must do (`feature branch `baton/x` is checked out at PATH: switch away
    /// and resume`).
    pub reason: String,
}

/// The newest `limit` commits of the feature branch (newest first).
pub async fn branch_log(repo: &Path, branch: &str, limit: usize) -> anyhow::Result<Vec<git::CommitInfo>> {
    let (path, b) = (repo.to_path_buf(), branch.to_string());
    let log = blocking(move || GitRepo::open(&path).and_then(|r| r.log(&b, limit))).await??;
    Ok(log)
}
