//! Git across machines (issue 17.3): when the store is PostgreSQL and an execution's project
//! has a remote (`repo_url`), every replica works in its own clone of that remote under its
//! data dir (`repos/<project>`, made on first use and fetched before an execution starts or
//! resumes), and the feature branch `baton/<task_id>` is pushed to the remote after each
//! consolidation, so another machine can take the execution over from the remote alone.
//!
//! The rules live here: when a remote applies ([`active`]), which clone ([`replica_clone`]),
//! what a start does with the local and remote branch ([`sync_branch`]), what a replica that
//! never drove an execution reads of its branch ([`remote_branch`], with the base recorded in
//! the database) and how it adopts it ([`adopt`]), what a merge starts from ([`for_merge`])
//! and how a push fails ([`publish`], never forced). The driver and the spec queue call them; git itself is `crate::git`. With SQLite,
//! or a project without `repo_url`, none of this applies and nothing changes.

use anyhow::Context as _;

use crate::git::GitRepo;
use crate::runtime::blocking;
use crate::runtime::config::DataDir;
use crate::runtime::executions::Executions;
use crate::runtime::runs::RunMeta;
use crate::store::{ProjectRow, Store};

/// The name of the project's remote in a replica's clone (its `origin`, where `git clone`
/// puts it); the driver pushes feature branches there.
pub const REMOTE: &str = "origin";

/// Whether executions of `project` work through its remote on this store: the store is
/// PostgreSQL (replicas may run on other machines) and the project has a `repo_url`.
pub fn active(store: &Store, project: &ProjectRow) -> bool {
    store.backend_name() == "postgres" && !project.repo_url.trim().is_empty()
}

/// The project whose remote execution `task_id` works through ([`active`]), `None` when none
/// does (SQLite, a headless run, a project without `repo_url`).
///
/// Errors: the database.
pub async fn remote_project(execs: &Executions, task_id: &str) -> anyhow::Result<Option<ProjectRow>> {
    let store = execs.store();
    if store.backend_name() != "postgres" {
        return Ok(None);
    }
    let Some(spec) = store.spec_of_execution(task_id).await? else { return Ok(None) };
    Ok(store.project(&spec.project).await?.filter(|p| active(store, p)))
}

/// This replica's clone of `project`'s remote (`<data>/repos/<project>`), cloned when it is
/// missing, else fetched (its `origin` pointed at `repo_url` first if the project's remote
/// changed). Returns the opened clone.
///
/// Errors: git's message (unreachable remote, no access, not a repository), naming the remote.
pub async fn replica_clone(data: &DataDir, project: &ProjectRow) -> anyhow::Result<GitRepo> {
    clone_of(data, &project.name, &project.repo_url).await
}

/// [`replica_clone`] of the remote `repo_url` of project `name` (registered or being
/// registered).
///
/// Errors: as [`replica_clone`].
pub async fn clone_of(data: &DataDir, name: &str, repo_url: &str) -> anyhow::Result<GitRepo> {
    let dir = data.repo_clone(name);
    let url = repo_url.trim().to_string();
    let (shown, name) = (url.clone(), name.to_string());
    blocking(move || -> anyhow::Result<GitRepo> {
        if !dir.join(".git").exists() {
            // Cloned beside its place, then renamed: two executions starting at once never
            // see a half-made clone, and the loser of the rename uses the winner's. The
            // temporary directory is this call's own (`tempfile` makes a fresh name), so two
            // clones at once in one server never share it (they did, and the second `git
            // clone` failed on the first one's directory: seen in
            // `replicas::takeover_through_claims_…`); a failed clone or a lost rename leaves
            // nothing behind (the directory is removed when `tmp` drops).
            let parent = dir.parent().context("a clone's directory has a parent")?;
            std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
            let tmp = tempfile::Builder::new()
                .prefix(&format!(".{name}.clone-"))
                .tempdir_in(parent)
                .with_context(|| format!("creating a temporary directory in {}", parent.display()))?;
            GitRepo::clone_from(&url, tmp.path())?;
            let _ = std::fs::rename(tmp.path(), &dir);
            return Ok(GitRepo::open(&dir)?);
        }
        let repo = GitRepo::open(&dir)?;
        if repo.remote_url(REMOTE)?.as_deref() != Some(url.as_str()) {
            repo.set_remote_url(REMOTE, &url)?;
        }
        repo.fetch(REMOTE)?;
        Ok(repo)
    })
    .await?
    .with_context(|| format!("the project's remote {shown}"))
}

/// Brings the clone's feature branch `branch` in line with the remote (fetched just before)
/// when a run starts or resumes, and returns its tip:
///
/// - only the remote has it (another replica drove the execution): the local branch is made
///   at the remote's tip;
/// - only the local clone has it, or it is ahead of the remote (a push that failed): it is
///   pushed, never forced;
/// - the remote is ahead, or the two diverged: the local branch moves to the remote's tip.
///   Local commits the remote lacks were never recorded (a step's commit is pushed before its
///   result is journaled), and each is still under its attempt ref, so the run harvests or
///   re-runs that step onto the remote's branch.
///
/// Errors: neither has the branch; a push refused ([`PushRefused`]); git.
pub async fn sync_branch(repo: &GitRepo, branch: &str) -> anyhow::Result<String> {
    let (r, b) = (repo.clone(), branch.to_string());
    let (local, remote) =
        blocking(move || -> anyhow::Result<_> { Ok((r.branch_tip(&b)?, r.remote_tip(REMOTE, &b)?)) }).await??;
    match (local, remote) {
        (None, None) => {
            anyhow::bail!("feature branch {branch} is neither in {} nor on its remote", repo.root().display())
        }
        (Some(local), None) => {
            publish(repo, branch).await?;
            Ok(local)
        }
        (Some(local), Some(remote)) if local == remote => Ok(local),
        (Some(local), Some(remote)) => {
            let (r, l, rt) = (repo.clone(), local.clone(), remote.clone());
            if blocking(move || r.is_ancestor(&rt, &l)).await?? {
                publish(repo, branch).await?;
                return Ok(local);
            }
            errln!(
                "{branch}: the remote holds {} and this replica {}; taking the remote's (work it lacks was never recorded)",
                short(&remote),
                short(&local)
            );
            set_branch(repo, branch, &remote).await?;
            Ok(remote)
        }
        (None, Some(remote)) => {
            set_branch(repo, branch, &remote).await?;
            Ok(remote)
        }
    }
}

async fn set_branch(repo: &GitRepo, branch: &str, sha: &str) -> anyhow::Result<()> {
    let (r, full, s) = (repo.clone(), format!("refs/heads/{branch}"), sha.to_string());
    blocking(move || r.set_ref(&full, &s)).await??;
    Ok(())
}

fn short(sha: &str) -> &str {
    sha.get(..10).unwrap_or(sha)
}

/// A push of the feature branch that the remote refused or that could not reach it. Nothing
/// is lost: the commits stay on the local branch and under their attempt refs.
#[derive(Debug, thiserror::Error)]
#[error("pushing {branch} to the project's remote failed{}: {message}",
    if *.rejected { " (rejected: the remote's branch moved elsewhere, and Baton never force-pushes)" } else { "" })]
pub struct PushRefused {
    /// The branch.
    pub branch: String,
    /// The remote refused a non-fast-forward update (another writer moved its branch).
    pub rejected: bool,
    /// Git's message.
    pub message: String,
}

/// Pushes `branch` to the clone's `origin` (the project's remote), never forced; returns the
/// commit pushed. Pushing what the remote has already succeeds.
///
/// Errors: [`PushRefused`] (rejected, or unreachable), inside `anyhow`.
pub async fn publish(repo: &GitRepo, branch: &str) -> anyhow::Result<String> {
    let (r, b) = (repo.clone(), branch.to_string());
    match blocking(move || r.push_branch(REMOTE, &b)).await? {
        Ok(sha) => Ok(sha),
        Err(e) => {
            let message = e.to_string();
            let rejected = message.contains("[rejected]") || message.contains("non-fast-forward");
            Err(PushRefused { branch: branch.to_string(), rejected, message }.into())
        }
    }
}

/// An execution's feature branch as the project's remote holds it, seen from this replica's
/// clone (fetched): what a replica that never drove the execution reads (the changelist) or
/// takes the execution over from ([`adopt`]).
#[derive(Debug, Clone)]
pub struct RemoteBranch {
    /// This replica's clone of the project's remote.
    pub repo: GitRepo,
    /// The feature branch (`baton/<task_id>`).
    pub branch: String,
    /// The branch's tip on the remote (`refs/remotes/origin/<branch>` in the clone).
    pub tip: String,
    /// Where the branch started: the base recorded when the execution was created
    /// ([`Store::record_base`]), else (an execution older than that record) the branch's fork
    /// point from the project's default branch.
    pub base_sha: String,
}

/// Fetches this replica's clone of `project`'s remote and reads `task_id`'s feature branch
/// there ([`RemoteBranch`]). Writes nothing but the clone's remote-tracking refs.
///
/// Errors: the remote has no feature branch (the execution was never pushed); git; the
/// database.
pub async fn remote_branch(
    data: &DataDir,
    store: &Store,
    project: &ProjectRow,
    task_id: &str,
) -> anyhow::Result<RemoteBranch> {
    let recorded = store.recorded_base(task_id).await?;
    let branch = recorded.as_ref().map_or_else(|| crate::runtime::runs::feature_branch(task_id), |r| r.branch.clone());
    let repo = replica_clone(data, project).await?;
    let (r, b) = (repo.clone(), branch.clone());
    let Some(tip) = blocking(move || r.remote_tip(REMOTE, &b)).await?? else {
        anyhow::bail!(
            "execution {task_id}: its feature branch {branch} is not on the project's remote {}",
            project.repo_url
        );
    };
    let base_sha = match recorded {
        Some(r) => r.base_sha,
        None => {
            let (r, default, t) =
                (repo.clone(), format!("refs/remotes/{REMOTE}/{}", project.default_branch), tip.clone());
            blocking(move || r.merge_base(&t, &default).ok().flatten()).await?.unwrap_or_else(|| tip.clone())
        }
    };
    Ok(RemoteBranch { repo, branch, tip, base_sha })
}

/// A replica that never drove `task_id` takes it over: its clone of the project's remote
/// (fetched) gets the feature branch at the remote's tip, and `execution.json` is written for
/// it: the clone, the execution's base ([`remote_branch`]: the recorded one), the project's
/// agent profile.
///
/// Errors: the remote has no feature branch (the execution was never pushed); git; the file;
/// the database.
pub async fn adopt(data: &DataDir, store: &Store, project: &ProjectRow, task_id: &str) -> anyhow::Result<RunMeta> {
    let RemoteBranch { repo, branch, tip, base_sha } = remote_branch(data, store, project, task_id)
        .await
        .with_context(|| format!("execution {task_id} cannot be taken over"))?;
    set_branch(&repo, &branch, &tip).await?;
    errln!("taking execution {task_id} over from the project's remote ({branch} at {})", short(&tip));
    let profile = if project.agent_profile.is_empty() { "claude".to_string() } else { project.agent_profile.clone() };
    let meta = RunMeta { repo: repo.root().to_path_buf(), base_sha, branch, profile };
    crate::runtime::runs::write_meta(data, task_id, &meta)?;
    Ok(meta)
}

/// Before this replica merges `task_id` (complete) of `project` (with a remote): its clone is
/// fetched and its feature branch set to the remote's, which holds every recorded step's
/// commit (another replica may have finished the execution, or this one was fenced out
/// before the end); a replica that never drove the execution adopts it first ([`adopt`]). An
/// execution that works outside this replica's clone (a note said so when it started) is
/// left as it is.
///
/// Errors: the remote has no feature branch; git; the file.
pub async fn for_merge(data: &DataDir, store: &Store, project: &ProjectRow, task_id: &str) -> anyhow::Result<()> {
    let Some(meta) = crate::runtime::runs::read_meta(data, task_id)? else {
        adopt(data, store, project, task_id).await?;
        return Ok(());
    };
    let repo = replica_clone(data, project).await?;
    if meta.repo != repo.root() {
        return Ok(());
    }
    let (r, b) = (repo.clone(), meta.branch.clone());
    if let Some(tip) = blocking(move || r.remote_tip(REMOTE, &b)).await?? {
        set_branch(&repo, &meta.branch, &tip).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A git repository with one commit at `dir`, made with the `git` CLI a user has.
    fn repository_with_a_commit(dir: &std::path::Path) {
        let git = |args: &[&str]| {
            let out = std::process::Command::new("git").arg("-C").arg(dir).args(args).output().expect("git runs");
            assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        };
        std::fs::create_dir_all(dir).expect("creating the repository");
        git(&["init", "-q", "-b", "main"]);
        std::fs::write(dir.join("README"), "hi\n").expect("writing a file");
        git(&["add", "README"]);
        git(&["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first"]);
    }

    /// Two executions of one project starting at once in one process both get the clone
    /// (their temporary clones once shared a name, and the second `git clone` failed).
    #[tokio::test]
    async fn two_clones_of_one_project_at_once_in_one_process_both_succeed() {
        let dir = tempfile::TempDir::new().expect("a temp dir");
        let remote = dir.path().join("remote");
        repository_with_a_commit(&remote);
        let data = DataDir::open(&dir.path().join("data")).expect("a data dir");
        let url = remote.display().to_string();
        for round in 0..5 {
            let name = format!("lantern-{round}");
            let (a, b) = tokio::join!(clone_of(&data, &name, &url), clone_of(&data, &name, &url));
            a.expect("the first clone");
            b.expect("the second clone");
            assert!(data.repo_clone(&name).join(".git").exists());
        }
    }

    /// A clone that fails leaves no half-made temporary directory beside the clones.
    #[tokio::test]
    async fn a_failed_clone_leaves_nothing_behind() {
        let dir = tempfile::TempDir::new().expect("a temp dir");
        let data = DataDir::open(&dir.path().join("data")).expect("a data dir");
        let missing = dir.path().join("no-such-remote").display().to_string();
        clone_of(&data, "ghost", &missing).await.expect_err("cloning a missing remote fails");
        let parent = data.repo_clone("ghost").parent().expect("a parent").to_path_buf();
        let left: Vec<_> =
            std::fs::read_dir(&parent).expect("the clones' directory").flatten().map(|e| e.file_name()).collect();
        assert!(left.is_empty(), "{left:?}");
    }
}
