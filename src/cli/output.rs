//! Exit codes and the printing of actions: the `ACTION:` text form (or JSON) of an action, how
//! a run ended, and the exit code an action or an error implies. It never decides anything
//! and never opens the data directory.

use std::process::ExitCode;

use super::wire;
use crate::engine::EngineError;
use crate::model::action::{Action, ActionType};
use crate::runtime;
use crate::runtime::ops::OpsError;
use crate::runtime::BadInput;
use crate::store::StoreError;

/// Exit code: waiting for a human decision.
pub const EXIT_WAITING: u8 = 3;
/// Exit code: the execution failed.
pub const EXIT_FAILED: u8 = 4;
/// Exit code: usage error or bad input.
pub const EXIT_BAD_INPUT: u8 = 2;

/// Prints an action (text or JSON) and returns the exit code it implies.
pub fn print_action(action: &Action, task_id: &str, json: bool) -> ExitCode {
    if json {
        outln!("{}", serde_json::to_string_pretty(action).unwrap_or_default());
    } else {
        out!("{}", wire::render(action, task_id));
    }
    exit_for(action)
}

/// Prints how a run ended (the action, and the feature branch when complete).
pub fn print_outcome(outcome: &runtime::driver::RunOutcome, json: bool) -> ExitCode {
    let code = print_action(&outcome.action, &outcome.task_id, json);
    if !json && outcome.action.action_type() == ActionType::Complete {
        outln!("Feature branch: {}", outcome.branch);
    }
    code
}

/// Exit code implied by an action: 3 for a human decision, 4 for FAILED, else 0.
pub fn exit_for(action: &Action) -> ExitCode {
    match action.action_type() {
        ActionType::Approval | ActionType::Feedback | ActionType::Interact | ActionType::Budget => {
            ExitCode::from(EXIT_WAITING)
        }
        ActionType::Failed => ExitCode::from(EXIT_FAILED),
        ActionType::Dispatch | ActionType::Gate | ActionType::Wait | ActionType::Complete | ActionType::Checkpoint => {
            ExitCode::SUCCESS
        }
    }
}

/// A command's exit code from its result: its own verdict (`ExitCode` from the command), or
/// for an error, [`exit_code_of`] after printing it (`error: …` on stderr, and with `--json`
/// also `{"error", "exit_code"}` on stdout, so a script reads the failure there too).
pub(super) fn conclude(result: anyhow::Result<ExitCode>, json: bool) -> u8 {
    match result {
        // `ExitCode` hides its number; it is one of 256.
        Ok(code) => (0..=u8::MAX).find(|&k| ExitCode::from(k) == code).unwrap_or(1),
        Err(e) => {
            let text = error_text(&e);
            errln!("error: {text}");
            let code = exit_code_of(&e);
            if json {
                outln!("{}", serde_json::json!({ "error": text, "exit_code": code }));
            }
            code
        }
    }
}

/// `e` and its causes on one line, `what failed: why: root cause`, leaving out a cause whose
/// text the link before it already ends with. Some errors print their source inside their
/// own text (sqlx's "error communicating with database: {io error}", an `io::Error` wrapping
/// rustls's), and anyhow's `{:#}` then repeated it: "…: invalid peer certificate:
/// UnknownIssuer: invalid peer certificate: UnknownIssuer".
pub(super) fn error_text(e: &anyhow::Error) -> String {
    let mut text = String::new();
    let mut previous = String::new();
    for cause in e.chain() {
        let link = cause.to_string();
        if text.is_empty() {
            text.push_str(&link);
        } else if !previous.ends_with(&link) {
            text.push_str(": ");
            text.push_str(&link);
        }
        previous = link;
    }
    text
}

/// 2 for a client's mistake, 130 for an interrupted run, 1 for anything else.
pub(super) fn exit_code_of(e: &anyhow::Error) -> u8 {
    for cause in e.chain() {
        if cause.is::<runtime::driver::Interrupted>() {
            return 130;
        }
        if cause.is::<runtime::driver::Parked>() {
            return EXIT_WAITING;
        }
        if let Some(refused) = cause.downcast_ref::<OpsError>() {
            return match refused {
                OpsError::Internal(inner) => exit_code_of(inner),
                _ => EXIT_BAD_INPUT,
            };
        }
        if cause.is::<BadInput>() || cause.is::<EngineError>() || cause.is::<crate::git::GitError>() {
            return EXIT_BAD_INPUT;
        }
        if let Some(s) = cause.downcast_ref::<StoreError>() {
            if matches!(
                s,
                StoreError::NotFound { .. } | StoreError::AlreadyExists { .. } | StoreError::LeaseHeld { .. }
            ) {
                return EXIT_BAD_INPUT;
            }
        }
    }
    1
}

#[cfg(test)]
mod tests {
    use super::error_text;

    /// An error that prints its source inside its own text, as sqlx's I/O error does.
    #[derive(Debug)]
    struct Wraps(std::io::Error);
    impl std::fmt::Display for Wraps {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "error communicating with database: {}", self.0)
        }
    }
    impl std::error::Error for Wraps {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn a_cause_already_printed_by_the_error_before_it_is_not_repeated() {
        let io = std::io::Error::other("invalid peer certificate: UnknownIssuer");
        let e = anyhow::Error::new(Wraps(io)).context("connecting to postgres://baton:***@db/baton");
        assert_eq!(
            error_text(&e),
            "connecting to postgres://baton:***@db/baton: error communicating with database: \
             invalid peer certificate: UnknownIssuer"
        );
        // `{:#}` repeated it.
        assert!(format!("{e:#}").ends_with("UnknownIssuer: invalid peer certificate: UnknownIssuer"));
    }

    #[test]
    fn causes_that_do_not_repeat_each_other_are_all_printed() {
        let e = anyhow::anyhow!("root cause").context("middle").context("what failed");
        assert_eq!(error_text(&e), "what failed: middle: root cause");
    }
}
