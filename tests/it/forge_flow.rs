//! The forge flow end to end: a real `baton serve` process pointed (through
//! `BATON_GITHUB_API_URL` / `BATON_ADO_API_URL`) at local mock forges that replay the
//! responses of `tests/fixtures`. An issue and a work item are imported (REST, CLI and a
//! signed webhook delivery), fired with the demo agent, and merged: the feature branch is
//! pushed to a local bare repository and the pull request is opened on the mock, its request
//! body holding the plan and the commits. Merging again links the same pull request; a second
//! identical delivery changes nothing; a project without a forge link gets the git commands.

use std::path::{Path, PathBuf};
use std::time::Duration;

use baton::clock::Stopwatch;
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use wiremock::matchers::{method, path, path_regex};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::common::{fixture_bytes, fixture_json, Workspace};
use crate::serve::Server;

const TOKEN: &str = "ghp_forge_flow_token_never_printed";
const PAT: &str = "ado_forge_flow_pat_never_printed";
/// GitHub's documented test secret, which the delivery fixtures are signed with.
const SECRET: &str = "It's a Secret to Everybody";
/// The body of issue 7 in the `issues.opened` delivery fixture.
const ISSUE_7_BODY: &str = "The install guide says `cargo instal lantern`; the command is `cargo install lantern`. \
                            Copying the line as written fails with \"no such command: `instal`\".";

/// A repository whose `origin` is a fresh bare repository; (workspace, bare path).
fn repo_with_remote() -> (Workspace, PathBuf) {
    let ws = Workspace::with_repo(&[("README.md", "hello\n"), ("src/lib.rs", "pub fn f() {}\n")]);
    let bare = ws.tmp.path().join("remote.git");
    let out = std::process::Command::new("git").args(["init", "-q", "--bare"]).arg(&bare).output().unwrap();
    assert!(out.status.success());
    ws.git(&["remote", "add", "origin", bare.to_str().unwrap()]);
    (ws, bare)
}

fn git_in(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git").arg("-C").arg(dir).args(args).output().unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The mock GitHub: the fixture issue and pull request, no pull request for any branch yet,
/// comments accepted.
pub(crate) async fn github_mock() -> MockServer {
    let mock = MockServer::start().await;
    let issue = fixture_json("github-api/issue.get.200.json");
    Mock::given(method("GET"))
        .and(path("/repos/lumen-labs/lantern/issues/42"))
        .respond_with(ResponseTemplate::new(200).set_body_json(&issue["response"]["body"]))
        .mount(&mock)
        .await;
    Mock::given(method("GET"))
        .and(path_regex(r"^/repos/[^/]+/[^/]+/pulls$"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!([])))
        .mount(&mock)
        .await;
    let created = fixture_json("github-api/pulls.create.201.json");
    Mock::given(method("POST"))
        .and(path_regex(r"^/repos/[^/]+/[^/]+/pulls$"))
        .respond_with(ResponseTemplate::new(201).set_body_json(&created["response"]["body"]))
        .mount(&mock)
        .await;
    Mock::given(method("POST"))
        .and(path_regex(r"^/repos/[^/]+/[^/]+/issues/\d+/comments$"))
        .respond_with(
            ResponseTemplate::new(201)
                .set_body_json(json!({"id": 1, "html_url": "https://github.com/c/1", "body": ""})),
        )
        .mount(&mock)
        .await;
    mock
}

/// The mock Azure DevOps: the fixture work item 214, no pull request yet, a created one.
async fn ado_mock() -> MockServer {
    let mock = MockServer::start().await;
    let item = fixture_json("azure-devops/rest/workitem.get.json");
    Mock::given(method("GET"))
        .and(path("/lumenlabs/Lantern/_apis/wit/workitems/214"))
        .respond_with(ResponseTemplate::new(200).set_body_json(&item["response"]["body"]))
        .mount(&mock)
        .await;
    mount_ado_writes(&mock, "lumenlabs", "Lantern", 41).await;
    mock
}

/// Azure DevOps answers for `org`/`project` (its repository of the same name): no pull request
/// for any branch yet, pull request `pr_id` when one is opened, comments accepted. No pull
/// request fixture is written for Azure DevOps: the documented shape's fields Baton reads.
async fn mount_ado_writes(mock: &MockServer, org: &str, project: &str, pr_id: u64) {
    let prs = format!("/{org}/{project}/_apis/git/repositories/{project}/pullrequests");
    Mock::given(method("GET"))
        .and(path(prs.as_str()))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"value": [], "count": 0})))
        .mount(mock)
        .await;
    let pr = json!({"pullRequestId": pr_id, "status": "active",
        "repository": {"webUrl": format!("https://dev.azure.com/{org}/{project}/_git/{project}")}});
    Mock::given(method("POST"))
        .and(path(prs.as_str()))
        .respond_with(ResponseTemplate::new(201).set_body_json(pr))
        .mount(mock)
        .await;
    Mock::given(method("POST"))
        .and(path_regex(format!(r"^/{org}/{project}/_apis/wit/workItems/\d+/comments$")))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"id": 7, "text": ""})))
        .mount(mock)
        .await;
}

fn start(data: &Path, github: &MockServer, ado: &MockServer) -> Server {
    let (gh, az) = (github.uri(), ado.uri());
    Server::start_env(
        data,
        &[],
        &[
            ("BATON_GITHUB_API_URL", gh.as_str()),
            ("GITHUB_TOKEN", TOKEN),
            ("BATON_ADO_API_URL", az.as_str()),
            ("ADO_PAT", PAT),
            ("BATON_GITHUB_WEBHOOK_SECRET", SECRET),
            ("BATON_ADO_WEBHOOK_USER", "hooks"),
            ("BATON_ADO_WEBHOOK_PASSWORD", "hook-secret"),
        ],
    )
}

fn register(server: &Server, name: &str, repo: &Path, forge_repo: &str, label: &str) {
    let body = json!({"name": name, "repo_path": repo, "agent_profile": "demo", "forge_repo": forge_repo,
                      "trigger_label": label});
    let (status, answer) = server.request("POST", "/api/v1/projects", Some(body));
    assert_eq!(status, 201, "{answer}");
}

/// Enriches, approves and fires spec `id`, deciding every approval it waits for, until its
/// changelist is ready; its task id. With `reported`, each approval is decided only once the
/// mock forge got the "waiting for a human" comment on the item's comments path.
async fn fire_to_changelist(server: &Server, id: i64, reported: Option<(&MockServer, &str)>) -> String {
    for (action, body) in [("enrich", None), ("review", Some(json!({"decision": "approve"}))), ("fire", None)] {
        let (status, answer) = server.request("POST", &format!("/api/v1/specs/{id}/{action}"), body);
        assert_eq!(status, 200, "{action}: {answer}");
    }
    let task_id = server.spec(id)["task_id"].as_str().unwrap().to_string();
    let start = Stopwatch::start();
    loop {
        let spec = server.spec(id);
        match spec["stage"].as_str().unwrap() {
            "changelist_review" => return task_id,
            "failed" | "cancelled" => panic!("spec {id} stopped: {spec}"),
            "awaiting_human" => {
                let (_, view) = server.request("GET", &format!("/api/v1/executions/{task_id}"), None);
                if let Some(phase) = view["pending_approval_request"]["phase_id"].as_i64() {
                    if let Some((mock, suffix)) = reported {
                        wait_comments(mock, suffix, &format!("phase {phase} (")).await;
                    }
                    let body = json!({"phase_id": phase, "result": "approve"});
                    let (status, answer) =
                        server.request("POST", &format!("/api/v1/executions/{task_id}/approve"), Some(body));
                    assert!(status == 201 || status == 409, "{answer}");
                }
            }
            _ => {}
        }
        assert!(start.elapsed() < Duration::from_secs(90), "spec {id} never reached its changelist: {spec}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The requests the mock received with `method` on a path matching `suffix`.
pub(crate) async fn received(mock: &MockServer, verb: &str, suffix: &str) -> Vec<wiremock::Request> {
    mock.received_requests()
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.method.as_str() == verb && r.url.path().ends_with(suffix))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_imported_issue_and_work_item_end_as_pull_requests_with_the_plan_and_commits() {
    let (github, ado) = (github_mock().await, ado_mock().await);
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let server = start(&data, &github, &ado);
    let (gh_ws, gh_bare) = repo_with_remote();
    let (ado_ws, ado_bare) = repo_with_remote();
    register(&server, "gh", &gh_ws.repo(), "lumen-labs/lantern", "");
    register(&server, "az", &ado_ws.repo(), "ado:lumenlabs/Lantern", "");

    // GitHub: the fixture issue, imported over REST.
    let body = json!({"project": "gh", "ref": "github:lumen-labs/lantern#42"});
    let (status, imported) = server.request("POST", "/api/v1/specs/import", Some(body.clone()));
    assert_eq!(status, 201, "{imported}");
    let item = &imported["items"][0];
    assert_eq!(item["outcome"], "created");
    assert_eq!(item["title"], "CSV export drops the header row when a report is empty");
    assert_eq!(item["source_url"], "https://github.com/lumen-labs/lantern/issues/42");
    let gh_id = item["spec_id"].as_i64().unwrap();
    let spec = server.spec(gh_id);
    let meta: Value = serde_json::from_str(spec["source_meta"].as_str().unwrap()).unwrap();
    assert_eq!(meta["labels"], json!(["bug", "question"]));
    assert_eq!(meta["item_ref"], "github:lumen-labs/lantern#42");
    let issue_get = received(&github, "GET", "/issues/42").await;
    assert_eq!(issue_get[0].headers["authorization"], format!("Bearer {TOKEN}"));
    // Importing it again changes nothing.
    let (status, again) = server.request("POST", "/api/v1/specs/import", Some(body));
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["items"][0]["outcome"], "unchanged");
    assert_eq!(again["items"][0]["spec_id"], gh_id);

    // Azure DevOps: work item 214, imported with the CLI beside the running server.
    let stdout = baton_on_ado(&data, &ado, &["spec", "import", "ado:lumenlabs/Lantern#214", "--project", "az"]);
    assert!(stdout.contains("created: Let a lead export the board as CSV"), "{stdout}");
    let ado_id: i64 = stdout.split_whitespace().nth(1).unwrap().parse().unwrap();
    let meta: Value = serde_json::from_str(server.spec(ado_id)["source_meta"].as_str().unwrap()).unwrap();
    assert_eq!(meta["item_type"], "User Story");
    assert_eq!(meta["labels"], json!(["board", "csv", "export"]));
    let item_get = received(&ado, "GET", "/wit/workitems/214").await;
    assert_eq!(item_get[0].url.query_pairs().find(|(k, _)| k == "api-version").unwrap().1, "7.1");

    // Both fired with the demo agent, then merged.
    let gh_task = fire_to_changelist(&server, gh_id, Some((&github, "/issues/42/comments"))).await;
    let ado_task = fire_to_changelist(&server, ado_id, None).await;
    let changelist = |task: &str| server.raw("GET", &format!("/executions/{task}/changelist"), "", "").2;
    let page = changelist(&gh_task);
    assert!(page.contains("id=\"merge-form\"") && page.contains("lumen-labs/lantern"), "{page}");
    let spec_page = server.raw("GET", &format!("/specs/{gh_id}"), "", "").2;
    assert!(spec_page.contains("github:lumen-labs/lantern#42") && spec_page.contains(">question<"), "{spec_page}");
    // The forge fails once the branch is pushed (every retry too): the merge stops there, says
    // why, and running it again finishes the job with one pull request.
    Mock::given(method("POST"))
        .and(path("/repos/lumen-labs/lantern/pulls"))
        .respond_with(ResponseTemplate::new(502).set_body_json(json!({"message": "Server Error"})))
        .up_to_n_times(4)
        .with_priority(1)
        .mount(&github)
        .await;
    let (status, failed) = server.request("POST", &format!("/api/v1/executions/{gh_task}/merge"), None);
    assert_eq!(status, 502, "{failed}");
    assert_eq!(failed["error"], "forge_unavailable");
    let (_, stopped) = server.request("GET", &format!("/api/v1/executions/{gh_task}/merge"), None);
    assert_eq!(stopped["state"], "pushed", "{stopped}");
    assert!(stopped["error"].as_str().unwrap().contains("502"), "{stopped}");
    let (status, merged) = server.request("POST", &format!("/api/v1/executions/{gh_task}/merge"), None);
    assert_eq!(status, 200, "{merged}");
    assert_eq!(merged["state"], "opened");
    assert_eq!(merged["error"], "");
    let page = changelist(&gh_task);
    assert!(page.contains("id=\"pr-link\" href=\"https://github.com/lumen-labs/lantern/pull/43\""), "{page}");
    assert!(!page.contains("id=\"merge-form\""), "merged: no second Merge button");
    assert_eq!(merged["pr_url"], "https://github.com/lumen-labs/lantern/pull/43");
    let branch = format!("baton/{gh_task}");
    assert_eq!(git_in(&gh_bare, &["rev-parse", &branch]), merged["pushed_sha"].as_str().unwrap());
    let posts = received(&github, "POST", "/repos/lumen-labs/lantern/pulls").await;
    assert_eq!(posts.len(), 5, "4 refused attempts, then the one that opened it");
    let pr: Value = serde_json::from_slice(&posts[4].body).unwrap();
    assert_eq!(pr["head"], branch);
    let pr_body = pr["body"].as_str().unwrap();
    let state = server.request("GET", &format!("/api/v1/executions/{gh_task}"), None).1;
    for phase in state["plan"]["phases"].as_array().unwrap() {
        assert!(pr_body.contains(phase["name"].as_str().unwrap()), "the body lists phase {}: {pr_body}", phase["name"]);
        for step in phase["steps"].as_array().unwrap() {
            let line = format!("{} `{}`", step["step_id"].as_str().unwrap(), step["agent_name"].as_str().unwrap());
            assert!(pr_body.contains(&line), "the body lists step {line}: {pr_body}");
        }
    }
    let log = git_in(&gh_bare, &["log", "--format=%H", &branch, "-n", "1"]);
    assert!(pr_body.contains(&log[..12]), "the body lists the branch tip commit {log}: {pr_body}");
    assert!(pr_body.contains("## Gates") && pr_body.contains("## Approvals") && pr_body.contains("spent"), "{pr_body}");

    // Merging again: the same pull request, nothing opened twice.
    let (status, again) = server.request("POST", &format!("/api/v1/executions/{gh_task}/merge"), None);
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["pr_url"], merged["pr_url"]);
    assert_eq!(received(&github, "POST", "/pulls").await.len(), 5, "no pull request opened twice");

    // Azure DevOps, through the CLI.
    let stdout = baton_on_ado(&data, &ado, &["--json", "merge", ado_task.as_str()]);
    let row: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(row["pr_url"], "https://dev.azure.com/lumenlabs/Lantern/_git/Lantern/pullrequest/41");
    let posts = received(&ado, "POST", "/pullrequests").await;
    assert_eq!(posts.len(), 1);
    let pr: Value = serde_json::from_slice(&posts[0].body).unwrap();
    assert_eq!(pr["sourceRefName"], format!("refs/heads/baton/{ado_task}"));
    assert!(pr["description"].as_str().unwrap().contains("## Plan"), "{pr}");
    git_in(&ado_bare, &["rev-parse", &format!("baton/{ado_task}")]);

    // Reported back on both items, each report once: fired, waiting for a human, the pull request.
    let gh_comments = wait_comments(&github, "/issues/42/comments", "pull request").await;
    let texts: Vec<String> = gh_comments
        .iter()
        .map(|r| serde_json::from_slice::<Value>(&r.body).unwrap()["body"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(texts.iter().filter(|t| t.contains("fired this")).count(), 1, "{texts:?}");
    let waiting = texts.iter().find(|t| t.contains("waiting for a human")).expect("a waiting report");
    assert!(waiting.contains(&format!("/executions/{gh_task}")), "{waiting}");
    assert_eq!(
        texts
            .iter()
            .filter(|t| t.contains("opened the pull request https://github.com/lumen-labs/lantern/pull/43"))
            .count(),
        1,
        "{texts:?}"
    );
    let ado_comments = wait_comments(&ado, "/workItems/214/comments", "pull request").await;
    for c in &ado_comments {
        let version = c.url.query_pairs().find(|(k, _)| k == "api-version").unwrap().1.to_string();
        assert_eq!(version, "7.1-preview.4");
        assert!(c.headers["authorization"].to_str().unwrap().starts_with("Basic "));
    }

    // No credential ever reached a page, an answer or the log.
    for (_, text) in [server.raw("GET", &format!("/specs/{gh_id}"), "", ""), server.raw("GET", "/", "", "")]
        .iter()
        .map(|(s, h, b)| (s, format!("{h}{b}")))
    {
        assert!(!text.contains(TOKEN) && !text.contains(PAT));
    }

    // The run's record gone from this data directory (as on a replica that never ran it) and
    // no remote to read the branch from: the changelist says so, not that an external
    // orchestrator drives a fired spec's execution.
    std::fs::remove_file(data.join("runs").join(&ado_task).join("execution.json")).unwrap();
    let (status, _, page) = server.raw("GET", &format!("/executions/{ado_task}/changelist"), "", "");
    assert_eq!(status, 409, "{page}");
    assert!(page.contains("has no record of its run") && page.contains("project az has no remote"), "{page}");
    assert!(!page.contains("external orchestrator"), "{page}");
}

/// Waits (up to 30 s) until the comments posted to a path ending in `suffix` include one
/// containing `last`; all of them.
async fn wait_comments(mock: &MockServer, suffix: &str, last: &str) -> Vec<wiremock::Request> {
    let start = Stopwatch::start();
    loop {
        let posted = received(mock, "POST", suffix).await;
        if posted.iter().any(|r| String::from_utf8_lossy(&r.body).contains(last)) {
            return posted;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no comment with {last:?} on {suffix}: {} posted",
            posted.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `baton --data-dir <data> <args>` pointed at the mock Azure DevOps with the PAT; its stdout,
/// after checking it succeeded.
fn baton_on_ado(data: &Path, ado: &MockServer, args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .arg("--data-dir")
        .arg(data)
        .args(args)
        .env("BATON_ADO_API_URL", ado.uri())
        .env("ADO_PAT", PAT)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

fn sign(body: &[u8]) -> String {
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// Posts a webhook delivery (`raw` bytes with the recorded headers) to the server.
fn deliver(server: &Server, body: &[u8], headers: &Value, delivery: &str) -> (u16, Value) {
    let mut extra = String::new();
    for (k, v) in headers.as_object().unwrap() {
        let v = v.as_str().unwrap();
        match k.as_str() {
            "Host" | "Content-Length" => {}
            "X-Hub-Signature-256" => extra.push_str(&format!("{k}: {}\r\n", sign(body))),
            "X-GitHub-Delivery" => extra.push_str(&format!("{k}: {delivery}\r\n")),
            _ => extra.push_str(&format!("{k}: {v}\r\n")),
        }
    }
    let (status, _, text) = server.raw("POST", "/webhooks/github", &extra, std::str::from_utf8(body).unwrap());
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_imported_issue_ends_as_a_pull_request_and_a_redelivery_changes_nothing() {
    let (github, ado) = (github_mock().await, ado_mock().await);
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let server = start(&data, &github, &ado);
    let (ws, bare) = repo_with_remote();
    register(&server, "hooked", &ws.repo(), "lumen-labs/lantern", "bug");

    // The delivery fixture, exactly as written (its own signature and delivery id).
    let body = fixture_bytes("github-webhooks/issues.opened.json");
    let headers = fixture_json("github-webhooks/issues.opened.headers.json");
    let recorded = headers["X-GitHub-Delivery"].as_str().unwrap().to_string();
    let (status, answer) = deliver(&server, &body, &headers, &recorded);
    assert_eq!(status, 201, "{answer}");
    let id = answer["spec_id"].as_i64().unwrap();
    let specs_before = server.request("GET", "/api/v1/specs?limit=200", None).1;
    // The second identical delivery: acknowledged, nothing applied.
    let (status, again) = deliver(&server, &body, &headers, &recorded);
    assert_eq!((status, again), (200, json!({"duplicate": true})));
    assert_eq!(server.request("GET", "/api/v1/specs?limit=200", None).1, specs_before);

    let task_id = fire_to_changelist(&server, id, None).await;
    // An edit of the fired spec's issue: its text and plan stay, the change is flagged.
    let mut edited: Value = serde_json::from_slice(&body).unwrap();
    edited["action"] = json!("edited");
    edited["issue"]["body"] = json!("Changed after firing: also fix the CONTRIBUTING file.");
    let edited = edited.to_string().into_bytes();
    let (status, answer) = deliver(&server, &edited, &headers, "edit-after-fire");
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["outcome"], "ignored");
    assert_eq!(server.spec(id)["body"], ISSUE_7_BODY);
    let page = server.raw("GET", &format!("/specs/{id}"), "", "").2;
    assert!(page.contains("id=\"import-flag\">Flagged for the lead"), "{page}");

    let (status, merged) = server.request("POST", &format!("/api/v1/executions/{task_id}/merge"), None);
    assert_eq!(status, 200, "{merged}");
    let posts = received(&github, "POST", "/repos/lumen-labs/lantern/pulls").await;
    assert_eq!(posts.len(), 1);
    let pr: Value = serde_json::from_slice(&posts[0].body).unwrap();
    assert!(pr["body"].as_str().unwrap().contains("https://github.com/lumen-labs/lantern/issues/7"), "{pr}");
    assert!(pr["body"].as_str().unwrap().contains("## Commits"), "{pr}");
    git_in(&bare, &["rev-parse", &format!("baton/{task_id}")]);

    // Issue 19.5: where the pull request stands shows on the execution (API and page) and on
    // its card: open, then merged once the forge says so.
    let pr_url = merged["pr_url"].as_str().unwrap().to_string();
    let number = merged["pr_number"].as_i64().unwrap();
    let shown = |state: &str| {
        let (status, exec) = server.request("GET", &format!("/api/v1/executions/{task_id}"), None);
        assert_eq!(status, 200, "{exec}");
        assert_eq!(exec["pull_request"], json!({"number": number, "url": pr_url, "state": state}));
        let board = server.request("GET", "/api/v1/board", None).1;
        let card = board["columns"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|c| c["cards"].as_array().unwrap())
            .find(|c| c["spec_id"] == id)
            .unwrap()
            .clone();
        assert_eq!(card["pull_request"]["state"], state, "{card}");
        let page = server.raw("GET", &format!("/executions/{task_id}"), "", "").2;
        let words = format!("pull request #{number} {}", state.replace('_', " "));
        assert!(page.contains(&words), "{words} not on the execution page");
        let board_page = server.raw("GET", "/", "", "").2;
        assert!(board_page.contains(&format!("Pull request #{number} {}", state.replace('_', " "))), "{board_page}");
    };
    shown("open");
    let mut closed = fixture_json("github-webhooks/pull_request.closed.merged.json");
    closed["pull_request"]["head"]["ref"] = json!(format!("baton/{task_id}"));
    closed["pull_request"]["html_url"] = json!(pr_url);
    closed["repository"]["full_name"] = json!("lumen-labs/lantern");
    let headers = fixture_json("github-webhooks/pull_request.closed.merged.headers.json");
    let (status, answer) = deliver(&server, closed.to_string().as_bytes(), &headers, "merged-1");
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["status"], "merged");
    shown("merged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merge_refuses_what_it_cannot_merge_and_says_how() {
    let (github, ado) = (github_mock().await, ado_mock().await);
    let tmp = tempfile::tempdir().unwrap();
    let server = start(&tmp.path().join("data"), &github, &ado);

    // The demo project has no forge link: the git commands, and no call to any forge.
    let (status, spec) =
        server.request("POST", "/api/v1/specs", Some(json!({"project": "demo", "title": "Say hello politely"})));
    assert_eq!(status, 201, "{spec}");
    let task_id = fire_to_changelist(&server, spec["spec_id"].as_i64().unwrap(), None).await;
    let page = server.raw("GET", &format!("/executions/{task_id}/changelist"), "", "").2;
    assert!(
        page.contains("id=\"local-merge\"") && page.contains(&format!("git merge --no-ff baton/{task_id}")),
        "{page}"
    );
    assert!(!page.contains("id=\"merge-form\""), "no forge link: no Merge button");
    let (status, refused) = server.request("POST", &format!("/api/v1/executions/{task_id}/merge"), None);
    assert_eq!(status, 409, "{refused}");
    let message = refused["message"].as_str().unwrap();
    assert!(message.contains(&format!("git merge --no-ff baton/{task_id}")), "{message}");
    assert_eq!(refused["details"]["reason"], "not_mergeable");
    let (status, unmerged) = server.request("GET", &format!("/api/v1/executions/{task_id}/merge"), None);
    assert_eq!(status, 404);
    assert!(unmerged["message"].as_str().unwrap().contains("has not been merged"), "{unmerged}");
    assert!(github.received_requests().await.unwrap().is_empty());

    // No such execution; a bad reference; a pull request given as an issue.
    let (status, _) = server.request("POST", "/api/v1/executions/nope/merge", None);
    assert_eq!(status, 404);
    let (status, unknown) = server.request("GET", "/api/v1/executions/nope/merge", None);
    assert_eq!(status, 404);
    assert_eq!(unknown["message"], "no execution with task id nope", "{unknown}");
    let (status, bad) =
        server.request("POST", "/api/v1/specs/import", Some(json!({"project": "demo", "ref": "github:nope"})));
    assert_eq!(status, 422, "{bad}");
    assert!(bad["message"].as_str().unwrap().contains("github:OWNER/REPO#NUMBER"), "{bad}");
    let (status, bad) = server.request(
        "POST",
        "/api/v1/specs/import",
        Some(json!({"project": "nope", "ref": "github:lumen-labs/lantern#42"})),
    );
    assert_eq!(status, 404, "{bad}");
    assert!(received(&github, "GET", "/issues/42").await.is_empty(), "an unknown project calls no forge");

    // The board's import form (CSRF cookie and field, like every form).
    let (_, head, _) = server.raw("GET", "/specs/new", "", "");
    let csrf = head
        .lines()
        .find_map(|l| l.strip_prefix("set-cookie: baton_csrf=").or_else(|| l.strip_prefix("Set-Cookie: baton_csrf=")))
        .and_then(|v| v.split(';').next())
        .expect("the page sets the CSRF cookie")
        .to_string();
    let form = format!("csrf={csrf}&project=demo&reference=github%3Alumen-labs%2Flantern%2342&label=&wiql=");
    let extra = format!("Cookie: baton_csrf={csrf}\r\nContent-Type: application/x-www-form-urlencoded\r\n");
    let (status, head, _) = server.raw("POST", "/specs/import", &extra, &form);
    assert_eq!(status, 303, "{head}");
    let location = head.lines().find_map(|l| l.to_ascii_lowercase().strip_prefix("location: ").map(str::to_string));
    let id: i64 = location.unwrap().trim().trim_start_matches("/specs/").parse().unwrap();
    assert_eq!(server.spec(id)["title"], "CSV export drops the header row when a report is empty");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_azure_devops_service_hook_import_ends_as_a_pull_request_and_reports_back() {
    let (github, ado) = (github_mock().await, MockServer::start().await);
    mount_ado_writes(&ado, "lumenlabs", "Lantern", 5).await;
    let tmp = tempfile::tempdir().unwrap();
    let server = start(&tmp.path().join("data"), &github, &ado);
    let (ws, bare) = repo_with_remote();
    register(&server, "fab", &ws.repo(), "ado:lumenlabs/Lantern", "");

    // The workitem.created delivery fixture, with the hook's Basic credentials.
    let body = String::from_utf8(fixture_bytes("azure-devops/hooks/workitem.created.json")).unwrap();
    let auth = "Authorization: Basic aG9va3M6aG9vay1zZWNyZXQ=\r\nContent-Type: application/json\r\n";
    let (status, _, answer) = server.raw("POST", "/webhooks/ado", auth, &body);
    assert_eq!(status, 201, "{answer}");
    let id = serde_json::from_str::<Value>(&answer).unwrap()["spec_id"].as_i64().unwrap();
    let (status, _, again) = server.raw("POST", "/webhooks/ado", auth, &body);
    assert_eq!((status, again.as_str()), (200, r#"{"duplicate":true}"#));

    let task_id = fire_to_changelist(&server, id, None).await;
    let (status, merged) = server.request("POST", &format!("/api/v1/executions/{task_id}/merge"), None);
    assert_eq!(status, 200, "{merged}");
    assert_eq!(merged["pr_url"], "https://dev.azure.com/lumenlabs/Lantern/_git/Lantern/pullrequest/5");
    let posts = received(&ado, "POST", "/pullrequests").await;
    assert_eq!(posts.len(), 1);
    let pr: Value = serde_json::from_slice(&posts[0].body).unwrap();
    assert_eq!(pr["sourceRefName"], format!("refs/heads/baton/{task_id}"));
    assert!(pr["description"].as_str().unwrap().contains("Show when the status feed last refreshed"), "{pr}");
    git_in(&bare, &["rev-parse", &format!("baton/{task_id}")]);
    wait_comments(&ado, "/workItems/301/comments", "pull request").await;
}

/// Runs `jobs` on threads released at the same moment (a barrier), against the real server;
/// their answers in order.
fn at_once<T: Send>(jobs: Vec<Box<dyn FnOnce() -> T + Send + '_>>) -> Vec<T> {
    let barrier = std::sync::Barrier::new(jobs.len());
    tokio::task::block_in_place(|| {
        std::thread::scope(|scope| {
            let handles: Vec<_> = jobs
                .into_iter()
                .map(|job| {
                    let barrier = &barrier;
                    scope.spawn(move || {
                        barrier.wait();
                        job()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_and_imports_of_one_item_at_the_same_moment_make_one_spec() {
    // Found trying Baton: deliveries of one GitHub issue with different delivery ids (a
    // repository hook and an app hook) posted at the same moment made two or three specs.
    const ROUNDS: u64 = 4;
    let (github, ado) = (MockServer::start().await, MockServer::start().await);
    let tmp = tempfile::tempdir().unwrap();
    let server = start(&tmp.path().join("data"), &github, &ado);
    let (gh_ws, _) = repo_with_remote();
    let (ado_ws, _) = repo_with_remote();
    register(&server, "gh", &gh_ws.repo(), "lumen-labs/lantern", "bug");
    register(&server, "az", &ado_ws.repo(), "ado:lumenlabs/Lantern", "");
    let opened: Value = serde_json::from_slice(&fixture_bytes("github-webhooks/issues.opened.json")).unwrap();
    let labeled: Value = serde_json::from_slice(&fixture_bytes("github-webhooks/issues.labeled.json")).unwrap();
    let headers = fixture_json("github-webhooks/issues.opened.headers.json");
    let labeled_headers = fixture_json("github-webhooks/issues.labeled.headers.json");
    let hook: Value = serde_json::from_slice(&fixture_bytes("azure-devops/hooks/workitem.created.json")).unwrap();
    let work_item = fixture_json("azure-devops/rest/workitem.get.json")["response"]["body"].clone();
    let auth = "Authorization: Basic aG9va3M6aG9vay1zZWNyZXQ=\r\nContent-Type: application/json\r\n";

    for round in 0..ROUNDS {
        // GitHub: six deliveries (three `opened`, three `labeled`, each its own delivery id)
        // and two REST imports of issue 100 + round, all at once.
        let number = 100 + round;
        let html_url = format!("https://github.com/lumen-labs/lantern/issues/{number}");
        let mut issue = opened["issue"].clone();
        issue["number"] = json!(number);
        issue["html_url"] = json!(html_url);
        issue["title"] = json!(format!("Race round {round}"));
        Mock::given(method("GET"))
            .and(path(format!("/repos/lumen-labs/lantern/issues/{number}")))
            .respond_with(ResponseTemplate::new(200).set_body_json(&issue))
            .mount(&github)
            .await;
        let mut jobs: Vec<Box<dyn FnOnce() -> (u16, Value) + Send + '_>> = Vec::new();
        for i in 0..6 {
            let (mut payload, hdrs) =
                if i % 2 == 0 { (opened.clone(), &headers) } else { (labeled.clone(), &labeled_headers) };
            payload["issue"] = issue.clone();
            let body = payload.to_string().into_bytes();
            let server = &server;
            jobs.push(Box::new(move || deliver(server, &body, hdrs, &format!("race-{round}-{i}"))));
        }
        for _ in 0..2 {
            let server = &server;
            let body = json!({"project": "gh", "ref": format!("github:lumen-labs/lantern#{number}")});
            jobs.push(Box::new(move || server.request("POST", "/api/v1/specs/import", Some(body))));
        }
        let answers = at_once(jobs);
        let mut created = 0;
        for (status, answer) in &answers {
            assert!(*status == 200 || *status == 201, "{status} {answer}");
            let outcome = answer.get("outcome").or_else(|| answer.pointer("/items/0/outcome"));
            created += usize::from(outcome == Some(&json!("created")));
        }
        assert_eq!(created, 1, "round {round}: {answers:?}");
        let (_, specs) = server.request("GET", "/api/v1/specs?limit=500&project=gh", None);
        let of_issue = specs.as_array().unwrap().iter().filter(|s| s["source_url"] == html_url.as_str()).count();
        assert_eq!(of_issue, 1, "round {round}: one issue, one spec");

        // Azure DevOps: six `workitem.created` notifications (their own ids) of work item
        // 500 + round, addressed by its API URL, and two imports answered with its web URL.
        let id = 500 + round;
        let title = format!("ADO race round {round}");
        let mut item = work_item.clone();
        item["id"] = json!(id);
        item["fields"]["System.Title"] = json!(title);
        item["fields"]["System.Description"] = hook["resource"]["fields"]["System.Description"].clone();
        item["_links"]["html"]["href"] =
            json!(format!("https://dev.azure.com/lumenlabs/6f1c2a3b-4d5e-4f60-8a71-92b3c4d5e6f7/_workitems/edit/{id}"));
        Mock::given(method("GET"))
            .and(path(format!("/lumenlabs/Lantern/_apis/wit/workitems/{id}")))
            .respond_with(ResponseTemplate::new(200).set_body_json(&item))
            .mount(&ado)
            .await;
        let mut jobs: Vec<Box<dyn FnOnce() -> (u16, Value) + Send + '_>> = Vec::new();
        for i in 0..6 {
            let mut payload = hook.clone();
            payload["id"] = json!(format!("ado-race-{round}-{i}"));
            payload["resource"]["id"] = json!(id);
            let api_url = format!("https://dev.azure.com/lumenlabs/_apis/wit/workItems/{id}");
            payload["resource"]["url"] = json!(api_url);
            payload["resource"]["_links"]["self"]["href"] = json!(api_url);
            payload["resource"]["fields"]["System.Title"] = json!(title);
            let body = payload.to_string();
            let server = &server;
            jobs.push(Box::new(move || {
                let (status, _, text) = server.raw("POST", "/webhooks/ado", auth, &body);
                (status, serde_json::from_str(&text).unwrap_or(Value::Null))
            }));
        }
        for _ in 0..2 {
            let server = &server;
            let body = json!({"project": "az", "ref": format!("ado:lumenlabs/Lantern#{id}")});
            jobs.push(Box::new(move || server.request("POST", "/api/v1/specs/import", Some(body))));
        }
        let answers = at_once(jobs);
        let mut created = 0;
        for (status, answer) in &answers {
            // 202: a notification of a revision already imported by another.
            assert!([200, 201, 202].contains(status), "{status} {answer}");
            let outcome = answer.get("outcome").or_else(|| answer.pointer("/items/0/outcome"));
            created += usize::from(outcome == Some(&json!("created")));
        }
        assert_eq!(created, 1, "round {round}: {answers:?}");
        let (_, specs) = server.request("GET", "/api/v1/specs?limit=500&project=az", None);
        let of_item = specs.as_array().unwrap().iter().filter(|s| s["title"] == title.as_str()).count();
        assert_eq!(of_item, 1, "round {round}: one work item, one spec (whichever address brought it)");
    }
    let (_, specs) = server.request("GET", "/api/v1/specs?limit=500", None);
    let forge_specs = specs.as_array().unwrap().iter().filter(|s| s["source"] != "board").count();
    assert_eq!(forge_specs, usize::try_from(2 * ROUNDS).unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_bulk_import_waits_out_a_secondary_rate_limit_and_goes_on() {
    // Found trying Baton: GitHub's secondary rate limit (403, no rate headers) ended the
    // whole bulk import with nothing imported.
    const LABEL: &str = "needs spec";
    let (github, ado) = (MockServer::start().await, MockServer::start().await);
    // Page 3 is refused four times: twice waited out inside the call, then the call gives up
    // and the import waits, asks again (refused once more, waited), and goes on.
    crate::forge_clients::mount_listing_with_a_secondary_limit(&github, LABEL, 4).await;
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let server = start(&data, &github, &ado);
    let (ws, _) = repo_with_remote();
    register(&server, "notes", &ws.repo(), "lumen-labs/field-notes", "");

    let clock = Stopwatch::start();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .arg("--data-dir")
        .arg(&data)
        .args(["spec", "import", "github:lumen-labs/field-notes", "--label", LABEL, "--project", "notes"])
        .env("BATON_GITHUB_API_URL", github.uri())
        .env("GITHUB_TOKEN", TOKEN)
        // A test's wait: GitHub asks for at least a minute.
        .env("BATON_GITHUB_SECONDARY_RATE_LIMIT_WAIT_SECS", "0.3")
        .output()
        .unwrap();
    let elapsed = clock.elapsed();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}{stderr}");
    assert_eq!(stdout.lines().filter(|l| l.contains(" created: ")).count(), 13, "{stdout}");
    assert!(stderr.contains("secondary rate limit") && stderr.contains("waiting 0.3 s"), "{stderr}");
    assert!(elapsed >= Duration::from_millis(1200), "four waits of 0.3 s: {elapsed:?}");
    let seen = github.received_requests().await.unwrap();
    let asked = |page: Option<&str>| {
        let page_of =
            |r: &wiremock::Request| r.url.query_pairs().find(|(k, _)| k == "page").map(|(_, v)| v.into_owned());
        seen.iter().filter(|r| page_of(r).as_deref() == page).count()
    };
    assert_eq!(asked(None), 1, "page 1 once: the import went on, it did not start over");
    assert_eq!(asked(Some("3")), 5, "page 3: four refusals, then its issues");
    let (_, specs) = server.request("GET", "/api/v1/specs?limit=500&project=notes", None);
    assert_eq!(specs.as_array().unwrap().len(), 13);
}
