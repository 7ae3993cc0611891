//! The detached `baton __attempt` process: its entry ([`run_shim`]), and the supervision it
//! shares with the in-process [`supervise`] (lock, start the agent, enforce the timeout and the
//! final-event grace, end what the agent left behind, write `exit.json`). It never reads another
//! attempt's state nor kills one from outside.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{anyhow, Context};
use nix::fcntl::{Flock, FlockArg};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use super::records::{write_atomic, AttemptSpec, ExitRecord, StartedRecord};
use super::{
    ABANDONED_FILE, ATTEMPT_FILE, EXIT_FILE, KILL_GRACE, LOCK_FILE, SHIM_EXIT_ALREADY_USED, SHIM_EXIT_FAILED,
    SHIM_EXIT_RECORDED, STARTED_FILE, STDERR_FILE, STDOUT_FILE,
};
use crate::clock::{now_rfc3339, Stopwatch};
use crate::runtime::agent::final_event::FinalWatcher;
use crate::runtime::agent::procs::{Cgroup, Tracker};

/// How often the shim looks at a running agent (timeout, final event, descendants).
const TICK: Duration = Duration::from_millis(100);

/// Why [`supervise`] returned without an exit record.
#[derive(Debug, thiserror::Error)]
pub enum SuperviseError {
    /// Another shim already ran (or is running) in this run directory, or recovery abandoned it
    /// (see [`abandon`](fn@super::abandon)); nothing was started.
    #[error("run directory {0} was already used by another shim")]
    AlreadyUsed(PathBuf),
    /// The lock or the exit record could not be handled.
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

/// Entry point of the hidden `baton __attempt <run-dir>` subcommand (the detached shim).
///
/// Starts a new session (`setsid`; the launcher leaves the shim in baton's process group so this
/// succeeds), then supervises like [`supervise`], and more: the shim makes itself a child
/// subreaper and, when the spec asks for it and the machine allows it, runs the agent in a
/// cgroup v2 of its own, so every descendant of the agent is found and ended with the attempt
/// (see [`crate::runtime::agent::procs`]). Returns [`SHIM_EXIT_RECORDED`] once an exit record is written,
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
/// an [`inspect`](fn@super::inspect) holds it briefly) and keeps it until `exit.json` is on disk. Any failure to start
/// the agent (unreadable `attempt.json`, missing binary or working directory, unreadable prompt)
/// becomes an exit record with `spawn_error`, so the attempt is harvestable. Errors with
/// [`SuperviseError::AlreadyUsed`] if the run directory already has `started.json` or `exit.json`,
/// or was [`abandon`](fn@super::abandon)ed,
/// and with [`SuperviseError::Other`] if the lock or the exit record cannot be written.
///
/// In-process, it neither makes the caller a child subreaper nor moves it into a cgroup (both
/// would touch the caller's other children): descendants are found by walking from the agent
/// while it runs (see [`crate::runtime::agent::procs`]).
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

    if run_dir.join(STARTED_FILE).exists() || run_dir.join(EXIT_FILE).exists() || run_dir.join(ABANDONED_FILE).exists()
    {
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
    let mut env = spec.env.clone();
    for (name, source) in &spec.env_from {
        let value = std::env::var(source)
            .map_err(|_| format!("environment variable `{source}` (the agent's `{name}`) is not set for baton"))?;
        env.push((name.clone(), value));
    }
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
        .envs(env.iter().map(|(k, v)| (k, v)))
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
