//! The whole loop on PostgreSQL (issue 17): the real `baton` binary with `BATON_DATABASE_URL`
//! naming a fresh database of the test cluster, real worktrees and the demo agent. The
//! store's own contract tests run on both backends in `src/store/tests.rs`.

use crate::common::*;

#[test]
fn the_demo_runs_to_complete_on_postgres_and_its_journal_replays_and_verifies() {
    let Some(url) = postgres_database() else { return };
    let ws = Workspace::with_repo(&[("x", "x")]);
    let run = |args: &[&str]| ws.baton().env("BATON_DATABASE_URL", &url).args(args).output().unwrap();
    let out = run(&["demo"]);
    assert_eq!(code(&out), 0, "{}\n{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("ACTION: COMPLETE"), "{text}");
    let branch = text.lines().find_map(|l| l.strip_prefix("Feature branch: ")).unwrap().trim().to_string();
    let task_id = branch.strip_prefix("baton/").unwrap();
    assert!(!ws.data().join("baton.db").exists(), "the store is PostgreSQL: no SQLite file was made");

    let replay = run(&["replay", task_id]);
    assert_eq!(code(&replay), 0, "{}\n{}", stdout(&replay), stderr(&replay));
    assert!(stdout(&replay).contains("state matches the stored snapshot + journal: yes"), "{}", stdout(&replay));
    let audit = run(&["audit", "verify", task_id]);
    assert_eq!(code(&audit), 0, "{}\n{}", stdout(&audit), stderr(&audit));
    assert!(stdout(&audit).contains("hash chain intact"), "{}", stdout(&audit));

    // The same data directory without the URL is a new, empty SQLite store.
    let sqlite = ws.run(&["audit", "verify", task_id]);
    assert_ne!(code(&sqlite), 0, "{}", stdout(&sqlite));
}

#[test]
fn a_database_url_that_is_not_postgres_fails_at_start_naming_it() {
    let ws = Workspace::with_repo(&[("x", "x")]);
    let out = ws.baton().env("BATON_DATABASE_URL", "mysql://root:hunter2@db/baton").args(["demo"]).output().unwrap();
    assert_ne!(code(&out), 0);
    let err = stderr(&out);
    assert!(err.contains("mysql://root:***@db/baton") && !err.contains("hunter2"), "{err}");
}
