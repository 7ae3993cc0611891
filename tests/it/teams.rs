//! Team steps end to end (seed-spec §3.6): every member is a real demo-agent attempt in its own
//! worktree of the feature branch, consolidated with its member id; synthesis strategies and
//! conflict policies on real git merges; kill baton while members run and resume.

use serde_json::{json, Value};

use crate::common::*;

/// A plan whose phase 1 is team step 1.1 (`members`, `synthesis`), gated on `gate`, and whose
/// phase 2 has one step that depends on it.
fn team_plan(task_id: &str, members: Value, synthesis: Value, gate: &str) -> String {
    json!({
        "task_id": task_id,
        "task_summary": "Team plan for tests",
        "phases": [
            {"phase_id": 1, "name": "Build", "steps": [
                {"step_id": "1.1", "agent_name": "team-lead", "task_description": "Build it together.",
                 "team": members, "synthesis": synthesis}
             ],
             "gate": {"gate_type": "test", "command": gate}},
            {"phase_id": 2, "name": "Finish", "steps": [
                {"step_id": "2.1", "agent_name": "closer", "task_description": "Write z.", "deliverables": ["z.md"],
                 "depends_on": ["1.1"]}
            ]}
        ]
    })
    .to_string()
}

fn member(id: &str, agent: &str, task: &str, deliverables: &[&str], deps: &[&str]) -> Value {
    json!({"member_id": id, "agent_name": agent, "task_description": task, "deliverables": deliverables, "depends_on": deps})
}

fn three_members() -> Value {
    let mut lead = member("1.1.a", "lead-dev", "Write a.", &["a.md"], &[]);
    lead["role"] = json!("lead");
    lead["sub_team"] = json!([member("1.1.a.b", "sub-dev", "Write ab.", &["ab.md"], &[])]);
    json!([lead, member("1.1.c", "other-dev", "Write c.", &["c.md"], &["1.1.a"])])
}

/// The member ids of the feature branch's commits (`Baton-Step` trailers), oldest first.
fn steps_on_branch(ws: &Workspace, task_id: &str) -> Vec<String> {
    let log = ws.git(&[
        "log",
        "--reverse",
        "--format=%(trailers:key=Baton-Step,valueonly,separator=)",
        &format!("baton/{task_id}"),
    ]);
    log.lines().map(str::trim).filter(|l| !l.is_empty()).map(str::to_string).collect()
}

fn result<'a>(status: &'a Value, id: &str) -> &'a Value {
    &status["step_results"][id]
}

#[test]
fn members_run_in_their_own_worktrees_and_are_consolidated_under_their_member_ids() {
    let ws = Workspace::with_repo(&[("README.md", "x\n")]);
    let plan = team_plan(
        "team-1",
        three_members(),
        json!({"strategy": "merge_files"}),
        "test -s a.md && test -s ab.md && test -s c.md",
    );
    let plan = ws.write("plan.json", &plan);
    let out = ws.run_plan(&plan);
    assert_eq!(code(&out), 0, "{}\n{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("ACTION: COMPLETE"));
    let steps = steps_on_branch(&ws, "team-1");
    assert_eq!(steps.len(), 4, "{steps:?}");
    assert_eq!(steps.last().unwrap(), "2.1");
    let pos =
        |id: &str| steps.iter().position(|s| s == id).unwrap_or_else(|| panic!("{id} not on the branch: {steps:?}"));
    assert!(pos("1.1.a") < pos("1.1.c"), "1.1.c depends on 1.1.a: {steps:?}");
    pos("1.1.a.b");
    for id in ["1.1.a", "1.1.a.b", "1.1.c", "2.1"] {
        assert_eq!(ws.launches("team-1", id), 1, "launches of {id}");
    }
    // Each member ran in its own worktree: its prompt names its member id and parent step.
    let prompt = std::fs::read_to_string(ws.data().join("runs/team-1/1.1.c/1/prompt.md")).unwrap();
    assert!(prompt.contains("- Member id: 1.1.c") && prompt.contains("- Parent step: 1.1"), "{prompt}");
    let author = ws.git(&["log", "--format=%an", "-1", "--grep=Baton-Step: 1.1.c", "baton/team-1"]);
    assert_eq!(author.trim(), "other-dev");
    let status = ws.status("team-1");
    assert_eq!(status["status"], "complete");
    let team = result(&status, "1.1");
    assert_eq!(team["agent_name"], "team");
    assert_eq!(team["status"], "complete");
    assert_eq!(team["files_changed"], json!(["a.md", "ab.md", "c.md"]));
    assert_eq!(result(&status, "1.1.a.b")["status"], "complete");
    let replay = ws.run(&["replay", "team-1"]);
    assert_eq!(code(&replay), 0, "{}", stdout(&replay));
}

#[test]
fn agent_synthesis_runs_on_every_members_commits_and_its_result_is_the_team_steps() {
    let ws = Workspace::with_repo(&[("README.md", "x\n")]);
    let members = json!([
        member("1.1.a", "alpha", "Write a.", &["a.md"], &[]),
        member("1.1.b", "beta", "Write b.", &["b.md"], &[])
    ]);
    // The synthesis edits both members' files: it only succeeds when both commits are in its tree.
    let synthesis = json!({"strategy": "agent_synthesis", "synthesis_agent": "synth",
        "synthesis_prompt": "[demo: noop] [demo: replace=a.md|Written|Synthesised] [demo: replace=b.md|Written|Synthesised]\nMembers:\n{member_outcomes}"});
    let plan = ws.write("plan.json", &team_plan("synth-1", members, synthesis, "grep -q Synthesised a.md"));
    let out = ws.run_plan(&plan);
    assert_eq!(code(&out), 0, "{}\n{}", stdout(&out), stderr(&out));
    let steps = steps_on_branch(&ws, "synth-1");
    assert_eq!(steps[2], "1.1.synthesis", "{steps:?}");
    let prompt = std::fs::read_to_string(ws.data().join("runs/synth-1/1.1.synthesis/1/prompt.md")).unwrap();
    assert!(prompt.contains("- 1.1.a (alpha, implementer): The Baton demo agent completed step 1.1.a"), "{prompt}");
    assert!(!prompt.contains("{member_outcomes}"));
    let status = ws.status("synth-1");
    let team = result(&status, "1.1");
    let synth = result(&status, "1.1.synthesis");
    assert_eq!(synth["agent_name"], "synth");
    assert_eq!(team["outcome"], synth["outcome"]);
    assert!(team["outcome"].as_str().unwrap().contains("It edited `a.md`."), "{team}");
    assert_eq!(team["commit_hash"], synth["commit_hash"]);
    let synth_commit = ws.git(&["log", "--format=%H", "-1", "--grep=Baton-Step: 1.1.synthesis", "baton/synth-1"]);
    assert_eq!(team["commit_hash"].as_str().unwrap(), synth_commit.trim());
    assert_eq!(
        ws.git(&["show", "baton/synth-1:b.md"]).lines().nth(2).unwrap(),
        "Synthesised by the Baton demo agent for step 1.1.b."
    );
}

#[test]
fn a_failing_member_fails_the_team_step_and_the_execution_names_it() {
    let ws = Workspace::with_repo(&[("README.md", "x\n")]);
    let members = json!([
        member("1.1.a", "alpha", "Write a.", &["a.md"], &[]),
        member("1.1.b", "beta", "Write b. [demo: fail]", &["b.md"], &[])
    ]);
    let plan = ws.write("plan.json", &team_plan("fail-1", members, json!({}), "true"));
    let out = ws.run_plan(&plan);
    assert_eq!(code(&out), 4, "{}\n{}", stdout(&out), stderr(&out));
    let status = ws.status("fail-1");
    let failure = status["failure"].as_str().unwrap();
    assert!(failure.contains("step 1.1 failed: team member(s) failed: 1.1.b"), "{failure}");
    assert_eq!(result(&status, "1.1.a")["status"], "complete");
    assert_eq!(ws.launches("fail-1", "2.1"), 0);
}

/// Members that edit different lines of one shared file (a change git merges).
fn overlapping_members() -> Value {
    json!([
        {"member_id": "1.1.a", "agent_name": "alpha", "task_description": "[demo: noop] [demo: replace=shared.txt|first|FIRST]"},
        {"member_id": "1.1.b", "agent_name": "beta", "task_description": "[demo: noop] [demo: replace=shared.txt|last|LAST]"}
    ])
}

const SHARED: &str = "first\n2\n3\n4\n5\n6\nlast\n";

#[test]
fn auto_merge_keeps_gits_merge_of_two_members_changes_and_records_the_overlap() {
    let ws = Workspace::with_repo(&[("shared.txt", SHARED)]);
    let plan = team_plan(
        "merge-1",
        overlapping_members(),
        json!({"conflict_handling": "auto_merge"}),
        "grep -q FIRST shared.txt && grep -q LAST shared.txt",
    );
    let out = ws.run_plan(&ws.write("plan.json", &plan));
    assert_eq!(code(&out), 0, "{}\n{}", stdout(&out), stderr(&out));
    assert_eq!(ws.git(&["show", "baton/merge-1:shared.txt"]), "FIRST\n2\n3\n4\n5\n6\nLAST\n");
    let status = ws.status("merge-1");
    assert_eq!(
        result(&status, "1.1")["team_conflicts"],
        json!([{"file": "shared.txt", "members": ["1.1.a", "1.1.b"]}])
    );
    assert_eq!(
        result(&status, "1.1")["files_changed"],
        json!(["shared.txt", "shared.txt"]),
        "concatenate keeps duplicates"
    );
}

#[test]
fn conflict_handling_fail_fails_the_step_naming_the_file_and_both_members() {
    let ws = Workspace::with_repo(&[("shared.txt", SHARED)]);
    let plan = team_plan("cfail-1", overlapping_members(), json!({"conflict_handling": "fail"}), "true");
    let out = ws.run_plan(&ws.write("plan.json", &plan));
    assert_eq!(code(&out), 4, "{}\n{}", stdout(&out), stderr(&out));
    let failure = ws.status("cfail-1")["failure"].as_str().unwrap().to_string();
    assert!(failure.contains("conflict: shared.txt (changed by 1.1.a and 1.1.b)"), "{failure}");
}

#[test]
fn escalate_stops_on_an_approval_showing_both_changes_and_approve_continues() {
    let ws = Workspace::with_repo(&[("shared.txt", SHARED)]);
    let plan = ws.write(
        "plan.json",
        &team_plan("esc-1", overlapping_members(), json!({"conflict_handling": "escalate"}), "true"),
    );
    let out = ws.run_plan(&plan);
    assert_eq!(code(&out), 3, "{}\n{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("ACTION: APPROVAL") && text.contains("team step 1.1"), "{text}");
    assert!(
        text.contains("### shared.txt") && text.contains("#### 1.1.a (alpha") && text.contains("#### 1.1.b (beta"),
        "{text}"
    );
    // Each member's change of the file, as a diff.
    assert!(text.contains("### shared.txt — 1.1.a\n```diff\ndiff --git a/shared.txt b/shared.txt"), "{text}");
    assert!(text.contains("-first\n+FIRST") && text.contains("-last\n+LAST"), "{text}");
    let approve = ws.run(&["execute", "approve", "--task-id", "esc-1", "--phase-id", "1", "--result", "approve"]);
    assert_eq!(code(&approve), 0, "{}", stderr(&approve));
    let resumed = ws.run(&["execute", "run", "--task-id", "esc-1"]);
    assert_eq!(code(&resumed), 0, "{}\n{}", stdout(&resumed), stderr(&resumed));
    assert_eq!(ws.git(&["show", "baton/esc-1:shared.txt"]), "FIRST\n2\n3\n4\n5\n6\nLAST\n");
}

#[test]
fn escalate_approve_with_feedback_runs_a_resolution_step_and_reject_fails() {
    let ws = Workspace::with_repo(&[("shared.txt", SHARED)]);
    let plan = ws.write(
        "plan.json",
        &team_plan("esc-2", overlapping_members(), json!({"conflict_handling": "escalate"}), "true"),
    );
    assert_eq!(code(&ws.run_plan(&plan)), 3);
    let decide = ws.run(&[
        "execute",
        "approve",
        "--task-id",
        "esc-2",
        "--phase-id",
        "1",
        "--result",
        "approve-with-feedback",
        "--feedback",
        "keep both edits",
    ]);
    assert_eq!(code(&decide), 0, "{}", stderr(&decide));
    let resumed = ws.run(&["execute", "run", "--task-id", "esc-2"]);
    assert_eq!(code(&resumed), 0, "{}\n{}", stdout(&resumed), stderr(&resumed));
    let prompt = std::fs::read_to_string(ws.data().join("runs/esc-2/1.2/1/prompt.md")).unwrap();
    assert!(prompt.contains("Resolve the conflict of team step 1.1 in shared.txt: keep both edits"), "{prompt}");
    assert!(steps_on_branch(&ws, "esc-2").contains(&"1.2".to_string()));

    let ws = Workspace::with_repo(&[("shared.txt", SHARED)]);
    let plan = ws.write(
        "plan.json",
        &team_plan("esc-3", overlapping_members(), json!({"conflict_handling": "escalate"}), "true"),
    );
    assert_eq!(code(&ws.run_plan(&plan)), 3);
    let reject = ws.run(&["execute", "approve", "--task-id", "esc-3", "--phase-id", "1", "--result", "reject"]);
    assert_eq!(code(&reject), 4, "the execution failed: {}", stderr(&reject));
    let status = ws.status("esc-3");
    assert_eq!(status["status"], "failed");
    assert!(status["failure"].as_str().unwrap().contains("conflict rejected"), "{status}");
}

#[test]
fn a_textual_conflict_git_cannot_merge_fails_the_member() {
    let ws = Workspace::with_repo(&[("README.md", "x\n")]);
    let members = json!([
        member("1.1.a", "alpha", "Write the same file one way.", &["same.md"], &[]),
        member("1.1.b", "beta", "Write the same file another way.", &["same.md"], &[])
    ]);
    let plan = ws.write("plan.json", &team_plan("text-1", members, json!({}), "true"));
    let out = ws.run_plan(&plan);
    assert_eq!(code(&out), 4, "{}\n{}", stdout(&out), stderr(&out));
    let failure = ws.status("text-1")["failure"].as_str().unwrap().to_string();
    assert!(failure.contains("conflicts in: same.md"), "{failure}");
    assert_eq!(steps_on_branch(&ws, "text-1").len(), 1, "the branch holds only the first member's commit");
}

#[test]
fn team_record_is_accepted_as_an_alias_of_record() {
    let ws = Workspace::with_repo(&[("README.md", "x\n")]);
    let members = json!([
        member("1.1.a", "alpha", "Write a.", &["a.md"], &[]),
        member("1.1.b", "beta", "Write b.", &["b.md"], &[])
    ]);
    let plan = ws.write("plan.json", &team_plan("rec-1", members, json!({}), "true"));
    assert_eq!(code(&ws.run(&["execute", "start", "--plan", plan.to_str().unwrap()])), 0);
    let next = ws.run(&["execute", "next", "--task-id", "rec-1", "--all"]);
    assert!(
        stdout(&next).contains("Team-Step: yes") && stdout(&next).contains("Parent-Step: 1.1"),
        "{}",
        stdout(&next)
    );
    let dispatched = ws.run(&["execute", "dispatched", "--task-id", "rec-1", "--step-id", "1.1.a", "--agent", "alpha"]);
    assert_eq!(code(&dispatched), 0, "{}", stderr(&dispatched));
    // An orchestrator that lost its agents resumes: the dispatched member is offered again.
    let resume = ws.run(&["execute", "resume", "--task-id", "rec-1"]);
    assert_eq!(code(&resume), 0, "{}", stderr(&resume));
    assert!(stderr(&resume).contains("step 1.1.a was dispatched when the driver stopped"), "{}", stderr(&resume));
    let plain = ws.run(&[
        "execute",
        "record",
        "--task-id",
        "rec-1",
        "--step-id",
        "1.1.a",
        "--agent",
        "alpha",
        "--outcome",
        "a",
    ]);
    assert_eq!(code(&plain), 0, "{}", stderr(&plain));
    let team = ws.run(&[
        "execute",
        "team-record",
        "--task-id",
        "rec-1",
        "--step-id",
        "1.1",
        "--member-id",
        "1.1.b",
        "--agent",
        "beta",
        "--outcome",
        "b",
    ]);
    assert_eq!(code(&team), 0, "{}", stderr(&team));
    let text = ws.run(&["execute", "status", "--task-id", "rec-1"]);
    assert!(stdout(&text).contains("      1.1.b      beta"), "{}", stdout(&text));
    let status = ws.status("rec-1");
    assert_eq!(result(&status, "1.1")["status"], "complete");
    assert_eq!(result(&status, "1.1")["outcome"], "a; b");
    let parent = ws.run(&["execute", "record", "--task-id", "rec-1", "--step-id", "1.1", "--agent", "x"]);
    assert_eq!(code(&parent), 2, "{}", stderr(&parent));
}

#[test]
fn team_record_refuses_a_member_id_of_another_step_or_an_empty_one() {
    let ws = Workspace::with_repo(&[("README.md", "x\n")]);
    let members = json!([member("1.1.a", "alpha", "Write a.", &["a.md"], &[])]);
    let plan = ws.write("plan.json", &team_plan("rec-2", members, json!({}), "true"));
    assert_eq!(code(&ws.run(&["execute", "start", "--plan", plan.to_str().unwrap()])), 0);
    let dispatched = ws.run(&["execute", "dispatched", "--task-id", "rec-2", "--step-id", "1.1.a", "--agent", "alpha"]);
    assert_eq!(code(&dispatched), 0, "{}", stderr(&dispatched));
    let before = ws.status("rec-2")["events_applied"].clone();
    assert!(before.as_u64().is_some_and(|n| n >= 1), "{before}");
    let record = |step: &str, member: &str| {
        let args = ["--task-id", "rec-2", "--step-id", step, "--member-id", member, "--agent", "alpha"];
        ws.run(&[&["execute", "team-record"][..], &args[..]].concat())
    };
    // Found by a tester: the member of step 1.1 was recorded under --step-id 2.1 without a word.
    let other = record("2.1", "1.1.a");
    assert_eq!(code(&other), 2, "{}", stderr(&other));
    let message = stderr(&other);
    assert_eq!(message.trim().lines().count(), 1, "one line: {message}");
    assert!(message.contains("1.1.a") && message.contains("2.1"), "names both ids: {message}");
    let empty = record("1.1", "");
    assert_eq!(code(&empty), 2, "{}", stderr(&empty));
    let message = stderr(&empty);
    assert_eq!(message.trim().lines().count(), 1, "one line: {message}");
    assert!(message.contains("--member-id") && message.contains("1.1"), "names the flag and the step: {message}");
    assert_eq!(ws.status("rec-2")["events_applied"], before, "the journal is unchanged");
    assert_eq!(code(&record("1.1", "1.1.a")), 0, "the member of its own step is recorded");
}

// ---------------------------------------------------------------------------------------------
// Crash and resume
// ---------------------------------------------------------------------------------------------

#[test]
fn every_crash_point_resumes_a_team_step_without_repeating_a_member() {
    for point in baton::runtime::driver::CRASH_POINTS {
        let ws = Workspace::with_repo(&[("README.md", "x\n")]);
        let task = format!("tcrash-{point}");
        let synthesis = json!({"strategy": "agent_synthesis", "synthesis_agent": "synth"});
        let plan = ws.write("plan.json", &team_plan(&task, three_members(), synthesis, "test -s a.md && test -s c.md"));
        let crashed = ws.run_plan_with(&plan, &[], &[("BATON_CRASH_AT", point)]);
        assert_eq!(code(&crashed), 137, "{point}: {}", stderr(&crashed));
        let resumed = ws.run_plan(&plan);
        assert_eq!(code(&resumed), 0, "{point}: {}\n{}", stdout(&resumed), stderr(&resumed));
        let steps = steps_on_branch(&ws, &task);
        for id in ["1.1.a", "1.1.a.b", "1.1.c", "1.1.synthesis", "2.1"] {
            assert_eq!(ws.launches(&task, id), 1, "{point}: launches of {id}");
            assert_eq!(steps.iter().filter(|s| *s == id).count(), 1, "{point}: commits of {id}: {steps:?}");
        }
        let replay = ws.run(&["replay", &task]);
        assert_eq!(code(&replay), 0, "{point}: {}", stdout(&replay));
    }
}

#[test]
fn kill_9_while_members_run_re_adopts_them_and_finished_members_never_run_again() {
    let ws = Workspace::with_repo(&[("README.md", "x\n")]);
    let members = json!([
        member("1.1.a", "alpha", "Write a.", &["a.md"], &[]),
        member("1.1.b", "beta", "Write b. [demo: sleep=2]", &["b.md"], &[]),
        member("1.1.c", "gamma", "Write c. [demo: sleep=2]", &["c.md"], &["1.1.a"])
    ]);
    let plan =
        ws.write("plan.json", &team_plan("tadopt-1", members, json!({"strategy": "merge_files"}), "test -s b.md"));
    // 1.1.c starts once 1.1.a is recorded; 1.1.b is still sleeping then.
    ws.kill_run_once_started(&plan, &ws.data().join("runs/tadopt-1/1.1.c/1/started.json"));
    let resumed = ws.run_plan(&plan);
    assert_eq!(code(&resumed), 0, "{}\n{}", stdout(&resumed), stderr(&resumed));
    let err = stderr(&resumed);
    assert!(
        err.contains("recovering 1.1.c") && (err.contains("re-adopting it") || err.contains("harvesting it")),
        "{err}"
    );
    for id in ["1.1.a", "1.1.b", "1.1.c", "2.1"] {
        assert_eq!(ws.launches("tadopt-1", id), 1, "launches of {id}");
    }
    assert_eq!(steps_on_branch(&ws, "tadopt-1").len(), 4);
    assert_eq!(ws.status("tadopt-1")["status"], "complete");
}

#[tokio::test]
async fn the_api_records_members_and_the_execution_page_lists_them_under_their_team_step() {
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use tower::ServiceExt as _;
    let tmp = tempfile::tempdir().unwrap();
    let data = baton::runtime::config::DataDir::open(&tmp.path().join("data")).unwrap();
    let execs = baton::runtime::executions::Executions::open(data).await.unwrap();
    let members = json!([
        member("1.1.a", "alpha", "Write a.", &["a.md"], &[]),
        member("1.1.b", "beta", "Write b.", &["b.md"], &[])
    ]);
    let plan = baton::model::plan::MachinePlan::from_json(&team_plan("web-team", members, json!({}), "true")).unwrap();
    execs.create(plan).await.unwrap();
    let send = |req: Request<Body>| {
        let app = baton::web::app(baton::web::AppState::new(execs.clone()).unwrap());
        async move {
            let response = app.oneshot(req).await.unwrap();
            let status = response.status();
            let bytes = http_body_util::BodyExt::collect(response.into_body()).await.unwrap().to_bytes();
            (status, String::from_utf8_lossy(&bytes).to_string())
        }
    };
    let (status, next) =
        send(Request::get("/api/v1/executions/web-team/next?all=true").body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::OK, "{next}");
    let next: Value = serde_json::from_str(&next).unwrap();
    assert_eq!(next[1]["step_id"], "1.1.b");
    assert_eq!(next[1]["is_team_member"], true);
    assert_eq!(next[1]["parent_step_id"], "1.1");
    let record = json!({"kind": "step_recorded", "step_id": "1.1.a", "agent_name": "alpha", "status": "complete", "outcome": "did a"});
    let req = Request::post("/api/v1/executions/web-team/events")
        .header("content-type", "application/json")
        .body(Body::from(record.to_string()))
        .unwrap();
    let (status, body) = send(req).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, page) = send(Request::get("/executions/web-team").body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let (team, a, b) = (page.find(">1.1<").unwrap(), page.find(">1.1.a<").unwrap(), page.find(">1.1.b<").unwrap());
    assert!(team < a && a < b, "members follow their team step");
}
