//! The bundled demo agent (`baton agent demo`): deterministic, offline, no API key.
//!
//! It reads a delegation prompt, makes real file changes in its working directory and prints
//! claude-style stream-json (`system` init, one `assistant` text message, a final `result`), so
//! the whole pipeline (shim, parser, commit, gates) runs without a real model. Everything but
//! `duration_ms` is a function of the prompt and the tree; re-running on the same tree changes
//! nothing. It never writes outside its working directory.
//!
//! Prompt sections (Markdown headings, each followed by `- item` lines; any may be absent):
//! `## Step` (`- <step_id>`), `## Task` (free text), `## Deliverables`, `## Allowed paths`,
//! `## Human reply`. Directives anywhere in the prompt: `[demo: fail]`, `[demo: sleep=N]`,
//! `[demo: cost=X]`, `[demo: noop]`, `[demo: interact=QUESTION]`, `[demo: gate_addition=CMD]`,
//! `[demo: burn=TOKENS]` (streams that many output tokens of usage in [`BURN_CHUNKS`] `assistant`
//! messages, spread over the `sleep` time, like a model working; the budget watch reads them),
//! `[demo: replace=PATH|OLD|NEW]` (replaces the first `OLD` in the existing file `PATH` with
//! `NEW`, besides the usual writes: two agents editing different lines of one file is a change
//! git can merge).
//!
//! A goal evaluator's prompt (one with a `## Completion condition` section, see
//! `engine::prompt::goal_prompt`) is answered with a JSON verdict instead of file changes, and
//! only the directives inside that section count (the prompt quotes other steps' tasks, whose
//! directives are theirs): `[demo: verdict=met]` (the default), `[demo: verdict=not_met]` (not
//! met, suggesting one small "Goal round-out" phase), `[demo: verdict=met_after=N]` (not met
//! while the prompt lists fewer than N earlier goal checks, met after), `[demo: verdict=invalid]`
//! (prose, no JSON); `fail`, `sleep` and `cost` work there too.

use std::fs;
use std::io::{self, Write};
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use serde_json::json;
use sha2::{Digest, Sha256};

use crate::clock::Stopwatch;

/// Cost reported when the prompt has no `[demo: cost=X]` directive, in USD.
pub const DEFAULT_DEMO_COST_USD: f64 = 0.01;
/// Model name the demo agent reports.
pub const DEMO_MODEL: &str = "baton-demo";
/// Line that ends the result of an interactive step once the human replied.
pub const INTERACT_COMPLETE: &str = "INTERACT_COMPLETE";
/// Messages `[demo: burn=TOKENS]` streams its usage in.
pub const BURN_CHUNKS: u64 = 20;
/// Prefix of a result line that proposes a gate command.
pub const GATE_ADDITION_PREFIX: &str = "GATE_ADDITION: ";

/// The parts of a delegation prompt the demo agent acts on.
#[derive(Debug, Clone, Default, PartialEq)]
struct DemoPrompt {
    step_id: String,
    task: String,
    deliverables: Vec<String>,
    allowed_paths: Vec<String>,
    human_reply: bool,
    fail: bool,
    noop: bool,
    sleep_secs: Option<f64>,
    cost_usd: Option<f64>,
    interact: Option<String>,
    gate_additions: Vec<String>,
    burn_tokens: u64,
    replacements: Vec<(String, String, String)>,
    /// Set for a goal evaluator's prompt.
    goal: Option<GoalPrompt>,
}

/// What the demo agent reads from a goal evaluator's prompt.
#[derive(Debug, Clone, PartialEq)]
struct GoalPrompt {
    /// The completion condition, without its directives.
    condition: String,
    /// Items of `## Earlier goal checks`.
    earlier_checks: usize,
    verdict: DemoVerdict,
}

/// The verdict a `[demo: verdict=…]` directive asks for.
#[derive(Debug, Clone, Copy, PartialEq)]
enum DemoVerdict {
    Met,
    NotMet,
    MetAfter(usize),
    Invalid,
}

/// Level-1 or level-2 heading title, if `line` is one.
fn heading(line: &str) -> Option<&str> {
    let line = line.trim_end();
    let title = line.strip_prefix("## ").or_else(|| line.strip_prefix("# "))?;
    Some(title.trim())
}

fn item(line: &str) -> Option<String> {
    let rest = line.trim_start().strip_prefix("- ").or_else(|| line.trim_start().strip_prefix("* "))?;
    let value = rest.trim().trim_matches('`').trim();
    (!value.is_empty()).then(|| value.to_owned())
}

fn parse_prompt(prompt: &str) -> DemoPrompt {
    #[derive(Clone, Copy, PartialEq)]
    enum Section {
        Other,
        Step,
        Task,
        Deliverables,
        Allowed,
        Condition,
        EarlierChecks,
    }
    let mut p = DemoPrompt::default();
    let mut section = Section::Other;
    let mut step_lines = Vec::new();
    let mut task_lines: Vec<&str> = Vec::new();
    let mut condition_lines: Vec<&str> = Vec::new();
    let mut is_goal = false;
    let mut earlier_checks = 0;
    for line in prompt.lines() {
        if let Some(title) = heading(line) {
            section = match title.to_ascii_lowercase().as_str() {
                "step" => Section::Step,
                "task" => Section::Task,
                "deliverables" => Section::Deliverables,
                "allowed paths" => Section::Allowed,
                "completion condition" => {
                    is_goal = true;
                    Section::Condition
                }
                "earlier goal checks" => Section::EarlierChecks,
                "human reply" => {
                    p.human_reply = true;
                    Section::Other
                }
                _ => Section::Other,
            };
            continue;
        }
        match section {
            Section::Step => step_lines.extend(item(line).or_else(|| {
                let t = line.trim();
                (!t.is_empty()).then(|| t.to_owned())
            })),
            Section::Task => task_lines.push(line),
            Section::Deliverables => p.deliverables.extend(item(line)),
            Section::Allowed => p.allowed_paths.extend(item(line)),
            Section::Condition => condition_lines.push(line),
            Section::EarlierChecks => earlier_checks += usize::from(item(line).is_some()),
            Section::Other => {}
        }
    }
    p.step_id = step_lines.into_iter().next().unwrap_or_else(|| "step".to_owned());
    p.task = task_lines.join("\n").trim().to_owned();
    let condition = condition_lines.join("\n");
    // A goal evaluator obeys only the directives of its condition.
    let mut verdict = DemoVerdict::Met;
    read_directives(if is_goal { &condition } else { prompt }, &mut p, &mut verdict);
    if is_goal {
        p.goal = Some(GoalPrompt { condition: without_directives(&condition), earlier_checks, verdict });
    }
    p
}

/// `text` without its `[demo: …]` directives, trimmed.
fn without_directives(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("[demo:") {
        out.push_str(&rest[..start]);
        match rest[start..].find(']') {
            Some(end) => rest = &rest[start + end + 1..],
            None => {
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn read_directives(text: &str, p: &mut DemoPrompt, verdict: &mut DemoVerdict) {
    let mut rest = text;
    while let Some(start) = rest.find("[demo:") {
        let after = &rest[start + "[demo:".len()..];
        let Some(end) = after.find(']') else { break };
        let directive = after[..end].trim();
        rest = &after[end + 1..];
        let (key, value) = match directive.split_once('=') {
            Some((k, v)) => (k.trim(), Some(v.trim())),
            None => (directive, None),
        };
        match (key, value) {
            ("fail", _) => p.fail = true,
            ("noop", _) => p.noop = true,
            ("sleep", Some(v)) => p.sleep_secs = v.parse().ok().filter(|s: &f64| s.is_finite()),
            ("cost", Some(v)) => p.cost_usd = v.parse().ok().filter(|c: &f64| c.is_finite()),
            ("interact", Some(v)) => p.interact = Some(v.to_owned()),
            ("gate_addition", Some(v)) => p.gate_additions.push(v.to_owned()),
            ("burn", Some(v)) => p.burn_tokens = v.parse().unwrap_or(0),
            ("replace", Some(v)) => {
                let parts: Vec<&str> = v.splitn(3, '|').collect();
                if let [path, old, new] = parts[..] {
                    p.replacements.push((path.trim().to_owned(), old.to_owned(), new.to_owned()));
                }
            }
            ("verdict", Some(v)) => {
                *verdict = match v {
                    "not_met" => DemoVerdict::NotMet,
                    "invalid" => DemoVerdict::Invalid,
                    other => match other.strip_prefix("met_after=").map(|n| n.trim().parse::<usize>()) {
                        Some(Ok(n)) => DemoVerdict::MetAfter(n),
                        _ => DemoVerdict::Met,
                    },
                }
            }
            _ => {}
        }
    }
}

/// The demo evaluator's answer: a verdict in a fenced JSON block (or prose for `invalid`).
fn judge(step_id: &str, goal: &GoalPrompt) -> String {
    let met = match goal.verdict {
        DemoVerdict::Met => true,
        DemoVerdict::NotMet => false,
        DemoVerdict::MetAfter(n) => goal.earlier_checks >= n,
        DemoVerdict::Invalid => {
            return format!("The Baton demo agent looked at step {step_id} and has no verdict to give.");
        }
    };
    let verdict = if met {
        json!({
            "met": true,
            "confidence": 0.9,
            "missing": [],
            "suggested_phases": [],
            "reasoning": format!("The demo evaluator finds the condition met: {}", goal.condition),
        })
    } else {
        json!({
            "met": false,
            "confidence": 0.6,
            "missing": [format!("the demo evaluator does not see this done yet: {}", goal.condition)],
            "suggested_phases": [{
                "name": "Goal round-out",
                "steps": [{
                    "agent_name": "backend-engineer",
                    "task_description": format!("Round out the work towards the goal: {}", goal.condition),
                }],
            }],
            "reasoning": "The demo evaluator was told by its directive to find the condition not met.",
        })
    };
    let pretty = serde_json::to_string_pretty(&verdict).unwrap_or_default();
    let word = if met { "met" } else { "not met" };
    format!("The Baton demo agent judged the goal at step {step_id}: {word}.\n\n```json\n{pretty}\n```")
}

/// The step id as a safe file-name fragment.
fn file_safe(step_id: &str) -> String {
    step_id.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') { c } else { '-' }).collect()
}

/// A relative path made only of normal components, or an error naming the offender.
fn relative_path(raw: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(raw);
    if raw.is_empty() || !path.components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir)) {
        return Err(format!("refusing to write `{raw}`: paths must be relative and stay inside the working directory"));
    }
    Ok(path)
}

/// The files to write, relative to `cwd`.
fn targets(p: &DemoPrompt, cwd: &Path) -> Result<Vec<PathBuf>, String> {
    if !p.deliverables.is_empty() {
        return p.deliverables.iter().map(|d| relative_path(d)).collect();
    }
    let name = format!("baton-demo-{}.md", file_safe(&p.step_id));
    let Some(first) = p.allowed_paths.first() else {
        return Ok(vec![PathBuf::from("baton-demo").join(format!("{}.md", file_safe(&p.step_id)))]);
    };
    // Keep the part of the allowed path before any glob; a file's parent folder.
    let dir: PathBuf = Path::new(first)
        .components()
        .take_while(|c| !c.as_os_str().to_string_lossy().contains(['*', '?', '[', '{']))
        .collect();
    let dir = relative_path(&dir.to_string_lossy()).unwrap_or_default();
    let dir = if cwd.join(&dir).is_file() { dir.parent().map(Path::to_path_buf).unwrap_or_default() } else { dir };
    Ok(vec![dir.join(name)])
}

fn content(file: &Path, p: &DemoPrompt) -> String {
    let name = file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    format!("# {name}\n\nWritten by the Baton demo agent for step {}.\n\n{}\n", p.step_id, p.task)
}

/// Writes each target unless it already has the right content; never leaves `cwd`.
fn write_files(files: &[PathBuf], p: &DemoPrompt, cwd: &Path) -> Result<(), String> {
    let root = cwd.canonicalize().map_err(|e| format!("working directory {}: {e}", cwd.display()))?;
    for rel in files {
        let path = root.join(rel);
        let body = content(rel, p);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(|e| format!("creating {}: {e}", parent.display()))?;
            let real = parent.canonicalize().map_err(|e| format!("resolving {}: {e}", parent.display()))?;
            if !real.starts_with(&root) {
                return Err(format!(
                    "refusing to write `{}`: it resolves outside the working directory",
                    rel.display()
                ));
            }
        }
        if fs::read_to_string(&path).is_ok_and(|old| old == body) {
            continue;
        }
        fs::write(&path, body).map_err(|e| format!("writing {}: {e}", path.display()))?;
    }
    Ok(())
}

/// A UUID-shaped id derived from the SHA-256 of the prompt.
fn session_id(prompt: &str) -> String {
    let h = hex::encode(&Sha256::digest(prompt.as_bytes())[..16]);
    format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

/// Decides what to do; returns (is_error, result text). Performs the file changes.
fn act(p: &DemoPrompt, cwd: &Path) -> (bool, String) {
    if p.fail {
        return (true, format!("The Baton demo agent failed step {} as instructed by [demo: fail].", p.step_id));
    }
    if let Some(goal) = &p.goal {
        return (false, judge(&p.step_id, goal));
    }
    if let (Some(question), false) = (&p.interact, p.human_reply) {
        return (false, question.clone());
    }
    let mut lines = Vec::new();
    if p.noop {
        lines.push(format!("The Baton demo agent completed step {} without changing any files.", p.step_id));
    } else {
        let files = match targets(p, cwd) {
            Ok(files) => files,
            Err(e) => return (true, e),
        };
        if let Err(e) = write_files(&files, p, cwd) {
            return (true, e);
        }
        let names: Vec<String> = files.iter().map(|f| format!("`{}`", f.display())).collect();
        lines.push(format!("The Baton demo agent completed step {} and wrote {}.", p.step_id, names.join(", ")));
    }
    for (path, old, new) in &p.replacements {
        match replace_in(cwd, path, old, new) {
            Ok(()) => lines.push(format!("It edited `{path}`.")),
            Err(e) => return (true, e),
        }
    }
    lines.extend(p.gate_additions.iter().map(|cmd| format!("{GATE_ADDITION_PREFIX}{cmd}")));
    if p.interact.is_some() {
        lines.push(INTERACT_COMPLETE.to_owned());
    }
    (false, lines.join("\n"))
}

/// Replaces the first `old` in the existing file `rel` (inside `cwd`) with `new`; a file that
/// already holds `new` and no `old` is left alone.
fn replace_in(cwd: &Path, rel: &str, old: &str, new: &str) -> Result<(), String> {
    let rel = relative_path(rel)?;
    let root = cwd.canonicalize().map_err(|e| format!("working directory {}: {e}", cwd.display()))?;
    let path = root.join(&rel).canonicalize().map_err(|e| format!("replace in `{}`: {e}", rel.display()))?;
    if !path.starts_with(&root) {
        return Err(format!("refusing to edit `{}`: it resolves outside the working directory", rel.display()));
    }
    let text = fs::read_to_string(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    if !new.is_empty() && text.contains(new) && !text.contains(old) {
        return Ok(()); // already done (a re-run on the same tree)
    }
    if old.is_empty() || !text.contains(old) {
        return Err(format!("replace in `{}`: the text {old:?} is not there", rel.display()));
    }
    fs::write(&path, text.replacen(old, new, 1)).map_err(|e| format!("writing {}: {e}", path.display()))
}

fn token_estimate(text: &str) -> u64 {
    u64::try_from(text.len().div_ceil(4)).unwrap_or(u64::MAX)
}

/// Runs the demo agent on `prompt` in `cwd`, printing claude stream-json lines to `out`.
///
/// Returns the exit code (0, or 1 when the result is an error: `[demo: fail]`, or a file that
/// cannot or must not be written, e.g. an absolute or `..` deliverable). With deliverables it
/// writes each (creating parent folders) with the content `# <file name>\n\nWritten by the Baton
/// demo agent for step <step_id>.\n\n<task text>\n`; without, `<first allowed path, up to any
/// glob>/baton-demo-<step_id>.md`, or `baton-demo/<step_id>.md`. Files that already have that
/// content are not touched. `[demo: sleep=N]` sleeps N seconds (fractions allowed) before
/// anything else (with `burn`, between its usage messages instead). `Err` only when writing to
/// `out` fails.
pub fn run_demo_agent(prompt: &str, cwd: &Path, out: &mut impl Write) -> io::Result<i32> {
    let stopwatch = Stopwatch::start();
    let p = parse_prompt(prompt);
    let sleep = p.sleep_secs.filter(|s| *s > 0.0).map(|s| Duration::from_secs_f64(s.min(86_400.0)));
    if let (Some(d), 0) = (sleep, p.burn_tokens) {
        std::thread::sleep(d);
    }
    let session = session_id(prompt);
    if p.burn_tokens > 0 {
        for i in 0..BURN_CHUNKS {
            let message = json!({
                "type": "assistant",
                "message": {
                    "id": format!("burn-{i}"),
                    "model": DEMO_MODEL,
                    "role": "assistant",
                    "type": "message",
                    "content": [{"type": "text", "text": "working"}],
                    "usage": {"input_tokens": 0, "output_tokens": p.burn_tokens / BURN_CHUNKS},
                },
                "session_id": session,
            });
            writeln!(out, "{message}")?;
            out.flush()?;
            if let Some(d) = sleep {
                std::thread::sleep(d / u32::try_from(BURN_CHUNKS).unwrap_or(1));
            }
        }
    }
    let init = json!({
        "type": "system",
        "subtype": "init",
        "cwd": cwd.display().to_string(),
        "session_id": session,
        "tools": [],
        "model": DEMO_MODEL,
        "permissionMode": "default",
    });
    writeln!(out, "{init}")?;

    let (is_error, result) = act(&p, cwd);
    let message = json!({
        "type": "assistant",
        "message": {
            "model": DEMO_MODEL,
            "role": "assistant",
            "type": "message",
            "content": [{"type": "text", "text": result}],
        },
        "parent_tool_use_id": null,
        "session_id": session,
    });
    writeln!(out, "{message}")?;
    let final_line = json!({
        "type": "result",
        "subtype": if is_error { "error_during_execution" } else { "success" },
        "is_error": is_error,
        "duration_ms": u64::try_from(stopwatch.elapsed().as_millis()).unwrap_or(u64::MAX),
        "num_turns": 1,
        "result": result,
        "session_id": session,
        "total_cost_usd": p.cost_usd.unwrap_or(DEFAULT_DEMO_COST_USD),
        "usage": {
            "input_tokens": token_estimate(prompt),
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": token_estimate(&result),
        },
    });
    writeln!(out, "{final_line}")?;
    out.flush()?;
    Ok(if is_error { 1 } else { 0 })
}

#[cfg(test)]
mod tests {
    use super::super::output::parse_claude_stream_json;
    use super::super::shim::ExitRecord;
    use super::*;

    const PROMPT: &str = "\
# Delegation

## Step
- 1.2

## Task
Add the greeting docs.
Keep it short.

## Deliverables
- `docs/hello.md`
- notes/deep/bye.txt

## Allowed paths
- docs/**
";

    fn run(prompt: &str, cwd: &Path) -> (i32, crate::runtime::agent::AgentOutput, String) {
        let mut out = Vec::new();
        let code = run_demo_agent(prompt, cwd, &mut out).unwrap();
        let stdout = String::from_utf8(out).unwrap();
        let exit = ExitRecord {
            exit_code: Some(code),
            signal: None,
            timed_out: false,
            stopped_after_result: false,
            spawn_error: None,
            started_at: String::new(),
            finished_at: String::new(),
            duration_ms: 0,
        };
        (code, parse_claude_stream_json(&stdout, "", &exit), stdout)
    }

    /// All files under `dir` with their contents, sorted.
    fn tree(dir: &Path) -> Vec<(PathBuf, String)> {
        let mut files = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for entry in fs::read_dir(&d).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                } else {
                    let body = fs::read_to_string(&path).unwrap();
                    files.push((path.strip_prefix(dir).unwrap().to_path_buf(), body));
                }
            }
        }
        files.sort();
        files
    }

    #[test]
    fn writes_deliverables_and_prints_stream_json() {
        let wt = tempfile::tempdir().unwrap();
        let (code, out, stdout) = run(PROMPT, wt.path());
        assert_eq!(code, 0);
        assert!(out.success);
        assert_eq!(out.cost_usd, Some(DEFAULT_DEMO_COST_USD));
        assert!(out.input_tokens > 0 && out.output_tokens > 0);
        assert_eq!(
            out.outcome,
            "The Baton demo agent completed step 1.2 and wrote `docs/hello.md`, `notes/deep/bye.txt`."
        );
        assert_eq!(
            fs::read_to_string(wt.path().join("docs/hello.md")).unwrap(),
            "# hello.md\n\nWritten by the Baton demo agent for step 1.2.\n\nAdd the greeting docs.\nKeep it short.\n"
        );
        assert!(wt.path().join("notes/deep/bye.txt").is_file());
        let types: Vec<String> =
            stdout.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["type"].to_string()).collect();
        assert_eq!(types, ["\"system\"", "\"assistant\"", "\"result\""]);
        // the session id is a function of the prompt
        assert_eq!(out.session_id, Some(session_id(PROMPT)));
        assert_eq!(run(PROMPT, wt.path()).1.session_id, out.session_id);
        assert_ne!(session_id("other"), session_id(PROMPT));
    }

    #[test]
    fn rerun_is_idempotent() {
        let wt = tempfile::tempdir().unwrap();
        run(PROMPT, wt.path());
        let before = tree(wt.path());
        let mtime = fs::metadata(wt.path().join("docs/hello.md")).unwrap().modified().unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let (code, out, _) = run(PROMPT, wt.path());
        assert_eq!(code, 0);
        assert!(out.success);
        assert_eq!(tree(wt.path()), before);
        let again = fs::metadata(wt.path().join("docs/hello.md")).unwrap().modified().unwrap();
        assert_eq!(again, mtime);
    }

    #[test]
    fn without_deliverables_writes_under_the_first_allowed_path() {
        let wt = tempfile::tempdir().unwrap();
        let prompt = "## Step\n- s/3\n## Task\nDo it.\n## Allowed paths\n- src/api/**\n- docs/\n";
        run(prompt, wt.path());
        assert_eq!(
            tree(wt.path()).into_iter().map(|(p, _)| p).collect::<Vec<_>>(),
            [PathBuf::from("src/api/baton-demo-s-3.md")]
        );

        let bare = tempfile::tempdir().unwrap();
        let (_, out, _) = run("## Step\n- 7\n", bare.path());
        assert!(out.outcome.contains("`baton-demo/7.md`"));
        assert!(bare.path().join("baton-demo/7.md").is_file());
    }

    #[test]
    fn fail_directive() {
        let wt = tempfile::tempdir().unwrap();
        let (code, out, _) = run(&format!("{PROMPT}\n[demo: fail]\n"), wt.path());
        assert_eq!(code, 1);
        assert!(!out.success);
        assert!(out.error.unwrap().contains("[demo: fail]"));
        assert!(tree(wt.path()).is_empty());
    }

    #[test]
    fn cost_and_noop_directives() {
        let wt = tempfile::tempdir().unwrap();
        let (code, out, _) = run(&format!("[demo: cost=2.5] [demo:noop]\n{PROMPT}"), wt.path());
        assert_eq!(code, 0);
        assert!(out.success);
        assert_eq!(out.cost_usd, Some(2.5));
        assert!(out.outcome.contains("without changing any files"));
        assert!(tree(wt.path()).is_empty());
    }

    #[test]
    fn replace_directive_edits_an_existing_file_once() {
        let wt = tempfile::tempdir().unwrap();
        fs::write(wt.path().join("shared.txt"), "one\ntwo\nthree\n").unwrap();
        let prompt = format!("[demo: noop] [demo: replace=shared.txt|two|TWO]\n{PROMPT}");
        let (code, out, _) = run(&prompt, wt.path());
        assert_eq!(code, 0, "{:?}", out.error);
        assert!(out.outcome.contains("It edited `shared.txt`."), "{}", out.outcome);
        assert_eq!(fs::read_to_string(wt.path().join("shared.txt")).unwrap(), "one\nTWO\nthree\n");
        let (again, _, _) = run(&prompt, wt.path());
        assert_eq!(again, 0, "a re-run on the same tree changes nothing");
        let (missing, out, _) = run(&format!("[demo: replace=shared.txt|four|4]\n{PROMPT}"), wt.path());
        assert_eq!(missing, 1);
        assert!(out.error.unwrap().contains("\"four\" is not there"));
        let (outside, _, _) = run(&format!("[demo: replace=../x|a|b]\n{PROMPT}"), wt.path());
        assert_eq!(outside, 1);
    }

    #[test]
    fn sleep_directive() {
        let wt = tempfile::tempdir().unwrap();
        let watch = Stopwatch::start();
        let (code, _, _) = run(&format!("{PROMPT}[demo: sleep=0.3]"), wt.path());
        assert_eq!(code, 0);
        assert!(watch.elapsed() >= Duration::from_millis(300));
    }

    #[test]
    fn interact_directive_asks_then_completes() {
        let wt = tempfile::tempdir().unwrap();
        let ask = format!("{PROMPT}\n[demo: interact=Which greeting should I use?]\n");
        let (code, out, _) = run(&ask, wt.path());
        assert_eq!(code, 0);
        assert!(out.success);
        assert_eq!(out.outcome, "Which greeting should I use?");
        assert!(tree(wt.path()).is_empty());

        let replied = format!("{ask}\n## Human reply\nUse \"hello\".\n");
        let (_, out, _) = run(&replied, wt.path());
        assert!(out.success);
        assert!(out.outcome.ends_with("\nINTERACT_COMPLETE"));
        assert!(wt.path().join("docs/hello.md").is_file());
    }

    #[test]
    fn gate_addition_directive() {
        let wt = tempfile::tempdir().unwrap();
        let (_, out, _) = run(&format!("{PROMPT}[demo: gate_addition=cargo test --lib]"), wt.path());
        assert!(out.success);
        assert!(out.outcome.lines().any(|l| l == "GATE_ADDITION: cargo test --lib"));
    }

    #[test]
    fn refuses_paths_outside_the_working_directory() {
        let root = tempfile::tempdir().unwrap();
        let wt = root.path().join("wt");
        fs::create_dir_all(&wt).unwrap();
        for bad in ["../escape.md", "/tmp/abs.md"] {
            let prompt = format!("## Step\n- 1\n## Deliverables\n- {bad}\n");
            let (code, out, _) = run(&prompt, &wt);
            assert_eq!(code, 1, "{bad}");
            assert!(out.error.unwrap().contains("refusing to write"));
        }
        std::os::unix::fs::symlink(root.path(), wt.join("link")).unwrap();
        let (code, _, _) = run("## Deliverables\n- link/out.md\n", &wt);
        assert_eq!(code, 1);
        assert!(!root.path().join("out.md").exists());
    }

    #[test]
    fn prompt_parsing() {
        let p = parse_prompt(PROMPT);
        assert_eq!(p.step_id, "1.2");
        assert_eq!(p.task, "Add the greeting docs.\nKeep it short.");
        assert_eq!(p.deliverables, ["docs/hello.md", "notes/deep/bye.txt"]);
        assert_eq!(p.allowed_paths, ["docs/**"]);
        assert!(!p.human_reply);
        let d = parse_prompt("[demo: gate_addition=a] x [demo: gate_addition=b][demo: sleep=bad]");
        assert_eq!(d.gate_additions, ["a", "b"]);
        assert_eq!(d.sleep_secs, None);
    }

    fn goal_prompt(condition: &str, earlier: usize) -> String {
        let checks: String = (1..=earlier).map(|i| format!("- g{i} (phase 1): not met\n")).collect();
        format!(
            "# Baton goal check: step goal.3 of t\n\n## Completion condition\n{condition}\n\n## Step\n- goal.3\n\n\
             ## Phases still planned\n- Phase 2: P2 — 2.1 (dev): do it [demo: fail]\n\n## Earlier goal checks\n{checks}\n"
        )
    }

    #[test]
    fn goal_verdict_directives_answer_json_and_write_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (code, out, _) = run(&goal_prompt("Docs exist [demo: verdict=met]", 0), dir.path());
        assert_eq!(code, 0, "the quoted [demo: fail] of another step is not the evaluator's");
        let v = crate::engine::goal::parse_verdict(&out.outcome).unwrap();
        assert!(v.met);
        assert!(tree(dir.path()).is_empty(), "an evaluator writes nothing");
        let (_, out, _) = run(&goal_prompt("Docs exist [demo: verdict=not_met]", 0), dir.path());
        let v = crate::engine::goal::parse_verdict(&out.outcome).unwrap();
        assert!(!v.met);
        assert_eq!(v.suggested_phases.len(), 1);
        assert_eq!(v.suggested_phases[0]["name"], "Goal round-out");
        let task = v.suggested_phases[0]["steps"][0]["task_description"].as_str().unwrap();
        assert_eq!(task, "Round out the work towards the goal: Docs exist", "directives are not passed on");
        for (earlier, met) in [(0, false), (1, false), (2, true), (3, true)] {
            let (_, out, _) = run(&goal_prompt("x [demo: verdict=met_after=2]", earlier), dir.path());
            assert_eq!(crate::engine::goal::parse_verdict(&out.outcome).unwrap().met, met, "{earlier} earlier checks");
        }
        let (code, out, _) = run(&goal_prompt("x [demo: verdict=invalid]", 0), dir.path());
        assert_eq!(code, 0);
        assert!(crate::engine::goal::parse_verdict(&out.outcome).is_err(), "{}", out.outcome);
        let (_, out, _) = run(&goal_prompt("no directive", 0), dir.path());
        assert!(crate::engine::goal::parse_verdict(&out.outcome).unwrap().met, "met by default");
    }
}
