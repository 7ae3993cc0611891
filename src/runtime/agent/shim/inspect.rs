//! Reading an attempt's state from its run directory ([`inspect`]: the lock, never a pid, says
//! whether it is alive) and waiting for it to finish ([`wait_until_finished`]). It never starts,
//! signals or writes anything.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context, Result};
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use super::records::{read_exit, ExitRecord};
use super::{LOCK_FILE, POLL_INTERVAL, STARTED_FILE};

/// The state of an attempt as read from its run directory (see [`inspect`]).
#[derive(Debug, Clone, PartialEq)]
pub enum AttemptState {
    /// No `started.json`, no `exit.json` and the lock is free: the shim never got going.
    NotStarted,
    /// A live shim holds the lock (the agent may still be starting).
    Running,
    /// The shim wrote its exit record.
    Finished(ExitRecord),
    /// The agent was started but the lock is free and there is no exit record: the shim died.
    /// The agent's process group may still be alive: call [`kill_attempt`](super::kill_attempt) before re-running.
    Died,
}

/// Why waiting for an attempt ended without an exit record.
#[derive(Debug, thiserror::Error)]
pub enum WaitError {
    /// The shim is gone without an exit record (crash or kill of the shim).
    #[error("attempt in {0} died without an exit record")]
    Died(PathBuf),
    /// Nothing ever ran in the run directory (the shim failed before taking its lock).
    #[error("attempt in {0} never started")]
    NotStarted(PathBuf),
    /// Reading the run directory failed.
    #[error(transparent)]
    Io(#[from] anyhow::Error),
}

/// Reads the state of the attempt in `run_dir`; liveness is decided by the lock, never by a pid.
///
/// Tries `flock(LOCK_SH|LOCK_NB)` on `<run-dir>/lock` for an instant: refused means a shim holds
/// its exclusive lock, i.e. [`AttemptState::Running`] (a shared probe, so concurrent `inspect`s
/// never see each other as a shim). While it holds the lock it re-reads `exit.json`, so a shim that
/// finished in between is reported [`AttemptState::Finished`], not [`AttemptState::Died`]. Never
/// creates files. Errors on IO failure or an unparsable record.
pub fn inspect(run_dir: &Path) -> Result<AttemptState> {
    if let Some(record) = read_exit(run_dir)? {
        return Ok(AttemptState::Finished(record));
    }
    let lock_path = run_dir.join(LOCK_FILE);
    let _held = match File::open(&lock_path) {
        Ok(file) => match Flock::lock(file, FlockArg::LockSharedNonblock) {
            Ok(held) => Some(held),
            Err((_, Errno::EWOULDBLOCK)) => return Ok(AttemptState::Running),
            Err((_, errno)) => {
                return Err(anyhow!("locking {}: {errno}", lock_path.display()));
            }
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| format!("opening {}", lock_path.display())),
    };
    if let Some(record) = read_exit(run_dir)? {
        return Ok(AttemptState::Finished(record));
    }
    if run_dir.join(STARTED_FILE).exists() {
        Ok(AttemptState::Died)
    } else {
        Ok(AttemptState::NotStarted)
    }
}

/// Waits (polling the lock every [`POLL_INTERVAL`]) until the attempt's exit record exists.
///
/// For attempts re-adopted after a restart. Errors with [`WaitError::Died`] when the shim is gone
/// without a record and [`WaitError::NotStarted`] when nothing ever ran in `run_dir`.
pub async fn wait_until_finished(run_dir: &Path) -> Result<ExitRecord, WaitError> {
    loop {
        match inspect(run_dir)? {
            AttemptState::Finished(record) => return Ok(record),
            AttemptState::Running => tokio::time::sleep(POLL_INTERVAL).await,
            AttemptState::Died => return Err(WaitError::Died(run_dir.to_path_buf())),
            AttemptState::NotStarted => return Err(WaitError::NotStarted(run_dir.to_path_buf())),
        }
    }
}
