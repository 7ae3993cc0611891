//! Killing an attempt's processes from outside its shim ([`kill_attempt`]): the agent's process
//! group named in `started.json` and the members of the attempt's cgroup. It never decides
//! whether an attempt should die, and never writes a record.

use std::path::Path;
use std::time::Duration;

use anyhow::{anyhow, Result};
use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use super::records::read_started;
use super::STARTED_FILE;
use crate::runtime::agent::procs;

/// Sends SIGKILL to the agent's process group named in `started.json`, and to every other
/// process in the attempt's cgroup when it has one (the shim excepted).
///
/// Returns `Ok(true)` if a signal was delivered, `Ok(false)` if there is no `started.json` or
/// the group (and the cgroup) is already empty. A live shim then records the agent as killed by
/// signal 9 and ends what the agent left behind (see [`crate::runtime::agent::procs`]); when the shim is dead too,
/// only the cgroup still finds descendants that left the agent's group. Refuses (errors on) a
/// recorded group id of 0 or 1 or baton's own group, and ignores a recorded cgroup that is not
/// an attempt's (`baton-attempt-<pid>`). Gotcha: after the group is gone its id could in
/// principle be reused by an unrelated group leader; call this only for attempts that
/// [`inspect`](fn@super::inspect) reports as running or died.
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
        for pid in procs::members(dir) {
            if pid > 1 && pid != me && u32::try_from(pid).ok() != Some(started.shim_pid) {
                delivered |= nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL).is_ok();
            }
        }
        // A shim that died left its cgroup behind: removed once empty (a live shim removes
        // its own, and does not mind finding it gone).
        procs::remove_when_empty(dir, Duration::from_millis(200));
    }
    Ok(delivered)
}
