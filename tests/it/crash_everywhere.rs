//! The exhaustive crash harness (issue 15.9): a run with parallel steps, a team step, a gate
//! that fails once then passes and an approval is killed (SIGKILL on itself, no cleanup) right
//! after its k-th durable store commit (`BATON_CRASH_AFTER_COMMIT=k`), for every k of every
//! process of the run (`execute run` up to the approval, `execute approve`, `execute run` to
//! the end, `baton merge` pushing to a local bare remote and opening the pull request on a mock
//! GitHub), and separately right before its k-th git or forge side effect
//! (`BATON_CRASH_BEFORE_EFFECT=k`); then it is resumed. For every k: the execution completes,
//! every attempt's agent was launched once (no finished step ran again, no attempt re-run),
//! every step's result and deliverable is there, the feature branch holds each step's commit
//! once and is pushed, one pull request was posted, and `baton audit verify` and `baton replay`
//! pass. The test prints how many crash points it covered. Cases run on two threads, each in
//! its own workspace and forge repository.

use std::os::unix::process::ExitStatusExt as _;
use std::path::Path;
use std::process::Output;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use serde_json::{json, Value};
use wiremock::matchers::path_regex;
use wiremock::{Mock, MockServer, Respond, ResponseTemplate};

use crate::common::*;

const TASK: &str = "crash-all";
/// Every dispatch of the plan: ordinary steps and team members.
const WORKERS: &[&str] = &["1.1", "1.2", "1.3.a", "1.3.b", "1.4", "2.1", "3.1"];
/// The processes of one run, in order.
const STAGES: &[&str] = &["run up to the approval", "approve", "run to the end", "merge"];
/// The mock GitHub's token.
const TOKEN: &str = "ghp_crash_everywhere";

/// Phase 1: 1.1, 1.2 and team step 1.3 (two members) in parallel, then 1.4; its gate fails the
/// first time it runs (it leaves `marker` behind) and passes after. Phase 2 needs an approval;
/// phase 3 finishes.
fn plan(marker: &Path) -> String {
    let marker = marker.display();
    json!({
        "task_id": TASK,
        "task_summary": "Crash everywhere",
        "phases": [
            {"phase_id": 1, "name": "Build", "steps": [
                {"step_id": "1.1", "agent_name": "alpha", "task_description": "Write a.", "deliverables": ["a.md"]},
                {"step_id": "1.2", "agent_name": "beta", "task_description": "Write b.", "deliverables": ["b.md"]},
                {"step_id": "1.3", "agent_name": "team-lead", "task_description": "Write c and d together.",
                 "team": [
                    {"member_id": "1.3.a", "agent_name": "gamma", "task_description": "Write c.", "deliverables": ["c.md"]},
                    {"member_id": "1.3.b", "agent_name": "delta", "task_description": "Write d.", "deliverables": ["d.md"]}
                 ]},
                {"step_id": "1.4", "agent_name": "epsilon", "task_description": "Write e.", "deliverables": ["e.md"],
                 "depends_on": ["1.1", "1.2", "1.3"]}
             ],
             "gate": {"gate_type": "test",
                      "command": format!("test -s a.md && test -s e.md && {{ test -e '{marker}' || {{ touch '{marker}'; exit 1; }}; }}")}},
            {"phase_id": 2, "name": "Review", "approval_required": true, "approval_description": "Look at it.",
             "steps": [
                {"step_id": "2.1", "agent_name": "zeta", "task_description": "Write f.", "deliverables": ["f.md"],
                 "depends_on": ["1.4"]}
             ]},
            {"phase_id": 3, "name": "Finish", "steps": [
                {"step_id": "3.1", "agent_name": "eta", "task_description": "Write g.", "deliverables": ["g.md"],
                 "depends_on": ["2.1"]}
            ]}
        ]
    })
    .to_string()
}

/// A mock GitHub whose pull-request list of a repository holds the pull request once one was
/// posted to it (so a merge resumed after the post finds it, as on GitHub).
struct Forge {
    server: MockServer,
    rt: tokio::runtime::Runtime,
}

/// Answers `GET|POST /repos/<owner>/<repo>/pulls`.
struct Pulls {
    opened: std::sync::Arc<Mutex<std::collections::HashSet<String>>>,
    pr: Value,
}

impl Respond for Pulls {
    fn respond(&self, req: &wiremock::Request) -> ResponseTemplate {
        let path = req.url.path().to_string();
        let mut opened = self.opened.lock().unwrap();
        if req.method.as_str() == "POST" {
            opened.insert(path);
            return ResponseTemplate::new(201).set_body_json(&self.pr);
        }
        let list = if opened.contains(&path) { json!([self.pr]) } else { json!([]) };
        ResponseTemplate::new(200).set_body_json(list)
    }
}

impl Forge {
    fn start() -> Forge {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let pr = fixture_json("github-api/pulls.create.201.json")["response"]["body"].clone();
        let server = rt.block_on(async {
            let server = MockServer::start().await;
            Mock::given(path_regex(r"^/repos/[^/]+/[^/]+/pulls$"))
                .respond_with(Pulls { opened: Default::default(), pr })
                .mount(&server)
                .await;
            server
        });
        Forge { server, rt }
    }

    /// Pull requests posted to `owner/lantern`.
    fn posted(&self, owner: &str) -> usize {
        let path = format!("/repos/{owner}/lantern/pulls");
        let all = self.rt.block_on(self.server.received_requests()).unwrap_or_default();
        all.iter().filter(|r| r.method.as_str() == "POST" && r.url.path() == path).count()
    }
}

/// Makes the execution mergeable: an `origin` (a bare repository), a project linked to
/// `owner/lantern` on the mock forge, and a spec whose execution it is.
fn link_to_forge(ws: &Workspace, owner: &str) {
    let bare = ws.tmp.path().join("origin.git");
    let out = std::process::Command::new("git").args(["init", "-q", "--bare"]).arg(&bare).output().unwrap();
    assert!(out.status.success());
    ws.git(&["remote", "add", "origin", bare.to_str().unwrap()]);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let store = baton::store::Store::open(&ws.data().join("baton.db")).await.unwrap();
        let at = "2026-12-01T00:00:00Z".to_string();
        store
            .insert_project(&baton::store::ProjectRow {
                name: "lantern".into(),
                repo_path: ws.repo().display().to_string(),
                default_branch: "main".into(),
                agent_profile: "demo".into(),
                test_command: String::new(),
                forge_url: String::new(),
                max_agents: 0,
                created_at: at.clone(),
                require_separate_reviewer: false,
                trigger_label: String::new(),
                forge_repo: format!("{owner}/lantern"),
                budget_usd: None,
                repo_url: String::new(),
            })
            .await
            .unwrap();
        let spec = baton::store::NewSpec {
            project: "lantern".into(),
            title: "Crash everywhere".into(),
            body: "Survive a crash anywhere.".into(),
            source: "board".into(),
            source_url: String::new(),
            source_meta: "{}".into(),
            source_key: String::new(),
            priority: 1,
            status: "executing".into(),
            actor: "tester".into(),
            at,
        };
        let baton::store::SpecInsert::Created(id) = store.insert_spec(&spec).await.unwrap() else {
            panic!("spec not created");
        };
        store.attach_execution(id, TASK).await.unwrap();
        store.close().await;
    });
}

/// Stage `i` of the run, with `env` set.
fn stage(ws: &Workspace, plan: &Path, forge: &Forge, i: usize, env: &[(&str, String)]) -> Output {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    match i {
        3 => ws
            .baton()
            .envs(env)
            .env("BATON_GITHUB_API_URL", forge.server.uri())
            .env("GITHUB_TOKEN", TOKEN)
            .args(["merge", TASK])
            .output()
            .unwrap(),
        1 => ws
            .baton()
            .envs(env)
            .args(["execute", "approve", "--task-id", TASK, "--phase-id", "2", "--result", "approve"])
            .output()
            .unwrap(),
        _ => ws.run_plan_with(plan, &[], &env),
    }
}

/// The exit code stage `i` ends with when nothing crashes.
fn expected_code(i: usize) -> i32 {
    if i == 0 {
        3
    } else {
        0
    }
}

fn killed(out: &Output) -> bool {
    out.status.signal() == Some(9)
}

/// One case: the whole run with stage `at` crashing at point `k` of `var`. `Ok(false)` when
/// that stage has fewer than `k` points (it ended normally); `Ok(true)` when it crashed, was
/// resumed and every check passed; `Err` says what broke.
fn case(forge: &Forge, var: &str, at: Option<usize>, k: u64) -> Result<bool, String> {
    static CASES: AtomicU64 = AtomicU64::new(0);
    let owner = format!("case-{}", CASES.fetch_add(1, Ordering::SeqCst));
    let ws = Workspace::with_repo(&[("README.md", "x\n")]);
    let marker = ws.tmp.path().join("gate-failed-once");
    let plan = ws.write("plan.json", &plan(&marker));
    let name = at.map_or_else(|| "no crash".to_string(), |at| format!("{var}={k} in \"{}\"", STAGES[at]));
    for (i, stage_name) in STAGES.iter().enumerate() {
        if i == 3 {
            link_to_forge(&ws, &owner);
        }
        let env = if Some(i) == at { vec![(var, k.to_string())] } else { Vec::new() };
        let mut out = stage(&ws, &plan, forge, i, &env);
        if Some(i) == at {
            if !killed(&out) {
                return Ok(false);
            }
            // Resume: the same command again (an approval only while it is still pending; a
            // run only while the execution is not complete: resuming a complete one is refused).
            let now = status_of(&ws)["status"].clone();
            if (i == 1 && now != "approval_pending") || (i < 3 && now == "complete") {
                continue;
            }
            out = stage(&ws, &plan, forge, i, &[]);
        }
        if code(&out) != expected_code(i) {
            return Err(format!(
                "{name}: \"{stage_name}\" exited {} (expected {}):\n{}\n{}",
                code(&out),
                expected_code(i),
                stdout(&out),
                stderr(&out)
            ));
        }
    }
    check(&ws, &name)?;
    let posted = forge.posted(&owner);
    if posted != 1 {
        return Err(format!("{name}: {posted} pull requests posted"));
    }
    let origin = ws.tmp.path().join("origin.git");
    let pushed = ws.git(&["--git-dir", origin.to_str().unwrap(), "rev-parse", &format!("baton/{TASK}")]);
    let tip = ws.git(&["rev-parse", &format!("baton/{TASK}")]);
    if pushed != tip {
        return Err(format!("{name}: the remote's feature branch is {pushed}, not {tip}"));
    }
    Ok(true)
}

/// `execute status --json` of the task, `null` when there is no execution yet.
fn status_of(ws: &Workspace) -> Value {
    let out = ws.run(&["execute", "status", "--json", "--task-id", TASK]);
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

/// The invariants after a crash and the resumed run.
fn check(ws: &Workspace, name: &str) -> Result<(), String> {
    let status = status_of(ws);
    if status["status"] != "complete" {
        return Err(format!("{name}: status {}", status["status"]));
    }
    let gates = status["gate_results"].as_array().cloned().unwrap_or_default();
    let (failed, passed) =
        (gates.iter().filter(|g| g["passed"] == false).count(), gates.iter().filter(|g| g["passed"] == true).count());
    // A crash after the gate ran but before its result was recorded runs it again, and the
    // second run passes: no failure recorded then.
    if passed != 1 || failed > 1 || (name == "no crash" && failed != 1) {
        return Err(format!("{name}: gate results {gates:?}"));
    }
    let branch = format!("baton/{TASK}");
    let log = ws.git(&["log", "--format=%(trailers:key=Baton-Step,valueonly,separator=)", &branch]);
    let files = ws.git(&["ls-tree", "-r", "--name-only", &branch]);
    for (id, file) in WORKERS.iter().zip(["a.md", "b.md", "c.md", "d.md", "e.md", "f.md", "g.md"]) {
        let result = &status["step_results"][*id];
        if result["status"] != "complete" {
            return Err(format!("{name}: {id} is {}", result["status"]));
        }
        let attempts = result["attempt"].as_u64().unwrap_or(0) as usize;
        let launches = ws.launches(TASK, id);
        if launches != attempts {
            return Err(format!("{name}: {id} has {attempts} attempts but its agent was launched {launches} times"));
        }
        let commits = log.lines().filter(|l| l.trim() == *id).count();
        if commits != 1 {
            return Err(format!("{name}: the feature branch holds {commits} commits of {id}"));
        }
        if !files.lines().any(|f| f == file) {
            return Err(format!("{name}: {file} of {id} is not on the feature branch"));
        }
    }
    let relaunched: Vec<String> = std::fs::read_dir(ws.data().join("runs").join(TASK))
        .into_iter()
        .flatten()
        .flatten()
        .flat_map(|step| std::fs::read_dir(step.path()).into_iter().flatten().flatten())
        .map(|d| d.path().display().to_string())
        .filter(|p| p.contains("-r"))
        .collect();
    if !relaunched.is_empty() {
        return Err(format!("{name}: attempts launched again: {relaunched:?}"));
    }
    for args in [["audit", "verify", TASK], ["replay", TASK, ""]] {
        let args: Vec<&str> = args.into_iter().filter(|a| !a.is_empty()).collect();
        let out = ws.run(&args);
        if code(&out) != 0 {
            return Err(format!("{name}: `baton {}` failed: {}{}", args.join(" "), stdout(&out), stderr(&out)));
        }
    }
    Ok(())
}

/// Every k of every stage for `var`, on two threads: (points covered, failures).
fn every_point(var: &str) -> (usize, Vec<String>) {
    let forge = Forge::start();
    // The run itself, without a crash: the gate fails once, then passes.
    assert_eq!(case(&forge, var, None, 0), Ok(true));
    let covered = AtomicU64::new(0);
    let failures = Mutex::new(Vec::new());
    for (at, stage_name) in STAGES.iter().enumerate() {
        let next = AtomicU64::new(1);
        // The first k found beyond the stage's last point; cases above it are not run.
        let end = AtomicU64::new(u64::MAX);
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| loop {
                    let k = next.fetch_add(1, Ordering::SeqCst);
                    if k >= end.load(Ordering::SeqCst) || k > 500 {
                        return;
                    }
                    match case(&forge, var, Some(at), k) {
                        Ok(true) => {
                            covered.fetch_add(1, Ordering::SeqCst);
                        }
                        Ok(false) => {
                            end.fetch_min(k, Ordering::SeqCst);
                        }
                        Err(e) => failures.lock().unwrap().push(e),
                    }
                });
            }
        });
        let last = end.load(Ordering::SeqCst).saturating_sub(1);
        eprintln!("{var}: \"{stage_name}\" crashed at each of its {last} points");
    }
    (covered.load(Ordering::SeqCst) as usize, failures.into_inner().unwrap())
}

#[test]
fn a_crash_after_any_store_commit_resumes_without_losing_or_repeating_work() {
    let (covered, failures) = every_point("BATON_CRASH_AFTER_COMMIT");
    eprintln!("covered {covered} crash points after a store commit");
    assert!(failures.is_empty(), "{} of the crash points broke the run:\n{}", failures.len(), failures.join("\n\n"));
    assert!(covered >= 20, "only {covered} crash points: the hook is not counting commits");
}

#[test]
fn a_crash_before_any_git_or_forge_side_effect_resumes_without_losing_or_repeating_work() {
    let (covered, failures) = every_point("BATON_CRASH_BEFORE_EFFECT");
    eprintln!("covered {covered} crash points before a git or forge side effect");
    assert!(failures.is_empty(), "{} of the crash points broke the run:\n{}", failures.len(), failures.join("\n\n"));
    assert!(covered >= 20, "only {covered} crash points: the hook is not counting git and forge side effects");
}
