//! Report back on a forge item (issue 19, point 1): the "pull request open" comment is posted
//! when the pull request opens, once — not when something else about the spec changes later
//! (it once waited for the merged webhook, since opening a pull request touches neither the
//! spec nor its execution, only its merge row); and a report whose post landed but whose
//! outcome was lost (a crash between the post and its record, issue 15.9) is not posted again.

use baton::forge::{ForgeSettings, RetryPolicy};
use baton::runtime::forge::Forges;
use baton::runtime::report::Reporter;
use baton::runtime::specs::SpecInput;
use baton::store::{MergeRow, SpecChange};
use serde_json::{json, Value};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::app::{phases_plan, TestApp};

/// The comments the mock received on issue 7, as their texts.
async fn comments(mock: &MockServer) -> Vec<String> {
    let received = mock.received_requests().await.unwrap_or_default();
    received
        .iter()
        .filter(|r| r.method.as_str() == "POST" && r.url.path().ends_with("/issues/7/comments"))
        .map(|r| serde_json::from_slice::<Value>(&r.body).unwrap()["body"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// A test app with a project `p`, a spec imported from `o/r#7` and fired as an execution
/// that completed; the forges talk to `mock`. Returns (app, forges, spec id, task id).
async fn fired_github_spec(mock: &MockServer) -> (TestApp, Forges, i64, String) {
    fired_spec(mock, "github", "https://github.com/o/r/issues/7", "github:o/r#7").await
}

/// [`fired_github_spec`] for any source: the spec comes from `source` at `url`, its item is
/// `item_ref`, and both forges' API addresses are `mock`.
async fn fired_spec(mock: &MockServer, source: &str, url: &str, item_ref: &str) -> (TestApp, Forges, i64, String) {
    let t = TestApp::new().await;
    let settings = ForgeSettings::default().with_env(|k| match k {
        "GITHUB_TOKEN" => Some("ghp_report_test".into()),
        "BATON_GITHUB_API_URL" | "BATON_ADO_API_URL" => Some(mock.uri()),
        "ADO_PAT" => Some("ado_report_test".into()),
        _ => None,
    });
    let forges = Forges::new(settings, RetryPolicy::default()).unwrap();
    let store = t.store();
    let (status, body) =
        t.post("/api/v1/projects", json!({"name": "p", "repo_path": t.ws.repo(), "agent_profile": "demo"})).await;
    assert_eq!(status, axum::http::StatusCode::CREATED, "{body}");
    let input = SpecInput { project: "p".into(), title: "Report me".into(), body: "b".into(), priority: None };
    let spec = t.app.specs.create(input, source, url, "lee").await.unwrap();
    store.set_source_meta(spec.spec_id, &json!({ "item_ref": item_ref }).to_string()).await.unwrap();
    let task_id = t.execution(&phases_plan("report-2", 1, false)).await;
    let fire = SpecChange {
        action: "fire".into(),
        expected: "imported".into(),
        to: "executing".into(),
        actor: "lee".into(),
        at: t.app.clock.now_rfc3339(),
        ..SpecChange::default()
    };
    store.change_spec(spec.spec_id, &fire).await.unwrap();
    store.attach_execution(spec.spec_id, &task_id).await.unwrap();
    (t, forges, spec.spec_id, task_id)
}

/// Issue 15.9: the reporter was killed after GitHub took its comment and before the report was
/// recorded as posted (its claim is left pending). The next pass finds the comment by its
/// hidden marker and records it, rather than posting it again; a report whose earlier post
/// never landed is posted once.
#[tokio::test]
async fn a_report_posted_just_before_a_crash_is_found_and_not_posted_twice() {
    let mock = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/repos/o/r/issues/7/comments"))
        .respond_with(ResponseTemplate::new(201).set_body_json(json!({"id": 2, "html_url": "https://github.com/c/2"})))
        .mount(&mock)
        .await;
    let (t, forges, spec_id, _task_id) = fired_github_spec(&mock).await;
    let store = t.store();
    // The crashed attempt: claimed, and its comment (with the marker) is on the issue.
    let at = t.app.clock.now_rfc3339();
    let claim = store.claim_report(spec_id, "fired", 5, &at).await.unwrap();
    assert_eq!(claim.map(|c| c.retry_of), Some(None), "a first claim is not a retry");
    let landed = format!("Baton fired this as execution …\n\n{}", baton::runtime::report::marker("fired"));
    Mock::given(method("GET"))
        .and(path("/repos/o/r/issues/7/comments"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!([
            {"id": 1, "body": "A human's comment"},
            {"id": 2, "body": landed},
        ])))
        .mount(&mock)
        .await;

    t.advance(chrono::Duration::minutes(1));
    let mut reporter = Reporter::new(t.app.execs.clone(), forges, "http://baton.test", t.app.clock.clone());
    assert_eq!(reporter.pass().await.unwrap(), 0);
    assert!(comments(&mock).await.is_empty(), "posted again: {:?}", comments(&mock).await);
    let reports = store.reports(spec_id).await.unwrap();
    assert_eq!(reports, vec![("fired".to_string(), "posted".to_string(), String::new())]);

    assert!(store.claim_report(spec_id, "fired", 5, &at).await.unwrap().is_none(), "posted: never again");
}

/// The same crash, but the post never reached GitHub: the retry finds no marker and posts the
/// report, once, with its marker.
#[tokio::test]
async fn a_report_lost_before_it_reached_the_forge_is_posted_once_on_retry() {
    let mock = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/repos/o/r/issues/7/comments"))
        .respond_with(ResponseTemplate::new(201).set_body_json(json!({"id": 2, "html_url": "https://github.com/c/2"})))
        .mount(&mock)
        .await;
    Mock::given(method("GET"))
        .and(path("/repos/o/r/issues/7/comments"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!([{"id": 1, "body": "A human's comment"}])))
        .mount(&mock)
        .await;
    let (t, forges, spec_id, _task_id) = fired_github_spec(&mock).await;
    let store = t.store();
    let at = t.app.clock.now_rfc3339();
    store.claim_report(spec_id, "fired", 5, &at).await.unwrap();
    let retry = store.claim_report(spec_id, "fired", 5, &at).await.unwrap();
    assert_eq!(retry.and_then(|c| c.retry_of), Some(at), "a retry names the earlier attempt's time");

    t.advance(chrono::Duration::minutes(1));
    let mut reporter = Reporter::new(t.app.execs.clone(), forges, "http://baton.test", t.app.clock.clone());
    reporter.pass().await.unwrap();
    reporter.pass().await.unwrap();
    let posted = comments(&mock).await;
    assert_eq!(posted.len(), 1, "{posted:?}");
    assert!(posted[0].ends_with(&baton::runtime::report::marker("fired")), "{posted:?}");
    let looked = mock.received_requests().await.unwrap_or_default();
    let get = looked.iter().find(|r| r.method.as_str() == "GET").expect("the retry looked first");
    assert!(get.url.query().unwrap_or_default().contains("since="), "{}", get.url);
}

/// The same crash on an Azure DevOps work item: the retry reads the item's newest comments,
/// finds the marker among them and records the report without posting it again; where the
/// marker is missing it posts once.
#[tokio::test]
async fn an_azure_devops_report_that_landed_before_a_crash_is_not_posted_twice() {
    const COMMENTS: &str = "/acme/web/_apis/wit/workItems/42/comments";
    for landed in [true, false] {
        let mock = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path(COMMENTS))
            .respond_with(ResponseTemplate::new(200).set_body_json(json!({"id": 9, "text": "posted"})))
            .mount(&mock)
            .await;
        let mut on_item = vec![json!({"id": 1, "text": "A human's comment"})];
        if landed {
            let text = format!("Baton fired this …\n\n{}", baton::runtime::report::marker("fired"));
            on_item.insert(0, json!({"id": 2, "text": text}));
        }
        Mock::given(method("GET"))
            .and(path(COMMENTS))
            .respond_with(
                ResponseTemplate::new(200)
                    .set_body_json(json!({"totalCount": on_item.len(), "count": on_item.len(), "comments": on_item})),
            )
            .mount(&mock)
            .await;
        let url = "https://dev.azure.com/acme/web/_workitems/edit/42";
        let (t, forges, spec_id, _task_id) = fired_spec(&mock, "ado", url, "ado:acme/web#42").await;
        let store = t.store();
        let at = t.app.clock.now_rfc3339();
        store.claim_report(spec_id, "fired", 5, &at).await.unwrap();

        t.advance(chrono::Duration::minutes(1));
        let mut reporter = Reporter::new(t.app.execs.clone(), forges, "http://baton.test", t.app.clock.clone());
        reporter.pass().await.unwrap();
        reporter.pass().await.unwrap();
        let received = mock.received_requests().await.unwrap_or_default();
        let posts: Vec<Value> = received
            .iter()
            .filter(|r| r.method.as_str() == "POST" && r.url.path() == COMMENTS)
            .map(|r| serde_json::from_slice(&r.body).unwrap())
            .collect();
        assert!(
            received.iter().any(|r| r.method.as_str() == "GET" && r.url.path() == COMMENTS),
            "the retry looked first"
        );
        if landed {
            assert!(posts.is_empty(), "posted again: {posts:?}");
        } else {
            assert_eq!(posts.len(), 1, "{posts:?}");
            assert!(
                posts[0]["text"].as_str().unwrap().ends_with(&baton::runtime::report::marker("fired")),
                "{posts:?}"
            );
        }
        let reports = store.reports(spec_id).await.unwrap();
        assert_eq!(reports, vec![("fired".to_string(), "posted".to_string(), String::new())], "landed: {landed}");
    }
}

#[tokio::test]
async fn the_pull_request_comment_is_posted_when_it_opens_and_only_once() {
    let mock = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/repos/o/r/issues/7/comments"))
        .respond_with(ResponseTemplate::new(201).set_body_json(json!({"id": 1, "html_url": "https://github.com/c/1"})))
        .mount(&mock)
        .await;
    // A spec imported from issue o/r#7, fired as an execution that is complete.
    let (t, forges, spec_id, task_id) = fired_github_spec(&mock).await;
    let store = t.store();

    let mut reporter = Reporter::new(t.app.execs.clone(), forges, "http://baton.test", t.app.clock.clone());
    reporter.pass().await.unwrap();
    assert_eq!(comments(&mock).await.len(), 1, "fired: {:?}", comments(&mock).await);

    // A minute later nothing changed; then the pull request opens: only the merge row changes.
    t.advance(chrono::Duration::minutes(1));
    reporter.pass().await.unwrap();
    assert_eq!(comments(&mock).await.len(), 1, "nothing new: {:?}", comments(&mock).await);
    let row = MergeRow {
        task_id: task_id.clone(),
        spec_id: Some(spec_id),
        forge_repo: "github:o/r".into(),
        branch: format!("baton/{task_id}"),
        base_branch: "main".into(),
        state: "opened".into(),
        pr_number: Some(43),
        pr_url: "https://github.com/o/r/pull/43".into(),
        pushed_sha: String::new(),
        error: String::new(),
        updated_at: t.app.clock.now_rfc3339(),
    };
    store.put_merge(&row).await.unwrap();
    reporter.pass().await.unwrap();
    reporter.pass().await.unwrap();
    let texts = comments(&mock).await;
    let pr: Vec<&String> =
        texts.iter().filter(|t| t.contains("opened the pull request https://github.com/o/r/pull/43")).collect();
    assert_eq!(pr.len(), 1, "posted when it opened, once: {texts:?}");
}
