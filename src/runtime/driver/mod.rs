//! `baton execute run`: the headless driver of one execution.
//!
//! It asks the engine for actions and carries out DISPATCH (real agent processes, each attempt
//! in a fresh worktree of the feature branch `baton/<task_id>`) and GATE (the plan's command in
//! an integration worktree) itself; on APPROVAL / FEEDBACK / INTERACT it prints the action and
//! exits 3 with everything saved, so the next `run` continues. Never a busy loop: it waits on
//! agent exits.
//!
//! Crash safety: a dispatch is journaled before the launch; each agent runs under the detached
//! `baton __attempt` shim. On start the driver recovers every in-flight attempt: never started →
//! launch it; still running (its lock held) → re-adopt it; finished while no driver watched it
//! (baton down, or the execution paused) → harvest its exit record; died → kill its process
//! group and run it again in a fresh worktree; running or finished but its worktree gone → stop
//! it and run it again the same way ([`crate::runtime::agent::interrupt`]). Completed steps
//! never run again. A pause holds back new dispatches: the driver waits until it is lifted.
//! `BATON_CRASH_AT=<point>` makes the process exit at a named point (see [`CRASH_POINTS`],
//! owned with the other test crash hooks by [`crate::crash`]) so tests can prove it.
//!
//! Output: the progress of a run (started or resumed, each dispatch, result, gate and
//! recovery, budget notes) is for the user of `execute run` and goes to stderr a line each;
//! diagnostics nobody asked for (an invalid reported cost, an unpriced model, an orphan gate
//! stopped, a crash point) go through `tracing`.
//!
//! The parts: `options` (what a run is asked, how it ended), `start` (creating or resuming an
//! execution, then the loop), `drive` (the run loop), `agents` (how an agent name runs),
//! `launch` (dispatch and launch of attempts), `harvest` (finished attempts become results),
//! `gate`, `ci` (the `ci` and `review` gates without a command: forge checks, the reviewer),
//! `budget` (ceiling, forecast, the usage watch), `quota` (waits for an agent
//! account's usage limit, fallback agents) and `recover` (after a crash). This
//! file holds the state they share: the `Driver`, its running attempts and shared slots,
//! and the crash points. What a run keeps on disk for others to read is `runtime::runs`.

mod agents;
mod budget;
mod ci;
mod drive;
mod gate;
mod harvest;
mod launch;
mod options;
mod quota;
mod recover;
mod start;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

use crate::git::GitRepo;
use crate::model::event::{Event, EventKind};
use crate::model::state::ExecutionState;
use crate::runtime::agent::roster::Roster;
use crate::runtime::agent::shim::{ExitRecord, WaitError};
use crate::runtime::config::{Config, DataDir};
use crate::runtime::executions::Executions;
use crate::runtime::lease;
use crate::runtime::runs::RunMeta;
use crate::store::LeaseInfo;

pub use options::{branch_log, Interrupted, Parked, RunOptions, RunOutcome, PROFILES};
pub use start::{check_new_run, harvest_finished, prepare, run};

use crate::crash::at_point as crash_point;
pub use crate::crash::CRASH_POINTS;

/// How often a driver renews its lease while it waits (a third of its lifetime, see
/// [`lease::renew_every`]).
fn renew_every() -> Duration {
    lease::renew_every()
}

/// The remote feature branches are pushed to (by a `ci` gate and by a merge).
pub const REMOTE: &str = crate::runtime::remote::REMOTE;

pub use crate::runtime::runs::feature_branch;

/// One run of one execution: what it drives with, and the attempts it has running.
struct Driver {
    execs: Executions,
    data: DataDir,
    config: Config,
    repo: GitRepo,
    meta: RunMeta,
    roster: Roster,
    default_profile: String,
    cap: usize,
    env: Vec<(String, String)>,
    baton_exe: PathBuf,
    auto_approve: bool,
    inflight: JoinSet<Finished>,
    running: usize,
    slots: Vec<Arc<Semaphore>>,
    /// One group of permits (one per slot semaphore) per running attempt.
    permits: Vec<Vec<OwnedSemaphorePermit>>,
    /// Permits taken for the attempt being dispatched, handed to it at launch.
    reserved: Option<Vec<OwnedSemaphorePermit>>,
    /// Running attempts whose streamed usage is watched against the ceiling.
    live: Vec<LiveAttempt>,
    /// The price table (`baton.toml` over the built-in rows).
    prices: crate::pmo::pricing::PriceTable,
    /// The clock quota waits are measured by.
    clock: crate::clock::Clock,

    /// Woken when a forge webhook concerns this execution's ci gate (`baton serve`'s pool);
    /// without it, the ci wait polls only.
    wake: Option<Arc<tokio::sync::Notify>>,

    /// The lease this run holds (its epoch is the fence every append carries); `None` only
    /// before it is taken.
    lease: Option<LeaseInfo>,
    /// The feature branch is pushed to the project's remote after each consolidation, and a
    /// step whose commit is already there is recorded from it (PostgreSQL, a project with
    /// `repo_url`: [`crate::runtime::remote`]).
    remote: bool,

    /// Worktree environment patterns from `baton.toml` (`[worktree]` and the projects
    /// registered on this repository), beside the checkout's `.worktreeinclude`.
    env_include: Vec<String>,
}

/// A running attempt, as the budget watch sees it.
struct LiveAttempt {
    step_id: String,
    run_dir: PathBuf,
    model: String,
    /// What its stdout has streamed so far, read incrementally.
    usage: crate::runtime::spend::UsageStream,
    /// Warned that its usage has no price (so it cannot be watched).
    unpriced: bool,
}

/// An attempt whose shim exited (or could not be watched), as the run loop receives it.
struct Finished {
    step_id: String,
    attempt: u32,
    run_dir: PathBuf,
    result: Result<ExitRecord, WaitError>,
}

impl Driver {
    /// Journals `kind` as `baton`, under `key`.
    async fn record(&self, state: &mut ExecutionState, kind: EventKind, key: String) -> anyhow::Result<()> {
        let event = Event::new(kind).by("baton").with_key(key);
        self.journal(state, event).await?;
        Ok(())
    }

    /// Journals `event` fenced by the run's lease: once another replica took the lease over,
    /// the append is refused (nothing written) and the run stops
    /// ([`crate::runtime::executions::is_fenced`]).
    async fn journal(&self, state: &mut ExecutionState, event: Event) -> anyhow::Result<crate::engine::Applied> {
        let fence = self.lease.as_ref().map(LeaseInfo::fence);
        self.execs.record_fenced(state, event, fence.as_ref()).await
    }

    /// Free permits of the scarcest shared slot semaphore (unbounded without any).
    fn shared_slots_free(&self) -> usize {
        self.slots.iter().map(|s| s.available_permits()).min().unwrap_or(usize::MAX)
    }

    /// One permit of every shared slot semaphore, or none (all or nothing).
    fn reserve_slots(&self) -> Option<Vec<OwnedSemaphorePermit>> {
        self.slots.iter().map(|s| s.clone().try_acquire_owned().ok()).collect()
    }

    /// Counts a launched attempt with the permits reserved for it before its dispatch; a
    /// re-adopted attempt takes what is free (it runs anyway when its slots are taken).
    fn started_one(&mut self) {
        self.running += 1;
        let group = self
            .reserved
            .take()
            .unwrap_or_else(|| self.slots.iter().filter_map(|s| s.clone().try_acquire_owned().ok()).collect());
        self.permits.push(group);
    }

    /// Counts a finished attempt and frees its permits.
    fn finished_one(&mut self) {
        self.running = self.running.saturating_sub(1);
        self.permits.pop();
    }
}
