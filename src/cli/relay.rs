//! The CLI relay: a `baton execute …` call made while `baton serve` runs on the same data
//! directory is run by that server instead of a fresh process, so its cost does not grow with
//! the plan (issue 14.8). A one-shot process opens the store, reads the newest snapshot (a
//! megabyte at 5,000 steps) and replays the events after it on every call; the server keeps
//! each execution's state in memory and applies only what was journaled since.
//!
//! Owns: the socket `<data>/cli.sock` (created by the server, mode 0600, removed at shutdown;
//! only a client of the same Unix user is served), the request and reply shapes (one JSON
//! document each way, the request at most [`MAX_REQUEST_BYTES`]), the client's choice
//! (`forward`) and the server's answer ([`listen`]).
//!
//! A call is relayed only when it means the same in both processes: a command that names an
//! execution and reads no file (`next`, `dispatched`, `record`, decisions, `status` …; never
//! `start`, `run` or `list`), the same data directory, the same Unix user, and the same
//! environment where it matters (`USER` and every `BATON_*` variable but the ones the client
//! resolves itself, `BATON_DATA_DIR`, `BATON_USER`, `BATON_TASK_ID`, `BATON_LOG`). Otherwise
//! the server says so and the client runs the command itself, as it would with no server:
//! relaying is an optimisation, never a change of meaning. `BATON_RELAY=0` turns it off.
//!
//! Never: decides anything (the server runs the same command code over the same operator
//! service), relays a call the client could not parse, or falls back to running a command
//! in-process after the server received it (the server may have recorded it: the client says
//! so and exits 1, and the same call again is safe, since recordings are idempotent).

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::{Cli, Command};
use crate::runtime::config::DataDir;
use crate::runtime::console;
use crate::runtime::ops::Ops;

/// The socket's file name in the data directory.
pub const SOCKET: &str = "cli.sock";

/// The largest request the server reads, bytes (a recording's `--outcome` text included).
pub const MAX_REQUEST_BYTES: u64 = 4 << 20;

/// Variables the client resolves itself (sent as values) or that only shape its own logging.
const RESOLVED_VARS: [&str; 5] = ["BATON_DATA_DIR", "BATON_USER", "BATON_TASK_ID", "BATON_LOG", "BATON_RELAY"];

/// One call, as the client parsed it.
#[derive(Debug, Serialize, Deserialize)]
struct Request {
    /// The command line as typed (program name first).
    argv: Vec<String>,
    /// The data directory, absolute.
    data_dir: PathBuf,
    /// `--as` / `BATON_USER`, as the client resolved it.
    as_user: Option<String>,
    /// `--task-id` / `BATON_TASK_ID`, as the client resolved it.
    task_id: Option<String>,
    /// `USER` and the `BATON_*` variables that are not resolved above.
    env: BTreeMap<String, String>,
}

/// The server's answer.
#[derive(Debug, Serialize, Deserialize)]
enum Reply {
    /// The command ran: its exit code and what it printed.
    Ran { code: u8, stdout: String, stderr: String },
    /// Not relayed (the reason is for debugging): the client runs the command itself.
    Declined { reason: String },
}

/// The environment that must match for a call to mean the same in both processes.
fn relevant_env(vars: impl Iterator<Item = (String, String)>) -> BTreeMap<String, String> {
    vars.filter(|(k, _)| (k == "USER" || k.starts_with("BATON_")) && !RESOLVED_VARS.contains(&k.as_str())).collect()
}

/// The socket of `data_dir`, if its path fits a Unix socket address (108 bytes on Linux).
fn socket_path(data_dir: &Path) -> Option<PathBuf> {
    let path = data_dir.join(SOCKET);
    (path.as_os_str().len() < 100).then_some(path)
}

/// `dir` as both sides of the relay compare it: canonical (symlinks and `..` resolved), else
/// absolute when it does not exist. A client that named the server's data directory another
/// way (`p/../d1`, a symlink) was declined as "another data directory", and its `execute
/// cancel`, run in-process, then stopped the server (found by a tester).
fn resolved(dir: &Path) -> Option<PathBuf> {
    std::fs::canonicalize(dir).or_else(|_| std::path::absolute(dir)).ok()
}

/// Client side: runs `cli` in the server listening on its data directory, if there is one and
/// the call may be relayed; `None` means "run it here".
pub(super) fn forward(cli: &mut Cli) -> Option<ExitCode> {
    if std::env::var_os("BATON_RELAY").is_some_and(|v| v == "0") {
        return None;
    }
    let Command::Execute { command } = &mut cli.command else { return None };
    let task_id = command.relayed_task_mut()?.task_id.clone();
    let data_dir = resolved(&cli.data_dir)?;
    let socket = socket_path(&data_dir)?;
    // No server (no socket, or a stale one): the usual in-process run.
    let mut stream = std::os::unix::net::UnixStream::connect(&socket).ok()?;
    let argv = std::env::args_os().map(|a| a.into_string().ok()).collect::<Option<Vec<_>>>()?;
    let env =
        relevant_env(std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))));
    let request = Request { argv, data_dir, as_user: cli.as_user.clone(), task_id, env };
    let body = serde_json::to_vec(&request).ok()?;
    if stream.write_all(&body).and_then(|()| stream.shutdown(std::net::Shutdown::Write)).is_err() {
        // The server went away before it read the call: nothing was run.
        return None;
    }
    let mut answer = Vec::new();
    let reply = stream
        .read_to_end(&mut answer)
        .map_err(|e| e.to_string())
        .and_then(|_| serde_json::from_slice::<Reply>(&answer).map_err(|e| e.to_string()));
    match reply {
        Ok(Reply::Ran { code, stdout, stderr }) => {
            tracing::debug!("the server on {} ran the call (CLI relay)", socket.display());
            let _ = std::io::stdout().lock().write_all(stdout.as_bytes());
            let _ = std::io::stderr().lock().write_all(stderr.as_bytes());
            Some(ExitCode::from(code))
        }
        Ok(Reply::Declined { reason }) => {
            tracing::debug!("the server declined to relay the call ({reason}): running it here");
            None
        }
        Err(e) => {
            errln!(
                "error: the server on {} stopped answering ({e}); it may have recorded the call: run it again (a \
                 recording with the same arguments has one effect)",
                socket.display()
            );
            Some(ExitCode::from(1))
        }
    }
}

/// Server side: listens on `<data>/cli.sock` and runs each relayed call over `ops` (the
/// server's operator service, with its state cache), until the returned guard is dropped
/// (which also removes the socket).
///
/// Errors: the socket cannot be created (a data directory that is not writable). A data
/// directory whose path is too long for a socket address gets no relay (`Ok(None)`).
pub async fn listen(data: &DataDir, ops: Ops) -> anyhow::Result<Option<RelayGuard>> {
    let Some(root) = resolved(data.root()) else {
        anyhow::bail!("the data directory {} cannot be resolved", data.root().display());
    };
    let Some(path) = socket_path(&root) else {
        tracing::info!("no CLI relay: the data directory's path is too long for a Unix socket");
        return Ok(None);
    };
    // The server lock is held: a socket left here is a dead server's.
    let _ = std::fs::remove_file(&path);
    let listener = tokio::net::UnixListener::bind(&path)
        .map_err(|e| anyhow::anyhow!("creating the CLI relay socket {}: {e}", path.display()))?;
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    // This process's user: the owner of the socket it just created.
    let me = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&path)?);
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            if stream.peer_cred().map(|c| c.uid()).ok() != Some(me) {
                continue;
            }
            let ops = ops.clone();
            let root = root.clone();
            tokio::spawn(async move {
                if let Err(e) = answer(stream, &root, ops).await {
                    tracing::debug!("CLI relay: {e}");
                }
            });
        }
    });
    Ok(Some(RelayGuard { path, task }))
}

/// The relay's listener: dropping it stops listening and removes the socket.
#[derive(Debug)]
pub struct RelayGuard {
    path: PathBuf,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RelayGuard {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.path);
    }
}

async fn answer(mut stream: tokio::net::UnixStream, root: &Path, ops: Ops) -> anyhow::Result<()> {
    let mut body = Vec::new();
    (&mut stream).take(MAX_REQUEST_BYTES).read_to_end(&mut body).await?;
    let reply = match serde_json::from_slice::<Request>(&body) {
        Ok(request) => run(request, root, ops).await,
        Err(e) => Reply::Declined { reason: format!("unreadable request: {e}") },
    };
    stream.write_all(&serde_json::to_vec(&reply)?).await?;
    stream.shutdown().await?;
    Ok(())
}

async fn run(request: Request, root: &Path, ops: Ops) -> Reply {
    let declined = |reason: String| Reply::Declined { reason };
    if request.data_dir != root {
        return declined(format!("another data directory ({})", request.data_dir.display()));
    }
    let ours =
        relevant_env(std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))));
    if ours != request.env {
        return declined("a different environment".into());
    }
    let mut cli = match <Cli as clap::Parser>::try_parse_from(&request.argv) {
        Ok(cli) => cli,
        Err(e) => return declined(format!("the command line does not parse here: {e}")),
    };
    let json = cli.json;
    let Command::Execute { command } = &mut cli.command else { return declined("not an execute command".into()) };
    let Some(task) = command.relayed_task_mut() else { return declined("not a relayed command".into()) };
    task.task_id = request.task_id;
    let Command::Execute { command } = cli.command else { return declined("not an execute command".into()) };
    let as_user = request.as_user;
    let (code, printed) = console::capture(async {
        let result = super::execute::execute_with(&ops, command, json, as_user.as_deref()).await;
        super::output::conclude(result, json)
    })
    .await;
    Reply::Ran { code, stdout: printed.stdout, stderr: printed.stderr }
}
