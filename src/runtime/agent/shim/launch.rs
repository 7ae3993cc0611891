//! Starting the detached shim (`baton __attempt <run-dir>`, [`launch`]) and the handle the
//! caller keeps ([`LaunchedAttempt`]: wait for the lock, wait for the exit record). It never
//! supervises the agent itself; that is the shim's ([`super::lifecycle`]).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{anyhow, Context, Result};

use super::inspect::{inspect, wait_until_finished, AttemptState, WaitError};
use super::records::ExitRecord;
use super::ATTEMPT_FILE;
use crate::clock::Stopwatch;

/// A shim started by [`launch`]; dropping it leaves the shim (and the agent) running.
#[derive(Debug)]
pub struct LaunchedAttempt {
    shim_pid: u32,
    run_dir: PathBuf,
    exited: tokio::sync::oneshot::Receiver<()>,
    /// `exited` already resolved (in [`LaunchedAttempt::locked`]): it must not be awaited again.
    shim_gone: bool,
}

impl LaunchedAttempt {
    /// Pid of the shim process (informational only: liveness is decided by the lock).
    pub fn shim_pid(&self) -> u32 {
        self.shim_pid
    }

    /// The (absolute) run directory of the attempt.
    pub fn run_dir(&self) -> &Path {
        &self.run_dir
    }

    /// Resolves once the shim holds its lock, has exited, or [`SHIM_LOCK_WAIT`] passed. A
    /// driver awaits this before it journals anything more: from then on, a driver that dies
    /// and restarts sees the attempt as running, never as "not started" — which would launch
    /// a second shim into the same worktree (seen under load at the `after-launch` crash
    /// point).
    ///
    /// Errors: the run directory cannot be inspected.
    pub async fn locked(&mut self) -> Result<()> {
        let waiting = Stopwatch::start();
        while waiting.elapsed() < SHIM_LOCK_WAIT {
            if !matches!(inspect(&self.run_dir)?, AttemptState::NotStarted) {
                break;
            }
            match self.exited.try_recv() {
                Err(tokio::sync::oneshot::error::TryRecvError::Empty) => {}
                // The shim exited (its exit record, if any, says why).
                _ => {
                    self.shim_gone = true;
                    break;
                }
            }
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        Ok(())
    }

    /// Resolves once the attempt's exit record exists, returning it.
    ///
    /// Waits for the shim process to exit (no polling), then reads the run directory; if another
    /// shim owns the directory it keeps waiting through [`wait_until_finished`]. Errors with
    /// [`WaitError::Died`] / [`WaitError::NotStarted`] when the shim exited without a record.
    pub async fn wait(self) -> Result<ExitRecord, WaitError> {
        // An Err only means the reaper thread is gone; fall back to polling the lock.
        if !self.shim_gone {
            let _ = self.exited.await;
        }
        wait_until_finished(&self.run_dir).await
    }
}

/// Starts the detached shim `<baton_exe> __attempt <run_dir>` with null stdio.
///
/// The shim is deliberately left in baton's process group so that its `setsid` succeeds; it then
/// runs in its own session and survives baton. A background thread reaps it (one blocked OS thread
/// per live attempt). Callable outside a tokio runtime; [`LaunchedAttempt::wait`] needs one.
/// Errors if `run_dir` has no `attempt.json` or the shim cannot be spawned.
pub fn launch(baton_exe: &Path, run_dir: &Path) -> Result<LaunchedAttempt> {
    let run_dir =
        std::path::absolute(run_dir).with_context(|| format!("resolving run directory {}", run_dir.display()))?;
    if !run_dir.join(ATTEMPT_FILE).is_file() {
        return Err(anyhow!("run directory {} has no {ATTEMPT_FILE}", run_dir.display()));
    }
    let mut child = Command::new(baton_exe)
        .arg("__attempt")
        .arg(&run_dir)
        .current_dir("/")
        // The crash test hooks are meant for the driver, never for the attempts it starts.
        .env_remove(crate::crash::AFTER_COMMIT_VAR)
        .env_remove(crate::crash::BEFORE_EFFECT_VAR)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting attempt shim `{} __attempt {}`", baton_exe.display(), run_dir.display()))?;
    let shim_pid = child.id();
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name(format!("baton-shim-{shim_pid}"))
        .spawn(move || {
            let _ = child.wait();
            let _ = tx.send(());
        })
        .context("starting the shim reaper thread")?;
    Ok(LaunchedAttempt { shim_pid, run_dir, exited: rx, shim_gone: false })
}

/// How long [`LaunchedAttempt::locked`] waits for a new shim to take its lock.
pub const SHIM_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(10);
