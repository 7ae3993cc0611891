//! The references users type: a repository or team project ([`RepoRef`]) and a work item or
//! issue ([`ItemRef`]), parsed with errors that say which forms are accepted. It never calls a
//! forge.

use std::fmt;

use super::error::ForgeError;
use super::Forge;

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
