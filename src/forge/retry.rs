//! The one retry loop of both clients ([`call_with_retries`]): transport failures and 5xx
//! retried after a backoff, rate limits waited out, all within the policy's deadline. It never
//! decides what an answer means (that is [`classify`](fn@super::classify)) nor builds a request.

use std::time::Duration;

use reqwest::header::HeaderMap;

use super::answer::{classify, Answer, Verdict};
use super::error::ForgeError;
use super::policy::{backoff, Attempts, RetryPolicy};
use super::Forge;

/// What one attempt of a call got back.
#[derive(Debug)]
pub enum Reply<S> {
    /// An answer [`accepted`](super::accepted) as usable: the caller reads it.
    Accepted(S),
    /// Any other answer, read: [`call_with_retries`] classifies it.
    Refused {
        /// HTTP status.
        status: u16,
        /// Its headers.
        headers: HeaderMap,
        /// Its body.
        body: bytes::Bytes,
    },
}

/// Runs `attempt` (given the time left) until its answer is accepted or `policy` says stop,
/// the one retry loop of both clients: a transport failure (`Err(message)`) and a 5xx are
/// retried after [`backoff`], a rate limit is waited out, all within `policy.deadline`; every
/// other answer ends the call with [`classify`]'s error.
///
/// Errors: the [`ForgeError`] of the last answer; [`ForgeError::Network`] when the forge
/// could not be reached or the deadline passed.
pub async fn call_with_retries<S, F, Fut>(
    forge: Forge,
    what: &str,
    policy: &RetryPolicy,
    mut attempt: F,
) -> Result<S, ForgeError>
where
    F: FnMut(Duration) -> Fut,
    Fut: std::future::Future<Output = Result<Reply<S>, String>>,
{
    let mut attempts = Attempts::default();
    let clock = crate::clock::Stopwatch::start();
    loop {
        let Some(left) = policy.deadline.checked_sub(clock.elapsed()).filter(|l| !l.is_zero()) else {
            return Err(timed_out(forge, what, attempts, policy.deadline));
        };
        let (status, headers, body) = match tokio::time::timeout(left, attempt(left)).await {
            Err(_) => return Err(timed_out(forge, what, attempts, policy.deadline)),
            Ok(Ok(Reply::Accepted(answer))) => return Ok(answer),
            Ok(Ok(Reply::Refused { status, headers, body })) => (status, headers, body),
            Ok(Err(message)) => {
                let wait = backoff(policy, attempts.server);
                if attempts.server >= policy.server_retries || clock.elapsed() + wait >= policy.deadline {
                    return Err(ForgeError::Network {
                        forge,
                        what: what.into(),
                        attempts: attempts.server + 1,
                        message,
                    });
                }
                tracing::warn!("{forge} could not be reached for {what}: {message}");
                tokio::time::sleep(wait).await;
                attempts.server += 1;
                continue;
            }
        };
        let now = crate::clock::now().timestamp();
        match classify(forge, what, Answer { status, headers: &headers, body: &body }, attempts, policy, now) {
            Verdict::Retry(wait) => {
                if clock.elapsed() + wait >= policy.deadline {
                    if (500..600).contains(&status) {
                        return Err(out_of_time(forge, what, status, attempts));
                    }
                    // A rate limit whose wait does not fit: the forge's own answer, with when
                    // to retry.
                    let spent = Attempts { rate_limit: policy.rate_limit_waits, ..attempts };
                    let answer = Answer { status, headers: &headers, body: &body };
                    return Err(match classify(forge, what, answer, spent, policy, now) {
                        Verdict::Fail(e) => e,
                        _ => out_of_time(forge, what, status, attempts),
                    });
                }
                if (500..600).contains(&status) {
                    attempts.server += 1;
                } else {
                    attempts.rate_limit += 1;
                }
                tracing::warn!("{forge} answered {status} to {what}; retrying in {} ms", wait.as_millis());
                tokio::time::sleep(wait).await;
            }
            Verdict::Fail(e) => return Err(e),
            // Only refused answers are classified: a "success" here ends the call rather
            // than loops.
            Verdict::Success => {
                return Err(ForgeError::Refused {
                    forge,
                    what: what.into(),
                    status,
                    message: "an unexpected answer".into(),
                })
            }
        }
    }
}

/// The error for a retry that the deadline leaves no time for: the server error, or (should
/// classifying the answer again not say) a rate limit to retry later.
fn out_of_time(forge: Forge, what: &str, status: u16, attempts: Attempts) -> ForgeError {
    if (500..600).contains(&status) {
        return ForgeError::Server {
            forge,
            what: what.into(),
            status,
            attempts: attempts.server + 1,
            message: "no time left to retry".into(),
        };
    }
    ForgeError::RateLimited {
        forge,
        what: what.into(),
        status,
        message: "rate limited".into(),
        when: "retry later".into(),
        retry_after_secs: None,
        wait: None,
        secondary: false,
    }
}

/// A call that used up its deadline.
fn timed_out(forge: Forge, what: &str, attempts: Attempts, deadline: Duration) -> ForgeError {
    ForgeError::Network {
        forge,
        what: what.into(),
        attempts: attempts.server + 1,
        message: format!("no answer within {} s", deadline.as_secs()),
    }
}
