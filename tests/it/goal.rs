//! Goal-driven execution end to end: `baton goal` and plans with a `completion_condition`, run
//! by the real driver with the demo agent playing worker and evaluator on a real repository;
//! killed while and after the evaluator runs, resumed without judging twice or losing the
//! round-out budget.

use crate::common::*;

/// Commits on `branch` whose `Baton-Step` trailer is `step`.
fn commits_for_step(ws: &Workspace, branch: &str, step: &str) -> usize {
    ws.git(&["log", "--format=%(trailers:key=Baton-Step,valueonly,separator=)", branch])
        .lines()
        .filter(|l| l.trim() == step)
        .count()
}

fn round_outs(status: &serde_json::Value) -> usize {
    status["amendments"].as_array().unwrap().iter().filter(|a| a["trigger"] == "goal_round_out").count()
}

/// Phase 1 is empty (so the evaluator is the first agent launched), phase 2 builds behind a
/// gate; the condition carries the demo evaluator's directives.
fn goal_plan(task_id: &str, condition: &str, max_cycles: u32) -> String {
    serde_json::json!({
        "task_id": task_id,
        "task_summary": "Document the greeting",
        "completion_condition": condition,
        "max_amend_cycles": max_cycles,
        "phases": [
            {"phase_id": 1, "name": "Start", "steps": []},
            {"phase_id": 2, "name": "Build", "steps": [
                {"step_id": "2.1", "agent_name": "writer", "task_description": "Write the docs.", "deliverables": ["docs.md"]}
             ],
             "gate": {"gate_type": "test", "command": "test -s docs.md"}}
        ]
    })
    .to_string()
}

#[test]
fn baton_goal_writes_a_plan_rounds_it_out_and_completes() {
    let ws = Workspace::with_repo(&[("README.md", "x\n")]);
    let repo = ws.repo();
    let out = ws
        .baton()
        .args(["goal", "The README has a usage section [demo: verdict=met_after=1]", "--task-id", "goal-cli"])
        .args(["--agent", "demo", "--gate", "test -s baton-demo/1.1.md", "--repo"])
        .arg(&repo)
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}\n{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("ACTION: COMPLETE"), "{}", stdout(&out));
    assert!(stderr(&out).contains("goal met: 2 check(s), 1 of 3 round-out cycle(s) used"), "{}", stderr(&out));
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ws.data().join("plans/goal-cli.json")).unwrap()).unwrap();
    assert_eq!(saved["completion_condition"], "The README has a usage section [demo: verdict=met_after=1]");
    assert_eq!(saved["goal_evaluator"], "code-reviewer");
    assert_eq!(saved["max_amend_cycles"], 3);
    assert!(ws.data().join("plans/current.json").exists(), "saved like `baton plan`");
    // Another goal under the same task id is refused before its plan file is written (found by a
    // tester: --no-run overwrote the existing execution's plan file).
    let again = ws.run(&["goal", "Something else", "--task-id", "goal-cli", "--no-run"]);
    assert_eq!(code(&again), 2, "{}", stderr(&again));
    assert!(stderr(&again).contains("already exists with another plan"), "{}", stderr(&again));
    let kept: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ws.data().join("plans/goal-cli.json")).unwrap()).unwrap();
    assert_eq!(kept, saved);

    let status = ws.status("goal-cli");
    assert_eq!(status["status"], "complete");
    let goal = &status["goal"];
    assert_eq!(goal["status"], "met");
    assert_eq!(goal["amend_cycles_used"], 1);
    let checks = goal["checks"].as_array().unwrap();
    assert_eq!(checks.len(), 2);
    assert_eq!((checks[0]["check_id"].as_str(), checks[0]["met"].as_bool()), (Some("g1"), Some(false)));
    assert_eq!(checks[0]["phases_added"], serde_json::json!([2]));
    assert_eq!((checks[1]["step_id"].as_str(), checks[1]["met"].as_bool()), (Some("goal.2"), Some(true)));
    assert_eq!(round_outs(&status), 1);
    assert_eq!(status["plan"]["phases"][1]["name"], "Goal round-out");
    // The worker's commits are on the branch; the evaluators' are not (nothing they write is kept).
    for (step, commits) in [("1.1", 1), ("2.1", 1), ("goal.1", 0), ("goal.2", 0)] {
        assert_eq!(commits_for_step(&ws, "baton/goal-cli", step), commits, "commits of {step}");
    }
    let replay = ws.run(&["replay", "goal-cli"]);
    assert_eq!(code(&replay), 0, "{}", stdout(&replay));
}

#[test]
fn an_exhausted_goal_fails_the_run_with_the_reason() {
    let ws = Workspace::with_repo(&[("README.md", "x\n")]);
    let plan = ws.write("plan.json", &goal_plan("goal-out", "Docs exist [demo: verdict=not_met]", 1));
    let out = ws.run_plan(&plan);
    assert_eq!(code(&out), 4, "{}\n{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("ACTION: FAILED"), "{text}");
    assert!(text.contains("goal not met at the last phase boundary"), "{text}");
    assert!(text.contains("the round-out budget is spent (1 of 1 cycles used)"), "{text}");
    let status = ws.status("goal-out");
    assert_eq!(status["goal"]["status"], "exhausted");
    assert_eq!(round_outs(&status), 1, "exactly one round-out");
    // goal.1 (after Start: amended), goal.2 (after the round-out: budget spent, Build still
    // planned, goes on), goal.3 (after Build: the last boundary, fails).
    let decisions: Vec<String> = status["goal"]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["decision"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(decisions.len(), 3, "{decisions:?}");
    assert!(decisions[1].ends_with("the planned phases go on"), "{decisions:?}");
    assert!(decisions[2].starts_with("failed:"), "{decisions:?}");
}

#[test]
fn an_invalid_verdict_fails_the_run_saying_so() {
    let ws = Workspace::with_repo(&[("README.md", "x\n")]);
    let plan = ws.write("plan.json", &goal_plan("goal-bad", "Docs exist [demo: verdict=invalid]", 3));
    let out = ws.run_plan(&plan);
    assert_eq!(code(&out), 4, "{}\n{}", stdout(&out), stderr(&out));
    assert!(
        stdout(&out).contains("step goal.1 failed: invalid goal verdict: no JSON verdict found"),
        "{}",
        stdout(&out)
    );
    let status = ws.status("goal-bad");
    assert!(status["goal"].is_null(), "no check was guessed: {}", status["goal"]);
    assert_eq!(status["step_results"]["goal.1"]["status"], "failed");
}

#[test]
fn baton_goal_names_a_bad_task_id_flag() {
    // Found by a tester: a bad --task-id was reported as "<data>/plans/../x.json is not a
    // valid plan", a file the user never wrote.
    let ws = Workspace::with_repo(&[("README.md", "x\n")]);
    for bad in ["../x", "a b", "", "x.lock"] {
        let out = ws.run(&["goal", "Docs exist", "--task-id", bad, "--no-run"]);
        assert_eq!(code(&out), 2, "{bad:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains("--task-id") && !err.contains("not a valid plan"), "{bad:?}: {err}");
        assert!(!ws.data().join("plans").join("current.json").exists(), "nothing written for {bad:?}");
    }
}

#[test]
fn baton_goal_refuses_a_bad_repo_or_agent_before_writing_its_plan() {
    // Found by a tester: the plan file was written, then the run refused the flag.
    let ws = Workspace::with_repo(&[("README.md", "x\n")]);
    let missing = ws.data().join("no-such-repo");
    let not_git = ws.data();
    let repo = ws.repo();
    let cases: [(&[&str], &std::path::Path, &str); 3] = [
        (&["--agent", "demo"], &missing, "--repo"),
        (&["--agent", "demo"], &not_git, "--repo"),
        (&["--agent", "bogus"], &repo, "--agent"),
    ];
    for (flags, repo, named) in cases {
        let out = ws.baton().args(["goal", "Docs exist"]).args(flags).arg("--repo").arg(repo).output().unwrap();
        assert_eq!(code(&out), 2, "{flags:?} {}: {}", repo.display(), stderr(&out));
        assert!(stderr(&out).contains(named), "{}", stderr(&out));
        assert!(!ws.data().join("plans").exists(), "no plan written for {flags:?} {}", repo.display());
    }
}

#[test]
fn an_invalid_verdict_from_baton_goal_names_the_command_that_asks_again() {
    // Found by a tester: the run failed on an invalid verdict without saying what to do.
    let ws = Workspace::with_repo(&[("README.md", "x\n")]);
    let repo = ws.repo();
    let out = ws
        .baton()
        .args(["goal", "Docs exist [demo: verdict=invalid]", "--task-id", "goal-inv", "--agent", "demo", "--repo"])
        .arg(&repo)
        .output()
        .unwrap();
    assert_eq!(code(&out), 4, "{}\n{}", stdout(&out), stderr(&out));
    let hint = "`baton execute retry-step --task-id goal-inv --step-id goal.1` asks the evaluator again";
    assert!(stdout(&out).contains(hint), "{}", stdout(&out));
    let retry = ws.run(&["execute", "retry-step", "--task-id", "goal-inv", "--step-id", "goal.1"]);
    assert_eq!(code(&retry), 0, "the suggested command works: {}", stderr(&retry));
}

#[test]
fn every_crash_point_around_a_goal_check_resumes_without_judging_twice() {
    for point in baton::runtime::driver::CRASH_POINTS {
        let ws = Workspace::with_repo(&[("README.md", "x\n")]);
        let task = format!("goal-crash-{point}");
        let plan = ws.write("plan.json", &goal_plan(&task, "Docs exist [demo: verdict=met_after=1]", 3));
        let crashed = ws.run_plan_with(&plan, &[], &[("BATON_CRASH_AT", point)]);
        assert_eq!(code(&crashed), 137, "{point}: {}", stderr(&crashed));
        if *point != "before-gate-record" {
            assert!(stderr(&crashed).contains("dispatched goal.1"), "{point}: crashed around the evaluator");
        }
        if *point == "after-record" {
            let mid = ws.status(&task);
            assert_eq!(mid["goal"]["amend_cycles_used"], 1, "the verdict was journaled with its counters");
            assert_eq!(mid["goal"]["checks"][0]["met"], false);
        }
        let resumed = ws.run_plan(&plan);
        assert_eq!(code(&resumed), 0, "{point}: {}\n{}", stdout(&resumed), stderr(&resumed));
        assert!(stdout(&resumed).contains("ACTION: COMPLETE"), "{point}");
        // goal.1 judged the empty Start phase (not met: a round-out phase 2.1 went in), goal.2
        // the round-out (met), goal.3 the Build phase, renumbered 3 (met).
        for step in ["goal.1", "goal.2", "goal.3", "2.1", "3.1"] {
            assert_eq!(ws.launches(&task, step), 1, "{point}: agent launches of {step}");
        }
        let status = ws.status(&task);
        assert_eq!(status["goal"]["amend_cycles_used"], 1, "{point}");
        assert_eq!(status["goal"]["checks"].as_array().unwrap().len(), 3, "{point}");
        assert_eq!(round_outs(&status), 1, "{point}");
        assert_eq!(commits_for_step(&ws, &format!("baton/{task}"), "3.1"), 1, "{point}");
        let replay = ws.run(&["replay", &task]);
        assert_eq!(code(&replay), 0, "{point}: {}", stdout(&replay));
    }
}

#[test]
fn kill_9_while_the_evaluator_runs_re_adopts_it() {
    let ws = Workspace::with_repo(&[("README.md", "x\n")]);
    let plan = ws.write("plan.json", &goal_plan("goal-adopt", "Docs exist [demo: verdict=met] [demo: sleep=2]", 3));
    ws.kill_run_once_started(&plan, &ws.data().join("runs/goal-adopt/goal.1/1/started.json"));
    let resumed = ws.run_plan(&plan);
    assert_eq!(code(&resumed), 0, "{}\n{}", stdout(&resumed), stderr(&resumed));
    assert!(
        stderr(&resumed).contains("recovering goal.1: attempt 1 is still running; re-adopting it")
            || stderr(&resumed).contains("recovering goal.1: attempt 1 finished while its driver was stopped"),
        "{}",
        stderr(&resumed)
    );
    assert_eq!(ws.launches("goal-adopt", "goal.1"), 1, "the evaluation ran once");
    assert_eq!(ws.launches("goal-adopt", "goal.2"), 1);
    let status = ws.status("goal-adopt");
    assert_eq!(status["goal"]["checks"].as_array().unwrap().len(), 2);
    assert_eq!(status["goal"]["status"], "met");
}

#[tokio::test]
async fn the_execution_page_shows_each_verdict_under_its_evaluator_step() {
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use tower::ServiceExt as _;

    let ws = Workspace::with_repo(&[("README.md", "x\n")]);
    let plan = ws.write("plan.json", &goal_plan("goal-page", "Docs <b>exist</b> [demo: verdict=met_after=1]", 3));
    let out = ws.run_plan(&plan);
    assert_eq!(code(&out), 0, "{}\n{}", stdout(&out), stderr(&out));
    let data = baton::runtime::config::DataDir::open(&ws.data()).unwrap();
    let execs = baton::runtime::executions::Executions::open(data).await.unwrap();
    let response = baton::web::app(baton::web::AppState::new(execs).unwrap())
        .oneshot(Request::get("/executions/goal-page").header("host", "localhost").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let bytes = http_body_util::BodyExt::collect(response.into_body()).await.unwrap().to_bytes();
    let html = String::from_utf8(bytes.to_vec()).unwrap();
    assert!(html.contains("id=\"step-goal.1\""), "the evaluator step is on the page");
    let signals = html.split("id=\"signals-goal.1\"").nth(1).expect("goal.1 lists its verdict");
    let signals = &signals[..signals.find("</tr>").unwrap()];
    assert!(signals.contains("<li>goal g1: not met</li>"), "{signals}");
    assert!(
        signals.contains("<li>decision: not met: amended in 1 phase(s) [2] (round-out cycle 1 of 3)</li>"),
        "{signals}"
    );
    assert!(signals.contains("Docs &#60;b&#62;exist") && !signals.contains("<b>"), "escaped: {signals}");
    assert!(html.contains("<li>goal g2: met</li>"));
}

#[test]
fn an_orchestrator_gets_the_evaluator_as_a_dispatch_and_records_its_verdict() {
    let ws = Workspace::with_repo(&[("README.md", "x\n")]);
    let plan = serde_json::json!({
        "task_id": "goal-orch", "task_summary": "x", "completion_condition": "docs exist", "max_amend_cycles": 1,
        "phases": [{"phase_id": 1, "name": "P", "steps": [{"step_id": "1.1", "agent_name": "dev", "task_description": "do"}]}]
    });
    let plan = ws.write("plan.json", &plan.to_string());
    let start = ws.baton().args(["execute", "start", "--plan"]).arg(&plan).output().unwrap();
    assert_eq!(code(&start), 0, "{}", stderr(&start));
    let next = ws.run(&["execute", "record", "--task-id", "goal-orch", "--step-id", "1.1", "--agent", "dev"]);
    let text = stdout(&next);
    assert!(
        text.contains("ACTION: DISPATCH") && text.contains("Step: goal.1") && text.contains("Type: goal_evaluation")
    );
    assert!(text.contains("## Completion condition\ndocs exist"), "{text}");
    let suggest = r#"{"met": false, "missing": ["docs"], "suggested_phases": [{"name": "Docs", "steps": [{"agent_name": "writer", "task_description": "Write docs"}]}]}"#;
    let args =
        ["execute", "record", "--task-id", "goal-orch", "--step-id", "goal.1", "--agent", "code-reviewer", "--outcome"];
    let out = ws.baton().args(args).arg(suggest).output().unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stdout(&out).contains("Step: 2.1"), "the round-out phase is next: {}", stdout(&out));
    let next = ws.run(&["execute", "record", "--task-id", "goal-orch", "--step-id", "2.1", "--agent", "writer"]);
    assert!(stdout(&next).contains("Step: goal.2"), "{}", stdout(&next));
    let mut args = args;
    args[5] = "goal.2";
    let out = ws.baton().args(args).arg(r#"{"met": false}"#).output().unwrap();
    assert_eq!(code(&out), 4, "{}", stdout(&out));
    assert!(stdout(&out).contains("goal not met at the last phase boundary (check g2, phase 2)"), "{}", stdout(&out));
    let out = ws.baton().args(args).arg(r#"{"met": true}"#).output().unwrap();
    assert_eq!(code(&out), 2, "a failed execution takes no more verdicts: {}", stderr(&out));
}

#[test]
fn an_evaluator_counts_against_the_budget_ceiling_and_runs_after_a_raise() {
    let ws = Workspace::with_repo(&[("README.md", "x\n")]);
    let plan = serde_json::json!({
        "task_id": "goal-budget", "task_summary": "x", "completion_condition": "docs exist [demo: verdict=met]",
        "phases": [{"phase_id": 1, "name": "P", "steps": [
            {"step_id": "1.1", "agent_name": "dev", "task_description": "Write docs. [demo: cost=0.20]", "deliverables": ["docs.md"]}
        ]}]
    });
    let plan = ws.write("plan.json", &plan.to_string());
    // No history: every step, the evaluator included, is forecast at the price table's $0.25.
    // 1.1 fits under $0.30; once it reports $0.20, goal.1 ($0.20 + $0.25) does not.
    let out = ws
        .baton()
        .args(["execute", "run", "--agent", "demo", "--max-spend-usd=0.30", "--plan"])
        .arg(&plan)
        .arg("--repo")
        .arg(ws.repo())
        .output()
        .unwrap();
    assert_eq!(code(&out), 3, "{}\n{}", stdout(&out), stderr(&out));
    assert_eq!(ws.status("goal-budget")["status"], "budget_exceeded");
    assert_eq!(ws.launches("goal-budget", "goal.1"), 0, "the evaluator is not launched over the ceiling");
    let raise = ws.run(&["execute", "budget", "--task-id", "goal-budget", "--raise", "1"]);
    assert_eq!(code(&raise), 0, "{}\n{}", stdout(&raise), stderr(&raise));
    assert!(stdout(&raise).contains("Step: goal.1"), "the evaluator is next: {}", stdout(&raise));
    let resumed = ws.run(&["execute", "run", "--task-id", "goal-budget"]);
    assert_eq!(code(&resumed), 0, "{}\n{}", stdout(&resumed), stderr(&resumed));
    assert!(stdout(&resumed).contains("ACTION: COMPLETE"));
    assert_eq!(ws.launches("goal-budget", "goal.1"), 1);
    assert_eq!(ws.status("goal-budget")["goal"]["status"], "met");
}
