//! Git: feature branches, per-attempt worktrees, attempt commits and in-memory cherry-picks.
//!
//! This module owns every interaction with git. It reads the object graph and refs with
//! `git2`, builds attempt commits and cherry-picks in memory with `git2`, and adds, removes
//! and stages linked worktrees through the `git` command line (argv, never a shell), because
//! libgit2 working-tree mutations have lost users' files. It copies the worktree environment
//! (the checkout's `.worktreeinclude` files git ignores) into new worktrees and keeps it out
//! of attempt commits.
//!
//! Invariant: it never modifies the user's own checkout. There is no checkout, no index write
//! and no HEAD move in the main working tree; the only refs it moves are the ones a caller
//! names, and it refuses to move a branch that is checked out in any working tree.
//!
//! Every method blocks (disk IO, child processes): the async shell calls it through
//! `spawn_blocking`. [`GitRepo`](crate::git::GitRepo) holds only paths, so it is `Clone + Send + Sync` and cheap to
//! move into a blocking closure; each call opens the repository afresh.

mod cli;
mod include;
mod paths;
mod remote;
mod worktree;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

use git2::{Oid, Repository, Signature};
use serde::{Deserialize, Serialize};

pub use include::{check_include_patterns, EnvCopy, WORKTREE_INCLUDE_FILE};
pub use paths::{check_paths, PathViolation, ViolationReason};
pub use remote::{check_remote_url, MAX_REMOTE_URL_BYTES};

/// Committer name on every commit Baton writes.
pub const COMMITTER_NAME: &str = "Baton";
/// Committer email on every commit Baton writes.
pub const COMMITTER_EMAIL: &str = "baton@baton.invalid";

/// Where Baton keeps its attempt refs: [`attempt_ref`] names an attempt's starting point, then
/// its commit, until `baton gc` deletes [`attempt_refs_of`] its execution.
pub const ATTEMPT_REFS: &str = "refs/baton/";

/// Where Baton keeps its feature branches (`baton/<task_id>`): each is written only by its
/// execution's lease holder, as the attempt refs are.
pub const FEATURE_BRANCHES: &str = "refs/heads/baton/";

/// The ref of attempt `attempt` of step `step_id` of execution `task_id`:
/// `refs/baton/<task_id>/<step_id>/<attempt>`.
pub fn attempt_ref(task_id: &str, step_id: &str, attempt: u32) -> String {
    format!("{ATTEMPT_REFS}{task_id}/{step_id}/{attempt}")
}

/// The prefix every attempt ref of execution `task_id` starts with: `refs/baton/<task_id>/`.
pub fn attempt_refs_of(task_id: &str) -> String {
    format!("{ATTEMPT_REFS}{task_id}/")
}

/// Errors from git operations; each message is one line naming what failed and where.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// `path` is not inside a git repository with a working tree (bare repositories are refused).
    #[error("not a git repository with a working tree: {}", path.display())]
    NotARepository {
        /// The path that was opened.
        path: PathBuf,
    },
    /// A revision, branch or ref that does not name a commit in this repository.
    #[error("unknown revision `{rev}`")]
    UnknownRevision {
        /// The revision as the caller spelled it.
        rev: String,
    },
    /// A git command-line call exited with a failure.
    #[error("`{cmd}` failed: {stderr}")]
    Command {
        /// The command line and the directory it ran in.
        cmd: String,
        /// The command's stderr, trimmed and joined onto one line.
        stderr: String,
    },
    /// A ref or branch name that git would reject.
    #[error("invalid ref name `{name}`")]
    InvalidRefName {
        /// The full ref name, e.g. `refs/heads/baton/x`.
        name: String,
    },
    /// `path` is not a linked worktree of this repository (the main checkout never is).
    #[error("not a linked worktree of {}: {}", repo.display(), path.display())]
    NotAWorktree {
        /// The path given by the caller.
        path: PathBuf,
        /// The main repository's working-tree root.
        repo: PathBuf,
    },
    /// The worktree path exists, is not empty and is not a registered worktree.
    #[error("worktree path exists and is not a registered worktree: {}", path.display())]
    WorktreePathOccupied {
        /// The occupied path.
        path: PathBuf,
    },
    /// Refused to move a branch that is checked out in a working tree.
    #[error("branch `{branch}` is checked out in {}; refusing to move it", worktree.display())]
    BranchCheckedOut {
        /// The short branch name.
        branch: String,
        /// The working tree that has it checked out.
        worktree: PathBuf,
    },
    /// A compare-and-swap ref update lost a race: the ref no longer points at `expected`.
    #[error("ref `{refname}` moved concurrently (expected {expected})")]
    RefChanged {
        /// The full ref name.
        refname: String,
        /// The tip the update expected to replace.
        expected: String,
    },
    /// Filesystem or process-spawn failure.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, and on which path.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Any other libgit2 failure.
    #[error("git: {0}")]
    Git(#[from] git2::Error),
}

/// The author of an attempt commit; the committer is always `Baton <baton@baton.invalid>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitIdentity {
    /// Author name, e.g. `claude-code`.
    pub author_name: String,
    /// Author email.
    pub author_email: String,
}

/// The one commit made from an attempt's worktree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptCommit {
    /// 40-hex sha of the new commit (unreferenced until the caller points a ref at it).
    pub sha: String,
    /// Repository-relative paths added, modified or deleted relative to the base, sorted,
    /// `/`-separated, no rename detection (a rename lists both paths).
    pub files_changed: Vec<String>,
    /// How many of those the commit deletes (files of the base tree absent from its tree).
    pub files_deleted: usize,
    /// Files (blobs and submodule links, at any depth) tracked in the base commit's tree.
    pub base_files: usize,
}

/// The result of [`GitRepo::cherry_pick_onto`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PickOutcome {
    /// A new commit was written and the branch now points at it.
    Applied {
        /// 40-hex sha of the new branch tip.
        new_tip: String,
    },
    /// The patch is already on the branch (the picked tree equals the tip's tree); branch unmoved.
    AlreadyApplied,
    /// The patch does not apply; the branch is unmoved.
    Conflict {
        /// Repository-relative conflicting paths, sorted.
        paths: Vec<String>,
    },
}

/// One commit as printed by `git log`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitInfo {
    /// 40-hex sha.
    pub sha: String,
    /// First line of the message.
    pub summary: String,
    /// Author name.
    pub author_name: String,
    /// Author email.
    pub author_email: String,
    /// The whole raw message, trailers included.
    pub message: String,
}

/// A handle on one (non-bare) repository: its canonical working-tree root and common git dir.
///
/// Opened from a linked worktree, it designates the main repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitRepo {
    root: PathBuf,
    git_dir: PathBuf,
}

impl GitRepo {
    /// Opens the repository containing `path` (searching upwards).
    ///
    /// If `path` is inside a linked worktree, the result is the main repository.
    /// Errors: [`GitError::NotARepository`] if none is found or it is bare.
    pub fn open(path: impl AsRef<Path>) -> Result<GitRepo, GitError> {
        let path = path.as_ref();
        let not_repo = || GitError::NotARepository { path: path.to_path_buf() };
        let found = Repository::discover(path).map_err(|_| not_repo())?;
        let main =
            if found.is_worktree() { Repository::open(found.commondir()).map_err(|_| not_repo())? } else { found };
        let workdir = main.workdir().ok_or_else(not_repo)?;
        let root = canonical(workdir)?;
        let git_dir = canonical(main.commondir())?;
        Ok(GitRepo { root, git_dir })
    }

    /// The canonical working-tree root of the main repository.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The canonical common git directory (usually `<root>/.git`).
    pub fn git_dir(&self) -> &Path {
        &self.git_dir
    }

    pub(super) fn repo(&self) -> Result<Repository, GitError> {
        Ok(Repository::open(&self.git_dir)?)
    }

    /// Resolves `rev` (sha, branch, `HEAD~2`, full ref…) to the 40-hex sha of a commit.
    ///
    /// Errors: [`GitError::UnknownRevision`] if it names nothing or a non-commit.
    pub fn resolve(&self, rev: &str) -> Result<String, GitError> {
        let repo = self.repo()?;
        Ok(resolve_oid(&repo, rev)?.to_string())
    }

    /// Whether the main checkout has uncommitted changes to tracked files (untracked files
    /// are ignored). Baton never includes them: the feature branch starts at a commit.
    pub fn has_uncommitted_changes(&self) -> Result<bool, GitError> {
        let repo = self.repo()?;
        let mut options = git2::StatusOptions::new();
        options.include_untracked(false).include_ignored(false);
        let dirty = !repo.statuses(Some(&mut options))?.is_empty();
        Ok(dirty)
    }

    /// The main checkout's current branch (short name, `None` if detached) and HEAD sha.
    ///
    /// Errors: [`GitError::UnknownRevision`] (`HEAD`) on an unborn branch.
    pub fn head_branch(&self) -> Result<(Option<String>, String), GitError> {
        let repo = self.repo()?;
        let head = repo.head().map_err(|_| unknown("HEAD"))?;
        let sha = head.peel_to_commit().map_err(|_| unknown("HEAD"))?.id().to_string();
        let branch = if head.is_branch() {
            head.name().and_then(|n| n.strip_prefix("refs/heads/")).map(str::to_owned)
        } else {
            None
        };
        Ok((branch, sha))
    }

    /// Pushes local branch `branch` to the same name on remote `remote` with the `git` CLI (so
    /// the user's credential helpers and ssh config apply; never a terminal prompt), without
    /// force: a remote branch that moved elsewhere is an error. Pushing a commit the remote
    /// already has succeeds. Returns the commit pushed.
    ///
    /// Errors: [`GitError::InvalidRefName`] for a remote name that is empty or starts with
    /// `-`; the branch does not exist ([`GitError::UnknownRevision`]); the push failed
    /// ([`GitError::Command`] with git's message: no such remote, rejected, unreachable).
    pub fn push_branch(&self, remote: &str, branch: &str) -> Result<String, GitError> {
        crate::crash::before_effect("git push branch");
        if remote.is_empty() || remote.starts_with('-') || remote.chars().any(char::is_control) {
            return Err(GitError::InvalidRefName { name: remote.to_string() });
        }
        let sha = self.branch_tip(branch)?.ok_or_else(|| GitError::UnknownRevision { rev: branch.to_string() })?;
        let spec = format!("refs/heads/{branch}:refs/heads/{branch}");
        cli::run_git(&self.root, None, None, ["push", "--porcelain", "--", remote, spec.as_str()])?;
        Ok(sha)
    }

    /// The sha `refs/heads/<name>` points at, or `None` if the branch does not exist.
    pub fn branch_tip(&self, name: &str) -> Result<Option<String>, GitError> {
        let repo = self.repo()?;
        let refname = branch_ref(name)?;
        ref_target(&repo, &refname).map(|o| o.map(|oid| oid.to_string()))
    }

    /// Creates `refs/heads/<name>` at `at_sha` unless it exists; returns the branch tip.
    ///
    /// An existing branch is never moved, so the returned tip may differ from `at_sha`.
    /// Errors: [`GitError::InvalidRefName`], [`GitError::UnknownRevision`] for `at_sha`.
    pub fn ensure_branch(&self, name: &str, at_sha: &str) -> Result<String, GitError> {
        crate::crash::before_effect("git ensure branch");
        let repo = self.repo()?;
        let refname = branch_ref(name)?;
        if let Some(tip) = ref_target(&repo, &refname)? {
            return Ok(tip.to_string());
        }
        let oid = resolve_oid(&repo, at_sha)?;
        match repo.reference(&refname, oid, false, "baton: create branch").map(|_| ()) {
            Ok(_) => Ok(oid.to_string()),
            // Lost a creation race: report whoever won.
            Err(e) if e.code() == git2::ErrorCode::Exists => {
                ref_target(&repo, &refname)?.map(|o| o.to_string()).ok_or(GitError::Git(e))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Points the full ref `full_ref` (e.g. `refs/baton/<task>/<step>/<attempt>`) at `sha`.
    ///
    /// Creates or overwrites. A stale `.lock` of an attempt ref or a feature branch (a driver
    /// killed mid-write; only the execution's lease holder writes those) is removed; any other
    /// lock is an error. Errors: [`GitError::InvalidRefName`] unless it starts with `refs/` and is
    /// valid; [`GitError::BranchCheckedOut`] for a checked-out branch.
    pub fn set_ref(&self, full_ref: &str, sha: &str) -> Result<(), GitError> {
        crate::crash::before_effect("git set ref");
        let repo = self.repo()?;
        check_full_ref(full_ref)?;
        let oid = resolve_oid(&repo, sha)?;
        if let Some(branch) = full_ref.strip_prefix("refs/heads/") {
            self.refuse_checked_out(branch)?;
        }
        self.write_own_ref(full_ref, || repo.reference(full_ref, oid, true, "baton: set ref").map(|_| ()))?;
        Ok(())
    }

    /// Runs `write` (one write of `full_ref`); when it fails because the ref is locked and the
    /// ref is one only the execution's lease holder (this caller) writes — an attempt ref
    /// ([`ATTEMPT_REFS`]) or a feature branch ([`FEATURE_BRANCHES`]) — the lock is a dead
    /// driver's (killed mid-write, seen under load after `kill -9`): removes it and writes
    /// again, once. Any other ref's lock is left alone and is an error.
    fn write_own_ref(&self, full_ref: &str, write: impl Fn() -> Result<(), git2::Error>) -> Result<(), GitError> {
        match write() {
            Err(e)
                if e.code() == git2::ErrorCode::Locked
                    && (full_ref.starts_with(ATTEMPT_REFS) || full_ref.starts_with(FEATURE_BRANCHES)) =>
            {
                let lock = self.git_dir.join(format!("{full_ref}.lock"));
                tracing::warn!("removing the stale ref lock {} a dead driver left", lock.display());
                std::fs::remove_file(&lock)
                    .map_err(|source| GitError::Io { context: format!("removing {}", lock.display()), source })?;
                Ok(write()?)
            }
            other => Ok(other?),
        }
    }

    /// Deletes the full ref `full_ref`; succeeds if it does not exist.
    pub fn delete_ref(&self, full_ref: &str) -> Result<(), GitError> {
        crate::crash::before_effect("git delete ref");
        let repo = self.repo()?;
        check_full_ref(full_ref)?;
        if let Some(branch) = full_ref.strip_prefix("refs/heads/") {
            self.refuse_checked_out(branch)?;
        }
        let deleted = repo.find_reference(full_ref).and_then(|mut r| r.delete());
        match deleted {
            Ok(()) => Ok(()),
            Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Deletes every ref under `prefix` (e.g. `refs/baton/<task_id>/`, the kept attempt refs
    /// of an execution) and returns how many. Never touches branches (`refs/heads/`).
    pub fn delete_refs_under(&self, prefix: &str) -> Result<usize, GitError> {
        crate::crash::before_effect("git delete refs under");
        if !prefix.starts_with("refs/") || prefix.starts_with("refs/heads/") || !prefix.ends_with('/') {
            return Err(GitError::InvalidRefName { name: prefix.to_owned() });
        }
        let repo = self.repo()?;
        let names: Vec<String> = repo
            .references_glob(&format!("{prefix}*"))?
            .filter_map(Result::ok)
            .filter_map(|r| r.name().map(str::to_owned))
            .collect();
        for name in &names {
            self.delete_ref(name)?;
        }
        Ok(names.len())
    }

    /// Cherry-picks `commit_sha` onto `refs/heads/<branch>` in memory and advances the branch.
    ///
    /// The new commit keeps the original author and message; the committer is Baton. The
    /// branch moves by compare-and-swap on the tip read at the start (a stale lock of a
    /// feature branch is removed first, as [`GitRepo::set_ref`] does). No working tree or
    /// on-disk index is touched. Errors: [`GitError::UnknownRevision`] for a missing branch or
    /// commit, [`GitError::BranchCheckedOut`], [`GitError::RefChanged`] if the branch moved
    /// meanwhile (retry), [`GitError::Git`] for a merge commit or a root commit.
    pub fn cherry_pick_onto(&self, branch: &str, commit_sha: &str) -> Result<PickOutcome, GitError> {
        crate::crash::before_effect("git cherry pick onto");
        let repo = self.repo()?;
        let refname = branch_ref(branch)?;
        let tip_oid = ref_target(&repo, &refname)?.ok_or_else(|| unknown(&refname))?;
        let tip = repo.find_commit(tip_oid)?;
        let pick = repo.find_commit(resolve_oid(&repo, commit_sha)?)?;

        let mut index = repo.cherrypick_commit(&pick, &tip, 0, None)?;
        if index.has_conflicts() {
            let mut paths = Vec::new();
            for conflict in index.conflicts()? {
                let conflict = conflict?;
                for entry in [conflict.ancestor, conflict.our, conflict.their].into_iter().flatten() {
                    paths.push(String::from_utf8_lossy(&entry.path).into_owned());
                }
            }
            paths.sort();
            paths.dedup();
            return Ok(PickOutcome::Conflict { paths });
        }
        let tree_oid = index.write_tree_to(&repo)?;
        if tree_oid == tip.tree_id() {
            return Ok(PickOutcome::AlreadyApplied);
        }
        self.refuse_checked_out(branch)?;
        let tree = repo.find_tree(tree_oid)?;
        let committer = baton_signature()?;
        let message = String::from_utf8_lossy(pick.message_raw_bytes());
        let new_oid = repo.commit(None, &pick.author(), &committer, &message, &tree, &[&tip])?;
        let log = format!("baton: cherry-pick {}", pick.id());
        let moved = self
            .write_own_ref(&refname, || repo.reference_matching(&refname, new_oid, true, tip_oid, &log).map(|_| ()));
        match moved {
            Ok(()) => Ok(PickOutcome::Applied { new_tip: new_oid.to_string() }),
            Err(GitError::Git(e)) if e.code() == git2::ErrorCode::Modified => {
                Err(GitError::RefChanged { refname, expected: tip_oid.to_string() })
            }
            Err(e) => Err(e),
        }
    }

    /// Paths that differ between the trees of `from_sha` and `to_sha` (any revisions), sorted.
    pub fn changed_files(&self, from_sha: &str, to_sha: &str) -> Result<Vec<String>, GitError> {
        let repo = self.repo()?;
        let from = repo.find_commit(resolve_oid(&repo, from_sha)?)?.tree()?;
        let to = repo.find_commit(resolve_oid(&repo, to_sha)?)?.tree()?;
        diff_paths(&repo, &from, &to)
    }

    /// Per-file line counts of the change from `from_sha` to `to_sha` (like `git diff
    /// --numstat`), sorted by path; binary files count 0 lines.
    pub fn diff_stats(&self, from_sha: &str, to_sha: &str) -> Result<Vec<FileStat>, GitError> {
        let repo = self.repo()?;
        let from = repo.find_commit(resolve_oid(&repo, from_sha)?)?.tree()?;
        let to = repo.find_commit(resolve_oid(&repo, to_sha)?)?.tree()?;
        let diff = repo.diff_tree_to_tree(Some(&from), Some(&to), None)?;
        let mut out = Vec::new();
        for i in 0..diff.deltas().len() {
            let Some(patch) = git2::Patch::from_diff(&diff, i)? else { continue };
            let delta = patch.delta();
            let path = delta.new_file().path_bytes().or_else(|| delta.old_file().path_bytes()).unwrap_or_default();
            let (_, added, removed) = patch.line_stats()?;
            out.push(FileStat { path: String::from_utf8_lossy(path).into_owned(), added, removed });
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }

    /// The unified diff from `from_sha` to `to_sha`, cut at `max_bytes` (the flag says
    /// whether it was cut). Invalid UTF-8 is replaced.
    pub fn diff_patch(&self, from_sha: &str, to_sha: &str, max_bytes: usize) -> Result<(String, bool), GitError> {
        let repo = self.repo()?;
        let from = repo.find_commit(resolve_oid(&repo, from_sha)?)?.tree()?;
        let to = repo.find_commit(resolve_oid(&repo, to_sha)?)?.tree()?;
        let diff = repo.diff_tree_to_tree(Some(&from), Some(&to), None)?;
        let mut bytes = Vec::new();
        let mut cut = false;
        diff.print(git2::DiffFormat::Patch, |_, _, line| {
            if bytes.len() >= max_bytes {
                cut = true;
                return false;
            }
            if matches!(line.origin(), '+' | '-' | ' ') {
                bytes.push(line.origin() as u8);
            }
            bytes.extend_from_slice(line.content());
            true
        })
        .or_else(|e| if cut { Ok(()) } else { Err(e) })?;
        Ok((String::from_utf8_lossy(&bytes).into_owned(), cut))
    }

    /// Up to `limit` commits reachable from `rev`, newest first (like `git log`).
    pub fn log(&self, rev: &str, limit: usize) -> Result<Vec<CommitInfo>, GitError> {
        let repo = self.repo()?;
        let start = resolve_oid(&repo, rev)?;
        let mut walk = repo.revwalk()?;
        walk.set_sorting(git2::Sort::TOPOLOGICAL | git2::Sort::TIME)?;
        walk.push(start)?;
        let mut out = Vec::new();
        for oid in walk.take(limit) {
            let commit = repo.find_commit(oid?)?;
            let author = commit.author();
            let message = String::from_utf8_lossy(commit.message_raw_bytes()).into_owned();
            out.push(CommitInfo {
                sha: commit.id().to_string(),
                summary: message.lines().next().unwrap_or_default().to_owned(),
                author_name: String::from_utf8_lossy(author.name_bytes()).into_owned(),
                author_email: String::from_utf8_lossy(author.email_bytes()).into_owned(),
                message,
            });
        }
        Ok(out)
    }

    /// Errors with [`GitError::BranchCheckedOut`] if `branch` is HEAD of any working tree.
    fn refuse_checked_out(&self, branch: &str) -> Result<(), GitError> {
        let refname = format!("refs/heads/{branch}");
        for entry in self.worktree_entries()? {
            if entry.branch.as_deref() == Some(refname.as_str()) {
                return Err(GitError::BranchCheckedOut { branch: branch.to_owned(), worktree: entry.path });
            }
        }
        Ok(())
    }
}

/// Lines added and removed in one file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FileStat {
    /// Path (the new path of a rename).
    pub path: String,
    /// Lines added.
    pub added: usize,
    /// Lines removed.
    pub removed: usize,
}

/// The Baton committer signature, timestamped now.
pub(super) fn baton_signature() -> Result<Signature<'static>, GitError> {
    Ok(Signature::now(COMMITTER_NAME, COMMITTER_EMAIL)?)
}

fn unknown(rev: &str) -> GitError {
    GitError::UnknownRevision { rev: rev.to_owned() }
}

pub(super) fn resolve_oid(repo: &Repository, rev: &str) -> Result<Oid, GitError> {
    repo.revparse_single(rev).and_then(|o| o.peel_to_commit()).map(|c| c.id()).map_err(|_| unknown(rev))
}

fn branch_ref(name: &str) -> Result<String, GitError> {
    let refname = format!("refs/heads/{name}");
    if check_branch_name(name).is_err() {
        return Err(GitError::InvalidRefName { name: refname });
    }
    Ok(refname)
}

/// What git's ref rules allow for a branch name, said in one line (for error messages).
pub const BRANCH_NAME_RULES: &str = "a git branch name: no spaces, control characters or any of ~ ^ : ? * [ \\, \
     no `..`, `@{`, `//` or leading `-`, no component starting with `.` or ending with `.lock`, not ending with `/` or `.`";

/// Checks `name` as a branch name (`refs/heads/<name>`) by git's ref rules (libgit2's
/// `git_reference_is_valid_name`), and refuses a leading `-` (read as an option).
///
/// Errors: a message saying which rule, from [`BRANCH_NAME_RULES`].
pub fn check_branch_name(name: &str) -> Result<(), String> {
    let full = format!("refs/heads/{name}");
    if name.is_empty() || name.starts_with('-') || !git2::Reference::is_valid_name(&full) {
        return Err(format!("{name:?} is not {BRANCH_NAME_RULES}"));
    }
    Ok(())
}

fn check_full_ref(full_ref: &str) -> Result<(), GitError> {
    if !full_ref.starts_with("refs/") || !git2::Reference::is_valid_name(full_ref) {
        return Err(GitError::InvalidRefName { name: full_ref.to_owned() });
    }
    Ok(())
}

/// The commit a direct ref points at, `None` if the ref is missing.
fn ref_target(repo: &Repository, refname: &str) -> Result<Option<Oid>, GitError> {
    match repo.find_reference(refname) {
        Ok(r) => Ok(Some(r.peel_to_commit()?.id())),
        Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Old and new paths of every delta between two trees, sorted and deduplicated.
pub(super) fn diff_paths(
    repo: &Repository,
    from: &git2::Tree<'_>,
    to: &git2::Tree<'_>,
) -> Result<Vec<String>, GitError> {
    let diff = repo.diff_tree_to_tree(Some(from), Some(to), None)?;
    let mut paths = Vec::new();
    for delta in diff.deltas() {
        for file in [delta.old_file(), delta.new_file()] {
            if let Some(p) = file.path_bytes() {
                paths.push(String::from_utf8_lossy(p).into_owned());
            }
        }
    }
    paths.sort();
    paths.dedup();
    Ok(paths)
}

/// Files of `from` absent from `to` (deleted by the change from one to the other).
pub(super) fn deleted_count(repo: &Repository, from: &git2::Tree<'_>, to: &git2::Tree<'_>) -> Result<usize, GitError> {
    let diff = repo.diff_tree_to_tree(Some(from), Some(to), None)?;
    Ok(diff.deltas().filter(|d| d.status() == git2::Delta::Deleted).count())
}

/// Files (blobs and submodule links) in `tree`, at any depth.
pub(super) fn file_count(tree: &git2::Tree<'_>) -> Result<usize, GitError> {
    let mut n = 0;
    tree.walk(git2::TreeWalkMode::PreOrder, |_, entry| {
        if matches!(entry.kind(), Some(git2::ObjectType::Blob | git2::ObjectType::Commit)) {
            n += 1;
        }
        git2::TreeWalkResult::Ok
    })?;
    Ok(n)
}

pub(super) fn canonical(path: &Path) -> Result<PathBuf, GitError> {
    path.canonicalize().map_err(|source| GitError::Io { context: format!("resolving {}", path.display()), source })
}

/// Creates a git repository at `path` (which must not exist or be empty) on branch `main`
/// holding `files` (`(relative path, content)`) in one commit by Baton, and opens it.
/// Used by `baton demo` and tests.
///
/// Errors: the directory cannot be created or git fails ([`GitError::Command`]).
pub fn init_repository(path: &Path, files: &[(&str, &str)], message: &str) -> Result<GitRepo, GitError> {
    std::fs::create_dir_all(path)
        .map_err(|source| GitError::Io { context: format!("creating {}", path.display()), source })?;
    cli::run_git(path, None, None, ["init", "-q", "-b", "main"])?;
    for (rel, content) in files {
        let file = path.join(rel);
        if let Some(dir) = file.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|source| GitError::Io { context: format!("creating {}", dir.display()), source })?;
        }
        std::fs::write(&file, content)
            .map_err(|source| GitError::Io { context: format!("writing {}", file.display()), source })?;
    }
    cli::run_git(path, None, None, ["add", "-A"])?;
    cli::run_git(path, None, None, ["commit", "-q", "--no-gpg-sign", "-m", message])?;
    GitRepo::open(path)
}
