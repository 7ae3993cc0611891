//! Baton: turns specs into merged pull requests with AI coding agents.
//!
//! The crate is a pure engine inside an imperative shell (see `docs/src/engine.md`, "Architecture"):
//! arrows point down only, `engine` and `model` never do IO, and only `git` touches git.

/// Prints a line to stdout; a closed pipe (`baton … | head`) is ignored rather than a panic.
macro_rules! outln {
    () => {{
        $crate::runtime::console::stdout(format_args!("\n"));
    }};
    ($($arg:tt)*) => {{
        $crate::runtime::console::stdout(format_args!("{}\n", format_args!($($arg)*)));
    }};
}

/// Prints to stdout without a newline; a closed pipe is ignored rather than a panic.
macro_rules! out {
    ($($arg:tt)*) => {{
        $crate::runtime::console::stdout(format_args!($($arg)*));
    }};
}

/// Prints a progress line (progress, notices, errors) for whoever runs the command.
///
/// In a command (`baton execute run`) it goes to stderr, a line each; a closed pipe is ignored
/// rather than a panic, so `baton execute run 2>&1 | head` cannot kill a run midway. Inside
/// `baton serve`, where the pool drives executions ([`runtime::DRIVING`] is set), the line is
/// a `tracing` event at info level (target `baton::progress`) with the execution's `task.id`,
/// so it carries the server log's timestamp and format and can be filtered like any other.
macro_rules! errln {
    ($($arg:tt)*) => {{
        $crate::runtime::progress(&format!($($arg)*));
    }};
}

/// Plan and execution records: `MachinePlan`, `ExecutionState`, `Action`, `Event` (pure data).
pub mod model;

/// The deterministic state machine: `start`, `next_action`, `next_actions`, `apply`, plan validation.
pub mod engine;

/// Spec-queue rules without IO: enrichment.
pub mod pmo;

/// Persistence on SQLite or PostgreSQL: the per-execution event journal, snapshots, summaries and leases.
pub mod store;

/// Git: feature branches, per-attempt worktrees, attempt commits and in-memory cherry-picks.
pub mod git;

/// The imperative shell: drivers that carry out actions, agent launches, gates and recovery.
pub mod runtime;

/// Outbound forge clients: GitHub (octocrab) and Azure DevOps (reqwest): items, pull requests,
/// comments; credentials, retries and error meanings.
pub mod forge;

/// `baton serve`: the REST API (axum) over the runtime's services.
pub mod web;

/// The `baton` command line: argument parsing and the `ACTION:` wire format.
pub mod cli;

/// The one place that reads the wall clock.
pub mod clock;

/// Test hooks that kill the process after its k-th store commit or before its k-th git or
/// forge side effect (debug builds only).
pub mod crash;
