//! Linked worktrees, one per agent attempt: add, remove, list, prune (git CLI) and the
//! attempt commit built from a worktree's content (staged by the CLI, committed by `git2`).
//!
//! Never operates on the main checkout: every worktree path is checked against it.

use std::ffi::OsStr;
use std::path::{Component, Path, PathBuf};

use git2::Repository;

use super::cli::run_git;
use super::{baton_signature, canonical, diff_paths, resolve_oid, AttemptCommit, CommitIdentity, GitError, GitRepo};

/// File in the common git dir that Baton's `git worktree` commands lock, one at a time.
pub(super) const WORKTREE_LOCK: &str = "baton-worktrees.flock";

/// One record of `git worktree list --porcelain -z`.
#[derive(Debug)]
pub(super) struct WorktreeEntry {
    /// Path as git recorded it.
    pub(super) path: PathBuf,
    /// Full branch ref checked out there, if any (`None` when detached).
    pub(super) branch: Option<String>,
}

impl GitRepo {
    /// Creates a fresh linked worktree at `path` with `sha` checked out on a detached HEAD.
    ///
    /// A registration left for `path` (directory deleted or not) is removed first, so each
    /// attempt starts clean; missing parent directories are created. Errors:
    /// [`GitError::WorktreePathOccupied`] if `path` is a non-empty directory that is not a
    /// registered worktree, [`GitError::NotAWorktree`] for the main checkout,
    /// [`GitError::UnknownRevision`], [`GitError::Command`].
    pub fn add_worktree(&self, path: &Path, sha: &str) -> Result<(), GitError> {
        crate::crash::before_effect("git add worktree");
        let target = normalize(path)?;
        self.refuse_main(&target, path)?;
        let sha = self.resolve(sha)?;
        if self.is_registered(&target)? {
            self.force_remove(&target)?;
        } else if is_occupied(&target) {
            return Err(GitError::WorktreePathOccupied { path: target });
        }
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|source| GitError::Io { context: format!("creating {}", parent.display()), source })?;
        }
        self.run_worktree([
            OsStr::new("worktree"),
            OsStr::new("add"),
            OsStr::new("--detach"),
            target.as_os_str(),
            OsStr::new(&sha),
        ])?;
        Ok(())
    }

    /// Removes the linked worktree at `path` (forcefully, local changes are lost) and prunes.
    ///
    /// Succeeds if it is already gone. A directory at `path` that is not a registered worktree
    /// is left alone. Errors: [`GitError::NotAWorktree`] for the main checkout.
    pub fn remove_worktree(&self, path: &Path) -> Result<(), GitError> {
        crate::crash::before_effect("git remove worktree");
        let target = normalize(path)?;
        self.refuse_main(&target, path)?;
        if self.is_registered(&target)? {
            self.force_remove(&target)?;
        } else {
            self.prune_worktrees()?;
        }
        Ok(())
    }

    /// Paths of the registered linked worktrees (the main checkout excluded), including
    /// registrations whose directory has disappeared until they are pruned.
    pub fn list_worktrees(&self) -> Result<Vec<PathBuf>, GitError> {
        let entries = self.worktree_entries()?;
        Ok(entries.into_iter().map(|e| e.path).filter(|p| normalize(p).map_or(true, |n| n != self.root)).collect())
    }

    /// Deletes the half-made worktree at `path` that a `git worktree add` of `sha` left when it
    /// was interrupted (its caller killed mid-way: git dies of SIGPIPE on the closed output
    /// pipe, or of the terminal's SIGINT, and its cleanup races the checkout it started), then
    /// prunes; returns whether it did. [`GitRepo::add_worktree`] refuses such a path as
    /// occupied. Only a directory that is not a registered worktree and holds nothing but a
    /// `.git` file and files of `sha`'s tree counts as half-made: any other file (someone's
    /// work) leaves it alone, as do a registered worktree and the main checkout.
    pub fn clear_half_made_worktree(&self, path: &Path, sha: &str) -> Result<bool, GitError> {
        let target = normalize(path)?;
        self.refuse_main(&target, path)?;
        if !target.is_dir() || self.is_registered(&target)? {
            return Ok(false);
        }
        let repo = self.repo()?;
        let tree = repo.find_commit(resolve_oid(&repo, sha)?)?.tree()?;
        if !only_checkout_files(&target, &target, &tree) {
            return Ok(false);
        }
        crate::crash::before_effect("git clear half-made worktree");
        std::fs::remove_dir_all(&target)
            .map_err(|source| GitError::Io { context: format!("deleting {}", target.display()), source })?;
        self.prune_worktrees()?;
        Ok(true)
    }

    /// Runs `git worktree prune`: forgets registrations whose directory is gone.
    pub fn prune_worktrees(&self) -> Result<(), GitError> {
        self.run_worktree(["worktree", "prune"])?;
        Ok(())
    }

    /// Makes one commit on `base_sha` whose tree is the worktree's whole current content.
    ///
    /// Stages with `git add -A` inside the worktree (so `.gitignore` applies; this writes the
    /// worktree's own index), then commits with `identity` as author and Baton as committer.
    /// Commits the agent made in the worktree are squashed into this one. Returns `None` when
    /// the tree equals the base tree. The commit is not referenced by any ref: point one at
    /// it ([`GitRepo::set_ref`]) before it can be garbage-collected.
    /// Errors: [`GitError::NotAWorktree`] unless `worktree` is a linked worktree of this repo.
    pub fn commit_worktree(
        &self,
        worktree: &Path,
        base_sha: &str,
        identity: &CommitIdentity,
        message: &str,
    ) -> Result<Option<AttemptCommit>, GitError> {
        self.commit_worktree_without(worktree, base_sha, identity, message, &[]).map(|(commit, _)| commit)
    }

    /// [`GitRepo::commit_worktree`], keeping `never` (repository-relative paths: the files
    /// [`GitRepo::copy_worktree_env`] copied in) out of the commit: any of them staged after
    /// `git add -A` (an agent's `git add -f`, or its own commit of it) is removed from the
    /// worktree's index first, the file itself left alone. Also returns those it removed.
    pub fn commit_worktree_without(
        &self,
        worktree: &Path,
        base_sha: &str,
        identity: &CommitIdentity,
        message: &str,
        never: &[String],
    ) -> Result<(Option<AttemptCommit>, Vec<String>), GitError> {
        crate::crash::before_effect("git commit worktree");
        let (admin_dir, work_tree) = self.linked_worktree(worktree)?;
        let repo = self.repo()?;
        let base = repo.find_commit(resolve_oid(&repo, base_sha)?)?;

        run_git(&work_tree, Some(&admin_dir), Some(&work_tree), ["add", "-A"])?;
        let withheld = self.unstage(&admin_dir, &work_tree, &base, never)?;
        let tree_hex = run_git(&work_tree, Some(&admin_dir), Some(&work_tree), ["write-tree"])?;
        let tree_oid = git2::Oid::from_str(tree_hex.trim())?;
        if tree_oid == base.tree_id() {
            return Ok((None, withheld));
        }
        let tree = repo.find_tree(tree_oid)?;
        let author = git2::Signature::now(&identity.author_name, &identity.author_email)?;
        let committer = baton_signature()?;
        let oid = repo.commit(None, &author, &committer, message, &tree, &[&base])?;
        let base_tree = base.tree()?;
        let files_changed = diff_paths(&repo, &base_tree, &tree)?;
        let files_deleted = super::deleted_count(&repo, &base_tree, &tree)?;
        let base_files = super::file_count(&base_tree)?;
        Ok((Some(AttemptCommit { sha: oid.to_string(), files_changed, files_deleted, base_files }), withheld))
    }

    /// Removes from the worktree's index each of `paths` that is staged there and is not
    /// tracked in `base` (a file the base tracks was never copied in); returns those removed.
    fn unstage(
        &self,
        admin_dir: &Path,
        work_tree: &Path,
        base: &git2::Commit<'_>,
        paths: &[String],
    ) -> Result<Vec<String>, GitError> {
        if paths.is_empty() {
            return Ok(Vec::new());
        }
        let index = Repository::open(work_tree)?.index()?;
        let base_tree = base.tree()?;
        let staged: Vec<String> = paths
            .iter()
            .filter(|p| index.get_path(Path::new(p.as_str()), 0).is_some())
            .filter(|p| base_tree.get_path(Path::new(p.as_str())).is_err())
            .cloned()
            .collect();
        if staged.is_empty() {
            return Ok(staged);
        }
        // `:(literal)`: a file name with `*` or `?` is that file, not a pattern.
        let specs: Vec<String> = staged.iter().map(|p| format!(":(literal){p}")).collect();
        let mut args = vec!["rm", "--cached", "-f", "--quiet", "--ignore-unmatch", "--"];
        args.extend(specs.iter().map(String::as_str));
        run_git(work_tree, Some(admin_dir), Some(work_tree), args)?;
        Ok(staged)
    }

    /// Parses `git worktree list --porcelain -z`; the first entry is the main checkout.
    pub(super) fn worktree_entries(&self) -> Result<Vec<WorktreeEntry>, GitError> {
        let out = self.run_worktree(["worktree", "list", "--porcelain", "-z"])?;
        let mut entries = Vec::new();
        let mut current: Option<WorktreeEntry> = None;
        for field in out.split('\0') {
            if let Some(p) = field.strip_prefix("worktree ") {
                entries.extend(current.take());
                current = Some(WorktreeEntry { path: PathBuf::from(p), branch: None });
            } else if let Some(b) = field.strip_prefix("branch ") {
                if let Some(e) = current.as_mut() {
                    e.branch = Some(b.to_owned());
                }
            }
        }
        entries.extend(current);
        Ok(entries)
    }

    fn is_registered(&self, target: &Path) -> Result<bool, GitError> {
        let entries = self.worktree_entries()?;
        Ok(entries.iter().any(|e| normalize(&e.path).is_ok_and(|p| p == target)))
    }

    /// Runs a `git worktree …` command in the main checkout while holding the repository's
    /// worktree lock ([`WORKTREE_LOCK`] in the common git dir, an exclusive `flock`), so no
    /// other Baton process or thread adds, removes, prunes or lists this repository's
    /// worktrees meanwhile: git's own worktree commands take no lock, and a prune deleted the
    /// half-made registration of a concurrent add (`could not open …/gitdir for writing`).
    fn run_worktree<I, S>(&self, args: I) -> Result<String, GitError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let path = self.git_dir.join(WORKTREE_LOCK);
        let io = |source| GitError::Io { context: format!("locking {}", path.display()), source };
        let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path).map_err(io)?;
        file.lock().map_err(io)?;
        // Released when `file` is closed, at the end of this call.
        run_git(&self.root, None, None, args)
    }

    /// `git worktree remove --force --force` (also unlocks); if git refuses (e.g. the
    /// worktree's `.git` file was deleted), deletes the registered directory; then prunes.
    fn force_remove(&self, target: &Path) -> Result<(), GitError> {
        let removed = self.run_worktree([
            OsStr::new("worktree"),
            OsStr::new("remove"),
            OsStr::new("--force"),
            OsStr::new("--force"),
            target.as_os_str(),
        ]);
        if let Err(err) = removed {
            if target.exists() {
                tracing::warn!(
                    worktree.path = %target.display(),
                    "git refused to remove worktree {} ({err}); deleting the directory",
                    target.display()
                );
                std::fs::remove_dir_all(target).map_err(|source| GitError::Io {
                    context: format!("deleting worktree {}", target.display()),
                    source,
                })?;
            }
        }
        self.prune_worktrees()?;
        if self.is_registered(target)? {
            return Err(GitError::Command {
                cmd: format!("git worktree remove {} (in {})", target.display(), self.root.display()),
                stderr: "worktree is still registered after remove and prune".to_owned(),
            });
        }
        Ok(())
    }

    fn refuse_main(&self, target: &Path, given: &Path) -> Result<(), GitError> {
        if target == self.root || target.starts_with(&self.git_dir) {
            return Err(GitError::NotAWorktree { path: given.to_path_buf(), repo: self.root.clone() });
        }
        Ok(())
    }

    /// Checks that `path` is the root of a linked worktree of this repository; returns its
    /// admin dir (`.git/worktrees/<name>`) and canonical root.
    pub(super) fn linked_worktree(&self, path: &Path) -> Result<(PathBuf, PathBuf), GitError> {
        let not_wt = || GitError::NotAWorktree { path: path.to_path_buf(), repo: self.root.clone() };
        // `open` does not search upwards, so a worktree whose `.git` file is gone is refused
        // instead of resolving to an enclosing repository.
        let wt = Repository::open(path).map_err(|_| not_wt())?;
        if !wt.is_worktree() || canonical(wt.commondir())? != self.git_dir {
            return Err(not_wt());
        }
        let root = canonical(wt.workdir().ok_or_else(not_wt)?)?;
        if root != canonical(path)? || root == self.root {
            return Err(not_wt());
        }
        Ok((canonical(wt.path())?, root))
    }
}

/// True when every file under `dir` (relative to `root`) is the `.git` file of `root` or a
/// path of `tree`; false for anything else, or a directory that cannot be read.
fn only_checkout_files(root: &Path, dir: &Path, tree: &git2::Tree<'_>) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else { return false };
    for entry in entries {
        let Ok(entry) = entry else { return false };
        let path = entry.path();
        let Ok(rel) = path.strip_prefix(root) else { return false };
        let Ok(kind) = entry.file_type() else { return false };
        if kind.is_dir() {
            if !only_checkout_files(root, &path, tree) {
                return false;
            }
        } else if rel != Path::new(".git") && tree.get_path(rel).is_err() {
            return false;
        }
    }
    true
}

fn is_occupied(path: &Path) -> bool {
    match std::fs::read_dir(path) {
        Ok(mut entries) => entries.next().is_some(),
        // A file, or a path we cannot list, is occupied; a missing path is not.
        Err(e) => e.kind() != std::io::ErrorKind::NotFound,
    }
}

/// Absolute, lexically cleaned path with its longest existing prefix canonicalized, so a
/// deleted worktree directory compares equal to its registration.
fn normalize(path: &Path) -> Result<PathBuf, GitError> {
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|source| GitError::Io { context: "reading the current directory".to_owned(), source })?
            .join(path)
    };
    let mut clean = PathBuf::new();
    for comp in abs.components() {
        match comp {
            Component::CurDir => {}
            Component::ParentDir => {
                clean.pop();
            }
            other => clean.push(other),
        }
    }
    let mut existing = clean.as_path();
    let mut rest = Vec::new();
    loop {
        if let Ok(c) = existing.canonicalize() {
            let mut out = c;
            out.extend(rest.iter().rev());
            return Ok(out);
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                existing = parent;
            }
            _ => return Ok(clean),
        }
    }
}
