//! The forge settings: credentials ([`Secret`], never printed), API addresses and the
//! `[github]` / `[ado]` tables of `baton.toml`. It never makes a call nor decides what an
//! answer means.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;

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
    /// `BATON_GITHUB_LOGIN`: the login of the account Baton's token belongs to. Its review
    /// comments never start a remediation round (issue 19.4).
    pub login: Option<String>,
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
    /// `BATON_ADO_USER_EMAIL`: the e-mail of the account Baton's PAT belongs to. Its pull
    /// request comments never start a remediation round (issue 19.4).
    pub user_email: Option<String>,
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
    /// `BATON_ADO_WEBHOOK_USER`, `BATON_ADO_WEBHOOK_PASSWORD`, `BATON_GITHUB_LOGIN`,
    /// `BATON_ADO_USER_EMAIL`.
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
        if let Some(v) = get("BATON_GITHUB_LOGIN") {
            self.github.login = Some(v.trim().to_string());
        }
        if let Some(v) = get("BATON_ADO_USER_EMAIL") {
            self.ado.user_email = Some(v.trim().to_string());
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
