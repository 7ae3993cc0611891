//! Projects of the spec queue: registering one (its repository, branch, profile, remote and
//! budget checked), reading, removing, and the agent caps the pool takes from them; the test
//! command a repository suggests. It reads repositories but never writes them.

use std::path::{Path, PathBuf};

use super::{check_budget, invalid, SpecError, Specs};
use crate::clock;
use crate::git::GitRepo;
use crate::runtime::blocking;
use crate::runtime::driver::PROFILES;
use crate::store::ProjectRow;

/// A project to register.
#[derive(Debug, Clone, Default, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewProject {
    /// 1–64 of `A-Z a-z 0-9 . _ -`.
    pub name: String,
    /// Path of a local git repository. May be left out on PostgreSQL when `repo_url` is given:
    /// each replica then works in its own clone of the remote (`<data>/repos/<name>`).
    #[serde(default)]
    #[schema(value_type = String)]
    pub repo_path: PathBuf,
    /// Branch feature branches start from (default: the repository's current branch).
    #[serde(default)]
    pub default_branch: Option<String>,
    /// `demo`, `claude`, `codex`, `gemini` or `command` (default `claude`).
    #[serde(default)]
    pub agent_profile: Option<String>,
    /// Test gate command (default: detected from the repository at enrichment); no NUL.
    #[serde(default)]
    pub test_command: Option<String>,
    /// Link to the repository on its forge: an http(s) URL.
    #[serde(default)]
    pub forge_url: Option<String>,
    /// Concurrent agents across its executions (0 or absent: only the global cap).
    #[serde(default)]
    pub max_agents: Option<u32>,
    /// Whoever fires an execution may not decide its approvals (default false).
    #[serde(default)]
    pub require_separate_reviewer: bool,
    /// The label that makes a GitHub issue of `forge_repo` a spec: one line, at most 50
    /// characters (default: none, no issue is imported).
    #[serde(default)]
    pub trigger_label: Option<String>,
    /// The repository webhooks map to this project: `owner/name` (or `github:owner/name`) on
    /// GitHub, `ado:<org>/<project>[/<repository>]` or the bare project name on Azure DevOps;
    /// one line (default: none).
    #[serde(default)]
    pub forge_repo: Option<String>,
    /// Default USD ceiling of its executions (a spec's reviewed ceiling wins; default: none).
    #[serde(default)]
    pub budget_usd: Option<f64>,
    /// Its remote: a git URL (`https://…`, `ssh://…`, `git@host:path`) or the path of a bare
    /// repository. On PostgreSQL every replica clones it under its data dir and pushes each
    /// feature branch to it after every consolidation (default: none).
    #[serde(default)]
    pub repo_url: Option<String>,
}

/// The texts of a project that reach a command, a link or a forge query, checked when it is
/// registered (found by a tester: a `test_command` holding a NUL was taken, written into every
/// plan's gate, and refused only when a spec was fired; `forge_url` "not a url" and a label
/// with an escape character were taken too).
///
/// Errors ([`SpecError::Invalid`], naming the field): a NUL in `test_command`; a `forge_url`
/// that is no http(s) URL; a `trigger_label` that is not one line of at most 50 characters
/// (GitHub's limit); a `forge_repo` that is not one line, or names a repository in a form
/// the forge client does not read (`crate::forge::RepoRef::parse`).
fn check_project_texts(p: &NewProject) -> Result<(), SpecError> {
    let text = |v: &Option<String>| v.as_deref().map(str::trim).unwrap_or_default().to_string();
    if text(&p.test_command).contains('\0') {
        return Err(invalid("test_command", crate::engine::validate::NUL_REFUSED));
    }
    let forge_url = text(&p.forge_url);
    if !forge_url.is_empty() {
        let ok = url::Url::parse(&forge_url).is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.has_host());
        if !ok {
            return Err(invalid("forge_url", format!("{forge_url:?} is not an http(s) URL")));
        }
    }
    let label = text(&p.trigger_label);
    if !crate::model::text::is_one_line(&label) || label.chars().count() > 50 {
        return Err(invalid("trigger_label", "one line without control characters, at most 50 characters"));
    }
    let repo = text(&p.forge_repo);
    if !crate::model::text::is_one_line(&repo) || repo.len() > 256 {
        return Err(invalid("forge_repo", "one line without control characters, at most 256 bytes"));
    }
    // A repository names its forge (the forge client's own parser judges it); a bare Azure
    // DevOps project name maps webhooks only.
    let names_a_repository = repo.contains('/') || repo.starts_with("github:") || repo.starts_with("ado:");
    if names_a_repository {
        crate::forge::RepoRef::parse(&repo).map_err(|e| invalid("forge_repo", e.to_string()))?;
    }
    Ok(())
}

/// The test command a repository's files suggest: `cargo test` (Cargo.toml), `npm test`
/// (package.json with a test script), `python -m pytest` (pyproject.toml, setup.py,
/// pytest.ini), `go test ./...` (go.mod), `make test` (a Makefile with a `test:` target),
/// `sh scripts/test.sh` or `sh scripts/check.sh` when present; `None` otherwise.
pub fn detect_test_command(root: &Path) -> Option<String> {
    let has = |f: &str| root.join(f).is_file();
    if has("Cargo.toml") {
        return Some("cargo test".into());
    }
    if let Ok(text) = std::fs::read_to_string(root.join("package.json")) {
        let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        if v.pointer("/scripts/test").and_then(|t| t.as_str()).is_some() {
            return Some("npm test".into());
        }
    }
    if has("pyproject.toml") || has("setup.py") || has("pytest.ini") {
        return Some("python -m pytest".into());
    }
    if has("go.mod") {
        return Some("go test ./...".into());
    }
    if std::fs::read_to_string(root.join("Makefile")).is_ok_and(|m| m.lines().any(|l| l.starts_with("test:"))) {
        return Some("make test".into());
    }
    ["scripts/test.sh", "scripts/check.sh"].into_iter().find(|s| has(s)).map(|s| format!("sh {s}"))
}

impl Specs {
    /// Registers a project after checking its repository and branch.
    ///
    /// Errors: a bad name, a path that is not a git repository, an unknown branch or profile
    /// ([`SpecError::Invalid`]); a taken name ([`SpecError::Conflict`]).
    pub async fn register_project(&self, p: NewProject) -> Result<ProjectRow, SpecError> {
        let name = p.name.trim().to_string();
        if name.is_empty()
            || name.len() > 64
            || !name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        {
            return Err(invalid("name", "1-64 characters of A-Z a-z 0-9 . _ -"));
        }
        let profile = p.agent_profile.clone().unwrap_or_else(|| "claude".into());
        if !PROFILES.contains(&profile.as_str()) {
            return Err(invalid("agent_profile", format!("{profile:?} is not one of {}", PROFILES.join(", "))));
        }
        let repo_url = p.repo_url.clone().unwrap_or_default();
        if !repo_url.is_empty() {
            crate::git::check_remote_url(&repo_url).map_err(|e| invalid("repo_url", e))?;
        }
        let repo = if p.repo_path.as_os_str().is_empty() {
            // No local path: on PostgreSQL with a remote, this replica's clone of it is the
            // repository checked here (every replica makes its own on first use).
            if repo_url.is_empty() {
                return Err(invalid(
                    "repo_path",
                    "required: the path of a local git repository (or, on PostgreSQL, give repo_url alone)",
                ));
            }
            if self.execs.store().backend_name() != "postgres" {
                return Err(invalid(
                    "repo_path",
                    "required on SQLite: repo_url alone is for replicas on PostgreSQL, which work in their own clones",
                ));
            }
            crate::runtime::remote::clone_of(self.execs.data(), &name, &repo_url)
                .await
                .map_err(|e| invalid("repo_url", format!("{e:#}")))?
        } else {
            let path = p.repo_path.clone();
            let shown = path.display().to_string();
            blocking(move || GitRepo::open(&path)).await?.map_err(|e| invalid("repo_path", format!("{shown}: {e}")))?
        };
        let repo_path =
            if p.repo_path.as_os_str().is_empty() { String::new() } else { repo.root().display().to_string() };
        let branch = match p.default_branch.clone().filter(|b| !b.trim().is_empty()) {
            Some(b) => {
                crate::git::check_branch_name(&b).map_err(|e| invalid("default_branch", e))?;
                let (r, name) = (repo.clone(), b.clone());
                let tip = blocking(move || r.branch_tip(&name)).await?.map_err(anyhow::Error::from)?;
                if tip.is_none() {
                    return Err(invalid("default_branch", format!("no branch {b} in {}", repo.root().display())));
                }
                b
            }
            None => {
                let r = repo.clone();
                let (b, _) = blocking(move || r.head_branch())
                    .await?
                    .map_err(|e| invalid("repo_path", format!("no current branch ({e}): commit something first")))?;
                b.ok_or_else(|| invalid("default_branch", "HEAD is detached: name the default branch"))?
            }
        };
        check_project_texts(&p)?;
        let row = ProjectRow {
            name,
            repo_path,
            default_branch: branch,
            agent_profile: profile,
            test_command: p.test_command.unwrap_or_default().trim().to_string(),
            forge_url: p.forge_url.unwrap_or_default().trim().to_string(),
            max_agents: i64::from(p.max_agents.unwrap_or(0)),
            created_at: clock::now_rfc3339(),
            require_separate_reviewer: p.require_separate_reviewer,
            trigger_label: p.trigger_label.unwrap_or_default().trim().to_string(),
            forge_repo: p.forge_repo.unwrap_or_default().trim().to_string(),
            budget_usd: p.budget_usd.map(|b| check_budget(b, "budget_usd")).transpose()?,
            repo_url,
        };
        self.execs.store().insert_project(&row).await?;
        self.pool.set_project_cap(&row.name, usize::try_from(row.max_agents).unwrap_or(0));
        Ok(row)
    }

    /// Every project.
    ///
    /// Errors: the database.
    pub async fn projects(&self) -> Result<Vec<ProjectRow>, SpecError> {
        Ok(self.execs.store().list_projects().await?)
    }

    /// One project. Errors: [`SpecError::NotFound`].
    pub async fn project(&self, name: &str) -> Result<ProjectRow, SpecError> {
        self.execs.store().project(name).await?.ok_or_else(|| SpecError::NotFound(format!("no project named {name}")))
    }

    /// Removes a project without specs. Errors: not found; it has specs (conflict).
    pub async fn remove_project(&self, name: &str) -> Result<(), SpecError> {
        self.execs.store().delete_project(name).await?;
        self.pool.set_project_cap(name, 0);
        Ok(())
    }

    /// Applies every project's agent cap to the pool (at server start).
    ///
    /// Errors: the database.
    pub async fn load_project_caps(&self) -> Result<(), SpecError> {
        for p in self.projects().await? {
            self.pool.set_project_cap(&p.name, usize::try_from(p.max_agents).unwrap_or(0));
        }
        Ok(())
    }
}
