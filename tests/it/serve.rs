//! `baton serve` as a real process: fired specs are driven by its worker pool with the demo
//! agent, decisions wake parked drivers, a killed server resumes on restart, a second server
//! on the same data dir refuses to start, and cancelling a running spec stops it.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use baton::clock::Stopwatch;

use serde_json::{json, Value};

/// A `baton serve --demo` child process on a free port, killed on drop.
pub(crate) struct Server {
    child: Child,
    pub(crate) port: u16,
    data: std::path::PathBuf,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Server {
    fn start(data: &std::path::Path) -> Server {
        Server::start_with(data, &[])
    }

    /// `baton serve --demo` with `extra` flags.
    fn start_with(data: &std::path::Path, extra: &[&str]) -> Server {
        Server::start_env(data, extra, &[])
    }

    /// `baton serve --demo` with `extra` flags and environment variables `env` (none inherited
    /// from the test's own environment for `BATON_CRASH_AT`: only `env` sets it).
    pub(crate) fn start_env(data: &std::path::Path, extra: &[&str], env: &[(&str, &str)]) -> Server {
        let port = free_port();
        let child = Command::new(env!("CARGO_BIN_EXE_baton"))
            .arg("--data-dir")
            .arg(data)
            .args(["serve", "--demo", "--bind", &format!("127.0.0.1:{port}")])
            .args(extra)
            .env_remove("BATON_CRASH_AT")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(std::fs::OpenOptions::new().create(true).append(true).open(Server::log_path(data)).unwrap())
            .spawn()
            .unwrap();
        let server = Server { child, port, data: data.to_path_buf() };
        let start = Stopwatch::start();
        while start.elapsed() < Duration::from_secs(30) {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() && server.request("GET", "/healthz", None).0 == 200 {
                return server;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("baton serve did not answer /healthz within 30 s");
    }

    /// Where the server's stderr (its log) goes: beside the data dir, appended across restarts.
    fn log_path(data: &std::path::Path) -> std::path::PathBuf {
        data.with_extension("log")
    }

    /// What the server logged so far.
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(Server::log_path(&self.data)).unwrap_or_default()
    }

    /// One HTTP/1.1 request (`Connection: close`); (status, JSON body or Null).
    pub(crate) fn request(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        self.request_as(method, path, body, None)
    }

    /// [`Server::request`] with a bearer token.
    pub(crate) fn request_as(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
        token: Option<&str>,
    ) -> (u16, Value) {
        let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let extra = format!("{auth}Content-Type: application/json\r\nX-Baton-Actor: serve-test\r\n");
        let (status, _, text) = self.raw(method, path, &extra, &body);
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// A raw request with `extra` header lines; (status, head, body text).
    pub(crate) fn raw(&self, method: &str, path: &str, extra: &str, body: &str) -> (u16, String, String) {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n{extra}Content-Length: {}\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).unwrap();
        stream.write_all(body.as_bytes()).unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        let status = response.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
        let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
        (status, head.to_string(), body.to_string())
    }

    pub(crate) fn spec(&self, id: i64) -> Value {
        let (status, body) = self.request("GET", &format!("/api/v1/specs/{id}"), None);
        assert_eq!(status, 200, "{body}");
        body
    }

    /// Polls spec `id` until its stage is `stage` (up to 90 s).
    pub(crate) fn wait_stage(&self, id: i64, stage: &str) -> Value {
        let start = Stopwatch::start();
        loop {
            let spec = self.spec(id);
            if spec["stage"] == stage {
                return spec;
            }
            if spec["stage"] == "failed" {
                // Say why, not only that it never got there.
                let task = spec["task_id"].as_str().unwrap_or_default();
                let (_, exec) = self.request("GET", &format!("/api/v1/executions/{task}"), None);
                panic!("spec {id} failed instead of reaching {stage}: {} ({exec})", exec["failure"]);
            }
            assert!(start.elapsed() < Duration::from_secs(90), "spec {id} never reached {stage}: {spec}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The server's process id (to signal it).
    pub(crate) fn pid(&self) -> nix::unistd::Pid {
        nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).unwrap())
    }

    /// Whether the server process has exited (by itself, e.g. at a `BATON_CRASH_AT` point).
    pub(crate) fn exited(&mut self) -> bool {
        self.child.try_wait().ok().flatten().is_some()
    }

    pub(crate) fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).unwrap()),
            nix::sys::signal::Signal::SIGTERM,
        );
        let start = Stopwatch::start();
        while start.elapsed() < Duration::from_secs(10) {
            if self.child.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.kill9();
    }
}

/// Spec 2 of the demo ("Fix the greeting when the name is empty") is enriched: approve it.
fn approve_spec(server: &Server, id: i64) {
    let (status, body) =
        server.request("POST", &format!("/api/v1/specs/{id}/review"), Some(json!({"decision": "approve"})));
    assert_eq!(status, 200, "{body}");
}

#[test]
fn a_fired_spec_runs_parks_on_its_approval_and_wakes_when_decided() {
    fired_spec_parks_and_wakes(&[]);
}

/// The same on a PostgreSQL store (issue 17): board, API, driver, approval and journal.
#[test]
fn a_fired_spec_runs_parks_on_its_approval_and_wakes_when_decided_on_postgres() {
    if let Some(url) = crate::common::postgres_database() {
        fired_spec_parks_and_wakes(&[("BATON_DATABASE_URL", &url)]);
    }
}

fn fired_spec_parks_and_wakes(env: &[(&str, &str)]) {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start_env(&tmp.path().join("data"), &[], env);
    approve_spec(&server, 2);
    let (status, body) = server.request("POST", "/api/v1/specs/2/fire", None);
    assert_eq!(status, 200, "{body}");
    let task_id = body["task_id"].as_str().unwrap().to_string();
    assert!(task_id.starts_with("spec-2-"), "{task_id}");
    let (status, again) = server.request("POST", "/api/v1/specs/2/fire", None);
    assert_eq!(status, 409, "fired once: {again}");

    let spec = server.wait_stage(2, "awaiting_human");
    assert_eq!(spec["status"], "executing");
    let (_, board) = server.request("GET", "/api/v1/board", None);
    assert_eq!(board["decisions_waiting"], 1, "{board}");
    // The driver, parked for the decision, dispatches and records the next phase's steps
    // itself: a dispatch or a result from outside is refused through every door (a result of
    // a step it had not dispatched yet was taken, and the execution completed with work that
    // never ran, found by a tester).
    let (_, exec) = server.request("GET", &format!("/api/v1/executions/{task_id}"), None);
    let next_step = exec["plan"]["phases"][1]["steps"][0]["step_id"].as_str().unwrap().to_string();
    let agent = exec["plan"]["phases"][1]["steps"][0]["agent_name"].as_str().unwrap().to_string();
    for event in [
        json!({"kind": "step_dispatched", "step_id": next_step, "agent_name": agent}),
        json!({"kind": "step_recorded", "step_id": next_step, "agent_name": agent, "status": "complete",
               "outcome": "fake"}),
    ] {
        let (status, body) =
            server.request("POST", &format!("/api/v1/executions/{task_id}/events"), Some(event.clone()));
        assert_eq!((status, body["details"]["reason"].as_str()), (409, Some("lease_held")), "{event}: {body}");
        assert!(body["message"].as_str().unwrap().contains("is driven by this server's driver"), "{body}");
    }
    if env.is_empty() {
        let (code, _, err) = baton(
            &server.data,
            &["execute", "record", "--task-id", &task_id, "--step-id", &next_step, "--agent", &agent],
        );
        assert_eq!(code, 2, "relayed to the server, refused as through REST: {err}");
        assert!(err.contains("dispatches and records its own steps"), "{err}");
    }
    let (status, body) = server.request(
        "POST",
        &format!("/api/v1/executions/{task_id}/approve"),
        Some(json!({"phase_id": 1, "result": "approve", "feedback": "go"})),
    );
    assert_eq!(status, 201, "{body}");
    // What comes next is the server's driver's to dispatch, not the caller's (the answer had
    // been a DISPATCH, which the CLI printed as "Mark dispatched with: …", found by a tester).
    assert_eq!(body["next_action"]["action_type"], "wait", "{body}");
    assert!(body["next_action"]["message"].as_str().unwrap().contains("is driven by this server's driver"), "{body}");
    server.wait_stage(2, "changelist_review");

    let (_, exec) = server.request("GET", &format!("/api/v1/executions/{task_id}"), None);
    assert_eq!(exec["status"], "complete");
    assert_eq!(server.data.join("baton.db").exists(), env.is_empty(), "the store is the one asked for");
    let gates = exec["gate_results"].as_array().unwrap();
    assert!(gates.iter().any(|g| g["passed"] == true && g["command"] == "sh scripts/check.sh"), "{gates:?}");
    let (_, journal) = server.request("GET", &format!("/api/v1/executions/{task_id}/journal"), None);
    let approval = journal.as_array().unwrap().iter().find(|e| e["kind"] == "approval_recorded").unwrap();
    assert_eq!(approval["payload"]["actor"], "serve-test", "{approval}");
    let repo = server.data.join("demo").join("board-repo");
    let log = Command::new("git")
        .arg("-C")
        .arg(&repo)
        .args(["log", "--format=%s", &format!("baton/{task_id}")])
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&log.stdout);
    assert_eq!(log.lines().count(), 5, "four step commits on the base commit:\n{log}");

    // The driver's progress is in the server's log as tracing events naming the execution,
    // never as bare lines: two executions' lines can be told apart.
    let served = server.log();
    let progress: Vec<&str> = served.lines().filter(|l| l.contains("baton::progress")).collect();
    assert!(
        progress
            .iter()
            .any(|l| l.contains("INFO") && l.contains(&format!("task.id={task_id}")) && l.contains("dispatch")),
        "no dispatch line with the task id in the server log:\n{served}"
    );
    let bare: Vec<&str> = served.lines().filter(|l| l.trim_start().starts_with("dispatch")).collect();
    assert!(bare.is_empty(), "progress printed bare: {bare:?}");
}

#[test]
fn a_killed_server_resumes_its_executions_on_restart() {
    killed_server_resumes(&[]);
}

/// The same on a PostgreSQL store (issue 17): the journal in the database is all a restart needs.
#[test]
fn a_killed_server_resumes_its_executions_on_restart_on_postgres() {
    if let Some(url) = crate::common::postgres_database() {
        killed_server_resumes(&[("BATON_DATABASE_URL", &url)]);
    }
}

fn killed_server_resumes(env: &[(&str, &str)]) {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let mut server = Server::start_env(&data, &[], env);
    // Spec 3 (docs) is approved and has no approval phase before its agents run.
    let (status, body) = server.request("POST", "/api/v1/specs/3/fire", None);
    assert_eq!(status, 200, "{body}");
    let task_id = body["task_id"].as_str().unwrap().to_string();
    server.wait_stage(3, "awaiting_human");
    server.kill9();

    let server = Server::start_env(&data, &[], env);
    let (status, body) = server.request(
        "POST",
        &format!("/api/v1/executions/{task_id}/approve"),
        Some(json!({"phase_id": 1, "result": "approve"})),
    );
    assert_eq!(status, 201, "the restarted server recovered the parked execution: {body}");
    server.wait_stage(3, "changelist_review");
    let (_, specs) = server.request("GET", "/api/v1/specs", None);
    assert_eq!(specs.as_array().unwrap().len(), 3, "--demo seeds only once: {specs}");
    assert_eq!(data.join("baton.db").exists(), env.is_empty(), "the store is the one asked for");
}

/// On SQLite the database and the key share one data dir: a restart with the same key starts
/// quietly, and one whose `server.key` was replaced starts too, warning that decisions signed
/// before no longer verify (the new key's fingerprint is recorded, so the next start is quiet).
#[test]
fn a_replaced_server_key_on_sqlite_starts_with_a_warning() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let warning = "decisions signed before no longer verify";
    for replace in [false, true, false] {
        if replace {
            std::fs::write(data.join("server.key"), "ab".repeat(32)).unwrap();
        }
        let before = std::fs::read_to_string(Server::log_path(&data)).unwrap_or_default().len();
        let server = Server::start_env(&data, &[], &[]);
        assert_eq!(server.request("GET", "/readyz", None).0, 200);
        drop(server);
        let log = server_log_since(&data, before);
        assert_eq!(log.contains(warning), replace, "{log}");
    }
}

/// What the server of `data` logged after the first `from` bytes.
fn server_log_since(data: &std::path::Path, from: usize) -> String {
    let log = std::fs::read_to_string(Server::log_path(data)).unwrap_or_default();
    log.get(from..).unwrap_or_default().to_string()
}

#[test]
fn a_second_server_on_the_same_data_dir_refuses_to_start() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let _server = Server::start(&data);
    let out = Command::new(env!("CARGO_BIN_EXE_baton"))
        .arg("--data-dir")
        .arg(&data)
        .args(["serve", "--bind", &format!("127.0.0.1:{}", free_port())])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("another baton serve") && stderr.contains("already uses the data dir"), "{stderr}");
}

#[test]
fn cancelling_a_running_spec_cancels_its_execution() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(&tmp.path().join("data"));
    let (status, body) = server.request("POST", "/api/v1/specs/3/fire", None);
    assert_eq!(status, 200, "{body}");
    let task_id = body["task_id"].as_str().unwrap().to_string();
    let (status, body) = server.request("POST", "/api/v1/specs/3/cancel", Some(json!({"reason": "changed my mind"})));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "cancelled");
    let (_, exec) = server.request("GET", &format!("/api/v1/executions/{task_id}"), None);
    assert_eq!(exec["status"], "cancelled", "{exec}");
    let (_, archive) = server.request("GET", "/api/v1/board?archived=true", None);
    assert_eq!(archive["columns"][0]["cards"][0]["spec_id"], 3, "{archive}");
}

/// A spec of the demo project whose agent takes `secs` seconds, enriched, approved and fired:
/// (spec id, task id, its first `step_dispatched` journal entry, once there is one).
fn fire_a_slow_spec(server: &Server, secs: u32) -> (i64, String, Value) {
    let body = json!({"project": "demo", "title": "Document the slow path", "body": format!("Take your time. [demo: sleep={secs}]")});
    let (status, spec) = server.request("POST", "/api/v1/specs", Some(body));
    assert_eq!(status, 201, "{spec}");
    let id = spec["spec_id"].as_i64().unwrap();
    for (action, body) in [("enrich", None), ("review", Some(json!({"decision": "approve"}))), ("fire", None)] {
        let (status, answer) = server.request("POST", &format!("/api/v1/specs/{id}/{action}"), body);
        assert_eq!(status, 200, "{action}: {answer}");
    }
    let task_id = server.spec(id)["task_id"].as_str().unwrap().to_string();
    let start = Stopwatch::start();
    loop {
        let journal = server.request("GET", &format!("/api/v1/executions/{task_id}/journal"), None).1;
        if let Some(event) = journal.as_array().unwrap().iter().find(|e| e["kind"] == "step_dispatched") {
            return (id, task_id, event.clone());
        }
        assert!(start.elapsed() < Duration::from_secs(30), "no dispatch");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_server_killed_while_an_agent_runs_re_adopts_the_agent_on_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let mut server = Server::start(&data);
    let (id, task_id, _) = fire_a_slow_spec(&server, 2);
    let journal = |server: &Server| server.request("GET", &format!("/api/v1/executions/{task_id}/journal"), None).1;
    server.kill9();

    let server = Server::start(&data);
    server.wait_stage(id, "awaiting_human");
    let dispatches = journal(&server).as_array().unwrap().iter().filter(|e| e["kind"] == "step_dispatched").count();
    assert_eq!(dispatches, 1, "the running attempt was re-adopted, not dispatched again");
    let (status, body) = server.request(
        "POST",
        &format!("/api/v1/executions/{task_id}/approve"),
        Some(json!({"phase_id": 1, "result": "approve"})),
    );
    assert_eq!(status, 201, "{body}");
    server.wait_stage(id, "changelist_review");
}

/// Found by a tester: a `quota_wait` posted through the API for a step whose attempt the
/// server's driver was running made the driver dispatch it again when the wait ended, beside
/// the running attempt, whose result was then dropped. The driver reports its own agents'
/// waits: one from outside is refused (409) and nothing is journaled; the run goes on.
#[test]
fn a_quota_wait_from_outside_for_a_driven_attempt_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let server = Server::start(&data);
    let (id, task_id, dispatched) = fire_a_slow_spec(&server, 6);
    let journal = |server: &Server| server.request("GET", &format!("/api/v1/executions/{task_id}/journal"), None).1;
    let step_id = dispatched["payload"]["step_id"].as_str().unwrap().to_string();
    let wait = json!({"kind": "quota_wait", "step_id": step_id, "agent_name": dispatched["payload"]["agent_name"],
        "account": "claude", "until": "2099-01-01T00:00:00Z"});
    let (status, body) = server.request("POST", &format!("/api/v1/executions/{task_id}/events"), Some(wait.clone()));
    assert_eq!(status, 409, "{body}");
    assert!(body["message"].as_str().unwrap().contains("is not taken from outside"), "{body}");
    // Paused, the driver stops but the agent runs on: still refused (found by the verifying
    // tester: it was taken, and the step ran twice).
    let (status, body) = server.request("POST", &format!("/api/v1/executions/{task_id}/pause"), Some(json!({})));
    assert!(status < 300, "{body}");
    let (status, body) = server.request("POST", &format!("/api/v1/executions/{task_id}/events"), Some(wait));
    assert_eq!(status, 409, "paused: {body}");
    let (status, body) = server.request("POST", &format!("/api/v1/executions/{task_id}/resume"), Some(json!({})));
    assert!(status < 300, "{body}");
    let kinds: Vec<Value> = journal(&server).as_array().unwrap().iter().map(|e| e["kind"].clone()).collect();
    assert!(!kinds.contains(&json!("quota_wait")), "{kinds:?}");
    server.wait_stage(id, "awaiting_human");
    let dispatches = journal(&server).as_array().unwrap().iter().filter(|e| e["kind"] == "step_dispatched").count();
    assert_eq!(dispatches, 1, "the step ran once");
}

/// Found by a tester: an `execute cancel` the server did not take through its relay (the data
/// dir named as `p/../data`, or `BATON_RELAY=0`) ran in-process and sent SIGTERM to the
/// lease's holder, the server itself: board, API and every other execution went down. The
/// relay now compares resolved paths, and a cancel that still runs in-process is refused with
/// how to cancel through the server, which keeps serving.
#[test]
fn a_cancel_from_outside_the_relay_never_stops_the_server() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let server = Server::start(&data);
    let (_, task_id, _) = fire_a_slow_spec(&server, 30);
    let cancel = ["execute", "cancel", "--task-id", task_id.as_str()];
    let out = Command::new(env!("CARGO_BIN_EXE_baton"))
        .env("BATON_RELAY", "0")
        .arg("--data-dir")
        .arg(&data)
        .args(cancel)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("is driven by `baton serve`") && stderr.contains("cancel it through that server"),
        "{stderr}"
    );
    assert_eq!(server.request("GET", "/healthz", None).0, 200, "the server still serves");
    let (_, exec) = server.request("GET", &format!("/api/v1/executions/{task_id}"), None);
    assert_eq!(exec["status"], "running", "{exec}");

    // The same directory named another way is relayed, and the cancel is the server's.
    std::fs::create_dir_all(tmp.path().join("p")).unwrap();
    let (code, _, err) = baton(&tmp.path().join("p").join("..").join("data"), &cancel);
    assert_eq!(code, 4, "{err}");
    let (_, exec) = server.request("GET", &format!("/api/v1/executions/{task_id}"), None);
    assert_eq!(exec["status"], "cancelled", "{exec}");
    assert_eq!(server.request("GET", "/healthz", None).0, 200, "the server still serves");
}

/// `baton --data-dir <data> <args>`: (exit code, stdout, stderr).
fn baton(data: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_baton")).arg("--data-dir").arg(data).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

fn token(data: &std::path::Path, user: &str, role: &str) -> String {
    let (code, out, err) = baton(data, &["token", "create", "--user", user, "--role", role]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("baton_"), "{out}");
    out
}

#[test]
fn decisions_are_signed_links_are_single_use_and_initiators_need_another_reviewer() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let (lead, rita) = (token(&data, "lee", "lead"), token(&data, "rita", "reviewer"));
    let admin = token(&data, "ada", "admin");
    let server = Server::start(&data);
    let (status, _) = server.request("GET", "/api/v1/specs", None);
    assert_eq!(status, 401, "users exist: auth is on");

    // A project that requires a separate reviewer, and a spec the lead fires.
    let repo = data.join("demo").join("board-repo");
    let project =
        json!({"name": "strict", "repo_path": repo, "agent_profile": "demo", "require_separate_reviewer": true});
    let (status, body) = server.request_as("POST", "/api/v1/projects", Some(project), Some(&admin));
    assert_eq!(status, 201, "{body}");
    let spec = json!({"project": "strict", "title": "Add a farewell", "body": "Say goodbye."});
    let (status, body) = server.request_as("POST", "/api/v1/specs", Some(spec), Some(&lead));
    assert_eq!(status, 201, "{body}");
    let id = body["spec_id"].as_i64().unwrap();
    for (action, body) in [("enrich", None), ("review", Some(json!({"decision": "approve"}))), ("fire", None)] {
        let (status, answer) = server.request_as("POST", &format!("/api/v1/specs/{id}/{action}"), body, Some(&lead));
        assert_eq!(status, 200, "{action}: {answer}");
    }
    let task_id = server.request_as("GET", &format!("/api/v1/specs/{id}"), None, Some(&lead)).1["task_id"]
        .as_str()
        .unwrap()
        .to_string();
    let start = Stopwatch::start();
    while server.request_as("GET", &format!("/api/v1/specs/{id}"), None, Some(&lead)).1["stage"] != "awaiting_human" {
        assert!(start.elapsed() < Duration::from_secs(60), "never waited for the approval");
        std::thread::sleep(Duration::from_millis(100));
    }
    let approve = json!({"phase_id": 1, "result": "approve", "feedback": "mine"});
    let uri = format!("/api/v1/executions/{task_id}/approve");
    let (status, body) = server.request_as("POST", &uri, Some(approve), Some(&lead));
    assert_eq!(status, 403, "the initiator may not approve: {body}");
    assert!(body["message"].as_str().unwrap().contains("separate reviewer"), "{body}");

    // Approval links: tampered, expired, then used once by the reviewer it names.
    let base = format!("http://127.0.0.1:{}", server.port);
    let link = |hours: &str| {
        let (code, out, err) = baton(
            &data,
            &[
                "approval",
                "link",
                "--as",
                "lee",
                "--task-id",
                &task_id,
                "--reviewer",
                "rita",
                "--hours",
                hours,
                "--base-url",
                &base,
            ],
        );
        assert_eq!(code, 0, "{err}");
        out.strip_prefix(&base).unwrap().to_string()
    };
    let path = link("24");
    // An expired link, signed with the server's key (the CLI refuses to make one).
    let key = baton::runtime::auth::ServerKey::load_or_create(&baton::runtime::config::DataDir::open(&data).unwrap())
        .unwrap();
    let mut claims = key.link_claims(path.strip_prefix("/approve/").unwrap()).unwrap();
    claims.expires = 1;
    let expired = format!("/approve/{}", key.link(&claims));
    // A link made out to the initiator does not get round the separate-reviewer rule: it is
    // refused when minted, and one minted anyway (signed with the key) when redeemed.
    let (code, _, err) = baton(
        &data,
        &["approval", "link", "--as", "lee", "--task-id", &task_id, "--reviewer", "lee", "--base-url", &base],
    );
    assert_eq!(code, 2, "minting a link for the initiator is refused: {err}");
    assert!(err.contains("separate reviewer"), "{err}");
    let mut lee_claims = claims.clone();
    lee_claims.reviewer = "lee".into();
    lee_claims.expires = i64::MAX;
    let own = format!("/approve/{}", key.link(&lee_claims));
    let (_, own_head, _) = server.raw("GET", &own, "", "");
    let own_cookie =
        own_head.lines().find_map(|l| l.strip_prefix("set-cookie: ")).unwrap().split(';').next().unwrap().to_string();
    let own_form = format!("csrf={}&result=approve", own_cookie.split_once('=').unwrap().1);
    let own_headers = format!("Cookie: {own_cookie}\r\nContent-Type: application/x-www-form-urlencoded\r\n");
    assert_eq!(server.raw("POST", &own, &own_headers, &own_form).0, 403, "lee fired it: not through a link either");
    let mut tampered = path.clone().into_bytes();
    let i = path.find("/approve/").unwrap() + 12;
    tampered[i] = if tampered[i] == b'0' { b'1' } else { b'0' };
    let tampered = String::from_utf8(tampered).unwrap();
    assert_eq!(server.raw("GET", &tampered, "", "").0, 403, "tampered");
    assert_eq!(server.raw("GET", &expired, "", "").0, 410, "expired");
    let (status, head, html) = server.raw("GET", &path, "", "");
    assert_eq!(status, 200, "{html}");
    let cookie =
        head.lines().find_map(|l| l.strip_prefix("set-cookie: ")).unwrap().split(';').next().unwrap().to_string();
    let csrf = cookie.split_once('=').unwrap().1;
    let form = format!("csrf={csrf}&result=approve&feedback=fine+by+me");
    let headers = format!("Cookie: {cookie}\r\nContent-Type: application/x-www-form-urlencoded\r\n");
    let (status, _, page) = server.raw("POST", &path, &headers, &form);
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("Decision recorded"), "the reviewer sees a confirmation, not a sign-in page: {page}");
    let (status, _, page) = server.raw("POST", &path, &headers, &form);
    assert!(status == 409, "a used link is refused: {status} {page}");

    let (_, journal) = server.request_as("GET", &format!("/api/v1/executions/{task_id}/journal"), None, Some(&rita));
    let decision = journal.as_array().unwrap().iter().find(|e| e["kind"] == "approval_recorded").unwrap();
    assert_eq!(decision["payload"]["actor"], "rita (approval link)");

    // The decision is signed; audit verify checks it, and notices a forged signature.
    let (code, out, err) = baton(&data, &["audit", "verify", &task_id]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("1 signed and verified") && out.contains("0 with a BAD signature"), "{out}");
    let seq = decision["seq"].as_i64().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let store = baton::store::Store::open(&data.join("baton.db")).await.unwrap();
        store.put_decision_signature(&task_id, seq, &"0".repeat(64)).await.unwrap();
    });
    let (code, out, _) = baton(&data, &["audit", "verify", &task_id]);
    assert_eq!(code, 4, "audit verify fails like a broken chain: {out}");
    assert!(out.contains(&format!("1 with a BAD signature (seq {seq})")), "{out}");
}

#[test]
fn fifty_clients_hammering_the_api_during_a_run_never_see_a_locked_database() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(&tmp.path().join("data"));
    let (status, body) = server.request("POST", "/api/v1/specs/3/fire", None);
    assert_eq!(status, 200, "{body}");
    let task_id = body["task_id"].as_str().unwrap().to_string();
    let failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for client in 0..50 {
            let (server, failures, task_id) = (&server, &failures, &task_id);
            scope.spawn(move || {
                for round in 0..6 {
                    let calls: [(&str, String, Option<Value>); 4] = [
                        ("GET", "/api/v1/board".into(), None),
                        ("GET", format!("/api/v1/executions/{task_id}"), None),
                        (
                            "POST",
                            "/api/v1/specs".into(),
                            Some(json!({"project": "demo", "title": format!("load {client}-{round}")})),
                        ),
                        ("GET", "/api/v1/specs?limit=5".into(), None),
                    ];
                    for (method, path, body) in calls {
                        let (status, answer) = server.request(method, &path, body);
                        let text = answer.to_string();
                        if status >= 500 || status == 0 || text.contains("database is locked") {
                            failures.lock().unwrap().push(format!("{method} {path}: {status} {text}"));
                        }
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(failures.is_empty(), "{} failures, e.g. {:?}", failures.len(), failures.first());
    let (_, specs) = server.request("GET", "/api/v1/specs?limit=500", None);
    assert_eq!(specs.as_array().unwrap().len(), 3 + 50 * 6, "every create landed once");
    server.wait_stage(3, "awaiting_human");
}

/// Creates, enriches, approves and fires a docs spec whose agents sleep `secs`; its task id.
pub(crate) fn fire_sleepy(server: &Server, title: &str, secs: u32) -> (i64, String) {
    fire_sleepy_in(server, "demo", title, secs)
}

/// [`fire_sleepy`] in `project`.
pub(crate) fn fire_sleepy_in(server: &Server, project: &str, title: &str, secs: u32) -> (i64, String) {
    let body = json!({"project": project, "title": title, "body": format!("Slowly. [demo: sleep={secs}]")});
    let (status, spec) = server.request("POST", "/api/v1/specs", Some(body));
    assert_eq!(status, 201, "{spec}");
    let id = spec["spec_id"].as_i64().unwrap();
    for (action, body) in [("enrich", None), ("review", Some(json!({"decision": "approve"}))), ("fire", None)] {
        let (status, answer) = server.request("POST", &format!("/api/v1/specs/{id}/{action}"), body);
        assert_eq!(status, 200, "{action}: {answer}");
    }
    (id, server.spec(id)["task_id"].as_str().unwrap().to_string())
}

#[test]
fn the_global_agent_cap_holds_across_executions() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start_with(&tmp.path().join("data"), &["--max-agents", "1"]);
    let runs: Vec<(i64, String)> = (0..3).map(|i| fire_sleepy(&server, &format!("Document part {i}"), 2)).collect();
    assert_ran_one_at_a_time(&server, &runs);
}

/// Three agents that sleep 2 s each, under a cap of one: at least 6 s from the first dispatch
/// to the last completion (journal times are whole seconds: at least 5), where running them at
/// once would take about 2 s.
fn assert_ran_one_at_a_time(server: &Server, runs: &[(i64, String)]) {
    let mut spans = Vec::new();
    for (id, task_id) in runs {
        server.wait_stage(*id, "awaiting_human");
        let (_, exec) = server.request("GET", &format!("/api/v1/executions/{task_id}"), None);
        let r = &exec["step_results"]["1.1"];
        let at = |k: &str| chrono::DateTime::parse_from_rfc3339(r[k].as_str().unwrap()).unwrap();
        spans.push((at("dispatched_at"), at("completed_at")));
    }
    let first = spans.iter().map(|s| s.0).min().unwrap();
    let last = spans.iter().map(|s| s.1).max().unwrap();
    assert!((last - first).num_seconds() >= 5, "the agents overlapped under a cap of one: {spans:?}");
}

#[test]
fn a_projects_agent_cap_holds_under_a_larger_global_cap() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let server = Server::start(&data);
    let repo = data.join("demo").join("board-repo");
    let project = json!({"name": "capped", "repo_path": repo, "agent_profile": "demo", "max_agents": 1});
    let (status, body) = server.request("POST", "/api/v1/projects", Some(project));
    assert_eq!(status, 201, "{body}");
    let runs: Vec<(i64, String)> =
        (0..3).map(|i| fire_sleepy_in(&server, "capped", &format!("Document part {i}"), 2)).collect();
    assert_ran_one_at_a_time(&server, &runs);
}

#[test]
fn a_paused_execution_dispatches_nothing_until_resumed() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(&tmp.path().join("data"));
    let (id, task_id) = fire_sleepy(&server, "Document slowly", 1);
    let (status, body) = server.request("POST", &format!("/api/v1/executions/{task_id}/pause"), None);
    assert_eq!((status, body["paused"].as_bool()), (200, Some(true)), "{body}");
    std::thread::sleep(Duration::from_secs(3));
    let (_, exec) = server.request("GET", &format!("/api/v1/executions/{task_id}"), None);
    assert_eq!(exec["status"], "running", "paused: the finished attempt waits to be harvested: {exec}");
    let (status, body) = server.request("POST", &format!("/api/v1/executions/{task_id}/resume"), None);
    assert_eq!((status, body["paused"].as_bool()), (200, Some(false)), "{body}");
    server.wait_stage(id, "awaiting_human");
    let (_, journal) = server.request("GET", &format!("/api/v1/executions/{task_id}/journal"), None);
    let dispatches = journal.as_array().unwrap().iter().filter(|e| e["kind"] == "step_dispatched").count();
    assert_eq!(dispatches, 1, "the attempt that ran during the pause was harvested, not re-run");
}

#[test]
fn token_create_never_changes_a_role_silently_and_checks_its_inputs() {
    // Found by a tester: a second `token create` with another role silently turned every
    // token of that user into the new role.
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    token(&data, "bob", "admin");
    let (code, _, err) = baton(&data, &["token", "create", "--user", "bob", "--role", "viewer"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("user bob is a admin") && err.contains("--change-role"), "{err}");
    let (_, list, _) = baton(&data, &["token", "list"]);
    assert_eq!(list.lines().count(), 1, "no token was made: {list}");
    assert!(list.contains("\tbob\tadmin\t"), "the list shows the role: {list}");
    let (code, _, err) = baton(&data, &["token", "create", "--user", "bob", "--role", "viewer", "--change-role"]);
    assert_eq!(code, 0, "{err}");
    let (_, list, _) = baton(&data, &["token", "list"]);
    assert!(list.lines().all(|l| l.contains("\tbob\tviewer\t")), "{list}");
    for login in ["", "bad login!", "-dash", &"x".repeat(40)] {
        let (code, _, err) =
            baton(&data, &["token", "create", "--user", "gil", "--role", "viewer", "--github-login", login]);
        assert_eq!(code, 2, "{login:?}: {err}");
    }
    let (code, _, err) = baton(&data, &["approval", "link", "--task-id", "t", "--reviewer", "bob", "--hours", "0"]);
    assert_eq!(code, 2, "a link that is expired when made: {err}");
}

#[test]
fn a_spec_fired_with_a_reviewed_ceiling_parks_at_it_and_a_raise_finishes_it() {
    let tmp = tempfile::tempdir().unwrap();
    let mut server = Server::start(&tmp.path().join("data"));
    let body = json!({"project": "demo", "title": "Document the costly path", "body": "Every step is costly. [demo: cost=0.4]"});
    let (status, spec) = server.request("POST", "/api/v1/specs", Some(body));
    assert_eq!(status, 201, "{spec}");
    let id = spec["spec_id"].as_i64().unwrap();
    let (status, answer) = server.request("POST", &format!("/api/v1/specs/{id}/enrich"), None);
    assert_eq!(status, 200, "{answer}");
    for bad in [json!(-3), json!(0.001), json!(2_000_000)] {
        // Refused when given, not when fired (found by a tester: an approved $0.001 made every
        // fire fail and leave an execution behind).
        let review = json!({"decision": "approve", "budget_usd": bad});
        let (status, answer) = server.request("POST", &format!("/api/v1/specs/{id}/review"), Some(review));
        assert_eq!(status, 422, "{answer}");
        assert!(
            answer["error"].as_str().unwrap_or_default().contains("from 0.01 to 1000000")
                || answer.to_string().contains("from 0.01 to 1000000"),
            "{answer}"
        );
    }
    let review = json!({"decision": "approve", "budget_usd": 0.5});
    let (status, answer) = server.request("POST", &format!("/api/v1/specs/{id}/review"), Some(review));
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["budget_usd"], 0.5);
    let (status, answer) = server.request("POST", &format!("/api/v1/specs/{id}/fire"), None);
    assert_eq!(status, 200, "{answer}");
    let task_id = server.spec(id)["task_id"].as_str().unwrap().to_string();
    // The Design phase's approval first (its one step fits the ceiling) …
    server.wait_stage(id, "awaiting_human");
    let (_, exec) = server.request("GET", &format!("/api/v1/executions/{task_id}"), None);
    assert_eq!(exec["status"], "approval_pending", "{exec}");
    let approve = json!({"phase_id": 1, "result": "approve"});
    let (status, body) = server.request("POST", &format!("/api/v1/executions/{task_id}/approve"), Some(approve));
    assert_eq!(status, 201, "{body}");
    // … then the next step does not fit: the card waits for a budget decision.
    let start = Stopwatch::start();
    let next = loop {
        let (_, next) = server.request("GET", &format!("/api/v1/executions/{task_id}/next"), None);
        if next["action_type"] == "budget" {
            break next;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "never parked at the ceiling: {next}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(next["spent_usd"].as_f64().unwrap() >= 0.4, "{next}");
    let (_, board) = server.request("GET", "/api/v1/board", None);
    let card = board["columns"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["cards"].as_array().unwrap().iter().map(move |card| (c["stage"].clone(), card.clone())))
        .find(|(_, card)| card["spec_id"] == id)
        .expect("the card is on the board");
    assert_eq!(card.0, "awaiting_human", "{board}");
    assert!(card.1["waits_for"].as_str().unwrap().contains("budget decision"), "{}", card.1);
    let (_, exec) = server.request("GET", &format!("/api/v1/executions/{task_id}"), None);
    assert_eq!(exec["status"], "budget_exceeded", "{exec}");
    let raise = json!({"decision": "raise", "by_usd": 5});
    let (status, body) = server.request("POST", &format!("/api/v1/executions/{task_id}/budget"), Some(raise));
    assert_eq!(status, 201, "{body}");
    server.wait_stage(id, "changelist_review");

    // Without a reviewed ceiling, the project's default applies.
    let repo = tmp.path().join("data").join("demo").join("board-repo");
    let bad = json!({"name": "budgeted", "repo_path": repo, "agent_profile": "demo", "budget_usd": -1});
    let (status, answer) = server.request("POST", "/api/v1/projects", Some(bad));
    assert_eq!(status, 422, "{answer}");
    let project = json!({"name": "budgeted", "repo_path": repo, "agent_profile": "demo", "budget_usd": 0.3});
    let (status, answer) = server.request("POST", "/api/v1/projects", Some(project));
    assert_eq!(status, 201, "{answer}");
    let body = json!({"project": "budgeted", "title": "Document the default", "body": "Cheap."});
    let (_, spec) = server.request("POST", "/api/v1/specs", Some(body));
    let other = spec["spec_id"].as_i64().unwrap();
    for (action, body) in [("enrich", None), ("review", Some(json!({"decision": "approve"}))), ("fire", None)] {
        let (status, answer) = server.request("POST", &format!("/api/v1/specs/{other}/{action}"), body);
        assert_eq!(status, 200, "{action}: {answer}");
    }
    let other_task = server.spec(other)["task_id"].as_str().unwrap().to_string();
    let (_, exec) = server.request("GET", &format!("/api/v1/executions/{other_task}"), None);
    assert_eq!(exec["budget"]["ceiling_usd"], 0.3, "{exec}");
    assert_eq!(exec["budget"]["source"], "project", "{exec}");
    server.kill9();
    // The raise authorised spending: it is signed like the approval.
    let (code, out, err) = baton(&tmp.path().join("data"), &["audit", "verify", &task_id]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("2 signed and verified"), "{out}");
}

/// An execution waiting for an approval reads "driver idle" on its page, not "driver parked":
/// "parked" is kept for an execution held until a human acts on its reason (a checked-out
/// feature branch), shown beside its status (found in review: the two read the same).
#[test]
fn an_execution_waiting_for_its_approval_is_not_called_parked() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(&tmp.path().join("data"));
    let (status, body) = server.request("POST", "/api/v1/specs/3/fire", None);
    assert_eq!(status, 200, "{body}");
    let task_id = body["task_id"].as_str().unwrap().to_string();
    server.wait_stage(3, "awaiting_human");
    let start = Stopwatch::start();
    let page = loop {
        let (status, _, page) = server.raw("GET", &format!("/executions/{task_id}"), "", "");
        assert_eq!(status, 200, "{page}");
        if !page.contains("· driver running") || start.elapsed() > Duration::from_secs(30) {
            break page;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(page.contains("· driver idle"), "{page}");
    assert!(!page.contains("parked"), "{page}");
}
