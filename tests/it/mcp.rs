//! MCP servers per step (issue 18.2): a step gets exactly the `baton.toml` servers it names,
//! through a generated `--mcp-config` file, and a server's secret reaches the agent only through
//! its environment, never the journal, the run directory or the logs. Real `baton` drivers and
//! shims; `claude` is a shell script on `PATH` that records what it was given.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::common::*;

const SECRET: &str = "ghp_S3CRET_only_in_the_environment_4711";

const CONFIG: &str = r#"
[agents.dev]
profile = "claude"

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

/// A `claude` stand-in in `<tmp>/bin` that records, per step (`$BATON_STEP_ID`), its argv, the
/// file given to `--mcp-config` and that file's mode, and its environment, into `record`; then
/// writes `<step>.md` and prints a successful stream-json result.
fn fake_claude(ws: &Workspace, record: &Path) -> PathBuf {
    let bin = ws.tmp.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(record).unwrap();
    let rec = record.display();
    let body = format!(
        r#"#!/bin/sh
cat > /dev/null
out="{rec}/$BATON_STEP_ID"
for a in "$@"; do printf '%s\n' "$a"; done > "$out.argv"
prev=""
for a in "$@"; do
  if [ "$prev" = "--mcp-config" ]; then cp "$a" "$out.mcp.json"; stat -c %a "$a" > "$out.mode"; fi
  prev="$a"
done
env > "$out.env"
echo done > "$BATON_STEP_ID.md"
echo '{{"type":"result","subtype":"success","is_error":false,"result":"done","total_cost_usd":0.01,"usage":{{"input_tokens":10,"output_tokens":5}}}}'
"#
    );
    let path = bin.join("claude");
    std::fs::write(&path, body).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

fn plan(ws: &Workspace, task_id: &str, steps: serde_json::Value) -> PathBuf {
    let plan = serde_json::json!({"task_id": task_id, "task_summary": "s",
        "phases": [{"phase_id": 1, "name": "P", "steps": steps}]});
    ws.write(&format!("{task_id}.json"), &plan.to_string())
}

fn step(id: &str, servers: &[&str]) -> serde_json::Value {
    serde_json::json!({"step_id": id, "agent_name": "dev", "task_description": "do the work",
        "deliverables": [format!("{id}.md")], "mcp_servers": servers})
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every file under `dir` (recursively) whose bytes contain `needle`.
fn files_containing(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut hits = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return hits };
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            hits.extend(files_containing(&path, needle));
        } else if let Ok(bytes) = std::fs::read(&path) {
            if bytes.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                hits.push(path);
            }
        }
    }
    hits
}

#[test]
fn a_step_gets_exactly_its_mcp_servers_and_their_secret_only_through_the_environment() {
    let ws = Workspace::with_repo(&[("README.md", "x\n")]);
    std::fs::create_dir_all(ws.data()).unwrap();
    std::fs::write(ws.data().join("baton.toml"), CONFIG).unwrap();
    let record = ws.tmp.path().join("record");
    let bin = fake_claude(&ws, &record);
    let plan = plan(&ws, "mcp-1", serde_json::json!([step("1.1", &["github"]), step("1.2", &[])]));
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let api_key = "sk-ant-api-key-never-on-disk-0815";
    let out = ws.run_plan_with(
        &plan,
        &[],
        &[("PATH", &path), ("GH_MCP_TOKEN", SECRET), ("BATON_LOG", "debug"), ("ANTHROPIC_API_KEY", api_key)],
    );
    assert_eq!(code(&out), 0, "{}\n{}", stdout(&out), stderr(&out));

    // Step 1.1 named `github`: its claude got that server, and only that one, strictly.
    let argv: Vec<String> = read(&record.join("1.1.argv")).lines().map(str::to_owned).collect();
    let at = argv.iter().position(|a| a == "--mcp-config").expect("--mcp-config");
    let given = Path::new(&argv[at + 1]);
    assert_eq!(given, ws.data().join("runs/mcp-1/1.1/1/mcp.json"), "{argv:?}");
    assert_eq!(argv[at + 2], "--strict-mcp-config", "{argv:?}");
    let tools = argv.iter().position(|a| a == "--allowedTools").map(|i| argv[i + 1].as_str());
    assert_eq!(tools, Some("mcp__github"), "the server's tools are allowed: {argv:?}");
    let config: serde_json::Value = serde_json::from_str(&read(&record.join("1.1.mcp.json"))).unwrap();
    assert_eq!(
        config,
        serde_json::json!({"mcpServers": {"github": {
            "type": "stdio", "command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"],
            "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "${GITHUB_PERSONAL_ACCESS_TOKEN}", "LOG_LEVEL": "debug"}}}})
    );
    assert_eq!(read(&record.join("1.1.mode")).trim(), "600", "the generated file is the owner's only");
    // The server's variable reached the agent (which expands `${…}` into the server's env) under
    // the server's name; Baton's own variable did not.
    let env = read(&record.join("1.1.env"));
    assert!(env.lines().any(|l| l == format!("GITHUB_PERSONAL_ACCESS_TOKEN={SECRET}")), "{env}");
    assert!(!env.contains("GH_MCP_TOKEN"), "{env}");
    assert!(!env.contains("DOCS_TOKEN"), "a server the step did not name: {env}");

    // Step 1.2 named none: no MCP flag, no secret.
    let argv2 = read(&record.join("1.2.argv"));
    assert!(!argv2.contains("mcp"), "{argv2}");
    assert!(!record.join("1.2.mcp.json").exists());
    assert!(!read(&record.join("1.2.env")).contains(SECRET));
    assert!(!ws.data().join("runs/mcp-1/1.2/1/mcp.json").exists());

    // The secret is nowhere Baton writes: journal (SQLite and its WAL), run dirs, logs, output.
    let leaks = files_containing(&ws.data(), SECRET);
    assert!(leaks.is_empty(), "the secret was written to {leaks:?}");
    // The agent CLI's own API key reaches every agent the same way: by name, never on disk
    // (attempt.json once held its value).
    assert!(read(&record.join("1.2.env")).lines().any(|l| l == format!("ANTHROPIC_API_KEY={api_key}")));
    let leaks = files_containing(&ws.data(), api_key);
    assert!(leaks.is_empty(), "the API key was written to {leaks:?}");
    assert!(!stdout(&out).contains(SECRET) && !stderr(&out).contains(SECRET));
    let status = ws.status("mcp-1");
    assert!(!status.to_string().contains(SECRET));
    assert_eq!(status["step_results"]["1.1"]["status"], "complete", "{status}");
    assert_eq!(status["plan"]["phases"][0]["steps"][0]["mcp_servers"], serde_json::json!(["github"]), "{status}");
}

#[test]
fn an_unknown_mcp_server_is_refused_at_plan_check_naming_the_step() {
    let ws = Workspace::with_repo(&[("README.md", "x\n")]);
    std::fs::create_dir_all(ws.data()).unwrap();
    std::fs::write(ws.data().join("baton.toml"), CONFIG).unwrap();
    let plan = plan(&ws, "mcp-2", serde_json::json!([step("1.1", &[]), step("1.2", &["github", "jira"])]));
    let out = ws.run_plan(&plan);
    assert_eq!(code(&out), 2, "{}\n{}", stdout(&out), stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(
            "step 1.2: unknown MCP server `jira` in mcp_servers (baton.toml defines `docs`, `github`, `unused`)"
        ),
        "{err}"
    );
    assert!(!ws.data().join("runs/mcp-2").exists(), "nothing ran");
    assert!(!ws.run(&["execute", "status", "--json", "--task-id", "mcp-2"]).status.success(), "nothing was created");
}

#[test]
fn a_server_secret_missing_from_the_environment_fails_the_step_naming_the_variable() {
    let ws = Workspace::with_repo(&[("README.md", "x\n")]);
    std::fs::create_dir_all(ws.data()).unwrap();
    std::fs::write(ws.data().join("baton.toml"), CONFIG).unwrap();
    let record = ws.tmp.path().join("record");
    let bin = fake_claude(&ws, &record);
    let plan = plan(&ws, "mcp-3", serde_json::json!([step("1.1", &["docs"])]));
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let mut cmd = ws.baton();
    cmd.env("PATH", &path).env_remove("DOCS_TOKEN");
    let out = cmd.args(["execute", "run", "--plan"]).arg(&plan).arg("--repo").arg(ws.repo()).output().unwrap();
    assert_ne!(code(&out), 0, "{}\n{}", stdout(&out), stderr(&out));
    let step = &ws.status("mcp-3")["step_results"]["1.1"];
    assert_eq!(step["status"], "failed", "{step}");
    let error = step["error"].as_str().unwrap();
    assert!(error.contains("DOCS_TOKEN") && error.contains("not set"), "{error}");
    assert!(!record.join("1.1.argv").exists(), "the agent never started");
}

/// gemini reads MCP servers only from its settings.json: a step on a gemini agent that names
/// servers is refused at plan check rather than run without them.
#[test]
fn a_gemini_step_that_names_mcp_servers_is_refused_at_plan_check() {
    let ws = Workspace::with_repo(&[("README.md", "x\n")]);
    std::fs::create_dir_all(ws.data()).unwrap();
    let config = CONFIG.replace("[agents.dev]\nprofile = \"claude\"", "[agents.dev]\nprofile = \"gemini\"");
    std::fs::write(ws.data().join("baton.toml"), config).unwrap();
    let plan = plan(&ws, "mcp-gem", serde_json::json!([step("1.1", &["github"])]));
    let out = ws.run_plan(&plan);
    assert_eq!(code(&out), 2, "{}\n{}", stdout(&out), stderr(&out));
    assert!(stderr(&out).contains("step 1.1: names MCP servers, but agent dev runs gemini"), "{}", stderr(&out));
    assert!(!ws.data().join("runs/mcp-gem").exists(), "nothing ran");
}
