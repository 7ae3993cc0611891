//! Interrupting an attempt that cannot go on: recovery after a restart finds its worktree gone.
//!
//! An attempt re-adopted (or harvested) after a restart whose worktree directory was deleted
//! meanwhile cannot produce anything: its agent works in a directory that no longer exists and
//! its changes cannot be committed. Recovery asks [`lost_worktree`] first; when it names a
//! reason, [`interrupt`] stops the attempt — its process group and every descendant, through
//! its shim or its cgroup — and writes [`INTERRUPTED_FILE`] in the launch's run directory. The
//! driver then runs the attempt again in a fresh worktree as it does for an attempt that died
//! with baton: the same attempt number in a new launch directory (`<attempt>-r<n>`), no journal
//! event, so an interrupted launch is never a failed attempt and never uses up a retry.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::shim::{self, AttemptSpec, AttemptState, ATTEMPT_FILE, KILL_GRACE};
use crate::clock::{now_rfc3339, Stopwatch};

/// Written in a launch's run directory when recovery interrupted it (JSON, [`Interrupted`]).
pub const INTERRUPTED_FILE: &str = "interrupted.json";

/// How long [`interrupt`] waits for the shim to let go after the kill: its own grace for the
/// processes the agent left behind, and some.
const SHIM_LET_GO: Duration = Duration::from_secs(KILL_GRACE.as_secs() + 10);

/// Why and when recovery interrupted a launch of an attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interrupted {
    /// Why, e.g. ``its worktree `/…/1.1-1` is gone``.
    pub reason: String,
    /// When, RFC 3339 (UTC, seconds).
    pub at: String,
}

/// The reason the attempt in `run_dir` cannot go on because its worktree (the working directory
/// of its `attempt.json`) is gone: the directory or its `.git` entry no longer exists. `None`
/// when it is there, or when the run directory has no readable spec to say where it was.
pub fn lost_worktree(run_dir: &Path) -> Option<String> {
    let text = std::fs::read(run_dir.join(ATTEMPT_FILE)).ok()?;
    let spec: AttemptSpec = serde_json::from_slice(&text).ok()?;
    let intact = spec.cwd.is_dir() && spec.cwd.join(".git").exists();
    (!intact).then(|| format!("its worktree `{}` is gone", spec.cwd.display()))
}

/// Stops the attempt in `run_dir` if it is still running (see [`shim::kill_attempt`]; its shim
/// then ends every process the agent left behind and writes its exit record) and waits until
/// the shim lets go of the run directory (up to [`KILL_GRACE`] + 10 s); then records `reason` in
/// [`INTERRUPTED_FILE`]. A finished attempt is only recorded: its process group id may belong to
/// someone else by now.
///
/// Errors: the record cannot be written, or the run directory cannot be read.
pub async fn interrupt(run_dir: &Path, reason: &str) -> Result<()> {
    if matches!(shim::inspect(run_dir)?, AttemptState::Running) {
        let _ = shim::kill_attempt(run_dir);
        let waiting = Stopwatch::start();
        while matches!(shim::inspect(run_dir)?, AttemptState::Running) && waiting.elapsed() < SHIM_LET_GO {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let record = Interrupted { reason: reason.to_owned(), at: now_rfc3339() };
    let bytes = serde_json::to_vec_pretty(&record).context("serializing the interruption")?;
    shim::write_atomic(run_dir, INTERRUPTED_FILE, &bytes)
}

/// The interruption recorded in `run_dir`, if recovery interrupted that launch.
pub fn read_interrupted(run_dir: &Path) -> Option<Interrupted> {
    let text = std::fs::read(run_dir.join(INTERRUPTED_FILE)).ok()?;
    serde_json::from_slice(&text).ok()
}

/// For recovery: when the attempt in `run_dir`, found `state` (running or finished), lost its
/// worktree, interrupts it (see [`interrupt`]) and returns the reason; the caller then runs it
/// again in a fresh worktree. `None` (nothing done) otherwise.
///
/// Errors: as [`interrupt`].
pub async fn interrupt_if_worktree_lost(run_dir: &Path, state: &AttemptState) -> Result<Option<String>> {
    if !matches!(state, AttemptState::Running | AttemptState::Finished(_)) {
        return Ok(None);
    }
    let Some(reason) = lost_worktree(run_dir) else { return Ok(None) };
    interrupt(run_dir, &reason).await?;
    Ok(Some(reason))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(cwd: &Path, argv: &[&str]) -> AttemptSpec {
        AttemptSpec {
            argv: argv.iter().map(|s| (*s).to_owned()).collect(),
            cwd: cwd.to_path_buf(),
            env: vec![("PATH".to_owned(), std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".to_owned()))],
            env_from: Vec::new(),
            prompt_file: None,
            timeout_secs: 0,
            final_event: None,
            cgroup: false,
        }
    }

    #[tokio::test]
    async fn a_running_attempt_whose_worktree_vanished_is_stopped_and_recorded() {
        let tmp = tempfile::tempdir().unwrap();
        let work = tmp.path().join("wt");
        std::fs::create_dir_all(work.join(".git")).unwrap();
        let run = tmp.path().join("run");
        shim::prepare_run_dir(&run, &spec(&work, &["sleep", "30"])).unwrap();
        assert_eq!(lost_worktree(&run), None);
        let shim_thread = {
            let run = run.clone();
            std::thread::spawn(move || shim::supervise(&run))
        };
        let clock = Stopwatch::start();
        while shim::read_started(&run).unwrap().is_none() {
            assert!(clock.elapsed() < Duration::from_secs(5), "never started");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(interrupt_if_worktree_lost(&run, &AttemptState::Running).await.unwrap(), None);
        std::fs::remove_dir_all(&work).unwrap();
        let reason = interrupt_if_worktree_lost(&run, &AttemptState::Running).await.unwrap().unwrap();
        assert_eq!(reason, format!("its worktree `{}` is gone", work.display()));
        let record = shim_thread.join().unwrap().unwrap();
        assert_eq!(record.signal, Some(9), "the agent was stopped: {record:?}");
        assert!(matches!(shim::inspect(&run).unwrap(), AttemptState::Finished(_)));
        assert_eq!(read_interrupted(&run).unwrap().reason, reason);
        // An attempt that never ran, or died, is not interrupted: recovery runs it again anyway.
        assert_eq!(interrupt_if_worktree_lost(&run, &AttemptState::Died).await.unwrap(), None);
    }
}
