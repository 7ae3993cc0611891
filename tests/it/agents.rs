//! Agent processes as they misbehave in the wild (issue 15): an agent that prints its result and
//! never exits, descendants that start their own session, a worktree deleted while baton was
//! down, an agent that did no work, a commit that deletes most of the repository. Real `baton`
//! drivers and shims, fake agents written as shell scripts.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::*;

/// Writes an executable script `name` into `<tmp>/bin` and returns its path.
fn script(ws: &Workspace, name: &str, body: &str) -> PathBuf {
    let bin = ws.tmp.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let path = bin.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn config(ws: &Workspace, toml: &str) {
    std::fs::create_dir_all(ws.data()).unwrap();
    std::fs::write(ws.data().join("baton.toml"), toml).unwrap();
}

fn one_step_plan(ws: &Workspace, task_id: &str, step: serde_json::Value) -> PathBuf {
    let mut step = step;
    step["step_id"] = "1.1".into();
    step["agent_name"] = "dev".into();
    step["task_description"] = "do the work".into();
    let plan = serde_json::json!({"task_id": task_id, "task_summary": "s",
        "phases": [{"phase_id": 1, "name": "P", "steps": [step]}]});
    ws.write(&format!("{task_id}.json"), &plan.to_string())
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).unwrap()
}

/// True once `pid` is gone or a zombie, polling up to 10 s.
fn gone(pid: i32) -> bool {
    for _ in 0..200 {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => return true,
            Ok(stat) if stat.rsplit(')').next().is_some_and(|r| r.trim_start().starts_with('Z')) => return true,
            Ok(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
    false
}

fn read_pid(path: &Path) -> i32 {
    wait_for(path);
    for _ in 0..100 {
        if let Ok(pid) = std::fs::read_to_string(path).unwrap_or_default().trim().parse() {
            return pid;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("no pid in {}", path.display());
}

#[test]
fn an_agent_that_prints_its_result_and_never_exits_completes_with_that_result() {
    let ws = Workspace::with_repo(&[("README.md", "x\n")]);
    // A claude stand-in: the stream-json of a successful run, then it hangs (an MCP server
    // holding it, a child holding a pipe) instead of exiting.
    let claude = script(
        &ws,
        "claude",
        r#"cat > /dev/null
echo '{"type":"system","subtype":"init","session_id":"s-1","model":"claude-sonnet-4-5"}'
echo 'the work' > work.md
echo '{"type":"result","subtype":"success","is_error":false,"result":"Wrote work.md","total_cost_usd":0.42,"usage":{"input_tokens":1200,"output_tokens":300},"session_id":"s-1"}'
exec sleep 1000
"#,
    );
    config(&ws, "[runtime]\nresult_grace_secs = 1\n[agents.dev]\nprofile = 'claude'\n");
    let plan = one_step_plan(&ws, "hang-1", serde_json::json!({"deliverables": ["work.md"]}));
    let path = format!("{}:{}", claude.parent().unwrap().display(), std::env::var("PATH").unwrap_or_default());
    let clock = baton::clock::Stopwatch::start();
    let out = ws.run_plan_with(&plan, &[], &[("PATH", &path)]);
    let took = clock.elapsed();
    assert_eq!(code(&out), 0, "{}\n{}", stdout(&out), stderr(&out));
    assert!(took < Duration::from_secs(30), "took {took:?}: the step waited for the agent's timeout");
    let step = &ws.status("hang-1")["step_results"]["1.1"];
    assert_eq!(step["status"], "complete", "{step}");
    assert_eq!(step["outcome"], "Wrote work.md", "{step}");
    assert!((step["cost_usd"].as_f64().unwrap() - 0.42).abs() < 1e-9, "the agent's own cost: {step}");
    assert_eq!(step["estimated_tokens"], 1500, "{step}");
    assert_eq!(ws.git(&["show", "baton/hang-1:work.md"]), "the work\n");
    let run = ws.data().join("runs/hang-1/1.1/1");
    let exit = json(&run.join("exit.json"));
    assert_eq!(exit["stopped_after_result"], true, "{exit}");
    assert_eq!(exit["timed_out"], false, "{exit}");
    let agent = json(&run.join("started.json"))["agent_pid"].as_i64().unwrap();
    assert!(gone(i32::try_from(agent).unwrap()), "the hung agent {agent} was stopped");
}

/// A command agent that starts `sleep 1000` in a session of its own (recording its pid in
/// `pidfile`), writes `out.md`, then runs `then`.
fn setsid_agent(ws: &Workspace, pidfile: &Path, then: &str) -> PathBuf {
    let pidfile = pidfile.display();
    script(
        ws,
        "agent",
        &format!(
            "setsid sh -c 'echo $$ > {pidfile}; exec sleep 1000' < /dev/null > /dev/null 2>&1 &\n\
             while [ ! -s {pidfile} ]; do sleep 0.05; done\necho out > out.md\n{then}\n"
        ),
    )
}

/// Runs a one-step plan whose agent leaves a `setsid` descendant behind, ending as `then` says
/// (with `step` fields and extra `[runtime]` lines); returns the workspace, the descendant's
/// pid and the run's output.
fn run_with_descendant(
    task_id: &str,
    then: &str,
    runtime: &str,
    step: serde_json::Value,
) -> (Workspace, i32, std::process::Output) {
    let ws = Workspace::with_repo(&[("README.md", "x\n")]);
    let pidfile = ws.tmp.path().join("descendant.pid");
    let agent = setsid_agent(&ws, &pidfile, then);
    config(
        &ws,
        &format!("[runtime]\n{runtime}\n[agents.dev]\nprofile = 'command'\ncommand = ['{}']\n", agent.display()),
    );
    let plan = one_step_plan(&ws, task_id, step);
    let out = ws.run_plan(&plan);
    let pid = read_pid(&pidfile);
    (ws, pid, out)
}

#[test]
fn a_descendant_in_its_own_session_ends_with_its_attempt_with_or_without_a_cgroup() {
    for (task, runtime) in [("sess-cg", "attempt_cgroups = true"), ("sess-reaper", "attempt_cgroups = false")] {
        let (ws, pid, out) = run_with_descendant(task, "exit 0", runtime, serde_json::json!({}));
        assert_eq!(code(&out), 0, "{task}: {}\n{}", stdout(&out), stderr(&out));
        assert!(gone(pid), "{task}: the setsid descendant {pid} outlived its step");
        let started = json(&ws.data().join(format!("runs/{task}/1.1/1/started.json")));
        if runtime.ends_with("false") {
            assert!(started.get("cgroup").is_none(), "{started}");
        } else {
            eprintln!("{task}: cgroup {}", started.get("cgroup").unwrap_or(&"none (not allowed here)".into()));
        }
    }
}

#[test]
fn a_descendant_in_its_own_session_ends_with_a_timed_out_attempt() {
    let (ws, pid, out) =
        run_with_descendant("sess-timeout", "exec sleep 1000", "", serde_json::json!({"timeout_seconds": 2}));
    assert_eq!(code(&out), 4, "{}\n{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("timed out"), "{}", stdout(&out));
    assert!(gone(pid), "the setsid descendant {pid} outlived its timed-out step");
    assert_eq!(json(&ws.data().join("runs/sess-timeout/1.1/1/exit.json"))["timed_out"], true);
}

#[test]
fn a_descendant_in_its_own_session_ends_when_the_execution_is_cancelled() {
    let ws = Workspace::with_repo(&[("README.md", "x\n")]);
    let pidfile = ws.tmp.path().join("descendant.pid");
    let agent = setsid_agent(&ws, &pidfile, "exec sleep 1000");
    config(&ws, &format!("[agents.dev]\nprofile = 'command'\ncommand = ['{}']\n", agent.display()));
    let plan = one_step_plan(&ws, "sess-cancel", serde_json::json!({}));
    let child = ws.spawn_run(&plan);
    let pid = read_pid(&pidfile);
    let out = ws.run(&["execute", "cancel", "--task-id", "sess-cancel"]);
    assert_eq!(code(&out), 4, "{}", stderr(&out));
    let _ = child.wait_with_output();
    assert!(gone(pid), "the setsid descendant {pid} outlived its cancelled execution");
}

#[test]
fn an_attempt_whose_worktree_vanished_while_baton_was_down_runs_again_in_a_fresh_one() {
    let ws = Workspace::with_repo(&[("README.md", "x\n")]);
    // First launch: hangs on. Any later launch: does the work.
    let marker = ws.tmp.path().join("launched-once");
    let agent = script(
        &ws,
        "slow-agent",
        &format!("if [ ! -e {m} ]; then touch {m}; exec sleep 1000; fi\necho done > out.md\n", m = marker.display()),
    );
    config(&ws, &format!("[agents.dev]\nprofile = 'command'\ncommand = ['{}']\n", agent.display()));
    let plan = one_step_plan(&ws, "vanish-1", serde_json::json!({"deliverables": ["out.md"]}));
    let first = ws.data().join("runs/vanish-1/1.1/1");
    ws.kill_run_once_started(&plan, &first.join("started.json"));
    let agent_pid = i32::try_from(json(&first.join("started.json"))["agent_pid"].as_i64().unwrap()).unwrap();
    let worktree = ws.data().join("worktrees/vanish-1/1.1-1");
    assert!(worktree.is_dir());
    std::fs::remove_dir_all(&worktree).unwrap();

    let out = ws.run_plan(&plan);
    assert_eq!(code(&out), 0, "{}\n{}", stdout(&out), stderr(&out));
    assert!(stderr(&out).contains("attempt 1 interrupted: its worktree"), "{}", stderr(&out));
    assert!(gone(agent_pid), "the first launch's agent {agent_pid} was stopped");
    let interrupted = json(&first.join("interrupted.json"));
    assert!(interrupted["reason"].as_str().unwrap().contains("1.1-1` is gone"), "{interrupted}");
    assert_eq!(ws.launches("vanish-1", "1.1"), 2, "run again once");
    assert_eq!(ws.git(&["show", "baton/vanish-1:out.md"]), "done\n");
    let step = &ws.status("vanish-1")["step_results"]["1.1"];
    assert_eq!((step["status"].as_str(), step["attempt"].as_u64()), (Some("complete"), Some(1)), "{step}");
    // The journal: one dispatch, one record, and it is not a failure.
    let events = journal(&ws, "vanish-1");
    let of = |kind: &str| events.iter().filter(|(k, p)| k == kind && p["step_id"] == "1.1").collect::<Vec<_>>();
    assert_eq!(of("step_dispatched").len(), 1, "{events:?}");
    let records = of("step_recorded");
    assert_eq!(records.len(), 1, "{events:?}");
    assert_eq!(records[0].1["status"], "complete", "{events:?}");
}

/// A claude stand-in that could not load its skill: it answers a "successful" result with no
/// usage, no cost and no change (issue 15.7, the input that was called done).
const NO_WORK_CLAUDE: &str = r#"cat > /dev/null
echo '{"type":"system","subtype":"init","session_id":"s-2","model":"claude-sonnet-4-5"}'
echo '{"type":"result","subtype":"success","is_error":false,"result":"Could not load skill lantern-dev: not installed","total_cost_usd":0,"usage":{"input_tokens":0,"output_tokens":0},"session_id":"s-2"}'
"#;

#[test]
fn an_agent_that_did_no_work_fails_the_step_with_its_text_unless_the_step_expects_no_changes() {
    let ws = Workspace::with_repo(&[("README.md", "x\n")]);
    let claude = script(&ws, "claude", NO_WORK_CLAUDE);
    config(&ws, "[agents.dev]\nprofile = 'claude'\n");
    let path = format!("{}:{}", claude.parent().unwrap().display(), std::env::var("PATH").unwrap_or_default());

    let plan = one_step_plan(&ws, "nowork-1", serde_json::json!({}));
    let out = ws.run_plan_with(&plan, &[], &[("PATH", &path)]);
    assert_eq!(code(&out), 4, "{}\n{}", stdout(&out), stderr(&out));
    let step = &ws.status("nowork-1")["step_results"]["1.1"];
    assert_eq!(step["status"], "failed", "{step}");
    let error = step["error"].as_str().unwrap();
    assert!(error.starts_with("agent did no work"), "{error}");
    assert!(error.contains("Could not load skill lantern-dev: not installed"), "the agent's text: {error}");
    assert!(stdout(&out).contains("agent did no work"), "{}", stdout(&out));

    // The same agent on a step that may change nothing completes.
    let plan = one_step_plan(&ws, "nowork-2", serde_json::json!({"expect_changes": false}));
    let out = ws.run_plan_with(&plan, &[], &[("PATH", &path)]);
    assert_eq!(code(&out), 0, "{}\n{}", stdout(&out), stderr(&out));
    assert_eq!(ws.status("nowork-2")["step_results"]["1.1"]["status"], "complete");
    assert_eq!(ws.status("nowork-2")["plan"]["phases"][0]["steps"][0]["expect_changes"], false, "kept as written");
}

#[test]
fn a_commit_deleting_most_tracked_files_is_refused_at_consolidation_and_its_worktree_kept() {
    let files = [("README.md", "x\n"), ("src/a.rs", "a\n"), ("src/b.rs", "b\n"), ("docs/c.md", "c\n")];
    let ws = Workspace::with_repo(&files);
    let agent = script(&ws, "agent", "rm -f src/a.rs src/b.rs docs/c.md\necho 'cleaned up the repository'\n");
    config(&ws, &format!("[agents.dev]\nprofile = 'command'\ncommand = ['{}']\n", agent.display()));

    let plan = one_step_plan(&ws, "wipe-1", serde_json::json!({}));
    let out = ws.run_plan(&plan);
    assert_eq!(code(&out), 4, "{}\n{}", stdout(&out), stderr(&out));
    let step = &ws.status("wipe-1")["step_results"]["1.1"];
    assert_eq!(step["status"], "failed", "{step}");
    let error = step["error"].as_str().unwrap();
    assert!(
        error.contains("refused to consolidate: the commit deletes 3 of the 4 files tracked at its base"),
        "{error}"
    );
    assert!(error.contains("allow_mass_deletion: true"), "says how to allow it: {error}");
    // The feature branch is unmoved; the attempt's commit and worktree are kept for inspection.
    let tree = ws.git(&["ls-tree", "-r", "--name-only", "baton/wipe-1"]);
    assert_eq!(tree.lines().count(), 4, "{tree}");
    let kept = ws.git(&["ls-tree", "-r", "--name-only", "refs/baton/wipe-1/1.1/1"]);
    assert_eq!(kept.trim(), "README.md", "the attempt's commit");
    let err = stderr(&out);
    let worktree = err.split("worktree kept at ").nth(1).and_then(|r| r.split(')').next()).expect(&err);
    let worktree = std::path::Path::new(worktree);
    assert!(worktree.join("README.md").is_file() && !worktree.join("src/a.rs").exists(), "{}", worktree.display());

    // A step that means it.
    let plan = one_step_plan(&ws, "wipe-2", serde_json::json!({"allow_mass_deletion": true}));
    let out = ws.run_plan(&plan);
    assert_eq!(code(&out), 0, "{}\n{}", stdout(&out), stderr(&out));
    assert_eq!(ws.git(&["ls-tree", "-r", "--name-only", "baton/wipe-2"]).trim(), "README.md");
}
