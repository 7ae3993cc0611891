//! Run directories and the attempt shim: one agent subprocess per attempt, crash-safe.
//!
//! A run directory is `<data>/runs/<task_id>/<step_id>/<attempt>/` and is used exactly once. The
//! caller writes [`AttemptSpec`] as `attempt.json` (plus the prompt file) with
//! [`prepare_run_dir`], then [`launch`]es `baton __attempt <run-dir>`, a detached shim that runs
//! [`run_shim`]. The shim takes an exclusive `flock` on `<run-dir>/lock` for its whole life, starts
//! the agent in its own process group (stdout and stderr go to files in the run directory), writes
//! `started.json`, enforces the timeout and finally writes `exit.json` before it releases the lock.
//!
//! Invariants: the lock (never a pid) says whether an attempt is alive; `started.json` and
//! `exit.json` are written atomically (tmp file, fsync, rename, fsync of the directory), so a reader
//! sees a whole record or none; `exit.json` is written while the lock is still held, so "lock free
//! and no `exit.json`" means the shim died. Text from the prompt or the agent never reaches a
//! shell: the agent is started from an argv with a cleared, explicit environment.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

use super::final_event::{FinalWatch, FinalWatcher};
use super::procs::{Cgroup, Tracker};
use crate::clock::{now_rfc3339, Stopwatch};

/// Name of the attempt specification file in a run directory (JSON, [`AttemptSpec`]).
pub const ATTEMPT_FILE: &str = "attempt.json";
/// Name of the record the shim writes once the agent is running (JSON, [`StartedRecord`]).
pub const STARTED_FILE: &str = "started.json";
/// Name of the final record the shim writes when the attempt is over (JSON, [`ExitRecord`]).
pub const EXIT_FILE: &str = "exit.json";
/// Name of the lock file the shim holds an exclusive `flock` on for its whole life.
pub const LOCK_FILE: &str = "lock";
/// Name of the file that receives the agent's stdout.
pub const STDOUT_FILE: &str = "stdout";
/// Name of the file that receives the agent's stderr.
pub const STDERR_FILE: &str = "stderr";
/// Time between the SIGTERM and the SIGKILL sent to a timed-out agent's process group, and to
/// the processes an attempt leaves behind.
pub const KILL_GRACE: Duration = Duration::from_secs(5);
/// How often the shim looks at a running agent (timeout, final event, descendants).
const TICK: Duration = Duration::from_millis(100);
/// Interval at which [`wait_until_finished`] polls the lock.
pub const POLL_INTERVAL: Duration = Duration::from_millis(200);

/// Exit code of `baton __attempt` when it wrote an exit record (whatever the agent did).
pub const SHIM_EXIT_RECORDED: u8 = 0;
/// Exit code of `baton __attempt` when it failed without writing an exit record.
pub const SHIM_EXIT_FAILED: u8 = 2;
/// Exit code of `baton __attempt` when the run directory had already been used by another shim.
pub const SHIM_EXIT_ALREADY_USED: u8 = 3;

/// What to run for one attempt: written by the caller as `<run-dir>/attempt.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptSpec {
    /// The agent's argv; `argv[0]` is looked up on the `PATH` given in `env` (never a shell).
    pub argv: Vec<String>,
    /// Working directory of the agent (the attempt's worktree); must exist.
    pub cwd: PathBuf,
    /// The complete environment of the agent: the shim clears its own and sets exactly these.
    pub env: Vec<(String, String)>,
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
    /// only; see [`super::procs`]). Every attempt's descendants are ended with it either way.
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
    /// it, whatever session or parent it has (see [`kill_attempt`]).
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
    /// The agent's process group may still be alive: call [`kill_attempt`] before re-running.
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

/// Why [`supervise`] returned without an exit record.
#[derive(Debug, thiserror::Error)]
pub enum SuperviseError {
    /// Another shim already ran (or is running) in this run directory; nothing was started.
    #[error("run directory {0} was already used by another shim")]
    AlreadyUsed(PathBuf),
    /// The lock or the exit record could not be handled.
    #[error(transparent)]
    Other(#[from] anyhow::Error),
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

/// Entry point of the hidden `baton __attempt <run-dir>` subcommand (the detached shim).
///
/// Starts a new session (`setsid`; the launcher leaves the shim in baton's process group so this
/// succeeds), then supervises like [`supervise`], and more: the shim makes itself a child
/// subreaper and, when the spec asks for it and the machine allows it, runs the agent in a
/// cgroup v2 of its own, so every descendant of the agent is found and ended with the attempt
/// (see [`super::procs`]). Returns [`SHIM_EXIT_RECORDED`] once an exit record is written,
/// [`SHIM_EXIT_ALREADY_USED`] if another shim owns the run directory, and [`SHIM_EXIT_FAILED`]
/// otherwise. The shim's own stdio is `/dev/null`; it reports through files.
pub fn run_shim(run_dir: &Path) -> ExitCode {
    // A failure here only means we stay in baton's session; the agent still gets its own group.
    let _ = nix::unistd::setsid();
    match supervise_as(run_dir, true) {
        Ok(_) => ExitCode::from(SHIM_EXIT_RECORDED),
        Err(SuperviseError::AlreadyUsed(_)) => ExitCode::from(SHIM_EXIT_ALREADY_USED),
        Err(SuperviseError::Other(err)) => {
            let _ = writeln!(io::stderr(), "baton __attempt: {err:#}");
            ExitCode::from(SHIM_EXIT_FAILED)
        }
    }
}

/// The shim's work without `setsid`: lock, read the spec, run the agent, record the outcome.
///
/// Blocks until the agent is over. Takes the exclusive lock on `<run-dir>/lock` (waiting for it if
/// an [`inspect`] holds it briefly) and keeps it until `exit.json` is on disk. Any failure to start
/// the agent (unreadable `attempt.json`, missing binary or working directory, unreadable prompt)
/// becomes an exit record with `spawn_error`, so the attempt is harvestable. Errors with
/// [`SuperviseError::AlreadyUsed`] if the run directory already has `started.json` or `exit.json`,
/// and with [`SuperviseError::Other`] if the lock or the exit record cannot be written.
///
/// In-process, it neither makes the caller a child subreaper nor moves it into a cgroup (both
/// would touch the caller's other children): descendants are found by walking from the agent
/// while it runs (see [`super::procs`]).
pub fn supervise(run_dir: &Path) -> Result<ExitRecord, SuperviseError> {
    supervise_as(run_dir, false)
}

/// [`supervise`]; `detached`: the caller is the shim process itself (subreaper, cgroup).
fn supervise_as(run_dir: &Path, detached: bool) -> Result<ExitRecord, SuperviseError> {
    let lock_file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(run_dir.join(LOCK_FILE))
        .with_context(|| format!("opening lock file in {}", run_dir.display()))?;
    let _lock = Flock::lock(lock_file, FlockArg::LockExclusive)
        .map_err(|(_, errno)| anyhow!("locking {}: {errno}", run_dir.display()))?;

    if run_dir.join(STARTED_FILE).exists() || run_dir.join(EXIT_FILE).exists() {
        return Err(SuperviseError::AlreadyUsed(run_dir.to_path_buf()));
    }

    let stopwatch = Stopwatch::start();
    let started_at = now_rfc3339();
    let outcome = read_spec(run_dir).and_then(|spec| run_agent(run_dir, &spec, &started_at, detached));
    let (status, ending, spawn_error) = match outcome {
        Ok((status, ending)) => (Some(status), ending, None),
        Err(err) => (None, Ending::Exited, Some(err)),
    };
    let record = ExitRecord {
        exit_code: status.and_then(|s| s.code()),
        signal: status.and_then(|s| s.signal()),
        timed_out: ending == Ending::TimedOut,
        stopped_after_result: ending == Ending::AfterFinalEvent,
        spawn_error,
        started_at,
        finished_at: now_rfc3339(),
        duration_ms: u64::try_from(stopwatch.elapsed().as_millis()).unwrap_or(u64::MAX),
    };
    let bytes = serde_json::to_vec_pretty(&record).context("serializing exit record")?;
    write_atomic(run_dir, EXIT_FILE, &bytes)?;
    Ok(record)
}

fn read_spec(run_dir: &Path) -> Result<AttemptSpec, String> {
    let path = run_dir.join(ATTEMPT_FILE);
    let text = fs::read(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    serde_json::from_slice(&text).map_err(|e| format!("parsing {}: {e}", path.display()))
}

/// Why the agent's process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// By itself (or killed from outside the shim).
    Exited,
    /// The shim stopped it at its timeout.
    TimedOut,
    /// The shim stopped it after it printed its final event and kept running.
    AfterFinalEvent,
}

/// Starts the agent, records `started.json`, waits (enforcing the timeout and the final-event
/// grace), then ends every process the agent left behind. `Err` is a spawn error.
fn run_agent(
    run_dir: &Path,
    spec: &AttemptSpec,
    started_at: &str,
    detached: bool,
) -> Result<(ExitStatus, Ending), String> {
    let Some(program) = spec.argv.first() else {
        return Err("attempt argv is empty".to_owned());
    };
    if !spec.cwd.is_dir() {
        return Err(format!("working directory `{}` does not exist", spec.cwd.display()));
    }
    let stdin = match &spec.prompt_file {
        Some(prompt) => {
            let path = run_dir.join(prompt);
            let file = File::open(&path).map_err(|e| format!("opening prompt file {}: {e}", path.display()))?;
            Stdio::from(file)
        }
        None => Stdio::null(),
    };
    let stdout = create_output(run_dir, STDOUT_FILE)?;
    let stderr = create_output(run_dir, STDERR_FILE)?;

    // Orphaned descendants come back to the shim instead of PID 1 (see super::procs).
    let subreaper = detached && nix::sys::prctl::set_child_subreaper(true).is_ok();
    // The shim steps into the attempt's cgroup for the spawn only: the agent is born there.
    let cgroup = if detached && spec.cgroup {
        Cgroup::create(&format!("baton-attempt-{}", std::process::id())).filter(|c| c.enter().is_ok())
    } else {
        None
    };
    let spawned = Command::new(program)
        .args(&spec.argv[1..])
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&spec.cwd)
        .stdin(stdin)
        .stdout(stdout)
        .stderr(stderr)
        .process_group(0)
        .spawn();
    if let Some(c) = &cgroup {
        let _ = c.leave();
    }
    let mut child = spawned.map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => format!("agent binary `{program}` not found"),
        _ => format!("starting agent `{program}`: {e}"),
    })?;

    let agent_pid = child.id();
    let pgid = Pid::from_raw(i32::try_from(agent_pid).unwrap_or(i32::MAX));
    let cgroup_dir = cgroup.as_ref().map(|c| c.dir().to_path_buf());
    let started = StartedRecord {
        shim_pid: std::process::id(),
        agent_pid,
        agent_pgid: agent_pid,
        started_at: started_at.to_owned(),
        cgroup: cgroup_dir.clone(),
    };
    let mut tracker = Tracker::new(agent_pid, subreaper, cgroup_dir);
    let written = serde_json::to_vec_pretty(&started)
        .context("serializing started record")
        .and_then(|bytes| write_atomic(run_dir, STARTED_FILE, &bytes));
    if let Err(err) = written {
        let _ = killpg(pgid, Signal::SIGKILL);
        let _ = child.wait();
        tracker.end_all(Duration::ZERO);
        return Err(format!("{err:#}"));
    }

    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    let limit = (spec.timeout_secs > 0).then(|| Duration::from_secs(spec.timeout_secs));
    let mut finals = spec.final_event.map(|watch| FinalWatcher::new(run_dir.join(STDOUT_FILE), watch));
    let clock = Stopwatch::start();
    let mut ending = Ending::Exited;
    let waited = loop {
        match rx.recv_timeout(TICK) {
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            other => break other,
        }
        tracker.tick();
        if limit.is_some_and(|limit| clock.elapsed() >= limit) {
            ending = Ending::TimedOut;
        } else if finals.as_mut().is_some_and(FinalWatcher::overdue) {
            ending = Ending::AfterFinalEvent;
        } else {
            continue;
        }
        break stop_group(pgid, &rx);
    };
    // The leader is gone: end whatever it left behind, in its group or not (background tools,
    // servers in a session of their own).
    tracker.end_all(KILL_GRACE);
    drop(cgroup);
    match waited {
        Ok(Ok(status)) => Ok((status, ending)),
        Ok(Err(e)) => Err(format!("waiting for agent: {e}")),
        Err(_) => Err("waiting for agent: waiter thread vanished".to_owned()),
    }
}

/// Stops the agent's process group: SIGTERM, then SIGKILL after [`KILL_GRACE`]; returns what
/// the waiter reports.
fn stop_group(
    pgid: Pid,
    rx: &mpsc::Receiver<io::Result<ExitStatus>>,
) -> Result<io::Result<ExitStatus>, mpsc::RecvTimeoutError> {
    let _ = killpg(pgid, Signal::SIGTERM);
    match rx.recv_timeout(KILL_GRACE) {
        Err(mpsc::RecvTimeoutError::Timeout) => {
            let _ = killpg(pgid, Signal::SIGKILL);
            rx.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected)
        }
        other => other,
    }
}

fn create_output(run_dir: &Path, name: &str) -> Result<File, String> {
    let path = run_dir.join(name);
    File::create(&path).map_err(|e| format!("creating {}: {e}", path.display()))
}

/// Writes `dir/name` atomically: tmp file, fsync, rename, fsync of `dir`.
pub(super) fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<()> {
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

/// Sends SIGKILL to the agent's process group named in `started.json`, and to every other
/// process in the attempt's cgroup when it has one (the shim excepted).
///
/// Returns `Ok(true)` if a signal was delivered, `Ok(false)` if there is no `started.json` or
/// the group (and the cgroup) is already empty. A live shim then records the agent as killed by
/// signal 9 and ends what the agent left behind (see [`super::procs`]); when the shim is dead too,
/// only the cgroup still finds descendants that left the agent's group. Refuses (errors on) a
/// recorded group id of 0 or 1 or baton's own group, and ignores a recorded cgroup that is not
/// an attempt's (`baton-attempt-<pid>`). Gotcha: after the group is gone its id could in
/// principle be reused by an unrelated group leader; call this only for attempts that
/// [`inspect`] reports as running or died.
pub fn kill_attempt(run_dir: &Path) -> Result<bool> {
    let Some(started) = read_started(run_dir)? else {
        return Ok(false);
    };
    let raw = i32::try_from(started.agent_pgid)
        .map_err(|_| anyhow!("bad agent_pgid {} in started.json", started.agent_pgid))?;
    let pgid = Pid::from_raw(raw);
    if raw <= 1 || pgid == nix::unistd::getpgrp() {
        return Err(anyhow!("refusing to kill process group {raw} named in {}", run_dir.join(STARTED_FILE).display()));
    }
    let mut delivered = match killpg(pgid, Signal::SIGKILL) {
        Ok(()) => true,
        Err(Errno::ESRCH) => false,
        Err(errno) => return Err(anyhow!("killing process group {raw}: {errno}")),
    };
    let attempt_cgroup = started
        .cgroup
        .as_deref()
        .filter(|dir| dir.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("baton-attempt-")));
    if let Some(dir) = attempt_cgroup {
        let me = i32::try_from(std::process::id()).unwrap_or(0);
        for pid in super::procs::members(dir) {
            if pid > 1 && pid != me && u32::try_from(pid).ok() != Some(started.shim_pid) {
                delivered |= nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL).is_ok();
            }
        }
        // A shim that died left its cgroup behind: removed once empty (a live shim removes
        // its own, and does not mind finding it gone).
        super::procs::remove_when_empty(dir, Duration::from_millis(200));
    }
    Ok(delivered)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::agent::final_event::FinalEvent;
    use std::os::unix::fs::PermissionsExt;

    fn spec(dir: &Path, argv: &[&str], timeout_secs: u64) -> AttemptSpec {
        AttemptSpec {
            argv: argv.iter().map(|s| (*s).to_owned()).collect(),
            cwd: dir.to_path_buf(),
            env: vec![("PATH".to_owned(), std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".to_owned()))],
            prompt_file: None,
            timeout_secs,
            final_event: None,
            cgroup: false,
        }
    }

    fn prepared(argv: &[&str], timeout_secs: u64) -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let run = run_dir(tmp.path(), "t1", "s1", 1);
        let work = tmp.path().join("work");
        fs::create_dir_all(&work).unwrap();
        prepare_run_dir(&run, &spec(&work, argv, timeout_secs)).unwrap();
        (tmp, run)
    }

    /// True if the process is gone or a zombie.
    fn is_dead(pid: i32) -> bool {
        match fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            Ok(stat) => stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')),
        }
    }

    #[test]
    fn run_dir_layout() {
        assert_eq!(run_dir(Path::new("/data"), "T-1", "1.2", 3), PathBuf::from("/data/runs/T-1/1.2/3"));
    }

    #[test]
    fn records_exit_code_and_output() {
        let (_tmp, run) = prepared(&["sh", "-c", "echo out; echo err >&2; exit 7"], 0);
        let record = supervise(&run).unwrap();
        assert_eq!(record.exit_code, Some(7));
        assert_eq!(record.signal, None);
        assert!(!record.timed_out);
        assert!(!record.exited_cleanly());
        assert_eq!(read_output(&run).unwrap(), ("out\n".into(), "err\n".into()));
        assert_eq!(read_exit(&run).unwrap(), Some(record.clone()));
        let started = read_started(&run).unwrap().unwrap();
        assert_eq!(started.agent_pid, started.agent_pgid);
        assert_eq!(started.shim_pid, std::process::id());
        assert_eq!(inspect(&run).unwrap(), AttemptState::Finished(record));
    }

    #[test]
    fn zero_exit_is_clean() {
        let (_tmp, run) = prepared(&["true"], 0);
        let record = supervise(&run).unwrap();
        assert!(record.exited_cleanly());
        assert_eq!(record.describe(), "exit code 0");
    }

    #[test]
    fn environment_is_exactly_the_spec() {
        let tmp = tempfile::tempdir().unwrap();
        let run = tmp.path().join("run");
        let mut s = spec(tmp.path(), &["/usr/bin/env"], 0);
        s.env = vec![("ONLY".into(), "this".into())];
        prepare_run_dir(&run, &s).unwrap();
        supervise(&run).unwrap();
        assert_eq!(read_output(&run).unwrap().0, "ONLY=this\n");
    }

    #[test]
    fn missing_binary_is_a_spawn_error() {
        let (_tmp, run) = prepared(&["baton-no-such-agent-binary", "x"], 0);
        let record = supervise(&run).unwrap();
        assert_eq!(record.spawn_error.as_deref(), Some("agent binary `baton-no-such-agent-binary` not found"));
        assert_eq!((record.exit_code, record.signal), (None, None));
        assert!(read_started(&run).unwrap().is_none());
        assert!(matches!(inspect(&run).unwrap(), AttemptState::Finished(_)));
    }

    #[test]
    fn missing_cwd_and_bad_spec_are_spawn_errors() {
        let tmp = tempfile::tempdir().unwrap();
        let run = tmp.path().join("run");
        prepare_run_dir(&run, &spec(&tmp.path().join("nope"), &["true"], 0)).unwrap();
        let record = supervise(&run).unwrap();
        assert!(record.spawn_error.unwrap().contains("does not exist"));

        let run2 = tmp.path().join("run2");
        fs::create_dir_all(&run2).unwrap();
        fs::write(run2.join(ATTEMPT_FILE), "{not json").unwrap();
        let record = supervise(&run2).unwrap();
        assert!(record.spawn_error.unwrap().contains("parsing"));
    }

    #[test]
    fn prompt_file_reaches_stdin() {
        let tmp = tempfile::tempdir().unwrap();
        let run = tmp.path().join("run");
        let mut s = spec(tmp.path(), &["cat"], 0);
        s.prompt_file = Some(PathBuf::from("prompt.md"));
        prepare_run_dir(&run, &s).unwrap();
        fs::write(run.join("prompt.md"), "do the `thing`; $(rm -rf /)\n").unwrap();
        let record = supervise(&run).unwrap();
        assert!(record.exited_cleanly());
        assert_eq!(read_output(&run).unwrap().0, "do the `thing`; $(rm -rf /)\n");
    }

    #[test]
    fn stdin_is_dev_null_without_prompt() {
        let (_tmp, run) = prepared(&["cat"], 5);
        let record = supervise(&run).unwrap();
        assert!(record.exited_cleanly());
        assert_eq!(read_output(&run).unwrap().0, "");
    }

    #[test]
    fn timeout_kills_the_whole_group() {
        let (tmp, run) = prepared(&["sh", "-c", "sleep 30 & echo $! > bg.pid; echo hi; sleep 30; echo never"], 1);
        let watch = Stopwatch::start();
        let record = supervise(&run).unwrap();
        assert!(watch.elapsed() < Duration::from_secs(5));
        assert!(record.timed_out);
        assert_eq!(record.exit_code, None);
        assert_eq!(record.signal, Some(15));
        assert_eq!(record.describe(), "killed by signal 15 after the timeout");
        assert_eq!(read_output(&run).unwrap().0, "hi\n");
        let bg: i32 = fs::read_to_string(tmp.path().join("work/bg.pid")).unwrap().trim().parse().unwrap();
        let deadline = Stopwatch::start();
        while !is_dead(bg) && deadline.elapsed() < Duration::from_secs(3) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(is_dead(bg), "background member {bg} of the group survived");
    }

    #[test]
    fn timeout_escalates_to_sigkill_after_grace() {
        // SIG_IGN survives exec, so the whole group ignores SIGTERM.
        let (_tmp, run) = prepared(&["sh", "-c", "trap '' TERM; sleep 30"], 1);
        let watch = Stopwatch::start();
        let record = supervise(&run).unwrap();
        let took = watch.elapsed();
        assert!(record.timed_out);
        assert_eq!(record.signal, Some(9));
        assert!(took >= KILL_GRACE && took < KILL_GRACE + Duration::from_secs(4));
    }

    fn prepared_with(
        argv: &[&str],
        timeout_secs: u64,
        final_event: Option<FinalWatch>,
    ) -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let run = run_dir(tmp.path(), "t1", "s1", 1);
        let work = tmp.path().join("work");
        fs::create_dir_all(&work).unwrap();
        let mut s = spec(&work, argv, timeout_secs);
        s.final_event = final_event;
        prepare_run_dir(&run, &s).unwrap();
        (tmp, run)
    }

    const CLAUDE_RESULT: &str = r#"{"type":"result","subtype":"success","is_error":false,"result":"done","total_cost_usd":0.25,"usage":{"input_tokens":7,"output_tokens":5}}"#;

    #[test]
    fn an_agent_still_running_after_its_result_is_stopped_and_the_result_stands() {
        let script = format!("echo '{{\"type\":\"system\",\"subtype\":\"init\"}}'; echo '{CLAUDE_RESULT}'; sleep 30");
        let watch = FinalWatch { event: FinalEvent::ClaudeResult, grace_secs: 1 };
        let (_tmp, run) = prepared_with(&["sh", "-c", &script], 60, Some(watch));
        let clock = Stopwatch::start();
        let record = supervise(&run).unwrap();
        assert!(clock.elapsed() < Duration::from_secs(4), "stopped {:?} after start", clock.elapsed());
        assert!(record.stopped_after_result && !record.timed_out, "{record:?}");
        assert_eq!(record.signal, Some(15));
        assert_eq!(record.describe(), "killed by signal 15: it kept running after its final result");
        // What it printed is kept whole for the harvest (output::tests parses such a run).
        assert_eq!(read_output(&run).unwrap().0.lines().last(), Some(CLAUDE_RESULT));
    }

    #[test]
    fn an_event_after_the_result_starts_the_grace_over_and_a_result_without_newline_counts() {
        // A result, then more work: not stopped at the first result's grace.
        let script = format!("echo '{CLAUDE_RESULT}'; sleep 0.5; echo '{{\"type\":\"assistant\"}}'; sleep 1; exit 0");
        let watch = FinalWatch { event: FinalEvent::ClaudeResult, grace_secs: 1 };
        let (_tmp, run) = prepared_with(&["sh", "-c", &script], 60, Some(watch));
        let record = supervise(&run).unwrap();
        assert!(!record.stopped_after_result && record.exited_cleanly(), "{record:?}");

        let script = format!("printf '%s' '{CLAUDE_RESULT}'; sleep 30");
        let (_tmp, run) = prepared_with(&["sh", "-c", &script], 60, Some(watch));
        let record = supervise(&run).unwrap();
        assert!(record.stopped_after_result, "{record:?}");

        // Without a watch, the same agent runs to its timeout.
        let (_tmp, run) = prepared_with(&["sh", "-c", &script], 1, None);
        let record = supervise(&run).unwrap();
        assert!(record.timed_out && !record.stopped_after_result, "{record:?}");
    }

    #[test]
    fn a_descendant_in_its_own_session_ends_with_the_attempt() {
        let (tmp, run) =
            prepared(&["sh", "-c", "setsid sh -c 'echo $$ > bg.pid; exec sleep 30' & sleep 0.5; exit 0"], 0);
        let record = supervise(&run).unwrap();
        assert!(record.exited_cleanly(), "{record:?}");
        let bg: i32 = fs::read_to_string(tmp.path().join("work/bg.pid")).unwrap().trim().parse().unwrap();
        let deadline = Stopwatch::start();
        while !is_dead(bg) && deadline.elapsed() < Duration::from_secs(3) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(is_dead(bg), "the setsid descendant {bg} outlived its attempt");
    }

    #[test]
    fn run_dir_is_single_use() {
        let (_tmp, run) = prepared(&["true"], 0);
        supervise(&run).unwrap();
        assert!(matches!(supervise(&run), Err(SuperviseError::AlreadyUsed(_))));
        assert!(prepare_run_dir(&run, &spec(&run, &["true"], 0)).is_err());
    }

    #[test]
    fn concurrent_inspects_do_not_look_like_a_shim() {
        let tmp = tempfile::tempdir().unwrap();
        let lock = tmp.path().join(LOCK_FILE);
        fs::write(&lock, "").unwrap();
        let _probe = Flock::lock(File::open(&lock).unwrap(), FlockArg::LockSharedNonblock).unwrap();
        assert_eq!(inspect(tmp.path()).unwrap(), AttemptState::NotStarted);
        let shim = Flock::lock(File::open(&lock).unwrap(), FlockArg::LockExclusiveNonblock);
        assert!(shim.is_err(), "a shim cannot lock while a probe holds the lock");
    }

    #[test]
    fn inspect_not_started_and_died() {
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(inspect(tmp.path()).unwrap(), AttemptState::NotStarted);
        fs::write(tmp.path().join(LOCK_FILE), "").unwrap();
        assert_eq!(inspect(tmp.path()).unwrap(), AttemptState::NotStarted);
        let started = StartedRecord {
            shim_pid: 1,
            agent_pid: 999_999,
            agent_pgid: 999_999,
            started_at: "2026-01-01T00:00:00+00:00".into(),
            cgroup: None,
        };
        fs::write(tmp.path().join(STARTED_FILE), serde_json::to_vec(&started).unwrap()).unwrap();
        assert_eq!(inspect(tmp.path()).unwrap(), AttemptState::Died);
    }

    #[test]
    fn kill_attempt_refuses_dangerous_groups_and_tolerates_gone_ones() {
        let tmp = tempfile::tempdir().unwrap();
        assert!(!kill_attempt(tmp.path()).unwrap());
        let mut started = StartedRecord {
            shim_pid: 1,
            agent_pid: 1,
            agent_pgid: 1,
            started_at: "2026-01-01T00:00:00+00:00".into(),
            cgroup: None,
        };
        let write = |s: &StartedRecord| {
            fs::write(tmp.path().join(STARTED_FILE), serde_json::to_vec(s).unwrap()).unwrap();
        };
        write(&started);
        assert!(kill_attempt(tmp.path()).is_err());
        started.agent_pgid = u32::try_from(nix::unistd::getpgrp().as_raw()).unwrap();
        write(&started);
        assert!(kill_attempt(tmp.path()).is_err());
        started.agent_pgid = 4_000_000; // above pid_max: no such group
        write(&started);
        assert!(!kill_attempt(tmp.path()).unwrap());
    }

    fn wait_for_running(run: &Path) {
        let watch = Stopwatch::start();
        while !(inspect(run).unwrap() == AttemptState::Running && read_started(run).unwrap().is_some()) {
            assert!(watch.elapsed() < Duration::from_secs(5), "never running");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn running_attempt_is_held_by_the_lock_and_can_be_killed() {
        let (_tmp, run) = prepared(&["sleep", "30"], 0);
        let shim = {
            let run = run.clone();
            std::thread::spawn(move || supervise(&run))
        };
        wait_for_running(&run);
        assert!(kill_attempt(&run).unwrap());
        let record = shim.join().unwrap().unwrap();
        assert_eq!(record.signal, Some(9));
        assert!(!record.timed_out);
        assert_eq!(inspect(&run).unwrap(), AttemptState::Finished(record));
    }

    #[tokio::test]
    async fn wait_until_finished_returns_the_record() {
        let (_tmp, run) = prepared(&["sh", "-c", "sleep 0.5; exit 3"], 0);
        let shim = {
            let run = run.clone();
            std::thread::spawn(move || supervise(&run))
        };
        wait_for_running(&run);
        let record = wait_until_finished(&run).await.unwrap();
        assert_eq!(record.exit_code, Some(3));
        shim.join().unwrap().unwrap();
    }

    #[tokio::test]
    async fn wait_until_finished_reports_dead_and_unstarted_attempts() {
        let tmp = tempfile::tempdir().unwrap();
        assert!(matches!(wait_until_finished(tmp.path()).await, Err(WaitError::NotStarted(_))));
        fs::write(tmp.path().join(STARTED_FILE), r#"{"shim_pid":1,"agent_pid":2,"agent_pgid":2,"started_at":"x"}"#)
            .unwrap();
        assert!(matches!(wait_until_finished(tmp.path()).await, Err(WaitError::Died(_))));
    }

    /// A stand-in for `baton` whose `__attempt` writes a canned exit record (or none).
    fn fake_baton(dir: &Path, writes_record: bool) -> PathBuf {
        let exe = dir.join(if writes_record { "baton-ok" } else { "baton-crash" });
        let body = if writes_record {
            r#"[ "$1" = __attempt ] || exit 9
sleep 0.3
printf '%s' '{"exit_code":0,"signal":null,"timed_out":false,"spawn_error":null,"started_at":"a","finished_at":"b","duration_ms":300}' > "$2/exit.json"
"#
        } else {
            "echo '{\"shim_pid\":1,\"agent_pid\":2,\"agent_pgid\":2,\"started_at\":\"x\"}' > \"$2/started.json\"\nexit 1\n"
        };
        fs::write(&exe, format!("#!/bin/sh\n{body}")).unwrap();
        fs::set_permissions(&exe, fs::Permissions::from_mode(0o755)).unwrap();
        exe
    }

    #[tokio::test]
    async fn launch_then_wait_reads_the_exit_record() {
        let (tmp, run) = prepared(&["true"], 0);
        let exe = fake_baton(tmp.path(), true);
        let launched = launch(&exe, &run).unwrap();
        assert!(launched.shim_pid() > 0);
        assert!(launched.run_dir().is_absolute());
        let record = launched.wait().await.unwrap();
        assert_eq!(record.duration_ms, 300);
    }

    #[tokio::test]
    async fn launch_then_wait_reports_a_crashed_shim() {
        let (tmp, run) = prepared(&["true"], 0);
        let exe = fake_baton(tmp.path(), false);
        let launched = launch(&exe, &run).unwrap();
        assert!(matches!(launched.wait().await, Err(WaitError::Died(_))));
    }

    #[test]
    fn launch_requires_a_prepared_run_dir() {
        let tmp = tempfile::tempdir().unwrap();
        assert!(launch(Path::new("/bin/true"), tmp.path()).is_err());
    }
}
