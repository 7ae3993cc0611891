//! Agent profiles (claude, codex, gemini, a command, the demo): how to invoke each agent CLI,
//! how to read its output, which environment it gets.
//!
//! Pure functions (no IO). An invocation is always an argv (never a shell command line): the
//! prompt travels on stdin or as a file path, and text from specs, issues or agents is never
//! interpolated into a command string.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::final_event::{FinalEvent, FinalWatch};
use super::mcp::StepServers;
use super::output::{
    parse_claude_stream_json, parse_codex_jsonl, parse_command_output, parse_gemini_json, AgentOutput,
};
use super::shim::ExitRecord;

/// Which agent CLI runs a step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AgentProfile {
    /// Claude Code: `claude --print --output-format stream-json --verbose …`, prompt on stdin.
    Claude,
    /// OpenAI Codex CLI: `codex exec --json … -`, prompt on stdin.
    Codex,
    /// Google Gemini CLI: `gemini --output-format json … --prompt <fixed text>`, prompt on stdin.
    Gemini,
    /// Any program: an argv template with `{prompt_file}`, `{model}`, `{cwd}` and `{mcp_config}`
    /// placeholders.
    Command {
        /// The argv, one element per entry; placeholders are substituted inside each element.
        argv_template: Vec<String>,
    },
    /// The bundled deterministic demo agent (`baton agent demo`), which speaks claude stream-json.
    Demo,
}

/// The per-step inputs of an invocation.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AgentInvocation {
    /// Model name passed to the CLI (`--model`); `None` leaves the CLI's default.
    pub model: Option<String>,
    /// Permission mode: claude's `--permission-mode` (`auto-edit` is mapped to `acceptEdits`);
    /// for codex it selects the `--sandbox` (see [`build_argv`]).
    pub permission_mode: Option<String>,
    /// Tools the agent may use without asking (claude `--allowedTools`, joined with `,`).
    pub allowed_tools: Vec<String>,
    /// Path of the running baton executable (for the demo agent).
    pub baton_exe: PathBuf,
    /// Path of the prompt file (the shim feeds it to stdin unless the argv names it).
    pub prompt_path: PathBuf,
    /// Working directory of the agent (the attempt's worktree).
    pub cwd: PathBuf,
    /// The MCP servers the step names (empty: none passed, the CLI keeps its own).
    pub mcp: StepServers,
    /// The generated Claude-format MCP config file of the attempt (`mcp.json` in its run dir,
    /// see [`StepServers::claude_config`]); `None` when the step names no server.
    pub mcp_config: Option<PathBuf>,
}

/// A concrete command for one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentCommand {
    /// The argv (`argv[0]` is looked up on the agent environment's `PATH`).
    pub argv: Vec<String>,
    /// Whether the prompt file must be fed to stdin (set `AttemptSpec::prompt_file`); `false`
    /// when the argv already names the prompt file.
    pub prompt_on_stdin: bool,
}

/// Environment variables an agent may inherit from baton; everything else is dropped.
///
/// Forge tokens (`GITHUB_TOKEN`, `ADO_PAT`, …) and `BATON_*` settings are deliberately absent.
pub const AGENT_ENV_WHITELIST: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LANG",
    "LC_ALL",
    "TERM",
    "TMPDIR",
    "ANTHROPIC_API_KEY",
    "OPENAI_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "GOOGLE_CLOUD_PROJECT",
    "GOOGLE_CLOUD_LOCATION",
    "GOOGLE_GENAI_USE_VERTEXAI",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "CLAUDE_CODE_USE_BEDROCK",
    "CLAUDE_CODE_USE_VERTEX",
    "AWS_PROFILE",
    "AWS_REGION",
];

/// The [`AGENT_ENV_WHITELIST`] variables that are credentials: an attempt's `attempt.json`
/// names them and the shim copies their values from its own environment (Baton's) when it
/// starts the agent, so no run directory holds a key.
pub const AGENT_SECRET_VARS: &[&str] = &["ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY"];

/// Keeps only the [`AGENT_ENV_WHITELIST`] variables of `parent`, in their original order.
///
/// Typical call: `agent_env(std::env::vars())` once at startup (the result is the complete
/// environment of the agent; the shim clears everything else).
pub fn agent_env(parent: impl Iterator<Item = (String, String)>) -> Vec<(String, String)> {
    parent.filter(|(name, _)| AGENT_ENV_WHITELIST.contains(&name.as_str())).collect()
}

/// Maps agent-baton's permission-mode vocabulary to claude's `--permission-mode` values.
fn claude_permission_mode(mode: &str) -> &str {
    match mode {
        "auto-edit" | "auto_edit" => "acceptEdits",
        other => other,
    }
}

/// Maps a permission mode to a codex `--sandbox` value (codex's default is read-only, which
/// would leave the agent unable to edit its worktree).
fn codex_sandbox(mode: Option<&str>) -> &'static str {
    match mode {
        Some("read-only" | "plan") => "read-only",
        Some("danger-full-access" | "bypassPermissions") => "danger-full-access",
        _ => "workspace-write",
    }
}

/// Maps a permission mode to a gemini `--approval-mode` value: without approvals to give in a
/// headless run, `default` would refuse every edit, so edits are approved unless the mode is
/// `read-only`/`plan`, and everything is with `danger-full-access`/`bypassPermissions`.
fn gemini_approval_mode(mode: Option<&str>) -> &'static str {
    match mode {
        Some("read-only" | "plan") => "default",
        Some("danger-full-access" | "bypassPermissions") => "yolo",
        _ => "auto_edit",
    }
}

/// The fixed `--prompt` of a gemini run: gemini appends it to what it reads on stdin (the
/// delegation prompt), and `--prompt` is what makes it run headless.
pub const GEMINI_PROMPT_ARG: &str = "Carry out the task described above.";

/// Builds the argv for `profile` and says whether the prompt goes on stdin.
///
/// - claude: `claude --print --output-format stream-json --verbose [--model M]
///   [--permission-mode X] [--mcp-config F --strict-mcp-config] [--allowedTools a,b]`
///   (`--allowedTools` is variadic, so it comes last; with MCP servers it also allows each
///   server's tools, `mcp__<name>`); prompt on stdin.
/// - codex: `codex exec --json [--model M] --sandbox S [-c mcp_servers.… ] -` (`-` makes codex
///   read the prompt from stdin; `S` is `workspace-write` unless the permission mode is
///   `read-only`/`plan` or `danger-full-access`/`bypassPermissions`; the `-c` overrides are
///   [`StepServers::codex_overrides`]).
/// - gemini: `gemini --output-format json [--model M] --approval-mode A --prompt
///   <`[`GEMINI_PROMPT_ARG`]`>`; the delegation prompt on stdin (gemini appends `--prompt` to
///   its stdin); `A` is `auto_edit` unless the permission mode is `read-only`/`plan`
///   (`default`) or `danger-full-access`/`bypassPermissions` (`yolo`).
/// - command: each template element with `{prompt_file}`, `{model}` (empty if none), `{cwd}`
///   and `{mcp_config}` (the MCP config file, empty if none) substituted; prompt on stdin
///   unless some element uses `{prompt_file}`.
/// - demo: `<baton_exe> agent demo`, prompt on stdin.
pub fn build_argv(profile: &AgentProfile, inv: &AgentInvocation) -> AgentCommand {
    match profile {
        AgentProfile::Claude => {
            let mut argv: Vec<String> =
                ["claude", "--print", "--output-format", "stream-json", "--verbose"].map(str::to_owned).to_vec();
            if let Some(model) = &inv.model {
                argv.extend(["--model".to_owned(), model.clone()]);
            }
            if let Some(mode) = &inv.permission_mode {
                argv.extend(["--permission-mode".to_owned(), claude_permission_mode(mode).to_owned()]);
            }
            let mut allowed = inv.allowed_tools.clone();
            if let (Some(file), false) = (&inv.mcp_config, inv.mcp.is_empty()) {
                argv.extend(["--mcp-config".to_owned(), file.to_string_lossy().into_owned()]);
                argv.push("--strict-mcp-config".to_owned());
                allowed.extend(inv.mcp.names().map(|name| format!("mcp__{name}")));
            }
            if !allowed.is_empty() {
                argv.extend(["--allowedTools".to_owned(), allowed.join(",")]);
            }
            AgentCommand { argv, prompt_on_stdin: true }
        }
        AgentProfile::Codex => {
            let mut argv: Vec<String> = ["codex", "exec", "--json"].map(str::to_owned).to_vec();
            if let Some(model) = &inv.model {
                argv.extend(["--model".to_owned(), model.clone()]);
            }
            argv.extend(["--sandbox".to_owned(), codex_sandbox(inv.permission_mode.as_deref()).to_owned()]);
            argv.extend(inv.mcp.codex_overrides());
            argv.push("-".to_owned());
            AgentCommand { argv, prompt_on_stdin: true }
        }
        AgentProfile::Gemini => {
            let mut argv: Vec<String> = ["gemini", "--output-format", "json"].map(str::to_owned).to_vec();
            if let Some(model) = &inv.model {
                argv.extend(["--model".to_owned(), model.clone()]);
            }
            argv.extend([
                "--approval-mode".to_owned(),
                gemini_approval_mode(inv.permission_mode.as_deref()).to_owned(),
                "--prompt".to_owned(),
                GEMINI_PROMPT_ARG.to_owned(),
            ]);
            AgentCommand { argv, prompt_on_stdin: true }
        }
        AgentProfile::Command { argv_template } => {
            let prompt = inv.prompt_path.to_string_lossy();
            let cwd = inv.cwd.to_string_lossy();
            let model = inv.model.as_deref().unwrap_or("");
            let mcp_config = inv.mcp_config.as_deref().map(|p| p.to_string_lossy()).unwrap_or_default();
            let names_prompt = argv_template.iter().any(|a| a.contains("{prompt_file}"));
            let vars = [("prompt_file", &*prompt), ("model", model), ("cwd", &*cwd), ("mcp_config", &*mcp_config)];
            let argv = argv_template.iter().map(|arg| substitute(arg, &vars)).collect();
            AgentCommand { argv, prompt_on_stdin: !names_prompt }
        }
        AgentProfile::Demo => AgentCommand {
            argv: vec![inv.baton_exe.to_string_lossy().into_owned(), "agent".to_owned(), "demo".to_owned()],
            prompt_on_stdin: true,
        },
    }
}

/// Replaces each `{name}` in `arg` in one left-to-right pass (substituted text is not rescanned).
fn substitute(arg: &str, vars: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(arg.len());
    let mut rest = arg;
    'scan: while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        for (name, value) in vars {
            if let Some(tail) = after.strip_prefix(name).and_then(|t| t.strip_prefix('}')) {
                out.push_str(value);
                rest = tail;
                continue 'scan;
            }
        }
        out.push('{');
        rest = after;
    }
    out.push_str(rest);
    out
}

/// The event that ends a run of `profile` (claude's `result`, codex's end of turn), which the shim
/// watches for an agent that does not exit after it; `None` for a plain command and for gemini
/// (whose one JSON object is printed as it exits), whose end is its exit.
pub fn final_event(profile: &AgentProfile) -> Option<FinalEvent> {
    match profile {
        AgentProfile::Claude | AgentProfile::Demo => Some(FinalEvent::ClaudeResult),
        AgentProfile::Codex => Some(FinalEvent::CodexTurnEnd),
        AgentProfile::Gemini | AgentProfile::Command { .. } => None,
    }
}

/// What the shim watches for in a run of `profile`: its [`final_event`], with `grace_secs` to
/// exit after it (`[runtime] result_grace_secs`).
pub fn final_watch(profile: &AgentProfile, grace_secs: u64) -> Option<FinalWatch> {
    final_event(profile).map(|event| FinalWatch { event, grace_secs })
}

/// Parses the captured output of a run of `profile` (the demo agent uses the claude parser).
pub fn parse_output(profile: &AgentProfile, stdout: &str, stderr: &str, exit: &ExitRecord) -> AgentOutput {
    match profile {
        AgentProfile::Claude | AgentProfile::Demo => parse_claude_stream_json(stdout, stderr, exit),
        AgentProfile::Codex => parse_codex_jsonl(stdout, stderr, exit),
        AgentProfile::Gemini => parse_gemini_json(stdout, stderr, exit),
        AgentProfile::Command { .. } => parse_command_output(stdout, stderr, exit),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inv() -> AgentInvocation {
        AgentInvocation {
            model: Some("sonnet".into()),
            permission_mode: Some("auto-edit".into()),
            allowed_tools: vec!["Read".into(), "Edit".into()],
            baton_exe: PathBuf::from("/opt/baton"),
            prompt_path: PathBuf::from("/runs/1/prompt.md"),
            cwd: PathBuf::from("/wt/1"),
            mcp: StepServers::default(),
            mcp_config: None,
        }
    }

    /// [`inv`] with the step naming the MCP servers `github` (stdio, a token by reference)
    /// and `docs` (HTTP, a bearer token by reference) out of three defined.
    fn inv_with_mcp() -> AgentInvocation {
        let defined: std::collections::BTreeMap<String, super::super::mcp::McpServer> = toml::from_str(
            r#"
[github]
command = "npx"
args = ["-y", "@modelcontextprotocol/server-github"]
env = { GITHUB_PERSONAL_ACCESS_TOKEN = "${GITHUB_TOKEN}" }
[docs]
url = "https://docs.example.com/mcp"
bearer_token_env = "DOCS_TOKEN"
[other]
command = "other-server"
"#,
        )
        .unwrap();
        let names = ["github".to_string(), "docs".to_string()];
        AgentInvocation {
            mcp: StepServers::select(&defined, &names, "1.1").unwrap(),
            mcp_config: Some(PathBuf::from("/runs/1/mcp.json")),
            ..inv()
        }
    }

    #[test]
    fn claude_argv_with_mcp_servers_is_strict_and_allows_their_tools() {
        let cmd = build_argv(&AgentProfile::Claude, &inv_with_mcp());
        assert_eq!(
            strs(&cmd.argv[5..]),
            [
                "--model",
                "sonnet",
                "--permission-mode",
                "acceptEdits",
                "--mcp-config",
                "/runs/1/mcp.json",
                "--strict-mcp-config",
                "--allowedTools",
                "Read,Edit,mcp__github,mcp__docs"
            ]
        );
        let no_tools = AgentInvocation { allowed_tools: Vec::new(), ..inv_with_mcp() };
        let argv = build_argv(&AgentProfile::Claude, &no_tools).argv;
        assert_eq!(strs(&argv[argv.len() - 2..]), ["--allowedTools", "mcp__github,mcp__docs"]);
        assert!(!build_argv(&AgentProfile::Claude, &inv()).argv.iter().any(|a| a.contains("mcp")));
    }

    #[test]
    fn codex_argv_with_mcp_servers_carries_config_overrides() {
        let cmd = build_argv(&AgentProfile::Codex, &inv_with_mcp());
        assert_eq!(
            strs(&cmd.argv),
            [
                "codex",
                "exec",
                "--json",
                "--model",
                "sonnet",
                "--sandbox",
                "workspace-write",
                "-c",
                r#"mcp_servers.github.command="npx""#,
                "-c",
                r#"mcp_servers.github.args=["-y", "@modelcontextprotocol/server-github"]"#,
                "-c",
                r#"mcp_servers.github.env_vars=["GITHUB_PERSONAL_ACCESS_TOKEN"]"#,
                "-c",
                r#"mcp_servers.docs.url="https://docs.example.com/mcp""#,
                "-c",
                r#"mcp_servers.docs.bearer_token_env_var="DOCS_TOKEN""#,
                "-"
            ]
        );
        assert!(!cmd.argv.iter().any(|a| a.contains("other")), "only the servers the step names");
    }

    #[test]
    fn command_template_gets_the_mcp_config_path() {
        let profile = AgentProfile::Command { argv_template: vec!["my-agent".into(), "--mcp={mcp_config}".into()] };
        assert_eq!(strs(&build_argv(&profile, &inv_with_mcp()).argv), ["my-agent", "--mcp=/runs/1/mcp.json"]);
        assert_eq!(strs(&build_argv(&profile, &inv()).argv), ["my-agent", "--mcp="]);
    }

    fn strs(v: &[String]) -> Vec<&str> {
        v.iter().map(String::as_str).collect()
    }

    #[test]
    fn claude_argv() {
        let cmd = build_argv(&AgentProfile::Claude, &inv());
        assert_eq!(
            strs(&cmd.argv),
            [
                "claude",
                "--print",
                "--output-format",
                "stream-json",
                "--verbose",
                "--model",
                "sonnet",
                "--permission-mode",
                "acceptEdits",
                "--allowedTools",
                "Read,Edit"
            ]
        );
        assert!(cmd.prompt_on_stdin);
        let bare = build_argv(&AgentProfile::Claude, &AgentInvocation::default());
        assert_eq!(bare.argv.len(), 5);
    }

    #[test]
    fn codex_argv() {
        let cmd = build_argv(&AgentProfile::Codex, &inv());
        assert_eq!(
            strs(&cmd.argv),
            ["codex", "exec", "--json", "--model", "sonnet", "--sandbox", "workspace-write", "-"]
        );
        assert!(cmd.prompt_on_stdin);
        let read_only = AgentInvocation { permission_mode: Some("plan".into()), ..AgentInvocation::default() };
        assert_eq!(
            strs(&build_argv(&AgentProfile::Codex, &read_only).argv),
            ["codex", "exec", "--json", "--sandbox", "read-only", "-"]
        );
    }

    #[test]
    fn gemini_argv() {
        let cmd = build_argv(&AgentProfile::Gemini, &inv());
        assert_eq!(
            strs(&cmd.argv),
            [
                "gemini",
                "--output-format",
                "json",
                "--model",
                "sonnet",
                "--approval-mode",
                "auto_edit",
                "--prompt",
                GEMINI_PROMPT_ARG
            ]
        );
        assert!(cmd.prompt_on_stdin, "the delegation prompt never travels in the argv");
        let plan = AgentInvocation { permission_mode: Some("plan".into()), ..AgentInvocation::default() };
        assert_eq!(
            strs(&build_argv(&AgentProfile::Gemini, &plan).argv),
            ["gemini", "--output-format", "json", "--approval-mode", "default", "--prompt", GEMINI_PROMPT_ARG]
        );
        let bypass =
            AgentInvocation { permission_mode: Some("bypassPermissions".into()), ..AgentInvocation::default() };
        assert!(build_argv(&AgentProfile::Gemini, &bypass).argv.contains(&"yolo".to_owned()));
        assert_eq!(serde_json::from_str::<AgentProfile>(r#"{"kind":"gemini"}"#).unwrap(), AgentProfile::Gemini);
        assert_eq!(final_event(&AgentProfile::Gemini), None, "its end is its exit");
    }

    #[test]
    fn command_template_substitutes_per_element_without_a_shell() {
        let profile = AgentProfile::Command {
            argv_template: vec![
                "my-agent".into(),
                "--prompt={prompt_file}".into(),
                "-m".into(),
                "{model}".into(),
                "{cwd}/{unknown}".into(),
            ],
        };
        let mut i = inv();
        i.model = Some("{cwd}; rm -rf /".into());
        let cmd = build_argv(&profile, &i);
        assert_eq!(
            strs(&cmd.argv),
            ["my-agent", "--prompt=/runs/1/prompt.md", "-m", "{cwd}; rm -rf /", "/wt/1/{unknown}"]
        );
        assert!(!cmd.prompt_on_stdin);
        let stdin_profile = AgentProfile::Command { argv_template: vec!["cat".into()] };
        assert!(build_argv(&stdin_profile, &i).prompt_on_stdin);
    }

    #[test]
    fn demo_argv() {
        let cmd = build_argv(&AgentProfile::Demo, &inv());
        assert_eq!(strs(&cmd.argv), ["/opt/baton", "agent", "demo"]);
        assert!(cmd.prompt_on_stdin);
    }

    #[test]
    fn profiles_round_trip_as_tagged_json() {
        let p = AgentProfile::Command { argv_template: vec!["x".into()] };
        let json = serde_json::to_string(&p).unwrap();
        assert_eq!(json, r#"{"kind":"command","argv_template":["x"]}"#);
        assert_eq!(serde_json::from_str::<AgentProfile>(&json).unwrap(), p);
        assert_eq!(serde_json::from_str::<AgentProfile>(r#"{"kind":"claude"}"#).unwrap(), AgentProfile::Claude);
    }

    #[test]
    fn env_whitelist_drops_secrets() {
        let parent = [
            ("PATH", "/usr/bin"),
            ("GITHUB_TOKEN", "ghp_x"),
            ("HOME", "/home/u"),
            ("ADO_PAT", "pat"),
            ("BATON_WEBHOOK_SECRET", "s"),
            ("BATON_DATA_DIR", "/d"),
            ("ANTHROPIC_API_KEY", "sk"),
            ("AWS_SECRET_ACCESS_KEY", "a"),
            ("path", "lowercase is another variable"),
            ("OPENAI_API_KEY", "o"),
            ("GEMINI_API_KEY", "g"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()));
        let env = agent_env(parent.into_iter());
        let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["PATH", "HOME", "ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY"]);
        assert!(AGENT_ENV_WHITELIST
            .iter()
            .all(|n| !n.starts_with("BATON_") && *n != "GITHUB_TOKEN" && *n != "ADO_PAT"));
    }

    #[test]
    fn demo_output_uses_the_claude_parser() {
        let exit = ExitRecord {
            exit_code: Some(0),
            signal: None,
            timed_out: false,
            stopped_after_result: false,
            spawn_error: None,
            started_at: String::new(),
            finished_at: String::new(),
            duration_ms: 0,
        };
        let stdout = r#"{"type":"result","is_error":false,"result":"ok","total_cost_usd":0.01}"#;
        let out = parse_output(&AgentProfile::Demo, stdout, "", &exit);
        assert!(out.success);
        assert_eq!(out.cost_usd, Some(0.01));
        let cmd = parse_output(&AgentProfile::Command { argv_template: vec![] }, stdout, "", &exit);
        assert_eq!(cmd.cost_usd, None);
        assert_eq!(final_event(&AgentProfile::Demo), Some(FinalEvent::ClaudeResult));
        assert_eq!(final_event(&AgentProfile::Command { argv_template: vec![] }), None);
        assert!(!parse_output(&AgentProfile::Codex, stdout, "", &exit).success);
        let gemini =
            r#"{"response":"ok","stats":{"models":{"gemini-2.5-pro":{"tokens":{"prompt":5,"candidates":1}}}}}"#;
        let out = parse_output(&AgentProfile::Gemini, gemini, "", &exit);
        assert!(out.success);
        assert_eq!((out.input_tokens, out.output_tokens, out.cost_usd), (5, 1, None));
    }
}
