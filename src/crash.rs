//! Test hooks that kill the process at a numbered or named point, so tests can prove that a run
//! survives a crash anywhere (issue 15.9). Never used in production: the hooks are compiled
//! only into debug builds (`cfg(debug_assertions)`, what `cargo test` builds); a release build
//! ignores the variables entirely, and with them unset a hook costs one load of a
//! once-initialised value.
//!
//! - `BATON_CRASH_AFTER_COMMIT=k`: the process SIGKILLs itself right after its k-th durable
//!   commit to the store (each write transaction and each group commit of journal appends;
//!   `store` calls [`committed`](crate::crash::committed)).
//! - `BATON_CRASH_BEFORE_EFFECT=k`: the process SIGKILLs itself right before its k-th git or
//!   forge side effect (a worktree added or removed, an attempt commit, a ref set or deleted, a
//!   cherry-pick, a branch created or pushed, a pull request opened, a comment posted; `git`
//!   and `forge` call [`before_effect`](crate::crash::before_effect)).
//!
//! - `BATON_CRASH_AT=<point>`: the driver exits (status 137, as a kill would) at one of the
//!   [`CRASH_POINTS`](crate::crash::CRASH_POINTS) it names
//!   ([`at_point`](crate::crash::at_point)); unlike the numbered hooks it works in every build.
//!
//! Counting is per process, from 1. The kill is `SIGKILL` on itself: no destructor, no flush,
//! no lock release, exactly like `kill -9`. The attempt shims and agents a driver starts do
//! not inherit the variables (the launch removes them). This module owns the counters and the
//! kill; it never decides anything else and imports nothing from the crate.

/// Variable naming the durable commit after which the process kills itself.
pub const AFTER_COMMIT_VAR: &str = "BATON_CRASH_AFTER_COMMIT";
/// Variable naming the git or forge side effect before which the process kills itself.
pub const BEFORE_EFFECT_VAR: &str = "BATON_CRASH_BEFORE_EFFECT";

#[cfg(debug_assertions)]
mod hook {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;

    /// One numbered kill point: the k read from its variable once, and the count so far.
    pub(super) struct Point {
        var: &'static str,
        at: OnceLock<Option<u64>>,
        count: AtomicU64,
    }

    impl Point {
        pub(super) const fn new(var: &'static str) -> Point {
            Point { var, at: OnceLock::new(), count: AtomicU64::new(0) }
        }

        /// Counts one more; kills the process when that is the k-th.
        pub(super) fn hit(&self, what: &str) {
            let Some(k) = *self.at.get_or_init(|| std::env::var(self.var).ok().and_then(|v| v.trim().parse().ok()))
            else {
                return;
            };
            if self.count.fetch_add(1, Ordering::SeqCst) + 1 == k {
                eprintln!("crashing ({}={k}) at {what}", self.var);
                let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
                std::process::abort();
            }
        }
    }

    pub(super) static COMMITS: Point = Point::new(super::AFTER_COMMIT_VAR);
    pub(super) static EFFECTS: Point = Point::new(super::BEFORE_EFFECT_VAR);
}

/// Called by the store right after a durable commit: the test hook of
/// [`AFTER_COMMIT_VAR`] (a no-op in release builds and when unset).
#[inline]
pub fn committed() {
    #[cfg(debug_assertions)]
    hook::COMMITS.hit("a store commit");
}

/// Called by `git` and `forge` right before a side effect (`what` names it for the log): the
/// test hook of [`BEFORE_EFFECT_VAR`] (a no-op in release builds and when unset).
#[inline]
pub fn before_effect(what: &str) {
    #[cfg(debug_assertions)]
    hook::EFFECTS.hit(what);
    #[cfg(not(debug_assertions))]
    let _ = what;
}

/// Named crash points of the driver (`BATON_CRASH_AT`): after a dispatch is journaled but
/// before the launch; after the launch; after an attempt's commit is on the feature branch
/// but before its result is recorded; after a result is recorded; after a gate ran but before
/// its result is recorded.
pub const CRASH_POINTS: &[&str] =
    &["after-dispatch", "after-launch", "after-consolidate", "after-record", "before-gate-record"];

/// Exits the process (status 137, as a kill would) when `BATON_CRASH_AT` names `name`.
pub fn at_point(name: &str) {
    if std::env::var("BATON_CRASH_AT").is_ok_and(|v| v == name) {
        tracing::warn!(crash.point = name, "crashing at {name} (BATON_CRASH_AT)");
        std::process::exit(137);
    }
}
