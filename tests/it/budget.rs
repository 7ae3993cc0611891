//! The USD ceiling end to end (issue 5 §1): real demo agents, real worktrees, the journal.

use crate::common::*;

/// One phase of three independent steps, each reporting `cost` USD.
fn parallel_plan(task_id: &str, cost: &str) -> String {
    let step = |id: &str, agent: &str| {
        serde_json::json!({"step_id": id, "agent_name": agent,
            "task_description": format!("Write {agent}. [demo: cost={cost}]"),
            "deliverables": [format!("{agent}.md")]})
    };
    serde_json::json!({
        "task_id": task_id,
        "task_summary": "Three steps in parallel",
        "phases": [{"phase_id": 1, "name": "Build",
                    "steps": [step("1.1", "alpha"), step("1.2", "beta"), step("1.3", "gamma")]}]
    })
    .to_string()
}

fn run_with_ceiling(ws: &Workspace, plan: &std::path::Path, usd: &str) -> std::process::Output {
    ws.run_plan_with(plan, &[&format!("--max-spend-usd={usd}")], &[])
}

fn resume(ws: &Workspace, task_id: &str) -> std::process::Output {
    ws.run(&["execute", "run", "--task-id", task_id])
}

#[test]
fn with_three_steps_in_parallel_a_step_whose_forecast_would_cross_the_ceiling_is_never_launched() {
    let ws = Workspace::with_repo(&[("README.md", "hello\n")]);
    let plan = ws.write("plan.json", &parallel_plan("budget-1", "0.3"));
    // No history: each step is forecast at the price table's $0.25 for sonnet. Two fit under
    // $0.60; once they report $0.30 each, the third ($0.60 + $0.25) does not.
    let out = run_with_ceiling(&ws, &plan, "0.60");
    assert_eq!(code(&out), 3, "{}\n{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("ACTION: BUDGET"), "{text}");
    assert!(text.contains("Step: 1.3"), "{text}");
    assert!(text.contains("Needed: $0.25"), "{text}");
    assert_eq!((ws.launches("budget-1", "1.1"), ws.launches("budget-1", "1.2")), (1, 1));
    assert_eq!(ws.launches("budget-1", "1.3"), 0, "the step that does not fit was launched");
    let status = ws.status("budget-1");
    assert_eq!(status["status"], "budget_exceeded");
    assert_eq!(status["budget"]["ceiling_usd"], 0.6);
    assert_eq!(status["budget"]["source"], "--max-spend-usd");
    assert_eq!(status["budget"]["forecasts"]["1.3"]["mid_usd"], 0.25);

    // Running again without a decision changes nothing: still parked, nothing launched.
    let again = resume(&ws, "budget-1");
    assert_eq!(code(&again), 3, "{}", stderr(&again));
    assert_eq!(ws.launches("budget-1", "1.3"), 0);

    // Raise by what it needs: the next run resumes exactly there.
    let raise = ws.run(&["execute", "budget", "--task-id", "budget-1", "--raise", "0.25"]);
    assert_eq!(code(&raise), 0, "{}\n{}", stdout(&raise), stderr(&raise));
    assert!(stdout(&raise).contains("ACTION: DISPATCH"), "{}", stdout(&raise));
    // The same command line again (a script that always passes the flag) keeps the raise.
    let done = run_with_ceiling(&ws, &plan, "0.60");
    assert_eq!(code(&done), 0, "{}\n{}", stdout(&done), stderr(&done));
    assert!(stderr(&done).contains("keeping execution budget-1's ceiling of $0.85"), "{}", stderr(&done));
    for step in ["1.1", "1.2", "1.3"] {
        assert_eq!(ws.launches("budget-1", step), 1, "step {step} ran more than once");
    }
    let status = ws.status("budget-1");
    assert_eq!(status["status"], "complete");
    assert_eq!(status["budget"]["ceiling_usd"], 0.85);
    assert_eq!(status["budget"]["raises"][0]["by_usd"], 0.25);
    // Stop answers a BUDGET action only.
    let stop = ws.run(&["execute", "budget", "--task-id", "budget-1", "--stop"]);
    assert_eq!(code(&stop), 2, "{}", stderr(&stop));
    assert!(stderr(&stop).contains("not parked at its budget ceiling"), "{}", stderr(&stop));
    let neither = ws.run(&["execute", "budget", "--task-id", "budget-1"]);
    assert_eq!(code(&neither), 2);
    assert!(stderr(&neither).contains("--stop"), "{}", stderr(&neither));
}

#[test]
fn a_parked_execution_survives_a_crash_and_stop_cancels_it() {
    let ws = Workspace::with_repo(&[("README.md", "hello\n")]);
    let plan = ws.write("plan.json", &parallel_plan("budget-2", "0.3"));
    // The driver dies right after journaling the first result; the other attempt goes on.
    let crashed = ws.run_plan_with(&plan, &["--max-spend-usd", "0.6"], &[("BATON_CRASH_AT", "after-record")]);
    assert_eq!(code(&crashed), 137, "{}", stderr(&crashed));
    let parked = resume(&ws, "budget-2");
    assert_eq!(code(&parked), 3, "{}\n{}", stdout(&parked), stderr(&parked));
    assert!(stdout(&parked).contains("ACTION: BUDGET"), "{}", stdout(&parked));
    assert_eq!((ws.launches("budget-2", "1.1"), ws.launches("budget-2", "1.2")), (1, 1));
    assert_eq!(ws.launches("budget-2", "1.3"), 0);
    let status = ws.status("budget-2");
    assert_eq!(status["status"], "budget_exceeded");
    assert_eq!(status["counters"]["spend_usd"], 0.6);

    let stop = ws.run(&["execute", "budget", "--task-id", "budget-2", "--stop"]);
    assert_eq!(code(&stop), 4, "{}\n{}", stdout(&stop), stderr(&stop));
    let status = ws.status("budget-2");
    assert_eq!(status["status"], "cancelled");
    assert!(status["failure"].as_str().unwrap().contains("budget ceiling"), "{status}");
    assert_eq!(ws.launches("budget-2", "1.3"), 0);
}

#[test]
fn an_agent_whose_streamed_usage_crosses_the_remaining_budget_is_stopped_and_resumes_after_a_raise() {
    let ws = Workspace::with_repo(&[("README.md", "hello\n")]);
    // 200 000 output tokens at $15/M = $3.00, streamed over about 4 s; the ceiling is $0.50.
    let plan = serde_json::json!({
        "task_id": "budget-3",
        "task_summary": "A step that keeps spending",
        "phases": [{"phase_id": 1, "name": "Build", "steps": [
            {"step_id": "1.1", "agent_name": "alpha",
             "task_description": "Write a. [demo: burn=200000] [demo: sleep=4]", "deliverables": ["a.md"]}]}]
    });
    let plan = ws.write("plan.json", &plan.to_string());
    let out = run_with_ceiling(&ws, &plan, "0.5");
    assert_eq!(code(&out), 3, "{}\n{}", stdout(&out), stderr(&out));
    assert!(stderr(&out).contains("crossed the remaining budget"), "{}", stderr(&out));
    let status = ws.status("budget-3");
    assert_eq!(status["status"], "budget_exceeded");
    let result = &status["step_results"]["1.1"];
    assert_eq!(result["status"], "pending", "{result}");
    let spent = status["counters"]["spend_usd"].as_f64().unwrap();
    assert!(spent > 0.5 && spent < 3.0, "stopped early, its usage counted: ${spent}");
    assert!(status["budget"]["shortfall"]["reason"].as_str().unwrap().contains("stopped while running"));
    // Nothing of the stopped attempt reached the feature branch.
    assert!(!ws.git(&["ls-tree", "--name-only", "baton/budget-3"]).lines().any(|l| l == "a.md"));

    let raise = ws.run(&["execute", "budget", "--task-id", "budget-3", "--raise", "5"]);
    assert_eq!(code(&raise), 0, "{}", stderr(&raise));
    let done = resume(&ws, "budget-3");
    assert_eq!(code(&done), 0, "{}\n{}", stdout(&done), stderr(&done));
    assert_eq!(ws.launches("budget-3", "1.1"), 2, "the stopped attempt and the one after the raise");
    let status = ws.status("budget-3");
    assert_eq!(status["step_results"]["1.1"]["attempt"], 2);
    assert!(ws.git(&["ls-tree", "--name-only", "baton/budget-3"]).lines().any(|l| l == "a.md"));
}

#[test]
fn a_bad_ceiling_is_refused_before_anything_runs() {
    let ws = Workspace::with_repo(&[("README.md", "hello\n")]);
    let plan = ws.write("plan.json", &parallel_plan("budget-4", "0.01"));
    for bad in ["0", "-2", "lots", "NaN"] {
        let out = run_with_ceiling(&ws, &plan, bad);
        assert_eq!(code(&out), 2, "{bad}: {}", stderr(&out));
        assert!(stderr(&out).contains("--max-spend-usd"), "{}", stderr(&out));
    }
    let env = ws.run_plan_with(&plan, &[], &[("BATON_RUN_TOKEN_CEILING", "ten dollars")]);
    assert_eq!(code(&env), 2, "{}", stderr(&env));
    assert!(stderr(&env).contains("BATON_RUN_TOKEN_CEILING"), "{}", stderr(&env));
    // The alias sets the ceiling of a new execution.
    let ok = ws.run_plan_with(&plan, &[], &[("BATON_RUN_TOKEN_CEILING", "7")]);
    assert_eq!(code(&ok), 0, "{}", stderr(&ok));
    let status = ws.status("budget-4");
    assert_eq!(status["budget"]["ceiling_usd"], 7.0);
    assert_eq!(status["budget"]["source"], "BATON_RUN_TOKEN_CEILING");
}

/// One phase of `n` independent demo steps, each streaming `burn` output tokens of usage in 20
/// messages over `secs` seconds.
fn streaming_plan(task_id: &str, n: usize, burn: u64, secs: u32) -> String {
    let steps: Vec<serde_json::Value> = (1..=n)
        .map(|i| {
            serde_json::json!({"step_id": format!("1.{i}"), "agent_name": format!("agent{i}"),
                "task_description": format!("Write s{i}. [demo: burn={burn}] [demo: sleep={secs}]"),
                "deliverables": [format!("s{i}.md")]})
        })
        .collect();
    serde_json::json!({"task_id": task_id, "task_summary": "Agents streaming in parallel",
        "phases": [{"phase_id": 1, "name": "Build", "steps": steps}]})
    .to_string()
}

#[test]
fn parallel_agents_streaming_usage_are_held_to_one_ceiling_together() {
    let ws = Workspace::with_repo(&[("README.md", "hello\n")]);
    // Forecast $0.05 a step, so the old rule (each agent against ceiling − spend − the others'
    // reservations, $0.90) would let each of the three run to $1.20: $3.60 against $1.00.
    std::fs::create_dir_all(ws.data()).unwrap();
    std::fs::write(
        ws.data().join("baton.toml"),
        "[prices.sonnet]\ninput_per_mtok = 3.0\noutput_per_mtok = 15.0\ndefault_step_usd = 0.05\n",
    )
    .unwrap();
    // 400 000 output tokens at $15/M in 20 messages: $0.30 a message, one a second, $6.00 each.
    let plan = ws.write("plan.json", &streaming_plan("budget-par", 3, 400_000, 20));
    let out = run_with_ceiling(&ws, &plan, "1.00");
    assert_eq!(code(&out), 3, "{}\n{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("ACTION: BUDGET"), "{}", stdout(&out));
    let err = stderr(&out);
    assert_eq!(err.matches(": stopping it (").count(), 3, "every running agent stopped: {err}");
    let status = ws.status("budget-par");
    assert_eq!(status["status"], "budget_exceeded");
    for step in ["1.1", "1.2", "1.3"] {
        assert_eq!(ws.launches("budget-par", step), 1);
        assert_eq!(status["step_results"][step]["status"], "pending", "{step} was stopped: {status}");
    }
    // The overshoot stays within one streamed message ($0.30) per running agent.
    let spent = status["counters"]["spend_usd"].as_f64().unwrap();
    assert!(spent > 1.0 && spent <= 1.0 + 3.0 * 0.30 + 1e-6, "spent ${spent} against a $1.00 ceiling\n{err}");
}

#[test]
fn a_retry_is_forecast_from_its_earlier_attempts_and_refused_before_it_starts() {
    let ws = Workspace::with_repo(&[("README.md", "hello\n")]);
    let plan = serde_json::json!({"task_id": "budget-retry", "task_summary": "A costly failure",
        "phases": [{"phase_id": 1, "name": "Build", "steps": [{"step_id": "1.1", "agent_name": "alpha",
            "task_description": "Write a. [demo: fail] [demo: cost=1.44]", "deliverables": ["a.md"]}]}]});
    let plan = ws.write("plan.json", &plan.to_string());
    let failed = run_with_ceiling(&ws, &plan, "2.00");
    assert_eq!(code(&failed), 4, "{}\n{}", stdout(&failed), stderr(&failed));
    let retry = ws.run(&["execute", "retry-step", "--task-id", "budget-retry", "--step-id", "1.1"]);
    assert_eq!(code(&retry), 3, "{}\n{}", stdout(&retry), stderr(&retry));
    // On the price table's $0.25 forecast it would run ($1.44 + $0.25 fits) and end at $2.88.
    let out = resume(&ws, "budget-retry");
    assert_eq!(code(&out), 3, "{}\n{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("ACTION: BUDGET") && text.contains("Needed: $0.88"), "{text}");
    assert!(text.contains("what its earlier attempts cost"), "{text}");
    assert_eq!(ws.launches("budget-retry", "1.1"), 1, "the retry was launched");
    let status = ws.status("budget-retry");
    assert_eq!(status["status"], "budget_exceeded");
    assert_eq!(status["counters"]["spend_usd"], 1.44);
    assert_eq!(status["step_results"]["1.1"]["attempts_usd"], serde_json::json!([1.44]));
}
