//! The worktree environment end to end (issue 18.6): files git ignores that the checkout's
//! `.worktreeinclude` (or `baton.toml`) lists reach every attempt's worktree and the gate's,
//! and never the feature branch. A real driver, a real git repository, a fake agent script.

use std::os::unix::fs::PermissionsExt;

use crate::common::*;

#[test]
fn listed_ignored_files_reach_the_agent_and_the_gate_but_never_a_commit() {
    let ws = Workspace::with_repo(&[
        ("README.md", "x\n"),
        (".gitignore", ".env\nlocal/\n"),
        // README.md is tracked: listed, never copied; `../outside` cannot leave the checkout.
        (".worktreeinclude", "# what worktrees need\n.env\nREADME.md\n../outside\n"),
    ]);
    std::fs::write(ws.repo().join(".env"), "TOKEN=from-checkout\n").unwrap();
    std::fs::create_dir_all(ws.repo().join("local")).unwrap();
    std::fs::write(ws.repo().join("local/dev.toml"), "dev = true\n").unwrap();
    std::fs::write(ws.tmp.path().join("outside"), "beside the checkout\n").unwrap();
    // The agent needs both files, then force-adds .env and even commits it.
    let agent = ws.tmp.path().join("env-agent");
    std::fs::write(
        &agent,
        "#!/bin/sh\nset -e\ngrep -q TOKEN=from-checkout .env\ntest -f local/dev.toml\necho work > work.txt\n\
         git add -f .env work.txt\ngit -c user.name=a -c user.email=a@example.com commit -q -m agent\necho done\n",
    )
    .unwrap();
    std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::create_dir_all(ws.data()).unwrap();
    std::fs::write(
        ws.data().join("baton.toml"),
        format!(
            "[worktree]\ninclude = ['local/']\n[agents.dev]\nprofile = 'command'\ncommand = ['{}']\n",
            agent.display()
        ),
    )
    .unwrap();
    let plan = serde_json::json!({"task_id": "env-1", "task_summary": "s", "phases": [{
        "phase_id": 1, "name": "P",
        "steps": [{"step_id": "1.1", "agent_name": "dev", "task_description": "do the work"}],
        "gate": {"gate_type": "test", "command": "grep -q TOKEN=from-checkout .env && test -f local/dev.toml"}}]});
    let plan = ws.write("env-1.json", &plan.to_string());
    let out = ws.run_plan(&plan);
    assert_eq!(code(&out), 0, "{}\n{}", stdout(&out), stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("1.1: copied .env, local/dev.toml from the project checkout"), "{err}");
    assert!(err.contains("README.md: tracked by git"), "{err}");
    assert!(err.contains("the gate: copied .env, local/dev.toml"), "{err}");

    let tree = ws.git(&["ls-tree", "-r", "--name-only", "baton/env-1"]);
    assert!(tree.lines().any(|l| l == "work.txt"), "{tree}");
    assert!(!tree.lines().any(|l| l == ".env" || l.starts_with("local/")), "a copied file was committed: {tree}");
    let status = ws.status("env-1");
    assert_eq!(status["gate_results"][0]["passed"], true, "{status}");
    let result = &status["step_results"]["1.1"];
    assert_eq!(result["files_changed"], serde_json::json!(["work.txt"]), "{result}");
    assert!(result["outcome"].as_str().unwrap().contains("kept out of the commit: .env"), "{result}");
    assert_eq!(std::fs::read_to_string(ws.tmp.path().join("outside")).unwrap(), "beside the checkout\n");
    assert!(!ws.data().join("worktrees/outside").exists() && !ws.data().join("outside").exists());
}
