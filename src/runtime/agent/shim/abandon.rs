//! Giving up a run directory whose shim never took its lock ([`abandon`]), so that a shim that
//! starts late can never run the agent there. It never kills, reads output or launches.
//!
//! A driver that dies between spawning the shim and the shim's `flock` leaves a run directory
//! that looks "not started". Recovery launches the attempt again in a new run directory; the
//! old shim may still be on its way (a busy machine can take seconds to exec it). Waiting a
//! fixed grace is a guess; [`abandon`] decides it under the same lock the shim takes: either the
//! shim got the lock first (the attempt is running and is re-adopted) or the directory is
//! marked abandoned first and the shim, seeing the mark once it holds the lock, exits without
//! starting anything.

use std::fs::OpenOptions;
use std::path::Path;

use anyhow::{anyhow, Context, Result};
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use super::records::write_atomic;
use super::{ABANDONED_FILE, EXIT_FILE, LOCK_FILE, STARTED_FILE};

/// Marks the never-started attempt in `run_dir` as abandoned.
///
/// Takes the exclusive lock on `<run-dir>/lock` without waiting. Returns `Ok(true)` when the
/// directory is (now, or already was) abandoned: no shim will ever start its agent.
/// Returns `Ok(false)` when a shim holds the lock or has already started or finished there:
/// the attempt is live or over, and the caller must inspect it again rather than re-run it.
/// Errors on IO failure.
pub fn abandon(run_dir: &Path) -> Result<bool> {
    let lock_path = run_dir.join(LOCK_FILE);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&lock_path)
        .with_context(|| format!("opening {}", lock_path.display()))?;
    let _held = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(held) => held,
        Err((_, Errno::EWOULDBLOCK)) => return Ok(false),
        Err((_, errno)) => return Err(anyhow!("locking {}: {errno}", lock_path.display())),
    };
    if run_dir.join(STARTED_FILE).exists() || run_dir.join(EXIT_FILE).exists() {
        return Ok(false);
    }
    if !run_dir.join(ABANDONED_FILE).exists() {
        write_atomic(
            run_dir,
            ABANDONED_FILE,
            b"{\"reason\":\"the launching driver died before this shim started; the attempt was launched again\"}\n",
        )?;
    }
    Ok(true)
}
