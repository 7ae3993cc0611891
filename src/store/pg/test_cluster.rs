//! Test support: a fresh, empty database per test on the PostgreSQL cluster that
//! `BATON_TEST_DATABASE_URL` names (`scripts/test` starts a throwaway one). Compiled only into
//! tests: the store's unit tests (`store::pg::testing`) and the integration tests
//! (`tests/it/common.rs`, which includes this file by path). It never touches a database whose
//! name it did not make.
//!
//! Each database is named `<prefix>_<pid>_<n>`. A test process cannot drop its database as it
//! exits (nextest ends it as soon as the test returns), so every new database first sweeps away
//! those whose process is gone: a developer's long-lived cluster stays the size of the tests
//! running now, not of every run since it started.

use std::sync::atomic::{AtomicU64, Ordering};

use sqlx::Connection as _;

/// Databases this process made, for unique names.
static MADE: AtomicU64 = AtomicU64::new(0);

/// The URL of a new, empty database named `<prefix>_<pid>_<n>` on the test cluster, or `None`
/// when there is no cluster: allowed only outside CI (`CI=true` makes it a failure), with a loud
/// message on stderr.
///
/// # Panics
/// Under `CI=true` without `BATON_TEST_DATABASE_URL`, or when the cluster refuses a connection
/// or the `create database`.
pub(super) async fn fresh_database(prefix: &str) -> Option<String> {
    let Some(base) = std::env::var("BATON_TEST_DATABASE_URL").ok().filter(|u| !u.is_empty()) else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "BATON_TEST_DATABASE_URL is not set: under CI the PostgreSQL tests must run \
             (scripts/test starts a throwaway cluster and sets it)"
        );
        eprintln!(
            "SKIPPED ON POSTGRESQL: BATON_TEST_DATABASE_URL is not set (run scripts/test, which starts a \
             throwaway cluster, or point it at one)"
        );
        return None;
    };
    let name = format!("{prefix}_{}_{}", std::process::id(), MADE.fetch_add(1, Ordering::Relaxed));
    let mut admin = sqlx::PgConnection::connect(&base).await.expect("connecting to BATON_TEST_DATABASE_URL");
    drop_orphans(&mut admin, prefix).await;
    sqlx::query(&format!("drop database if exists {name}")).execute(&mut admin).await.expect("dropping");
    sqlx::query(&format!("create database {name}")).execute(&mut admin).await.expect("creating");
    admin.close().await.expect("closing");
    let mut url = url::Url::parse(&base).expect("BATON_TEST_DATABASE_URL is a URL");
    url.set_path(&name);
    Some(url.to_string())
}

/// Drops every `<prefix>_<pid>_<n>` database whose process no longer exists. Best effort: a
/// database still in use (or being dropped by another test at the same moment) is left for a
/// later sweep.
async fn drop_orphans(admin: &mut sqlx::PgConnection, prefix: &str) {
    let names: Vec<String> = sqlx::query_scalar("select datname from pg_database where starts_with(datname, $1)")
        .bind(format!("{prefix}_"))
        .fetch_all(&mut *admin)
        .await
        .unwrap_or_default();
    for name in names {
        if orphan_pid(&name, prefix).is_some_and(|pid| !process_exists(pid)) {
            let _ = sqlx::query(&format!("drop database if exists {name}")).execute(&mut *admin).await;
        }
    }
}

/// The process id in a name this module made (`<prefix>_<pid>_<n>`), or `None` for any other
/// name.
fn orphan_pid(name: &str, prefix: &str) -> Option<i32> {
    let rest = name.strip_prefix(prefix)?.strip_prefix('_')?;
    let (pid, n) = rest.split_once('_')?;
    n.parse::<u64>().ok()?;
    pid.parse::<i32>().ok().filter(|pid| *pid > 0)
}

/// Whether a process with this id exists (signal 0 checks without sending anything; a process
/// of another user still counts as existing).
fn process_exists(pid: i32) -> bool {
    !matches!(nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None), Err(nix::errno::Errno::ESRCH))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_names_this_module_makes_yield_a_pid() {
        assert_eq!(orphan_pid("baton_it_4242_7", "baton_it"), Some(4242));
        assert_eq!(orphan_pid("baton_it_4242", "baton_it"), None);
        assert_eq!(orphan_pid("baton_it_x_1", "baton_it"), None);
        assert_eq!(orphan_pid("baton_unit_4242_1", "baton_it"), None);
        assert_eq!(orphan_pid("baton_it_0_1", "baton_it"), None);
        assert_eq!(orphan_pid("postgres", "baton_it"), None);
    }

    #[test]
    fn this_process_exists_and_a_reaped_child_does_not() {
        assert!(process_exists(std::process::id() as i32));
        let mut child = std::process::Command::new("true").spawn().expect("spawning true");
        let pid = child.id() as i32;
        child.wait().expect("waiting for true");
        assert!(!process_exists(pid));
    }
}
