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
//!
//! This file holds the vocabulary every child shares ([`Forge`](crate::forge::Forge),
//! [`NewPull`](crate::forge::NewPull)) and re-exports the pieces; the children have one job
//! each: `settings` (credentials and API addresses), `refs` (the repository and item references
//! users type), `error` (what a failed call says), `policy` (how long and how often to retry),
//! `answer` (what an answer means), `retry` (the one retry loop of both clients), `item` (the
//! items read), `github` and `ado` (the two clients), `checks` (a commit's CI checks on either).

pub mod ado;
pub mod answer;
pub mod checks;
pub mod error;
pub mod github;
pub mod item;
pub mod policy;
pub mod refs;
pub mod retry;
pub mod review;
pub mod settings;
#[cfg(test)]
mod tests;

use std::fmt;

pub use answer::{accepted, classify, error_message, is_secondary_rate_limit, Answer, Verdict};
pub use error::ForgeError;
pub use item::{html_to_text, item_key, ForgeItem, ItemMeta};
pub use policy::{backoff, Attempts, RetryPolicy, DEFAULT_SECONDARY_RATE_LIMIT_WAIT};
pub use refs::{ItemRef, RepoRef};
pub use retry::{call_with_retries, Reply};
pub use settings::{AdoSettings, ForgeSettings, GitHubSettings, Secret, DEFAULT_ADO_API_URL, DEFAULT_GITHUB_API_URL};

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
