//! MCP servers per step: the `[mcp_servers.<name>]` tables of `baton.toml`, which of them a
//! step gets (exactly the names its `mcp_servers` lists), and how each agent CLI is told.
//!
//! Secrets never pass through here as values. A server's `env` value is either a literal or a
//! reference `"${NAME}"` to a variable of Baton's own environment, and `bearer_token_env` names
//! such a variable; what this module hands on is the *names*: the generated config refers to the
//! variable (`${VAR}`, which Claude Code expands; codex's `env_vars` / `bearer_token_env_var`
//! forward it), and [`StepServers::env_from`] says which variable the attempt's shim copies
//! from its own environment into the agent's when it starts it. So the plan, the journal, the
//! run directory (`attempt.json`, the generated `mcp.json`) and the logs only ever hold names.
//! Pure functions: no IO, no environment reads.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `[mcp_servers.<name>]` in `baton.toml`: one MCP server, stdio (`command`) or HTTP (`url`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServer {
    /// Program of a stdio server (looked up on the agent's `PATH`); exclusive with `url`.
    pub command: Option<String>,
    /// Its arguments, one element each (never through a shell).
    #[serde(default)]
    pub args: Vec<String>,
    /// Environment of a stdio server: a literal value, or `"${NAME}"` to take variable `NAME`
    /// of Baton's environment at launch (the value is never written anywhere by Baton).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Address of a streamable-HTTP server; exclusive with `command`.
    pub url: Option<String>,
    /// Variable of Baton's environment holding the bearer token of an HTTP server (sent as
    /// `Authorization: Bearer …`).
    pub bearer_token_env: Option<String>,
}

/// What one `env` value of a server is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvValue<'a> {
    /// Used as written.
    Literal(&'a str),
    /// `"${NAME}"`: the value of Baton's environment variable `NAME` at launch.
    FromEnv(&'a str),
}

/// Reads an `env` value: `"${NAME}"` is a reference, anything without `${` a literal.
///
/// Errors: `${` anywhere else (a partial reference such as `"Bearer ${T}"`, an unclosed one), or
/// a reference whose name is not a variable name.
pub fn env_value(value: &str) -> Result<EnvValue<'_>, String> {
    if !value.contains("${") {
        return Ok(EnvValue::Literal(value));
    }
    let name = value
        .strip_prefix("${")
        .and_then(|rest| rest.strip_suffix('}'))
        .ok_or_else(|| format!("{value:?} must be a literal without `${{` or exactly one reference \"${{NAME}}\""))?;
    if !is_var_name(name) {
        return Err(format!("{value:?} does not name an environment variable (letters, digits and `_`)"));
    }
    Ok(EnvValue::FromEnv(name))
}

/// `[A-Za-z_][A-Za-z0-9_]*`.
fn is_var_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Checks every `[mcp_servers.<name>]` table; the message names the server and the field.
///
/// Rules: a name of letters, digits, `-` and `_` (it becomes a codex config key and a claude tool
/// prefix); exactly one of `command` and `url`; `args` and `env` only with `command`,
/// `bearer_token_env` only with `url`; `env` keys are variable names and values as
/// [`env_value`] reads them; no `${` in `command`, `args` or `url` (references are whole `env`
/// values only, so every CLI sees the same thing).
pub fn check_servers(servers: &BTreeMap<String, McpServer>) -> Result<(), String> {
    for (name, server) in servers {
        let bad = |what: String| Err(format!("[mcp_servers.{name}]: {what}"));
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_')) {
            return bad("the name may hold only letters, digits, `-` and `_`".into());
        }
        match (&server.command, &server.url) {
            (Some(_), Some(_)) => {
                return bad("give `command` (a stdio server) or `url` (an HTTP server), not both".into())
            }
            (None, None) => return bad("needs `command` (a stdio server) or `url` (an HTTP server)".into()),
            (Some(command), None) => {
                if command.trim().is_empty() {
                    return bad("`command` is empty".into());
                }
                if server.bearer_token_env.is_some() {
                    return bad("`bearer_token_env` is for an HTTP server (`url`)".into());
                }
            }
            (None, Some(url)) => {
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return bad(format!("`url` {url:?} is not an http:// or https:// address"));
                }
                if !server.args.is_empty() || !server.env.is_empty() {
                    return bad("`args` and `env` are for a stdio server (`command`)".into());
                }
            }
        }
        let texts = server.command.iter().chain(&server.args).chain(&server.url);
        if let Some(text) = texts.into_iter().find(|t| t.contains("${")) {
            return bad(format!(
                "{text:?}: a `${{…}}` reference may only be a whole `env` value (or use `bearer_token_env`)"
            ));
        }
        for (key, value) in &server.env {
            if !is_var_name(key) {
                return bad(format!("env key {key:?} is not an environment variable name"));
            }
            if let Err(why) = env_value(value) {
                return bad(format!("env {key}: {why}"));
            }
        }
        if let Some(var) = &server.bearer_token_env {
            if !is_var_name(var) {
                return bad(format!("bearer_token_env {var:?} is not an environment variable name"));
            }
        }
    }
    Ok(())
}

/// The MCP servers one step gets, in the order its `mcp_servers` names them (duplicates once).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepServers {
    servers: Vec<(String, McpServer)>,
}

impl StepServers {
    /// Picks the servers `names` (a step's `mcp_servers`) from those `defined` in `baton.toml`.
    ///
    /// Errors, naming `step_id`: a name `baton.toml` does not define (listing those it does), or
    /// two servers that set one agent variable from different sources (`env` references of the
    /// same key to two variables).
    pub fn select(
        defined: &BTreeMap<String, McpServer>,
        names: &[String],
        step_id: &str,
    ) -> Result<StepServers, String> {
        let mut servers: Vec<(String, McpServer)> = Vec::new();
        for name in names {
            let Some(server) = defined.get(name) else {
                let known = if defined.is_empty() {
                    "baton.toml defines none".to_string()
                } else {
                    format!(
                        "baton.toml defines {}",
                        defined.keys().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ")
                    )
                };
                return Err(format!("step {step_id}: unknown MCP server `{name}` in mcp_servers ({known})"));
            };
            if !servers.iter().any(|(n, _)| n == name) {
                servers.push((name.clone(), server.clone()));
            }
        }
        let chosen = StepServers { servers };
        let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
        for (name, source) in chosen.refs() {
            if let Some(first) = seen.insert(name, source) {
                if first != source {
                    return Err(format!(
                        "step {step_id}: its MCP servers set {name} from both ${{{first}}} and ${{{source}}}"
                    ));
                }
            }
        }
        Ok(chosen)
    }

    /// True when the step names no server.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// The servers' names, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.servers.iter().map(|(n, _)| n.as_str())
    }

    /// Every (agent variable, Baton variable) pair the servers refer to: `env` references
    /// (`KEY = "${SOURCE}"` gives `(KEY, SOURCE)`) and bearer tokens (`(VAR, VAR)`).
    fn refs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.servers.iter().flat_map(|(_, s)| {
            let env = s.env.iter().filter_map(|(k, v)| match env_value(v) {
                Ok(EnvValue::FromEnv(source)) => Some((k.as_str(), source)),
                _ => None,
            });
            env.chain(s.bearer_token_env.as_deref().map(|v| (v, v)))
        })
    }

    /// The variables the shim sets in the agent's environment from its own at launch:
    /// (name in the agent's environment, name in Baton's), sorted and without duplicates.
    /// The agent CLI passes each on to the server that refers to it.
    pub fn env_from(&self) -> Vec<(String, String)> {
        let mut pairs: Vec<(String, String)> = self.refs().map(|(k, s)| (k.to_string(), s.to_string())).collect();
        pairs.sort();
        pairs.dedup();
        pairs
    }

    /// Claude Code's `--mcp-config` JSON (`{"mcpServers": {…}}`): stdio servers with `command`,
    /// `args`, `env`; HTTP servers with `type: "http"`, `url` and an `Authorization` header. A
    /// reference is written as `${NAME}` of the agent's variable (Claude Code expands `${VAR}`
    /// in `env`, `url` and `headers`), never as its value.
    pub fn claude_config(&self) -> serde_json::Value {
        let mut servers = serde_json::Map::new();
        for (name, s) in &self.servers {
            let entry = match (&s.command, &s.url) {
                (Some(command), _) => {
                    let env: serde_json::Map<String, serde_json::Value> = s
                        .env
                        .iter()
                        .map(|(k, v)| {
                            let value = match env_value(v) {
                                Ok(EnvValue::FromEnv(_)) => format!("${{{k}}}"),
                                _ => v.clone(),
                            };
                            (k.clone(), value.into())
                        })
                        .collect();
                    serde_json::json!({"type": "stdio", "command": command, "args": s.args, "env": env})
                }
                (None, url) => {
                    let mut entry = serde_json::json!({"type": "http", "url": url.clone().unwrap_or_default()});
                    if let Some(var) = &s.bearer_token_env {
                        entry["headers"] = serde_json::json!({"Authorization": format!("Bearer ${{{var}}}")});
                    }
                    entry
                }
            };
            servers.insert(name.clone(), entry);
        }
        serde_json::json!({ "mcpServers": servers })
    }

    /// codex's equivalent: `-c mcp_servers.<name>.<key>=<TOML value>` overrides (codex has no
    /// config-file flag). Stdio: `command`, `args`, `env` (literals only) and `env_vars` (the
    /// referenced variables, which codex forwards from its environment); HTTP: `url` and
    /// `bearer_token_env_var`.
    pub fn codex_overrides(&self) -> Vec<String> {
        let mut argv = Vec::new();
        let mut set = |name: &str, key: &str, value: toml::Value| {
            argv.push("-c".to_string());
            argv.push(format!("mcp_servers.{name}.{key}={value}"));
        };
        for (name, s) in &self.servers {
            if let Some(command) = &s.command {
                set(name, "command", toml::Value::String(command.clone()));
                let args = s.args.iter().cloned().map(toml::Value::String).collect();
                set(name, "args", toml::Value::Array(args));
                let mut literals = toml::map::Map::new();
                let mut forwarded = Vec::new();
                for (k, v) in &s.env {
                    match env_value(v) {
                        Ok(EnvValue::FromEnv(_)) => forwarded.push(toml::Value::String(k.clone())),
                        _ => {
                            literals.insert(k.clone(), toml::Value::String(v.clone()));
                        }
                    }
                }
                if !literals.is_empty() {
                    set(name, "env", toml::Value::Table(literals));
                }
                if !forwarded.is_empty() {
                    set(name, "env_vars", toml::Value::Array(forwarded));
                }
            }
            if let Some(url) = &s.url {
                set(name, "url", toml::Value::String(url.clone()));
                if let Some(var) = &s.bearer_token_env {
                    set(name, "bearer_token_env_var", toml::Value::String(var.clone()));
                }
            }
        }
        argv
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn servers(toml_text: &str) -> BTreeMap<String, McpServer> {
        #[derive(Deserialize)]
        struct Doc {
            mcp_servers: BTreeMap<String, McpServer>,
        }
        toml::from_str::<Doc>(toml_text).unwrap().mcp_servers
    }

    const DEFINED: &str = r#"
[mcp_servers.github]
command = "npx"
args = ["-y", "@modelcontextprotocol/server-github"]
env = { GITHUB_PERSONAL_ACCESS_TOKEN = "${GH_MCP_TOKEN}", LOG_LEVEL = "debug" }

[mcp_servers.docs]
url = "https://docs.example.com/mcp"
bearer_token_env = "DOCS_TOKEN"

[mcp_servers.unused]
command = "unused-server"
"#;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn env_values_are_literals_or_whole_references() {
        assert_eq!(env_value("debug"), Ok(EnvValue::Literal("debug")));
        assert_eq!(env_value("$HOME"), Ok(EnvValue::Literal("$HOME")));
        assert_eq!(env_value("${GITHUB_TOKEN}"), Ok(EnvValue::FromEnv("GITHUB_TOKEN")));
        for bad in ["Bearer ${T}", "${T", "${}", "${A-B}", "${A}${B}"] {
            assert!(env_value(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_step_gets_exactly_the_servers_it_names() {
        let defined = servers(DEFINED);
        check_servers(&defined).unwrap();
        let step = StepServers::select(&defined, &names(&["docs", "github", "docs"]), "1.2").unwrap();
        assert_eq!(step.names().collect::<Vec<_>>(), ["docs", "github"]);
        assert_eq!(
            step.env_from(),
            [
                ("DOCS_TOKEN".into(), "DOCS_TOKEN".into()),
                ("GITHUB_PERSONAL_ACCESS_TOKEN".into(), "GH_MCP_TOKEN".into())
            ]
        );
        assert!(StepServers::select(&defined, &[], "1.2").unwrap().is_empty());
    }

    #[test]
    fn an_unknown_name_is_an_error_naming_the_step_and_the_defined_servers() {
        let err = StepServers::select(&servers(DEFINED), &names(&["github", "jira"]), "2.1").unwrap_err();
        assert_eq!(
            err,
            "step 2.1: unknown MCP server `jira` in mcp_servers (baton.toml defines `docs`, `github`, `unused`)"
        );
        let none = StepServers::select(&BTreeMap::new(), &names(&["jira"]), "2.1").unwrap_err();
        assert!(none.ends_with("(baton.toml defines none)"), "{none}");
    }

    #[test]
    fn two_servers_setting_one_variable_from_different_sources_are_refused() {
        let defined = servers(
            "[mcp_servers.a]\ncommand = 'a'\nenv = { TOKEN = '${A_TOKEN}' }\n[mcp_servers.b]\ncommand = 'b'\nenv = { TOKEN = '${B_TOKEN}' }\n[mcp_servers.c]\ncommand = 'c'\nenv = { TOKEN = '${A_TOKEN}' }\n",
        );
        let err = StepServers::select(&defined, &names(&["a", "b"]), "1.1").unwrap_err();
        assert!(err.starts_with("step 1.1:") && err.contains("${A_TOKEN}") && err.contains("${B_TOKEN}"), "{err}");
        let same = StepServers::select(&defined, &names(&["a", "c"]), "1.1").unwrap();
        assert_eq!(same.env_from(), [("TOKEN".into(), "A_TOKEN".into())]);
    }

    #[test]
    fn claude_config_refers_to_variables_and_holds_no_value() {
        let step = StepServers::select(&servers(DEFINED), &names(&["github", "docs"]), "1.1").unwrap();
        assert_eq!(
            step.claude_config(),
            serde_json::json!({"mcpServers": {
                "github": {"type": "stdio", "command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"],
                           "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "${GITHUB_PERSONAL_ACCESS_TOKEN}", "LOG_LEVEL": "debug"}},
                "docs": {"type": "http", "url": "https://docs.example.com/mcp",
                         "headers": {"Authorization": "Bearer ${DOCS_TOKEN}"}}
            }})
        );
    }

    #[test]
    fn codex_overrides_forward_variables_by_name() {
        let step = StepServers::select(&servers(DEFINED), &names(&["github", "docs"]), "1.1").unwrap();
        assert_eq!(
            step.codex_overrides(),
            [
                "-c",
                r#"mcp_servers.github.command="npx""#,
                "-c",
                r#"mcp_servers.github.args=["-y", "@modelcontextprotocol/server-github"]"#,
                "-c",
                r#"mcp_servers.github.env={ LOG_LEVEL = "debug" }"#,
                "-c",
                r#"mcp_servers.github.env_vars=["GITHUB_PERSONAL_ACCESS_TOKEN"]"#,
                "-c",
                r#"mcp_servers.docs.url="https://docs.example.com/mcp""#,
                "-c",
                r#"mcp_servers.docs.bearer_token_env_var="DOCS_TOKEN""#,
            ]
        );
    }

    #[test]
    fn malformed_servers_are_refused_naming_server_and_field() {
        let cases = [
            ("[mcp_servers.x]\nargs = ['a']\n", "[mcp_servers.x]: needs `command`"),
            ("[mcp_servers.x]\ncommand = 'a'\nurl = 'https://h'\n", "not both"),
            ("[mcp_servers.x]\nurl = 'ftp://h'\n", "not an http"),
            ("[mcp_servers.x]\nurl = 'https://h'\nenv = { A = 'b' }\n", "for a stdio server"),
            ("[mcp_servers.x]\ncommand = 'a'\nbearer_token_env = 'T'\n", "for an HTTP server"),
            ("[mcp_servers.x]\ncommand = 'a'\nenv = { A = 'Bearer ${T}' }\n", "env A:"),
            ("[mcp_servers.x]\ncommand = 'a'\nargs = ['--token=${T}']\n", "whole `env` value"),
            ("[mcp_servers.x]\ncommand = 'a'\nenv = { 'A-B' = 'v' }\n", "not an environment variable name"),
            ("[mcp_servers.'a.b']\ncommand = 'a'\n", "[mcp_servers.a.b]: the name"),
            ("[mcp_servers.x]\nurl = 'https://h'\nbearer_token_env = '$T'\n", "bearer_token_env"),
        ];
        for (text, expected) in cases {
            let err = check_servers(&servers(text)).unwrap_err();
            assert!(err.contains(expected), "{text}: {err}");
        }
    }
}
