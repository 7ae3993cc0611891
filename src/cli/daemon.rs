//! `baton daemon start | stop | status`: `baton serve` detached from the terminal, and found
//! again through its data dir.
//!
//! Owns: starting the server as a fresh process (`daemon start` re-executes the `baton` binary,
//! which calls `setsid` and then `exec`s `baton --data-dir <abs> serve …`, so the server runs in
//! its own session with no controlling terminal) with stdin from `/dev/null` and stdout and
//! stderr appended to `<data>/logs/serve.log`; rotating that log at start (`serve.log` →
//! `serve.log.1` → … → `serve.log.5`) when it is larger than 10 MiB (the hidden
//! `BATON_LOG_ROTATE_BYTES` overrides the limit); waiting for `/healthz`; reading the server
//! lock (`<data>/serve.lock`: [`server_lock`](crate::runtime::server_lock) holds an exclusive
//! `flock` on it with the server's pid written in it, for as long as the server lives) and
//! `<data>/serve.json` (pid, bind address, URL, start time: [`publish`] writes it once the
//! server listens and removes it when the server stops); and stopping the server with SIGTERM.
//!
//! Never: forks inside the async runtime (the server is a new process image, not a fork),
//! signals anything but the process that holds the lock, sends anything but SIGTERM (it tells
//! the operator about `kill -9` instead), rotates the log of a running server (the server
//! would keep writing to the renamed file), or holds the server lock beyond a non-blocking
//! shared-lock probe of a few microseconds.
//!
//! Exit codes: `start` 0 started, 2 bad input or a server already runs on the data dir, else
//! the failed server's own exit code (1 if it had none); `status` 0 running, 3 not running (the
//! LSB convention); `stop` 0 stopped or nothing was running (LSB: stopping a stopped service
//! succeeds), 1 the server did not stop within `--timeout` (40 s).

use std::ffi::OsString;
use std::io::{Read as _, Seek as _, Write as _};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use serde::{Deserialize, Serialize};

use crate::clock::Stopwatch;
use crate::runtime::config::DataDir;
use crate::runtime::BadInput;

/// Exit code of `daemon status` when no server runs (LSB "program is not running").
pub(crate) const EXIT_NOT_RUNNING: u8 = 3;

/// The server lock file under the data dir (see [`crate::runtime::server_lock`]).
const LOCK_FILE: &str = crate::runtime::SERVER_LOCK_FILE;
/// Where a running server says where it listens.
const INFO_FILE: &str = "serve.json";
/// The daemon's log under `<data>/logs/`.
const LOG_FILE: &str = "serve.log";
/// Rotated logs kept (`serve.log.1` … `serve.log.5`).
const LOG_KEEP: u32 = 5;
/// Default rotation limit: 10 MiB.
const LOG_ROTATE_BYTES: u64 = 10 * 1024 * 1024;
/// How long `daemon start` waits for `/healthz`.
const START_TIMEOUT: Duration = Duration::from_secs(15);
/// How long `daemon stop` waits by default for the lock to be released, in seconds (the
/// server drains for up to 30 s).
const STOP_TIMEOUT_SECS: u64 = 40;
/// Lines of the log printed when a start fails.
const TAIL_LINES: usize = 20;
/// Polling interval while starting and stopping.
const POLL: Duration = Duration::from_millis(100);

// `baton daemon` subcommands. (A doc comment here would become the command's about, over the
// one `Command::Daemon` gives, once the subcommands are deferred.)
#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub(crate) enum DaemonCommand {
    /// Start `baton serve` in the background (own session, output in `<data>/logs/serve.log`) and
    /// wait until it answers /healthz.
    Start(StartArgs),
    /// Stop the server running on the data dir (daemon or not): SIGTERM, then wait for it to
    /// drain. Exit 0 also when nothing was running; 1 when it did not stop in time.
    Stop {
        /// Seconds to wait for the server to stop (it drains for up to 30 s).
        #[arg(long, default_value_t = STOP_TIMEOUT_SECS, allow_negative_numbers = true, value_parser = super::args::whole_number::<u64>)]
        timeout: u64,
    },
    /// Whether a server runs on the data dir: exit 0 running (pid, URL), 3 not running.
    Status,
    /// Internal: start a new session, then exec `baton` with these arguments (`daemon start`
    /// runs it so that the server, not a fork of this process, is the detached one).
    #[command(name = "__setsid", hide = true)]
    Setsid {
        /// The `baton` arguments of the server.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 1..)]
        args: Vec<OsString>,
    },
}

/// `baton daemon start` flags: those of `baton serve`, plus the hidden rotation limit.
#[derive(Debug, Args)]
// The variant's about again: the subcommands are deferred (see `cli::Command`), so the last
// about applied is the one of the flags' structs.
#[command(
    about = "Start `baton serve` in the background (own session, output in `<data>/logs/serve.log`) and wait until it answers /healthz"
)]
pub(crate) struct StartArgs {
    /// Address to listen on; only loopback is allowed until authentication exists.
    #[arg(long, default_value = crate::web::DEFAULT_BIND, allow_negative_numbers = true)]
    bind: SocketAddr,
    /// Register a demo project and a few specs (as `baton serve --demo`).
    #[arg(long)]
    demo: bool,
    /// Agents running at once across every execution (1 or more).
    #[arg(long, default_value_t = crate::runtime::pool::DEFAULT_MAX_AGENTS, allow_negative_numbers = true, value_parser = super::args::agent_count)]
    max_agents: usize,
    /// Rotate serve.log at start when it is larger than this many bytes.
    #[arg(long, env = "BATON_LOG_ROTATE_BYTES", default_value_t = LOG_ROTATE_BYTES, hide = true, allow_negative_numbers = true)]
    log_rotate_bytes: u64,
}

/// Runs one `baton daemon` subcommand on the data dir `data_dir`.
pub(crate) async fn run(data_dir: &Path, command: DaemonCommand, json: bool) -> anyhow::Result<ExitCode> {
    match command {
        DaemonCommand::Start(args) => start(data_dir, args, json).await,
        DaemonCommand::Stop { timeout } => stop(data_dir, Duration::from_secs(timeout), json).await,
        DaemonCommand::Status => status(data_dir, json).await,
        DaemonCommand::Setsid { args } => setsid_exec(args),
    }
}

/// What a running server publishes in `<data>/serve.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ServerInfo {
    /// The server's pid.
    pub(crate) pid: u32,
    /// The address it listens on (the real port when `--bind` asked for port 0).
    pub(crate) bind: SocketAddr,
    /// `http://<bind>/`.
    pub(crate) url: String,
    /// When it started listening (RFC 3339).
    pub(crate) started_at: String,
}

/// `serve.json` of a running server; dropping it removes the file (if it is still this
/// process's), so a cleanly stopped server leaves none behind.
#[derive(Debug)]
pub(crate) struct Published {
    path: PathBuf,
}

impl Drop for Published {
    fn drop(&mut self) {
        if read_info_at(&self.path).is_some_and(|info| info.pid == std::process::id()) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Writes `<data>/serve.json` for this process listening on `bind`; `baton serve` calls it
/// once it listens, while it holds the server lock, and keeps the result until it stops.
///
/// Errors: the file cannot be written.
pub(crate) fn publish(data: &DataDir, bind: SocketAddr) -> anyhow::Result<Published> {
    let info = ServerInfo {
        pid: std::process::id(),
        bind,
        url: format!("http://{bind}/"),
        started_at: crate::clock::now_rfc3339(),
    };
    let path = data.root().join(INFO_FILE);
    crate::runtime::write_atomic(&path, serde_json::to_string_pretty(&info)?.as_bytes())?;
    Ok(Published { path })
}

fn read_info_at(path: &Path) -> Option<ServerInfo> {
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

/// The server lock as seen from outside.
#[derive(Debug)]
enum LockState {
    /// Nobody holds it: no server runs on the data dir.
    Free,
    /// A server holds it; its pid once it has written it.
    Held(Option<u32>),
}

/// Probes `<root>/serve.lock` with a non-blocking shared `flock` (released at once) and, when
/// another process holds it, reads the pid written in it.
async fn probe(root: &Path) -> anyhow::Result<LockState> {
    let path = root.join(LOCK_FILE);
    let file = match std::fs::File::open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(LockState::Free),
        Err(e) => return Err(e).with_context(|| format!("opening {}", path.display())),
    };
    match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockSharedNonblock) {
        Ok(lock) => {
            drop(lock);
            Ok(LockState::Free)
        }
        Err((mut file, nix::errno::Errno::EWOULDBLOCK)) => {
            // The server writes its pid just after it takes the lock: give it a moment.
            for _ in 0..20 {
                let mut text = String::new();
                file.rewind().and_then(|()| file.read_to_string(&mut text).map(drop)).ok();
                if let Ok(pid) = text.trim().parse::<u32>() {
                    return Ok(LockState::Held(Some(pid)));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Ok(LockState::Held(None))
        }
        Err((_, e)) => Err(anyhow::anyhow!("probing the lock {}: {e}", path.display())),
    }
}

/// The data dir, absolute, if it exists (status and stop never create it).
fn existing_root(data_dir: &Path) -> Option<PathBuf> {
    data_dir.canonicalize().ok().filter(|p| p.is_dir())
}

/// `serve.json` if it belongs to `pid`.
fn info_of(root: &Path, pid: Option<u32>) -> Option<ServerInfo> {
    read_info_at(&root.join(INFO_FILE)).filter(|info| Some(info.pid) == pid)
}

fn log_path(root: &Path) -> PathBuf {
    root.join("logs").join(LOG_FILE)
}

fn pid_text(pid: Option<u32>) -> String {
    pid.map_or_else(|| "unknown".to_string(), |p| p.to_string())
}

async fn status(data_dir: &Path, json: bool) -> anyhow::Result<ExitCode> {
    let state = match existing_root(data_dir) {
        Some(root) => Some((probe(&root).await?, root)),
        None => None,
    };
    let Some((LockState::Held(pid), root)) = state else {
        if json {
            outln!("{}", serde_json::json!({ "running": false, "data_dir": data_dir }));
        } else {
            outln!("not running (no baton server holds the data dir {})", data_dir.display());
        }
        return Ok(ExitCode::from(EXIT_NOT_RUNNING));
    };
    let info = info_of(&root, pid);
    let log = log_path(&root);
    if json {
        outln!(
            "{}",
            serde_json::json!({
                "running": true, "pid": pid, "url": info.as_ref().map(|i| &i.url),
                "bind": info.as_ref().map(|i| i.bind), "started_at": info.as_ref().map(|i| &i.started_at),
                "data_dir": root, "log": log,
            })
        );
    } else {
        match &info {
            Some(info) => outln!("running: pid {}, {} (since {})", info.pid, info.url, info.started_at),
            None => outln!("running: pid {} (address not published yet)", pid_text(pid)),
        }
        outln!("  data dir {}", root.display());
        if log.exists() {
            outln!("  log      {}", log.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn stop(data_dir: &Path, timeout: Duration, json: bool) -> anyhow::Result<ExitCode> {
    let root = existing_root(data_dir);
    let state = match &root {
        Some(root) => probe(root).await?,
        None => LockState::Free,
    };
    let (root, pid) = match (root, state) {
        (Some(root), LockState::Held(Some(pid))) => (root, pid),
        (None, _) | (_, LockState::Free) => {
            if json {
                outln!("{}", serde_json::json!({ "stopped": false, "running": false }));
            } else {
                outln!("not running (no baton server holds the data dir {}); nothing to stop", data_dir.display());
            }
            return Ok(ExitCode::SUCCESS);
        }
        (Some(root), LockState::Held(None)) => {
            return Err(anyhow::anyhow!(
                "a process holds {} but wrote no pid in it; find it with `fuser {}`",
                root.join(LOCK_FILE).display(),
                root.join(LOCK_FILE).display()
            ));
        }
    };
    let target = nix::unistd::Pid::from_raw(
        i32::try_from(pid).ok().filter(|p| *p > 1).ok_or_else(|| anyhow::anyhow!("the lock names pid {pid}"))?,
    );
    let watch = Stopwatch::start();
    match nix::sys::signal::kill(target, nix::sys::signal::Signal::SIGTERM) {
        Ok(()) => {}
        // It exited between the probe and the signal; the wait below sees the lock released.
        Err(nix::errno::Errno::ESRCH) => {}
        Err(e) => return Err(anyhow::anyhow!("sending SIGTERM to pid {pid}: {e}")),
    }
    errln!(
        "sent SIGTERM to baton serve (pid {pid}); waiting up to {} s while it finishes requests and stops its drivers",
        timeout.as_secs()
    );
    loop {
        if matches!(probe(&root).await?, LockState::Free) {
            break;
        }
        if watch.elapsed() >= timeout {
            errln!(
                "error: baton serve (pid {pid}) has not stopped after {} s; it may still be draining. \
                 `kill -9 {pid}` forces it (running agents keep going; the next start picks them up)",
                timeout.as_secs()
            );
            return Ok(ExitCode::from(1));
        }
        tokio::time::sleep(POLL).await;
    }
    let took = watch.elapsed().as_secs_f64();
    if json {
        outln!("{}", serde_json::json!({ "stopped": true, "pid": pid, "seconds": took }));
    } else {
        outln!("stopped baton serve (pid {pid}) in {took:.1} s");
    }
    Ok(ExitCode::SUCCESS)
}

/// Renames `log` to `log.1` (shifting `log.1` … to `log.2` …, dropping `log.<keep>`) when it is
/// larger than `limit` bytes; returns its size when it rotated.
fn rotate(log: &Path, limit: u64, keep: u32) -> std::io::Result<Option<u64>> {
    let size = match std::fs::metadata(log) {
        Ok(meta) => meta.len(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if size <= limit {
        return Ok(None);
    }
    let numbered = |i: u32| {
        let mut name = log.as_os_str().to_owned();
        name.push(format!(".{i}"));
        PathBuf::from(name)
    };
    match std::fs::remove_file(numbered(keep)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    for i in (1..keep).rev() {
        match std::fs::rename(numbered(i), numbered(i + 1)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    std::fs::rename(log, numbered(1))?;
    Ok(Some(size))
}

/// The last `lines` lines of `path` from byte `from` on (at most its last 64 KiB).
fn tail(path: &Path, from: u64, lines: usize) -> Vec<String> {
    let Ok(mut file) = std::fs::File::open(path) else { return Vec::new() };
    let len = file.metadata().map_or(0, |m| m.len());
    let start = from.max(len.saturating_sub(64 * 1024));
    let mut bytes = Vec::new();
    if file.seek(std::io::SeekFrom::Start(start)).is_err() || file.read_to_end(&mut bytes).is_err() {
        return Vec::new();
    }
    let text = String::from_utf8_lossy(&bytes);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].iter().map(|l| (*l).to_string()).collect()
}

/// One `GET /healthz`; true on a 200.
async fn healthz(addr: SocketAddr) -> bool {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let attempt = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").await.ok()?;
        let mut head = [0u8; 12];
        stream.read_exact(&mut head).await.ok()?;
        Some(head.starts_with(b"HTTP/1.1 200") || head.starts_with(b"HTTP/1.0 200"))
    };
    tokio::time::timeout(Duration::from_secs(2), attempt).await.ok().flatten().unwrap_or(false)
}

async fn start(data_dir: &Path, args: StartArgs, json: bool) -> anyhow::Result<ExitCode> {
    let data = DataDir::open(data_dir)?;
    let has_users =
        super::service::with_executions(data.clone(), async |execs| crate::runtime::users::any(execs).await).await?;
    crate::web::check_bind(args.bind, has_users)?;
    let root = data.root().to_path_buf();
    if let LockState::Held(pid) = probe(&root).await? {
        return Err(BadInput(format!(
            "a baton server (pid {}) already runs on the data dir {}; nothing started \
             (`baton daemon status` shows it, `baton daemon stop` stops it)",
            pid_text(pid),
            root.display()
        ))
        .into());
    }
    let log = log_path(&root);
    std::fs::create_dir_all(data.logs_dir()).with_context(|| format!("creating {}", data.logs_dir().display()))?;
    if let Some(size) =
        rotate(&log, args.log_rotate_bytes, LOG_KEEP).with_context(|| format!("rotating {}", log.display()))?
    {
        errln!("rotated {} ({size} bytes) to {}.1", log.display(), log.display());
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .with_context(|| format!("opening {}", log.display()))?;
    let from = file.metadata().map_or(0, |m| m.len());
    let mut serve_args: Vec<OsString> = vec!["--data-dir".into(), root.clone().into(), "serve".into()];
    serve_args.extend(["--bind".into(), args.bind.to_string().into()]);
    serve_args.extend(["--max-agents".into(), args.max_agents.to_string().into()]);
    if args.demo {
        serve_args.push("--demo".into());
    }
    let shown: Vec<String> = serve_args.iter().map(|a| a.to_string_lossy().into_owned()).collect();
    writeln!(file, "--- {} baton daemon start: baton {}", crate::clock::now_rfc3339(), shown.join(" "))
        .with_context(|| format!("writing {}", log.display()))?;
    let exe = std::env::current_exe().context("finding the baton executable")?;
    let stderr = file.try_clone().with_context(|| format!("opening {}", log.display()))?;
    let mut child = std::process::Command::new(&exe)
        .arg("--data-dir")
        .arg(&root)
        .args(["daemon", "__setsid", "--"])
        .args(&serve_args)
        // A log file is not a terminal: no colour codes in it.
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(file)
        .stderr(stderr)
        .spawn()
        .with_context(|| format!("starting {}", exe.display()))?;
    let pid = child.id();
    let watch = Stopwatch::start();
    loop {
        if let Some(exit) = child.try_wait().context("waiting for baton serve")? {
            errln!("error: baton serve (pid {pid}) exited while starting ({exit}); the end of {}:", log.display());
            for line in tail(&log, from, TAIL_LINES) {
                errln!("  {line}");
            }
            let code = exit.code().and_then(|c| u8::try_from(c).ok()).filter(|c| *c != 0).unwrap_or(1);
            return Ok(ExitCode::from(code));
        }
        if let Some(info) = info_of(&root, Some(pid)) {
            if healthz(info.bind).await {
                if json {
                    outln!(
                        "{}",
                        serde_json::json!({ "pid": pid, "url": info.url, "bind": info.bind, "data_dir": root, "log": log })
                    );
                } else {
                    outln!("started baton serve: pid {pid}, {}", info.url);
                    outln!("  data dir {}", root.display());
                    outln!("  log      {}", log.display());
                }
                return Ok(ExitCode::SUCCESS);
            }
        }
        if watch.elapsed() >= START_TIMEOUT {
            errln!(
                "error: baton serve (pid {pid}) does not answer /healthz after {} s; it is still running \
                 (`baton daemon stop` stops it). The end of {}:",
                START_TIMEOUT.as_secs(),
                log.display()
            );
            for line in tail(&log, from, TAIL_LINES) {
                errln!("  {line}");
            }
            return Ok(ExitCode::from(1));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// `daemon __setsid -- ARGS`: leaves the starter's session (this process was spawned in the
/// starter's process group, so it is no group leader and `setsid` succeeds), then replaces
/// itself with `baton ARGS`; the pid stays the same.
fn setsid_exec(args: Vec<OsString>) -> anyhow::Result<ExitCode> {
    use std::os::unix::process::CommandExt as _;
    if let Err(e) = nix::unistd::setsid() {
        errln!("warning: setsid: {e}; the server stays in the starter's session");
    }
    let exe = std::env::current_exe().context("finding the baton executable")?;
    let err = std::process::Command::new(&exe).args(&args).exec();
    Err(anyhow::anyhow!("executing {}: {err}", exe.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotation_shifts_numbered_logs_and_keeps_five() {
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join("serve.log");
        std::fs::write(&log, "x".repeat(10)).unwrap();
        assert_eq!(rotate(&log, 10, 5).unwrap(), None, "not larger than the limit");
        for i in 1..=5 {
            std::fs::write(tmp.path().join(format!("serve.log.{i}")), format!("old {i}")).unwrap();
        }
        assert_eq!(rotate(&log, 9, 5).unwrap(), Some(10));
        assert!(!log.exists());
        assert_eq!(std::fs::read_to_string(tmp.path().join("serve.log.1")).unwrap(), "x".repeat(10));
        for i in 2..=5 {
            let text = std::fs::read_to_string(tmp.path().join(format!("serve.log.{i}"))).unwrap();
            assert_eq!(text, format!("old {}", i - 1));
        }
        assert!(!tmp.path().join("serve.log.6").exists());
        assert_eq!(rotate(&tmp.path().join("absent.log"), 0, 5).unwrap(), None);
    }

    #[test]
    fn tail_reads_only_this_start() {
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join("serve.log");
        std::fs::write(&log, "old run\n").unwrap();
        let from = std::fs::metadata(&log).unwrap().len();
        let mut file = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        for i in 0..30 {
            writeln!(file, "line {i}").unwrap();
        }
        let lines = tail(&log, from, 3);
        assert_eq!(lines, ["line 27", "line 28", "line 29"]);
        assert_eq!(tail(&log, from, 100).len(), 30, "a start never shows an earlier run");
    }
}
