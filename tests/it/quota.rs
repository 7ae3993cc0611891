//! Quota and rate limits are not failures (issue 18.1): a fake `claude` on `PATH` first stops
//! on its usage limit with a reset a few seconds ahead, then succeeds. The step is not failed,
//! `execute status` and the CLI loop's WAIT name the reset, the run resumes by itself at that
//! time, a restart mid-wait still waits, and a fallback agent runs while the account is out.
//! Real `baton` drivers, shims and shell-script agents.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
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

/// A fake claude: its first run stops on the usage limit, reset `reset_in` seconds ahead
/// (written to `<tmp>/reset`); later runs write `work.md`, note their start in `<tmp>/second`
/// and succeed. With `always_limited` every run stops on the limit.
fn fake_claude(ws: &Workspace, reset_in: u64, always_limited: bool) -> PathBuf {
    let dir = ws.tmp.path().display().to_string();
    let limited = if always_limited { "true" } else { "[ \"$n\" = 1 ]" };
    script(
        ws,
        "claude",
        &format!(
            r#"cat > /dev/null
n=$(cat {dir}/count 2>/dev/null || echo 0); n=$((n+1)); echo $n > {dir}/count
echo '{{"type":"system","subtype":"init","session_id":"q-1","model":"claude-sonnet-4-5"}}'
if {limited}; then
  reset=$(( $(date +%s) + {reset_in} ))
  echo $reset > {dir}/reset
  echo "{{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":true,\"result\":\"Claude AI usage limit reached|$reset\",\"total_cost_usd\":0,\"usage\":{{\"input_tokens\":0,\"output_tokens\":0}},\"session_id\":\"q-1\"}}"
  exit 1
fi
date +%s > {dir}/second
echo 'the work' > work.md
echo '{{"type":"result","subtype":"success","is_error":false,"result":"Wrote work.md","total_cost_usd":0.1,"usage":{{"input_tokens":100,"output_tokens":20}},"session_id":"q-2"}}'
"#
        ),
    )
}

fn setup(ws: &Workspace, toml: &str, task_id: &str) -> PathBuf {
    std::fs::create_dir_all(ws.data()).unwrap();
    std::fs::write(ws.data().join("baton.toml"), toml).unwrap();
    let plan = serde_json::json!({"task_id": task_id, "task_summary": "s",
    "phases": [{"phase_id": 1, "name": "P", "steps": [
        {"step_id": "1.1", "agent_name": "dev", "task_description": "do the work", "deliverables": ["work.md"]}
    ]}]});
    ws.write(&format!("{task_id}.json"), &plan.to_string())
}

fn path_with(bin: &Path) -> String {
    format!("{}:{}", bin.parent().unwrap().display(), std::env::var("PATH").unwrap_or_default())
}

/// `execute run` of `plan` in the background, its stderr going to `<tmp>/<log>`.
fn spawn(ws: &Workspace, plan: &Path, path: &str, log: &str) -> Child {
    let err = std::fs::File::create(ws.tmp.path().join(log)).unwrap();
    let mut cmd = ws.baton();
    cmd.env("PATH", path).args(["execute", "run", "--agent", "demo", "--plan"]).arg(plan);
    cmd.arg("--repo").arg(ws.repo()).stdout(Stdio::null()).stderr(Stdio::from(err)).spawn().unwrap()
}

/// Polls (up to 20 s) until the journal of `task_id` holds an event of `kind` (the database
/// and the execution may not exist yet when it starts).
fn wait_for_event(ws: &Workspace, task_id: &str, kind: &str) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    for _ in 0..400 {
        let found = ws.data().join("baton.db").exists()
            && rt.block_on(async {
                let Ok(store) = baton::store::Store::open(&ws.data().join("baton.db")).await else { return false };
                store.events(task_id, 0).await.is_ok_and(|events| events.iter().any(|e| e.kind == kind))
            });
        if found {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("no {kind} event in {task_id}'s journal");
}

fn kinds(ws: &Workspace, task_id: &str) -> Vec<String> {
    journal(ws, task_id).into_iter().map(|(k, _)| k).collect()
}

fn read_secs(path: &Path) -> i64 {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).trim().parse().unwrap()
}

#[test]
fn a_usage_limit_stop_waits_for_the_reset_and_then_completes() {
    let ws = Workspace::with_repo(&[("README.md", "x\n")]);
    let claude = fake_claude(&ws, 6, false);
    let plan = setup(&ws, "[agents.dev]\nprofile = 'claude'\n", "quota-1");
    let mut run = spawn(&ws, &plan, &path_with(&claude), "run.log");
    wait_for_event(&ws, "quota-1", "quota_wait");

    // While it waits: the step is pending (not failed), status and the CLI loop name the reset.
    let status = ws.status("quota-1");
    assert_eq!(status["status"], "running", "{status}");
    assert_eq!(status["step_results"]["1.1"]["status"], "pending", "{status}");
    let wait = &status["quota_waits"][0];
    assert_eq!(wait["account"], "claude", "{status}");
    let reset = read_secs(&ws.tmp.path().join("reset"));
    let until = chrono::DateTime::from_timestamp(reset, 0).unwrap();
    assert_eq!(wait["until"], until.to_rfc3339_opts(chrono::SecondsFormat::Secs, false), "{status}");
    let hhmm = until.format("%H:%M UTC").to_string();
    let text = stdout(&ws.run(&["execute", "status", "--task-id", "quota-1"]));
    assert!(text.contains(&format!("waiting for claude quota until {hhmm}")), "{text}");
    let next = stdout(&ws.run(&["execute", "next", "--task-id", "quota-1"]));
    assert!(next.contains("ACTION: WAIT"), "{next}");
    assert!(next.contains(&format!("waiting for claude quota until {hhmm}")), "{next}");
    assert!(next.contains(&format!("Until: {}", wait["until"].as_str().unwrap())), "{next}");

    // It resumes by itself at the reset and completes.
    let exit = run.wait().unwrap();
    let log = std::fs::read_to_string(ws.tmp.path().join("run.log")).unwrap();
    assert!(exit.success(), "{log}");
    assert!(log.contains("waiting for claude quota until"), "{log}");
    assert!(log.contains("resumes by itself"), "{log}");
    assert!(read_secs(&ws.tmp.path().join("second")) >= reset, "the second attempt started before the reset");
    let status = ws.status("quota-1");
    let step = &status["step_results"]["1.1"];
    assert_eq!(step["status"], "complete", "{step}");
    assert_eq!(step["attempt"], 2, "{step}");
    assert!(status.get("quota_waits").is_none(), "{status}");
    let kinds = kinds(&ws, "quota-1");
    let recorded: Vec<_> = journal(&ws, "quota-1")
        .into_iter()
        .filter(|(k, _)| k == "step_recorded")
        .map(|(_, p)| p["status"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(recorded, ["complete"], "no failed attempt is recorded: {kinds:?}");
    let order: Vec<&str> =
        kinds.iter().map(String::as_str).filter(|k| k.starts_with("quota") || k.starts_with("step_")).collect();
    assert_eq!(
        order,
        ["step_dispatched", "quota_wait", "quota_resumed", "step_dispatched", "step_recorded"],
        "{kinds:?}"
    );
    assert_eq!(ws.git(&["show", "baton/quota-1:work.md"]), "the work\n");
}

#[test]
fn a_restart_mid_wait_still_waits_then_resumes() {
    let ws = Workspace::with_repo(&[("README.md", "x\n")]);
    let claude = fake_claude(&ws, 5, false);
    let plan = setup(&ws, "[agents.dev]\nprofile = 'claude'\n", "quota-2");
    let path = path_with(&claude);
    let mut first = spawn(&ws, &plan, &path, "first.log");
    wait_for_event(&ws, "quota-2", "quota_wait");
    first.kill().unwrap();
    first.wait().unwrap();
    let reset = read_secs(&ws.tmp.path().join("reset"));

    let out = ws.run_plan_with(&plan, &[], &[("PATH", &path)]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stderr(&out).contains("waiting for claude quota until"), "{}", stderr(&out));
    assert!(read_secs(&ws.tmp.path().join("second")) >= reset, "the restarted run did not wait for the reset");
    assert_eq!(std::fs::read_to_string(ws.tmp.path().join("count")).unwrap().trim(), "2", "claude ran twice");
    assert_eq!(ws.status("quota-2")["step_results"]["1.1"]["status"], "complete");
}

#[test]
fn a_fallback_agent_runs_while_the_account_is_exhausted_and_the_journal_names_it() {
    let ws = Workspace::with_repo(&[("README.md", "x\n")]);
    // claude's reset is an hour away: only the fallback can finish today.
    let claude = fake_claude(&ws, 3600, true);
    let backup = script(&ws, "backup-agent", "cat > /dev/null\necho 'the backup work' > work.md\necho done\n");
    let toml = format!(
        "[agents.dev]\nprofile = 'claude'\nfallback = 'backup'\n[agents.backup]\nprofile = 'command'\ncommand = ['{}']\n",
        backup.display()
    );
    let plan = setup(&ws, &toml, "quota-3");
    let started = baton::clock::Stopwatch::start();
    let out = ws.run_plan_with(&plan, &[], &[("PATH", &path_with(&claude))]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(started.elapsed() < Duration::from_secs(60), "it waited for the hour instead of the fallback");
    assert!(stderr(&out).contains("fallback agent backup"), "{}", stderr(&out));
    let events = journal(&ws, "quota-3");
    let dispatched: Vec<_> = events
        .iter()
        .filter(|(k, _)| k == "step_dispatched")
        .map(|(_, p)| p["agent_name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(dispatched, ["dev", "backup"], "the journal names which agent ran");
    let (_, wait) = events.iter().find(|(k, _)| k == "quota_wait").unwrap();
    assert_eq!(wait["agent_name"], "dev");
    assert_eq!(wait["account"], "claude");
    let step = &ws.status("quota-3")["step_results"]["1.1"];
    assert_eq!(step["status"], "complete", "{step}");
    assert_eq!(step["agent_name"], "backup", "{step}");
    assert_eq!(ws.git(&["show", "baton/quota-3:work.md"]), "the backup work\n");
    assert_eq!(std::fs::read_to_string(ws.tmp.path().join("count")).unwrap().trim(), "1", "claude ran once");
}

/// An orchestrator without a driver (`execute next` in its own loop): the WAIT names the
/// reset, and once the service's clock passes it the next action is the step again (the
/// service journals `quota_resumed`). A manual clock, so nothing sleeps.
#[tokio::test]
async fn the_cli_loop_gets_the_step_again_once_the_wait_is_over() {
    use baton::model::action::Action;
    use baton::model::event::{Event, EventKind};
    use baton::runtime::app::{App, AppConfig};
    use chrono::TimeZone as _;

    let ws = Workspace::with_repo(&[("README.md", "x\n")]);
    let clock = baton::clock::Clock::manual(chrono::Utc.with_ymd_and_hms(2026, 12, 2, 15, 0, 0).unwrap());
    let app = App::build(AppConfig::new(ws.data()).clock(clock.clone())).await.unwrap();
    let plan = serde_json::json!({"task_id": "quota-4", "task_summary": "s",
        "phases": [{"phase_id": 1, "name": "P", "steps": [
            {"step_id": "1.1", "agent_name": "dev", "task_description": "do the work"}]}]});
    let mut state = app.execs.create(serde_json::from_value(plan).unwrap()).await.unwrap();
    let dispatched = EventKind::StepDispatched { step_id: "1.1".into(), agent_name: "dev".into() };
    app.execs.record(&mut state, Event::new(dispatched).by("orchestrator")).await.unwrap();
    let wait = EventKind::QuotaWait {
        step_id: "1.1".into(),
        agent_name: "dev".into(),
        account: "claude".into(),
        until: "2026-12-02T16:00:00+00:00".into(),
        reason: "Claude AI usage limit reached|1796227200".into(),
        cost_usd: 0.0,
        tokens: 0,
    };
    app.execs.record(&mut state, Event::new(wait).by("orchestrator")).await.unwrap();

    let Action::Wait { message, until } = app.ops.next_action("quota-4").await.unwrap() else { panic!() };
    assert_eq!(message, "Step 1.1 is waiting for claude quota until 16:00 UTC.");
    assert_eq!(until.as_deref(), Some("2026-12-02T16:00:00+00:00"));
    clock.advance(chrono::Duration::minutes(59));
    assert!(matches!(app.ops.next_action("quota-4").await.unwrap(), Action::Wait { until: Some(_), .. }));

    clock.advance(chrono::Duration::minutes(1));
    // `execute status` peeks, read only: the wait that is due shows as the step again, and
    // nothing is journaled by looking.
    let seen = app.ops.get("quota-4").await.unwrap();
    let Action::Dispatch(peeked) = app.ops.peek_next_action(&seen).await.unwrap() else { panic!("peek: no dispatch") };
    assert_eq!((peeked.step_id.as_str(), peeked.attempt), ("1.1", 2));
    let journaled = app.execs.store().events("quota-4", 0).await.unwrap();
    assert!(journaled.iter().all(|e| e.kind != "quota_resumed"), "peeking journaled nothing");
    let Action::Dispatch(d) = app.ops.next_action("quota-4").await.unwrap() else { panic!("no dispatch") };
    assert_eq!((d.step_id.as_str(), d.attempt), ("1.1", 2));
    let kinds: Vec<String> =
        app.execs.store().events("quota-4", 0).await.unwrap().into_iter().map(|e| e.kind).collect();
    assert_eq!(kinds.iter().filter(|k| *k == "quota_resumed").count(), 1, "{kinds:?}");
}

/// A team member stopped on its account's limit waits like a plain step (issue 18.1): its
/// sibling on another agent runs meanwhile, nothing is recorded failed, and the member runs
/// again by itself after the reset; the team step completes with both members' commits.
#[test]
fn a_team_member_stopped_on_its_quota_waits_while_its_sibling_runs() {
    let ws = Workspace::with_repo(&[("README.md", "x\n")]);
    let claude = fake_claude(&ws, 4, false);
    std::fs::create_dir_all(ws.data()).unwrap();
    std::fs::write(ws.data().join("baton.toml"), "[agents.dev]\nprofile = 'claude'\n").unwrap();
    let plan = serde_json::json!({"task_id": "quota-team", "task_summary": "s",
    "phases": [{"phase_id": 1, "name": "P", "steps": [
        {"step_id": "1.1", "agent_name": "team-lead", "task_description": "Write the work and b together.",
         "team": [
            {"member_id": "1.1.a", "agent_name": "dev", "task_description": "do the work", "deliverables": ["work.md"]},
            {"member_id": "1.1.b", "agent_name": "writer", "task_description": "Write b.", "deliverables": ["b.md"]}
         ]}
    ]}]});
    let plan = ws.write("quota-team.json", &plan.to_string());
    let out = ws.run_plan_with(&plan, &[], &[("PATH", &path_with(&claude))]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stderr(&out).contains("1.1.a: dev stopped on its claude quota"), "{}", stderr(&out));
    let reset = read_secs(&ws.tmp.path().join("reset"));
    assert!(read_secs(&ws.tmp.path().join("second")) >= reset, "the member ran again before the reset");
    let events = journal(&ws, "quota-team");
    let waits: Vec<_> = events.iter().filter(|(k, _)| k == "quota_wait").map(|(_, p)| p["step_id"].clone()).collect();
    assert_eq!(waits, ["1.1.a"], "{events:?}");
    assert!(
        events.iter().all(|(k, p)| k != "step_recorded" || p["status"] == "complete"),
        "no failed attempt is recorded: {events:?}"
    );
    let status = ws.status("quota-team");
    assert_eq!(status["status"], "complete", "{status}");
    assert_eq!(status["step_results"]["1.1.a"]["attempt"], 2, "{status}");
    assert_eq!(ws.git(&["show", "baton/quota-team:work.md"]), "the work\n");
    assert!(!ws.git(&["show", "baton/quota-team:b.md"]).is_empty());
}
