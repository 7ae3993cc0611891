//! From opened pull request to merged (issue 19.3/4), end to end: a real `baton serve`, a
//! real git repository whose `origin` is a local bare repository, a fake agent (a shell
//! script, run as a real subprocess) and a local mock GitHub serving check runs, annotations,
//! the combined status and the pull request endpoints in the documented shapes.
//!
//! The loop: a webhook imports an issue → fired → pull request opened (reported once on the
//! issue) → a check fails → a CI fix round (the fix pushed to the same branch, never forced)
//! → checks pass → a reviewer's review comment starts a review round (Baton replies on the
//! comment with the commit) → merged webhook → `merged`. A second scenario uses up its fix
//! rounds and parks: it asks a human on the issue and the card says so. The same loop runs on
//! Azure DevOps (builds and statuses, a `build.complete` hook, a pull request comment hook, the
//! reply on its thread, `git.pullrequest.merged`). Every new event kind
//! (`pull_request_review`, `pull_request_review_comment`, the Azure DevOps pull request comment
//! event) is refused tampered or unsigned and answered `duplicate` when replayed.

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

struct Loop {
    ws: Workspace,
    bare: PathBuf,
    server: Server,
    admin: String,
    github: MockServer,
    /// Where the fake agent appends every prompt it gets.
    prompts: PathBuf,
    /// While this file exists the fake agent waits before it finishes (a round that runs).
    hold: PathBuf,
}

fn baton(data: &std::path::Path, args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_baton")).arg("--data-dir").arg(data).args(args).output();
    let out = out.unwrap();
    assert!(out.status.success(), "baton {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A repository with a bare `origin`, a fake agent `dev` (a shell script that writes one new
/// file per run and logs its prompt), `extra` in `baton.toml`, users `admin` and the reviewer
/// `tessa` (GitHub `tessa-lumen`, Azure DevOps `tessa@lumenlabs.example`), and a server whose
/// GitHub is a fresh mock.
async fn start(extra: &str) -> Loop {
    let ws = Workspace::with_repo(&[("README.md", "hello\n"), ("src/lib.rs", "pub fn f() {}\n")]);
    let bare = ws.tmp.path().join("remote.git");
    let out = std::process::Command::new("git").args(["init", "-q", "--bare"]).arg(&bare).output().unwrap();
    assert!(out.status.success());
    ws.git(&["remote", "add", "origin", bare.to_str().unwrap()]);
    let prompts = ws.tmp.path().join("prompts.log");
    let hold = ws.tmp.path().join("hold");
    let agent = ws.tmp.path().join("dev.sh");
    std::fs::write(
        &agent,
        format!(
            "#!/bin/sh\ncat >> '{}'\necho '--- end of prompt' >> '{}'\nwhile [ -f '{}' ]; do sleep 0.2; done\n\
             n=$(ls fix-*.txt 2>/dev/null | wc -l)\necho \"change $n\" > fix-$n.txt\necho 'Done.'\n",
            prompts.display(),
            prompts.display(),
            hold.display()
        ),
    )
    .unwrap();
    std::fs::create_dir_all(ws.data()).unwrap();
    let toml = format!("[agents.dev]\nprofile = \"command\"\ncommand = [\"sh\", \"{}\"]\n{extra}", agent.display());
    std::fs::write(ws.data().join("baton.toml"), toml).unwrap();
    let admin = baton(&ws.data(), &["token", "create", "--user", "admin", "--role", "admin"]);
    let tessa = ["--user", "tessa", "--role", "reviewer", "--github-login", "tessa-lumen"];
    baton(&ws.data(), &[&["token", "create"][..], &tessa, &["--ado-email", "tessa@lumenlabs.example"]].concat());
    baton(&ws.data(), &["token", "create", "--user", "vic", "--role", "viewer", "--github-login", "vic-lumen"]);
    let github = MockServer::start().await;
    mount_pulls(&github).await;
    let server = Server::start_env(
        &ws.data(),
        &[],
        &[
            ("BATON_GITHUB_API_URL", github.uri().as_str()),
            ("GITHUB_TOKEN", "ghp_remediation_token"),
            ("BATON_GITHUB_LOGIN", "lantern-baton"),
            ("BATON_ADO_API_URL", github.uri().as_str()),
            ("ADO_PAT", "ado_remediation_pat"),
            ("BATON_GITHUB_WEBHOOK_SECRET", SECRET),
            ("BATON_ADO_WEBHOOK_USER", "hooks"),
            ("BATON_ADO_WEBHOOK_PASSWORD", "hook-secret"),
        ],
    );
    Loop { ws, bare, server, admin, github, prompts, hold }
}

/// Pull requests: none for any branch yet, #43 when opened; comments and replies accepted.
async fn mount_pulls(mock: &MockServer) {
    Mock::given(method("GET"))
        .and(path_regex(r"^/repos/[^/]+/[^/]+/pulls$"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!([])))
        .mount(mock)
        .await;
    let created = fixture_json("github-api/pulls.create.201.json");
    Mock::given(method("POST"))
        .and(path_regex(r"^/repos/[^/]+/[^/]+/pulls$"))
        .respond_with(ResponseTemplate::new(201).set_body_json(&created["response"]["body"]))
        .mount(mock)
        .await;
    Mock::given(method("POST"))
        .and(path_regex(r"^/repos/[^/]+/[^/]+/issues/\d+/comments$"))
        .respond_with(ResponseTemplate::new(201).set_body_json(json!({"id": 1, "html_url": "https://github.com/c/1"})))
        .mount(mock)
        .await;
    Mock::given(method("POST"))
        .and(path_regex(r"^/repos/[^/]+/[^/]+/pulls/\d+/comments/\d+/replies$"))
        .respond_with(ResponseTemplate::new(201).set_body_json(json!({"id": 2, "html_url": "https://github.com/r/2"})))
        .mount(mock)
        .await;
}

/// The check runs of any commit: `build` passed, `lint` passed or failed (with its output
/// and one annotation); the combined status passed.
/// Work item 301's comments path (Azure DevOps REST 7.1).
const WORK_ITEM_COMMENTS: &str = "/lumenlabs/Lantern/_apis/wit/workItems/301/comments";

/// Serves work item 301's comments as Azure DevOps does: a POST is answered with the comment,
/// a GET (Baton's look for its own earlier reports) with none.
async fn mount_work_item_comments(mock: &MockServer) {
    Mock::given(method("POST"))
        .and(wiremock::matchers::path(WORK_ITEM_COMMENTS))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"id": 9, "text": "posted"})))
        .mount(mock)
        .await;
    Mock::given(method("GET"))
        .and(wiremock::matchers::path(WORK_ITEM_COMMENTS))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"totalCount": 0, "count": 0, "comments": []})))
        .mount(mock)
        .await;
}

/// Serves the line comments of review 237895671 on PR 43 (the fixture's), as GitHub's
/// "list review comments" does; returns the fixture.
async fn mount_review_comments(mock: &MockServer) -> serde_json::Value {
    let listed = fixture_json("github-api/pull-review-comments.list.200.json");
    Mock::given(method("GET"))
        .and(wiremock::matchers::path("/repos/lumen-labs/lantern/pulls/43/reviews/237895671/comments"))
        .respond_with(ResponseTemplate::new(200).set_body_json(&listed["response"]["body"]))
        .mount(mock)
        .await;
    listed
}

async fn mount_checks(mock: &MockServer, lint_fails: bool) {
    let mut runs = fixture_json("github-api/check-runs.list.200.json")["response"]["body"].clone();
    runs["check_runs"][1]["status"] = json!("completed");
    if lint_fails {
        runs["check_runs"][1]["conclusion"] = json!("failure");
        runs["check_runs"][1]["output"] = json!({"title": "Lint", "summary": "1 error", "text": "error: missing docs",
            "annotations_count": 1, "annotations_url": "https://api.github.com/repos/lumen-labs/lantern/check-runs/6/annotations"});
    } else {
        runs["check_runs"][1]["conclusion"] = json!("success");
        runs["check_runs"][1]["output"] = json!({"title": "Lint", "summary": "clean", "annotations_count": 0});
    }
    let mut status = fixture_json("github-api/commit-status.combined.200.json")["response"]["body"].clone();
    status["statuses"][0]["state"] = json!("success");
    status["state"] = json!("success");
    let annotations = fixture_json("github-api/check-run-annotations.200.json")["response"]["body"].clone();
    for (pattern, body) in [
        (r"^/repos/lumen-labs/lantern/commits/[0-9a-f]{40}/check-runs$", runs),
        (r"^/repos/lumen-labs/lantern/commits/[0-9a-f]{40}/status$", status),
        (r"^/repos/lumen-labs/lantern/check-runs/\d+/annotations$", annotations),
    ] {
        Mock::given(method("GET"))
            .and(path_regex(pattern))
            .respond_with(ResponseTemplate::new(200).set_body_json(body))
            .with_priority(if lint_fails { 2 } else { 1 })
            .mount(mock)
            .await;
    }
}

fn sign(body: &[u8]) -> String {
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

fn deliver(server: &Server, event: &str, body: &[u8], delivery: &str, signature: Option<String>) -> (u16, Value) {
    let mut extra =
        format!("X-GitHub-Event: {event}\r\nX-GitHub-Delivery: {delivery}\r\nContent-Type: application/json\r\n");
    if let Some(sig) = signature {
        extra.push_str(&format!("X-Hub-Signature-256: {sig}\r\n"));
    }
    let (status, _, text) = server.raw("POST", "/webhooks/github", &extra, std::str::from_utf8(body).unwrap());
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// A GitHub delivery: refused tampered and unsigned, applied once, a replay a duplicate; the
/// applied one's (status, answer).
fn deliver_checked(server: &Server, event: &str, payload: &Value, delivery: &str) -> (u16, Value) {
    let body = payload.to_string().into_bytes();
    let signature = sign(&body);
    let mut tampered = body.clone();
    let at = tampered.len() / 2;
    tampered[at] = if tampered[at] == b' ' { b'\t' } else { b' ' };
    let (status, answer) = deliver(server, event, &tampered, &format!("{delivery}-t"), Some(signature.clone()));
    assert_eq!(status, 401, "a tampered {event} delivery is refused: {answer}");
    let (status, answer) = deliver(server, event, &body, &format!("{delivery}-u"), None);
    assert_eq!(status, 401, "an unsigned {event} delivery is refused: {answer}");
    let applied = deliver(server, event, &body, delivery, Some(signature.clone()));
    let (status, again) = deliver(server, event, &body, delivery, Some(signature));
    assert_eq!((status, &again["duplicate"]), (200, &json!(true)), "a replayed {event} is a duplicate: {again}");
    applied
}

impl Loop {
    fn api(&self, verb: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        self.server.request_as(verb, path, body, Some(&self.admin))
    }

    fn execution(&self, task_id: &str) -> Value {
        let (status, body) = self.api("GET", &format!("/api/v1/executions/{task_id}"), None);
        assert_eq!(status, 200, "{body}");
        body
    }

    fn wait<T>(&self, what: &str, until: impl Fn() -> Option<T>) -> T {
        let start = Stopwatch::start();
        loop {
            if let Some(t) = until() {
                return t;
            }
            assert!(start.elapsed() < Duration::from_secs(90), "{what} never happened");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn card(&self, spec_id: i64) -> Value {
        let board = self.api("GET", "/api/v1/board", None).1;
        board["columns"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|c| c["cards"].as_array().unwrap())
            .find(|c| c["spec_id"] == spec_id)
            .cloned()
            .unwrap_or(Value::Null)
    }

    fn remote_tip(&self, branch: &str) -> String {
        let out =
            std::process::Command::new("git").arg("-C").arg(&self.bare).args(["rev-parse", branch]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Imports issue #7 by webhook, gives it a one-step plan for `dev`, fires it, waits for its
    /// changelist and opens its pull request: (spec id, task id, pushed head).
    async fn to_pull_request(&self) -> (i64, String, String) {
        let body = json!({"name": "p", "repo_path": self.ws.repo(), "agent_profile": "demo",
                          "forge_repo": "lumen-labs/lantern", "trigger_label": "bug"});
        let (status, answer) = self.api("POST", "/api/v1/projects", Some(body));
        assert_eq!(status, 201, "{answer}");
        let issue: Value = serde_json::from_slice(&fixture_bytes("github-webhooks/issues.opened.json")).unwrap();
        let (status, answer) = deliver(&self.server, "issues", issue.to_string().as_bytes(), "import-1", {
            Some(sign(issue.to_string().as_bytes()))
        });
        assert_eq!(status, 201, "{answer}");
        let id = answer["spec_id"].as_i64().unwrap();
        let (status, enriched) = self.api("POST", &format!("/api/v1/specs/{id}/enrich"), None);
        assert_eq!(status, 200, "{enriched}");
        let mut plan = enriched["plan"].clone();
        let mut phase = plan["phases"][0].clone();
        phase["steps"] =
            json!([{"step_id": "1.1", "agent_name": "dev", "task_description": "Fix the install command."}]);
        phase["gate"] = Value::Null;
        phase["approval_required"] = json!(false);
        plan["phases"] = json!([phase]);
        plan["risk_level"] = json!("LOW");
        let (status, answer) = self.api("PUT", &format!("/api/v1/specs/{id}/plan"), Some(plan));
        assert_eq!(status, 200, "{answer}");
        for (action, body) in [("review", Some(json!({"decision": "approve"}))), ("fire", None)] {
            let (status, answer) = self.api("POST", &format!("/api/v1/specs/{id}/{action}"), body);
            assert_eq!(status, 200, "{action}: {answer}");
        }
        let spec = |id: i64| self.api("GET", &format!("/api/v1/specs/{id}"), None).1;
        let task_id = spec(id)["task_id"].as_str().unwrap().to_string();
        self.wait("the changelist", || (spec(id)["stage"] == "changelist_review").then_some(()));
        let (status, merged) = self.api("POST", &format!("/api/v1/executions/{task_id}/merge"), None);
        assert_eq!(status, 200, "{merged}");
        let head = merged["pushed_sha"].as_str().unwrap().to_string();
        assert_eq!(spec(id)["stage"], "pr_open", "an open pull request is its own stage");
        (id, task_id, head)
    }

    /// The JSON bodies POSTed to the mock forge on a path ending in `suffix`, in order, once
    /// `ready` holds for them (waits up to 30 s; `what` names the wait in its failure).
    async fn posted(&self, suffix: &str, what: &str, ready: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let start = Stopwatch::start();
        loop {
            let received = self.github.received_requests().await.unwrap_or_default();
            let bodies: Vec<Value> = received
                .iter()
                .filter(|r| r.method.as_str() == "POST" && r.url.path().ends_with(suffix))
                .map(|r| serde_json::from_slice::<Value>(&r.body).unwrap())
                .collect();
            if ready(&bodies) {
                return bodies;
            }
            assert!(start.elapsed() < Duration::from_secs(30), "{what}: {bodies:?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The texts (`field` of each body) of the comments POSTed on a path ending in `suffix`,
    /// once at least `n` of them contain `containing`.
    async fn comments(&self, suffix: &str, field: &str, containing: &str, n: usize) -> Vec<String> {
        let texts = |bodies: &[Value]| -> Vec<String> {
            bodies.iter().map(|b| b[field].as_str().unwrap_or("").to_string()).collect()
        };
        let what = format!("fewer than {n} comments on {suffix} with {containing:?}");
        let bodies =
            self.posted(suffix, &what, |b| texts(b).iter().filter(|t| t.contains(containing)).count() >= n).await;
        texts(&bodies)
    }

    /// The comments posted on issue #7, once at least `n` with `containing` were.
    async fn issue_comments(&self, containing: &str, n: usize) -> Vec<String> {
        self.comments("/issues/7/comments", "body", containing, n).await
    }

    /// The comments posted on work item 301, once at least `n` with `containing` were.
    async fn work_item_comments(&self, containing: &str, n: usize) -> Vec<String> {
        self.comments(WORK_ITEM_COMMENTS, "text", containing, n).await
    }

    /// The first reply POSTed on a path ending in `suffix` (a review comment's or a thread's).
    async fn reply(&self, suffix: &str) -> Value {
        self.posted(suffix, &format!("no reply on {suffix}"), |b| !b.is_empty()).await.remove(0)
    }

    /// A `check_run` `completed` delivery for `sha` on the task's branch: its answer.
    fn check_run(&self, task_id: &str, sha: &str, delivery: &str) -> Value {
        let mut run: Value =
            serde_json::from_slice(&fixture_bytes("github-webhooks/check_run.completed.json")).unwrap();
        run["check_run"]["head_sha"] = json!(sha);
        run["check_run"]["check_suite"]["head_branch"] = json!(format!("baton/{task_id}"));
        let body = run.to_string();
        let (status, answer) =
            deliver(&self.server, "check_run", body.as_bytes(), delivery, Some(sign(body.as_bytes())));
        assert_eq!(status, 200, "{answer}");
        answer
    }

    /// Waits until the execution completed again with `rounds` rounds, the last one pushed:
    /// the pushed head.
    fn round_pushed(&self, task_id: &str, rounds: usize) -> String {
        self.wait(&format!("round {rounds} pushed and completed"), || {
            let v = self.execution(task_id);
            let list = v["remediation"]["rounds"].as_array().cloned().unwrap_or_default();
            let pushed = list.get(rounds - 1)?["pushed_sha"].as_str()?.to_string();
            (list.len() == rounds && v["status"] == "complete").then_some(pushed)
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_request_goes_from_a_failed_check_and_a_review_to_merged_with_agent_fixes() {
    let s = start("[ci]\nmax_fix_rounds = 2\n").await;
    mount_checks(&s.github, true).await;
    let (id, task, head) = s.to_pull_request().await;
    let opened = s.issue_comments("Baton opened the pull request", 1).await;
    assert_eq!(opened.iter().filter(|t| t.contains("Baton opened the pull request")).count(), 1, "{opened:?}");

    // A check fails on the pull request's head: a CI fix round starts.
    let answer = s.check_run(&task, &head, "run-1");
    assert_eq!(answer["pull_requests"][0]["outcome"], "started", "{answer}");
    assert_eq!(answer["pull_requests"][0]["agent"], "dev", "the agent that made the change fixes it: {answer}");
    let fixed = s.round_pushed(&task, 1);
    assert_ne!(fixed, head);
    assert_eq!(s.remote_tip(&format!("baton/{task}")), fixed, "the fix is pushed to the same branch");
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(&s.bare)
        .args(["merge-base", "--is-ancestor", &head, &fixed])
        .status()
        .unwrap();
    assert!(out.success(), "the branch moved forward: never forced");
    let prompts = std::fs::read_to_string(&s.prompts).unwrap();
    assert!(prompts.contains("CI fix round 1 of 2") && prompts.contains("Check `lint` failed"), "{prompts}");
    assert!(prompts.contains("missing documentation for a function"), "annotations reach the prompt: {prompts}");

    // The checks pass on the new head: nothing to fix.
    mount_checks(&s.github, false).await;
    let answer = s.check_run(&task, &fixed, "run-2");
    assert_eq!(answer["pull_requests"][0]["outcome"], "ignored", "{answer}");
    assert!(answer["pull_requests"][0]["reason"].as_str().unwrap().contains("no required check"), "{answer}");

    // A viewer's comment, and Baton's own, start nothing; the reviewer's starts a review round.
    let mut comment = fixture_json("github-webhooks/pull_request_review_comment.created.json");
    comment["pull_request"]["head"]["ref"] = json!(format!("baton/{task}"));
    comment["pull_request"]["head"]["sha"] = json!(fixed);
    for (login, delivery) in [("vic-lumen", "c-viewer"), ("lantern-baton", "c-own"), ("stranger", "c-unmapped")] {
        let mut other = comment.clone();
        other["comment"]["user"]["login"] = json!(login);
        let (status, answer) = deliver_checked(&s.server, "pull_request_review_comment", &other, delivery);
        assert_eq!((status, answer.get("ignored").is_some()), (202, true), "{login}: {answer}");
    }
    let (status, answer) = deliver_checked(&s.server, "pull_request_review_comment", &comment, "c-reviewer");
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["outcome"], "started", "{answer}");
    let addressed = s.round_pushed(&task, 2);
    let prompts = std::fs::read_to_string(&s.prompts).unwrap();
    assert!(prompts.contains("Comment by tessa-lumen on `README.md` line 1"), "{prompts}");
    assert!(prompts.contains("Say `cargo install lantern` here"), "{prompts}");
    let reply = s.reply("/pulls/43/comments/284312630/replies").await;
    assert!(reply["body"].as_str().unwrap().contains(&addressed), "the reply names the commit: {reply}");

    // The reviewer approves: an approval asks for no change and starts nothing.
    let mut approval = fixture_json("github-webhooks/pull_request_review.submitted.json");
    approval["pull_request"]["head"]["ref"] = json!(format!("baton/{task}"));
    approval["pull_request"]["head"]["sha"] = json!(addressed);
    approval["review"]["id"] = json!(237895999);
    approval["review"]["state"] = json!("approved");
    approval["review"]["body"] = json!("Looks good now.");
    let (status, answer) = deliver_checked(&s.server, "pull_request_review", &approval, "approved-1");
    assert_eq!(status, 202, "{answer}");
    assert!(answer["ignored"].as_str().unwrap().contains("asks for no change"), "{answer}");

    // The card shows the rounds; the pull request is merged; the spec is merged.
    let card = s.card(id);
    assert_eq!(card["remediation"], json!({"ci_rounds": 1, "review_rounds": 1, "parked": ""}), "{card}");
    let mut closed = fixture_json("github-webhooks/pull_request.closed.merged.json");
    closed["pull_request"]["head"]["ref"] = json!(format!("baton/{task}"));
    closed["pull_request"]["html_url"] = json!("https://github.com/lumen-labs/lantern/pull/43");
    closed["repository"]["full_name"] = json!("lumen-labs/lantern");
    let body = closed.to_string();
    let (status, answer) = deliver(&s.server, "pull_request", body.as_bytes(), "merged-1", Some(sign(body.as_bytes())));
    assert_eq!((status, &answer["status"]), (200, &json!("merged")), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fix_rounds_used_up_park_and_ask_a_human_on_the_issue_and_the_card() {
    let s = start("[ci]\nmax_fix_rounds = 1\n").await;
    mount_checks(&s.github, true).await;
    let (id, task, head) = s.to_pull_request().await;
    let answer = s.check_run(&task, &head, "run-1");
    assert_eq!(answer["pull_requests"][0]["outcome"], "started", "{answer}");
    let fixed = s.round_pushed(&task, 1);
    // The fix did not help: the only round is used, Baton parks.
    let answer = s.check_run(&task, &fixed, "run-2");
    assert_eq!(answer["pull_requests"][0]["outcome"], "parked", "{answer}");
    let texts = s.issue_comments("needs a human", 1).await;
    let asked = texts.iter().find(|t| t.contains("needs a human")).unwrap();
    assert!(asked.contains("1 of 1 CI fix rounds are used"), "{asked}");
    let card = s.wait("the parked card", || {
        let card = s.card(id);
        (card["remediation"]["parked"].as_str().is_some_and(|p| !p.is_empty())).then_some(card)
    });
    assert!(card["waits_for"].as_str().unwrap().starts_with("a human: 1 of 1 CI fix rounds"), "{card}");
    let page = s.server.raw("GET", "/", &format!("Authorization: Bearer {}\r\n", s.admin), "").2;
    assert!(page.contains("stopped, a human decides"), "the board says so");
    // Nothing more starts: another failure is ignored, a reviewer's comment too.
    let answer = s.check_run(&task, &fixed, "run-3");
    assert_eq!(answer["pull_requests"][0]["outcome"], "ignored", "{answer}");
    assert_eq!(s.execution(&task)["remediation"]["rounds"].as_array().unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_events_are_refused_tampered_or_unsigned_and_replays_are_duplicates() {
    let s = start("").await;
    // A changes-requested review on a branch that is no Baton execution's: authenticated,
    // answered, and its replay a duplicate.
    let review = fixture_json("github-webhooks/pull_request_review.submitted.json");
    let (status, answer) = deliver_checked(&s.server, "pull_request_review", &review, "review-1");
    assert_eq!(status, 202, "{answer}");
    assert!(answer["ignored"].as_str().unwrap().contains("no spec was fired as t-0000"), "{answer}");
    // Azure DevOps: wrong and missing credentials refused, a replay a duplicate.
    // By a user no Baton user maps.
    let body = String::from_utf8(fixture_bytes("azure-devops/hooks/git.pullrequest.comment.json"))
        .unwrap()
        .replace("tessa@lumenlabs.example", "stranger@lumenlabs.example");
    let post = |auth: &str| {
        let extra = format!("{auth}Content-Type: application/json\r\n");
        let (status, _, text) = s.server.raw("POST", "/webhooks/ado", &extra, &body);
        (status, serde_json::from_str::<Value>(&text).unwrap_or(Value::Null))
    };
    assert_eq!(post(ADO_WRONG).0, 401);
    assert_eq!(post("").0, 401);
    let (status, answer) = post(ADO_AUTH);
    assert_eq!(status, 202, "{answer}");
    assert!(
        answer["ignored"].as_str().unwrap().contains("not mapped"),
        "an unmapped ADO user starts nothing: {answer}"
    );
    let (status, again) = post(ADO_AUTH);
    assert_eq!((status, &again["duplicate"]), (200, &json!(true)), "{again}");
}

/// Azure DevOps answers for `lumenlabs/Lantern` (repository `Lantern`): no pull request for any
/// branch yet, pull request 41 when opened, thread replies accepted.
async fn mount_ado(mock: &MockServer) {
    let prs = "/lumenlabs/Lantern/_apis/git/repositories/Lantern/pullrequests";
    Mock::given(method("GET"))
        .and(wiremock::matchers::path(prs))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"value": [], "count": 0})))
        .mount(mock)
        .await;
    let pr = json!({"pullRequestId": 41, "status": "active",
        "repository": {"webUrl": "https://dev.azure.com/lumenlabs/Lantern/_git/Lantern"}});
    Mock::given(method("POST"))
        .and(wiremock::matchers::path(prs))
        .respond_with(ResponseTemplate::new(201).set_body_json(pr))
        .mount(mock)
        .await;
    Mock::given(method("POST"))
        .and(path_regex(r"^/lumenlabs/Lantern/_apis/git/repositories/Lantern/pullRequests/41/threads/\d+/comments$"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"id": 2, "content": "posted"})))
        .mount(mock)
        .await;
}

/// The builds of the branch: `Lantern-CI` at `sha`, failed or succeeded; the commit's statuses
/// (one succeeded).
async fn mount_builds(mock: &MockServer, branch: &str, sha: &str, failed: bool, priority: u8) {
    let mut builds = fixture_json("azure-devops/rest/builds.list.json")["response"]["body"].clone();
    builds["value"][0]["status"] = json!("completed");
    builds["value"][0]["result"] = json!(if failed { "failed" } else { "succeeded" });
    builds["value"][0]["sourceVersion"] = json!(sha);
    builds["value"][0]["sourceBranch"] = json!(format!("refs/heads/{branch}"));
    let statuses = fixture_json("azure-devops/rest/commit-statuses.list.json")["response"]["body"].clone();
    Mock::given(method("GET"))
        .and(wiremock::matchers::path("/lumenlabs/Lantern/_apis/build/builds"))
        .respond_with(ResponseTemplate::new(200).set_body_json(builds))
        .with_priority(priority)
        .mount(mock)
        .await;
    Mock::given(method("GET"))
        .and(path_regex(r"^/lumenlabs/Lantern/_apis/git/repositories/Lantern/commits/[0-9a-f]{40}/statuses$"))
        .respond_with(ResponseTemplate::new(200).set_body_json(statuses))
        .with_priority(priority)
        .mount(mock)
        .await;
}

fn ado_post(s: &Loop, payload: &Value) -> Value {
    let extra = format!("{ADO_AUTH}Content-Type: application/json\r\n");
    let (status, _, text) = s.server.raw("POST", "/webhooks/ado", &extra, &payload.to_string());
    let answer: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    assert_eq!(status, 200, "{answer}");
    answer
}

/// Registers an Azure DevOps project, fires a one-step spec for `dev` — written on the board, or
/// imported from work item 301 by its `workitem.created` hook — and opens its pull request (41):
/// (spec id, task id, pushed head).
async fn ado_pull_request(s: &Loop, from_work_item: bool) -> (i64, String, String) {
    mount_ado(&s.github).await;
    let body =
        json!({"name": "p", "repo_path": s.ws.repo(), "agent_profile": "demo", "forge_repo": "ado:lumenlabs/Lantern"});
    let (status, answer) = s.api("POST", "/api/v1/projects", Some(body));
    assert_eq!(status, 201, "{answer}");
    let spec = if from_work_item {
        let body = String::from_utf8(fixture_bytes("azure-devops/hooks/workitem.created.json")).unwrap();
        let extra = format!("{ADO_AUTH}Content-Type: application/json\r\n");
        let (status, _, text) = s.server.raw("POST", "/webhooks/ado", &extra, &body);
        assert_eq!(status, 201, "{text}");
        serde_json::from_str::<Value>(&text).unwrap()
    } else {
        let (status, spec) =
            s.api("POST", "/api/v1/specs", Some(json!({"project": "p", "title": "Fix the README", "body": "Fix it."})));
        assert_eq!(status, 201, "{spec}");
        spec
    };
    let id = spec["spec_id"].as_i64().unwrap();
    let (status, enriched) = s.api("POST", &format!("/api/v1/specs/{id}/enrich"), None);
    assert_eq!(status, 200, "{enriched}");
    let mut plan = enriched["plan"].clone();
    let mut phase = plan["phases"][0].clone();
    phase["steps"] = json!([{"step_id": "1.1", "agent_name": "dev", "task_description": "Fix the README."}]);
    phase["gate"] = Value::Null;
    phase["approval_required"] = json!(false);
    plan["phases"] = json!([phase]);
    plan["risk_level"] = json!("LOW");
    assert_eq!(s.api("PUT", &format!("/api/v1/specs/{id}/plan"), Some(plan)).0, 200);
    for (action, body) in [("review", Some(json!({"decision": "approve"}))), ("fire", None)] {
        let (status, answer) = s.api("POST", &format!("/api/v1/specs/{id}/{action}"), body);
        assert_eq!(status, 200, "{action}: {answer}");
    }
    let spec = |id: i64| s.api("GET", &format!("/api/v1/specs/{id}"), None).1;
    let task = spec(id)["task_id"].as_str().unwrap().to_string();
    s.wait("the changelist", || (spec(id)["stage"] == "changelist_review").then_some(()));
    let (status, merged) = s.api("POST", &format!("/api/v1/executions/{task}/merge"), None);
    assert_eq!(status, 200, "{merged}");
    let head = merged["pushed_sha"].as_str().unwrap().to_string();
    assert_eq!(spec(id)["stage"], "pr_open");
    (id, task, head)
}

/// A `build.complete` hook for `sha` on `branch`, delivered as `id`: the answer.
fn build_done(s: &Loop, branch: &str, sha: &str, id: &str) -> Value {
    let mut build = fixture_json("azure-devops/hooks/build.complete.json");
    build["id"] = json!(id);
    build["resource"]["sourceGetVersion"] = json!(format!("LG:refs/heads/{branch}:{sha}"));
    ado_post(s, &build)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn azure_devops_fix_rounds_used_up_park_ask_a_human_on_the_work_item_and_the_card_says_so() {
    let s = start("[ci]\nmax_fix_rounds = 1\n").await;
    mount_work_item_comments(&s.github).await;
    let (id, task, head) = ado_pull_request(&s, true).await;
    let branch = format!("baton/{task}");
    mount_builds(&s.github, &branch, &head, true, 3).await;
    let answer = build_done(&s, &branch, &head, "b-1");
    assert_eq!(answer["pull_requests"][0]["outcome"], "started", "{answer}");
    let fixed = s.round_pushed(&task, 1);
    mount_builds(&s.github, &branch, &fixed, true, 2).await;
    let answer = build_done(&s, &branch, &fixed, "b-2");
    assert_eq!(answer["pull_requests"][0]["outcome"], "parked", "{answer}");
    let card = s.wait("the parked card", || {
        let card = s.card(id);
        (card["remediation"]["parked"].as_str().is_some_and(|p| !p.is_empty())).then_some(card)
    });
    assert!(card["waits_for"].as_str().unwrap().starts_with("a human: 1 of 1 CI fix rounds"), "{card}");
    // The source work item is asked, once.
    let asked: Vec<String> =
        s.work_item_comments("needs a human", 1).await.into_iter().filter(|t| t.contains("needs a human")).collect();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert!(asked[0].contains("1 of 1 CI fix rounds are used"), "{}", asked[0]);
    assert!(asked[0].contains("pullrequest/41"), "it names the pull request: {}", asked[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_azure_devops_pull_request_goes_from_a_failed_build_and_a_comment_to_merged() {
    let s = start("[ci]\nmax_fix_rounds = 2\n").await;
    mount_work_item_comments(&s.github).await;
    let (_id, task, head) = ado_pull_request(&s, true).await;
    let branch = format!("baton/{task}");
    // The work item hears of the pull request when it opens.
    const OPENED: &str = "Baton opened the pull request";
    s.work_item_comments(OPENED, 1).await;

    // The build of the head fails: a CI fix round, with the tail of the failed task's log.
    mount_builds(&s.github, &branch, &head, true, 3).await;
    let timeline = fixture_json("azure-devops/rest/build-timeline.get.json")["response"]["body"].clone();
    Mock::given(method("GET"))
        .and(wiremock::matchers::path("/lumenlabs/Lantern/_apis/build/builds/812/timeline"))
        .respond_with(ResponseTemplate::new(200).set_body_json(timeline))
        .mount(&s.github)
        .await;
    let log = fixture_json("azure-devops/rest/build-log.get.json")["response"]["body"].as_str().unwrap().to_string();
    Mock::given(method("GET"))
        .and(wiremock::matchers::path("/lumenlabs/Lantern/_apis/build/builds/812/logs/9"))
        .respond_with(ResponseTemplate::new(200).insert_header("content-type", "text/plain").set_body_string(log))
        .mount(&s.github)
        .await;
    let mut build = fixture_json("azure-devops/hooks/build.complete.json");
    build["id"] = json!("b-1");
    build["resource"]["sourceGetVersion"] = json!(format!("LG:refs/heads/{branch}:{head}"));
    let answer = ado_post(&s, &build);
    assert_eq!(answer["pull_requests"][0]["outcome"], "started", "{answer}");
    let fixed = s.round_pushed(&task, 1);
    assert_eq!(s.remote_tip(&branch), fixed);
    let prompts = std::fs::read_to_string(&s.prompts).unwrap();
    assert!(prompts.contains("Check `Lantern-CI` failed"), "{prompts}");
    assert!(prompts.contains("task `cargo test` failed; the end of its log:"), "{prompts}");
    assert!(prompts.contains("assertion `left == right` failed: README must say cargo install lantern"), "{prompts}");
    assert!(prompts.contains("##[error]Bash exited with code '101'."), "the log's last lines: {prompts}");
    assert!(!prompts.contains("Starting: cargo test"), "only the tail: {prompts}");

    // The fix's build passes; the reviewer's comment starts a review round, answered on its thread.
    mount_builds(&s.github, &branch, &fixed, false, 2).await;
    build["id"] = json!("b-2");
    build["resource"]["sourceGetVersion"] = json!(format!("LG:refs/heads/{branch}:{fixed}"));
    let answer = ado_post(&s, &build);
    assert_eq!(answer["pull_requests"][0]["outcome"], "ignored", "{answer}");
    let thread = fixture_json("azure-devops/rest/pullrequest-thread.get.json")["response"]["body"].clone();
    Mock::given(method("GET"))
        .and(wiremock::matchers::path("/lumenlabs/Lantern/_apis/git/repositories/Lantern/pullRequests/41/threads/5"))
        .respond_with(ResponseTemplate::new(200).set_body_json(thread))
        .mount(&s.github)
        .await;
    let mut comment = fixture_json("azure-devops/hooks/git.pullrequest.comment.json");
    comment["id"] = json!("c-1");
    comment["resource"]["pullRequest"]["sourceRefName"] = json!(format!("refs/heads/{branch}"));
    comment["resource"]["pullRequest"]["lastMergeSourceCommit"]["commitId"] = json!(fixed);
    let answer = ado_post(&s, &comment);
    assert_eq!(answer["outcome"], "started", "{answer}");
    let addressed = s.round_pushed(&task, 2);
    let prompts = std::fs::read_to_string(&s.prompts).unwrap();
    assert!(
        prompts.contains("Comment by tessa@lumenlabs.example on `README.md` line 1"),
        "the thread's file and line (threadContext) reach the prompt: {prompts}"
    );
    let reply = s.reply("/pullRequests/41/threads/5/comments").await;
    assert!(reply["content"].as_str().unwrap().contains(&addressed), "{reply}");

    let done = json!({"id": "m-1", "eventType": "git.pullrequest.merged", "resource": {
        "pullRequestId": 41, "status": "completed", "mergeStatus": "succeeded",
        "sourceRefName": format!("refs/heads/{branch}"),
        "repository": {"name": "Lantern", "project": {"name": "Lantern"},
                       "webUrl": "https://dev.azure.com/lumenlabs/Lantern/_git/Lantern"}}});
    let answer = ado_post(&s, &done);
    assert_eq!(answer["status"], "merged", "{answer}");
    let opened = s.work_item_comments(OPENED, 1).await.iter().filter(|t| t.contains(OPENED)).count();
    assert_eq!(opened, 1, "the opened pull request is reported once, through the rounds and the merge");
}

/// The prompts the fake agent got, in order (the change's, then each round's).
fn prompts_of(s: &Loop) -> Vec<String> {
    let log = std::fs::read_to_string(&s.prompts).unwrap();
    log.split("--- end of prompt\n").filter(|p| !p.trim().is_empty()).map(str::to_string).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_check_no_webhook_announced_is_polled_and_a_webhook_and_a_poll_start_one_round_per_head() {
    let s = start("[ci]\nmax_fix_rounds = 3\npr_poll_secs = 1\npr_max_poll_secs = 2\n").await;
    mount_checks(&s.github, true).await;
    let (_id, task, head) = s.to_pull_request().await;
    // No webhook at all: the poll reads the failed check of the head and starts a round.
    let fixed = s.round_pushed(&task, 1);
    assert_eq!(s.execution(&task)["remediation"]["rounds"][0]["sha"], head.as_str());
    // The fix's head fails too; a webhook says so while the poll reads it as well.
    let answer = s.check_run(&task, &fixed, "run-1");
    let outcome = answer["pull_requests"][0]["outcome"].as_str().unwrap().to_string();
    assert!(outcome == "started" || outcome == "ignored", "{answer}");
    // The rounds go on by polling until the bound parks: one round per head, never two.
    let v = s.wait("the parked loop", || {
        let v = s.execution(&task);
        v["remediation"]["parked"].as_str().is_some_and(|p| !p.is_empty()).then_some(v)
    });
    let shas: Vec<&str> =
        v["remediation"]["rounds"].as_array().unwrap().iter().map(|r| r["sha"].as_str().unwrap()).collect();
    assert_eq!(shas.len(), 3, "{v}");
    assert_eq!(&shas[..2], [head.as_str(), fixed.as_str()], "{v}");
    assert!(!shas[..2].contains(&shas[2]), "each round fixes a head of its own: {shas:?}");
    assert!(v["remediation"]["parked"].as_str().unwrap().contains("3 of 3 CI fix rounds"), "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_review_brings_its_line_comments_and_comments_during_a_round_wait_for_the_next() {
    let s = start("[ci]\npr_poll_secs = 1\n").await;
    mount_checks(&s.github, false).await;
    mount_review_comments(&s.github).await;
    let (_id, task, head) = s.to_pull_request().await;

    // The reviewer requests changes with a review whose line comments come from the API.
    std::fs::write(&s.hold, "").unwrap();
    let mut review = fixture_json("github-webhooks/pull_request_review.submitted.json");
    review["pull_request"]["head"]["ref"] = json!(format!("baton/{task}"));
    review["pull_request"]["head"]["sha"] = json!(head);
    let (status, answer) = deliver_checked(&s.server, "pull_request_review", &review, "review-1");
    assert_eq!((status, &answer["outcome"]), (200, &json!("started")), "{answer}");

    // While the round runs: GitHub's own delivery of one of the review's line comments asks
    // nothing new; another comment waits, journaled, for the next round.
    let mut comment = fixture_json("github-webhooks/pull_request_review_comment.created.json");
    comment["pull_request"]["head"]["ref"] = json!(format!("baton/{task}"));
    comment["pull_request"]["head"]["sha"] = json!(head);
    comment["comment"]["id"] = json!(284312701);
    let body = comment.to_string();
    let (status, answer) =
        deliver(&s.server, "pull_request_review_comment", body.as_bytes(), "c-1", Some(sign(body.as_bytes())));
    assert_eq!(status, 202, "a line comment of the review is not asked twice: {answer}");
    comment["comment"]["id"] = json!(284312999);
    comment["comment"]["body"] = json!("Also mention `lantern --help` in the README.");
    let body = comment.to_string();
    let (status, answer) =
        deliver(&s.server, "pull_request_review_comment", body.as_bytes(), "c-2", Some(sign(body.as_bytes())));
    assert_eq!((status, &answer["outcome"], &answer["waiting"]), (200, &json!("queued"), &json!(1)), "{answer}");
    let queued = s.execution(&task)["remediation"]["queued"].clone();
    assert_eq!(queued[0]["id"], "284312999", "the waiting comment is in the journal: {queued}");

    // The round finishes and pushes; the next round answers the waiting comment.
    std::fs::remove_file(&s.hold).unwrap();
    let second = s.round_pushed(&task, 2);
    let v = s.execution(&task);
    assert!(v["remediation"].get("queued").is_none(), "the queue is empty: {v}");
    let rounds = v["remediation"]["rounds"].as_array().unwrap();
    assert_eq!((rounds[0]["cause"].as_str(), rounds[1]["cause"].as_str()), (Some("review"), Some("review")));
    let first = rounds[0]["pushed_sha"].as_str().unwrap().to_string();
    let prompts = prompts_of(&s);
    assert_eq!(prompts.len(), 3, "{prompts:?}");
    let round1 = &prompts[1];
    assert!(round1.contains("Please drop `--locked`"), "the review's body: {round1}");
    assert!(round1.contains("Comment by tessa-lumen on `src/lib.rs` line 1"), "{round1}");
    assert!(round1.contains("Document `f`: what does it return?") && round1.contains("+pub fn f() {}"), "{round1}");
    assert!(round1.contains("Comment by tessa-lumen on `README.md` line 1") && round1.contains("+hello, lantern"));
    assert!(!round1.contains("lantern --help"), "{round1}");
    let round2 = &prompts[2];
    assert!(round2.contains("Review round 2 of 2") && round2.contains("lantern --help"), "{round2}");
    assert!(!round2.contains("Document `f`"), "{round2}");

    // Each line comment is answered with the commit of its round.
    let start = Stopwatch::start();
    loop {
        let received = s.github.received_requests().await.unwrap_or_default();
        let reply = |id: &str| {
            received
                .iter()
                .find(|r| r.url.path().ends_with(&format!("/pulls/43/comments/{id}/replies")))
                .map(|r| serde_json::from_slice::<Value>(&r.body).unwrap()["body"].as_str().unwrap().to_string())
        };
        if let (Some(a), Some(b), Some(c)) = (reply("284312701"), reply("284312702"), reply("284312999")) {
            assert!(a.contains(&first) && b.contains(&first), "{a} / {b}");
            assert!(c.contains(&second), "{c}");
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "not every comment was answered");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

impl Loop {
    /// Someone else pushes a commit adding `file` to `branch` of the bare remote (from a clone
    /// of their own): the new remote tip.
    fn push_from_elsewhere(&self, branch: &str, file: &str, text: &str) -> String {
        let elsewhere = self.ws.tmp.path().join(format!("elsewhere-{file}"));
        let git = |dir: &std::path::Path, args: &[&str]| {
            let out = std::process::Command::new("git")
                .arg("-C")
                .arg(dir)
                .args(["-c", "user.name=Noor Lumen", "-c", "user.email=noor@lumenlabs.example"])
                .args(args)
                .output()
                .unwrap();
            assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        };
        git(
            self.ws.tmp.path(),
            &["clone", "-q", "-b", branch, self.bare.to_str().unwrap(), elsewhere.to_str().unwrap()],
        );
        std::fs::write(elsewhere.join(file), text).unwrap();
        git(&elsewhere, &["add", file]);
        git(&elsewhere, &["commit", "-q", "-m", &format!("Add {file}")]);
        git(&elsewhere, &["push", "-q", "origin", branch]);
        git(&elsewhere, &["rev-parse", "HEAD"])
    }

    /// Waits until the execution's round `n` runs (its fix step dispatched).
    fn round_running(&self, task_id: &str, n: usize) {
        self.wait(&format!("round {n} running"), || {
            let v = self.execution(task_id);
            let rounds = v["remediation"]["rounds"].as_array().map_or(0, Vec::len);
            (rounds == n && v["status"] == "running").then_some(())
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fix_whose_push_is_refused_is_replayed_onto_what_someone_pushed_parks_on_a_conflict_and_is_pushed_once_resolved(
) {
    let s = start("[ci]\nmax_fix_rounds = 2\n").await;
    mount_checks(&s.github, true).await;
    let (id, task, head) = s.to_pull_request().await;
    let branch = format!("baton/{task}");

    // Someone pushes to the pull request's branch while the round runs: Baton's push is
    // refused, it fetches, replays its fix onto their commit and pushes again (never forced).
    std::fs::write(&s.hold, "").unwrap();
    let answer = s.check_run(&task, &head, "run-1");
    assert_eq!(answer["pull_requests"][0]["outcome"], "started", "{answer}");
    s.round_running(&task, 1);
    let theirs = s.push_from_elsewhere(&branch, "NOTES.md", "a note\n");
    std::fs::remove_file(&s.hold).unwrap();
    let fixed = s.round_pushed(&task, 1);
    assert_eq!(s.remote_tip(&branch), fixed);
    assert_eq!(s.remote_tip(&format!("{fixed}^")), theirs, "the fix sits on their commit");
    let show = std::process::Command::new("git")
        .arg("-C")
        .arg(&s.bare)
        .args(["show", "--name-only", "--format=", &fixed])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&show.stdout).trim(), "fix-1.txt", "the fix's own change, replayed");

    // The next round's fix conflicts with what someone pushed meanwhile: nothing is pushed,
    // and the execution parks for a human with the reason, its fix kept on the local branch.
    std::fs::write(&s.hold, "").unwrap();
    let answer = s.check_run(&task, &fixed, "run-2");
    assert_eq!(answer["pull_requests"][0]["outcome"], "started", "{answer}");
    s.round_running(&task, 2);
    let conflicting = s.push_from_elsewhere(&branch, "fix-2.txt", "their change\n");
    std::fs::remove_file(&s.hold).unwrap();
    let v = s.wait("the parked execution", || {
        let v = s.execution(&task);
        v["parked"].as_str().is_some_and(|p| !p.is_empty()).then_some(v)
    });
    let reason = v["parked"].as_str().unwrap();
    assert!(reason.contains("conflicts with commits someone else pushed") && reason.contains("fix-2.txt"), "{reason}");
    assert!(reason.contains("resolve the conflict and resume"), "it says what the human does: {reason}");
    assert_eq!(v["status"], "running", "the round is not over: its fix is not pushed yet: {v}");
    assert!(v["remediation"]["rounds"][1].get("pushed_sha").is_none(), "{v}");
    assert!(v["remediation"].get("parked").is_none(), "the loop itself is not stopped: {v}");
    assert_eq!(s.remote_tip(&branch), conflicting, "their commit stays the branch's tip: never forced");
    let card = s.card(id);
    assert!(card["waits_for"].as_str().unwrap().starts_with("a resume (parked: the fix of ci round 2"), "{card}");
    let texts = s.issue_comments("could not push its fix", 1).await;
    let asked = texts.iter().find(|t| t.contains("could not push its fix")).unwrap();
    assert!(asked.contains("needs a human") && asked.contains("resolve the conflict and resume"), "{asked}");

    // The human merges their commit into the local feature branch, resolving the conflict, and
    // resumes: the fix reaches the pull request's branch (a fast-forward, never forced) and the
    // round completes.
    let resolve = s.ws.tmp.path().join("resolve");
    let git = |dir: &std::path::Path, args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["-c", "user.name=Lead Lumen", "-c", "user.email=lead@lumenlabs.example"])
            .args(args)
            .output()
            .unwrap()
    };
    let repo = s.ws.repo();
    assert!(git(&repo, &["fetch", "-q", "origin"]).status.success());
    let out = git(&repo, &["worktree", "add", "-q", resolve.to_str().unwrap(), &branch]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let merged = git(&resolve, &["merge", "--no-edit", &format!("origin/{branch}")]);
    assert!(!merged.status.success(), "their commit conflicts with the fix");
    std::fs::write(resolve.join("fix-2.txt"), "change 2\ntheir change\n").unwrap();
    assert!(git(&resolve, &["add", "fix-2.txt"]).status.success());
    assert!(git(&resolve, &["commit", "-q", "--no-edit"]).status.success());
    let resolved = String::from_utf8_lossy(&git(&resolve, &["rev-parse", "HEAD"]).stdout).trim().to_string();
    assert!(git(&repo, &["worktree", "remove", resolve.to_str().unwrap()]).status.success());
    let (status, answer) = s.api("POST", &format!("/api/v1/executions/{task}/resume"), None);
    assert_eq!(status, 200, "{answer}");
    let pushed = s.round_pushed(&task, 2);
    assert_eq!(pushed, resolved, "the resolved fix is what was pushed");
    assert_eq!(s.remote_tip(&branch), resolved, "the fix reached the pull request's branch");
    let ancestor = |a: &str, b: &str| git(&s.bare, &["merge-base", "--is-ancestor", a, b]).status.success();
    assert!(ancestor(&conflicting, &resolved), "their commit is kept: never forced");
    let v = s.execution(&task);
    assert!(v.get("parked").is_none(), "{v}");
    assert_eq!(v["status"], "complete", "{v}");
}

/// The remediation service of one process over the data directory `data`, reading `clock`.
async fn remediation_over(
    data: &std::path::Path,
    clock: &baton::clock::Clock,
) -> (baton::runtime::executions::Executions, baton::runtime::remediation::Remediation) {
    let dir = baton::runtime::config::DataDir::open(data).unwrap();
    let execs = baton::runtime::executions::Executions::open(dir.clone()).await.unwrap();
    let key = baton::runtime::auth::ServerKey::load_or_create(&dir).unwrap();
    let ops = baton::runtime::ops::Ops::new(execs.clone(), None, key, clock.clone());
    let forges = baton::runtime::forge::Forges::new(
        baton::forge::ForgeSettings::default(),
        baton::forge::RetryPolicy::default(),
    )
    .unwrap();
    let service = baton::runtime::remediation::Remediation::new(execs.clone(), ops, forges);
    (execs, service)
}

#[tokio::test]
async fn the_pull_request_poll_schedule_is_kept_in_the_store_and_survives_a_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("baton.toml"), "[ci]\npr_poll_secs = 10\npr_max_poll_secs = 40\n").unwrap();
    let t0 = chrono::DateTime::parse_from_rfc3339("2026-12-01T10:00:00Z").unwrap().with_timezone(&chrono::Utc);
    let clock = baton::clock::Clock::manual(t0);
    let at = |secs: i64| (t0 + chrono::Duration::seconds(secs)).to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let sha = "0123456789abcdef0123456789abcdef01234567";

    // One process sees the open pull request's head: its first poll is 10 s away.
    let (execs, service) = remediation_over(&data, &clock).await;
    let plan = baton::model::plan::MachinePlan::from_json(
        r#"{"task_id": "t-poll", "task_summary": "s", "phases": [{"phase_id": 1, "name": "Build",
            "steps": [{"step_id": "1.1", "agent_name": "dev", "task_description": "build it"}]}]}"#,
    )
    .unwrap();
    execs.create(plan).await.unwrap();
    execs
        .store()
        .put_merge(&baton::store::MergeRow {
            task_id: "t-poll".into(),
            spec_id: None,
            forge_repo: "lumen-labs/lantern".into(),
            branch: "baton/t-poll".into(),
            base_branch: "main".into(),
            state: "opened".into(),
            pushed_sha: sha.into(),
            pr_number: Some(43),
            pr_url: "https://github.com/lumen-labs/lantern/pull/43".into(),
            error: String::new(),
            updated_at: at(0),
        })
        .await
        .unwrap();
    service.pass().await.unwrap();
    let polls = execs.store().pr_polls().await.unwrap();
    assert_eq!(polls.len(), 1);
    assert_eq!((polls[0].sha.as_str(), polls[0].interval_ms, polls[0].next_at.clone()), (sha, 10_000, at(10)));
    drop((execs, service));

    // The process ends; 10 s later another one (a restart, another replica) opens the store:
    // the poll is due now (not 10 s after it first sees the head), and the next is 20 s away.
    clock.advance(chrono::Duration::seconds(10));
    let (execs, service) = remediation_over(&data, &clock).await;
    service.pass().await.unwrap();
    let polls = execs.store().pr_polls().await.unwrap();
    assert_eq!((polls[0].interval_ms, polls[0].next_at.clone()), (20_000, at(20)), "{polls:?}");
    // Not due again before then.
    clock.advance(chrono::Duration::seconds(5));
    service.pass().await.unwrap();
    assert_eq!(execs.store().pr_polls().await.unwrap()[0].next_at, at(20));

    // The pull request is no longer open: its schedule goes.
    let mut merge = execs.store().merge("t-poll").await.unwrap().unwrap();
    merge.state = "merged".into();
    execs.store().put_merge(&merge).await.unwrap();
    service.pass().await.unwrap();
    assert!(execs.store().pr_polls().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reviews_line_comments_delivered_before_the_review_start_one_round_with_all_of_it() {
    let s = start("").await;
    mount_checks(&s.github, false).await;
    let listed = mount_review_comments(&s.github).await;
    let got = fixture_json("github-api/pull-review.get.200.json");
    Mock::given(method("GET"))
        .and(wiremock::matchers::path("/repos/lumen-labs/lantern/pulls/43/reviews/237895671"))
        .respond_with(ResponseTemplate::new(200).set_body_json(&got["response"]["body"]))
        .mount(&s.github)
        .await;
    let (_id, task, head) = s.to_pull_request().await;

    // GitHub delivers the review's two line comments first, then the review (changes
    // requested): the first delivery starts the one round, the others add nothing.
    std::fs::write(&s.hold, "").unwrap();
    let mut comment = fixture_json("github-webhooks/pull_request_review_comment.created.json");
    comment["pull_request"]["head"]["ref"] = json!(format!("baton/{task}"));
    comment["pull_request"]["head"]["sha"] = json!(head);
    for (n, listed) in listed["response"]["body"].as_array().unwrap().iter().enumerate() {
        for field in ["id", "path", "line", "original_line", "diff_hunk", "body", "pull_request_review_id"] {
            comment["comment"][field] = listed[field].clone();
        }
        let (status, answer) =
            deliver_checked(&s.server, "pull_request_review_comment", &comment, &format!("early-comment-{n}"));
        if n == 0 {
            assert_eq!((status, &answer["outcome"]), (200, &json!("started")), "{answer}");
        } else {
            assert_eq!(status, 202, "the round already answers it: {answer}");
        }
    }
    let mut review = fixture_json("github-webhooks/pull_request_review.submitted.json");
    review["pull_request"]["head"]["ref"] = json!(format!("baton/{task}"));
    review["pull_request"]["head"]["sha"] = json!(head);
    let (status, answer) = deliver_checked(&s.server, "pull_request_review", &review, "late-review");
    assert_eq!(status, 202, "the review's round already runs: {answer}");
    assert!(s.execution(&task)["remediation"].get("queued").is_none(), "nothing waits for a second round");

    std::fs::remove_file(&s.hold).unwrap();
    s.round_pushed(&task, 1);
    let v = s.execution(&task);
    assert_eq!(v["remediation"]["rounds"].as_array().unwrap().len(), 1, "one round: {v}");
    assert!(v["remediation"].get("queued").is_none(), "{v}");
    let prompts = prompts_of(&s);
    assert_eq!(prompts.len(), 2, "the change's prompt and one round's: {prompts:?}");
    let round = &prompts[1];
    assert!(round.contains("Please drop `--locked`"), "the review's body: {round}");
    assert!(round.contains("Comment by tessa-lumen on `src/lib.rs` line 1"), "{round}");
    assert!(round.contains("Comment by tessa-lumen on `README.md` line 1"), "{round}");
}
