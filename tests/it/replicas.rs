//! Three `baton serve` replicas on one PostgreSQL database (issue 17.2), as real processes with
//! their own data directories and a 2 s lease: they share fired executions of the demo agent,
//! one is killed (SIGKILL) mid-run and another paused (SIGSTOP) past its lease and resumed.
//! Every execution completes, every journal verifies, no step's work is committed twice, the
//! paused replica writes nothing after it was fenced out, and one approval sent to two replicas
//! at once is recorded once. The replicas share one local repository for the demo project (the
//! first replica's). A replica of `--role api` drives nothing; one of `--role worker` picks its
//! fired executions up. A replica with a server key other than the first one's refuses to start.
//! Webhook deliveries of one issue sent to every replica at once make one spec. With a project
//! whose remote is a local bare repository and whose forge is a mock GitHub, a replica that dies
//! right after pushing a step is taken over from the remote, and merges sent to two replicas at
//! once open one pull request per execution. A replica that takes an execution over without
//! its `execution.json` starts from the base recorded when it was created, although the default
//! branch moved on since, and one that never drove an execution shows its changelist from the
//! project's remote. An execution waiting for a human is not claimed from replica to replica
//! while nobody answers.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use baton::clock::Stopwatch;
use nix::sys::signal::{kill, Signal};
use serde_json::{json, Value};

use crate::common::postgres_database;
use crate::serve::{fire_sleepy, fire_sleepy_in, Server};
use crate::webhooks::{github_delivery, SECRET};

/// Executions fired.
const EXECUTIONS: usize = 20;

/// Lease lifetime of every replica, seconds.
const LEASE_SECS: u64 = 2;

/// The replicas of one test: each has its data dir `<tmp>/<name>` and logs to `<tmp>/<name>.log`.
struct Cluster {
    tmp: tempfile::TempDir,
    /// The data dir of the first replica started: it made the server key.
    first: std::cell::OnceCell<PathBuf>,
}

impl Cluster {
    fn new() -> Cluster {
        Cluster { tmp: tempfile::tempdir().unwrap(), first: std::cell::OnceCell::new() }
    }

    /// Replica `name`'s data dir.
    fn data(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }

    /// Starts replica `name` (`baton serve --demo` with `extra` flags and `env`). The first
    /// one started seeds the demo project (its repository is everyone's) and makes the server
    /// key; every later one gets a copy of that key before it starts, as a deployment does
    /// (README, "Several replicas"): a decision signed by any replica verifies on every one.
    fn start(&self, name: &str, extra: &[&str], env: &[(&str, &str)]) -> Server {
        let data = self.data(name);
        if let Some(first) = self.first.get().filter(|f| **f != data) {
            share_key(first, &data);
        }
        let server = Server::start_env(&data, extra, env);
        let _ = self.first.set(data);
        server
    }

    /// What replica `name` logged so far.
    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.data(name).with_extension("log")).unwrap_or_default()
    }

    /// How many times the replicas `names` logged that they claimed execution `task_id`.
    fn claims(&self, names: &[&str], task_id: &str) -> usize {
        let claimed = format!("claimed execution {task_id} ");
        names.iter().map(|n| self.log(n).matches(&claimed).count()).sum()
    }

    /// `baton audit verify <task_id>` on database `url` passes.
    fn assert_audit_verifies(&self, url: &str, task_id: &str) {
        let first = self.first.get().expect("a replica was started");
        let audit = Command::new(env!("CARGO_BIN_EXE_baton"))
            .arg("--data-dir")
            .arg(first)
            .args(["audit", "verify", task_id])
            .env("BATON_DATABASE_URL", url)
            .output()
            .unwrap();
        assert!(audit.status.success(), "{task_id}: {}", String::from_utf8_lossy(&audit.stdout));
    }
}

/// Copies the server key of data dir `from` into data dir `to` (made when missing), as a
/// deployment does for every replica.
fn share_key(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    std::fs::copy(from.join("server.key"), to.join("server.key")).unwrap();
}

fn journal(server: &Server, task_id: &str) -> Vec<Value> {
    let (status, body) = server.request("GET", &format!("/api/v1/executions/{task_id}/journal"), None);
    assert_eq!(status, 200, "{body}");
    body.as_array().unwrap().clone()
}

/// Approves phase 1 of `task_id` on `server`: (status, answer).
fn approve(server: &Server, task_id: &str) -> (u16, Value) {
    server.request(
        "POST",
        &format!("/api/v1/executions/{task_id}/approve"),
        Some(json!({"phase_id": 1, "result": "approve"})),
    )
}

/// The `Baton-Step` trailers of the commits on `branch` (`git <git_dir> log`), newest first,
/// after checking that no step's work was committed twice.
fn step_commits(git_dir: &str, branch: &str) -> Vec<String> {
    let log = Command::new("git")
        .arg(git_dir)
        .args(["log", "--format=%(trailers:key=Baton-Step,valueonly,separator=)", branch])
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&log.stdout);
    let steps: Vec<String> = log.lines().map(str::trim).filter(|l| !l.is_empty()).map(String::from).collect();
    let mut unique = steps.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), steps.len(), "{branch}: a step committed twice:\n{log}");
    steps
}

/// A project repository (a workspace's) and its remote: a bare clone of it beside it.
fn with_remote() -> (crate::common::Workspace, PathBuf) {
    let ws = crate::common::Workspace::with_repo(&[("README.md", "x\n")]);
    let bare = ws.tmp.path().join("remote.git");
    let out = Command::new("git").args(["clone", "-q", "--bare"]).arg(ws.repo()).arg(&bare).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    (ws, bare)
}

#[test]
fn three_replicas_share_the_work_through_a_kill_and_a_pause() {
    let Some(url) = postgres_database() else { return };
    let cluster = Cluster::new();
    let lease = LEASE_SECS.to_string();
    let env = [
        ("BATON_DATABASE_URL", url.as_str()),
        ("BATON_LEASE_SECS", lease.as_str()),
        ("BATON_LOG", "warn,baton::progress=info,baton::runtime::pool=info"),
    ];
    // One at a time: the first seeds the demo project (its repository is everyone's).
    let a = cluster.start("a", &[], &env);
    let mut b = cluster.start("b", &[], &env);
    let c = cluster.start("c", &[], &env);

    let runs: Vec<(i64, String)> = (0..EXECUTIONS)
        .map(|i| {
            let replica = [&a, &b, &c][i % 3];
            fire_sleepy(replica, &format!("Document part {i}"), 1)
        })
        .collect();

    // Kill b once one of its executions has an agent running; pause c past its lease.
    let on_b: Vec<&String> = runs.iter().skip(1).step_by(3).map(|(_, t)| t).collect();
    let watch = Stopwatch::start();
    while !on_b.iter().any(|t| journal(&a, t).iter().any(|e| e["kind"] == "step_dispatched")) {
        assert!(watch.elapsed() < Duration::from_secs(30), "b dispatched nothing");
        std::thread::sleep(Duration::from_millis(50));
    }
    b.kill9();
    kill(c.pid(), Signal::SIGSTOP).unwrap();
    std::thread::sleep(Duration::from_secs(2 * LEASE_SECS + 1));
    kill(c.pid(), Signal::SIGCONT).unwrap();

    for (id, _) in &runs {
        a.wait_stage(*id, "awaiting_human");
    }
    // One approval sent to two replicas at once is recorded once.
    let (_, first) = &runs[0];
    let (on_a, on_c) = std::thread::scope(|s| {
        let x = s.spawn(|| approve(&a, first));
        let y = s.spawn(|| approve(&c, first));
        (x.join().unwrap(), y.join().unwrap())
    });
    // The same decision twice is one decision: the first is recorded (201); the later one is
    // answered as a replay (200, `recorded: false`), or refused (409) when a driver already
    // carries the execution on; the journal holds one (checked below).
    let (recorded, other) = if on_a.0 == 201 { (&on_a, &on_c) } else { (&on_c, &on_a) };
    assert_eq!(recorded.0, 201, "a: {on_a:?}, c: {on_c:?}");
    let replayed = other.0 == 200 && other.1["recorded"] == json!(false);
    assert!(replayed || other.0 == 409, "a: {on_a:?}, c: {on_c:?}");
    for (_, task_id) in runs.iter().skip(1) {
        let (status, body) = approve(&a, task_id);
        assert_eq!(status, 201, "{task_id}: {body}");
    }
    for (id, _) in &runs {
        a.wait_stage(*id, "changelist_review");
    }

    let repo = cluster.data("a").join("demo").join("board-repo");
    for (_, task_id) in &runs {
        let events = journal(&a, task_id);
        let approvals = events.iter().filter(|e| e["kind"] == "approval_recorded").count();
        assert_eq!(approvals, 1, "{task_id}: one decision");
        cluster.assert_audit_verifies(&url, task_id);
        // Each step's work is on the feature branch once.
        let steps = step_commits(&format!("--git-dir={}", repo.join(".git").display()), &format!("baton/{task_id}"));
        assert!(!steps.is_empty(), "{task_id}: no step commit");
    }

    // b's executions were taken over by the claim loops of the others; c, woken after its
    // leases had been taken, was fenced out: it stopped those executions and said so.
    assert!(
        on_b.iter().any(|t| cluster.claims(&["a", "c"], t) > 0),
        "no execution of the killed replica was claimed:\n{}\n{}",
        cluster.log("a"),
        cluster.log("c")
    );
    let c_log = cluster.log("c");
    assert!(c_log.contains("lost the lease"), "the paused replica was not fenced out:\n{c_log}");
}

/// `--role api` drives nothing: a spec fired there is picked up by a `--role worker` replica's
/// claim loop, which serves nothing but health and metrics.
#[test]
fn an_api_replica_fires_and_a_worker_replica_drives() {
    let Some(url) = postgres_database() else { return };
    let cluster = Cluster::new();
    let lease = LEASE_SECS.to_string();
    let env = [("BATON_DATABASE_URL", url.as_str()), ("BATON_LEASE_SECS", lease.as_str())];
    let api = cluster.start("api", &["--role", "api"], &env);
    let (id, task_id) = fire_sleepy(&api, "Document the roles", 0);
    std::thread::sleep(Duration::from_secs(2 * LEASE_SECS));
    assert!(journal(&api, &task_id).iter().all(|e| e["kind"] != "step_dispatched"), "the api replica drove it");

    let worker = cluster.start("worker", &["--role", "worker"], &env);
    assert_eq!(worker.request("GET", "/api/v1/specs", None).0, 404, "a worker serves no API");
    assert_eq!(worker.request("GET", "/readyz", None).0, 200);
    api.wait_stage(id, "awaiting_human");
    let (status, body) = approve(&api, &task_id);
    assert_eq!(status, 201, "{body}");
    api.wait_stage(id, "changelist_review");
}

/// A replica whose server key is not the one the database's first replica recorded refuses to
/// start, naming both fingerprints and the fix; the first keeps serving. With the key copied
/// over, it starts.
#[test]
fn a_replica_with_another_server_key_refuses_to_start() {
    let Some(url) = postgres_database() else { return };
    let cluster = Cluster::new();
    let env = [("BATON_DATABASE_URL", url.as_str())];
    let a = cluster.start("a", &[], &env);
    let key = |name: &str| {
        let text = std::fs::read_to_string(cluster.data(name).join("server.key")).unwrap();
        let bytes: [u8; 32] = hex::decode(text.trim()).unwrap().try_into().unwrap();
        bytes
    };
    let fingerprint = |bytes: [u8; 32]| {
        use hmac::Mac as _;
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&bytes).unwrap();
        mac.update(br#"["baton server key fingerprint"]"#);
        hex::encode(&mac.finalize().into_bytes()[..16])
    };

    // b makes a key of its own (as a replica started without copying one does).
    let b = cluster.data("b");
    std::fs::create_dir_all(&b).unwrap();
    std::fs::write(b.join("server.key"), hex::encode([0x5a_u8; 32])).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_baton"))
        .arg("--data-dir")
        .arg(&b)
        .args(["serve", "--bind", "127.0.0.1:0"])
        .envs(env)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let watch = Stopwatch::start();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if watch.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("the replica with another key kept running");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!status.success(), "{err}");
    let (ours, theirs) = (fingerprint([0x5a; 32]), fingerprint(key("a")));
    assert_ne!(ours, theirs);
    assert!(err.contains(&ours) && err.contains(&theirs), "both fingerprints named: {err}");
    assert!(err.contains("copy server.key from a running replica; see docs/src/replicas.md"), "{err}");
    assert!(!err.contains(&hex::encode(key("a"))), "the key itself is never shown: {err}");

    assert_eq!(a.request("GET", "/readyz", None).0, 200, "the first replica keeps serving");
    let (id, _) = fire_sleepy(&a, "Document the key", 0);
    a.wait_stage(id, "awaiting_human");

    // With the key copied over, b starts and serves the same board.
    let b = cluster.start("b", &[], &env);
    assert_eq!(b.spec(id)["stage"], "awaiting_human");
}

/// The same GitHub `issues` delivery (one delivery id, a valid signature) sent to three
/// replicas at the same moment, and two other deliveries of the same issue with it, make one
/// spec; every replica answers with a success.
#[test]
fn one_issue_delivered_to_three_replicas_at_once_makes_one_spec() {
    let Some(url) = postgres_database() else { return };
    let cluster = Cluster::new();
    let env = [("BATON_DATABASE_URL", url.as_str()), ("BATON_GITHUB_WEBHOOK_SECRET", SECRET)];
    let (a, b, c) = (cluster.start("a", &[], &env), cluster.start("b", &[], &env), cluster.start("c", &[], &env));
    let repo = cluster.data("a").join("demo").join("board-repo");
    let project = json!({"name": "lantern", "repo_path": repo, "agent_profile": "demo",
                         "forge_repo": "lumen-labs/lantern", "trigger_label": "bug"});
    let (status, body) = a.request("POST", "/api/v1/projects", Some(project));
    assert_eq!(status, 201, "{body}");

    let (body, headers) = github_delivery("issues.opened");
    let body = String::from_utf8(body).unwrap();
    let head = |delivery: Option<&str>| -> String {
        headers
            .iter()
            .map(|(k, v)| {
                let v = if k == "X-GitHub-Delivery" { delivery.unwrap_or(v) } else { v };
                format!("{k}: {v}\r\n")
            })
            .collect()
    };
    let (same, other, third) = (head(None), head(Some("replica-test-2")), head(Some("replica-test-3")));
    let sends = [(&a, &same), (&b, &same), (&c, &same), (&a, &other), (&c, &third)];
    let answers: Vec<(u16, String)> = std::thread::scope(|s| {
        let body = &body;
        let running: Vec<_> = sends
            .iter()
            .map(|(server, head)| s.spawn(move || server.raw("POST", "/webhooks/github", head, body)))
            .collect();
        running.into_iter().map(|h| h.join().unwrap()).map(|(status, _, text)| (status, text)).collect()
    });
    assert!(answers.iter().all(|(status, _)| (200..300).contains(status)), "{answers:?}");
    assert_eq!(answers.iter().filter(|(status, _)| *status == 201).count(), 1, "one created: {answers:?}");
    for server in [&a, &b, &c] {
        let (status, specs) = server.request("GET", "/api/v1/specs", None);
        assert_eq!(status, 200, "{specs}");
        let imported = specs
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["source_url"] == "https://github.com/lumen-labs/lantern/issues/7")
            .count();
        assert_eq!(imported, 1, "one spec for the issue on every replica: {specs}");
    }
}

/// Executions of a project with a remote (a local bare repository) and a forge link (a mock
/// GitHub), driven by three replicas, one of which dies mid-run right after it pushed a step's
/// commit and before it journaled the step (`BATON_CRASH_AT=after-consolidate`: the process
/// exits at once, as a SIGKILL would leave it). The survivors claim its executions through
/// their claim loops and take them over from the remote: every execution completes, the remote
/// branch holds each step's commit once, the pushed step is recorded from the remote instead
/// of run again, and every journal verifies. Then each execution is merged on both survivors
/// at once (one of which never drove it): one pull request is opened per branch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn takeover_through_claims_from_the_remote_and_one_pull_request_per_execution() {
    let Some(url) = std::thread::spawn(postgres_database).join().unwrap() else { return };
    let github = crate::forge_flow::github_mock().await;
    let cluster = Cluster::new();
    let (ws, bare) = with_remote();
    let (lease, gh) = (LEASE_SECS.to_string(), github.uri());
    let env = [
        ("BATON_DATABASE_URL", url.as_str()),
        ("BATON_LEASE_SECS", lease.as_str()),
        ("BATON_LOG", "warn,baton::progress=info,baton::runtime::pool=info"),
        ("BATON_GITHUB_API_URL", gh.as_str()),
        ("GITHUB_TOKEN", "ghp_replica_test_token"),
    ];
    let a = cluster.start("a", &[], &env);
    let crash = [&env[..], &[("BATON_CRASH_AT", "after-consolidate")]].concat();
    let mut b = cluster.start("b", &[], &crash);
    let c = cluster.start("c", &[], &env);
    let project = json!({"name": "lantern", "repo_path": ws.repo(), "repo_url": bare, "agent_profile": "demo",
                         "forge_repo": "lumen-labs/lantern"});
    let (status, body) = a.request("POST", "/api/v1/projects", Some(project));
    assert_eq!(status, 201, "{body}");

    // b's first, before it dies at its first consolidation.
    let runs: Vec<(i64, String)> = [&b, &b, &a, &c, &a, &c]
        .iter()
        .enumerate()
        .map(|(i, server)| fire_sleepy_in(server, "lantern", &format!("Document part {i}"), 2))
        .collect();
    let watch = Stopwatch::start();
    while !b.exited() {
        assert!(watch.elapsed() < Duration::from_secs(90), "b never reached its crash point");
        std::thread::sleep(Duration::from_millis(100));
    }
    for (id, task_id) in &runs {
        a.wait_stage(*id, "awaiting_human");
        let (status, body) = approve(&a, task_id);
        assert_eq!(status, 201, "{task_id}: {body}");
    }
    for (id, _) in &runs {
        a.wait_stage(*id, "changelist_review");
    }

    let survivors = format!("{}\n{}", cluster.log("a"), cluster.log("c"));
    assert!(
        runs[..2].iter().any(|(_, t)| cluster.claims(&["a", "c"], t) > 0),
        "no execution of the dead replica was claimed:\n{survivors}"
    );
    assert!(
        survivors.contains("is on the remote; recording it"),
        "the step b pushed was not recorded from the remote:\n{survivors}"
    );
    for (_, task_id) in &runs {
        let events = journal(&a, task_id);
        cluster.assert_audit_verifies(&url, task_id);
        // Each recorded step's commit is on the remote's branch, once.
        let branch = format!("baton/{task_id}");
        let steps = step_commits(&format!("--git-dir={}", bare.display()), &branch);
        let recorded: Vec<&Value> = events.iter().filter(|e| e["kind"] == "step_recorded").collect();
        assert_eq!(recorded.len(), steps.len(), "{task_id}: every recorded step is on the remote once: {steps:?}");
        for rec in &recorded {
            let sha = rec["payload"]["commit_hash"].as_str().unwrap_or_default();
            let on_remote = Command::new("git")
                .arg(format!("--git-dir={}", bare.display()))
                .args(["merge-base", "--is-ancestor", sha, &branch])
                .status()
                .unwrap();
            assert!(on_remote.success(), "{task_id}: recorded commit {sha} is not on the remote: {rec}");
        }
    }

    // Each execution merged on both survivors at once: one pull request per branch.
    for (_, task_id) in &runs {
        let merge = |server: &Server| server.request("POST", &format!("/api/v1/executions/{task_id}/merge"), None);
        let (on_a, on_c) = std::thread::scope(|s| {
            let x = s.spawn(|| merge(&a));
            let y = s.spawn(|| merge(&c));
            (x.join().unwrap(), y.join().unwrap())
        });
        assert_eq!(on_a.0, 200, "{task_id}: a: {on_a:?}, c: {on_c:?}");
        assert_eq!(on_c.0, 200, "{task_id}: a: {on_a:?}, c: {on_c:?}");
        assert_eq!(on_a.1["pr_url"], on_c.1["pr_url"]);
    }
    let posts = crate::forge_flow::received(&github, "POST", "/repos/lumen-labs/lantern/pulls").await;
    let mut heads: Vec<String> = posts
        .iter()
        .map(|r| serde_json::from_slice::<Value>(&r.body).unwrap()["head"].as_str().unwrap().to_string())
        .collect();
    heads.sort();
    let mut expected: Vec<String> = runs.iter().map(|(_, t)| format!("baton/{t}")).collect();
    expected.sort();
    assert_eq!(heads, expected, "one pull request per execution's branch");
}

/// On PostgreSQL a project may be registered with its remote alone (no `repo_path`): the
/// registering replica checks its own clone of the remote, and every replica drives its
/// executions in its own clone under `<data>/repos/`.
#[test]
fn a_project_with_only_a_remote_runs_in_each_replicas_clone() {
    let Some(url) = postgres_database() else { return };
    let cluster = Cluster::new();
    let (_ws, bare) = with_remote();
    let env = [("BATON_DATABASE_URL", url.as_str())];
    let a = cluster.start("a", &[], &env);
    let project = json!({"name": "solo", "repo_url": bare, "agent_profile": "demo"});
    let (status, body) = a.request("POST", "/api/v1/projects", Some(project));
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["repo_path"], "", "no local path is recorded: {body}");
    assert!(!body["default_branch"].as_str().unwrap_or_default().is_empty(), "the remote's branch: {body}");
    let (id, task_id) = fire_sleepy_in(&a, "solo", "Document the remote", 0);
    a.wait_stage(id, "awaiting_human");
    let (status, body) = approve(&a, &task_id);
    assert_eq!(status, 201, "{body}");
    a.wait_stage(id, "changelist_review");
    assert!(cluster.data("a").join("repos/solo/.git").exists(), "the replica's own clone");
    let tip = Command::new("git")
        .arg(format!("--git-dir={}", bare.display()))
        .args(["log", "--format=%B", &format!("baton/{task_id}")])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&tip.stdout).contains("Baton-Step:"), "the steps are on the remote");
}

/// `runs/<task_id>/execution.json` of replica `name`'s data dir, `None` when it has none.
fn run_meta(cluster: &Cluster, name: &str, task_id: &str) -> Option<Value> {
    let text = std::fs::read_to_string(cluster.data(name).join("runs").join(task_id).join("execution.json")).ok()?;
    Some(serde_json::from_str(&text).unwrap())
}

/// `git <git_dir> <args>`, which must succeed: its stdout, trimmed.
fn git(git_dir: &str, args: &[&str]) -> String {
    let out = Command::new("git").arg(git_dir).args(args).output().unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Someone else's commit on `branch` of the repository at `git_dir` (its tree unchanged, made
/// without a working tree): the default branch moving on while an execution runs.
fn commit_elsewhere(git_dir: &str, branch: &str) {
    let tree = git(git_dir, &["rev-parse", &format!("{branch}^{{tree}}")]);
    let commit = git(
        git_dir,
        &[
            "-c",
            "user.name=x",
            "-c",
            "user.email=x@x.invalid",
            "commit-tree",
            "-p",
            branch,
            "-m",
            "Someone else's work",
            &tree,
        ],
    );
    git(git_dir, &["update-ref", &format!("refs/heads/{branch}"), &commit]);
}

/// The commits a changelist page lists, one line each.
fn listed_commits(page: &str) -> Vec<String> {
    page.lines().filter(|l| l.contains("<h3>")).map(String::from).collect()
}

/// An execution started on replica a, whose default branch then moves on (someone else's
/// commit), is taken over by replica b, which has no `execution.json` for it (a is killed
/// while the execution waits for its approval): b starts from the base recorded when the
/// execution was created, not from the default branch's tip now, and its changelist lists
/// the execution's commits and nothing else.
#[test]
fn a_takeover_without_execution_json_starts_from_the_recorded_base() {
    let Some(url) = postgres_database() else { return };
    let cluster = Cluster::new();
    let lease = LEASE_SECS.to_string();
    let env = [
        ("BATON_DATABASE_URL", url.as_str()),
        ("BATON_LEASE_SECS", lease.as_str()),
        ("BATON_LOG", "warn,baton::runtime::pool=info"),
    ];
    let mut a = cluster.start("a", &[], &env);
    let (id, task_id) = fire_sleepy(&a, "Document the base", 0);
    a.wait_stage(id, "awaiting_human");
    let base = run_meta(&cluster, "a", &task_id).expect("a drove it")["base_sha"].as_str().unwrap().to_string();
    let (_, project) = a.request("GET", "/api/v1/projects/demo", None);
    let default = project["default_branch"].as_str().unwrap().to_string();
    a.kill9();

    let repo = format!("--git-dir={}", cluster.data("a").join("demo/board-repo/.git").display());
    assert_eq!(git(&repo, &["rev-parse", &default]), base, "the execution started at the default branch's tip");
    commit_elsewhere(&repo, &default);

    let b = cluster.start("b", &[], &env);
    assert!(run_meta(&cluster, "b", &task_id).is_none());
    let (status, body) = approve(&b, &task_id);
    assert_eq!(status, 201, "{body}");
    b.wait_stage(id, "changelist_review");
    assert!(cluster.claims(&["b"], &task_id) >= 1, "b took it over:\n{}", cluster.log("b"));
    let meta = run_meta(&cluster, "b", &task_id).expect("b wrote its execution.json");
    assert_eq!(meta["base_sha"], base.as_str(), "{meta}");

    let (status, _, page) = b.raw("GET", &format!("/executions/{task_id}/changelist"), "", "");
    assert_eq!(status, 200, "{page}");
    assert!(page.contains(&format!("base {}", &base[..10])), "{page}");
    let ours = git(&repo, &["rev-list", "--count", &format!("{base}..baton/{task_id}")]);
    assert_eq!(listed_commits(&page).len().to_string(), ours, "only the execution's commits:\n{page}");
    assert!(!page.contains("Someone else"), "{page}");
}

/// The changelist page of an execution of a project with a remote, on a replica that never
/// drove it (started after the execution completed on another): read from that replica's
/// clone of the remote, with the base recorded when the execution was created, it lists the
/// same commits as on the replica that drove it, although the remote's default branch has
/// since taken the feature branch in (merged by hand) and moved on, which leaves no fork
/// point to guess the base from. Reading it writes no `execution.json`.
#[test]
fn the_changelist_on_a_replica_that_never_drove_the_execution_reads_the_remote() {
    let Some(url) = postgres_database() else { return };
    let cluster = Cluster::new();
    let (ws, bare) = with_remote();
    let env = [("BATON_DATABASE_URL", url.as_str())];
    let a = cluster.start("a", &[], &env);
    let project = json!({"name": "lantern", "repo_path": ws.repo(), "repo_url": bare, "agent_profile": "demo"});
    let (status, body) = a.request("POST", "/api/v1/projects", Some(project));
    assert_eq!(status, 201, "{body}");
    let default = body["default_branch"].as_str().unwrap().to_string();
    let (id, task_id) = fire_sleepy_in(&a, "lantern", "Document the remote", 0);
    a.wait_stage(id, "awaiting_human");
    assert_eq!(approve(&a, &task_id).0, 201);
    a.wait_stage(id, "changelist_review");
    let page = |server: &Server| {
        let (status, _, page) = server.raw("GET", &format!("/executions/{task_id}/changelist"), "", "");
        assert_eq!(status, 200, "{page}");
        page
    };
    let on_a = page(&a);
    let base = run_meta(&cluster, "a", &task_id).unwrap()["base_sha"].as_str().unwrap().to_string();

    let remote = format!("--git-dir={}", bare.display());
    git(&remote, &["update-ref", &format!("refs/heads/{default}"), &format!("refs/heads/baton/{task_id}")]);
    commit_elsewhere(&remote, &default);

    let b = cluster.start("b", &[], &env);
    let on_b = page(&b);
    assert!(on_b.contains(&format!("base {}", &base[..10])), "{on_b}");
    assert!(!listed_commits(&on_a).is_empty(), "{on_a}");
    assert_eq!(listed_commits(&on_b), listed_commits(&on_a), "{on_b}");
    assert!(on_b.contains("Step 1.1"), "{on_b}");
    assert!(run_meta(&cluster, "b", &task_id).is_none(), "reading the changelist took nothing over");
}

/// Creates, enriches and fires a spec of the demo project whose first step is interactive: its
/// agent asks a question and waits for a human's reply before it finishes (then the phase
/// asks for its approval, as every demo plan's first phase does). (spec id, task id).
fn fire_interactive(server: &Server, title: &str) -> (i64, String) {
    let (status, spec) =
        server.request("POST", "/api/v1/specs", Some(json!({"project": "demo", "title": title, "body": "Ask first."})));
    assert_eq!(status, 201, "{spec}");
    let id = spec["spec_id"].as_i64().unwrap();
    let (status, enriched) = server.request("POST", &format!("/api/v1/specs/{id}/enrich"), None);
    assert_eq!(status, 200, "{enriched}");
    let mut plan = enriched["plan"].clone();
    let step = &mut plan["phases"][0]["steps"][0];
    step["interactive"] = json!(true);
    step["max_turns"] = json!(4);
    step["task_description"] = json!("Clarify the scope [demo: interact=Which database should I use?]");
    let (status, answer) = server.request("PUT", &format!("/api/v1/specs/{id}/plan"), Some(plan));
    assert_eq!(status, 200, "{answer}");
    for (action, body) in [("review", Some(json!({"decision": "approve"}))), ("fire", None)] {
        let (status, answer) = server.request("POST", &format!("/api/v1/specs/{id}/{action}"), body);
        assert_eq!(status, 200, "{action}: {answer}");
    }
    (id, server.spec(id)["task_id"].as_str().unwrap().to_string())
}

/// Polls execution `task_id` on `server` until `until` holds (up to 90 s).
fn wait_execution(server: &Server, task_id: &str, what: &str, until: impl Fn(&Value) -> bool) {
    let watch = Stopwatch::start();
    loop {
        let (status, view) = server.request("GET", &format!("/api/v1/executions/{task_id}"), None);
        assert_eq!(status, 200, "{view}");
        if until(&view) {
            return;
        }
        assert!(watch.elapsed() < Duration::from_secs(90), "{task_id} never got to {what}: {view}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// An execution waiting for a human on three replicas, first for an interactive step's reply
/// (its status stays `running`), then for its phase's approval: over four lease periods of
/// each wait no replica claims it (its driver let the lease go, and the claim loops leave an
/// execution alone while its journal has not moved since). The reply, sent to another
/// replica, resumes it once (one more claim at most, one more launch of the step), and the
/// approval, sent to a third, carries it to its end.
#[test]
fn an_execution_waiting_for_a_human_is_not_claimed_back_and_forth() {
    let Some(url) = postgres_database() else { return };
    let cluster = Cluster::new();
    let lease = LEASE_SECS.to_string();
    let env = [
        ("BATON_DATABASE_URL", url.as_str()),
        ("BATON_LEASE_SECS", lease.as_str()),
        ("BATON_LOG", "warn,baton::runtime::pool=info"),
    ];
    let (a, b, c) = (cluster.start("a", &[], &env), cluster.start("b", &[], &env), cluster.start("c", &[], &env));
    let all = ["a", "b", "c"];
    let (id, task_id) = fire_interactive(&a, "Document the scope");
    let interacting = |v: &Value| v["step_results"]["1.1"]["status"] == "interacting";
    wait_execution(&a, &task_id, "the interactive step's question", interacting);
    let before = cluster.claims(&all, &task_id);
    std::thread::sleep(Duration::from_secs(4 * LEASE_SECS));
    assert_eq!(cluster.claims(&all, &task_id), before, "claimed while it waited for the reply");

    let reply = json!({"step_id": "1.1", "input": "Use SQLite."});
    let (status, body) = c.request("POST", &format!("/api/v1/executions/{task_id}/interact"), Some(reply));
    assert_eq!(status, 201, "{body}");
    wait_execution(&a, &task_id, "the approval", |v| v["status"] == "approval_pending");
    let resumed = cluster.claims(&all, &task_id);
    assert!(resumed <= before + 1, "the reply was picked up more than once: {before} -> {resumed} claims");
    let launches = |server: &Server| {
        journal(server, &task_id)
            .iter()
            .filter(|e| e["kind"] == "step_dispatched" && e["payload"]["step_id"] == "1.1")
            .count()
    };
    assert_eq!(launches(&a), 2, "the question's launch and the reply's");
    std::thread::sleep(Duration::from_secs(4 * LEASE_SECS));
    assert_eq!(cluster.claims(&all, &task_id), resumed, "claimed while it waited for the approval");

    assert_eq!(approve(&b, &task_id).0, 201);
    a.wait_stage(id, "changelist_review");
    assert!(cluster.claims(&all, &task_id) <= resumed + 1, "the approval was picked up more than once");
    assert_eq!(launches(&b), 2);
    let events = journal(&a, &task_id);
    assert_eq!(events.iter().filter(|e| e["kind"] == "approval_recorded").count(), 1);
    cluster.assert_audit_verifies(&url, &task_id);
}
