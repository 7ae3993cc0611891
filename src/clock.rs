//! The wall clock, read in exactly one place.
//!
//! The engine and model take time as an argument; the shell reads it here. Nothing else in the
//! crate calls `SystemTime::now`, `Instant::now` or `Utc::now` (enforced by `clippy.toml`).

use std::sync::{Arc, Mutex, PoisonError};

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

/// A clock a service reads: the wall clock, or a manual one tests move without sleeping.
/// Cheap to clone; clones of a manual clock share its time.
#[derive(Debug, Clone, Default)]
pub struct Clock(Option<Arc<Mutex<DateTime<Utc>>>>);

impl Clock {
    /// The wall clock ([`now`]).
    pub fn system() -> Clock {
        Clock(None)
    }

    /// A clock standing at `at` until [`Clock::advance`] moves it.
    pub fn manual(at: DateTime<Utc>) -> Clock {
        Clock(Some(Arc::new(Mutex::new(at))))
    }

    /// Moves a manual clock forward by `by` (the wall clock ignores it).
    pub fn advance(&self, by: chrono::Duration) {
        if let Some(t) = &self.0 {
            let mut t = t.lock().unwrap_or_else(PoisonError::into_inner);
            *t += by;
        }
    }

    /// The clock's current time.
    pub fn now(&self) -> DateTime<Utc> {
        match &self.0 {
            Some(t) => *t.lock().unwrap_or_else(PoisonError::into_inner),
            None => now(),
        }
    }

    /// [`Clock::now`] as RFC 3339 with second precision, like [`now_rfc3339`].
    pub fn now_rfc3339(&self) -> String {
        self.now().to_rfc3339_opts(SecondsFormat::Secs, false)
    }
}
