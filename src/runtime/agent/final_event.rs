//! An agent's final event: which stdout line ends its run, and the watch that stops an agent
//! still running after it (see [`FinalWatch`]).
//!
//! claude prints one stream-json `result` event when it is done, codex ends its turn with
//! `turn.completed`; a process that keeps running afterwards (a child holding a pipe, a hung MCP
//! server) has nothing left to say. The shim reads the agent's stdout as it grows with a
//! [`FinalWatcher`] and stops it once its final event has stood for the grace; the result it
//! printed is then harvested as if it had exited.

use std::fs::File;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::clock::Stopwatch;

/// Which event in an agent's stdout is its final word: after it, the run is over and the agent
/// is expected to exit (see [`final_event_line`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinalEvent {
    /// claude's stream-json `{"type":"result",…}` (the demo agent prints it too).
    ClaudeResult,
    /// codex's `{"type":"turn.completed",…}` or `{"type":"turn.failed",…}`.
    CodexTurnEnd,
}

/// What one line of stdout says about the end of a run: `Some(true)` for a final event of
/// `kind`, `Some(false)` for any other JSON event (the agent is still at work: an earlier final
/// event no longer counts), `None` for anything else (a blank line, text, a partial line).
pub fn final_event_line(kind: FinalEvent, line: &str) -> Option<bool> {
    let line = line.trim();
    if !line.starts_with('{') {
        return None;
    }
    let value: Value = serde_json::from_str(line).ok()?;
    let event = value.get("type").and_then(Value::as_str)?;
    Some(match kind {
        FinalEvent::ClaudeResult => event == "result",
        FinalEvent::CodexTurnEnd => matches!(event, "turn.completed" | "turn.failed"),
    })
}

/// An agent that printed its final event (claude's `result`) but does not exit — a child
/// holding a pipe, a hung MCP server — is stopped `grace_secs` after it (its process group,
/// SIGTERM then SIGKILL) and the attempt ends with the result it gave. Any later event starts
/// the wait over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FinalWatch {
    /// Which event ends the agent's run.
    pub event: FinalEvent,
    /// Seconds the agent may keep running after it.
    pub grace_secs: u64,
}

/// Reads the agent's stdout as it grows and says when its final event has stood (no event
/// after it) for the grace of its [`FinalWatch`].
#[derive(Debug)]
pub struct FinalWatcher {
    path: PathBuf,
    watch: FinalWatch,
    /// Bytes of the file read so far.
    offset: u64,
    /// The last line read, not yet ended by a newline.
    partial: Vec<u8>,
    /// Since when the last event seen is a final one.
    since: Option<Stopwatch>,
}

impl FinalWatcher {
    /// Watches the stdout file at `path` for `watch`.
    pub fn new(path: PathBuf, watch: FinalWatch) -> FinalWatcher {
        FinalWatcher { path, watch, offset: 0, partial: Vec::new(), since: None }
    }

    /// Reads what was written since the last call; true once the grace after the final event
    /// has passed.
    pub fn overdue(&mut self) -> bool {
        self.read_new();
        self.since.as_ref().is_some_and(|since| since.elapsed() >= Duration::from_secs(self.watch.grace_secs))
    }

    fn read_new(&mut self) {
        use std::io::{Read as _, Seek as _, SeekFrom};
        let Ok(mut file) = File::open(&self.path) else { return };
        if file.seek(SeekFrom::Start(self.offset)).is_err() {
            return;
        }
        let mut fresh = Vec::new();
        if file.read_to_end(&mut fresh).is_err() || fresh.is_empty() {
            return;
        }
        self.offset += fresh.len() as u64;
        self.partial.extend_from_slice(&fresh);
        while let Some(end) = self.partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=end).collect();
            self.see(&String::from_utf8_lossy(&line));
        }
        // A final event still waiting for its newline counts once it parses whole.
        if self.since.is_none() && self.partial.trim_ascii_end().ends_with(b"}") {
            let line = String::from_utf8_lossy(&self.partial).into_owned();
            if final_event_line(self.watch.event, &line) == Some(true) {
                self.since = Some(Stopwatch::start());
            }
        }
    }

    fn see(&mut self, line: &str) {
        match final_event_line(self.watch.event, line) {
            Some(true) if self.since.is_none() => self.since = Some(Stopwatch::start()),
            Some(true) | None => {}
            Some(false) => self.since = None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::fixture;
    use super::*;

    #[test]
    fn final_events_are_recognised_per_agent() {
        let stdout = fixture("agent-cli/claude/stream-json.write-file-run.ndjson");
        let kinds: Vec<Option<bool>> = stdout.lines().map(|l| final_event_line(FinalEvent::ClaudeResult, l)).collect();
        assert_eq!(kinds.last(), Some(&Some(true)), "the fixture ends with its result");
        assert!(kinds[..kinds.len() - 1].iter().all(|k| *k == Some(false)));
        let codex = fixture("agent-cli/codex/exec-json.jsonl");
        let last = codex.lines().rfind(|l| !l.trim().is_empty()).unwrap();
        assert_eq!(final_event_line(FinalEvent::CodexTurnEnd, last), Some(true));
        assert_eq!(final_event_line(FinalEvent::CodexTurnEnd, r#"{"type":"turn.started"}"#), Some(false));
        assert_eq!(final_event_line(FinalEvent::ClaudeResult, r#"{"type":"turn.completed"}"#), Some(false));
        assert_eq!(final_event_line(FinalEvent::ClaudeResult, "  "), None);
        assert_eq!(final_event_line(FinalEvent::ClaudeResult, "{\"type\":\"res"), None);
        assert_eq!(final_event_line(FinalEvent::ClaudeResult, "result"), None);
    }
}
