//! The spec queue over REST and the HTML forms, driven with `oneshot` requests against one
//! router over a real SQLite file and a real git repository (nothing here fires: firing runs
//! agents, which `serve.rs` covers with the real binary).

use axum::body::Body;
use axum::http::{Request, StatusCode};
use baton::runtime::config::DataDir;
use baton::runtime::executions::Executions;
use serde_json::{json, Value};
use tower::ServiceExt as _;

use crate::app::TestApp;
use crate::common::Workspace;

/// An app whose requests are `tester`'s, with project `p` registered on the workspace's
/// repository.
async fn with_project() -> TestApp {
    let app = TestApp::new().await.acting_as("tester");
    let (status, body) = app.post("/api/v1/projects", project_body(&app.ws, "p")).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    app
}

/// Creates a spec titled `title` in project `p`; its id.
async fn spec(app: &TestApp, title: &str) -> i64 {
    let (status, body) = app.post("/api/v1/specs", json!({"project": "p", "title": title, "body": "Do it."})).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body["spec_id"].as_i64().unwrap()
}

fn project_body(ws: &Workspace, name: &str) -> Value {
    json!({"name": name, "repo_path": ws.repo(), "agent_profile": "demo"})
}

#[tokio::test]
async fn projects_register_list_show_and_refuse_bad_input() {
    let app = with_project().await;
    let (status, body) = app.get("/api/v1/projects/p").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["default_branch"], "main", "the repository's current branch");
    assert_eq!(body["agent_profile"], "demo");
    let (status, body) = app.post("/api/v1/projects", project_body(&app.ws, "p")).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(body["details"].get("current_status").is_none(), "a name conflict has no status: {body}");
    let cases = [
        (json!({"name": "bad name!", "repo_path": app.ws.repo()}), "name"),
        (json!({"name": "q", "repo_path": app.ws.data().join("nowhere")}), "repo_path"),
        (json!({"name": "q", "repo_path": app.ws.repo(), "default_branch": "nope"}), "default_branch"),
        (json!({"name": "q", "repo_path": app.ws.repo(), "agent_profile": "gpt"}), "agent_profile"),
    ];
    for (body, field) in cases {
        let (status, answer) = app.post("/api/v1/projects", body).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
        assert_eq!(answer["details"]["field"], field, "{answer}");
    }
    let (status, answer) = app.post("/api/v1/projects", json!({"name": "q", "repo_path": "/", "colour": 1})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "unknown fields are refused: {answer}");
    assert!(answer["message"].as_str().unwrap().contains("colour"), "{answer}");
    let (status, list) = app.get("/api/v1/projects").await;
    assert_eq!((status, list.as_array().unwrap().len()), (StatusCode::OK, 1));
    assert_eq!(app.get("/api/v1/projects/nope").await.0, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_project_with_specs_cannot_be_removed() {
    let app = with_project().await;
    let id = spec(&app, "Keep me").await;
    let del = |uri: &str| Request::delete(uri).body(Body::empty()).unwrap();
    let (status, body) = app.send(del("/api/v1/projects/p")).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(body["message"].as_str().unwrap().contains("1 spec"), "{body}");
    // The message used to say "cancel or move them first": neither ever freed the project.
    let (status, body) = app.post(&format!("/api/v1/specs/{id}/cancel"), json!({"reason": "not needed"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = app.send(del("/api/v1/projects/p")).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(message.contains("cancelled ones too") && message.contains("only while it has none"), "{body}");
    assert!(!message.contains("cancel or move"), "{body}");
    let (status, body) = app.post("/api/v1/projects", project_body(&app.ws, "empty")).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(app.send(del("/api/v1/projects/empty")).await.0, StatusCode::NO_CONTENT);
    assert_eq!(app.send(del("/api/v1/projects/empty")).await.0, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn spec_creation_names_the_bad_field() {
    let app = with_project().await;
    let long = "x".repeat(201);
    let cases = [
        (json!({"project": "p", "title": "  "}), StatusCode::UNPROCESSABLE_ENTITY, Some("title")),
        (json!({"project": "p", "title": long}), StatusCode::UNPROCESSABLE_ENTITY, Some("title")),
        (json!({"project": "p", "title": "a\nb"}), StatusCode::UNPROCESSABLE_ENTITY, Some("title")),
        (json!({"project": "p", "title": "t", "priority": 9}), StatusCode::UNPROCESSABLE_ENTITY, Some("priority")),
        (
            json!({"project": "p", "title": "t", "body": "x".repeat(70_000)}),
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("body"),
        ),
        (json!({"project": "nope", "title": "t"}), StatusCode::NOT_FOUND, None),
        (json!({"title": "t"}), StatusCode::UNPROCESSABLE_ENTITY, None),
    ];
    for (body, expected, field) in cases {
        let (status, answer) = app.post("/api/v1/specs", body.clone()).await;
        assert_eq!(status, expected, "{body} → {answer}");
        if let Some(field) = field {
            assert_eq!(answer["details"]["field"], field, "{answer}");
        }
    }
    let (status, list) = app.get("/api/v1/specs").await;
    assert_eq!(status, StatusCode::OK);
    assert!(list.as_array().unwrap().is_empty(), "nothing half-written: {list}");
    assert_eq!(app.get("/api/v1/specs/abc").await.0, StatusCode::NOT_FOUND);
    assert_eq!(app.get("/api/v1/specs/999").await.0, StatusCode::NOT_FOUND);
    // A value out of the schema's enum is 400, as every query value out of its schema is
    // (it was 422 while `?archived=maybe` was 400, found by a tester).
    let (status, body) = app.get("/api/v1/specs?status=weird").await;
    assert_eq!((status, body["error"].as_str()), (StatusCode::BAD_REQUEST, Some("bad_request")), "{body}");
}

#[tokio::test]
async fn the_lifecycle_records_every_transition_with_actor_and_refuses_illegal_ones() {
    let app = with_project().await;
    let id = spec(&app, "Add a greeting").await;
    let uri = |action: &str| format!("/api/v1/specs/{id}/{action}");

    let (status, body) = app.post(&uri("fire"), json!({})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["details"]["current_status"], "draft");

    let (status, body) = app.post_as(&uri("enrich"), "erin", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "enriched");
    assert_eq!(body["risk"], "LOW");
    assert_eq!(body["plan"]["phases"].as_array().unwrap().len(), 3);
    let gate = &body["plan"]["phases"][1]["gate"];
    assert_eq!(gate["command"], "cargo test", "detected from Cargo.toml: {gate}");
    assert!(body["forecast"]["mid_usd"].as_f64().unwrap() > 0.0, "{body}");

    let (status, body) = app.post(&uri("review"), json!({"decision": "bounce"})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "a bounce needs a reason: {body}");
    let (status, body) =
        app.post_as(&uri("review"), "rita", json!({"decision": "bounce", "reason": "say which greeting"})).await;
    assert_eq!((status, body["status"].as_str()), (StatusCode::OK, Some("bounced")), "{body}");
    assert_eq!(body["stage"], "queued");

    let req = Request::patch(format!("/api/v1/specs/{id}"))
        .header("content-type", "application/json")
        .body(Body::from(json!({"body": "Say hello in French."}).to_string()))
        .unwrap();
    let (status, body) = app.send(req).await;
    assert_eq!((status, body["status"].as_str()), (StatusCode::OK, Some("draft")), "{body}");
    assert!(body["plan"].is_null(), "an edit drops the plan: {body}");
    let (_, board) = app.get("/api/v1/board").await;
    assert_eq!(board["columns"][0]["cards"][0]["agents"], json!([]), "and the card's agents with it");

    for (action, expected) in [("enrich", "enriched"), ("submit", "in_review")] {
        let (status, body) = app.post(&uri(action), json!({})).await;
        assert_eq!((status, body["status"].as_str()), (StatusCode::OK, Some(expected)), "{body}");
    }
    let (_, board) = app.get("/api/v1/board").await;
    assert_eq!(board["columns"][1]["stage"], "in_review");
    assert_eq!(board["columns"][1]["cards"][0]["spec_id"], id);
    let agents = board["columns"][1]["cards"][0]["agents"].as_array().unwrap().clone();
    assert!(agents.contains(&json!("architect")) && agents.contains(&json!("code-reviewer")), "{agents:?}");
    let (status, body) = app.post_as(&uri("review"), "rita", json!({"decision": "approve"})).await;
    assert_eq!((status, body["status"].as_str()), (StatusCode::OK, Some("approved")), "{body}");

    let actions: Vec<(String, String)> = body["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["action"].as_str().unwrap().to_string(), e["actor"].as_str().unwrap().to_string()))
        .collect();
    let expected = [
        ("create", "tester"),
        ("enrich", "erin"),
        ("bounce", "rita"),
        ("edit", "api"),
        ("enrich", "tester"),
        ("submit", "tester"),
        ("approve", "rita"),
    ];
    assert_eq!(actions, expected.map(|(a, b)| (a.to_string(), b.to_string())));
    assert!(body["events"].as_array().unwrap().iter().all(|e| !e["at"].as_str().unwrap().is_empty()));

    let (status, body) = app.post(&uri("cancel"), json!({"reason": "not now"})).await;
    assert_eq!((status, body["status"].as_str()), (StatusCode::OK, Some("cancelled")), "{body}");
    let (status, body) = app.post(&uri("enrich"), json!({})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["details"]["current_status"], "cancelled");
    let (_, archive) = app.get("/api/v1/board?archived=true").await;
    assert_eq!(archive["columns"][0]["cards"][0]["spec_id"], id);
    let (_, board) = app.get("/api/v1/board").await;
    assert!(board["columns"].as_array().unwrap().iter().all(|c| c["total"] == 0), "{board}");
}

#[tokio::test]
async fn an_uploaded_plan_is_parsed_validated_and_forecast() {
    let app = with_project().await;
    let id = spec(&app, "Use my plan").await;
    let put = |plan: Value| {
        Request::put(format!("/api/v1/specs/{id}/plan"))
            .header("content-type", "application/json")
            .body(Body::from(plan.to_string()))
            .unwrap()
    };
    let (status, body) = app.send(put(json!({"task_id": "t", "task_summary": "s", "phases": 3}))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(body["message"].as_str().unwrap().contains("phases"), "names the field: {body}");
    let duplicate = json!({"task_id": "t", "task_summary": "s", "phases": [
        {"phase_id": 1, "name": "A", "steps": [
            {"step_id": "1.1", "agent_name": "a", "task_description": "x"},
            {"step_id": "1.1", "agent_name": "", "task_description": "y"}]}]});
    let (status, body) = app.send(put(duplicate)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(body["details"]["problems"].as_array().unwrap().len() >= 2, "every problem listed: {body}");
    let (_, spec) = app.get(&format!("/api/v1/specs/{id}")).await;
    assert_eq!(spec["status"], "draft", "a refused plan changes nothing");

    let good = json!({"task_id": "t", "task_summary": "s", "risk_level": "HIGH", "phases": [
        {"phase_id": 1, "name": "A", "steps": [
            {"step_id": "1.1", "agent_name": "alpha", "model": "haiku", "task_description": "x"}]}]});
    let (status, body) = app.send(put(good)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!((body["status"].as_str(), body["risk"].as_str()), (Some("enriched"), Some("HIGH")));
    assert_eq!(body["forecast"]["steps"][0]["agent_name"], "alpha");
    assert_eq!(body["forecast"]["steps"][0]["model"], "haiku");
}

#[tokio::test]
async fn two_reviewers_at_once_record_exactly_one_review() {
    let app = with_project().await;
    let id = spec(&app, "Race").await;
    app.post(&format!("/api/v1/specs/{id}/enrich"), json!({})).await;
    let review = |decision: &str| {
        let body = json!({"decision": decision, "reason": "because"}).to_string();
        let req = Request::post(format!("/api/v1/specs/{id}/review"))
            .header("content-type", "application/json")
            .body(Body::from(body))
            .unwrap();
        app.router().oneshot(req)
    };
    let (a, b) = tokio::join!(review("approve"), review("bounce"));
    let mut statuses = [a.unwrap().status(), b.unwrap().status()];
    statuses.sort();
    assert_eq!(statuses, [StatusCode::OK, StatusCode::CONFLICT]);
    let (_, spec) = app.get(&format!("/api/v1/specs/{id}")).await;
    assert_eq!(spec["events"].as_array().unwrap().len(), 3, "create, enrich, one review: {spec}");
}

fn cookie_of(headers: &axum::http::HeaderMap) -> String {
    let set = headers.get("set-cookie").expect("a page sets the CSRF cookie").to_str().unwrap();
    assert!(set.contains("HttpOnly") && set.contains("SameSite=Strict"), "{set}");
    set.split(';').next().unwrap().to_string()
}

#[tokio::test]
async fn forms_need_the_csrf_token_of_their_cookie() {
    let app = with_project().await;
    let (status, headers, html) = app.text(Request::get("/specs/new").body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::OK);
    let cookie = cookie_of(&headers);
    let token = cookie.split_once('=').unwrap().1.to_string();
    assert!(html.contains(&format!("value=\"{token}\"")), "the form carries the token");
    let form = |cookie: Option<&str>, csrf: &str| {
        let mut req = Request::post("/specs").header("content-type", "application/x-www-form-urlencoded");
        if let Some(c) = cookie {
            req = req.header("cookie", c);
        }
        req.body(Body::from(format!("csrf={csrf}&project=p&title=From+a+form&priority=1&body=hi"))).unwrap()
    };
    let (status, _, html) = app.text(form(None, &token)).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "no cookie");
    assert!(html.contains("CSRF"), "{html}");
    let (status, _, _) = app.text(form(Some(&cookie), "0123456789abcdef0123456789abcdef")).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "another token");
    let (_, list) = app.get("/api/v1/specs").await;
    assert!(list.as_array().unwrap().is_empty(), "refused forms created nothing");
    let (status, headers, _) = app.text(form(Some(&cookie), &token)).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(headers.get("location").unwrap(), "/specs/1");
    let (_, spec) = app.get("/api/v1/specs/1").await;
    assert_eq!((spec["title"].as_str(), spec["priority"].as_i64()), (Some("From a form"), Some(1)));
}

#[tokio::test]
async fn budget_forms_name_the_accepted_range() {
    // Found by a tester: 1e12 was refused as "not a USD amount above 0".
    let app = with_project().await;
    let id = spec(&app, "Costly").await;
    let (_, headers, _) = app.text(Request::get("/specs/new").body(Body::empty()).unwrap()).await;
    let cookie = cookie_of(&headers);
    let token = cookie.split_once('=').unwrap().1.to_string();
    // Out of range, the services' 422, as the API answers the same numbers (a form's `-5` had
    // been the door's own 400, found by a tester); not a number, the form's 400.
    for (usd, status) in [
        ("1e12", StatusCode::UNPROCESSABLE_ENTITY),
        ("-5", StatusCode::UNPROCESSABLE_ENTITY),
        ("0.001", StatusCode::UNPROCESSABLE_ENTITY),
        ("lots", StatusCode::BAD_REQUEST),
        ("NaN", StatusCode::BAD_REQUEST),
        ("inf", StatusCode::BAD_REQUEST),
        ("1e400", StatusCode::BAD_REQUEST),
    ] {
        let forms = [
            (format!("/specs/{id}/review"), format!("csrf={token}&decision=approve&budget_usd={usd}")),
            ("/executions/none/budget".to_string(), format!("csrf={token}&result=raise&by_usd={usd}")),
        ];
        for (uri, body) in forms {
            let (got, html) = app.post_form(&uri, &cookie, body.to_string()).await;
            assert_eq!(got, status, "{uri} {usd}: {html}");
            assert!(html.contains("from 0.01 to 1000000") && !html.contains("above 0"), "{uri}: {html}");
        }
        if let Some(number) = usd.parse::<f64>().ok().filter(|v| v.is_finite()) {
            let review = json!({"decision": "approve", "budget_usd": number});
            let (api, body) = app.post(&format!("/api/v1/specs/{id}/review"), review).await;
            assert_eq!(api, status, "the API, {usd}: {body}");
            assert_eq!(body["details"]["field"], "budget_usd", "{body}");
        }
    }
    let (_, spec) = app.get(&format!("/api/v1/specs/{id}")).await;
    assert_eq!(spec["status"], "draft", "{spec}");
}

#[tokio::test]
async fn a_form_without_its_csrf_field_is_403_like_a_wrong_token() {
    // Found by a tester: a form missing the field answered 400 (the form did not parse).
    let app = with_project().await;
    let id = spec(&app, "Guarded").await;
    let (_, headers, _) = app.text(Request::get("/specs/new").body(Body::empty()).unwrap()).await;
    let cookie = cookie_of(&headers);
    let forms = [
        ("/specs".to_string(), "project=p&title=No+token"),
        (format!("/specs/{id}/enrich"), ""),
        ("/executions/none/cancel".to_string(), "reason=x"),
        ("/specs/import".to_string(), "project=p&reference=github%3Ao%2Fr%231"),
        ("/login".to_string(), "token=nope"),
        ("/logout".to_string(), ""),
    ];
    for (uri, body) in forms {
        let (status, html) = app.post_form(&uri, &cookie, body.to_string()).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{uri}: {html}");
        assert!(html.contains("CSRF token does not match"), "{uri}: the same message as a wrong token: {html}");
    }
    let (_, spec) = app.get(&format!("/api/v1/specs/{id}")).await;
    assert_eq!(spec["status"], "draft", "nothing changed: {spec}");
    let (_, list) = app.get("/api/v1/specs").await;
    assert_eq!(list.as_array().unwrap().len(), 1, "no spec was created: {list}");
}

/// Whether `html` holds `text` escaped (as named or numeric character references).
fn has_text(html: &str, text: &str) -> bool {
    let named = text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
    let numeric = text.replace('&', "&#38;").replace('<', "&#60;").replace('>', "&#62;");
    html.contains(&named) || html.contains(&numeric)
}

#[tokio::test]
async fn hostile_text_is_escaped_on_every_page() {
    let app = with_project().await;
    let title = "<script>alert(1)</script><img src=x onerror=alert(2)>";
    let (status, body) =
        app.post("/api/v1/specs", json!({"project": "p", "title": title, "body": "</pre><b>bold</b>"})).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let id = body["spec_id"].as_i64().unwrap();
    app.post(&format!("/api/v1/specs/{id}/enrich"), json!({})).await;
    for uri in ["/".to_string(), format!("/specs/{id}")] {
        let (status, _, html) = app.text(Request::get(&uri).body(Body::empty()).unwrap()).await;
        assert_eq!(status, StatusCode::OK, "{uri}");
        assert!(!html.contains("<script>alert"), "{uri} has raw script");
        assert!(!html.contains("<img src=x"), "{uri} has a raw img");
        assert!(has_text(&html, "<script>alert(1)</script>"), "{uri} shows the title as text");
    }
    let (_, _, html) = app.text(Request::get(format!("/specs/{id}")).body(Body::empty()).unwrap()).await;
    assert!(!html.contains("<b>bold</b>") && has_text(&html, "<b>bold</b>"), "the body is escaped");
}

#[tokio::test]
async fn page_errors_are_html_with_the_api_status() {
    let app = with_project().await;
    let (status, _, html) = app.text(Request::get("/specs/42").body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(html.contains("no spec with id 42"), "{html}");
    let (status, _, html) = app.text(Request::get("/executions/nope").body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(html.contains("no execution with task id nope"), "{html}");
}

/// Reads SSE frames from `body` until `n` events (frames with an `id:`) arrived.
async fn sse_events(body: Body, n: usize) -> Vec<(String, String)> {
    use http_body_util::BodyExt as _;
    let mut body = body;
    let mut text = String::new();
    let mut events = Vec::new();
    let deadline = std::time::Duration::from_secs(10);
    tokio::time::timeout(deadline, async {
        while events.len() < n {
            let Some(frame) = body.frame().await else { break };
            if let Ok(data) = frame.unwrap().into_data() {
                text.push_str(std::str::from_utf8(&data).unwrap());
            }
            while let Some((block, rest)) = text.split_once("\n\n") {
                let id = block.lines().find_map(|l| l.strip_prefix("id: ")).map(String::from);
                let kind = block.lines().find_map(|l| l.strip_prefix("event: ")).unwrap_or_default().to_string();
                if let Some(id) = id {
                    events.push((id, kind));
                }
                text = rest.to_string();
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the stream sent {n} events in time; got {events:?}, pending {text:?}"));
    events
}

#[tokio::test]
async fn the_journal_stream_resumes_after_last_event_id() {
    let app = TestApp::new().await.acting_as("tester");
    let plan = json!({"task_id": "sse", "task_summary": "s", "phases": [
        {"phase_id": 1, "name": "A", "steps": [{"step_id": "1.1", "agent_name": "a", "task_description": "x"}]}]});
    let execs = Executions::open(DataDir::open(&app.ws.data()).unwrap()).await.unwrap();
    execs.create(baton::model::plan::MachinePlan::from_json(&plan.to_string()).unwrap()).await.unwrap();
    let (status, body) = app
        .post("/api/v1/executions/sse/events", json!({"kind": "step_dispatched", "step_id": "1.1", "agent_name": "a"}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");

    let stream = |last: Option<&str>| {
        let mut req = Request::get("/api/v1/executions/sse/stream");
        if let Some(l) = last {
            req = req.header("last-event-id", l);
        }
        app.router().oneshot(req.body(Body::empty()).unwrap())
    };
    let all = sse_events(stream(None).await.unwrap().into_body(), 1).await;
    assert_eq!(all, [("1".into(), "step_dispatched".into())]);

    let resumed = stream(Some("1")).await.unwrap();
    assert_eq!(resumed.headers().get("content-type").unwrap(), "text/event-stream");
    let body = resumed.into_body();
    let (status, _) = app
        .post(
            "/api/v1/executions/sse/events",
            json!({"kind": "step_recorded", "step_id": "1.1", "agent_name": "a", "status": "complete"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let after = sse_events(body, 1).await;
    assert_eq!(after, [("2".into(), "step_recorded".into())], "nothing before Last-Event-ID is sent again");
    let from_start = sse_events(stream(Some("0")).await.unwrap().into_body(), 2).await;
    assert_eq!(from_start, [("1".into(), "step_dispatched".into()), ("2".into(), "step_recorded".into())]);

    let bad = app.router().oneshot(
        Request::get("/api/v1/executions/sse/stream").header("last-event-id", "x").body(Body::empty()).unwrap(),
    );
    assert_eq!(bad.await.unwrap().status(), StatusCode::BAD_REQUEST);
    assert_eq!(app.get("/api/v1/executions/nope/stream").await.0, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn another_site_cannot_act_through_the_api() {
    // Found with Chromium: a page on http://localhost:PORT fired a spec on 127.0.0.1:PORT with
    // a body-less `fetch(…, {method: 'POST', mode: 'no-cors'})` in open mode.
    let app = with_project().await;
    let id = spec(&app, "Guarded").await;
    let cross = |origin: Option<&str>, site: Option<&str>| {
        let mut req = Request::post(format!("/api/v1/specs/{id}/enrich")).header("host", "127.0.0.1:8741");
        if let Some(o) = origin {
            req = req.header("origin", o);
        }
        if let Some(s) = site {
            req = req.header("sec-fetch-site", s);
        }
        req.body(Body::empty()).unwrap()
    };
    let (status, body) = app.send(cross(Some("http://localhost:8741"), Some("same-site"))).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let (status, _) = app.send(cross(Some("http://evil.example"), None)).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (_, spec) = app.get(&format!("/api/v1/specs/{id}")).await;
    assert_eq!(spec["status"], "draft", "nothing changed");
    let (status, body) = app.send(cross(Some("http://127.0.0.1:8741"), Some("same-origin"))).await;
    assert_eq!(status, StatusCode::OK, "the board's own page may: {body}");
}

#[tokio::test]
async fn open_mode_only_answers_loopback_host_names() {
    // Found by a tester: a page whose DNS name was rebound to 127.0.0.1 sent requests with its
    // own Host and Origin, passed the same-origin check, registered a project whose test
    // command ran as a gate.
    let app = with_project().await;
    let with_host = |host: &str| {
        Request::post("/api/v1/projects")
            .header("host", host)
            .header("origin", format!("http://{host}"))
            .header("content-type", "application/json")
            .body(Body::from(json!({"name": "pwn", "repo_path": app.ws.repo()}).to_string()))
            .unwrap()
    };
    let (status, body) = app.send(with_host("rebind.attacker.example:8741")).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(body["message"].as_str().unwrap().contains("open mode"), "{body}");
    assert_eq!(app.get("/api/v1/projects/pwn").await.0, StatusCode::NOT_FOUND, "nothing registered");
    let (status, body) = app.send(with_host("localhost:8741")).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let health = Request::get("/healthz").header("host", "anything.example").body(Body::empty()).unwrap();
    assert_eq!(app.send(health).await.0, StatusCode::OK, "health stays public");
}

#[tokio::test]
async fn the_boards_sql_stage_is_the_models_stage_for_every_status() {
    use baton::model::spec::{SpecStage, SPEC_STATUSES};
    use sqlx::Connection as _;
    let mut db = sqlx::SqliteConnection::connect("sqlite::memory:").await.unwrap();
    let sql = format!(
        "select {} from (select ?1 as status) s, (select ?2 as status) e, (select ?3 as pr_url) m",
        baton::runtime::board::stage_sql()
    );
    let execution_statuses = [
        None,
        Some("running"),
        Some("approval_pending"),
        Some("feedback_pending"),
        Some("budget_exceeded"),
        Some("gate_pending"),
        Some("gate_failed"),
        Some("complete"),
        Some("failed"),
        Some("cancelled"),
    ];
    for status in SPEC_STATUSES {
        for exec in execution_statuses {
            for pr in [None, Some("https://github.com/o/r/pull/1")] {
                let got: String = sqlx::query_scalar(&sql)
                    .bind(status.as_str())
                    .bind(exec)
                    .bind(pr)
                    .fetch_one(&mut db)
                    .await
                    .unwrap();
                let want = SpecStage::of_pull(status, exec, pr.is_some());
                assert_eq!(got, want.as_str(), "{status} with execution {exec:?}, pull request {pr:?}");
            }
        }
    }
    assert_eq!(
        SpecStage::of_pull(baton::model::spec::SpecStatus::Executing, Some("complete"), true),
        SpecStage::PrOpen
    );
}

#[tokio::test]
async fn board_columns_page_in_the_database() {
    let app = with_project().await;
    for i in 0..45 {
        spec(&app, &format!("Spec {i}")).await;
    }
    let (_, board) = app.get("/api/v1/board").await;
    let queued = &board["columns"][0];
    assert_eq!((queued["total"].as_i64(), queued["pages"].as_i64()), (Some(45), Some(3)), "{queued}");
    assert_eq!(queued["cards"].as_array().unwrap().len(), 20);
    assert_eq!(queued["cards"][0]["title"], "Spec 44", "newest first");
    let (_, page3) = app.get("/api/v1/board?page=3").await;
    let titles: Vec<&str> =
        page3["columns"][0]["cards"].as_array().unwrap().iter().map(|c| c["title"].as_str().unwrap()).collect();
    assert_eq!(titles, ["Spec 4", "Spec 3", "Spec 2", "Spec 1", "Spec 0"]);
    // Past the last page: that page, empty (it said `"page": 1` with no cards).
    let (_, page4) = app.get("/api/v1/board?page=4").await;
    let queued = &page4["columns"][0];
    assert_eq!((queued["page"].as_i64(), queued["pages"].as_i64()), (Some(4), Some(3)), "{queued}");
    assert_eq!(queued["cards"], json!([]));
}

#[tokio::test]
async fn a_board_or_list_filtered_on_an_unknown_project_is_404_naming_it() {
    // Found by a tester: a misspelt `?project=` answered an empty board, as if it had no specs.
    let app = with_project().await;
    spec(&app, "In p").await;
    for uri in ["/api/v1/board?project=nope", "/api/v1/specs?project=nope"] {
        let (status, body) = app.get(uri).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{uri}: {body}");
        assert!(body["message"].as_str().unwrap().contains("nope"), "{uri}: {body}");
    }
    for uri in ["/?project=nope", "/archive?project=nope"] {
        let (status, _, html) = app.text(Request::get(uri).body(Body::empty()).unwrap()).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{uri}: {html}");
        assert!(html.contains("no project named nope"), "{uri}: {html}");
    }
    let (status, board) = app.get("/api/v1/board?project=p").await;
    assert_eq!(status, StatusCode::OK, "{board}");
    assert_eq!(board["columns"][0]["total"], 1, "{board}");
    let (status, list) = app.get("/api/v1/specs?project=p").await;
    assert_eq!((status, list.as_array().map(Vec::len)), (StatusCode::OK, Some(1)), "{list}");
    for uri in ["/?project=", "/?project=p", "/archive"] {
        assert_eq!(app.text(Request::get(uri).body(Body::empty()).unwrap()).await.0, StatusCode::OK, "{uri}");
    }
}

/// The stage (column) of spec `id` on the board JSON.
fn column_of(board: &Value, id: i64) -> Option<String> {
    board["columns"].as_array().unwrap().iter().find_map(|c| {
        c["cards"]
            .as_array()
            .unwrap()
            .iter()
            .any(|card| card["spec_id"] == id)
            .then(|| c["stage"].as_str().unwrap().into())
    })
}

#[tokio::test]
async fn the_board_shows_every_change_at_once_even_within_the_same_second() {
    // Found while adding the board cache: the version was the newest `updated_at` (seconds)
    // and the row count, so two changes in one second looked like none.
    let app = with_project().await;
    let a = spec(&app, "First");
    let a = a.await;
    let (_, board) = app.get("/api/v1/board").await;
    assert_eq!(column_of(&board, a).as_deref(), Some("queued"));
    let (status, _) = app.post(&format!("/api/v1/specs/{a}/enrich"), json!({})).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = app.post(&format!("/api/v1/specs/{a}/submit"), json!({})).await;
    assert_eq!(status, StatusCode::OK);
    let (_, board) = app.get("/api/v1/board").await;
    assert_eq!(column_of(&board, a).as_deref(), Some("in_review"), "the submit shows at once");
    // A title edit (no stage change) shows too, as does a new spec.
    let (status, _) = app
        .send(
            Request::patch(format!("/api/v1/specs/{a}"))
                .header("content-type", "application/json")
                .header("x-baton-actor", "tester")
                .body(Body::from(json!({"title": "First, renamed"}).to_string()))
                .unwrap(),
        )
        .await;
    assert_ne!(status, StatusCode::INTERNAL_SERVER_ERROR);
    let b = spec(&app, "Second").await;
    let (_, board) = app.get("/api/v1/board").await;
    assert_eq!(column_of(&board, b).as_deref(), Some("queued"));
    let (_, again) = app.get("/api/v1/board").await;
    assert_eq!(again, board, "unchanged: the same board");
}

#[tokio::test]
async fn a_fire_that_fails_after_its_execution_exists_cancels_it_with_the_reason() {
    // Found by a tester: a ceiling the engine refuses (here an approved $0.001 stored before
    // ceilings were range-checked when given) failed the fire after `driver::prepare` had
    // created the execution, which stayed `running` with nothing driving it.
    use sqlx::Connection as _;
    let app = with_project().await;
    let id = spec(&app, "Fire with a stored bad ceiling").await;
    let uri = |action: &str| format!("/api/v1/specs/{id}/{action}");
    assert_eq!(app.post(&uri("enrich"), json!({})).await.0, StatusCode::OK);
    assert_eq!(app.post(&uri("review"), json!({"decision": "approve"})).await.0, StatusCode::OK);
    let url = format!("sqlite://{}", app.ws.data().join("baton.db").display());
    let mut db = sqlx::SqliteConnection::connect(&url).await.unwrap();
    sqlx::query("update specs set budget_usd = 0.001 where spec_id = ?").bind(id).execute(&mut db).await.unwrap();
    db.close().await.unwrap();

    let (status, body) = app.post(&uri("fire"), json!({})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(body["message"].as_str().unwrap().contains("0.001"), "says why: {body}");
    let (_, spec) = app.get(&format!("/api/v1/specs/{id}")).await;
    assert_eq!(spec["status"], "approved", "it can be fired again: {spec}");

    let (_, executions) = app.get("/api/v1/executions").await;
    let executions = executions.as_array().unwrap();
    assert!(executions.iter().all(|e| e["status"] == "cancelled"), "no live execution is left: {executions:?}");
    for e in executions {
        let task_id = e["task_id"].as_str().unwrap();
        assert!(body["message"].as_str().unwrap().contains(task_id), "names the cancelled execution: {body}");
        let (_, journal) = app.get(&format!("/api/v1/executions/{task_id}/journal")).await;
        let last = journal.as_array().unwrap().last().unwrap().clone();
        assert_eq!(last["kind"], "cancelled", "{journal}");
        assert!(last["payload"].to_string().contains("0.001"), "the journal says why: {last}");
    }
}

#[tokio::test]
async fn a_card_shows_what_its_execution_runs_its_forecast_and_ceiling_from_summary_rows() {
    // The board reads each open card's live part from rows the journal keeps (migration
    // 0011), never the execution's state: the card follows every event that changes it.
    let app = with_project().await;
    let spec_id = spec(&app, "Live card").await;
    let plan = json!({"task_id": "live-card", "task_summary": "live", "phases": [{"phase_id": 1, "name": "Build",
        "steps": [{"step_id": "1.1", "agent_name": "alpha", "task_description": "a"},
                  {"step_id": "1.2", "agent_name": "beta", "task_description": "b"}]}]});
    let task_id = app.execution(&plan).await;
    let fire = baton::store::SpecChange {
        action: "fire".into(),
        expected: "draft".into(),
        to: "executing".into(),
        actor: "tester".into(),
        at: app.app.clock.now_rfc3339(),
        task_id: Some(Some(task_id.clone())),
        ..baton::store::SpecChange::default()
    };
    app.store().change_spec(spec_id, &fire).await.unwrap();
    let record = async |event: Value| {
        let (status, body) = app.post(&format!("/api/v1/executions/{task_id}/events"), event).await;
        assert!(status.is_success(), "{body}");
    };
    let live = async || {
        let (_, board) = app.get("/api/v1/board").await;
        let card = board["columns"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|c| c["cards"].as_array().unwrap().iter())
            .find(|c| c["spec_id"].as_i64() == Some(spec_id))
            .cloned()
            .unwrap();
        card["live"].clone()
    };
    let forecast = json!({"low_usd": 1.0, "mid_usd": 1.0, "high_usd": 2.0});
    record(json!({"kind": "forecasted", "steps": {"1.1": forecast, "1.2": forecast}})).await;
    record(json!({"kind": "budget_set", "ceiling_usd": 3.0, "source": "spec"})).await;
    record(json!({"kind": "step_dispatched", "step_id": "1.1", "agent_name": "alpha"})).await;
    record(json!({"kind": "step_dispatched", "step_id": "1.2", "agent_name": "beta"})).await;
    let l = live().await;
    assert_eq!(l["running"], json!(["1.1 alpha", "1.2 beta"]), "{l}");
    assert_eq!((l["forecast_usd"].as_f64(), l["ceiling_usd"].as_f64()), (Some(2.0), Some(3.0)), "{l}");

    record(json!({"kind": "step_recorded", "step_id": "1.1", "agent_name": "alpha", "status": "complete",
                  "cost_usd": 1.5}))
    .await;
    record(json!({"kind": "budget_set", "ceiling_usd": 5.0, "source": "spec"})).await;
    let l = live().await;
    assert_eq!(l["running"], json!(["1.2 beta"]), "{l}");
    assert_eq!(l["ceiling_usd"].as_f64(), Some(5.0), "{l}");
    // $1.50 of a $5.00 bar (the ceiling is the widest), the forecast mark at 40%.
    assert_eq!((l["bar"]["spent_pct"].as_u64(), l["bar"]["forecast_pct"].as_u64()), (Some(30), Some(40)), "{l}");
}

/// `curl -X POST …/cancel` with no body cancels (it answered 415 "expected a JSON content
/// type" until the reason became optional): for a spec and for an execution; a body without a
/// JSON content type is still refused, and the OpenAPI document says the body is optional.
#[tokio::test]
async fn cancel_needs_no_body() {
    let app = with_project().await;
    let id = spec(&app, "Cancel me bare").await;
    let bare = |uri: String| Request::post(uri).body(Body::empty()).unwrap();
    let text = |uri: String| Request::post(uri).body(Body::from("because")).unwrap();
    let (status, body) = app.send(text(format!("/api/v1/specs/{id}/cancel"))).await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{body}");
    let (status, body) = app.send(bare(format!("/api/v1/specs/{id}/cancel"))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "cancelled", "{body}");

    let task_id = app.execution(&crate::app::phases_plan("bare-cancel", 1, false)).await;
    let (status, body) = app.send(bare(format!("/api/v1/executions/{task_id}/cancel"))).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (_, view) = app.get(&format!("/api/v1/executions/{task_id}")).await;
    assert_eq!(view["status"], "cancelled", "{view}");

    let doc: Value = serde_json::from_str(baton::web::api::openapi::openapi_json()).unwrap();
    for path in ["/api/v1/specs/{id}/cancel", "/api/v1/executions/{task_id}/cancel"] {
        let body = &doc["paths"][path]["post"]["requestBody"];
        assert_eq!(body["required"], false, "{path}: {body}");
    }
}

/// Pause and resume take no body or `{}`; a field is refused with 422 naming it (they accepted
/// any body and ignored it, so `{"reason": "…"}` looked recorded and was lost).
#[tokio::test]
async fn pause_and_resume_refuse_a_body_they_would_ignore() {
    let app = with_project().await;
    let task_id = app.execution(&crate::app::phases_plan("pause-body", 1, false)).await;
    let (status, body) = app.post(&format!("/api/v1/executions/{task_id}/pause"), json!({"reason": "lunch"})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(body.to_string().contains("reason"), "{body}");
    let (_, view) = app.get(&format!("/api/v1/executions/{task_id}")).await;
    assert_eq!(view["paused"], false, "a refused pause paused nothing: {view}");
    let bare = Request::post(format!("/api/v1/executions/{task_id}/pause")).body(Body::empty()).unwrap();
    let (status, body) = app.send(bare).await;
    assert_eq!((status, &body["paused"]), (StatusCode::OK, &json!(true)), "{body}");
    let (status, body) = app.post(&format!("/api/v1/executions/{task_id}/resume"), json!({})).await;
    assert_eq!((status, &body["paused"]), (StatusCode::OK, &json!(false)), "{body}");
}

/// Found by a tester who killed the server with SIGKILL while specs were being fired: a spec
/// stayed `executing` with no execution (fire refused with 409; only a cancel got it out), or
/// its execution ran without the spec naming it. A starting server (`Specs::recover_fires`)
/// approves again a spec whose execution was never made, and links one made but not linked.
#[tokio::test]
async fn a_fire_interrupted_by_a_stopped_server_is_recovered_when_a_server_starts() {
    let app = with_project().await;
    let approved = async |title: &str| {
        let id = spec(&app, title).await;
        assert_eq!(app.post(&format!("/api/v1/specs/{id}/enrich"), json!({})).await.0, StatusCode::OK);
        let (status, body) = app.post(&format!("/api/v1/specs/{id}/review"), json!({"decision": "approve"})).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        id
    };
    // What `fire`'s claim commits.
    let claim = baton::store::SpecChange {
        action: "fire".into(),
        expected: "approved".into(),
        to: "executing".into(),
        actor: "tester".into(),
        at: app.app.clock.now_rfc3339(),
        ..baton::store::SpecChange::default()
    };
    // Stopped after the claim, before the execution.
    let a = approved("Interrupted before its execution").await;
    app.store().change_spec(a, &claim).await.unwrap();
    // Stopped after the execution was made, before it was linked.
    let b = approved("Interrupted before its link").await;
    let plan = json!({"task_id": format!("spec-{b}-20261204000000"), "task_summary": "orphan", "phases": [
        {"phase_id": 1, "name": "Build", "steps": [{"step_id": "1.1", "agent_name": "alpha", "task_description": "a"}]}]});
    let orphan = app.execution(&plan).await;
    app.store().change_spec(b, &claim).await.unwrap();

    assert_eq!(app.app.specs.recover_fires().await.unwrap(), 2);
    let (_, spec_a) = app.get(&format!("/api/v1/specs/{a}")).await;
    assert_eq!((spec_a["status"].as_str(), &spec_a["task_id"]), (Some("approved"), &Value::Null), "{spec_a}");
    let last = spec_a["events"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["action"], "fire_failed", "{last}");
    assert!(last["reason"].as_str().unwrap().contains("firing was interrupted"), "{last}");
    let (_, spec_b) = app.get(&format!("/api/v1/specs/{b}")).await;
    assert_eq!((spec_b["status"].as_str(), spec_b["task_id"].as_str()), (Some("executing"), Some(orphan.as_str())));
    assert_eq!(app.app.specs.recover_fires().await.unwrap(), 0, "nothing is left to recover");
    assert!(spec_a["plan"].is_object(), "approved with its plan: it can be fired again ({spec_a})");
}

/// Found by a tester: `PATCH /specs/N` with `{}` answered 200, journaled an `edit` each time,
/// and (an edit drops the plan) sent an enriched spec back to draft without its plan. An edit
/// that changes nothing is refused, and the spec keeps its plan.
#[tokio::test]
async fn an_edit_that_changes_nothing_is_refused_and_keeps_the_plan() {
    let app = with_project().await;
    let id = spec(&app, "Keep my plan").await;
    assert_eq!(app.post(&format!("/api/v1/specs/{id}/enrich"), json!({})).await.0, StatusCode::OK);
    let (_, before) = app.get(&format!("/api/v1/specs/{id}")).await;
    let (status, body) = app
        .send(
            Request::patch(format!("/api/v1/specs/{id}"))
                .header("content-type", "application/json")
                .body(Body::from("{}"))
                .unwrap(),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(body["message"].as_str().unwrap().contains("nothing to change"), "{body}");
    let (_, after) = app.get(&format!("/api/v1/specs/{id}")).await;
    assert_eq!(after, before, "status, plan and history unchanged");
    // Found by the next tester: the values it already has changed nothing either, and
    // dropped the plan.
    let same = json!({"title": before["title"], "priority": before["priority"]});
    let (status, body) = app
        .send(
            Request::patch(format!("/api/v1/specs/{id}"))
                .header("content-type", "application/json")
                .body(Body::from(same.to_string()))
                .unwrap(),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let (_, after) = app.get(&format!("/api/v1/specs/{id}")).await;
    assert_eq!(after, before, "status, plan and history unchanged");
}

/// Found by a tester: control characters in a spec's body or a bounce reason reached the page's
/// source raw (ESC, BEL: invalid HTML, invisible on screen), and a NUL went on into the plan
/// and failed a step at consolidation on every attempt. A NUL is refused where it comes in
/// (422 naming the field, nothing stored); any other control character is shown as its
/// written out on every page as the CLI writes it (`\u{1b}`, `web::escape`).
#[tokio::test]
async fn control_characters_are_written_out_and_a_nul_is_refused() {
    let app = with_project().await;
    for body in [json!({"project": "p", "title": "Nul", "body": "a\u{0}b"})] {
        let (status, answer) = app.post("/api/v1/specs", body).await;
        assert_eq!(
            (status, &answer["details"]["field"]),
            (StatusCode::UNPROCESSABLE_ENTITY, &json!("body")),
            "{answer}"
        );
        assert!(answer["message"].as_str().unwrap().contains("NUL"), "{answer}");
    }
    let (_, list) = app.get("/api/v1/specs").await;
    assert_eq!(list.as_array().map(Vec::len), Some(0), "nothing stored: {list}");

    let body = json!({"project": "p", "title": "Colours", "body": "red \u{1b}[31m bell \u{7} end"});
    let (status, spec) = app.post("/api/v1/specs", body).await;
    assert_eq!(status, StatusCode::CREATED, "{spec}");
    let id = spec["spec_id"].as_i64().unwrap();
    let (status, page) = app.page(&format!("/specs/{id}"), crate::app::Caller::Anonymous).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains(r"red \u{1b}[31m bell \u{7} end"), "the body is shown escaped");
    assert!(!page.chars().any(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t')), "no raw control character");

    let uri = format!("/api/v1/specs/{id}/review");
    let (status, body) = app.post(&format!("/api/v1/specs/{id}/enrich"), json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = app.post(&uri, json!({"decision": "bounce", "reason": "no\u{0}"})).await;
    assert_eq!((status, &body["details"]["field"]), (StatusCode::UNPROCESSABLE_ENTITY, &json!("reason")), "{body}");
    let (status, body) = app.post(&uri, json!({"decision": "bounce", "reason": "say \u{1b}[1mwhich"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, board) = app.page("/", crate::app::Caller::Anonymous).await;
    assert!(board.contains(r"say \u{1b}[1mwhich"), "the reason is shown escaped");
    assert!(!board.contains('\u{1b}'), "no raw ESC on the board");
}

/// Found by a tester: a spec title took U+202E (right-to-left override: the board then shows
/// other text than the title holds) and U+2028 (a line separator in a one-line title). Both
/// are refused naming the title, as a line break is.
#[tokio::test]
async fn a_title_with_a_bidi_override_or_a_line_separator_is_refused() {
    let app = with_project().await;
    for title in ["Fix \u{202e}txt.exe", "Two\u{2028}lines", "Tab\there"] {
        let (status, body) = app.post("/api/v1/specs", json!({"project": "p", "title": title, "body": "x"})).await;
        assert_eq!(
            (status, &body["details"]["field"]),
            (StatusCode::UNPROCESSABLE_ENTITY, &json!("title")),
            "{title:?}: {body}"
        );
    }
    let (status, body) =
        app.post("/api/v1/specs", json!({"project": "p", "title": "Fix the café — ☃", "body": "x"})).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

/// Found by a tester: a form title of `bad%FFutf` was decoded lossily and stored as
/// `bad\u{fffd}utf`, while the API refuses a body that is not UTF-8. A form field that is not
/// UTF-8 once percent-decoded is refused (400 naming it) and nothing is stored; UTF-8 sent
/// percent-encoded is taken as it is.
#[tokio::test]
async fn a_form_field_that_is_not_utf8_is_refused_not_mangled() {
    let app = with_project().await;
    let (status, _, html) = app.form("/specs", crate::app::Caller::Anonymous, "project=p&title=bad%FFutf&body=x").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{html}");
    assert!(html.contains("form field `title` is not UTF-8"), "{html}");
    let (_, list) = app.get("/api/v1/specs").await;
    assert_eq!(list.as_array().map(Vec::len), Some(0), "nothing stored: {list}");
    let (status, _, html) =
        app.form("/specs", crate::app::Caller::Anonymous, "project=p&title=Caf%C3%A9+au+lait&body=x%2By").await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{html}");
    let (_, list) = app.get("/api/v1/specs").await;
    assert_eq!((list[0]["title"].as_str(), list[0]["body"].as_str()), (Some("Café au lait"), Some("x+y")), "{list}");
}
