//! Merge: a completed execution's feature branch pushed to the project's remote and its pull
//! request opened — or found and linked when one exists — on GitHub or Azure DevOps, with a
//! body listing the spec, the plan, gate results, approvals, spend against the forecast and
//! the per-step commits ([`pr_body`]).
//!
//! Resumable and idempotent: a `merges` row is written before each outbound step, pushing a
//! commit the remote has is a no-op, and an existing pull request for the branch is always
//! looked for before one is opened, so re-running a merge after a crash between the push and
//! the pull request finishes the job and never opens a second one. On PostgreSQL a merge holds
//! a cluster-wide lock per execution, so merges sent to two replicas at once run one after the
//! other, and a replica that never drove the execution merges from its clone of the project's
//! remote (`repo_url`). This module never
//! decides an approval and never changes the journal.

use std::fmt::Write as _;

use crate::clock;
use crate::forge::{ForgeError, NewPull, RepoRef};
use crate::git::GitRepo;
use crate::model::state::{ExecutionState, ExecutionStatus};
use crate::model::text::shell_quote;
use crate::runtime::changelist::{changelist, ChangeCommit, Changelist};
use crate::runtime::executions::Executions;
use crate::runtime::forge::Forges;
use crate::runtime::{blocking, BadInput};
use crate::store::{MergeRow, ProjectRow, SpecRow};

/// The remote feature branches are pushed to ([`crate::runtime::driver::REMOTE`]).
pub const REMOTE: &str = crate::runtime::driver::REMOTE;

/// Longest pull request body, characters (GitHub's limit is 65,536).
pub const MAX_BODY_CHARS: usize = 60_000;

/// A merge that did not finish.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// No such execution.
    #[error("{0}")]
    NotFound(String),
    /// The execution or its project cannot be merged this way (not completed, no forge link —
    /// the message then gives the git commands to merge locally).
    #[error("{0}")]
    Refused(String),
    /// The push failed (git's message).
    #[error("pushing {branch} to {remote} failed: {message}")]
    Push {
        /// The branch.
        branch: String,
        /// The remote.
        remote: String,
        /// Git's message.
        message: String,
    },
    /// The forge call failed.
    #[error(transparent)]
    Forge(#[from] ForgeError),
    /// Anything else (the database, the repository).
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

/// The `git` commands that merge `branch` into `base` in the repository at `repo`, for a
/// project with no forge link.
pub fn local_merge_commands(repo: &str, base: &str, branch: &str) -> Vec<String> {
    vec![
        format!("cd {}", shell_quote(repo)),
        format!("git switch {}", shell_quote(base)),
        format!("git merge --no-ff {}", shell_quote(branch)),
    ]
}

/// Merges execution `task_id` of a spec whose project has a forge link: push, then find or
/// open the pull request; the finished `merges` row (`state` `opened`, `pr_url` set). A merge
/// already `opened` is answered as it is.
///
/// Errors: [`MergeError::NotFound`]; [`MergeError::Refused`] when the execution is not
/// completed, came from no spec, or its project has no forge link (with the local git
/// commands); [`MergeError::Push`]; [`MergeError::Forge`]. The row keeps the last error.
pub async fn merge(execs: &Executions, forges: &Forges, task_id: &str, actor: &str) -> Result<MergeRow, MergeError> {
    let _one_at_a_time = forges.merging.lock().await;
    let store = execs.store();
    // One merge of an execution at a time across replicas too (PostgreSQL): the second finds
    // the first's `opened` row instead of opening a pull request again.
    let cluster = store.cluster_lock(&format!("merge:{task_id}")).await.map_err(anyhow::Error::from)?;
    let merged = merge_locked(execs, forges, task_id, actor).await;
    cluster.done().await;
    merged
}

async fn merge_locked(execs: &Executions, forges: &Forges, task_id: &str, actor: &str) -> Result<MergeRow, MergeError> {
    let store = execs.store();
    let Some(state) = execs.load(task_id).await? else {
        return Err(MergeError::NotFound(format!("no execution with task id {task_id}")));
    };
    if state.status != ExecutionStatus::Complete {
        return Err(MergeError::Refused(format!(
            "execution {task_id} is {}: only a completed execution is merged",
            state.status.as_str()
        )));
    }
    let spec = store.spec_of_execution(task_id).await.map_err(anyhow::Error::from)?;
    let Some(spec) = spec else {
        return Err(MergeError::Refused(format!("execution {task_id} was not fired from a spec: it has no project")));
    };
    let project = store
        .project(&spec.project)
        .await
        .map_err(anyhow::Error::from)?
        .ok_or_else(|| MergeError::NotFound(format!("no project {}", spec.project)))?;
    if crate::runtime::remote::active(store, &project) {
        // This replica's clone gets the branch as the remote holds it (another replica may
        // have driven the execution, or finished it after this one was fenced out).
        crate::runtime::remote::for_merge(execs.data(), store, &project, task_id).await?;
    }
    let list = changelist(execs, &state).await?;
    let base = base_branch(&project).await?;
    if project.forge_repo.trim().is_empty() {
        let commands = local_merge_commands(&list.repo.display().to_string(), &base, &list.branch).join(" && ");
        return Err(MergeError::Refused(format!(
            "project {} has no forge link (forge_repo): merge locally with `{commands}`",
            project.name
        )));
    }
    let repo_ref = RepoRef::parse(&project.forge_repo)?;
    if let Some(done) = store.merge(task_id).await.map_err(anyhow::Error::from)? {
        if done.state == "opened" && !done.pr_url.is_empty() {
            return Ok(done);
        }
    }
    let mut row = MergeRow {
        task_id: task_id.to_string(),
        spec_id: Some(spec.spec_id),
        forge_repo: project.forge_repo.clone(),
        branch: list.branch.clone(),
        base_branch: base.clone(),
        state: "pushing".into(),
        pushed_sha: String::new(),
        pr_number: None,
        pr_url: String::new(),
        error: String::new(),
        updated_at: clock::now_rfc3339(),
    };
    store.put_merge(&row).await.map_err(anyhow::Error::from)?;
    if let Err(e) = finish(execs, forges, &state, &spec, &list, &repo_ref, &mut row).await {
        row.error = e.to_string();
        row.updated_at = clock::now_rfc3339();
        store.put_merge(&row).await.map_err(anyhow::Error::from)?;
        return Err(e);
    }
    let note = format!("pull request {} for {} by {actor}", row.pr_url, row.branch);
    store
        .note_spec_event(spec.spec_id, "pr_opened", actor, &note, &row.updated_at)
        .await
        .map_err(anyhow::Error::from)?;
    Ok(row)
}

/// The pull request's target: the project's default branch, else the repository's current
/// branch.
///
/// Errors: the repository cannot be opened, or its HEAD is detached ([`MergeError::Refused`]).
pub async fn base_branch(project: &ProjectRow) -> Result<String, MergeError> {
    if !project.default_branch.trim().is_empty() {
        return Ok(project.default_branch.trim().to_string());
    }
    let path = project.repo_path.clone();
    let (branch, _) = blocking(move || GitRepo::open(&path).and_then(|r| r.head_branch()))
        .await?
        .map_err(|e| MergeError::Refused(format!("the project's repository: {e}")))?;
    branch.ok_or_else(|| {
        MergeError::Refused(format!(
            "project {}'s repository has a detached HEAD: set the project's default_branch",
            project.name
        ))
    })
}

async fn finish(
    execs: &Executions,
    forges: &Forges,
    state: &ExecutionState,
    spec: &SpecRow,
    list: &Changelist,
    repo_ref: &RepoRef,
    row: &mut MergeRow,
) -> Result<(), MergeError> {
    let store = execs.store();
    // The changelist already read the run's repository and branch.
    let (repo, branch) = (list.repo.clone(), row.branch.clone());
    let pushed = blocking(move || GitRepo::open(&repo).and_then(|r| r.push_branch(REMOTE, &branch))).await?;
    row.pushed_sha = pushed.map_err(|e| MergeError::Push {
        branch: row.branch.clone(),
        remote: REMOTE.into(),
        message: e.to_string(),
    })?;
    row.state = "pushed".into();
    row.error.clear();
    row.updated_at = clock::now_rfc3339();
    store.put_merge(row).await.map_err(anyhow::Error::from)?;

    let title = format!("{} (spec {})", spec.title, spec.spec_id);
    let body = pr_body(spec, state, &list.commits);
    let pull = NewPull { head: &row.branch, base: &row.base_branch, title: &title, body: &body };
    let (number, url) = match repo_ref {
        RepoRef::GitHub { owner, repo } => {
            let gh = forges.github();
            let found = gh.find_pull(owner, repo, &row.branch).await?;
            let pr = match found {
                Some(pr) => pr,
                None => match gh.create_pull(owner, repo, &pull).await {
                    Ok(pr) => pr,
                    // Another merge opened it meanwhile: link that one.
                    Err(e @ ForgeError::Validation { .. }) => gh.find_pull(owner, repo, &row.branch).await?.ok_or(e)?,
                    Err(e) => return Err(e.into()),
                },
            };
            (pr.number, pr.url)
        }
        RepoRef::Ado { org, project, repository } => {
            let ado = forges.ado();
            let pr = match ado.find_pull(org, project, repository, &row.branch).await? {
                Some(pr) => pr,
                None => ado.create_pull(org, project, repository, &pull).await?,
            };
            (pr.id, pr.url)
        }
    };
    row.pr_number = i64::try_from(number).ok();
    row.pr_url = url;
    row.state = "opened".into();
    row.updated_at = clock::now_rfc3339();
    store.put_merge(row).await.map_err(anyhow::Error::from)?;
    Ok(())
}

/// The pull request body (markdown, at most [`MAX_BODY_CHARS`]): the spec and its source, the
/// plan (phases, steps, agents), gate results, approvals (who, when, decision), spend against
/// the forecast's expected cost, and the commits by step.
pub fn pr_body(spec: &SpecRow, state: &ExecutionState, commits: &[ChangeCommit]) -> String {
    let mut b = String::new();
    let _ = writeln!(b, "Opened by Baton for spec {} — **{}**.", spec.spec_id, one_line(&spec.title));
    if !spec.source_url.is_empty() {
        let _ = writeln!(b, "\nSource: {}", spec.source_url);
    }
    let _ = writeln!(b, "\nExecution `{}`.\n\n## Plan\n", state.task_id);
    for phase in &state.plan.phases {
        let _ = writeln!(b, "**Phase {}: {}**\n", phase.phase_id, one_line(&phase.name));
        for step in &phase.steps {
            let status = state.step_results.get(&step.step_id).map(|r| r.status.as_str()).unwrap_or("not run");
            let _ = writeln!(
                b,
                "- {} `{}` — {} ({status})",
                step.step_id,
                step.agent_name,
                one_line(&step.task_description)
            );
            for id in crate::engine::team::unit_ids(step) {
                let status = state.step_results.get(&id).map(|r| r.status.as_str()).unwrap_or("not run");
                if let Some(member) = crate::engine::team::work_step(state, &id) {
                    let task = one_line(member.task_description.lines().next().unwrap_or(""));
                    let _ = writeln!(b, "  - {id} `{}` — {task} ({status})", member.agent_name);
                }
            }
        }
        b.push('\n');
    }
    b.push_str("## Gates\n\n");
    if state.gate_results.is_empty() {
        b.push_str("No gates ran.\n");
    }
    for g in &state.gate_results {
        let verdict = match &g.skipped {
            Some(reason) => format!("skipped ({reason}; nothing was checked)"),
            None => g.outcome().as_str().to_string(),
        };
        let exit = g.exit_code.map(|c| format!(", exit {c}")).unwrap_or_default();
        let _ = writeln!(
            b,
            "- phase {} {}: **{verdict}** (`{}`{exit}, attempt {}, {})",
            g.phase_id,
            g.gate_type,
            one_line(&g.command),
            g.attempt,
            g.checked_at
        );
    }
    b.push_str("\n## Approvals\n\n");
    if state.approval_results.is_empty() {
        b.push_str("No approvals were needed.\n");
    }
    for a in &state.approval_results {
        let feedback =
            if a.feedback.trim().is_empty() { String::new() } else { format!(": {}", one_line(&a.feedback)) };
        let _ = writeln!(
            b,
            "- phase {}: **{}** by {} at {}{feedback}",
            a.phase_id,
            a.result.as_str(),
            a.actor,
            a.decided_at
        );
    }
    let forecast = spec
        .forecast_json
        .as_deref()
        .and_then(|f| serde_json::from_str::<serde_json::Value>(f).ok())
        .and_then(|f| f.get("mid_usd").and_then(serde_json::Value::as_f64));
    let spent = state.counters.spend_usd;
    let _ = match forecast {
        Some(mid) => writeln!(b, "\n## Spend\n\n${spent:.2} spent against a forecast of ${mid:.2}."),
        None => writeln!(b, "\n## Spend\n\n${spent:.2} spent (no forecast)."),
    };
    b.push_str("\n## Commits\n\n");
    if commits.is_empty() {
        b.push_str("No commits.\n");
    }
    for c in commits {
        let short = c.sha.get(..12).unwrap_or(&c.sha);
        let by = match (c.step_id.as_str(), c.agent_name.as_str()) {
            ("", _) => String::new(),
            (step, "") => format!(" (step {step})"),
            (step, agent) => format!(" (step {step}, {agent})"),
        };
        let _ = writeln!(b, "- `{short}`{by}: {}", one_line(&c.summary));
    }
    if b.chars().count() > MAX_BODY_CHARS {
        b = b.chars().take(MAX_BODY_CHARS - 40).collect();
        b.push_str("\n\n… (cut; the board has the rest)\n");
    }
    b
}

/// `s` on one line (newlines and controls as spaces), at most 300 characters.
fn one_line(s: &str) -> String {
    let t: String = s.chars().map(|c| if c.is_control() { ' ' } else { c }).take(300).collect();
    t.trim().to_string()
}

/// Whether `task_id`'s execution may be merged through a forge (for the Merge button):
/// completed, fired from a spec whose project has a forge link.
pub fn mergeable(state: &ExecutionState, project: Option<&ProjectRow>) -> bool {
    state.status == ExecutionStatus::Complete && project.is_some_and(|p| !p.forge_repo.trim().is_empty())
}

impl From<BadInput> for MergeError {
    fn from(e: BadInput) -> MergeError {
        MergeError::Refused(e.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_merge_commands_quote_what_a_shell_would_split() {
        assert_eq!(
            local_merge_commands("/srv/my repo", "main", "baton/t-1"),
            ["cd '/srv/my repo'", "git switch main", "git merge --no-ff baton/t-1"]
        );
    }

    #[test]
    fn the_pr_body_lists_a_team_steps_members_under_it() {
        let plan = crate::model::plan::MachinePlan::from_json(
            r#"{"task_id":"t-1","task_summary":"s","phases":[{"phase_id":1,"name":"Build","steps":[
                {"step_id":"1.1","agent_name":"lead","task_description":"Together.","team":[
                    {"member_id":"1.1.a","agent_name":"alpha","task_description":"Part a."},
                    {"member_id":"1.1.b","agent_name":"beta","task_description":"Part b."}]}]}]}"#,
        )
        .unwrap();
        let state = crate::engine::start(plan, "2026-01-01T00:00:00+00:00").unwrap();
        let text = |s: &str| s.to_string();
        let spec = SpecRow {
            spec_id: 1,
            project: text("p"),
            title: text("Title"),
            body: String::new(),
            source: text("board"),
            source_url: String::new(),
            priority: 1,
            status: text("executing"),
            risk: String::new(),
            plan_json: None,
            forecast_json: None,
            task_id: Some(text("t-1")),
            status_reason: String::new(),
            created_by: text("me"),
            created_at: String::new(),
            updated_at: String::new(),
            source_meta: text("{}"),
            budget_usd: None,
        };
        let body = pr_body(&spec, &state, &[]);
        let members = "- 1.1 `lead` — Together. (not run)\n  - 1.1.a `alpha` — Part a. (not run)\n  - 1.1.b `beta`";
        assert!(body.contains(members), "{body}");
    }
}
