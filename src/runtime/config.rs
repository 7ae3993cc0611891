//! The data directory and the operator's `baton.toml`.
//!
//! Layout under the data dir (default `./.baton`, created with a `.gitignore` of `*`):
//! `baton.db`, `baton.toml`, `plans/`, `worktrees/<task_id>/…`,
//! `runs/<task_id>/<step_id>/<attempt>/` (prompt, stdout, stderr, start and exit records, lock),
//! `logs/`. This module owns paths and configuration parsing; it never touches git or SQLite.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::Deserialize;

use crate::runtime::BadInput;

/// The data directory.
#[derive(Debug, Clone)]
pub struct DataDir {
    root: PathBuf,
}

impl DataDir {
    /// Opens (creating if needed) the data directory at `root`, with a `.gitignore` of `*` so it
    /// never shows in a repository it sits in.
    ///
    /// Errors: the directory cannot be created or written.
    pub fn open(root: &Path) -> anyhow::Result<DataDir> {
        let bad = |what: String| BadInput(format!("data dir {}: {what}", root.display()));
        if root.exists() && !root.is_dir() {
            return Err(bad("exists and is not a directory (pass --data-dir DIR or set BATON_DATA_DIR)".into()).into());
        }
        std::fs::create_dir_all(root).map_err(|e| bad(format!("cannot be created: {e}")))?;
        // The layout's directories (worktrees/ and runs/ appear with the first execution).
        let _ = std::fs::create_dir_all(root.join("logs"));
        let ignore = root.join(".gitignore");
        if !ignore.exists() {
            std::fs::write(&ignore, "*\n").map_err(|e| bad(format!("is not writable: {e}")))?;
        }
        let root = root.canonicalize().map_err(|e| bad(format!("cannot be resolved: {e}")))?;
        Ok(DataDir { root })
    }

    /// The directory itself (absolute).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `baton.db`.
    pub fn db_path(&self) -> PathBuf {
        self.root.join("baton.db")
    }

    /// `baton.toml`.
    pub fn config_path(&self) -> PathBuf {
        self.root.join("baton.toml")
    }

    /// `plans/`: plans saved by `baton plan --from`.
    pub fn plans_dir(&self) -> PathBuf {
        self.root.join("plans")
    }

    /// `worktrees/<task_id>/`.
    pub fn worktrees(&self, task_id: &str) -> PathBuf {
        self.root.join("worktrees").join(task_id)
    }

    /// `worktrees/<task_id>/<step_id>-<attempt>`: the worktree of one attempt.
    pub fn attempt_worktree(&self, task_id: &str, step_id: &str, attempt: u32) -> PathBuf {
        self.worktrees(task_id).join(format!("{step_id}-{attempt}"))
    }

    /// `worktrees/<task_id>/_integration`: where gates run, at the feature branch tip.
    pub fn integration_worktree(&self, task_id: &str) -> PathBuf {
        self.worktrees(task_id).join("_integration")
    }

    /// `repos/<project>`: this replica's clone of a project's remote (issue 17.3), the
    /// repository its executions' worktrees are made from.
    pub fn repo_clone(&self, project: &str) -> PathBuf {
        self.root.join("repos").join(project)
    }

    /// `runs/<task_id>/`.
    pub fn runs(&self, task_id: &str) -> PathBuf {
        self.root.join("runs").join(task_id)
    }

    /// `runs/<task_id>/<step_id>/<attempt>/`: the run directory of one attempt.
    pub fn run_dir(&self, task_id: &str, step_id: &str, attempt: u32) -> PathBuf {
        self.runs(task_id).join(step_id).join(attempt.to_string())
    }

    /// `logs/`.
    pub fn logs_dir(&self) -> PathBuf {
        self.root.join("logs")
    }

    /// Reads `baton.toml` (an absent file is the default configuration).
    ///
    /// Errors: a malformed file, naming the file and the TOML error.
    pub fn config(&self) -> anyhow::Result<Config> {
        let path = self.config_path();
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                let config: Config = toml::from_str(&text).map_err(|e| {
                    let detail =
                        e.to_string().lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ");
                    BadInput(format!("{} is not a valid baton.toml: {detail}", path.display()))
                })?;
                crate::pmo::pricing::PriceTable::check(&config.prices)
                    .map_err(|e| BadInput(format!("{} is not a valid baton.toml: {e}", path.display())))?;
                crate::runtime::agent::mcp::check_servers(&config.mcp_servers)
                    .map_err(|e| BadInput(format!("{} is not a valid baton.toml: {e}", path.display())))?;
                config
                    .check_include()
                    .map_err(|e| BadInput(format!("{} is not a valid baton.toml: {e}", path.display())))?;
                Ok(config)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Config::default()),
            Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }
}

/// Operator configuration (`baton.toml`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Runtime limits.
    #[serde(default)]
    pub runtime: RuntimeConfig,
    /// Agent name → how to run it.
    #[serde(default)]
    pub agents: BTreeMap<String, AgentConfig>,
    /// `[github]`: token, API address, webhook secret (the environment overrides each).
    #[serde(default)]
    pub github: crate::forge::GitHubSettings,
    /// `[ado]`: PAT, API address, webhook credentials (the environment overrides each).
    #[serde(default)]
    pub ado: crate::forge::AdoSettings,
    /// `[prices.<model>]`: USD per Mtok in/out and the default step cost, on top of the
    /// built-in rows (see [`PriceTable`](crate::pmo::pricing::PriceTable)).
    #[serde(default)]
    pub prices: BTreeMap<String, crate::pmo::pricing::ModelPrice>,
    /// `[mcp_servers.<name>]`: the MCP servers a plan step may name in its `mcp_servers`
    /// (see [`McpServer`](crate::runtime::agent::mcp::McpServer); secrets by `"${NAME}"` reference).
    #[serde(default)]
    pub mcp_servers: BTreeMap<String, crate::runtime::agent::mcp::McpServer>,
    /// `[worktree]`: what every new worktree gets beside the checkout's `.worktreeinclude`.
    #[serde(default)]
    pub worktree: WorktreeConfig,
    /// `[projects.<name>]`: settings of one registered project, by its name.
    #[serde(default)]
    pub projects: BTreeMap<String, ProjectConfig>,
    /// `[database]`: which database holds the store (the data directory's SQLite file unless
    /// a PostgreSQL URL is given).
    #[serde(default)]
    pub database: DatabaseConfig,
    /// `[ci]`: how a `ci` gate without a command waits for the forge's checks (issue 19.2).
    #[serde(default)]
    pub ci: CiConfig,
    /// `[review]`: who judges a `review` gate without a command (issue 19.2).
    #[serde(default)]
    pub review: ReviewConfig,
    /// `[cluster]`: how replicas sharing one PostgreSQL database share the work (issue 17.2).
    #[serde(default)]
    pub cluster: ClusterConfig,
}

/// `[cluster]` in `baton.toml`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// Lease lifetime in seconds (default 30; `BATON_LEASE_SECS` overrides it): a driver renews
    /// its lease every third of it, and a replica that was killed or paused loses its executions
    /// to another replica within about two of it.
    #[serde(default)]
    pub lease_secs: Option<i64>,
}

/// `[database]` in `baton.toml`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatabaseConfig {
    /// `postgres://user:password@host:port/database`: keep the store in that PostgreSQL
    /// database instead of `baton.db`. `BATON_DATABASE_URL` overrides it; unset or empty: SQLite.
    #[serde(default)]
    pub url: Option<String>,
}

/// The database URL the store of `data` uses: `BATON_DATABASE_URL` from `env` when set and not
/// empty, else `[database] url` of its `baton.toml`; `None`: the SQLite file `baton.db`.
///
/// Only the `[database]` table is read here (a `baton.toml` that does not parse is reported by
/// [`DataDir::config`] where the rest of it is used).
pub fn database_url(data: &DataDir, env: impl Fn(&str) -> Option<String>) -> Option<String> {
    if let Some(url) = env("BATON_DATABASE_URL").filter(|u| !u.trim().is_empty()) {
        return Some(url.trim().to_string());
    }
    let text = std::fs::read_to_string(data.config_path()).ok()?;
    let table: toml::Table = toml::from_str(&text).ok()?;
    let url = table.get("database")?.get("url")?.as_str()?.trim();
    (!url.is_empty()).then(|| url.to_string())
}

impl Config {
    /// The worktree environment patterns (gitignore syntax) of the project(s) registered at
    /// `project_names`: `[worktree] include`, then each one's `[projects.<name>]
    /// worktree_include`. The checkout's own `.worktreeinclude` is read by `git` beside them.
    pub fn worktree_include<'a>(&self, project_names: impl IntoIterator<Item = &'a str>) -> Vec<String> {
        let mut out = self.worktree.include.clone();
        for name in project_names {
            if let Some(p) = self.projects.get(name) {
                out.extend(p.worktree_include.iter().cloned());
            }
        }
        out
    }

    /// Checks every worktree include pattern: `Err` names the table and the bad pattern.
    fn check_include(&self) -> Result<(), String> {
        crate::git::check_include_patterns(&self.worktree.include).map_err(|e| format!("[worktree] include: {e}"))?;
        for (name, p) in &self.projects {
            crate::git::check_include_patterns(&p.worktree_include)
                .map_err(|e| format!("[projects.{name}] worktree_include: {e}"))?;
        }
        Ok(())
    }

    /// The CI settings of project `project` (`None`: an execution of no project): `[ci]` with
    /// the project's `ci_*` keys on top.
    pub fn ci_for(&self, project: Option<&str>) -> CiConfig {
        let mut ci = self.ci.clone();
        if let Some(p) = project.and_then(|p| self.projects.get(p)) {
            if let Some(t) = p.ci_timeout_secs {
                ci.timeout_secs = t;
            }
            if let Some(r) = &p.ci_required {
                ci.required.clone_from(r);
            }
            if let Some(n) = p.max_fix_rounds {
                ci.max_fix_rounds = n;
            }
            if let Some(f) = p.ci_fixer.as_ref().filter(|f| !f.trim().is_empty()) {
                ci.fixer = Some(f.trim().to_string());
            }
        }
        ci
    }

    /// The reviewer agent of project `project`: its `review_agent`, else `[review] agent`;
    /// `None` when neither names one (a human then reviews).
    pub fn reviewer_for(&self, project: Option<&str>) -> Option<String> {
        project
            .and_then(|p| self.projects.get(p))
            .and_then(|p| p.review_agent.clone())
            .or_else(|| self.review.agent.clone())
            .map(|a| a.trim().to_string())
            .filter(|a| !a.is_empty())
    }

    /// Review remediation rounds per pull request for project `project`: its
    /// `max_review_rounds`, else `[review] max_rounds`.
    pub fn review_rounds_for(&self, project: Option<&str>) -> u32 {
        project.and_then(|p| self.projects.get(p)).and_then(|p| p.max_review_rounds).unwrap_or(self.review.max_rounds)
    }

    /// The price table: built-in rows with `[prices.*]` on top.
    pub fn price_table(&self) -> crate::pmo::pricing::PriceTable {
        crate::pmo::pricing::PriceTable::new(&self.prices)
    }
    /// The forge settings: `[github]` and `[ado]` with the environment `lookup` on top
    /// ([`ForgeSettings::with_env`](crate::forge::ForgeSettings::with_env)).
    pub fn forge_settings(&self, lookup: impl Fn(&str) -> Option<String>) -> crate::forge::ForgeSettings {
        crate::forge::ForgeSettings { github: self.github.clone(), ado: self.ado.clone() }.with_env(lookup)
    }
}

/// `[runtime]` in `baton.toml`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RuntimeConfig {
    /// Concurrent agent processes per execution (default 3).
    pub max_parallel: usize,
    /// Agent timeout when neither the step nor the agent sets one, seconds (default 1800).
    pub default_timeout_secs: u64,
    /// Gate timeout, seconds (default 600).
    pub gate_timeout_secs: u64,
    /// `baton gc` removes worktrees of final executions older than this, hours (default 72).
    pub gc_hours: u64,
    /// An agent that printed its final result (claude's `result`, codex's end of turn) and is
    /// still running this many seconds later is stopped, and its result stands (default 5).
    pub result_grace_secs: u64,
    /// Run each attempt in a cgroup v2 of its own where the machine allows it (default true);
    /// descendants are tracked through the child-subreaper flag either way.
    pub attempt_cgroups: bool,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            max_parallel: 3,
            default_timeout_secs: 1800,
            gate_timeout_secs: 600,
            gc_hours: 72,
            result_grace_secs: 5,
            attempt_cgroups: true,
        }
    }
}

/// `[ci]` in `baton.toml`: how a `ci` gate without a command waits for the forge's checks of
/// the pushed head commit (issue 19.2).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CiConfig {
    /// The gate fails when the checks have not all finished this long after the push,
    /// seconds (default 3600: 60 minutes).
    pub timeout_secs: u64,
    /// Zero checks reported this long after the push fail the gate (`no CI checks reported
    /// for <sha>`), seconds (default 300).
    pub grace_secs: u64,
    /// First poll interval while no webhook says anything, seconds (default 15); it doubles
    /// while nothing changes, up to `max_poll_secs`.
    pub poll_secs: u64,
    /// Longest poll interval, seconds (default 300).
    pub max_poll_secs: u64,
    /// The check names that must pass; empty (the default) means every reported check.
    pub required: Vec<String>,
    /// CI fix rounds per pull request (issue 19.3): a required check of the open pull
    /// request's head fails, an agent fixes it, at most this many times (default 2); then
    /// Baton asks a human. 0 turns fix rounds off.
    pub max_fix_rounds: u32,
    /// The agent that fixes a failing check (a roster or `[agents]` name); none (the default):
    /// the agent that made the change.
    pub fixer: Option<String>,
    /// The checks of an open pull request's head are also read without a webhook (a lost
    /// delivery loses nothing): first this long after a new head is seen, seconds (default
    /// 30); the interval doubles after each read, up to `pr_max_poll_secs`, and a CI webhook
    /// about the pull request starts it over.
    pub pr_poll_secs: u64,
    /// Longest interval between two reads of an open pull request's checks, seconds (default
    /// 600: 10 minutes).
    pub pr_max_poll_secs: u64,
}

impl Default for CiConfig {
    fn default() -> Self {
        CiConfig {
            timeout_secs: 3600,
            grace_secs: 300,
            poll_secs: 15,
            max_poll_secs: 300,
            required: Vec::new(),
            max_fix_rounds: DEFAULT_MAX_ROUNDS,
            fixer: None,
            pr_poll_secs: 30,
            pr_max_poll_secs: 600,
        }
    }
}

/// Remediation rounds per pull request and cause, unless configured (issue 19.3/4).
pub const DEFAULT_MAX_ROUNDS: u32 = 2;

/// `[review]` in `baton.toml`: the reviewer of `review` gates without a command (issue 19.2),
/// and review remediation rounds on an open pull request (issue 19.4).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReviewConfig {
    /// The reviewer agent (a roster or `[agents]` name); none: a human reviews (an approval).
    pub agent: Option<String>,
    /// Review remediation rounds per pull request (default 2), counted apart from CI fix
    /// rounds; then Baton asks a human. 0 turns them off.
    pub max_rounds: u32,
}

impl Default for ReviewConfig {
    fn default() -> Self {
        ReviewConfig { agent: None, max_rounds: DEFAULT_MAX_ROUNDS }
    }
}

/// `[worktree]` in `baton.toml`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorktreeConfig {
    /// Files (gitignore syntax, relative to the checkout root) copied from the project
    /// checkout into every new attempt and integration worktree, on top of the checkout's
    /// `.worktreeinclude`: only files git ignores, never through a symbolic link, never
    /// committed (`git::GitRepo::copy_worktree_env`).
    #[serde(default)]
    pub include: Vec<String>,
}

/// `[projects.<name>]` in `baton.toml`: one registered project's settings.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProjectConfig {
    /// Files its worktrees get a copy of, as [`WorktreeConfig::include`], added to it.
    #[serde(default)]
    pub worktree_include: Vec<String>,
    /// Its reviewer agent, over `[review] agent`.
    #[serde(default)]
    pub review_agent: Option<String>,
    /// Its CI timeout, seconds, over `[ci] timeout_secs`.
    #[serde(default)]
    pub ci_timeout_secs: Option<u64>,
    /// Its required check names, over `[ci] required`.
    #[serde(default)]
    pub ci_required: Option<Vec<String>>,
    /// Its CI fix rounds per pull request, over `[ci] max_fix_rounds`.
    #[serde(default)]
    pub max_fix_rounds: Option<u32>,
    /// Its fixer agent, over `[ci] fixer`.
    #[serde(default)]
    pub ci_fixer: Option<String>,
    /// Its review remediation rounds per pull request, over `[review] max_rounds`.
    #[serde(default)]
    pub max_review_rounds: Option<u32>,
}

/// `[agents.<name>]` in `baton.toml`: how one roster name runs.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// `claude`, `codex`, `command` or `demo`.
    pub profile: Option<String>,
    /// Model override.
    pub model: Option<String>,
    /// argv template of the `command` profile (`{prompt_file}`, `{model}`, `{cwd}` substituted).
    pub command: Option<Vec<String>>,
    /// Timeout, seconds.
    pub timeout_secs: Option<u64>,
    /// Another agent (a name under `[agents]`) that runs this agent's steps while this one's
    /// account is out of quota (issue 18.1); the journal's `step_dispatched` names which ran.
    pub fallback: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_database_url_comes_from_the_environment_then_baton_toml_else_sqlite() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = DataDir::open(&tmp.path().join("d")).unwrap();
        let none = |_: &str| None;
        assert_eq!(database_url(&dir, none), None, "no baton.toml: the SQLite file");
        std::fs::write(dir.config_path(), "[database]\nurl = \"postgres://b@db/baton\"\n").unwrap();
        assert_eq!(database_url(&dir, none).as_deref(), Some("postgres://b@db/baton"));
        assert!(dir.config().unwrap().database.url.is_some(), "[database] is part of baton.toml");
        let env = |name: &str| (name == "BATON_DATABASE_URL").then(|| "postgres://e@db/other".to_string());
        assert_eq!(database_url(&dir, env).as_deref(), Some("postgres://e@db/other"), "the environment wins");
        let empty = |_: &str| Some(String::new());
        assert_eq!(database_url(&dir, empty).as_deref(), Some("postgres://b@db/baton"), "an empty variable is unset");
        std::fs::write(dir.config_path(), "[database]\nurl = \"\"\n").unwrap();
        assert_eq!(database_url(&dir, none), None, "an empty url is SQLite");
    }

    #[test]
    fn data_dir_is_created_with_a_gitignore() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = DataDir::open(&tmp.path().join("d")).unwrap();
        assert_eq!(std::fs::read_to_string(dir.root().join(".gitignore")).unwrap(), "*\n");
        assert!(dir.run_dir("t", "1.1", 2).ends_with("runs/t/1.1/2"));
    }

    #[test]
    fn malformed_config_names_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = DataDir::open(tmp.path()).unwrap();
        std::fs::write(dir.config_path(), "[agents.x]\nprofil = 'claude'\n").unwrap();
        let err = format!("{:#}", dir.config().unwrap_err());
        assert!(err.contains("baton.toml is not a valid baton.toml"), "{err}");
        assert!(err.contains("line 2"), "{err}");
        assert!(err.contains("profil"), "{err}");
    }

    #[test]
    fn worktree_include_patterns_come_from_both_tables_and_a_bad_one_is_named() {
        let cfg: Config = toml::from_str(
            "[worktree]\ninclude = ['.env']\n[projects.board]\nworktree_include = ['config/local.toml']\n",
        )
        .unwrap();
        assert_eq!(cfg.worktree_include(["board"]), vec![".env".to_string(), "config/local.toml".to_string()]);
        assert_eq!(cfg.worktree_include(["other"]), vec![".env".to_string()]);
        let tmp = tempfile::tempdir().unwrap();
        let dir = DataDir::open(tmp.path()).unwrap();
        std::fs::write(dir.config_path(), "[projects.board]\nworktree_include = ['config/{a,b']\n").unwrap();
        let err = format!("{:#}", dir.config().unwrap_err());
        assert!(err.contains("[projects.board] worktree_include"), "{err}");
        assert!(err.contains("config/{a,b"), "{err}");
    }

    #[test]
    fn agent_table_parses() {
        let cfg: Config = toml::from_str(
            "[runtime]\nmax_parallel = 2\n[agents.architect]\nprofile = 'command'\ncommand = ['my-agent', '{prompt_file}']\n",
        )
        .unwrap();
        assert_eq!(cfg.runtime.max_parallel, 2);
        assert_eq!(cfg.runtime.gate_timeout_secs, 600);
        assert_eq!(cfg.agents["architect"].command.as_ref().unwrap()[1], "{prompt_file}");
    }

    #[test]
    fn mcp_servers_parse_and_a_malformed_one_names_the_file_and_server() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = DataDir::open(tmp.path()).unwrap();
        std::fs::write(
            dir.config_path(),
            "[mcp_servers.github]\ncommand = 'npx'\nargs = ['-y', 'server-github']\nenv = { GITHUB_TOKEN = '${GITHUB_TOKEN}' }\n",
        )
        .unwrap();
        let cfg = dir.config().unwrap();
        assert_eq!(cfg.mcp_servers["github"].args, ["-y", "server-github"]);
        std::fs::write(dir.config_path(), "[mcp_servers.github]\nargs = ['x']\n").unwrap();
        let err = format!("{:#}", dir.config().unwrap_err());
        assert!(err.contains("baton.toml is not a valid baton.toml: [mcp_servers.github]: needs `command`"), "{err}");
    }
}
