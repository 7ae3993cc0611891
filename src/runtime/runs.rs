//! What `execute run` keeps on disk under `runs/<task_id>/`, for everyone who reads it.
//!
//! `execution.json` ([`RunMeta`]: the repository, base, feature branch and default profile of a
//! driven execution) and each attempt's run dirs: launch 1 is `<attempt>`, a re-run after the
//! attempt died with its driver is `<attempt>-r<n>`. The driver writes them; the execution
//! service (stopping a cancelled execution's attempts), the pages (an attempt's log tail), the
//! changelist, team conflicts and `baton gc` read them. This module never journals anything and
//! never launches an attempt.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use crate::engine;
use crate::model::state::{ExecutionState, StepResult, StepStatus};
use crate::runtime::agent::shim;
use crate::runtime::config::DataDir;

/// What a run remembers about its execution (`runs/<task_id>/execution.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunMeta {
    /// The repository worked on.
    pub repo: PathBuf,
    /// Where the feature branch started.
    pub base_sha: String,
    /// `baton/<task_id>`.
    pub branch: String,
    /// Default agent profile.
    pub profile: String,
}

/// `runs/<task_id>/execution.json`: written when `execute run` first drives an execution;
/// its presence means `execute run` owns the execution's attempts.
pub fn meta_path(data: &DataDir, task_id: &str) -> PathBuf {
    data.runs(task_id).join("execution.json")
}

/// The run's `execution.json`, or `None` when `execute run` never drove the execution.
///
/// Errors: the file exists but cannot be read or parsed (naming it).
pub fn read_meta(data: &DataDir, task_id: &str) -> anyhow::Result<Option<RunMeta>> {
    let path = meta_path(data, task_id);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    Ok(Some(serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))?))
}

/// Writes the run's `execution.json` (atomically, creating `runs/<task_id>/`): the driver
/// that starts an execution, a replica that claims one, and one that takes one over from the
/// remote all write it here.
///
/// Errors: the run directory cannot be created or the file written (naming it).
pub fn write_meta(data: &DataDir, task_id: &str, meta: &RunMeta) -> anyhow::Result<()> {
    let path = meta_path(data, task_id);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    crate::runtime::write_atomic(&path, serde_json::to_string_pretty(meta)?.as_bytes())
}

/// The inverse of [`launch_dir`]: (the attempt's base run dir, launch number) of a launch dir.
pub(crate) fn launch_of(run_dir: &Path) -> (PathBuf, u32) {
    let name = run_dir.file_name().map(|s| s.to_string_lossy().to_string()).unwrap_or_default();
    match name.rsplit_once("-r").and_then(|(b, n)| Some((b, n.parse::<u32>().ok()?))) {
        Some((base, n)) => (run_dir.with_file_name(base), n),
        None => (run_dir.to_path_buf(), 1),
    }
}

/// Run dir of launch `n` of an attempt: `<attempt>` for the first, `<attempt>-r<n>` for a
/// re-run after the attempt died with its driver.
pub(crate) fn launch_dir(base: &Path, n: u32) -> PathBuf {
    if n <= 1 {
        base.to_path_buf()
    } else {
        let name = base.file_name().map(|s| s.to_string_lossy().to_string()).unwrap_or_default();
        base.with_file_name(format!("{name}-r{n}"))
    }
}

/// The newest launch of an attempt that exists on disk: (launch number, dir).
pub(crate) fn latest_launch(base: &Path) -> Option<(u32, PathBuf)> {
    if !base.exists() {
        return None;
    }
    let mut n = 1;
    while launch_dir(base, n + 1).exists() {
        n += 1;
    }
    Some((n, launch_dir(base, n)))
}

/// The last `max_bytes` (at most) of what the newest launch of an attempt printed on stdout,
/// lossily decoded; empty when it has not started. For the execution page's live log tail.
pub fn attempt_log_tail(data: &DataDir, task_id: &str, step_id: &str, attempt: u32, max_bytes: u64) -> String {
    use std::io::{Read as _, Seek as _, SeekFrom};
    let Some((_, dir)) = latest_launch(&data.run_dir(task_id, step_id, attempt)) else { return String::new() };
    let Ok(mut file) = std::fs::File::open(dir.join(shim::STDOUT_FILE)) else { return String::new() };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    if file.seek(SeekFrom::Start(len.saturating_sub(max_bytes))).is_err() {
        return String::new();
    }
    let mut bytes = Vec::new();
    let _ = file.take(max_bytes).read_to_end(&mut bytes);
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Kills the process groups of every attempt still in flight for `state` (after a cancel, so
/// detached agents do not keep working for a cancelled execution): a step `dispatched`, or
/// `cancelled` (the engine's status of an attempt in flight at the cancel). Returns how many
/// it signalled.
pub fn stop_attempts(data: &DataDir, state: &ExecutionState) -> usize {
    let mut stopped = 0;
    for step_id in state.plan.phases.iter().flat_map(engine::team::dispatch_ids) {
        let in_flight = |r: &&StepResult| matches!(r.status, StepStatus::Dispatched | StepStatus::Cancelled);
        let Some(r) = state.result(&step_id).filter(in_flight) else { continue };
        let Some((_, dir)) = latest_launch(&data.run_dir(&state.task_id, &step_id, r.attempt)) else { continue };
        if matches!(shim::kill_attempt(&dir), Ok(true)) {
            stopped += 1;
        }
    }
    stopped
}

/// Whether attempt `attempt` of `step_id` still runs under this data directory (its newest
/// launch's shim is alive), whatever drives the execution now (a paused driver leaves its
/// agents running).
pub fn attempt_running(data: &DataDir, task_id: &str, step_id: &str, attempt: u32) -> bool {
    latest_launch(&data.run_dir(task_id, step_id, attempt))
        .is_some_and(|(_, dir)| matches!(shim::inspect(&dir), Ok(shim::AttemptState::Running)))
}

/// Kills the process groups of every attempt of `task_id` whose shim still runs in this data
/// directory, whatever the journal says of it: what a driver that lost its lease to another
/// replica does (that replica does not see these run directories, so it runs the steps again;
/// left alone, these agents would keep working, and spending, for nobody). Returns how many it
/// signalled.
pub fn stop_running_attempts(data: &DataDir, task_id: &str) -> usize {
    let mut stopped = 0;
    let Ok(steps) = std::fs::read_dir(data.runs(task_id)) else { return 0 };
    for step in steps.flatten().filter(|e| e.path().is_dir()) {
        let Ok(launches) = std::fs::read_dir(step.path()) else { continue };
        for launch in launches.flatten().map(|e| e.path()).filter(|p| p.is_dir()) {
            if matches!(shim::inspect(&launch), Ok(shim::AttemptState::Running))
                && matches!(shim::kill_attempt(&launch), Ok(true))
            {
                stopped += 1;
            }
        }
    }
    stopped
}

/// The idempotency key under which a driver journals the dispatch of `attempt` of `step_id`
/// (`dispatch:<task_id>:<step_id>:<attempt>`): a restarted driver's resend of it is a
/// duplicate, and any replica reading the journal can tell that a driver launched the attempt
/// (so its quota waits come from that driver only, see `Ops`).
pub fn dispatch_key(task_id: &str, step_id: &str, attempt: u32) -> String {
    format!("dispatch:{task_id}:{step_id}:{attempt}")
}

/// The feature branch of an execution, `baton/<task_id>` (seed-spec §3): the one name the
/// driver, the remote and a merge all use.
pub fn feature_branch(task_id: &str) -> String {
    format!("baton/{task_id}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launch_of_inverts_launch_dir() {
        let base = Path::new("/d/runs/t/1.1-r/2");
        for n in [1, 2, 7] {
            assert_eq!(launch_of(&launch_dir(base, n)), (base.to_path_buf(), n));
        }
    }
}
