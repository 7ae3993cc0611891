//! Outbound calls to the forges: GitHub (through octocrab) and Azure DevOps (REST api-version
//! 7.1 through reqwest). Owns the credentials and API addresses
//! ([`ForgeSettings`](crate::forge::ForgeSettings)), the references users type
//! ([`ItemRef`](crate::forge::ItemRef), [`RepoRef`](crate::forge::RepoRef)), what an answer
//! means ([`classify`](crate::forge::classify): success, wait and retry, or a specific
//! [`ForgeError`](crate::forge::ForgeError)) and the bounded retry policy
//! ([`RetryPolicy`](crate::forge::RetryPolicy)).
//!
//! This module never touches the database, git or the engine, never logs a request's headers,
//! and never puts a credential in an error: a [`ForgeError`](crate::forge::ForgeError)'s text
//! is safe to show on a page.

pub mod ado;
pub mod github;
pub mod item;

use std::fmt;
use std::time::Duration;

use reqwest::header::HeaderMap;
use serde::Deserialize;
use serde_json::Value;

pub use item::{html_to_text, item_key, ForgeItem, ItemMeta};

/// The public GitHub API (`BATON_GITHUB_API_URL` overrides it, for GitHub Enterprise or a mock).
pub const DEFAULT_GITHUB_API_URL: &str = "https://api.github.com";

/// Azure DevOps Services (`BATON_ADO_API_URL` overrides it, for a server or a mock).
pub const DEFAULT_ADO_API_URL: &str = "https://dev.azure.com";

/// A credential: shown as `<set>` by `Debug`, never printed.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps `value`.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The value, for the one place that sends it (an `Authorization` header).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<set>")
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Secret, D::Error> {
        String::deserialize(d).map(Secret)
    }
}

/// `[github]` in `baton.toml`; each key is overridden by its environment variable.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GitHubSettings {
    /// `GITHUB_TOKEN`: a token with `repo` (or fine-grained issues, pull requests and contents)
    /// access. Without one, public issues import anonymously and nothing can be written.
    pub token: Option<Secret>,
    /// `BATON_GITHUB_API_URL` (default [`DEFAULT_GITHUB_API_URL`]).
    pub api_url: Option<String>,
    /// `BATON_GITHUB_WEBHOOK_SECRET`: deliveries to `/webhooks/github` are signed with it.
    pub webhook_secret: Option<Secret>,
    /// `BATON_GITHUB_SECONDARY_RATE_LIMIT_WAIT_SECS`: the wait after a secondary rate limit
    /// without `retry-after`, seconds (default 60, as GitHub asks; fractions allowed, up to an
    /// hour). Meant for tests against a mock forge.
    pub secondary_rate_limit_wait_secs: Option<f64>,
}

impl GitHubSettings {
    /// The secondary rate-limit wait, when set to a number of seconds from 0 to 3600.
    pub fn secondary_rate_limit_wait(&self) -> Option<Duration> {
        self.secondary_rate_limit_wait_secs
            .filter(|s| s.is_finite() && (0.0..=3600.0).contains(s))
            .and_then(|s| Duration::try_from_secs_f64(s).ok())
    }
}

/// `[ado]` in `baton.toml`; each key is overridden by its environment variable.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdoSettings {
    /// `ADO_PAT`: a personal access token with Work Items (read & write) and Code (read &
    /// write).
    pub pat: Option<Secret>,
    /// `BATON_ADO_API_URL` (default [`DEFAULT_ADO_API_URL`]).
    pub api_url: Option<String>,
    /// `BATON_ADO_WEBHOOK_USER`: the Basic user of service hooks.
    pub webhook_user: Option<String>,
    /// `BATON_ADO_WEBHOOK_PASSWORD`: their Basic password.
    pub webhook_password: Option<Secret>,
}

/// Both forges' settings: `baton.toml`'s `[github]` and `[ado]` with the environment on top
/// ([`ForgeSettings::with_env`]).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ForgeSettings {
    /// GitHub.
    #[serde(default)]
    pub github: GitHubSettings,
    /// Azure DevOps.
    #[serde(default)]
    pub ado: AdoSettings,
}

impl ForgeSettings {
    /// These settings with every variable `lookup` answers (non-empty) taking precedence:
    /// `GITHUB_TOKEN`, `BATON_GITHUB_API_URL`, `BATON_GITHUB_WEBHOOK_SECRET`,
    /// `BATON_GITHUB_SECONDARY_RATE_LIMIT_WAIT_SECS`, `ADO_PAT`, `BATON_ADO_API_URL`,
    /// `BATON_ADO_WEBHOOK_USER`, `BATON_ADO_WEBHOOK_PASSWORD`.
    pub fn with_env(mut self, lookup: impl Fn(&str) -> Option<String>) -> ForgeSettings {
        let get = |k: &str| lookup(k).filter(|v| !v.trim().is_empty());
        let set = |slot: &mut Option<Secret>, k: &str| {
            if let Some(v) = get(k) {
                *slot = Some(Secret(v));
            }
        };
        set(&mut self.github.token, "GITHUB_TOKEN");
        set(&mut self.github.webhook_secret, "BATON_GITHUB_WEBHOOK_SECRET");
        set(&mut self.ado.pat, "ADO_PAT");
        set(&mut self.ado.webhook_password, "BATON_ADO_WEBHOOK_PASSWORD");
        if let Some(v) = get("BATON_GITHUB_API_URL") {
            self.github.api_url = Some(v);
        }
        if let Some(v) = get("BATON_ADO_API_URL") {
            self.ado.api_url = Some(v);
        }
        if let Some(v) = get("BATON_ADO_WEBHOOK_USER") {
            self.ado.webhook_user = Some(v);
        }
        if let Some(v) = get("BATON_GITHUB_SECONDARY_RATE_LIMIT_WAIT_SECS") {
            match v.trim().parse::<f64>() {
                Ok(secs) => self.github.secondary_rate_limit_wait_secs = Some(secs),
                Err(_) => {
                    tracing::warn!("BATON_GITHUB_SECONDARY_RATE_LIMIT_WAIT_SECS={v:?} is not a number of seconds")
                }
            }
        }
        // Empty values in the file count as unset, like empty variables.
        for slot in [&mut self.github.token, &mut self.github.webhook_secret, &mut self.ado.pat] {
            if slot.as_ref().is_some_and(|s| s.0.trim().is_empty()) {
                *slot = None;
            }
        }
        self
    }

    /// The GitHub API address, without a trailing slash.
    pub fn github_api_url(&self) -> String {
        self.github.api_url.as_deref().unwrap_or(DEFAULT_GITHUB_API_URL).trim_end_matches('/').to_string()
    }

    /// The Azure DevOps address, without a trailing slash.
    pub fn ado_api_url(&self) -> String {
        self.ado.api_url.as_deref().unwrap_or(DEFAULT_ADO_API_URL).trim_end_matches('/').to_string()
    }
}

/// Which forge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forge {
    /// GitHub or GitHub Enterprise.
    GitHub,
    /// Azure DevOps Services or Server.
    AzureDevOps,
}

impl Forge {
    /// `github` or `ado`: the spec's `source`.
    pub fn source(self) -> &'static str {
        match self {
            Forge::GitHub => "github",
            Forge::AzureDevOps => "ado",
        }
    }
}

impl fmt::Display for Forge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Forge::GitHub => "GitHub",
            Forge::AzureDevOps => "Azure DevOps",
        })
    }
}

/// A repository (GitHub) or team project (Azure DevOps), as a project's `forge_repo` names it:
/// `OWNER/REPO`, `github:OWNER/REPO`, `ado:ORG/PROJECT` or `ado:ORG/PROJECT/REPOSITORY` (the
/// git repository defaults to the project's name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RepoRef {
    /// A GitHub repository.
    GitHub {
        /// Owner (user or organization).
        owner: String,
        /// Repository name.
        repo: String,
    },
    /// An Azure DevOps team project and one of its git repositories.
    Ado {
        /// Organization.
        org: String,
        /// Team project.
        project: String,
        /// Git repository (name or id).
        repository: String,
    },
}

/// A GitHub owner or repository name: 1–100 of `A-Z a-z 0-9 . _ -`, not `.` or `..`
/// (GitHub's own rule).
fn github_name_ok(s: &str) -> bool {
    (1..=100).contains(&s.len())
        && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        && s != "."
        && s != ".."
}

/// An Azure DevOps organization: 1–50 of `A-Z a-z 0-9 . _ -`, not `.` or `..`.
fn ado_org_ok(s: &str) -> bool {
    (1..=50).contains(&s.len()) && github_name_ok(s)
}

/// An Azure DevOps project or repository name: 1–64 characters, no control characters, none
/// of `/ \ # ? % & * : < > | " '` and not starting or ending with a space or `.`
/// (Azure DevOps's naming rules; inner spaces are allowed).
fn ado_name_ok(s: &str) -> bool {
    (1..=64).contains(&s.chars().count())
        && !s.chars().any(|c| c.is_control() || "/\\#?%&*:<>|\"'+".contains(c))
        && !s.starts_with([' ', '.'])
        && !s.ends_with([' ', '.'])
}

/// The start of untrusted `text` for an error message: at most 80 characters, one line.
fn shown(text: &str) -> String {
    let one: String = text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    crate::model::text::cut(&one, 80)
}

impl RepoRef {
    /// Parses a project's `forge_repo`.
    ///
    /// Errors: anything but the forms above, saying which forms are accepted.
    pub fn parse(text: &str) -> Result<RepoRef, ForgeError> {
        let t = text.trim();
        let bad = || {
            ForgeError::Invalid(format!(
                "{:?} is not a forge repository: use OWNER/REPO or github:OWNER/REPO for GitHub, \
                 ado:ORG/PROJECT or ado:ORG/PROJECT/REPOSITORY for Azure DevOps",
                shown(t)
            ))
        };
        if let Some(rest) = t.strip_prefix("ado:") {
            let parts: Vec<&str> = rest.split('/').collect();
            if !(2..=3).contains(&parts.len()) || !ado_org_ok(parts[0]) || !parts[1..].iter().all(|p| ado_name_ok(p)) {
                return Err(bad());
            }
            return Ok(RepoRef::Ado {
                org: parts[0].into(),
                project: parts[1].into(),
                repository: parts.get(2).unwrap_or(&parts[1]).to_string(),
            });
        }
        let rest = t.strip_prefix("github:").unwrap_or(t);
        match rest.split_once('/') {
            Some((owner, repo)) if github_name_ok(owner) && github_name_ok(repo) => {
                Ok(RepoRef::GitHub { owner: owner.into(), repo: repo.into() })
            }
            _ => Err(bad()),
        }
    }

    /// The forge.
    pub fn forge(&self) -> Forge {
        match self {
            RepoRef::GitHub { .. } => Forge::GitHub,
            RepoRef::Ado { .. } => Forge::AzureDevOps,
        }
    }
}

/// One issue or work item: `github:OWNER/REPO#N` or `ado:ORG/PROJECT#ID`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ItemRef {
    /// A GitHub issue.
    GitHub {
        /// Owner.
        owner: String,
        /// Repository.
        repo: String,
        /// Issue number.
        number: u64,
    },
    /// An Azure DevOps work item.
    Ado {
        /// Organization.
        org: String,
        /// Team project.
        project: String,
        /// Work item id.
        id: u64,
    },
}

impl ItemRef {
    /// Parses `github:OWNER/REPO#N` or `ado:ORG/PROJECT#ID`.
    ///
    /// Errors: any other text, naming the accepted forms.
    pub fn parse(text: &str) -> Result<ItemRef, ForgeError> {
        let t = text.trim();
        let bad = || {
            ForgeError::Invalid(format!(
                "{:?} is not an item reference: use github:OWNER/REPO#NUMBER or ado:ORG/PROJECT#ID",
                shown(t)
            ))
        };
        let (forge, rest) = t.split_once(':').ok_or_else(bad)?;
        let (path, number) = rest.rsplit_once('#').ok_or_else(bad)?;
        if number.is_empty() || number.len() > 12 || !number.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let number: u64 = number.parse().ok().filter(|n| *n > 0).ok_or_else(bad)?;
        let (a, b) = path.split_once('/').ok_or_else(bad)?;
        match forge {
            "github" if github_name_ok(a) && github_name_ok(b) => {
                Ok(ItemRef::GitHub { owner: a.into(), repo: b.into(), number })
            }
            "ado" if ado_org_ok(a) && ado_name_ok(b) => {
                Ok(ItemRef::Ado { org: a.into(), project: b.into(), id: number })
            }
            _ => Err(bad()),
        }
    }

    /// The forge.
    pub fn forge(&self) -> Forge {
        match self {
            ItemRef::GitHub { .. } => Forge::GitHub,
            ItemRef::Ado { .. } => Forge::AzureDevOps,
        }
    }
}

impl fmt::Display for ItemRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ItemRef::GitHub { owner, repo, number } => write!(f, "github:{owner}/{repo}#{number}"),
            ItemRef::Ado { org, project, id } => write!(f, "ado:{org}/{project}#{id}"),
        }
    }
}

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
        /// The same wait, exactly ([`RetryPolicy::secondary_rate_limit_wait`] for a secondary
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

/// The wait after GitHub's secondary rate limit without `retry-after`: "wait for at least one
/// minute before retrying" (GitHub's rate-limit documentation).
pub const DEFAULT_SECONDARY_RATE_LIMIT_WAIT: Duration = Duration::from_secs(60);

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

/// How long and how often to retry.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// Retries of a 5xx or a transport error (default 3), each after `backoff` × 2ⁿ.
    pub server_retries: u32,
    /// First backoff (default 500 ms).
    pub backoff: Duration,
    /// Longest rate-limit wait taken here (default 60 s); a longer one fails with
    /// [`ForgeError::RateLimited`] saying when to retry.
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

/// Retries already made for one call.
#[derive(Debug, Default, Clone, Copy)]
pub struct Attempts {
    /// Server-error and transport retries.
    pub server: u32,
    /// Rate-limit waits.
    pub rate_limit: u32,
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

/// A pull request to open.
#[derive(Debug, Clone, Copy)]
pub struct NewPull<'a> {
    /// The branch with the changes.
    pub head: &'a str,
    /// The branch to merge into.
    pub base: &'a str,
    /// Title.
    pub title: &'a str,
    /// Body (markdown).
    pub body: &'a str,
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

/// What one attempt of a call got back.
#[derive(Debug)]
pub enum Reply<S> {
    /// An answer [`accepted`] as usable: the caller reads it.
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

/// Whether an answer with `status` is usable: 2xx, except Azure DevOps's 203 (its sign-in
/// page, which [`classify`] reads as bad credentials).
pub fn accepted(forge: Forge, status: u16) -> bool {
    (200..300).contains(&status) && !(forge == Forge::AzureDevOps && status == 203)
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

/// The wait before retry `n` (0-based): `backoff` × 2ⁿ, at most 30 s.
pub fn backoff(policy: &RetryPolicy, n: u32) -> Duration {
    policy.backoff.saturating_mul(1 << n.min(16)).min(Duration::from_secs(30))
}

fn credential_hint(forge: Forge) -> &'static str {
    match forge {
        Forge::GitHub => {
            "set GITHUB_TOKEN (or [github] token in baton.toml) to a valid token with access to the repository"
        }
        Forge::AzureDevOps => {
            "set ADO_PAT (or [ado] pat in baton.toml) to a valid personal access token with Work Items and Code scopes"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    fn verdict(status: u16, h: &[(&'static str, &str)], body: &str, attempts: Attempts) -> Verdict {
        let h = headers(h);
        let answer = Answer { status, headers: &h, body: body.as_bytes() };
        classify(Forge::GitHub, "GET x", answer, attempts, &RetryPolicy::default(), 1000)
    }

    #[test]
    fn references_parse_and_print() {
        let r = ItemRef::parse(" github:octo-org/hello.rs#42 ").unwrap();
        assert_eq!(r, ItemRef::GitHub { owner: "octo-org".into(), repo: "hello.rs".into(), number: 42 });
        assert_eq!(r.to_string(), "github:octo-org/hello.rs#42");
        let r = ItemRef::parse("ado:fabrikam/Fabrikam-Fiber-Git#12").unwrap();
        assert_eq!(r.to_string(), "ado:fabrikam/Fabrikam-Fiber-Git#12");
        assert_eq!(
            ItemRef::parse("ado:org/My Project#3").unwrap(),
            ItemRef::Ado { org: "org".into(), project: "My Project".into(), id: 3 }
        );
        let long = format!("github:{}/r#1", "o".repeat(10_000));
        assert!(ItemRef::parse(&long).unwrap_err().to_string().len() < 300, "a long input is cut in the message");
        for bad in [
            "",
            "github:o/r",
            "github:o/r#0",
            "github:o/r#+1",
            "github:o#1",
            "gitlab:o/r#1",
            "github:o/r/x#1",
            "github:o /r#1",
            "github:../..#1",
            "ado:../..#1",
            "github:o/r%2f#1",
            "github:o/`id`#1",
            "github:o/r\u{202e}#1",
            "ado:org/ My#1",
        ] {
            let e = ItemRef::parse(bad).unwrap_err().to_string();
            assert!(e.contains("github:OWNER/REPO#NUMBER"), "{bad}: {e}");
        }
        assert_eq!(RepoRef::parse("o/r").unwrap(), RepoRef::GitHub { owner: "o".into(), repo: "r".into() });
        assert_eq!(
            RepoRef::parse("ado:org/proj").unwrap(),
            RepoRef::Ado { org: "org".into(), project: "proj".into(), repository: "proj".into() }
        );
        assert_eq!(
            RepoRef::parse("ado:org/proj/repo").unwrap(),
            RepoRef::Ado { org: "org".into(), project: "proj".into(), repository: "repo".into() }
        );
        assert!(RepoRef::parse("ado:org").is_err());
        assert!(RepoRef::parse("justaname").is_err());
        assert!(RepoRef::parse("ado:org/My Project").is_ok());
        assert!(RepoRef::parse("../..").is_err());
    }

    #[test]
    fn environment_overrides_the_file_and_secrets_never_print() {
        let file: ForgeSettings =
            toml::from_str("[github]\ntoken = 'from-file'\napi_url = 'http://ghe/api/v3/'\n[ado]\npat = ''\n").unwrap();
        let env = |k: &str| match k {
            "GITHUB_TOKEN" => Some("from-env".to_string()),
            "BATON_ADO_API_URL" => Some("http://ado.local".to_string()),
            _ => None,
        };
        let s = file.with_env(env);
        assert_eq!(s.github.token.as_ref().unwrap().expose(), "from-env");
        assert_eq!(s.github_api_url(), "http://ghe/api/v3");
        assert_eq!(s.ado_api_url(), "http://ado.local");
        assert!(s.ado.pat.is_none(), "an empty PAT counts as unset");
        assert!(!format!("{s:?}").contains("from-env"));
        assert_eq!(ForgeSettings::default().github_api_url(), DEFAULT_GITHUB_API_URL);
    }

    #[test]
    fn githubs_secondary_rate_limit_is_a_rate_limit_of_at_least_a_minute() {
        let body = r#"{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again.","documentation_url":"https://docs.github.com/rest/using-the-rest-api/rate-limits-for-the-rest-api#about-secondary-rate-limits","status":"403"}"#;
        let none = Attempts::default();
        // No rate headers: a minute. The default policy waits up to a minute within a call
        // (when its deadline leaves the time: the call loop checks).
        assert!(matches!(verdict(403, &[], body, none), Verdict::Retry(d) if d == Duration::from_secs(60)));
        let short = RetryPolicy { max_rate_limit_wait: Duration::from_secs(10), ..RetryPolicy::default() };
        let h = HeaderMap::new();
        let answer = Answer { status: 403, headers: &h, body: body.as_bytes() };
        let Verdict::Fail(e) = classify(Forge::GitHub, "GET x", answer, none, &short, 1000) else {
            panic!("a minute's wait is over this policy's limit")
        };
        let ForgeError::RateLimited { status, retry_after_secs, wait, secondary, ref message, .. } = e else {
            panic!("{e:?}")
        };
        assert_eq!((status, retry_after_secs, wait, secondary), (403, Some(60), Some(Duration::from_secs(60)), true));
        assert!(message.contains("secondary rate limit"), "{message}");
        assert!(e.to_string().contains("a secondary rate limit; retry after 1970-01-01T00:17:40Z (in 60 s)"), "{e}");
        // `retry-after` wins; a shorter configured wait is taken; 429 too.
        let with_retry_after = headers(&[("retry-after", "90")]);
        let answer = Answer { status: 429, headers: &with_retry_after, body: body.as_bytes() };
        assert!(matches!(
            classify(Forge::GitHub, "GET x", answer, none, &short, 1000),
            Verdict::Fail(ForgeError::RateLimited { retry_after_secs: Some(90), secondary: true, .. })
        ));
        let quick = RetryPolicy { secondary_rate_limit_wait: Duration::from_millis(200), ..short };
        let answer = Answer { status: 403, headers: &h, body: body.as_bytes() };
        assert!(
            matches!(classify(Forge::GitHub, "GET x", answer, none, &quick, 0), Verdict::Retry(d) if d == Duration::from_millis(200))
        );
        // Recognised by the documentation URL alone, or the older "abuse" wording.
        let by_url = r#"{"message":"Forbidden","documentation_url":"https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits"}"#;
        assert!(is_secondary_rate_limit(by_url.as_bytes()));
        assert!(is_secondary_rate_limit(br#"{"message":"You have triggered an abuse detection mechanism."}"#));
        // A 403 that says nothing of limits is a refusal, as before.
        assert!(!is_secondary_rate_limit(br#"{"message":"Resource not accessible by integration"}"#));
        assert!(matches!(
            verdict(403, &[], r#"{"message":"Resource not accessible by integration"}"#, none),
            Verdict::Fail(ForgeError::Refused { status: 403, .. })
        ));
    }

    #[test]
    fn answers_are_classified_as_the_forges_document() {
        let none = Attempts::default();
        assert!(matches!(verdict(200, &[], "{}", none), Verdict::Success));
        assert!(matches!(verdict(401, &[], r#"{"message":"Bad credentials"}"#, none),
            Verdict::Fail(ForgeError::BadCredentials { ref message, .. }) if message == "Bad credentials"));
        assert!(matches!(
            verdict(404, &[], r#"{"message":"Not Found"}"#, none),
            Verdict::Fail(ForgeError::NotFound { .. })
        ));
        // A reset 30 s away is waited for; one an hour away is not.
        let soon = verdict(403, &[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "1029")], "{}", none);
        assert!(matches!(soon, Verdict::Retry(d) if d == Duration::from_secs(30)), "{soon:?}");
        let Verdict::Fail(e) =
            verdict(403, &[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "4600")], "{}", none)
        else {
            panic!("an hour's wait must fail")
        };
        assert!(e.to_string().contains("retry after 1970-01-01T01:16:41Z (in 3601 s)"), "{e}");
        assert!(matches!(verdict(429, &[("retry-after", "5")], "{}", none), Verdict::Retry(d) if d.as_secs() == 5));
        let spent = Attempts { server: 0, rate_limit: 2 };
        assert!(matches!(
            verdict(429, &[("retry-after", "5")], "{}", spent),
            Verdict::Fail(ForgeError::RateLimited { .. })
        ));
        let Verdict::Fail(e) = verdict(403, &[("x-ratelimit-remaining", "0")], "{}", none) else { panic!() };
        assert!(e.to_string().contains("retry later"), "{e}");
        assert!(matches!(
            verdict(403, &[], r#"{"message":"Resource not accessible"}"#, none),
            Verdict::Fail(ForgeError::Refused { status: 403, .. })
        ));
        let Verdict::Fail(e) = verdict(
            422,
            &[],
            r#"{"message":"Validation Failed","errors":[{"resource":"Label","code":"invalid","field":"color"}]}"#,
            none,
        ) else {
            panic!()
        };
        assert_eq!(e.to_string(), "GitHub refused GET x as invalid (422 Validation Failed): field color is invalid");
        assert!(matches!(verdict(502, &[], "", none), Verdict::Retry(d) if d == Duration::from_millis(500)));
        assert!(
            matches!(verdict(502, &[], "", Attempts { server: 2, rate_limit: 0 }), Verdict::Retry(d) if d == Duration::from_secs(2))
        );
        assert!(matches!(
            verdict(503, &[], "", Attempts { server: 3, rate_limit: 0 }),
            Verdict::Fail(ForgeError::Server { attempts: 4, .. })
        ));
        let ado = classify(
            Forge::AzureDevOps,
            "GET y",
            Answer { status: 203, headers: &HeaderMap::new(), body: b"<html>" },
            none,
            &RetryPolicy::default(),
            0,
        );
        assert!(matches!(ado, Verdict::Fail(ForgeError::BadCredentials { .. })));
        let signin = headers(&[("location", "https://spsprodweu5.vssps.visualstudio.com/_signin?realm=x")]);
        let ado = classify(
            Forge::AzureDevOps,
            "GET y",
            Answer { status: 302, headers: &signin, body: b"" },
            none,
            &RetryPolicy::default(),
            0,
        );
        assert!(matches!(ado, Verdict::Fail(ForgeError::BadCredentials { status: 302, .. })), "{ado:?}");
    }
}
