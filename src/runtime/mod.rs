//! The imperative shell: the execution service, drivers that carry out actions, agent
//! launches, gates, crash recovery and garbage collection.
//!
//! `runtime` composes `engine` (pure), `store` (SQLite) and `git`; it never serves HTTP.

pub mod agent;
pub mod app;
pub mod auth;
pub mod board;
pub mod changelist;
pub mod changes;
pub mod ci;
pub mod ci_events;
pub mod config;
pub mod console;
pub mod driver;
pub mod executions;
pub mod fixes;
pub mod forge;
pub mod gc;
pub mod intake;
pub mod lease;
pub mod merge;
pub mod ops;
pub mod pool;
pub mod portfolio;
pub mod pulls;
pub mod remediation;
pub mod remote;
pub mod report;
pub mod review;
pub mod runs;
pub mod specs;
pub mod spend;
pub mod teams;
pub mod users;
pub mod views;

tokio::task_local! {
    /// The execution the current task drives (the server's driver pool sets it), so that the
    /// driver's log lines (`errln!`) name it: two executions' lines can be told apart.
    pub static DRIVING: String;
}

/// The execution the current task drives, if any ([`DRIVING`]).
pub fn driving() -> Option<String> {
    DRIVING.try_with(Clone::clone).ok()
}

/// Where `errln!` lines go: the relay's capture while a command runs for a CLI client
/// ([`console::capture`]), else a `tracing` event (target `baton::progress`, info, with the
/// execution's `task.id`) inside a pool-driven task of `baton serve`, stderr otherwise; a
/// closed stderr is ignored. The line is [`console::printable`]: no escape sequence reaches a terminal.
pub fn progress(line: &str) {
    let line = &*console::printable(line);
    if console::stderr_line(line) {
        return;
    }
    match driving() {
        Some(id) => tracing::event!(target: "baton::progress", tracing::Level::INFO, task.id = %id, "{line}"),
        None => {
            let _ = writeln!(std::io::stderr().lock(), "{line}");
        }
    }
}

use std::io::Write as _;
use std::path::Path;

use anyhow::Context as _;

/// A client's mistake (bad input, unknown id, wrong state, a misconfiguration): the CLI exits
/// 2, the API answers 4xx. The message says what was wrong and where.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadInput(pub String);

/// Runs blocking work (git2, the git CLI, file scans) off the async threads, in the current span.
pub async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> anyhow::Result<T> {
    let span = tracing::Span::current();
    tokio::task::spawn_blocking(move || span.in_scope(f)).await.context("a blocking task panicked")
}

/// Writes `bytes` to `path` atomically: a temporary file in the same directory, fsync, rename.
///
/// Errors: the directory is missing or not writable (naming the path).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir).with_context(|| format!("writing {}", path.display()))?;
    tmp.write_all(bytes).with_context(|| format!("writing {}", path.display()))?;
    tmp.as_file().sync_all().with_context(|| format!("syncing {}", path.display()))?;
    tmp.persist(path).with_context(|| format!("replacing {}", path.display()))?;
    Ok(())
}

/// The server lock's file in a data dir ([`server_lock`]): it holds the pid of the server
/// that holds the lock (or last held it).
pub const SERVER_LOCK_FILE: &str = "serve.lock";

/// The data dir's server lock (`serve.lock`, an exclusive `flock` held while the returned
/// value lives, with this process's pid written in it): one `baton serve` per data dir.
///
/// Errors ([`BadInput`]): another process holds it (naming its pid); the file cannot be opened.
pub fn server_lock(data: &config::DataDir) -> anyhow::Result<nix::fcntl::Flock<std::fs::File>> {
    use std::io::{Read as _, Seek as _, Write as _};
    let path = data.root().join(SERVER_LOCK_FILE);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| anyhow::anyhow!("opening {}: {e}", path.display()))?;
    match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
        Ok(mut lock) => {
            let _ = lock.set_len(0);
            let _ = lock.rewind();
            let _ = write!(lock, "{}", std::process::id());
            let _ = lock.flush();
            Ok(lock)
        }
        Err((mut file, _)) => {
            let mut pid = String::new();
            let _ = file.read_to_string(&mut pid);
            Err(BadInput(format!(
                "another baton serve (pid {}) already uses the data dir {}; stop it or pass another --data-dir",
                pid.trim(),
                data.root().display()
            ))
            .into())
        }
    }
}
