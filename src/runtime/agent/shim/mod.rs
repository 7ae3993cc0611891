//! Run directories and the attempt shim: one agent subprocess per attempt, crash-safe.
//!
//! A run directory is `<data>/runs/<task_id>/<step_id>/<attempt>/` and is used exactly once. The
//! caller writes [`AttemptSpec`] as `attempt.json` (plus the prompt file) with
//! [`prepare_run_dir`], then [`launch`](fn@launch)es `baton __attempt <run-dir>`, a detached shim that runs
//! [`run_shim`]. The shim takes an exclusive `flock` on `<run-dir>/lock` for its whole life, starts
//! the agent in its own process group (stdout and stderr go to files in the run directory), writes
//! `started.json`, enforces the timeout and finally writes `exit.json` before it releases the lock.
//!
//! Invariants: the lock (never a pid) says whether an attempt is alive; `started.json` and
//! `exit.json` are written atomically (tmp file, fsync, rename, fsync of the directory), so a reader
//! sees a whole record or none; `exit.json` is written while the lock is still held, so "lock free
//! and no `exit.json`" means the shim died. Text from the prompt or the agent never reaches a
//! shell: the agent is started from an argv with a cleared, explicit environment.
//!
//! This file owns the run directory's file names, the shim's exit codes and its timing constants,
//! and re-exports the pieces; it holds no logic. The children, one job each: [`records`] (the
//! on-disk attempt records: spec, started, exit; atomic writes and reads), [`lifecycle`] (the
//! `baton __attempt` process's entry and the agent's supervision), [`inspect`](mod@inspect)
//! (reading an attempt's state, waiting for it), [`abandon`](mod@abandon) (giving up a run
//! directory whose shim never started), [`kill`] (killing an attempt's processes) and
//! [`launch`](mod@launch) (starting the detached shim).

use std::time::Duration;

pub mod abandon;
pub mod inspect;
pub mod kill;
pub mod launch;
pub mod lifecycle;
pub mod records;
#[cfg(test)]
mod tests;

pub use abandon::abandon;
pub use inspect::{inspect, wait_until_finished, AttemptState, WaitError};
pub use kill::kill_attempt;
pub use launch::{launch, LaunchedAttempt, SHIM_LOCK_WAIT};
pub use lifecycle::{run_shim, supervise, SuperviseError};
pub(super) use records::write_atomic;
pub use records::{
    prepare_run_dir, read_exit, read_output, read_started, run_dir, AttemptSpec, ExitRecord, StartedRecord,
};

/// Name of the attempt specification file in a run directory (JSON, [`AttemptSpec`]).
pub const ATTEMPT_FILE: &str = "attempt.json";
/// Name of the record the shim writes once the agent is running (JSON, [`StartedRecord`]).
pub const STARTED_FILE: &str = "started.json";
/// Name of the final record the shim writes when the attempt is over (JSON, [`ExitRecord`]).
pub const EXIT_FILE: &str = "exit.json";
/// Name of the mark [`abandon`](fn@abandon) leaves in a run directory whose shim never started: a shim
/// that finds it once it holds the lock exits without starting the agent.
pub const ABANDONED_FILE: &str = "abandoned.json";
/// Name of the lock file the shim holds an exclusive `flock` on for its whole life.
pub const LOCK_FILE: &str = "lock";
/// Name of the file that receives the agent's stdout.
pub const STDOUT_FILE: &str = "stdout";
/// Name of the file that receives the agent's stderr.
pub const STDERR_FILE: &str = "stderr";
/// Time between the SIGTERM and the SIGKILL sent to a timed-out agent's process group, and to
/// the processes an attempt leaves behind.
pub const KILL_GRACE: Duration = Duration::from_secs(5);
/// Interval at which [`wait_until_finished`] polls the lock.
pub const POLL_INTERVAL: Duration = Duration::from_millis(200);

/// Exit code of `baton __attempt` when it wrote an exit record (whatever the agent did).
pub const SHIM_EXIT_RECORDED: u8 = 0;
/// Exit code of `baton __attempt` when it failed without writing an exit record.
pub const SHIM_EXIT_FAILED: u8 = 2;
/// Exit code of `baton __attempt` when the run directory had already been used by another shim.
pub const SHIM_EXIT_ALREADY_USED: u8 = 3;
