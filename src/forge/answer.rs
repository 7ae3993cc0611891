//! What a forge's answer means ([`classify`]: success, wait and retry, or a specific
//! [`ForgeError`]), following GitHub's and Azure DevOps's documented status and rate-limit
//! rules, and the reading of an error body. It never sends a request nor sleeps.

use std::time::Duration;

use reqwest::header::HeaderMap;
use serde_json::Value;

use super::error::{credential_hint, ForgeError};
use super::policy::{backoff, Attempts, RetryPolicy};
use super::Forge;

/// Whether a refused GitHub answer is its secondary rate limit: the message says "secondary
/// rate limit" (older answers: "abuse detection"), or the `documentation_url` points at the
/// secondary rate limits.
pub fn is_secondary_rate_limit(body: &[u8]) -> bool {
    let Ok(v) = serde_json::from_slice::<Value>(body) else { return false };
    let field = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or_default().to_ascii_lowercase();
    let (message, docs) = (field("message"), field("documentation_url"));
    message.contains("secondary rate limit")
        || message.contains("abuse detection")
        || docs.contains("secondary-rate-limit")
        || docs.contains("abuse-rate-limit")
}

/// What to do with an answer.
#[derive(Debug)]
pub enum Verdict {
    /// 2xx: use it.
    Success,
    /// Wait this long, then send the request again.
    Retry(Duration),
    /// Stop with this error.
    Fail(ForgeError),
}

/// The forge's own message in an error body (`message`, or Azure DevOps's `message` /
/// `value.Message`), at most 300 characters of one line; the status's reason when none.
pub fn error_message(status: u16, body: &[u8]) -> String {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let msg = parsed
        .as_ref()
        .and_then(|v| v.get("message").or_else(|| v.pointer("/value/Message")).and_then(Value::as_str))
        .map(str::to_string)
        .unwrap_or_else(|| {
            reqwest::StatusCode::from_u16(status)
                .ok()
                .and_then(|s| s.canonical_reason())
                .unwrap_or("no message")
                .to_string()
        });
    let one_line: String = msg.chars().map(|c| if c.is_control() { ' ' } else { c }).take(300).collect();
    one_line.trim().to_string()
}

fn header_u64(headers: &HeaderMap, name: &str) -> Option<u64> {
    headers.get(name)?.to_str().ok()?.trim().parse().ok()
}

/// A forge's answer, as [`classify`] reads it.
#[derive(Debug, Clone, Copy)]
pub struct Answer<'a> {
    /// HTTP status.
    pub status: u16,
    /// Its headers.
    pub headers: &'a HeaderMap,
    /// Its body.
    pub body: &'a [u8],
}

/// What an answer means, for call `what` on `forge` at `now_unix` (seconds), after `attempts`.
///
/// - 2xx → [`Verdict::Success`].
/// - 401 → bad credentials; Azure DevOps's 203 (its sign-in page, its answer to a bad PAT)
///   and its redirects to a sign-in page too.
/// - 404 → not found or no access.
/// - 403/429 with `retry-after` (seconds), or with `x-ratelimit-remaining: 0` and
///   `x-ratelimit-reset` (epoch seconds), or GitHub's secondary rate limit (no rate headers; a
///   message saying "secondary rate limit" or a `documentation_url` pointing at the secondary
///   rate limits, [`is_secondary_rate_limit`]: at least
///   [`RetryPolicy::secondary_rate_limit_wait`], a minute) → wait when that is within
///   [`RetryPolicy::max_rate_limit_wait`] and waits remain (and the deadline allows), otherwise
///   [`ForgeError::RateLimited`] with the time; 403/429 with `x-ratelimit-remaining: 0` and no
///   reset, or 429 with nothing → rate limited, "retry later". Other 403s are refusals (a
///   missing permission). (GitHub's documented rate-limit rules.)
/// - 422 → validation, with the forge's `errors` (`field` and `code`) listed.
/// - 5xx → retry with exponential backoff while retries remain, then [`ForgeError::Server`].
/// - anything else → [`ForgeError::Refused`].
pub fn classify(
    forge: Forge,
    what: &str,
    answer: Answer<'_>,
    attempts: Attempts,
    policy: &RetryPolicy,
    now_unix: i64,
) -> Verdict {
    let Answer { status, headers, body } = answer;
    let what = what.to_string();
    if forge == Forge::AzureDevOps && status == 203 {
        return Verdict::Fail(ForgeError::BadCredentials {
            forge,
            what,
            status,
            message: "a sign-in page instead of data".into(),
            hint: credential_hint(forge),
        });
    }
    if (200..300).contains(&status) {
        return Verdict::Success;
    }
    if forge == Forge::AzureDevOps && (300..400).contains(&status) {
        let location = headers.get("location").and_then(|v| v.to_str().ok()).unwrap_or_default();
        if location.to_ascii_lowercase().contains("signin") {
            return Verdict::Fail(ForgeError::BadCredentials {
                forge,
                what,
                status,
                message: "a redirect to the sign-in page".into(),
                hint: credential_hint(forge),
            });
        }
    }
    let message = error_message(status, body);
    match status {
        401 => Verdict::Fail(ForgeError::BadCredentials { forge, what, status, message, hint: credential_hint(forge) }),
        404 => Verdict::Fail(ForgeError::NotFound { forge, what, message }),
        403 | 429 => {
            let remaining_zero = header_u64(headers, "x-ratelimit-remaining") == Some(0);
            let secondary = forge == Forge::GitHub && !remaining_zero && is_secondary_rate_limit(body);
            // GitHub's order: `retry-after`; else the reset when nothing remains; else, for a
            // secondary limit, at least a minute.
            let wait = header_u64(headers, "retry-after")
                .or_else(|| {
                    remaining_zero
                        .then(|| header_u64(headers, "x-ratelimit-reset"))
                        .flatten()
                        .map(|reset| u64::try_from(reset as i64 - now_unix).unwrap_or(0) + 1)
                })
                .map(Duration::from_secs)
                .or_else(|| secondary.then_some(policy.secondary_rate_limit_wait));
            let limited = wait.is_some() || remaining_zero || status == 429;
            if !limited {
                return Verdict::Fail(ForgeError::Refused { forge, what, status, message });
            }
            if let Some(d) = wait {
                if d <= policy.max_rate_limit_wait && attempts.rate_limit < policy.rate_limit_waits {
                    return Verdict::Retry(d);
                }
            }
            let secs = wait.map(|d| d.as_secs() + u64::from(d.subsec_nanos() > 0));
            let when = match secs {
                Some(secs) => {
                    let at = chrono::DateTime::from_timestamp(now_unix.saturating_add(secs as i64), 0)
                        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
                        .unwrap_or_default();
                    let kind = if secondary { "a secondary rate limit; " } else { "" };
                    format!("{kind}retry after {at} (in {secs} s)")
                }
                None => "the forge gave no reset time; retry later".into(),
            };
            Verdict::Fail(ForgeError::RateLimited {
                forge,
                what,
                status,
                message,
                when,
                retry_after_secs: secs,
                wait,
                secondary,
            })
        }
        422 => {
            let details = serde_json::from_slice::<Value>(body)
                .ok()
                .and_then(|v| v.get("errors").and_then(Value::as_array).cloned())
                .map(|errs| {
                    errs.iter()
                        .map(|e| {
                            match (e.get("field").and_then(Value::as_str), e.get("code").and_then(Value::as_str)) {
                                (Some(f), Some(c)) => format!("field {f} is {c}"),
                                _ => e
                                    .get("message")
                                    .and_then(Value::as_str)
                                    .map(str::to_string)
                                    .unwrap_or_else(|| e.to_string()),
                            }
                        })
                        .collect::<Vec<_>>()
                        .join("; ")
                })
                .filter(|d| !d.is_empty())
                .map(|d| format!(": {d}"))
                .unwrap_or_default();
            Verdict::Fail(ForgeError::Validation { forge, what, message, details })
        }
        500..=599 if attempts.server < policy.server_retries => Verdict::Retry(backoff(policy, attempts.server)),
        500..=599 => Verdict::Fail(ForgeError::Server { forge, what, status, attempts: attempts.server + 1, message }),
        _ => Verdict::Fail(ForgeError::Refused { forge, what, status, message }),
    }
}

/// Whether an answer with `status` is usable: 2xx, except Azure DevOps's 203 (its sign-in
/// page, which [`classify`] reads as bad credentials).
pub fn accepted(forge: Forge, status: u16) -> bool {
    (200..300).contains(&status) && !(forge == Forge::AzureDevOps && status == 203)
}
