//! Tests on real repositories in temporary directories, built with the git CLI under an
//! explicit identity and with global/system git config disabled.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use tempfile::TempDir;

use super::*;

/// Runs git for fixtures with an explicit identity and no global or system config.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args(["-c", "core.hooksPath=/dev/null", "-c", "init.defaultBranch=main"])
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "Fixture Author")
        .env("GIT_AUTHOR_EMAIL", "fixture@example.com")
        .env("GIT_COMMITTER_NAME", "Fixture Committer")
        .env("GIT_COMMITTER_EMAIL", "fixture@example.com")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE")
        .output()
        .expect("spawn git");
    assert!(out.status.success(), "git {args:?} in {}: {}", dir.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn write(path: &Path, content: &str) {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).unwrap();
    }
    fs::write(path, content).unwrap();
}

struct Fixture {
    tmp: TempDir,
    root: PathBuf,
    repo: GitRepo,
    base: String,
}

impl Fixture {
    /// A repo on `main` with `a.txt` (5 lines), `docs/readme.md` and a `.gitignore` of `target/`.
    fn new() -> Fixture {
        let tmp = TempDir::new().unwrap();
        let root = tmp.path().join("repo");
        fs::create_dir(&root).unwrap();
        git(&root, &["init", "-q"]);
        write(&root.join("a.txt"), "1\n2\n3\n4\n5\n");
        write(&root.join("docs/readme.md"), "readme\n");
        write(&root.join(".gitignore"), "target/\n");
        git(&root, &["add", "-A"]);
        git(&root, &["commit", "-q", "-m", "initial"]);
        let repo = GitRepo::open(&root).unwrap();
        let base = repo.resolve("HEAD").unwrap();
        Fixture { root: repo.root().to_path_buf(), tmp, repo, base }
    }

    fn wt(&self, name: &str) -> PathBuf {
        self.tmp.path().join("worktrees").join(name)
    }

    fn status(&self) -> String {
        git(&self.root, &["status", "--porcelain", "--untracked-files=all"])
    }

    /// An attempt commit on `base` that writes `files` in a fresh worktree.
    fn attempt(&self, name: &str, base: &str, files: &[(&str, &str)]) -> AttemptCommit {
        let wt = self.wt(name);
        self.repo.add_worktree(&wt, base).unwrap();
        for (path, content) in files {
            write(&wt.join(path), content);
        }
        let commit = self
            .repo
            .commit_worktree(&wt, base, &agent(), &format!("attempt {name}\n\nBaton-Task: t1\n"))
            .unwrap()
            .expect("changes");
        self.repo.remove_worktree(&wt).unwrap();
        commit
    }
}

fn agent() -> CommitIdentity {
    CommitIdentity { author_name: "Agent Smith".to_owned(), author_email: "agent@example.com".to_owned() }
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn open_from_subdir_or_linked_worktree_gives_main_repo() {
    let f = Fixture::new();
    let from_sub = GitRepo::open(f.root.join("docs")).unwrap();
    assert_eq!(from_sub, f.repo);
    let wt = f.wt("w");
    f.repo.add_worktree(&wt, &f.base).unwrap();
    let from_wt = GitRepo::open(&wt).unwrap();
    assert_eq!(from_wt, f.repo);
    assert_eq!(from_wt.root(), f.root);
}

#[test]
fn open_outside_a_repository_fails() {
    let tmp = TempDir::new().unwrap();
    let err = GitRepo::open(tmp.path()).unwrap_err();
    assert!(matches!(err, GitError::NotARepository { .. }), "{err}");
}

#[test]
fn resolve_and_head_branch() {
    let f = Fixture::new();
    assert_eq!(f.base.len(), 40);
    assert_eq!(f.repo.resolve("main").unwrap(), f.base);
    assert_eq!(f.repo.head_branch().unwrap(), (Some("main".to_owned()), f.base.clone()));
    let err = f.repo.resolve("no-such-rev").unwrap_err();
    assert!(matches!(err, GitError::UnknownRevision { ref rev } if rev == "no-such-rev"));
    git(&f.root, &["checkout", "-q", "--detach"]);
    assert_eq!(f.repo.head_branch().unwrap(), (None, f.base.clone()));
}

#[test]
fn worktree_add_and_remove_leave_main_checkout_untouched() {
    let f = Fixture::new();
    // An untracked file and a modified file in the user's checkout must survive as they are.
    write(&f.root.join("user-notes.txt"), "mine\n");
    write(&f.root.join("a.txt"), "user edit\n");
    let status_before = f.status();
    let head_before = f.repo.head_branch().unwrap();

    let wt = f.wt("attempt-1");
    f.repo.add_worktree(&wt, &f.base).unwrap();
    assert_eq!(fs::read_to_string(wt.join("a.txt")).unwrap(), "1\n2\n3\n4\n5\n");
    assert_eq!(git(&wt, &["rev-parse", "HEAD"]), f.base);
    assert_eq!(f.repo.list_worktrees().unwrap().len(), 1);

    // Re-adding gives a fresh worktree: the previous attempt's leftovers are gone.
    write(&wt.join("leftover.txt"), "x\n");
    f.repo.add_worktree(&wt, &f.base).unwrap();
    assert!(!wt.join("leftover.txt").exists());
    assert_eq!(f.repo.list_worktrees().unwrap().len(), 1);

    f.repo.remove_worktree(&wt).unwrap();
    assert!(!wt.exists());
    assert!(f.repo.list_worktrees().unwrap().is_empty());
    f.repo.remove_worktree(&wt).unwrap(); // already gone: fine

    assert_eq!(f.status(), status_before);
    assert_eq!(f.repo.head_branch().unwrap(), head_before);
    assert_eq!(fs::read_to_string(f.root.join("a.txt")).unwrap(), "user edit\n");
}

#[test]
fn add_worktree_recovers_stale_and_damaged_registrations() {
    let f = Fixture::new();
    let wt = f.wt("w");
    f.repo.add_worktree(&wt, &f.base).unwrap();
    fs::remove_dir_all(&wt).unwrap(); // stale registration
    f.repo.add_worktree(&wt, &f.base).unwrap();
    fs::remove_file(wt.join(".git")).unwrap(); // damaged: git refuses `worktree remove`
    f.repo.add_worktree(&wt, &f.base).unwrap();
    assert!(wt.join("a.txt").exists());
    assert_eq!(f.repo.list_worktrees().unwrap().len(), 1);
}

#[test]
fn add_worktree_refuses_occupied_path_and_main_checkout() {
    let f = Fixture::new();
    let dir = f.tmp.path().join("occupied");
    write(&dir.join("precious.txt"), "keep\n");
    let err = f.repo.add_worktree(&dir, &f.base).unwrap_err();
    assert!(matches!(err, GitError::WorktreePathOccupied { .. }), "{err}");
    assert!(dir.join("precious.txt").exists());
    let err = f.repo.add_worktree(&f.root, &f.base).unwrap_err();
    assert!(matches!(err, GitError::NotAWorktree { .. }), "{err}");
    let err = f.repo.remove_worktree(&f.root).unwrap_err();
    assert!(matches!(err, GitError::NotAWorktree { .. }), "{err}");
}

#[test]
fn commit_worktree_has_agent_author_baton_committer_base_parent_and_files() {
    let f = Fixture::new();
    let wt = f.wt("w");
    f.repo.add_worktree(&wt, &f.base).unwrap();
    write(&wt.join("a.txt"), "changed\n");
    write(&wt.join("src/new.rs"), "fn main() {}\n");
    fs::remove_file(wt.join("docs/readme.md")).unwrap();
    write(&wt.join("target/build.o"), "ignored\n");
    let status_before = f.status();

    let msg = "Add new\n\nBaton-Task: t1\n";
    let commit = f.repo.commit_worktree(&wt, &f.base, &agent(), msg).unwrap().unwrap();
    assert_eq!(commit.files_changed, strings(&["a.txt", "docs/readme.md", "src/new.rs"]));
    let fmt = git(&f.root, &["log", "-1", "--format=%an|%ae|%cn|%ce|%P", &commit.sha]);
    assert_eq!(fmt, format!("Agent Smith|agent@example.com|Baton|baton@baton.invalid|{}", f.base));
    let log = f.repo.log(&commit.sha, 1).unwrap();
    assert_eq!(log[0].message, msg);
    assert_eq!(log[0].summary, "Add new");
    assert_eq!(f.status(), status_before);
    assert_eq!(f.repo.head_branch().unwrap().1, f.base);
}

#[test]
fn commit_worktree_counts_deleted_files_against_the_base_tree() {
    let f = Fixture::new();
    let wt = f.wt("del");
    f.repo.add_worktree(&wt, &f.base).unwrap();
    fs::remove_file(wt.join("a.txt")).unwrap();
    fs::remove_file(wt.join("docs/readme.md")).unwrap();
    write(&wt.join("new.txt"), "new\n");
    let commit = f.repo.commit_worktree(&wt, &f.base, &agent(), "m").unwrap().unwrap();
    assert_eq!(commit.base_files, 3, "a.txt, docs/readme.md and .gitignore");
    assert_eq!(commit.files_deleted, 2);
    assert_eq!(commit.files_changed, strings(&["a.txt", "docs/readme.md", "new.txt"]));
}

/// The input that broke a resumed run: a driver killed inside `git worktree add` left the
/// attempt's directory half checked out and unregistered, and the relaunch refused it.
#[test]
fn a_half_made_worktree_is_cleared_but_not_someone_elses_files_or_a_registered_worktree() {
    let f = Fixture::new();
    let wt = f.wt("half");
    write(&wt.join("a.txt"), "1\n2\n");
    write(&wt.join("docs/readme.md"), "read");
    write(&wt.join(".git"), "gitdir: /nowhere\n");
    assert!(matches!(f.repo.add_worktree(&wt, &f.base), Err(GitError::WorktreePathOccupied { .. })));
    assert!(f.repo.clear_half_made_worktree(&wt, &f.base).unwrap());
    f.repo.add_worktree(&wt, &f.base).unwrap();
    write(&wt.join("work.txt"), "kept\n");
    assert!(!f.repo.clear_half_made_worktree(&wt, &f.base).unwrap(), "a registered worktree is left alone");
    assert!(wt.join("work.txt").is_file());
    let other = f.wt("other");
    write(&other.join("a.txt"), "tracked\n");
    write(&other.join("docs/precious.txt"), "not baton's\n");
    assert!(!f.repo.clear_half_made_worktree(&other, &f.base).unwrap(), "a file outside the tree: not a checkout");
    assert!(other.join("docs/precious.txt").is_file());
    assert!(!f.repo.clear_half_made_worktree(&f.wt("absent"), &f.base).unwrap());
    assert!(f.repo.clear_half_made_worktree(&f.root, &f.base).is_err(), "never the main checkout");
}

#[test]
fn commit_worktree_without_changes_returns_none() {
    let f = Fixture::new();
    let wt = f.wt("w");
    f.repo.add_worktree(&wt, &f.base).unwrap();
    write(&wt.join("target/only-ignored"), "x\n");
    assert_eq!(f.repo.commit_worktree(&wt, &f.base, &agent(), "m").unwrap(), None);
}

#[test]
fn commit_worktree_refuses_the_main_checkout() {
    let f = Fixture::new();
    write(&f.root.join("untracked.txt"), "x\n");
    let before = f.status();
    let err = f.repo.commit_worktree(&f.root, &f.base, &agent(), "m").unwrap_err();
    assert!(matches!(err, GitError::NotAWorktree { .. }), "{err}");
    assert_eq!(f.status(), before); // nothing was staged in the user's index
}

#[test]
fn agent_commits_are_squashed_into_one_commit_on_base() {
    let f = Fixture::new();
    let wt = f.wt("w");
    f.repo.add_worktree(&wt, &f.base).unwrap();
    write(&wt.join("one.txt"), "1\n");
    git(&wt, &["add", "-A"]);
    git(&wt, &["commit", "-q", "-m", "agent commit 1"]);
    write(&wt.join("two.txt"), "2\n");
    git(&wt, &["add", "-A"]);
    git(&wt, &["commit", "-q", "-m", "agent commit 2"]);
    write(&wt.join("three.txt"), "3\n"); // left uncommitted

    let commit = f.repo.commit_worktree(&wt, &f.base, &agent(), "squash").unwrap().unwrap();
    assert_eq!(commit.files_changed, strings(&["one.txt", "three.txt", "two.txt"]));
    let parents = git(&f.root, &["log", "-1", "--format=%P", &commit.sha]);
    assert_eq!(parents, f.base);
}

#[test]
fn cherry_pick_applies_on_a_moved_branch_keeping_author_and_message() {
    let f = Fixture::new();
    let tip = f.repo.ensure_branch("baton/t1", &f.base).unwrap();
    assert_eq!(tip, f.base);
    let a = f.attempt("a", &f.base, &[("x.txt", "x\n")]);
    let b = f.attempt("b", &f.base, &[("y.txt", "y\n")]);

    let PickOutcome::Applied { new_tip: tip_a } = f.repo.cherry_pick_onto("baton/t1", &a.sha).unwrap() else {
        panic!("a should apply");
    };
    // b was made on the old base; the branch has moved since.
    let PickOutcome::Applied { new_tip: tip_b } = f.repo.cherry_pick_onto("baton/t1", &b.sha).unwrap() else {
        panic!("b should apply");
    };
    assert_eq!(f.repo.branch_tip("baton/t1").unwrap(), Some(tip_b.clone()));
    assert_eq!(f.repo.changed_files(&f.base, &tip_b).unwrap(), strings(&["x.txt", "y.txt"]));

    let log = f.repo.log("baton/t1", 10).unwrap();
    let shas: Vec<_> = log.iter().map(|c| c.sha.clone()).collect();
    assert_eq!(shas, vec![tip_b.clone(), tip_a, f.base.clone()]);
    assert_eq!(log[0].author_name, "Agent Smith");
    assert_eq!(log[0].message, "attempt b\n\nBaton-Task: t1\n");
    assert_eq!(git(&f.root, &["log", "-1", "--format=%cn", &tip_b]), "Baton");
    assert_eq!(f.repo.log("baton/t1", 1).unwrap().len(), 1);
    assert!(f.status().is_empty());
}

#[test]
fn cherry_pick_of_the_same_patch_twice_is_already_applied() {
    let f = Fixture::new();
    f.repo.ensure_branch("baton/t1", &f.base).unwrap();
    let a = f.attempt("a", &f.base, &[("x.txt", "x\n")]);
    assert!(matches!(f.repo.cherry_pick_onto("baton/t1", &a.sha).unwrap(), PickOutcome::Applied { .. }));
    let tip = f.repo.branch_tip("baton/t1").unwrap();
    assert_eq!(f.repo.cherry_pick_onto("baton/t1", &a.sha).unwrap(), PickOutcome::AlreadyApplied);
    assert_eq!(f.repo.branch_tip("baton/t1").unwrap(), tip);
}

#[test]
fn conflicting_cherry_pick_reports_paths_and_leaves_branch_unmoved() {
    let f = Fixture::new();
    f.repo.ensure_branch("baton/t1", &f.base).unwrap();
    let a = f.attempt("a", &f.base, &[("a.txt", "1\n2\nA\n4\n5\n")]);
    let b = f.attempt("b", &f.base, &[("a.txt", "1\n2\nB\n4\n5\n"), ("z.txt", "z\n")]);
    f.repo.cherry_pick_onto("baton/t1", &a.sha).unwrap();
    let tip = f.repo.branch_tip("baton/t1").unwrap();
    assert_eq!(
        f.repo.cherry_pick_onto("baton/t1", &b.sha).unwrap(),
        PickOutcome::Conflict { paths: strings(&["a.txt"]) }
    );
    assert_eq!(f.repo.branch_tip("baton/t1").unwrap(), tip);
    assert!(f.status().is_empty());
}

#[test]
fn cherry_pick_refuses_to_move_a_checked_out_branch() {
    let f = Fixture::new();
    let a = f.attempt("a", &f.base, &[("x.txt", "x\n")]);
    let err = f.repo.cherry_pick_onto("main", &a.sha).unwrap_err();
    assert!(matches!(err, GitError::BranchCheckedOut { ref branch, .. } if branch == "main"), "{err}");
    assert_eq!(f.repo.resolve("main").unwrap(), f.base);
    let err = f.repo.set_ref("refs/heads/main", &a.sha).unwrap_err();
    assert!(matches!(err, GitError::BranchCheckedOut { .. }), "{err}");
}

#[test]
fn attempt_refs_coexist_with_the_task_branch() {
    let f = Fixture::new();
    assert_eq!(f.repo.branch_tip("baton/t1").unwrap(), None);
    f.repo.ensure_branch("baton/t1", &f.base).unwrap();
    let a = f.attempt("a", &f.base, &[("x.txt", "x\n")]);
    f.repo.set_ref("refs/baton/t1/s1/1", &a.sha).unwrap();
    f.repo.set_ref("refs/baton/t1/s1/2", &a.sha).unwrap();
    assert_eq!(f.repo.resolve("refs/baton/t1/s1/1").unwrap(), a.sha);
    assert_eq!(f.repo.branch_tip("baton/t1").unwrap(), Some(f.base.clone()));
    // ensure_branch never moves an existing branch.
    assert_eq!(f.repo.ensure_branch("baton/t1", &a.sha).unwrap(), f.base);

    f.repo.delete_ref("refs/baton/t1/s1/1").unwrap();
    f.repo.delete_ref("refs/baton/t1/s1/1").unwrap(); // missing: fine
    assert!(matches!(f.repo.resolve("refs/baton/t1/s1/1"), Err(GitError::UnknownRevision { .. })));
    assert_eq!(f.repo.resolve("refs/baton/t1/s1/2").unwrap(), a.sha);
    assert!(matches!(f.repo.set_ref("baton/t1/x", &a.sha), Err(GitError::InvalidRefName { .. })));
    assert!(matches!(f.repo.ensure_branch("bad..name", &f.base), Err(GitError::InvalidRefName { .. })));
}

#[test]
fn check_paths_matches_whole_components() {
    let files = strings(&["docs/a.md", "docsx/a.md", "docs", "src/lib.rs", "secrets/key", "README.md"]);
    let v = check_paths(&files, &strings(&["docs/", "src"]), &strings(&["src/lib.rs", "secrets"]));
    let got: Vec<String> = v.iter().map(ToString::to_string).collect();
    assert_eq!(
        got,
        strings(&[
            "docsx/a.md is outside the allowed paths",
            "src/lib.rs is under blocked path src/lib.rs",
            "secrets/key is under blocked path secrets",
            "README.md is outside the allowed paths",
        ])
    );
    assert_eq!(v[1].reason, ViolationReason::Blocked { prefix: "src/lib.rs".to_owned() });
    // `docs` and `docs/` mean the same; empty allowed means everything is allowed.
    assert!(check_paths(&strings(&["docs/a.md"]), &strings(&["docs"]), &[]).is_empty());
    assert!(check_paths(&files, &[], &[]).is_empty());
    assert!(check_paths(&strings(&["a/b"]), &strings(&["./a/"]), &[]).is_empty());
    assert_eq!(check_paths(&strings(&["docsx/a.md"]), &[], &strings(&["docs/"])), vec![]);
    assert_eq!(check_paths(&strings(&["x"]), &[], &strings(&["."])).len(), 1);
}

#[test]
fn uncommitted_changes_to_tracked_files_are_detected_and_untracked_files_are_not() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = crate::git::init_repository(&tmp.path().join("r"), &[("a.txt", "a\n")], "init").unwrap();
    assert!(!repo.has_uncommitted_changes().unwrap());
    std::fs::write(repo.root().join("new.txt"), "untracked").unwrap();
    assert!(!repo.has_uncommitted_changes().unwrap());
    std::fs::write(repo.root().join("a.txt"), "changed\n").unwrap();
    assert!(repo.has_uncommitted_changes().unwrap());
}

#[test]
fn a_stale_lock_of_an_attempt_ref_is_removed_and_any_other_lock_still_refuses() {
    // Seen under load: a driver killed while writing `refs/baton/<task>/<step>/<n>` left the
    // `.lock`, and the resumed driver failed the step "failed to lock file".
    let f = Fixture::new();
    let git_dir = f.repo.git_dir().to_path_buf();
    fs::create_dir_all(git_dir.join("refs/baton/t1/1.2")).unwrap();
    fs::write(git_dir.join("refs/baton/t1/1.2/1.lock"), "").unwrap();
    f.repo.set_ref("refs/baton/t1/1.2/1", &f.base).unwrap();
    assert_eq!(f.repo.resolve("refs/baton/t1/1.2/1").unwrap(), f.base);
    assert!(!git_dir.join("refs/baton/t1/1.2/1.lock").exists());

    fs::create_dir_all(git_dir.join("refs/tags")).unwrap();
    fs::write(git_dir.join("refs/tags/v1.lock"), "").unwrap();
    assert!(f.repo.set_ref("refs/tags/v1", &f.base).is_err(), "a user's ref lock is never removed");
    assert!(git_dir.join("refs/tags/v1.lock").exists());
}

/// Found by a fresh-clone run of the suite: `crash::kill_9_while_an_agent_runs_re_adopts_it`
/// killed the driver while it moved the feature branch, and the resumed driver failed both
/// steps with "failed to lock file '…/refs/heads/baton/adopt-1.lock'".
#[test]
fn a_stale_lock_of_a_feature_branch_is_removed_by_the_next_consolidation() {
    let f = Fixture::new();
    f.repo.ensure_branch("baton/t1", &f.base).unwrap();
    let a = f.attempt("a", &f.base, &[("x.txt", "x\n")]);
    let git_dir = f.repo.git_dir().to_path_buf();
    fs::write(git_dir.join("refs/heads/baton/t1.lock"), "").unwrap();
    let PickOutcome::Applied { new_tip } = f.repo.cherry_pick_onto("baton/t1", &a.sha).unwrap() else {
        panic!("a should apply");
    };
    assert_eq!(f.repo.branch_tip("baton/t1").unwrap(), Some(new_tip));
    assert!(!git_dir.join("refs/heads/baton/t1.lock").exists());

    f.repo.ensure_branch("feature", &f.base).unwrap();
    fs::write(git_dir.join("refs/heads/feature.lock"), "").unwrap();
    assert!(f.repo.cherry_pick_onto("feature", &a.sha).is_err(), "a user's branch lock is never removed");
    assert!(git_dir.join("refs/heads/feature.lock").exists());
}

/// Several executions of one repository add, list and remove worktrees whose directories share
/// a name (`<task>/1.1-1`) at the same moment: without one lock around git's worktree commands,
/// a prune deleted another add's half-made registration and `worktree add` or `list` failed.
#[test]
fn concurrent_worktree_adds_removes_and_lists_of_one_repository_all_succeed() {
    let f = Fixture::new();
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..6)
            .map(|task| {
                let (repo, base, dir) = (&f.repo, &f.base, f.wt(&format!("task-{task}")));
                scope.spawn(move || -> Result<(), GitError> {
                    for step in 0..8 {
                        let wt = dir.join(format!("1.{}-1", step % 3));
                        repo.add_worktree(&wt, base)?;
                        repo.list_worktrees()?;
                        repo.remove_worktree(&wt)?;
                    }
                    Ok(())
                })
            })
            .collect();
        for worker in workers {
            worker.join().unwrap().unwrap();
        }
    });
    assert!(f.repo.list_worktrees().unwrap().is_empty());
    assert!(f.repo.git_dir().join(super::worktree::WORKTREE_LOCK).exists(), "the lock file is in the common git dir");
}

/// Baton's worktree commands wait for the repository's worktree lock: while another process
/// holds it, no worktree is added; once it is released, the add goes through.
#[test]
fn a_worktree_add_waits_while_another_process_holds_the_worktree_lock() {
    let f = Fixture::new();
    let held = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(f.repo.git_dir().join(super::worktree::WORKTREE_LOCK))
        .unwrap();
    held.lock().unwrap();
    let wt = f.wt("t/1.1-1");
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::scope(|scope| {
        let (repo, base, target) = (&f.repo, &f.base, wt.clone());
        scope.spawn(move || done.send(repo.add_worktree(&target, base)).unwrap());
        // Without the lock the add finishes in a few milliseconds; a slow machine can only
        // make this wait pass, never fail.
        assert!(
            finished.recv_timeout(std::time::Duration::from_millis(500)).is_err(),
            "the add did not wait for the lock"
        );
        assert!(!wt.exists());
        held.unlock().unwrap();
        finished.recv().unwrap().unwrap();
    });
    assert!(wt.join("a.txt").exists());
}

/// A fixture whose `.gitignore` also ignores `.env`, `secrets/` and `outside`, with a fresh
/// worktree `wt` at the base.
fn env_fixture() -> (Fixture, PathBuf) {
    let f = Fixture::new();
    write(&f.root.join(".gitignore"), "target/\n.env\nsecrets/\noutside\nlinked/\n");
    git(&f.root, &["commit", "-q", "-am", "ignore env"]);
    let base = f.repo.resolve("HEAD").unwrap();
    let f = Fixture { base, ..f };
    let wt = f.wt("env");
    f.repo.add_worktree(&wt, &f.base).unwrap();
    (f, wt)
}

#[test]
fn worktree_env_copies_listed_ignored_files_only() {
    let (f, wt) = env_fixture();
    write(&f.root.join(".env"), "TOKEN=local\n");
    std::fs::set_permissions(f.root.join(".env"), std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    write(&f.root.join("secrets/db.toml"), "password = 'x'\n");
    write(&f.root.join("notes.txt"), "untracked, not ignored\n");
    write(&f.root.join("target/big.bin"), "not listed\n");
    // a.txt is tracked: listed, never copied over the worktree's own.
    write(&f.root.join(".worktreeinclude"), "# environment\n.env\nsecrets/\nnotes.txt\na.txt\n");
    let copy = f.repo.copy_worktree_env(&wt, &[]).unwrap();
    assert_eq!(copy.copied, strings(&[".env", "secrets/db.toml"]), "{copy:?}");
    assert_eq!(fs::read_to_string(wt.join(".env")).unwrap(), "TOKEN=local\n");
    let mode = std::os::unix::fs::PermissionsExt::mode(&fs::metadata(wt.join(".env")).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600, "the copy keeps the file's mode");
    assert_eq!(fs::read_to_string(wt.join("a.txt")).unwrap(), "1\n2\n3\n4\n5\n");
    assert!(!wt.join("notes.txt").exists(), "an untracked file git does not ignore is not copied");
    assert!(!wt.join("target").exists());
    assert!(copy.skipped.iter().any(|s| s.starts_with("a.txt: tracked by git")), "{copy:?}");
    assert!(copy.skipped.iter().any(|s| s.starts_with("notes.txt: not ignored by git")), "{copy:?}");
    // Patterns from baton.toml add to the file's; a second copy leaves what is there.
    write(&f.root.join("target/dev.toml"), "dev\n");
    let again = f.repo.copy_worktree_env(&wt, &strings(&["target/dev.toml"])).unwrap();
    assert_eq!(again.copied, strings(&["target/dev.toml"]), "{again:?}");
    assert!(again.skipped.iter().any(|s| s.starts_with(".env: already in the worktree")), "{again:?}");
    assert_eq!(f.status(), "?? .worktreeinclude\n?? notes.txt", "the checkout is only read");
}

#[test]
fn worktree_env_never_follows_a_symlink_nor_leaves_the_worktree() {
    let (f, wt) = env_fixture();
    let elsewhere = f.tmp.path().join("elsewhere");
    write(&elsewhere.join("secret"), "not yours\n");
    write(&elsewhere.join("db.toml"), "not yours either\n");
    std::os::unix::fs::symlink(elsewhere.join("secret"), f.root.join(".env")).unwrap();
    std::os::unix::fs::symlink(&elsewhere, f.root.join("linked")).unwrap();
    // `outside` next to the checkout, and one inside that `../` patterns must not reach.
    write(&f.tmp.path().join("outside"), "beside the checkout\n");
    write(&f.root.join(".worktreeinclude"), ".env\nlinked/\nlinked/db.toml\n../outside\n/../outside\n");
    let copy = f.repo.copy_worktree_env(&wt, &strings(&["../../outside"])).unwrap();
    assert!(copy.copied.is_empty(), "{copy:?}");
    assert!(copy.skipped.iter().any(|s| s == ".env: a symbolic link (never followed)"), "{copy:?}");
    assert!(fs::symlink_metadata(wt.join(".env")).is_err(), "nothing written for the symlinked .env");
    assert!(fs::symlink_metadata(wt.join("linked")).is_err(), "a symlinked directory is never entered");
    assert!(!wt.join("outside").exists() && !f.tmp.path().join("worktrees/outside").exists());
    assert_eq!(fs::read_to_string(f.tmp.path().join("outside")).unwrap(), "beside the checkout\n");
    // A .worktreeinclude that is itself a symlink is not read.
    fs::remove_file(f.root.join(".worktreeinclude")).unwrap();
    write(&elsewhere.join("include"), "outside\n");
    write(&f.root.join("outside"), "inside, ignored\n");
    std::os::unix::fs::symlink(elsewhere.join("include"), f.root.join(".worktreeinclude")).unwrap();
    let copy = f.repo.copy_worktree_env(&wt, &[]).unwrap();
    assert!(copy.copied.is_empty(), "{copy:?}");
    assert!(copy.skipped.iter().any(|s| s.contains("a symbolic link (not read)")), "{copy:?}");
    // The main checkout is never a destination.
    assert!(matches!(f.repo.copy_worktree_env(&f.root, &[]), Err(GitError::NotAWorktree { .. })));
}

#[test]
fn a_force_added_copied_file_is_kept_out_of_the_attempt_commit() {
    let (f, wt) = env_fixture();
    write(&f.root.join(".env"), "TOKEN=local\n");
    write(&f.root.join(".worktreeinclude"), ".env\n");
    let copy = f.repo.copy_worktree_env(&wt, &[]).unwrap();
    assert_eq!(copy.copied, strings(&[".env"]));
    // The agent's work, plus a `git add -f .env` and even a commit of it.
    write(&wt.join("b.txt"), "work\n");
    git(&wt, &["add", "-f", ".env", "b.txt"]);
    git(&wt, &["commit", "-q", "-m", "agent commit"]);
    let (commit, withheld) = f.repo.commit_worktree_without(&wt, &f.base, &agent(), "attempt\n", &copy.copied).unwrap();
    let commit = commit.expect("b.txt is a change");
    assert_eq!(withheld, strings(&[".env"]));
    assert_eq!(commit.files_changed, strings(&["b.txt"]));
    let tree = git(&f.root, &["ls-tree", "-r", "--name-only", &commit.sha]);
    assert!(!tree.lines().any(|l| l == ".env"), "{tree}");
    assert_eq!(fs::read_to_string(wt.join(".env")).unwrap(), "TOKEN=local\n", "the file itself stays");
    // Only the force-added file: no commit at all.
    let wt2 = f.wt("env2");
    f.repo.add_worktree(&wt2, &f.base).unwrap();
    f.repo.copy_worktree_env(&wt2, &[]).unwrap();
    git(&wt2, &["add", "-f", ".env"]);
    let (commit, withheld) =
        f.repo.commit_worktree_without(&wt2, &f.base, &agent(), "attempt\n", &copy.copied).unwrap();
    assert_eq!((commit, withheld), (None, strings(&[".env"])));
}
