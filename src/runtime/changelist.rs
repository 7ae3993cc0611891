//! The changelist of an execution: the commits on its feature branch since the base, grouped
//! by step and agent, with per-file line counts, and the whole diff.
//!
//! Reads the repository only (never writes it); the agent of each commit comes from the
//! execution's results (the commit's `Baton-Step` trailer names the step).

use std::path::PathBuf;

use anyhow::Context as _;
use serde::Serialize;

pub use crate::git::FileStat;
use crate::git::GitRepo;
use crate::model::state::ExecutionState;
use crate::runtime::config::DataDir;
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

/// The changelist of `state`'s execution.
///
/// Errors: the execution was not run by a driver (no `execution.json`: [`BadInput`]); the
/// repository or branch is gone.
pub async fn changelist(data: &DataDir, state: &ExecutionState) -> anyhow::Result<Changelist> {
    let Some(meta) = read_meta(data, &state.task_id)? else {
        return Err(BadInput(format!(
            "execution {} has no feature branch here: it is driven by an external orchestrator",
            state.task_id
        ))
        .into());
    };
    let agents: std::collections::HashMap<String, String> =
        state.step_results.values().map(|r| (r.step_id.clone(), r.agent_name.clone())).collect();
    blocking(move || -> anyhow::Result<Changelist> {
        let repo = GitRepo::open(&meta.repo)?;
        let tip = repo.branch_tip(&meta.branch)?.with_context(|| format!("branch {} is gone", meta.branch))?;
        let mut commits = Vec::new();
        for c in repo.log(&tip, MAX_COMMITS)? {
            if c.sha == meta.base_sha {
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
        let files = repo.diff_stats(&meta.base_sha, &tip)?;
        let (diff, diff_truncated) = repo.diff_patch(&meta.base_sha, &tip, MAX_DIFF_BYTES)?;
        Ok(Changelist {
            repo: meta.repo,
            branch: meta.branch,
            base_sha: meta.base_sha,
            tip_sha: tip,
            commits,
            files,
            diff,
            diff_truncated,
        })
    })
    .await?
}
