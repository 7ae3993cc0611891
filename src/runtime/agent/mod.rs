//! The agent-process layer: run directories and the detached attempt shim, agent profiles,
//! output parsers, the subagent roster and the bundled demo agent.
//!
//! Invariant: an agent is always an argv with a whitelisted environment, never a shell command;
//! prompts and agent output are data. Whether an attempt is alive is decided by the run
//! directory's lock, never by a pid.

pub mod demo;
pub mod output;
pub mod profile;
pub mod roster;
pub mod shim;

pub use demo::run_demo_agent;
pub use output::{parse_claude_stream_json, parse_codex_jsonl, parse_command_output, AgentOutput};
pub use profile::{agent_env, build_argv, parse_output, AgentCommand, AgentInvocation, AgentProfile};
pub use roster::{load_roster, AgentDefinition, Roster};
pub use shim::{
    inspect, kill_attempt, launch, prepare_run_dir, run_dir, run_shim, supervise, wait_until_finished, AttemptSpec,
    AttemptState, ExitRecord, LaunchedAttempt, StartedRecord, WaitError,
};

#[cfg(test)]
pub(crate) mod test_support {
    //! Locating the shared, real fixtures (`$BATON_FIXTURES`, else `<manifest>/../shared/fixtures`).

    use std::path::PathBuf;

    /// The fixtures folder; `None` (after printing a notice) when it is missing outside CI.
    ///
    /// Panics when it is missing and `CI=true`: in CI a missing folder is a failure, not a skip.
    pub(crate) fn fixtures_dir() -> Option<PathBuf> {
        let dir = std::env::var_os("BATON_FIXTURES")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures"));
        if dir.is_dir() {
            return Some(dir);
        }
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "fixtures folder {} is missing (set BATON_FIXTURES)",
            dir.display()
        );
        errln!("notice: fixtures folder {} not found; skipping conformance test", dir.display());
        None
    }

    /// The text of `<fixtures>/<rel>`, or `None` when the folder is missing (see above).
    pub(crate) fn fixture(rel: &str) -> Option<String> {
        let dir = fixtures_dir()?;
        let path = dir.join(rel);
        Some(std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading fixture {}: {e}", path.display())))
    }
}
