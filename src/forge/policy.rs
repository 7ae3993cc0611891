//! How long and how often a forge call is retried ([`RetryPolicy`], [`backoff`]) and the
//! retries one call already made ([`Attempts`]). It never reads an answer nor sleeps.

use std::time::Duration;

/// The wait after GitHub's secondary rate limit without `retry-after`: "wait for at least one
/// minute before retrying" (GitHub's rate-limit documentation).
pub const DEFAULT_SECONDARY_RATE_LIMIT_WAIT: Duration = Duration::from_secs(60);

/// How long and how often to retry.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// Retries of a 5xx or a transport error (default 3), each after `backoff` × 2ⁿ.
    pub server_retries: u32,
    /// First backoff (default 500 ms).
    pub backoff: Duration,
    /// Longest rate-limit wait taken here (default 60 s); a longer one fails with
    /// [`ForgeError::RateLimited`](super::ForgeError::RateLimited) saying when to retry.
    pub max_rate_limit_wait: Duration,
    /// Rate-limit waits per call (default 2).
    pub rate_limit_waits: u32,
    /// Longest a call may take, every attempt and wait included (default 20 s, under the
    /// server's 30 s request limit): each attempt gets what is left, and no retry starts
    /// that could not finish.
    pub deadline: Duration,
    /// The wait after GitHub's secondary rate limit when it sends no `retry-after` (default
    /// 60 s: GitHub asks for at least a minute; `BATON_GITHUB_SECONDARY_RATE_LIMIT_WAIT_SECS`
    /// shortens it for a test's mock forge).
    pub secondary_rate_limit_wait: Duration,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            server_retries: 3,
            backoff: Duration::from_millis(500),
            max_rate_limit_wait: Duration::from_secs(60),
            rate_limit_waits: 2,
            deadline: Duration::from_secs(20),
            secondary_rate_limit_wait: DEFAULT_SECONDARY_RATE_LIMIT_WAIT,
        }
    }
}

/// Retries already made for one call.
#[derive(Debug, Default, Clone, Copy)]
pub struct Attempts {
    /// Server-error and transport retries.
    pub server: u32,
    /// Rate-limit waits.
    pub rate_limit: u32,
}

/// The wait before retry `n` (0-based): `backoff` × 2ⁿ, at most 30 s.
pub fn backoff(policy: &RetryPolicy, n: u32) -> Duration {
    policy.backoff.saturating_mul(1 << n.min(16)).min(Duration::from_secs(30))
}
