//! Gates: the plan's command (through `sh -c`) and each agent addition (as its own argv, never
//! through a shell) in the integration worktree at the feature branch tip, in their own
//! process group with a timeout, and the `gate_recorded` event. A gate a crashed driver left
//! running is stopped before the next one. A gate the engine says has nothing to run is
//! recorded as `gate_skipped` without running anything (issue 14.4); a `ci` or `review` gate
//! with no command goes to `ci` instead (issue 19.2). It never changes the feature branch.

use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;

use crate::engine;
use crate::git;
use crate::model::action::GateAction;
use crate::model::event::EventKind;
use crate::model::state::ExecutionState;
use crate::model::text::shell_quote;
use crate::runtime::agent::output::tail;
use crate::runtime::{blocking, write_atomic};

use super::{crash_point, Driver};

/// `runs/<task_id>/gate.pgid`: the process group of a running gate.
pub(super) const GATE_PGID_FILE: &str = "gate.pgid";

/// Lint gates also fail on error markers in their output (seed-spec §2.7); review gates and
/// unknown types are judged by the exit code alone.
fn gate_type_passes(gate_type: &str, output: &str) -> bool {
    if gate_type != "lint" {
        return true;
    }
    const MARKERS: &[&str] = &[": error:", ":E:", " E ", "[E", "Error:", "ERROR", "SyntaxError", "error:"];
    !output.lines().any(|l| MARKERS.iter().any(|m| l.contains(m)))
}

/// The files the steps of phase `phase_id` changed, sorted, each once.
fn phase_files(state: &ExecutionState, phase_id: i64) -> Vec<String> {
    let Some(phase) = state.plan.phase_index(phase_id).and_then(|i| state.plan.phases.get(i)) else {
        return Vec::new();
    };
    engine::gates::phase_files(state, phase).into_iter().map(str::to_string).collect()
}

/// Runs one gate command, `argv` (the plan's command as `sh -c …`, an agent addition as its
/// own words), in `cwd`, in its own process group, with the agent environment and a timeout.
/// Returns (exit 0, output tail, exit code).
async fn run_gate_argv(
    argv: &[String],
    cwd: &Path,
    env: &[(String, String)],
    timeout_secs: u64,
    marker: &Path,
) -> anyhow::Result<(bool, String, Option<i32>)> {
    let Some((program, args)) = argv.split_first() else {
        return Ok((false, "empty gate command".into(), None));
    };
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .current_dir(cwd)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .process_group(0);
    let child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => return Ok((false, format!("gate command could not start: {e}"), None)),
    };
    let _group = GroupGuard(child.id().and_then(|pid| i32::try_from(pid).ok()));
    // The gate's process group, so a driver that restarts after a crash can stop a gate its
    // predecessor left running before it runs the gate again.
    if let Some(pid) = child.id() {
        write_atomic(marker, pid.to_string().as_bytes())?;
    }
    let result = tokio::time::timeout(Duration::from_secs(timeout_secs.max(1)), child.wait_with_output()).await;
    let _ = std::fs::remove_file(marker);
    match result {
        Ok(Ok(out)) => {
            let mut text = String::from_utf8_lossy(&out.stdout).to_string();
            let err = String::from_utf8_lossy(&out.stderr);
            if !err.trim().is_empty() {
                text.push_str(&err);
            }
            let code = out.status.code();
            Ok((out.status.success(), tail(&text, 4000).to_string(), code))
        }
        Ok(Err(e)) => Ok((false, format!("gate command failed: {e}"), None)),
        Err(_) => Ok((false, format!("gate timed out after {timeout_secs} s"), None)),
    }
}

/// Kills a gate's whole process group when dropped: when the gate ends, when it times out,
/// and when the driver running it is stopped (a cancel drops the gate's future). The child's
/// `kill_on_drop` alone killed only `sh`, and what the gate started (a test suite's workers,
/// a `sleep`) ran on under init (found by a tester).
struct GroupGuard(Option<i32>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.0.filter(|pgid| *pgid > 1) {
            let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), nix::sys::signal::Signal::SIGKILL);
        }
    }
}

/// Stops a gate a crashed driver left running (its process group is in the marker file).
pub(super) fn stop_orphan_gate(marker: &Path) {
    let Ok(text) = std::fs::read_to_string(marker) else { return };
    if let Ok(pgid) = text.trim().parse::<i32>() {
        if pgid > 1 {
            let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), nix::sys::signal::Signal::SIGKILL);
            tracing::warn!(gate.pgid = pgid, "stopped the gate (process group {pgid}) a previous driver left running");
        }
    }
    let _ = std::fs::remove_file(marker);
}

impl Driver {
    /// Runs the gate in the integration worktree at the feature branch tip and records it.
    /// A gate the engine says has nothing to run (`skip_reason`) is recorded as skipped without
    /// running anything.
    pub(super) async fn gate(&mut self, state: &mut ExecutionState, g: &GateAction) -> anyhow::Result<()> {
        if let Some(check) = g.check {
            return self.external_gate(state, g, check).await;
        }
        let key = format!("gate:{}:{}:{}", state.task_id, g.phase_id, g.attempt);
        if let Some(reason) = &g.skip_reason {
            errln!("gate {} of phase {} skipped: {reason} (nothing was checked)", g.gate_type, g.phase_id);
            crash_point("before-gate-record");
            let kind = EventKind::GateSkipped { phase_id: g.phase_id, reason: reason.clone() };
            return self.record(state, kind, key).await;
        }
        let command = g.gate_command.trim().to_string();
        let (passed, output, exit_code) = if command.is_empty() && g.additions.is_empty() {
            // The engine sets `skip_reason` for such a gate; an empty run is never a pass.
            (false, format!("gate {} of phase {} has nothing to run", g.gate_type, g.phase_id), None)
        } else {
            let path = self.data.integration_worktree(&state.task_id);
            let (repo, branch) = (self.repo.clone(), self.meta.branch.clone());
            let tip = blocking(move || repo.branch_tip(&branch)?.ok_or(git::GitError::UnknownRevision { rev: branch }))
                .await?
                .context("preparing the integration worktree")?;
            self.integration_worktree(path.clone(), tip).await?;
            errln!("gate {} of phase {} (attempt {}): {command}", g.gate_type, g.phase_id, g.attempt);
            let marker = self.data.runs(&state.task_id).join(GATE_PGID_FILE);
            let timeout = self.config.runtime.gate_timeout_secs;
            // The plan's command through `sh -c` (plan authors write shell), then each agent
            // addition as its own argv, never through a shell; every one must pass.
            let mut runs: Vec<(String, Vec<String>)> = Vec::new();
            if !command.is_empty() {
                runs.push((command.clone(), vec!["sh".into(), "-c".into(), command.clone()]));
            }
            let files = phase_files(state, g.phase_id);
            for addition in &g.additions {
                match engine::gate_additions::split(addition) {
                    Some(words) if !words.is_empty() => {
                        let argv: Vec<String> = words
                            .into_iter()
                            .flat_map(|w| if w == "{files}" { files.clone() } else { vec![w] })
                            .collect();
                        let shown = argv.iter().map(|w| shell_quote(w)).collect::<Vec<_>>();
                        runs.push((shown.join(" "), argv));
                    }
                    _ => {}
                }
            }
            let mut all = (true, String::new(), None);
            for (shown, argv) in &runs {
                if runs.len() > 1 {
                    errln!("gate {} of phase {}: {shown}", g.gate_type, g.phase_id);
                }
                let (ok, out, code) = run_gate_argv(argv, &path, &self.env, timeout, &marker).await?;
                if runs.len() > 1 {
                    all.1.push_str(&format!("$ {shown}\n"));
                }
                all.1.push_str(&out);
                if !all.1.ends_with('\n') {
                    all.1.push('\n');
                }
                all.2 = code;
                if !ok {
                    all.0 = false;
                    break;
                }
            }
            (all.0, tail(&all.1, 4000).to_string(), all.2)
        };
        let passed = passed && gate_type_passes(&g.gate_type, &output);
        errln!("gate of phase {} {}", g.phase_id, if passed { "passed" } else { "failed" });
        crash_point("before-gate-record");
        let kind = EventKind::GateRecorded { phase_id: g.phase_id, passed, output, command: Some(command), exit_code };
        self.record(state, kind, key).await
    }
}
