//! Path policy for attempt commits: which changed files fall outside a step's allowed paths or
//! under a blocked prefix. Pure: no IO, no git.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A changed file that the step's path policy forbids.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathViolation {
    /// Repository-relative path of the file.
    pub path: String,
    /// Why it is forbidden.
    pub reason: ViolationReason,
}

/// Why a path violates the policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ViolationReason {
    /// `allowed` is non-empty and the path is under none of its prefixes.
    OutsideAllowed,
    /// The path is under this blocked prefix (as the caller spelled it).
    Blocked {
        /// The matching blocked prefix.
        prefix: String,
    },
}

impl fmt::Display for PathViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.reason {
            ViolationReason::OutsideAllowed => {
                write!(f, "{} is outside the allowed paths", self.path)
            }
            ViolationReason::Blocked { prefix } => {
                write!(f, "{} is under blocked path {prefix}", self.path)
            }
        }
    }
}

/// Checks `files` against the `allowed` and `blocked` path prefixes; one violation per file.
///
/// A prefix matches whole path components: `docs` and `docs/` both match `docs/a.md` and
/// `docs` itself, never `docsx/a.md`; a leading `./` is ignored and `""`, `.` or `/` match
/// everything. A file under a blocked prefix is reported as [`ViolationReason::Blocked`]
/// (the first matching prefix) even if it is also outside `allowed`; otherwise, with a
/// non-empty `allowed`, a file under none of them is [`ViolationReason::OutsideAllowed`].
/// Violations come in the order of `files`.
pub fn check_paths(files: &[String], allowed: &[String], blocked: &[String]) -> Vec<PathViolation> {
    files
        .iter()
        .filter_map(|file| {
            let reason = if let Some(prefix) = blocked.iter().find(|p| under(file, p)) {
                ViolationReason::Blocked { prefix: prefix.clone() }
            } else if !allowed.is_empty() && !allowed.iter().any(|p| under(file, p)) {
                ViolationReason::OutsideAllowed
            } else {
                return None;
            };
            Some(PathViolation { path: file.clone(), reason })
        })
        .collect()
}

/// Whether `file` is `prefix` or lies below it, comparing whole components.
fn under(file: &str, prefix: &str) -> bool {
    let file = trim(file);
    let prefix = trim(prefix);
    if prefix.is_empty() {
        return true;
    }
    match file.strip_prefix(prefix) {
        Some(rest) => rest.is_empty() || rest.starts_with('/'),
        None => false,
    }
}

fn trim(path: &str) -> &str {
    let mut p = path;
    while let Some(rest) = p.strip_prefix("./") {
        p = rest;
    }
    let p = p.trim_start_matches('/').trim_end_matches('/');
    if p == "." {
        ""
    } else {
        p
    }
}
