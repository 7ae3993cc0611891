//! Remotes (issue 17.3): what a project's remote URL may be ([`check_remote_url`]), a
//! replica's own clone of it ([`GitRepo::clone_from`]), fetching ([`GitRepo::fetch`]) and the
//! remote-tracking tip of a branch. Pushing is [`GitRepo::push_branch`] (never forced).
//!
//! Every call runs the `git` CLI with argv (never a shell), the URL after `--` so git never
//! reads it as an option, `ext::`/`fd::` transports refused (see `cli`), and no terminal prompt.

use std::path::Path;

use super::{cli, GitError, GitRepo};

/// Longest remote URL accepted, bytes.
pub const MAX_REMOTE_URL_BYTES: usize = 2048;

/// Checks `url` as a project's remote: any URL or path git can fetch from (`https://…`,
/// `ssh://…`, `git@host:path`, `/srv/git/x.git`, `file://…`), at most
/// [`MAX_REMOTE_URL_BYTES`], with no control character, no leading `-` (git would read it as
/// an option) and not through the `ext::` or `fd::` transports (which run commands).
///
/// Errors: a one-line message saying which rule it breaks.
pub fn check_remote_url(url: &str) -> Result<(), String> {
    if url.trim().is_empty() {
        return Err("must not be empty".into());
    }
    if url.len() > MAX_REMOTE_URL_BYTES {
        return Err(format!("longer than {MAX_REMOTE_URL_BYTES} bytes"));
    }
    if url.chars().any(char::is_control) {
        return Err("must not contain control characters".into());
    }
    if url.starts_with('-') {
        return Err(format!("{url:?} starts with `-`: git would read it as an option"));
    }
    if url.trim() != url {
        return Err("must not start or end with white space".into());
    }
    let lower = url.to_ascii_lowercase();
    if lower.starts_with("ext::") || lower.starts_with("fd::") {
        return Err("the ext:: and fd:: transports run commands: give an https, ssh, git or file URL, or a path".into());
    }
    Ok(())
}

impl GitRepo {
    /// Clones `url` into `dest` (absent, or an empty directory) with the `git` CLI and opens
    /// the clone: its `origin` is `url`, its working tree holds the remote's default branch.
    ///
    /// Errors: [`GitError::InvalidRefName`] for a URL [`check_remote_url`] refuses;
    /// [`GitError::Command`] with git's message (unreachable, not a repository, no access).
    pub fn clone_from(url: &str, dest: &Path) -> Result<GitRepo, GitError> {
        crate::crash::before_effect("git clone");
        check_remote_url(url).map_err(|_| GitError::InvalidRefName { name: url.to_string() })?;
        let parent = dest.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(parent)
            .map_err(|source| GitError::Io { context: format!("creating {}", parent.display()), source })?;
        cli::run_git(
            parent,
            None,
            None,
            [std::ffi::OsStr::new("clone"), "-q".as_ref(), "--".as_ref(), url.as_ref(), dest.as_os_str()],
        )?;
        GitRepo::open(dest)
    }

    /// Fetches every branch of remote `remote` into `refs/remotes/<remote>/` (pruning the ones
    /// it deleted), without tags.
    ///
    /// Errors: [`GitError::InvalidRefName`] for a bad remote name; [`GitError::Command`].
    pub fn fetch(&self, remote: &str) -> Result<(), GitError> {
        crate::crash::before_effect("git fetch");
        check_remote_name(remote)?;
        cli::run_git(&self.root, None, None, ["fetch", "-q", "--no-tags", "--prune", "--", remote])?;
        Ok(())
    }

    /// The URL of remote `remote`, `None` when it has none.
    pub fn remote_url(&self, remote: &str) -> Result<Option<String>, GitError> {
        let repo = self.repo()?;
        let found = match repo.find_remote(remote) {
            Ok(r) => Ok(r.url().map(str::to_owned)),
            Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        };
        found
    }

    /// Points remote `remote` at `url` (a project whose remote changed).
    ///
    /// Errors: [`GitError::InvalidRefName`] for a URL [`check_remote_url`] refuses.
    pub fn set_remote_url(&self, remote: &str, url: &str) -> Result<(), GitError> {
        check_remote_name(remote)?;
        check_remote_url(url).map_err(|_| GitError::InvalidRefName { name: url.to_string() })?;
        self.repo()?.remote_set_url(remote, url)?;
        Ok(())
    }

    /// The tip of `branch` on `remote` as last fetched (`refs/remotes/<remote>/<branch>`),
    /// `None` when the remote has no such branch.
    pub fn remote_tip(&self, remote: &str, branch: &str) -> Result<Option<String>, GitError> {
        check_remote_name(remote)?;
        let refname = format!("refs/remotes/{remote}/{branch}");
        let repo = self.repo()?;
        super::ref_target(&repo, &refname).map(|o| o.map(|oid| oid.to_string()))
    }

    /// The best common ancestor of two revisions, `None` when they share no history.
    pub fn merge_base(&self, a: &str, b: &str) -> Result<Option<String>, GitError> {
        let repo = self.repo()?;
        let (a, b) = (super::resolve_oid(&repo, a)?, super::resolve_oid(&repo, b)?);
        match repo.merge_base(a, b) {
            Ok(oid) => Ok(Some(oid.to_string())),
            Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Replays the commits of `refs/heads/<branch>` after `base` (oldest first, first parents)
    /// onto `onto`, in memory (no working tree is touched), and points the branch at the
    /// result: what the branch now holds ([`super::PickOutcome::Applied`]; `AlreadyApplied`
    /// when nothing was left to replay, the branch at `onto`), or the paths of the first
    /// commit that conflicts ([`super::PickOutcome::Conflict`]: the branch is back where it
    /// was). Used when a push was rejected because someone else pushed to the branch: the
    /// result descends from `onto`, so the next push is a fast-forward, never forced.
    ///
    /// Errors: [`GitError::UnknownRevision`] for a missing branch or revision;
    /// [`GitError::BranchCheckedOut`]; [`GitError::Git`] for a merge commit among those replayed.
    pub fn replay_onto(&self, branch: &str, base: &str, onto: &str) -> Result<super::PickOutcome, GitError> {
        crate::crash::before_effect("git replay onto");
        let refname = super::branch_ref(branch)?;
        let (tip, commits, onto_oid) = {
            let repo = self.repo()?;
            let tip = super::ref_target(&repo, &refname)?
                .ok_or_else(|| GitError::UnknownRevision { rev: branch.to_string() })?;
            let mut walk = repo.revwalk()?;
            walk.push(tip)?;
            walk.hide(super::resolve_oid(&repo, base)?)?;
            walk.simplify_first_parent()?;
            walk.set_sorting(git2::Sort::TOPOLOGICAL | git2::Sort::REVERSE)?;
            let commits: Vec<String> = walk.map(|o| o.map(|o| o.to_string())).collect::<Result<_, _>>()?;
            (tip.to_string(), commits, super::resolve_oid(&repo, onto)?.to_string())
        };
        self.refuse_checked_out(branch)?;
        self.set_ref(&refname, &onto_oid)?;
        let mut outcome = super::PickOutcome::AlreadyApplied;
        for sha in &commits {
            match self.cherry_pick_onto(branch, sha) {
                Ok(super::PickOutcome::Conflict { paths }) => {
                    self.set_ref(&refname, &tip)?;
                    return Ok(super::PickOutcome::Conflict { paths });
                }
                Ok(super::PickOutcome::AlreadyApplied) => {}
                Ok(applied) => outcome = applied,
                Err(e) => {
                    self.set_ref(&refname, &tip)?;
                    return Err(e);
                }
            }
        }
        Ok(outcome)
    }

    /// Whether commit `ancestor` is `descendant` or one of its ancestors.
    pub fn is_ancestor(&self, ancestor: &str, descendant: &str) -> Result<bool, GitError> {
        let repo = self.repo()?;
        let (a, d) = (super::resolve_oid(&repo, ancestor)?, super::resolve_oid(&repo, descendant)?);
        Ok(a == d || repo.graph_descendant_of(d, a)?)
    }
}

/// A remote name git accepts and never reads as an option.
pub(super) fn check_remote_name(remote: &str) -> Result<(), GitError> {
    if remote.is_empty() || remote.starts_with('-') || remote.chars().any(|c| c.is_control() || c == '/') {
        return Err(GitError::InvalidRefName { name: remote.to_string() });
    }
    Ok(())
}
