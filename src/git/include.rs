//! The worktree environment: files a repository needs to build and test that git does not
//! carry (`.env`, local config), listed in the checkout's `.worktreeinclude` (gitignore
//! syntax) or by the caller, copied from the user's checkout into a fresh linked worktree, and
//! kept out of the attempt commit made from it.
//!
//! Invariants: only files git ignores are copied (a tracked file, or an untracked file git does
//! not ignore, never is: the worktree has the one and would commit the other); nothing is read
//! through a symbolic link (neither the file nor any directory above it in the checkout) nor
//! written through one (the worktree side is checked the same way); every path stays under the
//! checkout and the worktree (patterns are matched against paths found by walking the checkout,
//! so `../outside` matches nothing). The user's checkout is only read.

use std::io::{self, Read as _, Write as _};
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Component, Path, PathBuf};

use ignore::gitignore::{Gitignore, GitignoreBuilder};

use super::{GitError, GitRepo};

/// The file in the checkout's root that lists the files each new worktree gets a copy of.
pub const WORKTREE_INCLUDE_FILE: &str = ".worktreeinclude";

/// What [`GitRepo::copy_worktree_env`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnvCopy {
    /// Repository-relative paths copied into the worktree, sorted, `/`-separated.
    pub copied: Vec<String>,
    /// Listed files (or pattern lines) that were not copied, each with why, for people:
    /// `config/db.toml: tracked by git (the worktree has it already)`, `.env: a symbolic link`, …
    pub skipped: Vec<String>,
}

/// Checks gitignore-syntax `patterns` (from `baton.toml`): `Err` names the first bad one.
pub fn check_include_patterns(patterns: &[String]) -> Result<(), String> {
    let mut builder = GitignoreBuilder::new("/");
    for p in patterns {
        builder.add_line(None, p).map_err(|e| format!("worktree include pattern {p:?}: {e}"))?;
    }
    builder.build().map(|_| ()).map_err(|e| format!("worktree include patterns: {e}"))
}

impl GitRepo {
    /// Copies into the linked worktree `worktree` every file of the main checkout that the
    /// checkout's `.worktreeinclude` or `extra_patterns` (gitignore syntax, relative to the
    /// checkout root) list and that git ignores there.
    ///
    /// Skipped, and said in [`EnvCopy::skipped`]: tracked files, untracked files git does not
    /// ignore, symbolic links and files under one, files inside nested repositories or
    /// worktrees (e.g. Baton's own data dir), a file the worktree already has, a
    /// `.worktreeinclude` that is a symbolic link, pattern lines that are not valid. A file's
    /// mode bits are kept (a `.env` of mode 600 stays 600).
    /// Errors: [`GitError::NotAWorktree`] unless `worktree` is a linked worktree of this
    /// repository; [`GitError::Git`] when the checkout's index cannot be read. A file whose
    /// copy fails is skipped with the reason, never a failure of the whole copy.
    pub fn copy_worktree_env(&self, worktree: &Path, extra_patterns: &[String]) -> Result<EnvCopy, GitError> {
        let (_, work_tree) = self.linked_worktree(worktree)?;
        let mut out = EnvCopy::default();
        let Some(matcher) = self.include_matcher(extra_patterns, &mut out.skipped) else { return Ok(out) };
        let repo = self.repo()?;
        let index = repo.index()?;
        let mut listed = Vec::new();
        walk_listed(&self.root, Path::new(""), &matcher, &mut listed, &mut out.skipped);
        listed.sort();
        for rel in listed {
            let shown = slash_path(&rel);
            if index.get_path(&rel, 0).is_some() {
                out.skipped.push(format!("{shown}: tracked by git (the worktree has it already)"));
                continue;
            }
            if !repo.is_path_ignored(&rel)? {
                out.skipped.push(format!("{shown}: not ignored by git (an agent's commit would take it)"));
                continue;
            }
            match copy_one(&self.root, &work_tree, &rel) {
                Ok(true) => out.copied.push(shown),
                Ok(false) => out.skipped.push(format!("{shown}: already in the worktree")),
                Err(Refused(why)) => out.skipped.push(format!("{shown}: {why}")),
            }
        }
        Ok(out)
    }

    /// The matcher of `.worktreeinclude` plus `extra`, `None` when neither lists anything.
    fn include_matcher(&self, extra: &[String], skipped: &mut Vec<String>) -> Option<Gitignore> {
        let mut builder = GitignoreBuilder::new(&self.root);
        let mut lines = 0;
        let file = self.root.join(WORKTREE_INCLUDE_FILE);
        match std::fs::symlink_metadata(&file) {
            Ok(m) if m.file_type().is_symlink() => {
                skipped.push(format!("{WORKTREE_INCLUDE_FILE}: a symbolic link (not read)"));
            }
            Ok(m) if m.is_file() => match std::fs::read_to_string(&file) {
                Ok(text) => {
                    for (n, line) in text.lines().enumerate() {
                        match builder.add_line(Some(file.clone()), line) {
                            Ok(_) => lines += 1,
                            Err(e) => skipped.push(format!("{WORKTREE_INCLUDE_FILE} line {}: {e}", n + 1)),
                        }
                    }
                }
                Err(e) => skipped.push(format!("{WORKTREE_INCLUDE_FILE}: cannot be read ({e})")),
            },
            _ => {}
        }
        for p in extra {
            match builder.add_line(None, p) {
                Ok(_) => lines += 1,
                Err(e) => skipped.push(format!("worktree include pattern {p:?}: {e}")),
            }
        }
        if lines == 0 {
            return None;
        }
        match builder.build() {
            Ok(m) if m.num_ignores() > 0 => Some(m),
            Ok(_) => None,
            Err(e) => {
                skipped.push(format!("worktree include patterns: {e}"));
                None
            }
        }
    }
}

/// Adds to `listed` every regular file under `root/rel_dir` that `matcher` lists, never
/// entering a symbolic link, `.git` or a directory holding a `.git` (a nested repository or
/// worktree); a listed symbolic link goes to `skipped`.
fn walk_listed(root: &Path, rel_dir: &Path, matcher: &Gitignore, listed: &mut Vec<PathBuf>, skipped: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(root.join(rel_dir)) else { return };
    for entry in entries.flatten() {
        let rel = rel_dir.join(entry.file_name());
        // `file_type` does not follow a symbolic link.
        let Ok(kind) = entry.file_type() else { continue };
        if kind.is_dir() {
            if entry.file_name() == ".git" || std::fs::symlink_metadata(entry.path().join(".git")).is_ok() {
                continue;
            }
            walk_listed(root, &rel, matcher, listed, skipped);
        } else if matcher.matched_path_or_any_parents(&rel, false).is_ignore() {
            if kind.is_file() {
                listed.push(rel);
            } else if kind.is_symlink() {
                skipped.push(format!("{}: a symbolic link (never followed)", slash_path(&rel)));
            }
        }
    }
}

/// Why one file was not copied.
struct Refused(String);

impl From<io::Error> for Refused {
    fn from(e: io::Error) -> Self {
        Refused(format!("copy failed ({e})"))
    }
}

/// Copies `from_root/rel` to `to_root/rel`: `Ok(false)` when the destination exists. Every
/// directory of `rel` is checked on both sides not to be a symbolic link, and both files are
/// opened with `O_NOFOLLOW`, so a link swapped in meanwhile is refused, not followed.
fn copy_one(from_root: &Path, to_root: &Path, rel: &Path) -> Result<bool, Refused> {
    if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
        return Err(Refused("not a plain relative path".into()));
    }
    let parent = rel.parent().unwrap_or(Path::new(""));
    let mut from_dir = from_root.to_path_buf();
    let mut to_dir = to_root.to_path_buf();
    for part in parent.components() {
        from_dir.push(part);
        to_dir.push(part);
        if !std::fs::symlink_metadata(&from_dir).is_ok_and(|m| m.is_dir()) {
            return Err(Refused(format!("{} is not a directory in the checkout", slash_path(parent))));
        }
        match std::fs::symlink_metadata(&to_dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(Refused(format!("{} is not a directory in the worktree", slash_path(parent)))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => std::fs::create_dir(&to_dir)?,
            Err(e) => return Err(e.into()),
        }
    }
    let name = rel.file_name().ok_or_else(|| Refused("no file name".into()))?;
    let nofollow = nix::fcntl::OFlag::O_NOFOLLOW.bits();
    let mut source = match std::fs::OpenOptions::new().read(true).custom_flags(nofollow).open(from_dir.join(name)) {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(nix::libc::ELOOP) => return Err(Refused("a symbolic link".into())),
        Err(e) => return Err(e.into()),
    };
    let meta = source.metadata()?;
    if !meta.is_file() {
        return Err(Refused("not a regular file".into()));
    }
    let target = to_dir.join(name);
    let mut dest = match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(nofollow)
        .mode(meta.permissions().mode() & 0o777)
        .open(&target)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(false),
        Err(e) => return Err(e.into()),
    };
    let mut bytes = Vec::new();
    source.read_to_end(&mut bytes)?;
    dest.write_all(&bytes)?;
    Ok(true)
}

/// `rel` with `/` separators (how git and the journal spell paths).
fn slash_path(rel: &Path) -> String {
    rel.components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>().join("/")
}
