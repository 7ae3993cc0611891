//! The agent-process layer: run directories and the detached attempt shim, agent profiles,
//! output parsers, MCP servers per step, the subagent roster and the bundled demo agent.
//!
//! Invariant: an agent is always an argv with a whitelisted environment, never a shell command;
//! prompts and agent output are data. Whether an attempt is alive is decided by the run
//! directory's lock, never by a pid.

pub mod demo;
pub mod final_event;
pub mod interrupt;
pub mod mcp;
pub mod output;
pub mod procs;
pub mod profile;
pub mod quota;
pub mod roster;
pub mod shim;

pub use demo::run_demo_agent;
pub use final_event::{final_event_line, FinalEvent, FinalWatch};
pub use output::{parse_claude_stream_json, parse_codex_jsonl, parse_command_output, AgentOutput};
pub use profile::{
    agent_env, build_argv, final_event, final_watch, parse_output, AgentCommand, AgentInvocation, AgentProfile,
};
pub use roster::{load_roster, AgentDefinition, Roster};
pub use shim::{
    inspect, kill_attempt, launch, prepare_run_dir, run_dir, run_shim, supervise, wait_until_finished, AttemptSpec,
    AttemptState, ExitRecord, LaunchedAttempt, StartedRecord, WaitError,
};

#[cfg(test)]
pub(crate) mod test_support {
    //! Locating the repository's fixtures (`tests/fixtures`, see its README.md).

    use std::path::PathBuf;

    /// The fixtures folder, `<manifest>/tests/fixtures`.
    ///
    /// Panics when it is missing: a test never passes without its input.
    pub(crate) fn fixtures_dir() -> PathBuf {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        assert!(dir.is_dir(), "the fixtures folder {} is missing", dir.display());
        dir
    }

    /// The text of fixture `rel` (a path under [`fixtures_dir`]); panics naming the file when
    /// it cannot be read.
    pub(crate) fn fixture(rel: &str) -> String {
        let path = fixtures_dir().join(rel);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading fixture {}: {e}", path.display()))
    }
}
