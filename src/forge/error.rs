//! What a failed forge call says ([`ForgeError`]): what failed and what to do, never a
//! credential. It never decides whether to retry (that is [`super::answer`]).

use std::time::Duration;

use super::Forge;

/// A forge call that did not succeed. The text says what failed and what to do, and never
/// holds a credential.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ForgeError {
    /// 401 (and Azure DevOps's 203 sign-in page): the token is wrong, expired or missing.
    #[error("{forge} refused the credentials for {what} ({status} {message}): {hint}")]
    BadCredentials {
        /// Which forge.
        forge: Forge,
        /// The call.
        what: String,
        /// HTTP status.
        status: u16,
        /// The forge's message.
        message: String,
        /// What to set.
        hint: &'static str,
    },
    /// 404: no such item, or the credentials cannot see it (GitHub answers 404 for both).
    #[error("{forge}: {what} was not found, or the credentials have no access to it (404 {message})")]
    NotFound {
        /// Which forge.
        forge: Forge,
        /// The call.
        what: String,
        /// The forge's message.
        message: String,
    },
    /// 403/429 with rate-limit headers, GitHub's secondary rate limit (a 403/429 whose
    /// message or `documentation_url` says so, without rate headers), or 429 alone: not worth
    /// waiting for here.
    #[error("{forge} is rate limiting {what} ({status} {message}): {when}")]
    RateLimited {
        /// Which forge.
        forge: Forge,
        /// The call.
        what: String,
        /// HTTP status.
        status: u16,
        /// The forge's message.
        message: String,
        /// `retry after 2026-01-01T10:00:00Z (in 900 s)` or `retry later`.
        when: String,
        /// Seconds until a retry may succeed (rounded up), when known: the forge's
        /// `retry-after` or reset, or at least a minute for GitHub's secondary rate limit.
        retry_after_secs: Option<u64>,
        /// The same wait, exactly ([`RetryPolicy::secondary_rate_limit_wait`](super::RetryPolicy::secondary_rate_limit_wait) for a secondary
        /// limit without `retry-after`).
        wait: Option<Duration>,
        /// GitHub's secondary rate limit (too many requests at once, or content created too
        /// fast), recognised by its message and documentation URL.
        secondary: bool,
    },
    /// 422: the forge understood the request and refused its content.
    #[error("{forge} refused {what} as invalid (422 {message}){details}")]
    Validation {
        /// Which forge.
        forge: Forge,
        /// The call.
        what: String,
        /// The forge's message.
        message: String,
        /// `: field color is invalid; …`, or empty.
        details: String,
    },
    /// 5xx after every retry.
    #[error("{forge} failed {what} with {status} after {attempts} attempts: {message}")]
    Server {
        /// Which forge.
        forge: Forge,
        /// The call.
        what: String,
        /// The last HTTP status.
        status: u16,
        /// Attempts made.
        attempts: u32,
        /// The forge's message.
        message: String,
    },
    /// Any other refusal (403 without rate-limit headers: a permission is missing; 409; …).
    #[error("{forge} refused {what} ({status} {message})")]
    Refused {
        /// Which forge.
        forge: Forge,
        /// The call.
        what: String,
        /// HTTP status.
        status: u16,
        /// The forge's message.
        message: String,
    },
    /// The forge could not be reached (after every retry).
    #[error("{forge} could not be reached for {what} after {attempts} attempts: {message}")]
    Network {
        /// Which forge.
        forge: Forge,
        /// The call.
        what: String,
        /// Attempts made.
        attempts: u32,
        /// The transport's error.
        message: String,
    },
    /// A success whose body Baton cannot read.
    #[error("{forge} answered {what} with a body Baton cannot read: {message}")]
    Malformed {
        /// Which forge.
        forge: Forge,
        /// The call.
        what: String,
        /// Why.
        message: String,
    },
    /// A request Baton will not make: a bad reference, a pull request given as an issue.
    #[error("{0}")]
    Invalid(String),
    /// A credential or address the call needs is not configured (says which setting).
    #[error("{0}")]
    Unconfigured(String),
}

/// What to do about refused credentials on `forge`: the setting to fix.
pub(super) fn credential_hint(forge: Forge) -> &'static str {
    match forge {
        Forge::GitHub => {
            "set GITHUB_TOKEN (or [github] token in baton.toml) to a valid token with access to the repository"
        }
        Forge::AzureDevOps => {
            "set ADO_PAT (or [ado] pat in baton.toml) to a valid personal access token with Work Items and Code scopes"
        }
    }
}
