//! Where a command's printed output goes: the process's stdout and stderr, or, while a
//! command runs for a client of the CLI relay (`baton serve` answering a `baton execute …`
//! call made in another process), a buffer sent back to that client.
//!
//! Owns the task-local capture ([`capture`]) and the two writers the crate's `outln!`, `out!`
//! and `errln!` macros go through ([`stdout`], [`stderr_line`]). It never decides what is
//! printed, and never captures output of tasks spawned by the captured one (those print to the
//! process's own streams).

use std::cell::RefCell;
use std::future::Future;
use std::io::Write as _;

/// What a captured command printed: stdout and stderr, UTF-8, in the order written.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Captured {
    /// Everything written through `outln!` / `out!`.
    pub stdout: String,
    /// Every `errln!` line, each ending in `\n`.
    pub stderr: String,
}

tokio::task_local! {
    static CAPTURE: RefCell<Captured>;
}

/// Runs `f` with its `outln!`, `out!` and `errln!` output captured instead of printed, and
/// returns its result with what it printed.
pub async fn capture<F: Future>(f: F) -> (F::Output, Captured) {
    CAPTURE
        .scope(RefCell::new(Captured::default()), async move {
            let out = f.await;
            let captured = CAPTURE.with(|c| std::mem::take(&mut *c.borrow_mut()));
            (out, captured)
        })
        .await
}

/// `text` as a terminal may show it: every control character but a line break, a carriage
/// return and a tab written escaped (`\u{1b}`, `\u{0}`). What Baton prints holds text from
/// plans, agents and webhooks (a phase name, an outcome, an id in an error): an escape
/// sequence in it must not reach the terminal (a fresh-user tester's phase name with a NUL,
/// an outcome that cleared the screen). JSON output has none to escape.
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    let keep = |c: char| !c.is_control() || matches!(c, '\n' | '\r' | '\t');
    if text.chars().all(keep) {
        return text.into();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if keep(c) {
            out.push(c);
        } else {
            use std::fmt::Write as _;
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        }
    }
    out.into()
}

/// Writes `args` to stdout, or to the current capture, [`printable`]; a closed pipe (`baton …
/// | head`) is ignored rather than a panic.
pub fn stdout(args: std::fmt::Arguments<'_>) {
    let text = match args.as_str() {
        Some(text) => std::borrow::Cow::Borrowed(text),
        None => std::borrow::Cow::Owned(args.to_string()),
    };
    let text = printable(&text);
    let captured = CAPTURE.try_with(|c| c.borrow_mut().stdout.push_str(&text));
    if captured.is_err() {
        let _ = std::io::stdout().lock().write_all(text.as_bytes());
    }
}

/// Appends `line` (and a newline) to the current capture's stderr; false when no capture is
/// running (the caller prints it itself).
pub fn stderr_line(line: &str) -> bool {
    CAPTURE
        .try_with(|c| {
            let mut c = c.borrow_mut();
            c.stderr.push_str(line);
            c.stderr.push('\n');
        })
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_captured_command_prints_into_its_buffer_and_nothing_leaks_after_it() {
        let (value, got) = capture(async {
            outln!("action: {}", 1);
            out!("no newline");
            errln!("a notice");
            7
        })
        .await;
        assert_eq!(value, 7);
        assert_eq!(got.stdout, "action: 1\nno newline");
        assert_eq!(got.stderr, "a notice\n");
        assert!(!stderr_line("outside any capture"), "no capture runs after the scope ended");
    }

    #[tokio::test]
    async fn two_commands_captured_at_once_keep_their_own_output() {
        let a = capture(async {
            tokio::task::yield_now().await;
            outln!("from a");
        });
        let b = capture(async {
            outln!("from b");
            tokio::task::yield_now().await;
        });
        let ((_, a), (_, b)) = tokio::join!(a, b);
        assert_eq!(a.stdout, "from a\n");
        assert_eq!(b.stdout, "from b\n");
    }

    #[tokio::test]
    async fn control_characters_but_line_breaks_and_tabs_are_printed_escaped() {
        let (_, got) = capture(async {
            outln!("phase {}", "P\x1b[2J\x00\u{9b}x\ty");
            out!("plain");
            crate::runtime::progress("error: --as a\x1b[31mred");
        })
        .await;
        assert_eq!(got.stdout, "phase P\\u{1b}[2J\\u{0}\\u{9b}x\ty\nplain");
        assert_eq!(got.stderr, "error: --as a\\u{1b}[31mred\n");
        assert_eq!(printable("line\r\nnext"), "line\r\nnext");
    }
}
