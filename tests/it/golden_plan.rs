//! An agent-baton plan (tests/fixtures/agent-baton/golden/MachinePlan.json) driven with the demo
//! agent through its approval and feedback question up to its gate, whose command
//! (`pytest …`) fails in this repository: the last step is re-dispatched with the output, the
//! gate is retried up to the cap, and the execution ends FAILED (exit 4) with the reason.

use crate::common::*;

#[test]
fn golden_plan_runs_through_approval_and_feedback_then_fails_at_its_gate() {
    let plan = fixtures().join("agent-baton/golden/MachinePlan.json");
    assert!(plan.is_file(), "fixture {} is missing", plan.display());
    let ws = Workspace::with_repo(&[("README.md", "lantern\n")]);
    let task = "2026-05-18-csv-empty-header-7c1e9a42";

    let first = ws.run_plan(&plan);
    assert_eq!(code(&first), 3, "{}\n{}", stdout(&first), stderr(&first));
    assert!(stdout(&first).contains("ACTION: APPROVAL"), "{}", stdout(&first));
    assert!(stdout(&first).contains("Check the header-row decision before the tests are written."));
    assert_eq!(ws.launches(task, "1.1"), 1);
    assert_eq!(ws.launches(task, "1.2"), 1);

    let approve = ws.run(&["execute", "approve", "--task-id", task, "--phase-id", "1", "--result", "approve"]);
    assert_eq!(code(&approve), 3, "{}", stderr(&approve));
    assert!(stdout(&approve).contains("ACTION: FEEDBACK"), "{}", stdout(&approve));
    assert!(stdout(&approve).contains("[0] The header row alone (recommended)"));

    let feedback = ws.run(&[
        "execute",
        "feedback",
        "--task-id",
        task,
        "--phase-id",
        "1",
        "--question-id",
        "fq1",
        "--chosen-index",
        "0",
    ]);
    assert_eq!(code(&feedback), 0, "{}", stderr(&feedback));
    assert!(stdout(&feedback).contains("ACTION: GATE"), "{}", stdout(&feedback));
    assert!(stdout(&feedback).contains("pytest tests/export/ -q --maxfail=1"));

    let last = ws.run_plan(&plan);
    assert_eq!(code(&last), 4, "{}\n{}", stdout(&last), stderr(&last));
    let out = stdout(&last);
    assert!(out.contains("ACTION: FAILED"), "{out}");
    assert!(out.contains("gate 'test' of phase 1 failed 3 times"), "{out}");
    // The gate's first failure re-dispatched the phase's last step, once, with the output.
    assert_eq!(ws.launches(task, "1.2"), 2, "1.2 re-dispatched once");
    let prompt = std::fs::read_to_string(ws.data().join(format!("runs/{task}/1.2/2/prompt.md"))).unwrap();
    assert!(prompt.contains("## Gate output"), "{prompt}");
    assert!(prompt.contains("pytest tests/export/"), "{prompt}");
    let status = ws.status(task);
    assert_eq!(status["status"], "failed");
    let gates = status["gate_results"].as_array().unwrap();
    assert_eq!(gates.len(), 3);
    assert!(gates.iter().all(|g| g["passed"] == false && g["phase_id"] == 1));
    // The feedback answer inserted a phase whose step is the chosen option's agent.
    let phases = status["plan"]["phases"].as_array().unwrap();
    assert_eq!(phases[1]["name"], "Feedback-Dispatch (fq1)");
    assert_eq!(phases[1]["steps"][0]["agent_name"], "backend-engineer--python");
    assert_eq!(phases[2]["phase_id"], 3);
    assert_eq!(phases[2]["steps"][0]["step_id"], "3.1");
    assert_eq!(status["feedback_results"][0]["dispatched_step_id"], "2.1");
    // Phase 1's two commits are on the feature branch.
    let log = ws.git(&["log", "--format=%s", &format!("baton/{task}")]);
    assert!(log.contains("1.1: Decide where the CSV writer emits the header row"), "{log}");
    assert_eq!(
        log.matches("1.2: Write the header row before the first data row").count(),
        1,
        "the re-dispatch changed nothing: {log}"
    );
}
