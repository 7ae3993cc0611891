//! The forge's CI behind a `ci` gate without a command (issue 19.2): what the checks of the
//! pushed head commit say ([`verdict`]) and where they are read ([`read_checks`]: the
//! project's forge, through the `forge` clients).
//!
//! The driver (`runtime::driver::ci`) pushes the feature branch, journals `ci_started`, polls
//! with backoff and journals every change (`ci_checked`) and the verdict (`gate_recorded`);
//! everything it needs after a restart is in the journal. Which waiting gate a webhook
//! concerns is `runtime::ci_events`'. This module never touches HTTP, SQL or the journal, and
//! imports no other runtime service (the driver uses it).

use std::time::Duration;

use crate::forge::ado::AzureDevOps;
use crate::forge::github::GitHub;
use crate::forge::{ForgeError, ForgeSettings, RepoRef, RetryPolicy};
use crate::model::state::{CiCheck, CiCheckState};
use crate::model::text::cut;

/// What the checks say now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CiVerdict {
    /// Still running (or not reported yet, within the grace period and the timeout).
    Waiting,
    /// Every required check passed: the gate output.
    Passed(String),
    /// A required check failed, none were reported within the grace period, or the wait
    /// timed out: the gate output, naming what failed.
    Failed(String),
}

/// Minutes (or seconds when under two minutes) of a duration, for messages.
fn span(d: Duration) -> String {
    let secs = d.as_secs();
    if secs >= 120 {
        format!("{} min", secs / 60)
    } else {
        format!("{secs} s")
    }
}

/// `- name: summary` lines of `checks`.
fn lines(checks: &[&CiCheck]) -> String {
    checks
        .iter()
        .map(|c| {
            if c.summary.is_empty() {
                format!("- {}", c.name)
            } else {
                format!("- {}: {}", c.name, cut(&c.summary, 300))
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The verdict of `checks` of commit `sha` (see the module doc of `runtime::driver::ci` for
/// the rules): required = every reported check unless `required` names some; a failed
/// required check fails at once (naming every failed one with its summary); all required
/// passed passes; nothing reported after `grace` fails (`no CI checks reported for <sha>`);
/// `timed_out` with checks still running fails naming them; otherwise it waits.
pub fn verdict(
    sha: &str,
    checks: &[CiCheck],
    required: &[String],
    elapsed: Duration,
    grace: Duration,
    timed_out: bool,
    timeout: Duration,
) -> CiVerdict {
    let relevant: Vec<&CiCheck> = if required.is_empty() {
        checks.iter().collect()
    } else {
        checks.iter().filter(|c| required.iter().any(|r| r == &c.name)).collect()
    };
    let missing: Vec<&str> =
        required.iter().filter(|r| !checks.iter().any(|c| &c.name == *r)).map(String::as_str).collect();
    let failed: Vec<&CiCheck> = relevant.iter().copied().filter(|c| c.state == CiCheckState::Failed).collect();
    if !failed.is_empty() {
        return CiVerdict::Failed(format!(
            "CI failed for {sha}: {} of {} checks failed\n{}\n",
            failed.len(),
            relevant.len(),
            lines(&failed)
        ));
    }
    let pending: Vec<&CiCheck> = relevant.iter().copied().filter(|c| c.state == CiCheckState::Pending).collect();
    if checks.is_empty() && required.is_empty() {
        if elapsed >= grace || timed_out {
            return CiVerdict::Failed(format!(
                "no CI checks reported for {sha} within {} of the push: is CI set up for this branch?\n",
                span(grace.min(elapsed.max(grace)))
            ));
        }
        return CiVerdict::Waiting;
    }
    if pending.is_empty() && missing.is_empty() {
        let names: Vec<&str> = relevant.iter().map(|c| c.name.as_str()).collect();
        return CiVerdict::Passed(format!(
            "CI passed for {sha}: {} checks passed ({})\n",
            relevant.len(),
            cut(&names.join(", "), 1000)
        ));
    }
    if timed_out {
        let mut out = format!(
            "CI timed out after {} waiting for {sha}: {} of {} checks done",
            span(timeout),
            relevant.len() - pending.len(),
            relevant.len()
        );
        if !pending.is_empty() {
            out.push_str(&format!(
                "; still running: {}",
                pending.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", ")
            ));
        }
        if !missing.is_empty() {
            out.push_str(&format!("; required but never reported: {}", missing.join(", ")));
        }
        out.push('\n');
        return CiVerdict::Failed(out);
    }
    CiVerdict::Waiting
}

/// The checks of commit `sha` (pushed as `branch`) on the forge `forge_repo` names
/// (`github:owner/repo`, `ado:org/project/repo`), with the credentials and addresses of
/// `settings`.
///
/// Errors: a `forge_repo` that is no repository reference; any [`ForgeError`] of the calls.
pub async fn read_checks(
    settings: &ForgeSettings,
    forge_repo: &str,
    branch: &str,
    sha: &str,
) -> Result<Vec<CiCheck>, ForgeError> {
    let policy = RetryPolicy::default();
    match RepoRef::parse(forge_repo)? {
        RepoRef::GitHub { owner, repo } => GitHub::new(settings, policy)?.commit_checks(&owner, &repo, sha).await,
        RepoRef::Ado { org, project, repository } => {
            AzureDevOps::new(settings, policy)?.commit_checks(&org, &project, &repository, branch, sha).await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(name: &str, state: CiCheckState, summary: &str) -> CiCheck {
        CiCheck { name: name.into(), state, summary: summary.into() }
    }

    const MIN: Duration = Duration::from_secs(60);

    #[test]
    fn all_passed_passes_a_failed_one_fails_naming_it_and_running_ones_wait() {
        let sha = "abc1234";
        let pass = [check("build", CiCheckState::Passed, ""), check("lint", CiCheckState::Passed, "")];
        assert!(
            matches!(verdict(sha, &pass, &[], MIN, MIN, false, MIN), CiVerdict::Passed(t) if t.contains("2 checks passed"))
        );
        let fail = [check("build", CiCheckState::Passed, ""), check("lint", CiCheckState::Failed, "2 errors")];
        let CiVerdict::Failed(text) = verdict(sha, &fail, &[], MIN, MIN, false, MIN) else { panic!() };
        assert!(text.contains("1 of 2 checks failed") && text.contains("- lint: 2 errors"), "{text}");
        let running = [check("build", CiCheckState::Pending, ""), check("lint", CiCheckState::Passed, "")];
        assert_eq!(verdict(sha, &running, &[], MIN, MIN, false, MIN), CiVerdict::Waiting);
        let CiVerdict::Failed(text) = verdict(sha, &running, &[], MIN * 61, MIN, true, MIN * 60) else { panic!() };
        assert!(text.contains("CI timed out after 60 min") && text.contains("still running: build"), "{text}");
    }

    #[test]
    fn no_checks_wait_for_the_grace_period_then_fail() {
        assert_eq!(verdict("abc1234", &[], &[], MIN, MIN * 5, false, MIN * 60), CiVerdict::Waiting);
        let CiVerdict::Failed(text) = verdict("abc1234", &[], &[], MIN * 5, MIN * 5, false, MIN * 60) else { panic!() };
        assert!(text.contains("no CI checks reported for abc1234"), "{text}");
    }

    #[test]
    fn required_checks_decide_alone() {
        let checks = [check("build", CiCheckState::Passed, ""), check("flaky", CiCheckState::Failed, "")];
        let required = vec!["build".to_string()];
        assert!(matches!(verdict("abc1234", &checks, &required, MIN, MIN, false, MIN), CiVerdict::Passed(_)));
        let required = vec!["build".to_string(), "deploy".to_string()];
        assert_eq!(verdict("abc1234", &checks, &required, MIN, MIN, false, MIN), CiVerdict::Waiting);
        let CiVerdict::Failed(text) = verdict("abc1234", &checks, &required, MIN, MIN, true, MIN) else { panic!() };
        assert!(text.contains("required but never reported: deploy"), "{text}");
    }
}
