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

/// Hosted PostgreSQL services require or expect TLS. With `sslmode=verify-full` and the CA
/// that signed the server's certificate, the whole loop runs; without that CA (the system's
/// roots do not hold the test cluster's), the connection is refused and the error says why,
/// once.
#[test]
fn the_store_reaches_postgres_over_tls_and_verifies_the_servers_certificate() {
    let Some(url) = postgres_database() else { return };
    let Some(ca) = postgres_ca() else { return };
    let ws = Workspace::with_repo(&[("x", "x")]);
    let verified = with_query(&url, &[("sslmode", "verify-full"), ("sslrootcert", ca.to_str().unwrap())]);
    let out = ws.baton().env("BATON_DATABASE_URL", &verified).args(["demo"]).output().unwrap();
    assert_eq!(code(&out), 0, "{}\n{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("ACTION: COMPLETE"), "{}", stdout(&out));

    let unverified = with_query(&url, &[("sslmode", "verify-full")]);
    let out = ws.baton().env("BATON_DATABASE_URL", &unverified).args(["execute", "list"]).output().unwrap();
    assert_eq!(code(&out), 1, "{}", stdout(&out));
    let err = stderr(&out);
    assert_eq!(err.matches("invalid peer certificate: UnknownIssuer").count(), 1, "{err}");
    assert!(err.contains("sslmode=verify-full"), "the URL is named: {err}");
}

#[test]
fn a_database_url_with_an_unknown_sslmode_fails_at_start_naming_it_once() {
    let ws = Workspace::with_repo(&[("x", "x")]);
    let url = "postgres://baton:hunter2@127.0.0.1:1/baton?sslmode=bogus";
    let out = ws.baton().env("BATON_DATABASE_URL", url).args(["execute", "list"]).output().unwrap();
    assert_ne!(code(&out), 0);
    let err = stderr(&out);
    assert!(
        err.contains("database url \"postgres://baton:***@127.0.0.1:1/baton?sslmode=bogus\": unknown value \"bogus\" for `ssl_mode`"),
        "{err}"
    );
    assert!(!err.contains("hunter2") && !err.contains("error with configuration"), "{err}");
}
