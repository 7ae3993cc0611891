//! Runs the `git` command line: argv only (never a shell), hooks and fsmonitor disabled,
//! inherited `GIT_*` location variables removed, an explicit identity, and stderr captured
//! into [`GitError::Command`].

use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;

use super::{GitError, COMMITTER_EMAIL, COMMITTER_NAME};

/// Variables that would redirect git to another repository, index or object store if Baton
/// itself were started from a git hook or an agent's shell.
const SCRUBBED_ENV: &[&str] = &[
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_COMMON_DIR",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_NAMESPACE",
    "GIT_PREFIX",
    "GIT_CEILING_DIRECTORIES",
    "GIT_DISCOVERY_ACROSS_FILESYSTEM",
];

/// Runs `git <safety options> <args>` in `dir` and returns its stdout.
///
/// `git_dir`/`work_tree`, when given, are passed as `--git-dir`/`--work-tree` so that git
/// never discovers a different repository (e.g. the user's, above a damaged worktree).
/// Waits before each retry of a git command refused because a lock was held, milliseconds.
const LOCK_RETRY_MS: [u64; 5] = [20, 50, 100, 200, 400];

/// True when git refused because another process held one of its lock files (`index.lock`,
/// a ref's `.lock`, `config.lock`, `packed-refs.lock`): it changed nothing and may be retried.
///
/// Also true when `git worktree add` lost its half-made registration to another execution's
/// `git worktree prune` (which deletes a `.git/worktrees/<name>` whose `gitdir` file is not
/// written yet): the add fails with `could not open '…/worktrees/<name>/gitdir' for writing`
/// and cleans up after itself, so it may be retried too. Likewise when it listed the
/// registered worktrees while another execution's prune or remove deleted one of them: it dies
/// with `Invalid path '…/worktrees/<other>': No such file or directory` before creating
/// anything. And when `git worktree list` read another execution's registration before its
/// `commondir` file was written (`failed to read …/worktrees/<name>/commondir`).
fn lock_contention(stderr: &str) -> bool {
    (stderr.contains(".lock") && (stderr.contains("File exists") || stderr.contains("Unable to create")))
        || stderr.contains("cannot lock ref")
        || stderr.contains("could not lock")
        || (stderr.contains("could not open") && stderr.contains("/worktrees/") && stderr.contains("for writing"))
        || (stderr.contains("Invalid path") && stderr.contains("/worktrees/") && stderr.contains("No such file"))
        || (stderr.contains("failed to read") && stderr.contains("/worktrees/") && stderr.contains("commondir"))
}

pub(super) fn run_git<I, S>(
    dir: &Path,
    git_dir: Option<&Path>,
    work_tree: Option<&Path>,
    args: I,
) -> Result<String, GitError>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let args: Vec<std::ffi::OsString> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
    let mut cmd = Command::new("git");
    cmd.current_dir(dir).args(["-c", "core.hooksPath=/dev/null"]).args(["-c", "core.fsmonitor=false"]).args([
        "-c",
        "maintenance.auto=false",
        "-c",
        "gc.auto=0",
        // The `ext::` transport runs a command named in the URL: never, whatever the config.
        "-c",
        "protocol.ext.allow=never",
    ]);
    if let Some(g) = git_dir {
        cmd.arg(format!("--git-dir={}", g.display()));
    }
    if let Some(w) = work_tree {
        cmd.arg(format!("--work-tree={}", w.display()));
    }
    cmd.args(&args);
    for var in SCRUBBED_ENV {
        cmd.env_remove(var);
    }
    cmd.env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_AUTHOR_NAME", COMMITTER_NAME)
        .env("GIT_AUTHOR_EMAIL", COMMITTER_EMAIL)
        .env("GIT_COMMITTER_NAME", COMMITTER_NAME)
        .env("GIT_COMMITTER_EMAIL", COMMITTER_EMAIL)
        .env("LC_ALL", "C");

    let shown = format!(
        "git {} (in {})",
        args.iter().map(|a| a.to_string_lossy()).collect::<Vec<_>>().join(" "),
        dir.display()
    );
    tracing::debug!(git.cmd = %shown, "running {shown}");
    let mut output = cmd.output().map_err(|source| GitError::Io { context: format!("spawning {shown}"), source })?;
    // Another git process of this repository (another execution's driver) may hold a lock for
    // a moment: git then refuses without changing anything, and the same command is retried.
    for wait_ms in LOCK_RETRY_MS {
        if output.status.success() || !lock_contention(&String::from_utf8_lossy(&output.stderr)) {
            break;
        }
        tracing::debug!(git.cmd = %shown, "a git lock is held; retrying in {wait_ms} ms");
        std::thread::sleep(std::time::Duration::from_millis(wait_ms));
        output = cmd.output().map_err(|source| GitError::Io { context: format!("spawning {shown}"), source })?;
    }
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        // `push --porcelain` says which ref was rejected and why on stdout (`!\t<ref>\t[rejected]
        // (non-fast-forward)`): keep those lines in front of git's stderr.
        let stdout = String::from_utf8_lossy(&output.stdout);
        let refused = stdout.lines().filter(|l| l.starts_with('!')).map(|l| l.trim_start_matches('!').trim());
        let stderr =
            refused.chain(stderr.lines().map(str::trim)).filter(|l| !l.is_empty()).collect::<Vec<_>>().join("; ");
        return Err(GitError::Command {
            cmd: shown,
            stderr: if stderr.is_empty() { format!("exit status {}", output.status) } else { stderr },
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

#[cfg(test)]
mod lock_tests {
    use super::lock_contention;

    #[test]
    fn lock_refusals_are_recognised_and_other_errors_are_not() {
        assert!(lock_contention(
            "fatal: Unable to create '/r/.git/index.lock': File exists.\n\nAnother git process seems to be running"
        ));
        assert!(lock_contention("error: cannot lock ref 'refs/heads/baton/t': Unable to create '/r/.git/refs/heads/baton/t.lock': File exists."));
        assert!(lock_contention("error: could not lock config file .git/config: File exists"));
        // Seen when two executions of one repository add and prune worktrees at once.
        assert!(lock_contention(
            "fatal: could not open '.git/worktrees/1.1-1/gitdir' for writing: No such file or directory"
        ));
        // Seen when six executions of one repository added and pruned worktrees at once.
        assert!(lock_contention(
            "Preparing worktree (detached HEAD c4bf0d6)\nfatal: Invalid path '/d/demo/repo/.git/worktrees/2.2-1': No such file or directory"
        ));
        assert!(lock_contention("fatal: failed to read .git/worktrees/_integration1/commondir: Success"));
        assert!(!lock_contention("fatal: invalid reference: nope"));
        assert!(!lock_contention("error: could not apply 1234abc... step"));
    }
}
