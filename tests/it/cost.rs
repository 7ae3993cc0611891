//! True cost and the gemini profile (issue 18 §3–4): every token kind counted and priced at
//! its own rate, an estimated cost marked as such in the ledger, the API and on the board, and
//! a gemini step run end to end by a real `baton` driver and shim with a fake `gemini` on PATH.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use axum::http::StatusCode;
use baton::runtime::specs::SpecInput;
use baton::store::SpecChange;
use serde_json::{json, Value};
use sqlx::Connection as _;

use crate::app::{phases_plan, Caller, TestApp};
use crate::common::*;

/// Writes an executable script `name` into `<tmp>/bin` and returns that folder.
fn bin_with(ws: &Workspace, name: &str, body: &str) -> PathBuf {
    let bin = ws.tmp.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let path = bin.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

/// The spend ledger's rows of `task_id`: (step, model, input, output, cache writes, cache
/// reads, cost, estimated).
async fn ledger(data: &std::path::Path, task_id: &str) -> Vec<(String, String, i64, i64, i64, i64, f64, bool)> {
    let url = format!("sqlite://{}", data.join("baton.db").display());
    let mut db = sqlx::SqliteConnection::connect(&url).await.unwrap();
    sqlx::query_as(
        "select step_id, model, input_tokens, output_tokens, cache_creation_tokens, cache_read_tokens, \
         cost_usd, cost_estimated from spend_ledger where task_id = ? order by seq",
    )
    .bind(task_id)
    .fetch_all(&mut db)
    .await
    .unwrap()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn a_gemini_step_runs_its_cli_and_is_priced_per_model_and_marked_estimated() {
    let ws = Workspace::with_repo(&[("README.md", "x\n")]);
    let seen = ws.tmp.path().join("gemini-saw");
    // A gemini stand-in: it records its argv and stdin, does the work, and prints the JSON
    // `gemini --output-format json` prints (the recorded two-model run).
    let recorded = fixtures().join("agent-cli/gemini/json-output.two-models.json");
    let bin = bin_with(
        &ws,
        "gemini",
        &format!(
            "printf '%s\\n' \"$@\" > '{args}'\ncat > '{stdin}'\necho 'green or red' > STATUS.md\n\
             echo 'Loaded cached credentials.' >&2\ncat '{recorded}'\n",
            args = seen.with_extension("args").display(),
            stdin = seen.with_extension("stdin").display(),
            recorded = recorded.display(),
        ),
    );
    std::fs::create_dir_all(ws.data()).unwrap();
    std::fs::write(ws.data().join("baton.toml"), "[agents.dev]\nprofile = 'gemini'\nmodel = 'gemini-2.5-pro'\n")
        .unwrap();
    let plan = json!({"task_id": "gem-1", "task_summary": "s", "phases": [{"phase_id": 1, "name": "P", "steps": [
        {"step_id": "1.1", "agent_name": "dev", "task_description": "Describe the status page.", "deliverables": ["STATUS.md"]}]}]});
    let plan = ws.write("gem-1.json", &plan.to_string());
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let out = ws.run_plan_with(&plan, &[], &[("PATH", &path)]);
    assert_eq!(code(&out), 0, "{}\n{}", stdout(&out), stderr(&out));

    // The CLI was asked for JSON, headless, with the prompt on stdin (never in the argv).
    let args = std::fs::read_to_string(seen.with_extension("args")).unwrap();
    let args: Vec<&str> = args.lines().collect();
    assert_eq!(
        args,
        [
            "--output-format",
            "json",
            "--model",
            "gemini-2.5-pro",
            "--approval-mode",
            "auto_edit",
            "--prompt",
            "Carry out the task described above."
        ]
    );
    let stdin = std::fs::read_to_string(seen.with_extension("stdin")).unwrap();
    assert!(stdin.contains("Describe the status page."), "{stdin}");

    // Its result: the response, its work on the branch, tokens by kind, an estimated cost.
    let step = &ws.status("gem-1")["step_results"]["1.1"];
    assert_eq!(step["status"], "complete", "{step}");
    assert!(step["outcome"].as_str().unwrap().starts_with("Added `docs/STATUS.md`"), "{step}");
    assert_eq!(ws.git(&["show", "baton/gem-1:STATUS.md"]), "green or red\n");
    assert_eq!(
        step["token_kinds"],
        json!({"input": 7950, "cache_write": 0, "cache_read": 18200, "output": 1745}),
        "{step}"
    );
    assert_eq!(step["estimated_tokens"], 7950 + 18200 + 1745, "every kind counts: {step}");
    assert_eq!(step["cost_estimated"], true, "{step}");
    // gemini-2.5-pro: 6110 in × $1.25 + 18200 cached × $0.125 + 1693 out × $10 per Mtok;
    // gemini-2.5-flash: 1840 in × $0.30 + 52 out × $2.50.
    let cost = step["cost_usd"].as_f64().unwrap();
    assert!(close(cost, 0.0268425 + 0.000682), "{cost}");

    // The journal and the ledger keep the kinds apart and say the cost is an estimate.
    let recorded = journal(&ws, "gem-1").into_iter().find(|(k, _)| k == "step_recorded").unwrap().1;
    assert_eq!(recorded["usage"]["model"], "gemini-2.5-pro", "{recorded}");
    assert_eq!(recorded["usage"]["cost_estimated"], true, "{recorded}");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let rows = rt.block_on(ledger(&ws.data(), "gem-1"));
    assert_eq!(rows.len(), 1, "{rows:?}");
    let (step_id, model, input, output, writes, reads, usd, estimated) = rows[0].clone();
    assert_eq!(
        (step_id.as_str(), model.as_str(), input, output, writes, reads),
        ("1.1", "gemini-2.5-pro", 7950, 1745, 0, 18200)
    );
    assert!(close(usd, cost) && estimated, "{usd} {estimated}");
}

#[test]
fn a_gemini_error_fails_the_step_with_its_message_and_its_tokens_still_count() {
    let ws = Workspace::with_repo(&[("README.md", "x\n")]);
    let recorded = fixtures().join("agent-cli/gemini/json-output.error.json");
    let bin = bin_with(&ws, "gemini", &format!("cat > /dev/null\ncat '{}'\nexit 53\n", recorded.display()));
    std::fs::create_dir_all(ws.data()).unwrap();
    std::fs::write(ws.data().join("baton.toml"), "[agents.dev]\nprofile = 'gemini'\n").unwrap();
    let plan = json!({"task_id": "gem-2", "task_summary": "s", "phases": [{"phase_id": 1, "name": "P", "steps": [
        {"step_id": "1.1", "agent_name": "dev", "task_description": "Do it.", "model": "gemini-2.5-pro"}]}]});
    let plan = ws.write("gem-2.json", &plan.to_string());
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let out = ws.run_plan_with(&plan, &[], &[("PATH", &path)]);
    assert_eq!(code(&out), 4, "{}\n{}", stdout(&out), stderr(&out));
    let step = &ws.status("gem-2")["step_results"]["1.1"];
    assert_eq!(step["status"], "failed", "{step}");
    assert!(step["error"].as_str().unwrap().starts_with("FatalTurnLimitedError: Reached max session turns"), "{step}");
    // 8200 in × $1.25 + (90 + 320 thinking) out × $10 per Mtok.
    assert!(close(step["cost_usd"].as_f64().unwrap(), 0.01435), "{step}");
    assert_eq!(step["cost_estimated"], true, "{step}");
}

/// The card of `spec_id` in the board's JSON.
fn card(board: &Value, spec_id: i64) -> Value {
    board["columns"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["cards"].as_array().unwrap().iter())
        .find(|c| c["spec_id"] == spec_id)
        .cloned()
        .unwrap_or_else(|| panic!("no card {spec_id} in {board}"))
}

#[tokio::test]
async fn the_api_and_the_board_show_tokens_by_kind_and_mark_an_estimated_cost() {
    let t = TestApp::new().await;
    let project = json!({"name": "cost", "repo_path": t.ws.repo(), "agent_profile": "demo"});
    assert_eq!(t.post("/api/v1/projects", project).await.0, StatusCode::CREATED);
    let input = SpecInput { project: "cost".into(), title: "Price it".into(), body: "Do it.".into(), priority: None };
    let spec = t.app.specs.create(input, "board", "", "alice").await.unwrap();
    let task_id = t.execution(&phases_plan("cost-1", 2, false)).await;
    let fire = SpecChange {
        action: "fire".into(),
        expected: "draft".into(),
        to: "executing".into(),
        actor: "fred".into(),
        at: t.app.clock.now_rfc3339(),
        ..SpecChange::default()
    };
    t.store().change_spec(spec.spec_id, &fire).await.unwrap();
    t.store().attach_execution(spec.spec_id, &task_id).await.unwrap();
    // Step 1.1 by claude: a reported cost, cache tokens apart. Step 2.1 by gemini: no cost
    // reported, priced from its tokens.
    let uri = format!("/api/v1/executions/{task_id}/events");
    let claude = json!({"kind": "step_recorded", "step_id": "1.1", "agent_name": "agent-1", "status": "complete",
        "outcome": "done", "tokens": 19365, "cost_usd": 0.40,
        "usage": {"attempt": 1, "model": "claude-sonnet-4-5", "input_tokens": 10, "output_tokens": 369,
                  "cache_creation_tokens": 6346, "cache_read_tokens": 12640}});
    let gemini = json!({"kind": "step_recorded", "step_id": "2.1", "agent_name": "agent-2", "status": "complete",
        "outcome": "done", "tokens": 9891, "cost_usd": 0.0138,
        "usage": {"attempt": 1, "model": "gemini-2.5-pro", "input_tokens": 4710, "output_tokens": 771,
                  "cache_read_tokens": 4410, "cost_estimated": true}});
    for event in [claude, gemini] {
        let (status, body) = t.post(&uri, event).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }

    // The API: each step's tokens by kind, and which cost is an estimate.
    let (status, exec) = t.get(&format!("/api/v1/executions/{task_id}")).await;
    assert_eq!(status, StatusCode::OK, "{exec}");
    let results = &exec["step_results"];
    assert_eq!(
        results["1.1"]["token_kinds"],
        json!({"input": 10, "cache_write": 6346, "cache_read": 12640, "output": 369}),
        "{results}"
    );
    assert!(results["1.1"].get("cost_estimated").is_none(), "a reported cost is no estimate: {results}");
    assert_eq!(
        results["2.1"]["token_kinds"],
        json!({"input": 4710, "cache_write": 0, "cache_read": 4410, "output": 771})
    );
    assert_eq!(results["2.1"]["cost_estimated"], true);

    // The ledger.
    let rows = ledger(&t.ws.data(), &task_id).await;
    assert_eq!(rows.iter().map(|r| (r.4, r.5, r.7)).collect::<Vec<_>>(), [(6346, 12640, false), (0, 4410, true)]);

    // The board: the card's spend and the part of it that is estimated.
    let (status, board) = t.get("/api/v1/board").await;
    assert_eq!(status, StatusCode::OK, "{board}");
    let c = card(&board, spec.spec_id);
    assert!(close(c["spend_usd"].as_f64().unwrap(), 0.4138), "{c}");
    assert!(close(c["spend_estimated_usd"].as_f64().unwrap(), 0.0138), "{c}");
    let (status, html) = t.page("/", Caller::Anonymous).await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("$0.41 spent <span class=\"estimated\""), "{html}");
    assert!(html.contains("($0.01 estimated)"), "{html}");

    // The execution page: tokens by kind per step, the estimated cost marked.
    let (status, html) = t.page(&format!("/executions/{task_id}"), Caller::Anonymous).await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("in 10 · out 369 · cache 18,986"), "{html}");
    assert!(html.contains("in 4,710 · out 771 · cache 4,410"), "{html}");
    assert_eq!(html.matches("(est.)").count(), 1, "only gemini's step is estimated");
}

/// A journal written before migration 0014: its estimated spend is read into the card once,
/// and the ledger's cache columns read 0 for events that predate them.
#[tokio::test]
async fn migration_0014_backfills_the_estimated_spend_of_older_executions() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("baton.db");
    let url = format!("sqlite://{}?mode=rwc", path.display());
    let mut db = sqlx::SqliteConnection::connect(&url).await.unwrap();
    let mut before = sqlx::migrate!("./migrations");
    before.migrations = std::borrow::Cow::Owned(before.migrations.iter().filter(|m| m.version < 14).cloned().collect());
    before.run_direct(&mut db).await.unwrap();
    sqlx::query(
        "insert into executions (task_id, status, current_phase, steps_done, steps_total, spend_usd, created_at, updated_at) \
         values ('old-1', 'running', '1 P', 0, 2, 0.5, 't', 't')",
    )
    .execute(&mut db)
    .await
    .unwrap();
    let events = [
        r#"{"kind":"step_recorded","step_id":"1.1","agent_name":"a","status":"complete","cost_usd":0.4,"usage":{"attempt":1,"model":"sonnet","input_tokens":5,"output_tokens":1}}"#,
        r#"{"kind":"step_recorded","step_id":"1.2","agent_name":"b","status":"complete","cost_usd":0.1,"usage":{"attempt":1,"model":"gpt-5","input_tokens":50,"output_tokens":10,"cost_estimated":true}}"#,
    ];
    for (seq, payload) in events.iter().enumerate() {
        sqlx::query(
            "insert into execution_events (task_id, seq, kind, payload, idempotency_key, at, prev_hash, hash) \
             values ('old-1', ?, 'step_recorded', ?, ?, 't', 'p', 'h')",
        )
        .bind(seq as i64 + 1)
        .bind(payload)
        .bind(format!("k{seq}"))
        .execute(&mut db)
        .await
        .unwrap();
    }
    db.close().await.unwrap();

    let store = baton::store::Store::open(&path).await.unwrap();
    store.close().await;
    let mut db = sqlx::SqliteConnection::connect(&url).await.unwrap();
    let estimated: f64 = sqlx::query_scalar("select estimated_usd from execution_live where task_id = 'old-1'")
        .fetch_one(&mut db)
        .await
        .unwrap();
    assert!(close(estimated, 0.1), "only the estimated attempt: {estimated}");
    let cache: Vec<(i64, i64)> = sqlx::query_as(
        "select cache_creation_tokens, cache_read_tokens from spend_ledger where task_id = 'old-1' order by seq",
    )
    .fetch_all(&mut db)
    .await
    .unwrap();
    assert_eq!(cache, [(0, 0), (0, 0)]);
}
