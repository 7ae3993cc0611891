//! `ci` and `review` gates without a command (issue 19.2), end to end: a real `baton serve`
//! with the demo agent, a real git repository whose `origin` is a local bare repository, and
//! local mock forges serving the check runs, combined status, builds and commit statuses of
//! `tests/fixtures` (shaped as the GitHub and Azure DevOps documentation shows them). The ci
//! gate pushes the feature branch, waits (WAIT in the API, "CI: 2 of 3 checks done" on the
//! card), is woken by signed webhooks (tampered, unsigned and replayed ones refused), passes,
//! fails naming the failed check, times out, and fails without any check; a project without a
//! forge cannot fire a plan with a ci gate. A review gate runs a fake reviewer (pass, fail) or,
//! without one, asks a human.

use std::path::PathBuf;
use std::time::Duration;

use baton::clock::Stopwatch;
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use wiremock::matchers::{method, path_regex};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::common::{fixture_bytes, fixture_json, Workspace};
use crate::serve::Server;

const SECRET: &str = "It's a Secret to Everybody";
/// `Basic` of `hooks:hook-secret`.
const ADO_AUTH: &str = "Authorization: Basic aG9va3M6aG9vay1zZWNyZXQ=\r\n";
/// `Basic` of `hooks:wrong`.
const ADO_WRONG: &str = "Authorization: Basic aG9va3M6d3Jvbmc=\r\n";

struct Setup {
    ws: Workspace,
    bare: PathBuf,
    server: Server,
}

/// A repository with a bare `origin`, `baton.toml` holding `toml`, and a server whose forges
/// are the mocks (`github`, `ado`: their addresses).
fn setup(toml: &str, github: &str, ado: &str) -> Setup {
    let ws = Workspace::with_repo(&[("README.md", "hello\n"), ("src/lib.rs", "pub fn f() {}\n")]);
    let bare = ws.tmp.path().join("remote.git");
    let out = std::process::Command::new("git").args(["init", "-q", "--bare"]).arg(&bare).output().unwrap();
    assert!(out.status.success());
    ws.git(&["remote", "add", "origin", bare.to_str().unwrap()]);
    std::fs::create_dir_all(ws.data()).unwrap();
    std::fs::write(ws.data().join("baton.toml"), toml).unwrap();
    let server = Server::start_env(
        &ws.data(),
        &[],
        &[
            ("BATON_GITHUB_API_URL", github),
            ("GITHUB_TOKEN", "ghp_ci_gate_token"),
            ("BATON_ADO_API_URL", ado),
            ("ADO_PAT", "ado_ci_gate_pat"),
            ("BATON_GITHUB_WEBHOOK_SECRET", SECRET),
            ("BATON_ADO_WEBHOOK_USER", "hooks"),
            ("BATON_ADO_WEBHOOK_PASSWORD", "hook-secret"),
        ],
    );
    Setup { ws, bare, server }
}

impl Setup {
    fn register(&self, forge_repo: &str) {
        let body = json!({"name": "p", "repo_path": self.ws.repo(), "agent_profile": "demo", "forge_repo": forge_repo});
        let (status, answer) = self.server.request("POST", "/api/v1/projects", Some(body));
        assert_eq!(status, 201, "{answer}");
    }

    /// Creates and enriches a spec, gives its plan one phase whose gate is `gate_type` with no
    /// command, approves and fires it: (status, answer) of the fire.
    fn fire(&self, gate_type: &str) -> (u16, Value) {
        let body = json!({"project": "p", "title": "Document the greeting", "body": "Write the docs."});
        let (status, spec) = self.server.request("POST", "/api/v1/specs", Some(body));
        assert_eq!(status, 201, "{spec}");
        let id = spec["spec_id"].as_i64().unwrap();
        let (status, enriched) = self.server.request("POST", &format!("/api/v1/specs/{id}/enrich"), None);
        assert_eq!(status, 200, "{enriched}");
        let mut plan = enriched["plan"].clone();
        let mut first = plan["phases"][0].clone();
        first["gate"] = json!({"gate_type": gate_type, "command": ""});
        first["approval_required"] = json!(false);
        plan["phases"] = json!([first]);
        let (status, answer) = self.server.request("PUT", &format!("/api/v1/specs/{id}/plan"), Some(plan));
        assert_eq!(status, 200, "{answer}");
        let (status, answer) =
            self.server.request("POST", &format!("/api/v1/specs/{id}/review"), Some(json!({"decision": "approve"})));
        assert_eq!(status, 200, "{answer}");
        self.server.request("POST", &format!("/api/v1/specs/{id}/fire"), None)
    }

    /// [`Setup::fire`] that must succeed: the task id.
    fn fired(&self, gate_type: &str) -> String {
        let (status, answer) = self.fire(gate_type);
        assert_eq!(status, 200, "{answer}");
        let id = answer["spec_id"].as_i64().unwrap();
        self.server.spec(id)["task_id"].as_str().unwrap().to_string()
    }

    fn execution(&self, task_id: &str) -> Value {
        let (status, body) = self.server.request("GET", &format!("/api/v1/executions/{task_id}"), None);
        assert_eq!(status, 200, "{body}");
        body
    }

    /// Polls the execution until `until` holds (up to 90 s): what it returned.
    fn wait<T>(&self, task_id: &str, what: &str, until: impl Fn(&Value) -> Option<T>) -> T {
        let start = Stopwatch::start();
        loop {
            let view = self.execution(task_id);
            if let Some(t) = until(&view) {
                return t;
            }
            assert!(start.elapsed() < Duration::from_secs(90), "{what} never happened: {view:#}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The first gate result, once there is one.
    fn gate_result(&self, task_id: &str) -> Value {
        self.wait(task_id, "a gate result", |v| v["gate_results"].get(0).cloned())
    }

    /// The commit the ci gate waits for, once it waits.
    fn waiting_sha(&self, task_id: &str) -> String {
        self.wait(task_id, "a ci wait", |v| v["ci_wait"]["sha"].as_str().map(str::to_string))
    }

    fn remote_tip(&self, branch: &str) -> String {
        let out =
            std::process::Command::new("git").arg("-C").arg(&self.bare).args(["rev-parse", branch]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

fn ci_toml(extra: &str) -> String {
    format!("[ci]\npoll_secs = 1\nmax_poll_secs = 1\ngrace_secs = 60\ntimeout_secs = 600\n{extra}")
}

/// The check runs fixture with `lint` (run 6) as given.
fn check_runs(lint_status: &str, lint_conclusion: Value, lint_output: Value) -> Value {
    let mut body = fixture_json("github-api/check-runs.list.200.json")["response"]["body"].clone();
    body["check_runs"][1]["status"] = json!(lint_status);
    body["check_runs"][1]["conclusion"] = lint_conclusion;
    body["check_runs"][1]["output"] = lint_output;
    body
}

/// The combined status fixture with its one status in `state`.
fn combined(state: &str) -> Value {
    let mut body = fixture_json("github-api/commit-status.combined.200.json")["response"]["body"].clone();
    body["statuses"][0]["state"] = json!(state);
    body["state"] = json!(state);
    body
}

async fn mount_github(mock: &MockServer, runs: Value, status: Value) {
    mock.reset().await;
    Mock::given(method("GET"))
        .and(path_regex(r"^/repos/lumen-labs/lantern/commits/[0-9a-f]{40}/check-runs$"))
        .respond_with(ResponseTemplate::new(200).set_body_json(runs))
        .mount(mock)
        .await;
    Mock::given(method("GET"))
        .and(path_regex(r"^/repos/lumen-labs/lantern/commits/[0-9a-f]{40}/status$"))
        .respond_with(ResponseTemplate::new(200).set_body_json(status))
        .mount(mock)
        .await;
}

/// GETs of a commit's check runs the mock forge has received so far.
async fn check_reads(mock: &MockServer) -> usize {
    let seen = mock.received_requests().await.unwrap_or_default();
    seen.iter().filter(|r| r.method.as_str() == "GET" && r.url.path().ends_with("/check-runs")).count()
}

/// Waits (up to 30 s) until the gate has read the check runs more than `before` times: the
/// read a webhook's wake-up asked for, so a mock remounted after it is not what that read saw.
async fn read_after(mock: &MockServer, before: usize, what: &str) -> usize {
    let watch = Stopwatch::start();
    loop {
        let reads = check_reads(mock).await;
        if reads > before {
            return reads;
        }
        assert!(watch.elapsed() < Duration::from_secs(30), "the {what} delivery made the gate read the checks");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn sign(body: &[u8]) -> String {
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// Posts a GitHub delivery of `event`: signed with `signature` (`None`: unsigned).
fn deliver(server: &Server, event: &str, body: &[u8], delivery: &str, signature: Option<String>) -> (u16, Value) {
    let mut extra =
        format!("X-GitHub-Event: {event}\r\nX-GitHub-Delivery: {delivery}\r\nContent-Type: application/json\r\n");
    if let Some(sig) = signature {
        extra.push_str(&format!("X-Hub-Signature-256: {sig}\r\n"));
    }
    let (status, _, text) = server.raw("POST", "/webhooks/github", &extra, std::str::from_utf8(body).unwrap());
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// A delivery is refused when tampered with or unsigned, applied once, and a replay of it is
/// a duplicate: the answer of the applied one.
fn deliver_checked(server: &Server, event: &str, payload: &Value, delivery: &str) -> Value {
    let body = payload.to_string().into_bytes();
    let signature = sign(&body);
    let mut tampered = body.clone();
    let at = tampered.len() / 2;
    tampered[at] = if tampered[at] == b' ' { b'\t' } else { b' ' };
    let (status, answer) = deliver(server, event, &tampered, &format!("{delivery}-t"), Some(signature.clone()));
    assert_eq!(status, 401, "a tampered {event} delivery is refused: {answer}");
    let (status, answer) = deliver(server, event, &body, &format!("{delivery}-u"), None);
    assert_eq!(status, 401, "an unsigned {event} delivery is refused: {answer}");
    let (status, applied) = deliver(server, event, &body, delivery, Some(signature.clone()));
    assert_eq!(status, 200, "{event}: {applied}");
    let (status, again) = deliver(server, event, &body, delivery, Some(signature));
    assert_eq!((status, &again["duplicate"]), (200, &json!(true)), "a replayed {event} is a duplicate: {again}");
    applied
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ci_gate_pushes_waits_while_checks_run_and_status_check_suite_and_check_run_webhooks_wake_it() {
    let github = MockServer::start().await;
    let ado = MockServer::start().await;
    // Polls are far apart: only a webhook can make the gate look again within the test.
    let s = setup("[ci]\npoll_secs = 600\nmax_poll_secs = 600\n", &github.uri(), &ado.uri());
    mount_github(&github, check_runs("in_progress", Value::Null, json!({})), combined("success")).await;
    s.register("github:lumen-labs/lantern");
    let task = s.fired("ci");

    let sha = s.waiting_sha(&task);
    assert_eq!(s.remote_tip(&format!("baton/{task}")), sha, "the feature branch was pushed to origin");
    let message = s.wait(&task, "the WAIT for 2 of 3 checks", |v| {
        let m = v["next_action"]["message"].as_str().unwrap_or_default().to_string();
        (v["next_action"]["action_type"] == "wait" && m.contains("waiting for CI: 2 of 3 checks done")).then_some(m)
    });
    assert!(message.contains("running: lint"), "{message}");
    let (_, board) = s.server.request("GET", "/api/v1/board", None);
    assert!(board.to_string().contains("CI: 2 of 3 checks done"), "the card says what it waits for: {board}");

    // A status delivery for the commit wakes the gate too (lint still runs: it waits on).
    let reads = check_reads(&github).await;
    let mut status = serde_json::from_slice::<Value>(&fixture_bytes("github-webhooks/status.json")).unwrap();
    status["sha"] = json!(sha);
    let answer = deliver_checked(&s.server, "status", &status, "status-1");
    assert_eq!(answer["task_ids"], json!([task]), "{answer}");
    let reads = read_after(&github, reads, "status").await;
    // So does a check_suite delivery for its branch.
    let mut suite =
        serde_json::from_slice::<Value>(&fixture_bytes("github-webhooks/check_suite.completed.json")).unwrap();
    suite["check_suite"]["head_sha"] = json!(sha);
    suite["check_suite"]["head_branch"] = json!(format!("baton/{task}"));
    let answer = deliver_checked(&s.server, "check_suite", &suite, "check-suite-1");
    assert_eq!(answer["task_ids"], json!([task]), "{answer}");
    // The gate reads "lint still runs" before the mock changes: had it read after, it would
    // pass before the check_run delivery below (which would then find no gate waiting).
    read_after(&github, reads, "check_suite").await;

    // Lint passes; the check_run delivery makes the gate read the checks now.
    let lint_done = check_runs("completed", json!("success"), json!({"title": "Lint", "summary": "clean"}));
    mount_github(&github, lint_done, combined("success")).await;
    let mut run = serde_json::from_slice::<Value>(&fixture_bytes("github-webhooks/check_run.completed.json")).unwrap();
    run["check_run"]["head_sha"] = json!(sha);
    run["check_run"]["check_suite"]["head_branch"] = json!(format!("baton/{task}"));
    let answer = deliver_checked(&s.server, "check_run", &run, "check-run-1");
    assert_eq!(answer["task_ids"], json!([task]), "{answer}");

    let result = s.gate_result(&task);
    assert_eq!(result["passed"], true, "{result}");
    assert!(result["output"].as_str().unwrap().contains("CI passed for"), "{result}");
    s.wait(&task, "completion", |v| (v["status"] == "complete").then_some(()));
    let (_, journal) = s.server.request("GET", &format!("/api/v1/executions/{task}/journal"), None);
    let kinds = journal.to_string();
    assert!(kinds.contains("ci_started") && kinds.contains("ci_checked"), "the wait is journaled: {journal}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ci_gate_fails_naming_the_failed_check_with_its_summary() {
    let github = MockServer::start().await;
    let ado = MockServer::start().await;
    let s = setup(&ci_toml(""), &github.uri(), &ado.uri());
    let output = json!({"title": "Clippy", "summary": "2 errors in <b>src/lib.rs</b>"});
    mount_github(&github, check_runs("completed", json!("failure"), output), combined("success")).await;
    s.register("lumen-labs/lantern");
    let task = s.fired("ci");
    let result = s.gate_result(&task);
    assert_eq!(result["passed"], false, "{result}");
    let text = result["output"].as_str().unwrap();
    assert!(
        text.contains("1 of 3 checks failed") && text.contains("- lint: Clippy: 2 errors in <b>src/lib.rs</b>"),
        "{text}"
    );
    // The page escapes the forge's text.
    let (_, _, page) = s.server.raw("GET", &format!("/executions/{task}"), "", "");
    let at = page.find("2 errors in ").unwrap_or_else(|| panic!("the failed check is on the page: {page}"));
    let shown = &page[at..(at + 60).min(page.len())];
    assert!(shown.contains("&lt;b&gt;") || shown.contains("&#60;b&#62;"), "escaped: {shown}");
    assert!(!page.contains("<b>src/lib.rs</b>"), "forge text is escaped on the page");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ci_gate_times_out_and_one_without_checks_fails_after_the_grace_period() {
    let github = MockServer::start().await;
    let ado = MockServer::start().await;
    let s = setup("[ci]\npoll_secs = 1\nmax_poll_secs = 1\ntimeout_secs = 3\n", &github.uri(), &ado.uri());
    mount_github(&github, check_runs("in_progress", Value::Null, json!({})), combined("success")).await;
    s.register("github:lumen-labs/lantern");
    let task = s.fired("ci");
    let result = s.gate_result(&task);
    let text = result["output"].as_str().unwrap();
    assert!(text.contains("CI timed out after 3 s") && text.contains("still running: lint"), "{text}");

    let github2 = MockServer::start().await;
    let s2 = setup("[ci]\npoll_secs = 1\nmax_poll_secs = 1\ngrace_secs = 2\n", &github2.uri(), &ado.uri());
    mount_github(&github2, json!({"total_count": 0, "check_runs": []}), json!({"state": "pending", "statuses": []}))
        .await;
    s2.register("github:lumen-labs/lantern");
    let task = s2.fired("ci");
    let sha = s2.waiting_sha(&task);
    let result = s2.gate_result(&task);
    let text = result["output"].as_str().unwrap();
    assert!(text.contains(&format!("no CI checks reported for {sha}")), "{text}");
    assert_eq!(result["passed"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_with_a_ci_gate_in_a_project_without_a_forge_is_refused_at_plan_check() {
    let github = MockServer::start().await;
    let s = setup("", &github.uri(), &github.uri());
    s.register("");
    let (status, answer) = s.fire("ci");
    assert_eq!(status, 422, "{answer}");
    let text = answer.to_string();
    assert!(text.contains("no forge configured") && text.contains("gate 'ci'"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_azure_devops_ci_gate_reads_builds_and_statuses_and_build_complete_wakes_it() {
    let github = MockServer::start().await;
    let ado = MockServer::start().await;
    let s = setup("[ci]\npoll_secs = 600\nmax_poll_secs = 600\ngrace_secs = 600\n", &github.uri(), &ado.uri());
    s.register("ado:lumenlabs/Lantern");
    let task = s.fired("ci");
    let sha = s.waiting_sha(&task);
    let branch = format!("baton/{task}");
    let builds = |status: &str, result: &str| {
        let text = fixture_json("azure-devops/rest/builds.list.json")["response"]["body"].to_string();
        let mut body: Value = serde_json::from_str(&text.replace("<sha>", &sha).replace("<branch>", &branch)).unwrap();
        body["value"][0]["status"] = json!(status);
        body["value"][0]["result"] = json!(result);
        body
    };
    let statuses = fixture_json("azure-devops/rest/commit-statuses.list.json")["response"]["body"].clone();
    let mount = |builds: Value| {
        let (ado, statuses) = (&ado, statuses.clone());
        async move {
            ado.reset().await;
            Mock::given(method("GET"))
                .and(path_regex(r"^/lumenlabs/Lantern/_apis/build/builds$"))
                .respond_with(ResponseTemplate::new(200).set_body_json(builds))
                .mount(ado)
                .await;
            Mock::given(method("GET"))
                .and(path_regex(r"^/lumenlabs/Lantern/_apis/git/repositories/Lantern/commits/[0-9a-f]{40}/statuses$"))
                .respond_with(ResponseTemplate::new(200).set_body_json(statuses))
                .mount(ado)
                .await;
        }
    };
    mount(builds("inProgress", "none")).await;
    let mut hook: Value = serde_json::from_slice(&fixture_bytes("azure-devops/hooks/build.complete.json")).unwrap();
    hook["resource"]["sourceGetVersion"] = json!(format!("LG:refs/heads/{branch}:{sha}"));
    let body = hook.to_string();
    // Wrong or missing credentials are refused; the first delivery wakes the gate.
    let (status, _, _) = s.server.raw("POST", "/webhooks/ado", ADO_WRONG, &body);
    assert_eq!(status, 401);
    let (status, _, _) = s.server.raw("POST", "/webhooks/ado", "", &body);
    assert_eq!(status, 401);
    let (status, _, answer) = s.server.raw("POST", "/webhooks/ado", ADO_AUTH, &body);
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains(&task), "{answer}");
    s.wait(&task, "1 of 2 checks done", |v| {
        v["next_action"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("waiting for CI: 1 of 2 checks done")
            .then_some(())
    });

    mount(builds("completed", "succeeded")).await;
    hook["id"] = json!("5b6e1d0a-8f25-4a8e-9b1e-3c0c7d0f2b11");
    let body = hook.to_string();
    let (status, _, answer) = s.server.raw("POST", "/webhooks/ado", ADO_AUTH, &body);
    assert_eq!(status, 200, "{answer}");
    let (status, _, again) = s.server.raw("POST", "/webhooks/ado", ADO_AUTH, &body);
    assert!(status == 200 && again.contains("duplicate"), "a replayed build.complete is a duplicate: {again}");
    let result = s.gate_result(&task);
    assert_eq!(result["passed"], true, "{result}");
    assert!(
        result["output"].as_str().unwrap().contains("2 checks passed (Lantern-CI, lantern-checks/security-scan)"),
        "{result}"
    );
}

/// A fake reviewer (a `command` agent) that answers `verdict` as its JSON verdict.
fn reviewer_toml(ws: &Workspace, verdict: &str) -> String {
    let script = ws.tmp.path().join("reviewer.sh");
    let answer = json!({"verdict": verdict, "findings": if verdict == "fail" { json!(["src/lib.rs:1: f has no doc"]) } else { json!([]) },
                        "summary": "read the phase"});
    std::fs::write(
        &script,
        format!("#!/bin/sh\ncat > /dev/null\necho 'Reviewed.'\necho '```json'\necho '{answer}'\necho '```'\n"),
    )
    .unwrap();
    format!(
        "[review]\nagent = \"reviewer\"\n[agents.reviewer]\nprofile = \"command\"\ncommand = [\"sh\", \"{}\"]\n",
        script.display()
    )
}

fn setup_review(verdict: Option<&str>, github: &str) -> Setup {
    let ws = Workspace::with_repo(&[("README.md", "hello\n")]);
    std::fs::create_dir_all(ws.data()).unwrap();
    let toml = verdict.map(|v| reviewer_toml(&ws, v)).unwrap_or_default();
    std::fs::write(ws.data().join("baton.toml"), toml).unwrap();
    let server = Server::start_env(&ws.data(), &[], &[("BATON_GITHUB_API_URL", github)]);
    let bare = ws.tmp.path().join("none.git");
    let s = Setup { ws, bare, server };
    s.register("");
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_review_gate_runs_the_reviewer_agent_whose_pass_passes_it() {
    let github = MockServer::start().await;
    let s = setup_review(Some("pass"), &github.uri());
    let task = s.fired("review");
    let result = s.gate_result(&task);
    assert_eq!(result["passed"], true, "{result}");
    assert!(result["output"].as_str().unwrap().starts_with("review by reviewer: pass"), "{result}");
    let view = s.wait(&task, "completion", |v| (v["status"] == "complete").then(|| v.clone()));
    assert_eq!(view["step_results"]["review.1"]["status"], "complete", "{view:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_review_gate_whose_reviewer_fails_it_sends_the_findings_back_to_the_step() {
    let github = MockServer::start().await;
    let s = setup_review(Some("fail"), &github.uri());
    let task = s.fired("review");
    let result = s.gate_result(&task);
    assert_eq!(result["passed"], false, "{result}");
    assert!(result["output"].as_str().unwrap().contains("- src/lib.rs:1: f has no doc"), "{result}");
    let first = s.wait(&task, "the phase's step to run again", |v| {
        v["step_results"]
            .as_object()
            .and_then(|m| m.iter().find(|(k, r)| !k.starts_with("review.") && r["attempt"].as_u64() >= Some(2)))
            .map(|(k, _)| k.clone())
    });
    assert!(!first.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_review_gate_without_a_reviewer_asks_a_human_never_passes_by_itself() {
    let github = MockServer::start().await;
    let s = setup_review(None, &github.uri());
    let task = s.fired("review");
    let action = s.wait(&task, "an approval", |v| {
        (v["next_action"]["action_type"] == "approval").then(|| v["next_action"].clone())
    });
    assert!(action["message"].as_str().unwrap().contains("review gate waits for a human"), "{action}");
    assert!(s.execution(&task)["gate_results"].as_array().is_none_or(Vec::is_empty), "nothing passed by itself");
    let (status, answer) = s.server.request(
        "POST",
        &format!("/api/v1/executions/{task}/approve"),
        Some(json!({"phase_id": action["phase_id"], "result": "approve"})),
    );
    assert_eq!(status, 201, "{answer}");
    let result = s.gate_result(&task);
    assert_eq!(result["passed"], true, "{result}");
    assert!(result["output"].as_str().unwrap().starts_with("review by "), "{result}");
}

/// The plan check reads the project's own reviewer (`[projects.p] review_agent`), not only
/// `[review] agent`: a project reviewer that cannot run (a `command` agent without its
/// command) refuses the fire, naming it, before anything runs (it was checked only when the
/// gate came, mid-execution).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_projects_reviewer_that_cannot_run_is_refused_at_fire() {
    let github = MockServer::start().await;
    let ws = Workspace::with_repo(&[("README.md", "hello\n")]);
    std::fs::create_dir_all(ws.data()).unwrap();
    let toml = "[projects.p]\nreview_agent = \"broken-reviewer\"\n[agents.broken-reviewer]\nprofile = \"command\"\n";
    std::fs::write(ws.data().join("baton.toml"), toml).unwrap();
    let server = Server::start_env(&ws.data(), &[], &[("BATON_GITHUB_API_URL", &github.uri())]);
    let bare = ws.tmp.path().join("none.git");
    let s = Setup { ws, bare, server };
    s.register("");
    let (status, answer) = s.fire("review");
    assert_eq!(status, 422, "{answer}");
    assert!(answer.to_string().contains("agent broken-reviewer: profile `command` needs"), "{answer}");
}
