//! The changelist of an execution: the commits on its feature branch since the base, grouped
//! by step and agent, with per-file line counts, and the whole diff.
//!
//! Reads the repository only (never writes it, save fetching a replica's clone); the agent of
//! each commit comes from the execution's results (the commit's `Baton-Step` trailer names the
//! step). The branch is the one this data directory's `execution.json` names; on a replica that
//! never drove the execution, the one its project's remote holds, read from this replica's clone
//! ([`remote::remote_branch`], with the base recorded when the execution was created).

use std::path::PathBuf;

use anyhow::Context as _;
use serde::Serialize;

pub use crate::git::FileStat;
use crate::git::GitRepo;
use crate::model::state::ExecutionState;
use crate::runtime::executions::Executions;
use crate::runtime::remote;
use crate::runtime::runs::read_meta;
use crate::runtime::{blocking, BadInput};

/// Largest diff text returned, bytes.
pub const MAX_DIFF_BYTES: usize = 1024 * 1024;

/// Commits on a feature branch considered, newest first.
const MAX_COMMITS: usize = 500;

/// One commit of the changelist.
#[derive(Debug, Clone, Serialize)]
pub struct ChangeCommit {
    /// Commit id.
    pub sha: String,
    /// First line of its message.
    pub summary: String,
    /// Step (`Baton-Step` trailer), empty for commits not made by an attempt.
    pub step_id: String,
    /// The step's agent, when known.
    pub agent_name: String,
    /// Files it changed, with line counts.
    pub files: Vec<FileStat>,
}

/// An execution's changelist.
#[derive(Debug, Clone, Serialize)]
pub struct Changelist {
    /// The repository.
    pub repo: PathBuf,
    /// `baton/<task_id>`.
    pub branch: String,
    /// Where the branch started.
    pub base_sha: String,
    /// The branch tip.
    pub tip_sha: String,
    /// Commits since the base, oldest first.
    pub commits: Vec<ChangeCommit>,
    /// Files changed base → tip, with line counts.
    pub files: Vec<FileStat>,
    /// The unified diff base → tip (cut at [`MAX_DIFF_BYTES`]).
    pub diff: String,
    /// Whether the diff was cut.
    pub diff_truncated: bool,
}

/// Why this data directory cannot show `task_id`'s feature branch: an execution fired from a
/// spec ran elsewhere (another replica, or a data directory whose run record is gone) and its
/// project has no remote to read the branch from; any other was driven by an external
/// orchestrator, which keeps no branch here.
///
/// Errors: the database.
async fn no_branch_here(execs: &Executions, task_id: &str) -> anyhow::Result<String> {
    let Some(spec) = execs.store().spec_of_execution(task_id).await? else {
        return Ok(format!("execution {task_id} has no feature branch here: it is driven by an external orchestrator"));
    };
    Ok(format!(
        "execution {task_id} has no feature branch here: this data directory has no record of its run \
         (runs/{task_id}/execution.json), and project {} has no remote (repo_url) to read its branch from; open \
         its changelist on the replica that ran it, or give the project a remote",
        spec.project
    ))
}

/// The changelist of `state`'s execution.
///
/// Errors: the execution was not run by a driver (no `execution.json`, and no project remote
/// to read its branch from: [`BadInput`]); the repository or branch is gone; the remote has no
/// feature branch.
pub async fn changelist(execs: &Executions, state: &ExecutionState) -> anyhow::Result<Changelist> {
    let task_id = &state.task_id;
    // (repository, branch, base, the tip when it is not the local branch's)
    let (repo_path, branch, base_sha, remote_tip) = match read_meta(execs.data(), task_id)? {
        Some(meta) => (meta.repo, meta.branch, meta.base_sha, None),
        None => match remote::remote_project(execs, task_id).await? {
            // Never driven here: the branch as the project's remote holds it.
            Some(project) => {
                let rb = remote::remote_branch(execs.data(), execs.store(), &project, task_id).await?;
                (rb.repo.root().to_path_buf(), rb.branch, rb.base_sha, Some(rb.tip))
            }
            None => return Err(BadInput(no_branch_here(execs, task_id).await?).into()),
        },
    };
    let agents: std::collections::HashMap<String, String> =
        state.step_results.values().map(|r| (r.step_id.clone(), r.agent_name.clone())).collect();
    blocking(move || -> anyhow::Result<Changelist> {
        let repo = GitRepo::open(&repo_path)?;
        let tip = match remote_tip {
            Some(tip) => tip,
            None => repo.branch_tip(&branch)?.with_context(|| format!("branch {branch} is gone"))?,
        };
        let mut commits = Vec::new();
        for c in repo.log(&tip, MAX_COMMITS)? {
            if c.sha == base_sha {
                break;
            }
            let step_id = c
                .message
                .lines()
                .find_map(|l| l.strip_prefix("Baton-Step: "))
                .map(str::trim)
                .unwrap_or_default()
                .to_string();
            let parent = format!("{}^", c.sha);
            let files = repo.diff_stats(&parent, &c.sha).unwrap_or_default();
            commits.push(ChangeCommit {
                agent_name: agents.get(&step_id).cloned().unwrap_or_default(),
                sha: c.sha,
                summary: c.summary,
                step_id,
                files,
            });
        }
        commits.reverse();
        let files = repo.diff_stats(&base_sha, &tip)?;
        let (diff, diff_truncated) = repo.diff_patch(&base_sha, &tip, MAX_DIFF_BYTES)?;
        Ok(Changelist { repo: repo_path, branch, base_sha, tip_sha: tip, commits, files, diff, diff_truncated })
    })
    .await?
}
