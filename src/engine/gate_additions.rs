//! `GATE_ADDITION:` lines of an agent's outcome: the extra checks an agent proposes for its
//! phase's gate, filtered for safety (seed-spec §2.7) before the gate runs any of them.
//!
//! Pure: the engine applies [`parse`] to a recorded outcome, so replaying the journal gives the
//! same additions. It never runs a command; the driver runs each accepted addition as its own
//! argv (split like a shell would, never through a shell).

pub use crate::model::state::RejectedAddition;

/// Accepted additions per step, at most.
pub const MAX_PER_STEP: usize = 8;

/// Longest accepted addition, characters.
pub const MAX_CHARS: usize = 256;

/// The additions of `outcome`: lines starting (case-insensitively, after leading spaces) with
/// `GATE_ADDITION:`, their command trimmed; empty ones dropped; duplicates dropped (the first
/// wins); each checked by [`check`]; at most [`MAX_PER_STEP`] accepted, in order. Returns
/// (accepted, rejected with reasons).
pub fn parse(outcome: &str) -> (Vec<String>, Vec<RejectedAddition>) {
    const PREFIX: &str = "gate_addition:";
    let mut accepted: Vec<String> = Vec::new();
    let mut rejected = Vec::new();
    for line in outcome.lines() {
        let line = line.trim_start();
        let Some(head) = line.get(..PREFIX.len()) else { continue };
        if !head.eq_ignore_ascii_case(PREFIX) {
            continue;
        }
        let command = line[PREFIX.len()..].trim();
        if command.is_empty() || accepted.iter().any(|a| a == command) {
            continue;
        }
        let reject = |reason: String| RejectedAddition { command: command.chars().take(300).collect(), reason };
        if let Err(reason) = check(command) {
            rejected.push(reject(reason));
        } else if accepted.len() >= MAX_PER_STEP {
            rejected.push(reject(format!("more than {MAX_PER_STEP} additions from one step")));
        } else {
            accepted.push(command.to_string());
        }
    }
    (accepted, rejected)
}

/// Shell metacharacters an addition may not hold (it runs as one argv, so chaining,
/// redirection and substitution would only mislead).
pub const METACHARACTERS: [&str; 11] = [";", "&&", "||", "|", ">", "<", "`", "$(", "&", "\n", "\r"];

/// Whether `command` may run as a gate addition: at most [`MAX_CHARS`] characters, no NUL or
/// [`METACHARACTERS`], splittable into words, and none of the destructive patterns (by words,
/// so `format` is not `rm -f`): `rm` with `-r`/`-f`/`--recursive`/`--force`, `chmod -R`,
/// `chmod 777`, `chown -R`, `dd if=…`, `mkfs*`, `sudo`, `aws s3 rm`, `terraform apply
/// -auto-approve`, `git push --force`/`-f`, `git reset --hard`; no shell or interpreter with
/// inline code as the program (also behind `env`, `timeout`, …), no `xargs`/`eval`, no `find`
/// that deletes or runs commands, no `git clean`, no process killing; and no word that
/// reaches outside the worktree (absolute, `~` or `..` paths).
///
/// Errors: the reason, naming what was found.
pub fn check(command: &str) -> Result<(), String> {
    if command.chars().count() > MAX_CHARS {
        return Err(format!("longer than {MAX_CHARS} characters"));
    }
    if command.contains('\0') {
        return Err("contains a NUL character".into());
    }
    if let Some(m) = METACHARACTERS.iter().find(|m| command.contains(**m)) {
        return Err(format!("contains the shell metacharacter {:?}", m));
    }
    let words = split(command).ok_or_else(|| "cannot be split into words (an unclosed quote)".to_string())?;
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    // Quotes would carry anything past the word checks into an interpreter, and a path can
    // reach outside the worktree the gate runs in (found by a tester: `sh -c "rm -rf /x"`
    // and `find /x -delete` were accepted and ran).
    for i in program_positions(&words) {
        let name = words[i].rsplit('/').next().unwrap_or(words[i]);
        let rest = &words[i + 1..];
        let inline = |flags: &[&str]| rest.iter().any(|a| flags.contains(a));
        let refused = match name {
            "sh" | "bash" | "zsh" | "dash" | "ksh" | "fish" | "csh" | "tcsh" | "busybox" | "pwsh" | "powershell" => {
                Some("runs a shell")
            }
            n if (n.starts_with("python") && inline(&["-c"]))
                || ((n == "perl" || n == "ruby") && inline(&["-e", "-E"]))
                || ((n == "node" || n == "deno" || n == "bun") && inline(&["-e", "--eval", "-p", "--print"]))
                || (n == "php" && inline(&["-r"])) =>
            {
                Some("runs inline code")
            }
            "xargs" | "eval" | "exec" | "source" | "." => Some("runs other commands"),
            "find" if inline(&["-delete", "-exec", "-execdir", "-ok", "-okdir"]) => {
                Some("deletes or runs commands (find)")
            }
            "git" if rest.first() == Some(&"clean") => Some("deletes untracked files (git clean)"),
            "shred" | "truncate" | "kill" | "pkill" | "killall" | "shutdown" | "reboot" | "halt" | "poweroff" => {
                Some("destroys data or stops processes")
            }
            _ => None,
        };
        if let Some(why) = refused {
            return Err(format!("destructive: {why}"));
        }
    }
    let program = |w: &str| w.rsplit('/').next().unwrap_or(w).to_string();
    let has = |w: &str| words.contains(&w);
    for (i, word) in words.iter().enumerate() {
        let name = program(word);
        let rest = &words[i + 1..];
        let flag = |short: char, long: &str| {
            rest.iter().any(|a| *a == long || (a.starts_with('-') && !a.starts_with("--") && a.contains(short)))
        };
        let destructive = match name.as_str() {
            "sudo" | "doas" => Some("runs as root"),
            "rm" if flag('r', "--recursive") || flag('R', "--recursive") || flag('f', "--force") => {
                Some("removes files recursively or by force")
            }
            "chmod" if rest.iter().any(|a| *a == "-R" || *a == "--recursive" || *a == "777") => {
                Some("changes permissions recursively or to 777")
            }
            "chown" if rest.iter().any(|a| *a == "-R" || *a == "--recursive") => Some("changes owners recursively"),
            "dd" if rest.iter().any(|a| a.starts_with("if=")) => Some("copies raw devices"),
            n if n.starts_with("mkfs") => Some("formats a file system"),
            "aws" if rest.len() >= 2 && rest[0] == "s3" && rest[1] == "rm" => Some("deletes from S3"),
            "terraform" if rest.first() == Some(&"apply") && has("-auto-approve") => {
                Some("applies infrastructure changes without review")
            }
            "git" if rest.first() == Some(&"push") && rest.iter().any(|a| a.starts_with("--force") || *a == "-f") => {
                Some("force-pushes")
            }
            "git" if rest.first() == Some(&"reset") && has("--hard") => Some("discards work (git reset --hard)"),
            _ => None,
        };
        if let Some(why) = destructive {
            return Err(format!("destructive: {why}"));
        }
    }
    if let Some(w) = words.iter().find(|w| leaves_worktree(w)) {
        return Err(format!("reaches outside the worktree ({w})"));
    }
    Ok(())
}

/// Whether a word names a place outside the worktree: an absolute or home path, or one that
/// climbs out with `..`.
fn leaves_worktree(word: &str) -> bool {
    let path = word.split_once('=').map_or(word, |(_, v)| v);
    path.starts_with('/') || path.starts_with('~') || path.split('/').any(|seg| seg == "..")
}

/// Where a program name stands in `words`: the first word, and the first word after each
/// wrapper that runs its arguments as a command (`env`, `nice`, `nohup`, `timeout`, `time`,
/// `command`, `sudo`, `doas`, `stdbuf`, `ionice`, `setsid`), skipping the wrapper's options,
/// `NAME=value` settings and numbers.
fn program_positions(words: &[&str]) -> Vec<usize> {
    const WRAPPERS: [&str; 11] =
        ["env", "nice", "nohup", "timeout", "time", "command", "sudo", "doas", "stdbuf", "ionice", "setsid"];
    let mut out = Vec::new();
    let mut i = 0;
    while i < words.len() {
        out.push(i);
        let name = words[i].rsplit('/').next().unwrap_or(words[i]);
        if !WRAPPERS.contains(&name) {
            break;
        }
        i += 1;
        while i < words.len()
            && (words[i].starts_with('-') || words[i].contains('=') || words[i].parse::<f64>().is_ok())
        {
            i += 1;
        }
    }
    out
}

/// `text` split into words like a POSIX shell would (quotes, backslashes), without expanding
/// anything; `None` for an unclosed quote. The driver runs the words as an argv.
pub fn split(text: &str) -> Option<Vec<String>> {
    shell_words::split(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn additions_are_parsed_deduplicated_and_capped_in_order() {
        assert_eq!(parse("did it"), (vec![], vec![]));
        let (ok, bad) = parse("x\ngate_addition: npm audit\n  GATE_ADDITION:   cargo test --lib  \nGATE_ADDITION: npm audit\nGATE_ADDITION:   \n");
        assert_eq!(ok, ["npm audit", "cargo test --lib"]);
        assert!(bad.is_empty());
        let many: String = (0..10).map(|i| format!("GATE_ADDITION: check {i}\n")).collect();
        let (ok, bad) = parse(&many);
        assert_eq!(ok.len(), MAX_PER_STEP);
        assert_eq!(bad.len(), 2);
        assert!(bad[0].reason.contains("more than 8"), "{bad:?}");
        let (ok, bad) = parse("GATE_ADDITION: pytest -q\nGATE_ADDITION: a; b\nGATE_ADDITION: rm -rf /");
        assert_eq!(ok, ["pytest -q"]);
        assert_eq!(bad.len(), 2);
    }

    #[test]
    fn unsafe_commands_are_refused_with_the_reason() {
        for safe in [
            "pytest tests/ -q",
            "cargo test --lib",
            "npm run format",
            "rm build.log",
            "git push",
            "make check",
            "python -m pytest tests/sh",
            "env CI=1 cargo test",
            "find src -name '*.rs'",
            "ls {files}",
        ] {
            assert_eq!(check(safe), Ok(()), "{safe}");
        }
        for (unsafe_cmd, why) in [
            ("a; b", "metacharacter"),
            ("a && b", "metacharacter"),
            ("a | b", "metacharacter"),
            ("echo `x`", "metacharacter"),
            ("echo $(x)", "metacharacter"),
            ("cat < x", "metacharacter"),
            ("sleep 1 &", "metacharacter"),
            ("rm -rf /", "destructive"),
            ("rm -r build", "destructive"),
            ("/bin/rm --force x", "destructive"),
            ("sudo make install", "destructive"),
            ("git push --force origin main", "destructive"),
            ("git push -f", "destructive"),
            ("git reset --hard HEAD~1", "destructive"),
            ("chmod -R 755 .", "destructive"),
            ("chmod 777 x", "destructive"),
            ("chown -R me .", "destructive"),
            ("dd if=/dev/zero of=x", "destructive"),
            ("mkfs.ext4 /dev/sda", "destructive"),
            ("aws s3 rm s3://b --recursive", "destructive"),
            ("terraform apply -auto-approve", "destructive"),
            ("echo 'unclosed", "split"),
            ("sh -c \"rm -rf /tmp/x\"", "runs a shell"),
            ("ls /tmp/x", "outside the worktree"),
            ("sh -c 'echo hi'", "runs a shell"),
            ("env FOO=1 bash script.sh", "runs a shell"),
            ("timeout 5 python3 -c 'import os'", "inline code"),
            ("node -e 'x'", "inline code"),
            ("find . -delete", "find"),
            ("find src -exec touch x +", "find"),
            ("git clean -fdx", "git clean"),
            ("cat /etc/passwd", "outside the worktree"),
            ("ls ../..", "outside the worktree"),
            ("ls ~/x", "outside the worktree"),
            ("pkill baton", "stops processes"),
            ("xargs echo", "runs other commands"),
        ] {
            let e = check(unsafe_cmd).unwrap_err();
            assert!(e.contains(why), "{unsafe_cmd}: {e}");
        }
        assert!(check(&"x".repeat(257)).unwrap_err().contains("256"));
        assert_eq!(split("pytest 'a b' c\\ d").unwrap(), ["pytest", "a b", "c d"]);
    }
}
