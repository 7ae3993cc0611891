//! The wall clock, read in exactly one place.
//!
//! The engine and model take time as an argument; the shell reads it here. Nothing else in the
//! crate calls `SystemTime::now`, `Instant::now` or `Utc::now` (enforced by `clippy.toml`).

use chrono::{DateTime, SecondsFormat, Utc};

/// The current UTC time.
#[expect(clippy::disallowed_methods, reason = "this module is the crate's one clock")]
pub fn now() -> DateTime<Utc> {
    Utc::now()
}

/// The current UTC time as RFC 3339 with second precision (`2026-01-15T09:00:00+00:00`),
/// the timestamp format of agent-baton's records.
pub fn now_rfc3339() -> String {
    now().to_rfc3339_opts(SecondsFormat::Secs, false)
}

/// A monotonic stopwatch for measuring durations (agent runs, gates, benchmarks).
#[derive(Debug, Clone, Copy)]
pub struct Stopwatch(std::time::Instant);

impl Stopwatch {
    /// Starts a stopwatch now.
    #[expect(clippy::disallowed_methods, reason = "this module is the crate's one clock")]
    pub fn start() -> Self {
        Stopwatch(std::time::Instant::now())
    }

    /// Time elapsed since `start`.
    pub fn elapsed(&self) -> std::time::Duration {
        self.0.elapsed()
    }
}
