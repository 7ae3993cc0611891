//! `baton demo` and `execute run` end to end: real agents, real worktrees, one branch.

use crate::common::*;

#[test]
fn demo_runs_to_complete_with_one_commit_per_changing_step() {
    let ws = Workspace::with_repo(&[("x", "x")]);
    let out = ws.run(&["demo"]);
    assert_eq!(code(&out), 0, "{}\n{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("ACTION: COMPLETE"), "{text}");
    assert!(stderr(&out).contains("notice: approving phase 1 automatically"), "{}", stderr(&out));
    let branch = text.lines().find_map(|l| l.strip_prefix("Feature branch: ")).unwrap().trim().to_string();
    let task_id = branch.strip_prefix("baton/").unwrap();
    let repo = ws.data().join("demo/repo");
    let log = std::process::Command::new("git")
        .args([
            "-C",
            repo.to_str().unwrap(),
            "log",
            "--format=%an|%(trailers:key=Baton-Step,valueonly,separator=)",
            &branch,
        ])
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&log.stdout).to_string();
    let mut steps: Vec<&str> = log.lines().filter_map(|l| l.split('|').nth(1)).filter(|s| !s.is_empty()).collect();
    steps.sort_unstable();
    assert_eq!(steps, vec!["1.1", "2.1", "2.2", "3.1"], "one commit per changing step: {log}");
    assert!(log.contains("architect|1.1"), "{log}");
    // The journal replays to the stored state, and its hash chain holds.
    let replay = ws.run(&["replay", task_id]);
    assert_eq!(code(&replay), 0, "{}", stdout(&replay));
    assert!(stdout(&replay).contains("state matches the stored snapshot + journal: yes"));
    let audit = ws.run(&["audit", "verify", task_id]);
    assert_eq!(code(&audit), 0);
    assert!(stdout(&audit).contains("hash chain intact"));
}

#[test]
fn user_checkout_is_never_modified_and_branch_holds_every_step() {
    let ws = Workspace::with_repo(&[("README.md", "hello\n")]);
    let head_before = ws.git(&["rev-parse", "HEAD"]);
    let plan = ws.write("plan.json", &small_plan("small-1", ""));
    let out = ws.run_plan(&plan);
    assert_eq!(code(&out), 0, "{}\n{}", stdout(&out), stderr(&out));
    assert_eq!(ws.git(&["rev-parse", "HEAD"]), head_before);
    assert_eq!(ws.git(&["status", "--porcelain"]), "");
    let files = ws.git(&["ls-tree", "--name-only", "baton/small-1"]);
    for f in ["a.md", "b.md", "c.md", "README.md"] {
        assert!(files.lines().any(|l| l == f), "{f} missing from the branch: {files}");
    }
    let status = ws.status("small-1");
    assert_eq!(status["status"], "complete");
    // Successful attempts' worktrees are removed.
    let worktrees = ws.git(&["worktree", "list", "--porcelain"]);
    assert!(!worktrees.contains("small-1/1.1"), "{worktrees}");
    // A final execution is refused.
    let again = ws.run_plan(&plan);
    assert_eq!(code(&again), 2);
    assert!(stderr(&again).contains("is complete"), "{}", stderr(&again));
}

#[test]
fn a_failing_agent_fails_the_step_and_keeps_its_worktree() {
    let ws = Workspace::with_repo(&[("README.md", "hello\n")]);
    let plan = ws.write("plan.json", &small_plan("fail-1", "[demo: fail]"));
    let out = ws.run_plan(&plan);
    assert_eq!(code(&out), 4, "{}\n{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("ACTION: FAILED"), "{}", stdout(&out));
    assert!(stdout(&out).contains("step 1.1 failed"), "{}", stdout(&out));
    let worktrees = ws.git(&["worktree", "list", "--porcelain"]);
    assert!(worktrees.contains("fail-1/1.1-1"), "failed attempt's worktree kept: {worktrees}");
    // retry-step reopens it; the step runs again (the directive still fails it).
    let retry = ws.run(&["execute", "retry-step", "--task-id", "fail-1", "--step-id", "1.1"]);
    assert_eq!(code(&retry), 0, "{}", stderr(&retry));
    assert!(stdout(&retry).contains("ACTION: DISPATCH"), "{}", stdout(&retry));
}

#[test]
fn changes_outside_allowed_paths_fail_the_step_naming_the_files() {
    let ws = Workspace::with_repo(&[("README.md", "hello\n")]);
    let plan = serde_json::json!({
        "task_id": "paths-1", "task_summary": "s",
        "phases": [{"phase_id": 1, "name": "P", "steps": [
            {"step_id": "1.1", "agent_name": "a", "task_description": "write", "deliverables": ["src/x.md"],
             "blocked_paths": ["src/"]}
        ]}]
    });
    let plan = ws.write("plan.json", &plan.to_string());
    let out = ws.run_plan(&plan);
    assert_eq!(code(&out), 4, "{}\n{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("src/x.md"), "{}", stdout(&out));
    assert!(!ws.git(&["ls-tree", "-r", "--name-only", "baton/paths-1"]).contains("src/x.md"));
}

#[test]
fn a_missing_agent_binary_fails_the_step_with_that_message() {
    let ws = Workspace::with_repo(&[("README.md", "hello\n")]);
    std::fs::create_dir_all(ws.data()).unwrap();
    std::fs::write(
        ws.data().join("baton.toml"),
        "[agents.alpha]\nprofile = 'command'\ncommand = ['no-such-agent-binary-xyz', '{prompt_file}']\n",
    )
    .unwrap();
    let plan = ws.write("plan.json", &small_plan("missing-1", ""));
    let out = ws.run_plan(&plan);
    assert_eq!(code(&out), 4, "{}\n{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("no-such-agent-binary-xyz"), "{}", stdout(&out));
    assert!(stdout(&out).contains("not found"), "{}", stdout(&out));
}

#[test]
fn a_second_driver_is_refused_with_who_holds_the_lease() {
    let ws = Workspace::with_repo(&[("README.md", "hello\n")]);
    let plan = ws.write("plan.json", &small_plan("lease-1", "[demo: sleep=8]"));
    let mut first = ws
        .baton()
        .args(["execute", "run", "--agent", "demo", "--plan"])
        .arg(&plan)
        .arg("--repo")
        .arg(ws.repo())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait until the first driver has launched its agents.
    let started = ws.data().join("runs/lease-1/1.1/1/started.json");
    for _ in 0..200 {
        if started.exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(started.exists(), "the first driver never launched 1.1");
    let second = ws.run_plan(&plan);
    assert_eq!(code(&second), 2, "{}", stderr(&second));
    assert!(stderr(&second).contains("driven by another process"), "{}", stderr(&second));
    let record = ws.run(&["execute", "record", "--task-id", "lease-1", "--step-id", "1.2", "--agent", "beta"]);
    assert_eq!(code(&record), 2, "{}", stderr(&record));
    // Refused by the lease, or (once 1.2 is dispatched) as a result from outside for the
    // driver's attempt: either way naming the driver.
    assert!(stderr(&record).contains(&format!("pid {}", first.id())), "{}", stderr(&record));
    assert!(first.wait().unwrap().success());
}

fn one_phase(task_id: &str, steps: serde_json::Value) -> String {
    serde_json::json!({"task_id": task_id, "task_summary": "s", "phases": [{"phase_id": 1, "name": "P", "steps": steps}]})
        .to_string()
}

#[test]
fn automation_steps_run_their_command_in_the_worktree_and_no_change_means_no_commit() {
    let ws = Workspace::with_repo(&[("README.md", "hello\n")]);
    let plan = one_phase(
        "auto-1",
        serde_json::json!([
            {"step_id": "1.1", "agent_name": "automation", "task_description": "generate", "step_type": "automation",
             "command": "mkdir -p gen && echo generated > gen/out.txt"},
            {"step_id": "1.2", "agent_name": "dev", "task_description": "look only [demo: noop]", "depends_on": ["1.1"]}
        ]),
    );
    let plan = ws.write("plan.json", &plan);
    let out = ws.run_plan(&plan);
    assert_eq!(code(&out), 0, "{}\n{}", stdout(&out), stderr(&out));
    assert_eq!(ws.git(&["show", "baton/auto-1:gen/out.txt"]), "generated\n");
    let authors = ws.git(&["log", "--format=%an", "baton/auto-1"]);
    assert_eq!(authors.lines().collect::<Vec<_>>(), vec!["automation", "Baton"], "1.2 changed nothing: no commit");
    assert!(!ws.repo().join("gen").exists(), "the user's checkout is untouched");
}

#[test]
fn a_step_over_its_timeout_is_killed_and_fails() {
    let ws = Workspace::with_repo(&[("README.md", "hello\n")]);
    let plan = one_phase(
        "timeout-1",
        serde_json::json!([{"step_id": "1.1", "agent_name": "dev", "task_description": "slow [demo: sleep=30]",
                            "timeout_seconds": 1}]),
    );
    let plan = ws.write("plan.json", &plan);
    let out = ws.run_plan(&plan);
    assert_eq!(code(&out), 4, "{}\n{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("step 1.1 failed: timed out"), "{}", stdout(&out));
    let exit: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ws.data().join("runs/timeout-1/1.1/1/exit.json")).unwrap())
            .unwrap();
    assert_eq!(exit["timed_out"], true);
    assert!(exit["duration_ms"].as_u64().unwrap() < 30_000);
}

#[test]
fn an_interactive_step_waits_for_a_human_and_continues_with_the_reply() {
    let ws = Workspace::with_repo(&[("README.md", "hello\n")]);
    let plan = one_phase(
        "talk-1",
        serde_json::json!([{"step_id": "1.1", "agent_name": "pm", "interactive": true, "max_turns": 4,
            "task_description": "Clarify the scope [demo: interact=Which database should I use?]", "deliverables": ["scope.md"]}]),
    );
    let plan = ws.write("plan.json", &plan);
    let first = ws.run_plan(&plan);
    assert_eq!(code(&first), 3, "{}\n{}", stdout(&first), stderr(&first));
    assert!(stdout(&first).contains("ACTION: INTERACT"), "{}", stdout(&first));
    assert!(stdout(&first).contains("Which database should I use?"));
    let reply = ws.run(&["execute", "interact", "--task-id", "talk-1", "--step-id", "1.1", "--input", "Use SQLite."]);
    assert_eq!(code(&reply), 0, "{}", stderr(&reply));
    assert!(stdout(&reply).contains("ACTION: DISPATCH"), "{}", stdout(&reply));
    let second = ws.run_plan(&plan);
    assert_eq!(code(&second), 0, "{}\n{}", stdout(&second), stderr(&second));
    let prompt = std::fs::read_to_string(ws.data().join("runs/talk-1/1.1/2/prompt.md")).unwrap();
    assert!(prompt.contains("## Human reply\nUse SQLite."), "{prompt}");
    assert_eq!(ws.git(&["show", "--format=", "--name-only", "baton/talk-1"]).trim(), "scope.md");
}

#[test]
fn max_parallel_one_runs_steps_one_at_a_time() {
    let ws = Workspace::with_repo(&[("README.md", "hello\n")]);
    let steps: Vec<serde_json::Value> = (1..=3)
        .map(|i| {
            serde_json::json!({"step_id": format!("1.{i}"), "agent_name": "dev",
            "task_description": "[demo: sleep=1]", "deliverables": [format!("f{i}.md")]})
        })
        .collect();
    let plan = ws.write("plan.json", &one_phase("serial-1", serde_json::Value::Array(steps)));
    let out = ws
        .baton()
        .args(["execute", "run", "--agent", "demo", "--max-parallel", "1", "--plan"])
        .arg(&plan)
        .arg("--repo")
        .arg(ws.repo())
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let mut spans: Vec<(String, String)> = (1..=3)
        .map(|i| {
            let dir = ws.data().join(format!("runs/serial-1/1.{i}/1"));
            let read = |f: &str| -> serde_json::Value {
                serde_json::from_str(&std::fs::read_to_string(dir.join(f)).unwrap()).unwrap()
            };
            (
                read("exit.json")["started_at"].as_str().unwrap().to_string(),
                read("exit.json")["finished_at"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    spans.sort();
    for pair in spans.windows(2) {
        assert!(pair[0].1 <= pair[1].0, "attempts overlapped with --max-parallel 1: {spans:?}");
    }
}

#[test]
fn gc_removes_worktrees_of_final_executions_only() {
    let ws = Workspace::with_repo(&[("README.md", "hello\n")]);
    let plan = ws.write("plan.json", &small_plan("gc-1", "[demo: fail]"));
    assert_eq!(code(&ws.run_plan(&plan)), 4);
    let kept = ws.data().join("worktrees/gc-1/1.1-1");
    assert!(kept.exists());
    assert!(!ws.git(&["for-each-ref", "refs/baton/gc-1/"]).is_empty(), "the failed attempt's ref is kept");
    let young = ws.run(&["gc"]);
    assert_eq!(code(&young), 0);
    assert!(kept.exists(), "younger than 72 h: kept");
    let live = ws.write("live.json", &small_plan("gc-live", ""));
    assert_eq!(code(&ws.run(&["execute", "start", "--plan", live.to_str().unwrap()])), 0);
    let out = ws.run(&["gc", "--hours", "0"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stdout(&out).contains("removed 1 worktrees"), "{}", stdout(&out));
    assert!(!kept.exists());
    assert!(!ws.git(&["worktree", "list"]).contains("gc-1"));
    assert_eq!(ws.git(&["for-each-ref", "refs/baton/gc-1/"]), "", "attempt refs removed");
    assert!(!ws.git(&["branch", "--list", "baton/gc-1"]).is_empty(), "the feature branch stays");
}

#[test]
fn resuming_keeps_the_agent_profile_and_repository_the_execution_started_with() {
    let ws = Workspace::with_repo(&[("README.md", "hello\n")]);
    let plan = serde_json::json!({"task_id": "keep-1", "task_summary": "s", "phases": [
        {"phase_id": 1, "name": "A", "steps": [{"step_id": "1.1", "agent_name": "a", "task_description": "write", "deliverables": ["a.md"]}],
         "approval_required": true},
        {"phase_id": 2, "name": "B", "steps": [{"step_id": "2.1", "agent_name": "b", "task_description": "write", "deliverables": ["b.md"]}]}
    ]});
    let plan = ws.write("plan.json", &plan.to_string());
    assert_eq!(code(&ws.run_plan(&plan)), 3);
    assert_eq!(
        code(&ws.run(&["execute", "approve", "--task-id", "keep-1", "--phase-id", "1", "--result", "approve"])),
        0
    );
    // No --agent, no --repo: the demo profile and the repository of the first run are kept.
    let out = ws.run(&["execute", "run", "--task-id", "keep-1"]);
    assert_eq!(code(&out), 0, "{}\n{}", stdout(&out), stderr(&out));
    let other = Workspace::with_repo(&[("x", "x")]);
    let wrong =
        ws.baton().args(["execute", "run", "--task-id", "keep-1", "--repo"]).arg(other.repo()).output().unwrap();
    assert_eq!(code(&wrong), 2, "{}", stderr(&wrong));
}

#[test]
fn an_attempt_that_cannot_start_fails_its_step_instead_of_stopping_the_driver() {
    let ws = Workspace::with_repo(&[("README.md", "hello\n")]);
    let occupied = ws.data().join("worktrees/occupied-1/1.1-1");
    std::fs::create_dir_all(&occupied).unwrap();
    std::fs::write(occupied.join("precious.txt"), "not baton's").unwrap();
    let plan = ws.write("plan.json", &small_plan("occupied-1", ""));
    let out = ws.run_plan(&plan);
    assert_eq!(code(&out), 4, "{}\n{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("step 1.1 failed: the attempt could not be started"), "{}", stdout(&out));
    assert_eq!(std::fs::read_to_string(occupied.join("precious.txt")).unwrap(), "not baton's");
}

#[test]
fn agents_never_see_forge_tokens_or_baton_secrets() {
    let ws = Workspace::with_repo(&[("README.md", "hello\n")]);
    let plan = one_phase(
        "env-1",
        serde_json::json!([{"step_id": "1.1", "agent_name": "automation", "task_description": "dump the environment",
                            "step_type": "automation", "command": "env | sort > env.txt"}]),
    );
    let plan = ws.write("plan.json", &plan);
    let out = ws.run_plan_with(
        &plan,
        &[],
        &[
            ("GITHUB_TOKEN", "ghp_secret_token"),
            ("ADO_PAT", "ado_secret"),
            ("BATON_GITHUB_WEBHOOK_SECRET", "hook_secret"),
        ],
    );
    assert_eq!(code(&out), 0, "{}\n{}", stdout(&out), stderr(&out));
    let env = ws.git(&["show", "baton/env-1:env.txt"]);
    for secret in ["ghp_secret_token", "ado_secret", "hook_secret", "GITHUB_TOKEN", "ADO_PAT"] {
        assert!(!env.contains(secret), "{secret} leaked into the agent environment:\n{env}");
    }
    assert!(env.contains("BATON_TASK_ID=env-1"), "{env}");
    assert!(env.contains("PATH="), "{env}");
}

#[test]
fn agent_gate_additions_run_after_the_gate_as_their_own_argv_and_unsafe_ones_are_refused() {
    // Passing: the agent's check runs after the plan's gate, in the integration worktree.
    let ws = Workspace::with_repo(&[("README.md", "x\n")]);
    // A fresh-clone tester deleted directories outside the repository with these; refused now.
    let victim = ws.tmp.path().join("victim");
    std::fs::create_dir_all(victim.join("inside")).unwrap();
    let v = victim.display();
    let extra = format!(
        "[demo: gate_addition=test -f a.md] [demo: gate_addition=rm -rf /] \
         [demo: gate_addition=sh -c 'rm -rf {v}'] [demo: gate_addition=find {v} -delete]"
    );
    let plan = ws.write("plan.json", &small_plan("adds-ok", &extra));
    let out = ws.run_plan(&plan);
    assert_eq!(code(&out), 0, "{}\n{}", stdout(&out), stderr(&out));
    assert!(victim.join("inside").is_dir(), "nothing outside the worktree was touched");
    let state = ws.status("adds-ok");
    let gate = &state["gate_results"][0];
    assert_eq!(gate["passed"], true, "{gate}");
    assert!(gate["output"].as_str().unwrap().contains("$ test -f a.md"), "{gate}");
    let step = &state["step_results"]["1.1"];
    assert_eq!(step["gate_additions"], serde_json::json!(["test -f a.md"]));
    let rejected = step["rejected_gate_additions"].as_array().unwrap();
    assert_eq!(rejected.len(), 3, "{rejected:?}");
    assert_eq!(rejected[0]["command"], "rm -rf /");
    assert!(
        rejected.iter().all(|r| r["reason"].as_str().unwrap().contains("destructive")
            || r["reason"].as_str().unwrap().contains("outside the worktree")),
        "{rejected:?}"
    );

    // Failing: an addition that fails fails the gate, on every retry, until the cap.
    let ws = Workspace::with_repo(&[("README.md", "x\n")]);
    let plan = ws.write("plan.json", &small_plan("adds-fail", "[demo: gate_addition=test -f NO_SUCH_FILE]"));
    let out = ws.run_plan(&plan);
    assert_eq!(code(&out), 4, "{}\n{}", stdout(&out), stderr(&out));
    let state = ws.status("adds-fail");
    let runs = state["gate_results"].as_array().unwrap();
    assert_eq!(runs.len(), 3, "the gate failed three times: {runs:?}");
    assert!(runs.iter().all(|g| g["output"].as_str().unwrap().contains("$ test -f NO_SUCH_FILE")));
}

/// Issue 14.4, the inputs that showed it: a gate whose command names `{files}` after a phase
/// that changed no file ran with nothing in place of the files and passed; a test gate with no
/// command was recorded as passed ("auto-approved"). Both are skipped now, with the reason, in
/// the journal, `execute status` (text and JSON) and the run's output, and the run completes.
#[test]
fn a_gate_with_nothing_to_run_is_skipped_with_its_reason_and_never_passes() {
    let ws = Workspace::with_repo(&[("README.md", "x\n")]);
    let plan = serde_json::json!({
        "task_id": "skip-1",
        "task_summary": "Gates with nothing to run",
        "phases": [
            {"phase_id": 1, "name": "Look", "steps": [
                {"step_id": "1.1", "agent_name": "alpha", "task_description": "Only read. [demo: noop]"}],
             // `wc -l` with no file reads its (empty) stdin and exits 0, like `py_compile`.
             "gate": {"gate_type": "lint", "command": "wc -l {files}"}},
            {"phase_id": 2, "name": "Write", "steps": [
                {"step_id": "2.1", "agent_name": "beta", "task_description": "Write c.", "deliverables": ["c.md"]}],
             "gate": {"gate_type": "test", "command": ""}}
        ]
    });
    let plan = ws.write("plan.json", &plan.to_string());
    let out = ws.run_plan(&plan);
    assert_eq!(code(&out), 0, "{}\n{}", stdout(&out), stderr(&out));
    assert!(stderr(&out).contains("gate lint of phase 1 skipped: no files changed"), "{}", stderr(&out));
    let state = ws.status("skip-1");
    assert_eq!(state["status"], "complete");
    let gates = state["gate_results"].as_array().unwrap();
    assert_eq!(gates.len(), 2, "{gates:?}");
    for (g, reason) in gates.iter().zip(["no files changed", "no command"]) {
        assert_eq!(g["passed"], false, "a skipped gate is not a pass: {g}");
        assert_eq!(g["skipped"], reason, "{g}");
        assert!(!g["output"].as_str().unwrap().contains("auto-approved"), "{g}");
    }
    let kinds: Vec<String> = journal(&ws, "skip-1").into_iter().map(|(k, _)| k).collect();
    assert_eq!(kinds.iter().filter(|k| *k == "gate_skipped").count(), 2, "{kinds:?}");
    assert!(!kinds.iter().any(|k| k == "gate_recorded"), "no gate ran: {kinds:?}");
    let text = stdout(&ws.run(&["execute", "status", "--task-id", "skip-1"]));
    assert!(text.contains("gate lint (1 runs, skipped: no files changed)"), "{text}");
    assert!(text.contains("gate test (1 runs, skipped: no command)"), "{text}");
    assert!(!text.contains("passed"), "{text}");
}

/// Issue 14.5, the input that showed it: the user checks out `baton/<task_id>` (here in a second
/// worktree) while the run is under way; consolidation used to fail the step and the execution.
/// Now the run parks it with the reason, keeps the finished step's commit, and after the user
/// switches away `execute resume` + `execute run` complete it with each step's commit once.
#[test]
fn a_feature_branch_checked_out_elsewhere_parks_the_execution_until_the_user_switches_away() {
    let ws = Workspace::with_repo(&[("README.md", "hello\n")]);
    let plan = serde_json::json!({
        "task_id": "park-1",
        "task_summary": "Park when the branch is checked out",
        "phases": [
            {"phase_id": 1, "name": "Build", "steps": [
                {"step_id": "1.1", "agent_name": "alpha", "task_description": "Write a.", "deliverables": ["a.md"]},
                {"step_id": "1.2", "agent_name": "beta", "task_description": "Write b. [demo: sleep=2]",
                 "deliverables": ["b.md"], "depends_on": ["1.1"]}]},
            {"phase_id": 2, "name": "Finish", "steps": [
                {"step_id": "2.1", "agent_name": "gamma", "task_description": "Write c.", "deliverables": ["c.md"]}]}
        ]
    });
    let plan = ws.write("plan.json", &plan.to_string());
    let mut run = ws.baton();
    run.args(["execute", "run", "--agent", "demo", "--plan"]).arg(&plan).arg("--repo").arg(ws.repo());
    let child = run.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    // 1.2 runs once 1.1 is on the branch: the user checks the branch out meanwhile.
    for _ in 0..300 {
        if ws.launches("park-1", "1.2") > 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(ws.launches("park-1", "1.2"), 1, "1.2 never started");
    let other = ws.tmp.path().join("other");
    ws.git(&["worktree", "add", other.to_str().unwrap(), "baton/park-1"]);
    let out = child.wait_with_output().unwrap();
    assert_eq!(code(&out), 3, "parked: waiting for a human\n{}\n{}", stdout(&out), stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("parked: feature branch `baton/park-1` is checked out at "), "{err}");
    assert!(err.contains("other: switch away and resume"), "{err}");
    // Nothing failed, the branch did not move under the user, and the reason is in the status.
    let status = ws.status("park-1");
    assert_eq!(status["status"], "running", "{status}");
    assert_eq!(status["paused"], true);
    assert!(status["parked"].as_str().unwrap().contains("is checked out at"), "{status}");
    assert_eq!(status["step_results"]["1.1"]["status"], "complete");
    assert_eq!(status["step_results"]["1.2"]["status"], "dispatched", "kept, not failed");
    let kinds: Vec<String> = journal(&ws, "park-1").into_iter().map(|(k, _)| k).collect();
    assert_eq!(kinds.iter().filter(|k| *k == "step_recorded").count(), 1, "{kinds:?}");
    let text = stdout(&ws.run(&["execute", "status", "--task-id", "park-1"]));
    assert!(text.contains("  parked: feature branch `baton/park-1` is checked out at "), "{text}");
    let worktree_head = || {
        let out = std::process::Command::new("git").arg("-C").arg(&other).args(["rev-parse", "HEAD"]).output();
        String::from_utf8_lossy(&out.unwrap().stdout).trim().to_string()
    };
    assert_eq!(worktree_head(), ws.git(&["rev-parse", "baton/park-1"]).trim(), "the branch stayed put");

    // Still checked out: running again parks again (nothing lost, nothing failed).
    let again = ws.run(&["execute", "run", "--agent", "demo", "--task-id", "park-1"]);
    assert_eq!(code(&again), 3, "{}\n{}", stdout(&again), stderr(&again));
    assert_eq!(ws.status("park-1")["step_results"]["1.2"]["status"], "dispatched");

    // The user switches away; resume and run: every step lands once.
    let switched = std::process::Command::new("git").arg("-C").arg(&other).args(["switch", "--detach"]).output();
    assert!(switched.unwrap().status.success());
    let resumed = ws.run(&["execute", "resume", "--task-id", "park-1"]);
    assert_eq!(code(&resumed), 0, "{}\n{}", stdout(&resumed), stderr(&resumed));
    assert!(ws.status("park-1").get("parked").is_none(), "resume clears the park");
    let done = ws.run(&["execute", "run", "--agent", "demo", "--task-id", "park-1"]);
    assert_eq!(code(&done), 0, "{}\n{}", stdout(&done), stderr(&done));
    let status = ws.status("park-1");
    assert_eq!(status["status"], "complete", "{status}");
    assert_eq!(status["paused"], false);
    let log = ws.git(&["log", "--format=%(trailers:key=Baton-Step,valueonly,separator=)", "baton/park-1"]);
    let mut steps: Vec<&str> = log.lines().filter(|l| !l.is_empty()).collect();
    steps.sort_unstable();
    assert_eq!(steps, ["1.1", "1.2", "2.1"], "each step's commit once: {log}");
    let files = ws.git(&["ls-tree", "--name-only", "baton/park-1"]);
    for f in ["a.md", "b.md", "c.md"] {
        assert!(files.lines().any(|l| l == f), "{f} missing: {files}");
    }
}

/// Found by a tester: a gate stopped before it ended (timed out, or its driver stopped by a
/// cancel) lost only its `sh`; what the gate had started (a test suite's workers, here a
/// `sleep`) ran on under init. The gate's whole process group goes with it.
#[test]
fn a_gate_that_times_out_leaves_nothing_running() {
    let ws = Workspace::with_repo(&[("README.md", "x\n")]);
    std::fs::create_dir_all(ws.data()).unwrap();
    std::fs::write(ws.data().join("baton.toml"), "[runtime]\ngate_timeout_secs = 1\n").unwrap();
    let pid_file = ws.data().join("bg.pid");
    let gate = format!("sleep 30 & echo $! > '{}'; wait", pid_file.display());
    let plan = serde_json::json!({"task_id": "gate-kill", "task_summary": "A gate that hangs", "phases": [
        {"phase_id": 1, "name": "Build", "gate": {"gate_type": "test", "command": gate}, "steps": [
            {"step_id": "1.1", "agent_name": "alpha", "task_description": "Write a.", "deliverables": ["a.md"]}]}]});
    let plan = ws.write("plan.json", &plan.to_string());
    let out = ws.run_plan(&plan);
    assert_ne!(code(&out), 0, "{}", stderr(&out));
    let status = ws.status("gate-kill").to_string();
    assert!(status.contains("gate timed out after 1 s"), "{status}");
    let pid: i32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
    let pid = nix::unistd::Pid::from_raw(pid);
    for _ in 0..50 {
        if nix::sys::signal::kill(pid, None).is_err() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
    panic!("the gate's background process outlived the gate");
}

/// Found by a tester: firing a spec whose plan the intake rules refuse (its gate command held a
/// NUL) failed at `Executions::create`, after the feature branch and the run directory were
/// made: both stayed behind with no execution to clean them up. The plan is checked first.
#[tokio::test]
async fn a_plan_refused_at_creation_leaves_no_branch_and_no_run_directory() {
    let ws = Workspace::with_repo(&[("README.md", "x\n")]);
    let mut plan: baton::model::plan::MachinePlan = serde_json::from_str(&small_plan("refused-1", "")).unwrap();
    plan.phases[0].gate.as_mut().unwrap().command = "make\u{0}test".into();
    let data = baton::runtime::config::DataDir::open(&ws.data()).unwrap();
    let options = baton::runtime::driver::RunOptions {
        repo: Some(ws.repo().to_path_buf()),
        agent: Some("demo".into()),
        ..Default::default()
    };
    let err = baton::runtime::driver::prepare(&data, plan, &options).await.unwrap_err();
    assert!(format!("{err:#}").contains("holds a NUL character"), "{err:#}");
    assert_eq!(ws.git(&["branch", "--list", "baton/refused-1"]).trim(), "", "no feature branch left");
    assert!(!ws.data().join("runs/refused-1").exists(), "no run directory left");
}

/// While `execute run` drives an execution, another door asking what comes next is told to
/// wait for that driver, not offered its steps: `execute next` had answered DISPATCH for a
/// step the run was about to start, and an orchestrator following it would have run it twice.
#[test]
fn next_names_the_running_driver_instead_of_offering_its_steps() {
    let ws = Workspace::with_repo(&[("README.md", "x\n")]);
    let plan = ws.write("plan.json", &small_plan("told-1", "[demo: sleep=2]"));
    // One agent at a time: while 1.1 runs, the engine's next action is 1.2's DISPATCH.
    let mut child = ws
        .baton()
        .args(["execute", "run", "--agent", "demo", "--max-parallel", "1", "--plan"])
        .arg(&plan)
        .arg("--repo")
        .arg(ws.repo())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_for(&ws.data().join("runs/told-1/1.1/1/started.json"));
    for args in [&["execute", "next", "--task-id", "told-1"][..], &["execute", "next", "--all", "--task-id", "told-1"]]
    {
        let out = ws.run(args);
        assert_eq!(code(&out), 0, "{args:?}: {}", stderr(&out));
        let told = stdout(&out);
        assert!(told.contains("ACTION: WAIT") && !told.contains("DISPATCH"), "{args:?}: {told}");
        assert!(
            told.contains("is driven by the driver") && told.contains(&format!("(pid {} on", child.id())),
            "{args:?}: {told}"
        );
    }
    assert!(child.wait().unwrap().success());
}
