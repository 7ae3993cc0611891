//! The on-disk attempt records of a run directory: the spec the caller writes (`attempt.json`),
//! the `started.json` and `exit.json` the shim writes, and the atomic write and the reads behind
//! them. It never starts, inspects or kills a process.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context, Result};
use serde::{Deserialize, Serialize};

use super::{ATTEMPT_FILE, EXIT_FILE, STARTED_FILE, STDERR_FILE, STDOUT_FILE};
use crate::runtime::agent::final_event::FinalWatch;

/// What to run for one attempt: written by the caller as `<run-dir>/attempt.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptSpec {
    /// The agent's argv; `argv[0]` is looked up on the `PATH` given in `env` (never a shell).
    pub argv: Vec<String>,
    /// Working directory of the agent (the attempt's worktree); must exist.
    pub cwd: PathBuf,
    /// The complete environment of the agent: the shim clears its own and sets exactly these
    /// (and [`AttemptSpec::env_from`]).
    pub env: Vec<(String, String)>,
    /// Variables the shim copies from its own environment (which is Baton's) into the agent's
    /// when it starts it: `(name in the agent's environment, name in the shim's)`. Secrets (an
    /// MCP server's, the agent CLI's API key) travel this way, so this file holds their names,
    /// never their values. A
    /// variable that is not set is a spawn error naming it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_from: Vec<(String, String)>,
    /// File fed to the agent's stdin (relative paths are relative to the run directory);
    /// `None` gives the agent `/dev/null` as stdin.
    pub prompt_file: Option<PathBuf>,
    /// Wall-clock limit in seconds; `0` means no limit.
    pub timeout_secs: u64,
    /// Stop the agent once it printed its final event and stayed running (see [`FinalWatch`]);
    /// `None` waits for it to exit (or time out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_event: Option<FinalWatch>,
    /// Put the agent in a cgroup v2 of its own where the machine allows it (the detached shim
    /// only; see [`crate::runtime::agent::procs`]). Every attempt's descendants are ended with it either way.
    #[serde(default)]
    pub cgroup: bool,
}

/// Written atomically as `started.json` once the agent process exists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartedRecord {
    /// Pid of the shim (`baton __attempt`), the holder of the lock.
    pub shim_pid: u32,
    /// Pid of the agent process.
    pub agent_pid: u32,
    /// Process group of the agent (equal to `agent_pid`: the agent leads its own group).
    pub agent_pgid: u32,
    /// When the agent was started, RFC 3339 (UTC, seconds).
    pub started_at: String,
    /// The attempt's cgroup v2 directory, when it has one: every process of the attempt is in
    /// it, whatever session or parent it has (see [`kill_attempt`](super::kill_attempt)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<PathBuf>,
}

/// Written atomically as `exit.json` when the attempt is over: the harvestable result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExitRecord {
    /// The agent's exit code, if it exited normally.
    pub exit_code: Option<i32>,
    /// The signal that ended the agent, if it was killed by one.
    pub signal: Option<i32>,
    /// Whether the shim ended the agent because its timeout expired.
    pub timed_out: bool,
    /// Whether the shim ended the agent because it kept running after its final event (see
    /// [`FinalWatch`]): the result it printed stands.
    #[serde(default)]
    pub stopped_after_result: bool,
    /// Why the agent could not be started (e.g. ``agent binary `X` not found``); then
    /// `exit_code` and `signal` are `None`.
    pub spawn_error: Option<String>,
    /// When the shim began the attempt, RFC 3339 (UTC, seconds).
    pub started_at: String,
    /// When the attempt ended, RFC 3339 (UTC, seconds).
    pub finished_at: String,
    /// Wall-clock duration of the attempt in milliseconds (monotonic clock).
    pub duration_ms: u64,
}

impl ExitRecord {
    /// True when the agent started, was not timed out and exited with code 0.
    ///
    /// This is the *process* outcome only; an agent's success is decided by its output (see
    /// [`crate::runtime::agent::output`]).
    pub fn exited_cleanly(&self) -> bool {
        self.spawn_error.is_none() && !self.timed_out && self.exit_code == Some(0)
    }

    /// A short human description of how the process ended, e.g. `exit code 1`,
    /// `killed by signal 15 after the timeout`, or the spawn error.
    pub fn describe(&self) -> String {
        if let Some(err) = &self.spawn_error {
            return err.clone();
        }
        let how = match (self.exit_code, self.signal) {
            (Some(code), _) => format!("exit code {code}"),
            (None, Some(sig)) => format!("killed by signal {sig}"),
            (None, None) => "unknown exit status".to_owned(),
        };
        if self.timed_out {
            format!("{how} after the timeout")
        } else if self.stopped_after_result {
            format!("{how}: it kept running after its final result")
        } else {
            how
        }
    }
}

/// The run directory of one attempt: `<data_dir>/runs/<task_id>/<step_id>/<attempt>`.
///
/// The ids are used as single path components; the caller passes validated ids (no `/`, no `..`).
pub fn run_dir(data_dir: &Path, task_id: &str, step_id: &str, attempt: u32) -> PathBuf {
    data_dir.join("runs").join(task_id).join(step_id).join(attempt.to_string())
}

/// Creates `run_dir` (and parents) and writes `spec` as `attempt.json` atomically.
///
/// Errors if the directory was already used by a shim (`started.json` or `exit.json` exists) or
/// on IO failure. The prompt file, if any, is the caller's to write.
pub fn prepare_run_dir(run_dir: &Path, spec: &AttemptSpec) -> Result<()> {
    fs::create_dir_all(run_dir).with_context(|| format!("creating run directory {}", run_dir.display()))?;
    if run_dir.join(STARTED_FILE).exists() || run_dir.join(EXIT_FILE).exists() {
        return Err(anyhow!("run directory {} was already used by a shim", run_dir.display()));
    }
    let bytes = serde_json::to_vec_pretty(spec).context("serializing attempt spec")?;
    write_atomic(run_dir, ATTEMPT_FILE, &bytes)
}

/// Writes `dir/name` atomically: tmp file, fsync, rename, fsync of `dir`.
pub(in crate::runtime::agent) fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    let tmp = dir.join(format!(".{name}.tmp"));
    let target = dir.join(name);
    let mut file = File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    file.write_all(bytes).and_then(|()| file.sync_all()).with_context(|| format!("writing {}", tmp.display()))?;
    drop(file);
    fs::rename(&tmp, &target).with_context(|| format!("renaming to {}", target.display()))?;
    File::open(dir).and_then(|d| d.sync_all()).with_context(|| format!("syncing directory {}", dir.display()))?;
    Ok(())
}

/// Reads `started.json`; `Ok(None)` when it does not exist (yet).
pub fn read_started(run_dir: &Path) -> Result<Option<StartedRecord>> {
    read_json(&run_dir.join(STARTED_FILE))
}

/// Reads `exit.json`; `Ok(None)` when it does not exist (yet).
pub fn read_exit(run_dir: &Path) -> Result<Option<ExitRecord>> {
    read_json(&run_dir.join(EXIT_FILE))
}

/// Reads the agent's captured stdout and stderr (lossy UTF-8; a missing file reads as empty).
pub fn read_output(run_dir: &Path) -> Result<(String, String)> {
    let read = |name: &str| -> Result<String> {
        let path = run_dir.join(name);
        match fs::read(&path) {
            Ok(bytes) => Ok(String::from_utf8_lossy(&bytes).into_owned()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(String::new()),
            Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
        }
    };
    Ok((read(STDOUT_FILE)?, read(STDERR_FILE)?))
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Option<T>> {
    match fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).with_context(|| format!("parsing {}", path.display())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}
