//! The forge clients (`forge::github::GitHub`, `forge::ado::AzureDevOps`) against a local
//! wiremock server replaying the REST exchanges of `tests/fixtures` (written from GitHub's and
//! Azure DevOps' documented shapes; bodies and headers as written, `Link` headers rewritten to
//! the mock):
//!
//! - GitHub: issue import (with the token) and a pull request refused as an issue; a label list
//!   across five `Link` pages; opening and finding pull requests; every error fixture (401,
//!   403 primary rate limit as written, with a far reset and with `retry-after`, 404, 422);
//!   5xx retries; writes without a token.
//! - Azure DevOps: a work item (Basic auth with the PAT, api-version 7.1), a WIQL query and its
//!   batch GET in the query's order, a comment (api-version 7.1-preview.4), the 203 sign-in page
//!   and a missing PAT.
//! - Every error's `Display` and `Debug` text is free of the credentials.

use std::time::Duration;

use baton::clock::Stopwatch;
use baton::forge::ado::AzureDevOps;
use baton::forge::github::{GitHub, PullRequest};
use baton::forge::{ForgeError, ForgeSettings, NewPull, RetryPolicy, Secret};
use serde_json::{json, Value};
use wiremock::matchers::{body_json, header, method, path, query_param};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

use crate::common::fixture_json;

/// The GitHub token: distinctive, so a leak into an error's text is found.
const TOKEN: &str = "ghp_SECRET_do_not_print";
/// The Azure DevOps PAT, likewise.
const PAT: &str = "ado_PAT_SECRET_do_not_print";
/// `Basic` of `:` + [`PAT`]: Azure DevOps' documented form (empty user, the PAT as password).
const PAT_BASIC: &str = "Basic OmFkb19QQVRfU0VDUkVUX2RvX25vdF9wcmludA==";
const ORG: &str = "lumenlabs";
const PROJECT: &str = "Lantern";

// ---------------------------------------------------------------------------------------------
// Helpers: clients on the mock, fixture answers, assertions.
// ---------------------------------------------------------------------------------------------

/// Retries without real waits: two 5xx retries 1 ms apart; no rate-limit wait over 10 ms.
fn fast() -> RetryPolicy {
    RetryPolicy {
        server_retries: 2,
        backoff: Duration::from_millis(1),
        max_rate_limit_wait: Duration::from_millis(10),
        rate_limit_waits: 2,
        deadline: Duration::from_secs(10),
        ..RetryPolicy::default()
    }
}

/// A GitHub client on `server` with [`TOKEN`] (or anonymous).
fn github_with(server: &MockServer, token: Option<&str>, policy: RetryPolicy) -> GitHub {
    let mut settings = ForgeSettings::default();
    settings.github.api_url = Some(server.uri());
    settings.github.token = token.map(Secret::new);
    GitHub::new(&settings, policy).unwrap()
}

fn github(server: &MockServer, policy: RetryPolicy) -> GitHub {
    github_with(server, Some(TOKEN), policy)
}

/// An Azure DevOps client on `server` with `pat`.
fn azure(server: &MockServer, pat: Option<&str>) -> AzureDevOps {
    let mut settings = ForgeSettings::default();
    settings.ado.api_url = Some(server.uri());
    settings.ado.pat = pat.map(Secret::new);
    AzureDevOps::new(&settings, fast()).unwrap()
}

/// The 200 body of an Azure DevOps REST exchange fixture.
fn ado_body(name: &str) -> Value {
    Recorded::find(&format!("azure-devops/rest/{name}.json"), 200).body
}

/// Headers the mock writes itself (framing); the bodies are stored decoded, so
/// `content-encoding` would lie.
const NOT_REPLAYED: [&str; 4] = ["content-length", "content-encoding", "transfer-encoding", "connection"];

/// One answer of an exchange fixture.
#[derive(Debug, Clone)]
struct Recorded {
    status: u16,
    headers: Vec<(String, String)>,
    body: Value,
}

impl Recorded {
    /// Reads one exchange, `{request, response: {status, headers: {k: v}, body}}` (see
    /// tests/fixtures/README.md); panics when it has another shape.
    fn of(v: &Value) -> Recorded {
        let r = &v["response"];
        let status = r["status"].as_u64().and_then(|s| u16::try_from(s).ok());
        Recorded {
            status: status.unwrap_or_else(|| panic!("an exchange without response.status: {v}")),
            headers: header_pairs(&r["headers"]),
            body: r["body"].clone(),
        }
    }

    /// The exchange of fixture `rel` (one exchange or a list) answering `status`.
    fn find(rel: &str, status: u16) -> Recorded {
        let entries = match fixture_json(rel) {
            Value::Array(list) => list,
            one => vec![one],
        };
        entries
            .iter()
            .map(Recorded::of)
            .find(|r| r.status == status)
            .unwrap_or_else(|| panic!("fixture {rel} holds no {status} answer"))
    }

    /// The header `name`.
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The answer as written: status, headers (but [`NOT_REPLAYED`]) and JSON body.
    fn template(&self) -> ResponseTemplate {
        let mut t = ResponseTemplate::new(self.status);
        for (k, v) in &self.headers {
            if !NOT_REPLAYED.iter().any(|n| k.eq_ignore_ascii_case(n)) {
                t = t.append_header(k.to_ascii_lowercase().as_str(), v.as_str());
            }
        }
        t.set_body_json(&self.body)
    }
}

/// `{k: v, …}` (numbers as text).
fn header_pairs(v: &Value) -> Vec<(String, String)> {
    let text = |v: &Value| v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string());
    match v {
        Value::Object(map) => map.iter().map(|(k, v)| (k.clone(), text(v))).collect(),
        _ => Vec::new(),
    }
}

async fn requests(server: &MockServer) -> Vec<Request> {
    server.received_requests().await.unwrap()
}

fn query(request: &Request, key: &str) -> Option<String> {
    request.url.query_pairs().find(|(k, _)| k == key).map(|(_, v)| v.into_owned())
}

fn authorization(request: &Request) -> &str {
    request.headers.get("authorization").map(|v| v.to_str().unwrap()).unwrap_or_default()
}

/// Neither the text nor the `Debug` of `err` holds a credential (raw or Basic-encoded).
fn assert_secret_free(err: &ForgeError) {
    let (shown, debug) = (format!("{err}"), format!("{err:?}"));
    let basic = PAT_BASIC.trim_start_matches("Basic ");
    for secret in [TOKEN, PAT, basic] {
        assert!(!shown.contains(secret), "Display leaks a credential: {shown}");
        assert!(!debug.contains(secret), "Debug leaks a credential: {debug}");
    }
}

/// Serves `answer` to every GET of issue `o/r#1` and fetches it: the error and how many
/// requests the server saw.
async fn issue_error(answer: ResponseTemplate, policy: RetryPolicy) -> (ForgeError, usize) {
    let server = MockServer::start().await;
    Mock::given(method("GET")).and(path("/repos/o/r/issues/1")).respond_with(answer).mount(&server).await;
    let err = github(&server, policy).issue("o", "r", 1).await.unwrap_err();
    assert_secret_free(&err);
    (err, requests(&server).await.len())
}

// ---------------------------------------------------------------------------------------------
// GitHub: issues.
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn github_issue_is_imported_with_the_token() {
    let recorded = Recorded::find("github-api/issue.get.200.json", 200);
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/repos/lumen-labs/lantern/issues/42"))
        .and(header("authorization", format!("Bearer {TOKEN}").as_str()))
        .respond_with(recorded.template())
        .expect(1)
        .mount(&server)
        .await;

    let item = github(&server, fast()).issue("lumen-labs", "lantern", 42).await.unwrap();
    let issue = &recorded.body;
    assert_eq!(item.source, "github");
    assert_eq!(item.title, "CSV export drops the header row when a report is empty");
    assert_eq!(item.title, issue["title"].as_str().unwrap());
    assert_eq!(item.url, "https://github.com/lumen-labs/lantern/issues/42");
    assert_eq!(item.body, issue["body"].as_str().unwrap_or_default());
    assert_eq!(item.meta.labels, ["bug", "question"]);
    assert_eq!(item.meta.author, "tessa-lumen");
    assert_eq!(item.meta.author, issue["user"]["login"].as_str().unwrap());
    assert_eq!(item.meta.state, "closed");
    assert_eq!(item.meta.item_type, "issue");
    assert_eq!(item.meta.item_ref, "github:lumen-labs/lantern#42");
}

#[tokio::test]
async fn github_pull_request_is_refused_as_an_issue() {
    let mut recorded = Recorded::find("github-api/issue.get.200.json", 200);
    recorded.body["pull_request"] = json!({
        "url": "https://api.github.com/repos/lumen-labs/lantern/pulls/42",
        "html_url": "https://github.com/lumen-labs/lantern/pull/42",
    });
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/repos/lumen-labs/lantern/issues/42"))
        .respond_with(recorded.template())
        .mount(&server)
        .await;

    let err = github(&server, fast()).issue("lumen-labs", "lantern", 42).await.unwrap_err();
    assert!(matches!(err, ForgeError::Invalid(_)), "{err:?}");
    assert!(err.to_string().contains("is a pull request"), "{err}");
    assert_secret_free(&err);
}

#[tokio::test]
async fn github_label_list_follows_every_link_page() {
    const LABEL: &str = "needs spec";
    let pages = fixture_json("github-api/issues.list.paginated.json");
    let pages = pages.as_array().unwrap();
    assert_eq!(pages.len(), 5, "the fixture holds five pages");
    let server = MockServer::start().await;
    for page in pages {
        let mut recorded = Recorded::of(page);
        for (k, v) in &mut recorded.headers {
            if k.eq_ignore_ascii_case("link") {
                *v = v.replace("https://api.github.com", &server.uri());
            }
        }
        let request = &page["request"];
        let mock = Mock::given(method("GET")).and(path(request["path"].as_str().unwrap()));
        // The first page is Baton's own request; the others are the `Link` addresses.
        let mock = match request["query"]["page"].as_str() {
            Some(n) => mock.and(query_param("page", n)),
            None => mock.and(query_param("labels", LABEL)).and(query_param("state", "open")),
        };
        mock.respond_with(recorded.template()).expect(1).mount(&server).await;
    }

    let items = github(&server, fast()).issues_labelled("lumen-labs", "field-notes", LABEL).await.unwrap();
    let refs: Vec<&str> = items.iter().map(|i| i.meta.item_ref.as_str()).collect();
    let expected: Vec<String> = (1..=13).rev().map(|n| format!("github:lumen-labs/field-notes#{n}")).collect();
    assert_eq!(refs, expected);
    assert_eq!(items[0].url, "https://github.com/lumen-labs/field-notes/issues/13");
    assert_eq!(items[0].url, pages[0]["response"]["body"][0]["html_url"].as_str().unwrap());
    assert_eq!(items[12].title, "Import sites from a CSV file");
    assert_eq!(items[12].title, pages[4]["response"]["body"][0]["title"].as_str().unwrap());

    let seen = requests(&server).await;
    assert_eq!(seen.len(), 5);
    assert_eq!(seen[0].url.path(), "/repos/lumen-labs/field-notes/issues");
    assert_eq!(query(&seen[0], "labels").as_deref(), Some(LABEL));
    assert!(seen[0].url.query().unwrap().contains("labels=needs+spec"), "{}", seen[0].url);
    let pages_asked: Vec<Option<String>> = seen.iter().map(|r| query(r, "page")).collect();
    assert_eq!(pages_asked, [None, Some("2".into()), Some("3".into()), Some("4".into()), Some("5".into())]);
    for r in &seen {
        assert_eq!(authorization(r), format!("Bearer {TOKEN}"), "{}", r.url);
    }
}

// ---------------------------------------------------------------------------------------------
// GitHub: pull requests and writes.
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn github_pull_request_is_opened_as_asked() {
    let rec = fixture_json("github-api/pulls.create.201.json");
    let recorded_request = &rec["request"]["body"];
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(rec["request"]["path"].as_str().unwrap()))
        .and(header("authorization", format!("Bearer {TOKEN}").as_str()))
        .respond_with(Recorded::find("github-api/pulls.create.201.json", 201).template())
        .expect(1)
        .mount(&server)
        .await;

    let pull = NewPull {
        head: recorded_request["head"].as_str().unwrap(),
        base: recorded_request["base"].as_str().unwrap(),
        title: recorded_request["title"].as_str().unwrap(),
        body: recorded_request["body"].as_str().unwrap(),
    };
    let pr = github(&server, fast()).create_pull("lumen-labs", "lantern", &pull).await.unwrap();
    assert_eq!(
        pr,
        PullRequest { number: 43, url: "https://github.com/lumen-labs/lantern/pull/43".into(), state: "open".into() }
    );
    let seen = requests(&server).await;
    assert_eq!(seen.len(), 1);
    let sent: Value = seen[0].body_json().unwrap();
    assert_eq!(sent, json!({"title": pull.title, "head": pull.head, "base": pull.base, "body": pull.body}));
}

#[tokio::test]
async fn github_pull_request_is_found_by_its_branch() {
    let rec = fixture_json("github-api/pulls.create.201.json");
    let server = MockServer::start().await;
    let pulls = |head: &str| {
        Mock::given(method("GET"))
            .and(path("/repos/lumen-labs/lantern/pulls"))
            .and(query_param("head", format!("lumen-labs:{head}").as_str()))
            .and(query_param("state", "all"))
    };
    pulls("no-pr-yet").respond_with(ResponseTemplate::new(200).set_body_json(json!([]))).expect(1).mount(&server).await;
    pulls("fix-empty-export")
        .respond_with(ResponseTemplate::new(200).set_body_json(json!([rec["response"]["body"]])))
        .expect(1)
        .mount(&server)
        .await;

    let gh = github(&server, fast());
    assert_eq!(gh.find_pull("lumen-labs", "lantern", "no-pr-yet").await.unwrap(), None);
    let found = gh.find_pull("lumen-labs", "lantern", "fix-empty-export").await.unwrap();
    assert_eq!(
        found,
        Some(PullRequest {
            number: 43,
            url: "https://github.com/lumen-labs/lantern/pull/43".into(),
            state: "open".into()
        })
    );
}

#[tokio::test]
async fn github_writes_need_a_token_and_send_nothing_without_one() {
    let server = MockServer::start().await;
    let gh = github_with(&server, None, fast());
    let pull = NewPull { head: "b", base: "main", title: "t", body: "" };
    let errs = [gh.create_pull("o", "r", &pull).await.unwrap_err(), gh.comment("o", "r", 1, "done").await.unwrap_err()];
    for err in &errs {
        assert!(matches!(err, ForgeError::Unconfigured(_)), "{err:?}");
        assert!(err.to_string().contains("GITHUB_TOKEN"), "{err}");
    }
    assert!(requests(&server).await.is_empty());
}

// ---------------------------------------------------------------------------------------------
// GitHub: recorded errors, rate limits and server errors.
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn github_401_is_bad_credentials_naming_github_token() {
    let recorded = Recorded::find("github-api/errors/401.bad-credentials.json", 401);
    let (err, sent) = issue_error(recorded.template(), fast()).await;
    assert!(matches!(err, ForgeError::BadCredentials { status: 401, ref message, .. } if message == "Bad credentials"));
    assert!(err.to_string().contains("GITHUB_TOKEN"), "{err}");
    assert_eq!(sent, 1, "a refused credential is not retried");
}

#[tokio::test]
async fn github_404_is_not_found() {
    let recorded = Recorded::find("github-api/errors/404.not-found.json", 404);
    let (err, sent) = issue_error(recorded.template(), fast()).await;
    assert!(matches!(err, ForgeError::NotFound { ref message, .. } if message == "Not Found"), "{err:?}");
    assert!(err.to_string().contains("issue o/r#1"), "{err}");
    assert_eq!(sent, 1);
}

#[tokio::test]
async fn github_422_is_validation_listing_the_fields() {
    let recorded = Recorded::find("github-api/errors/422.validation-failed.json", 422);
    let server = MockServer::start().await;
    Mock::given(method("POST")).and(path("/repos/o/r/pulls")).respond_with(recorded.template()).mount(&server).await;
    let pull = NewPull { head: "b", base: "main", title: "t", body: "" };
    let err = github(&server, fast()).create_pull("o", "r", &pull).await.unwrap_err();
    assert!(matches!(err, ForgeError::Validation { ref message, .. } if message == "Validation Failed"), "{err:?}");
    assert!(err.to_string().contains("field head is invalid"), "{err}");
    assert_secret_free(&err);
    assert_eq!(requests(&server).await.len(), 1);
}

#[tokio::test]
async fn github_primary_rate_limit_without_a_reset_says_retry_later() {
    let recorded = Recorded::find("github-api/errors/403.rate-limit.primary.json", 403);
    assert_eq!(recorded.header("x-ratelimit-remaining"), Some("0"));
    assert_eq!(recorded.header("x-ratelimit-reset"), None, "written without a reset time");
    let (err, sent) = issue_error(recorded.template(), fast()).await;
    assert!(matches!(err, ForgeError::RateLimited { status: 403, retry_after_secs: None, .. }), "{err:?}");
    assert!(err.to_string().contains("retry later"), "{err}");
    assert!(err.to_string().contains("API rate limit exceeded for user ID 7301102."), "{err}");
    assert_eq!(sent, 1);
}

#[tokio::test]
async fn github_primary_rate_limit_with_a_far_reset_fails_at_once_naming_the_time() {
    let recorded = Recorded::find("github-api/errors/403.rate-limit.primary.json", 403);
    let reset = baton::clock::now().timestamp() + 3600;
    let answer = recorded.template().insert_header("x-ratelimit-reset", reset.to_string().as_str());
    let (err, sent) = issue_error(answer, fast()).await;
    let ForgeError::RateLimited { status: 403, retry_after_secs: Some(secs), .. } = err else {
        panic!("expected a rate limit with a reset: {err:?}")
    };
    assert!((3599..=3602).contains(&secs), "{secs}");
    // The client waits until one second after the reset.
    let at = chrono::DateTime::from_timestamp(reset + 1, 0).unwrap().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    assert!(err.to_string().contains(&format!("retry after {at}")), "{err}");
    assert_eq!(sent, 1, "a wait over the policy's limit is not taken");
}

#[tokio::test]
async fn github_rate_limit_with_retry_after_waits_and_succeeds() {
    let limited = Recorded::find("github-api/errors/403.rate-limit.primary.json", 403);
    let issue = Recorded::find("github-api/issue.get.200.json", 200);
    let server = MockServer::start().await;
    let route = || Mock::given(method("GET")).and(path("/repos/lumen-labs/lantern/issues/42"));
    route()
        .respond_with(limited.template().insert_header("retry-after", "1"))
        .up_to_n_times(1)
        .expect(1)
        .mount(&server)
        .await;
    route().respond_with(issue.template()).expect(1).mount(&server).await;

    let policy = RetryPolicy { max_rate_limit_wait: Duration::from_secs(1), ..fast() };
    let watch = Stopwatch::start();
    let item = github(&server, policy).issue("lumen-labs", "lantern", 42).await.unwrap();
    assert!(watch.elapsed() >= Duration::from_secs(1), "waited {:?}", watch.elapsed());
    assert_eq!(item.title, "CSV export drops the header row when a report is empty");
    assert_eq!(requests(&server).await.len(), 2);
}

#[tokio::test]
async fn github_secondary_rate_limit_is_a_rate_limit_not_a_refusal() {
    // Found trying Baton on a bulk import: GitHub's 403 "You have exceeded a secondary rate
    // limit" carries no rate headers, and was taken for a missing permission.
    let recorded = Recorded::find("github-api/errors/403.rate-limit.secondary.json", 403);
    assert_eq!(recorded.header("x-ratelimit-remaining"), None, "written without rate headers");
    assert_eq!(recorded.header("retry-after"), None);
    let (err, sent) = issue_error(recorded.template(), fast()).await;
    let ForgeError::RateLimited { status: 403, retry_after_secs: Some(60), secondary: true, ref message, .. } = err
    else {
        panic!("expected the secondary rate limit, a minute to wait: {err:?}")
    };
    assert!(message.starts_with("You have exceeded a secondary rate limit."), "{message}");
    assert!(err.to_string().contains("a secondary rate limit; retry after"), "{err}");
    assert_eq!(sent, 1, "a minute is over this policy's longest wait: not waited here");

    // A policy that would wait a minute but has a shorter deadline (the server's 20 s): the
    // forge's own answer, with when to retry, at once.
    let policy =
        RetryPolicy { max_rate_limit_wait: Duration::from_secs(60), deadline: Duration::from_secs(2), ..fast() };
    let clock = Stopwatch::start();
    let (err, sent) = issue_error(recorded.template(), policy).await;
    assert!(clock.elapsed() < Duration::from_secs(2), "took {:?}", clock.elapsed());
    assert!(matches!(err, ForgeError::RateLimited { retry_after_secs: Some(60), secondary: true, .. }), "{err:?}");
    assert!(err.to_string().contains("exceeded a secondary rate limit"), "{err}");
    assert_eq!(sent, 1);

    // With the wait shortened (as a test's mock forge may), it is waited out and the call
    // goes on.
    let issue = Recorded::find("github-api/issue.get.200.json", 200);
    let server = MockServer::start().await;
    let route = || Mock::given(method("GET")).and(path("/repos/lumen-labs/lantern/issues/42"));
    route().respond_with(recorded.template()).up_to_n_times(1).expect(1).mount(&server).await;
    route().respond_with(issue.template()).expect(1).mount(&server).await;
    let mut settings = ForgeSettings::default();
    settings.github.api_url = Some(server.uri());
    settings.github.token = Some(Secret::new(TOKEN));
    settings.github.secondary_rate_limit_wait_secs = Some(0.3);
    let policy = RetryPolicy { max_rate_limit_wait: Duration::from_secs(1), ..fast() };
    let clock = Stopwatch::start();
    let item = GitHub::new(&settings, policy).unwrap().issue("lumen-labs", "lantern", 42).await.unwrap();
    assert!(clock.elapsed() >= Duration::from_millis(300), "waited {:?}", clock.elapsed());
    assert_eq!(item.url, "https://github.com/lumen-labs/lantern/issues/42");
}

/// The label listing of `issues.list.paginated.json` on `server` (its `Link`s rewritten to
/// it), its third page answered by GitHub's secondary rate limit `limited` times first; a
/// resumed listing asks page 3 on the `/repos/…` path (Baton's own address for a page).
pub(crate) async fn mount_listing_with_a_secondary_limit(server: &MockServer, label: &str, limited: u64) {
    let pages = fixture_json("github-api/issues.list.paginated.json");
    for page in pages.as_array().unwrap() {
        let mut recorded = Recorded::of(page);
        for (k, v) in &mut recorded.headers {
            if k.eq_ignore_ascii_case("link") {
                *v = v.replace("https://api.github.com", &server.uri());
            }
        }
        let request = &page["request"];
        let mock = Mock::given(method("GET")).and(path(request["path"].as_str().unwrap()));
        match request["query"]["page"].as_str() {
            Some(n) => {
                if n == "3" {
                    let limit = Recorded::find("github-api/errors/403.rate-limit.secondary.json", 403);
                    Mock::given(method("GET"))
                        .and(query_param("page", "3"))
                        .respond_with(limit.template())
                        .up_to_n_times(limited)
                        .with_priority(1)
                        .mount(server)
                        .await;
                    Mock::given(method("GET"))
                        .and(path("/repos/lumen-labs/field-notes/issues"))
                        .and(query_param("labels", label))
                        .and(query_param("page", "3"))
                        .respond_with(recorded.template())
                        .with_priority(2)
                        .mount(server)
                        .await;
                }
                mock.and(query_param("page", n)).respond_with(recorded.template()).mount(server).await;
            }
            None => {
                let mock = mock.and(query_param("labels", label)).and(query_param("state", "open"));
                mock.respond_with(recorded.template()).with_priority(3).mount(server).await;
            }
        }
    }
}

#[tokio::test]
async fn a_rest_bulk_import_stopped_by_a_secondary_rate_limit_keeps_its_specs_and_resumes_from_the_cursor() {
    use axum::body::Body;
    use axum::http::Request as HttpRequest;
    use tower::ServiceExt as _;

    const LABEL: &str = "needs spec";
    let server = MockServer::start().await;
    mount_listing_with_a_secondary_limit(&server, LABEL, 1).await;
    let ws = crate::common::Workspace::with_repo(&[("README.md", "hi\n")]);
    let execs =
        baton::runtime::executions::Executions::open(baton::runtime::config::DataDir::open(&ws.data()).unwrap())
            .await
            .unwrap();
    let mut settings = ForgeSettings::default();
    settings.github.api_url = Some(server.uri());
    settings.github.token = Some(Secret::new(TOKEN));
    let forges = baton::runtime::forge::Forges::new(settings, fast()).unwrap();
    let state = baton::web::AppState::new(execs).unwrap().with_forges(forges);
    let send = |uri: &'static str, body: Value| {
        let app = baton::web::app(state.clone());
        async move {
            let req = HttpRequest::post(uri).header("content-type", "application/json");
            let response = app.oneshot(req.body(Body::from(body.to_string())).unwrap()).await.unwrap();
            let (status, headers) = (response.status().as_u16(), response.headers().clone());
            let bytes = http_body_util::BodyExt::collect(response.into_body()).await.unwrap().to_bytes();
            (status, headers, serde_json::from_slice::<Value>(&bytes).unwrap())
        }
    };
    let project = json!({"name": "p", "repo_path": ws.repo(), "agent_profile": "demo"});
    assert_eq!(send("/api/v1/projects", project).await.0, 201);
    let specs = || async {
        let filter = baton::store::SpecFilter { limit: 100, ..Default::default() };
        state.execs.store().list_specs(&filter).await.unwrap()
    };

    // Pages 1 and 2 are imported, page 3 is rate limited: 503 with Retry-After and a cursor,
    // and the six specs stay.
    let import = json!({"project": "p", "ref": "github:lumen-labs/field-notes", "label": LABEL});
    let (status, headers, body) = send("/api/v1/specs/import", import.clone()).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"], "forge_rate_limited");
    assert_eq!(headers["retry-after"], "60", "GitHub asks for at least a minute");
    let message = body["message"].as_str().unwrap();
    assert!(message.contains("You have exceeded a secondary rate limit"), "{message}");
    assert!(message.contains("\"cursor\": \"3\""), "{message}");
    let details = &body["details"];
    assert_eq!(details["cursor"], "3", "{body}");
    assert_eq!(details["retry_after_secs"], 60);
    assert_eq!((details["imported"].as_u64(), details["created"].as_u64()), (Some(6), Some(6)), "{body}");
    let first: Vec<&str> =
        details["items"].as_array().unwrap().iter().map(|i| i["source_url"].as_str().unwrap()).collect();
    let expected: Vec<String> =
        (8..=13).rev().map(|n| format!("https://github.com/lumen-labs/field-notes/issues/{n}")).collect();
    assert_eq!(first, expected);
    assert_eq!(specs().await.len(), 6, "what was imported before the limit stays");

    // The same request with the cursor goes on from page 3: the seven others, nothing twice.
    let mut resume = import.clone();
    resume["cursor"] = json!("3");
    let (status, _, body) = send("/api/v1/specs/import", resume).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!((body["imported"].as_u64(), body["created"].as_u64()), (Some(7), Some(7)), "{body}");
    let all = specs().await;
    assert_eq!(all.len(), 13);
    let mut urls: Vec<&str> = all.iter().map(|s| s.source_url.as_str()).collect();
    urls.sort_unstable();
    urls.dedup();
    assert_eq!(urls.len(), 13, "one spec per issue");
    let seen = requests(&server).await;
    let resumed = seen
        .iter()
        .filter(|r| r.url.path() == "/repos/lumen-labs/field-notes/issues" && query(r, "page").as_deref() == Some("3"));
    assert_eq!(resumed.count(), 1, "resumed at page 3 of Baton's own listing address");

    // Starting over imports nothing new; a bad cursor, or one with a single item, is refused.
    let (status, _, body) = send("/api/v1/specs/import", import.clone()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["created"], 0);
    for cursor in [json!("0"), json!("page-3"), json!("")] {
        let mut bad = import.clone();
        bad["cursor"] = cursor;
        let (status, _, body) = send("/api/v1/specs/import", bad).await;
        assert_eq!(status, 422, "{body}");
        assert_eq!(body["details"]["field"], "cursor", "{body}");
    }
    let single = json!({"project": "p", "ref": "github:lumen-labs/field-notes#3", "cursor": "2"});
    let (status, _, body) = send("/api/v1/specs/import", single).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["details"]["field"], "cursor", "{body}");
    assert_eq!(specs().await.len(), 13);
}

#[tokio::test]
async fn github_server_errors_are_retried_then_reported() {
    let issue = Recorded::find("github-api/issue.get.200.json", 200);
    let server = MockServer::start().await;
    let route = || Mock::given(method("GET")).and(path("/repos/lumen-labs/lantern/issues/42"));
    route().respond_with(ResponseTemplate::new(502)).up_to_n_times(2).expect(2).mount(&server).await;
    route().respond_with(issue.template()).expect(1).mount(&server).await;
    let item = github(&server, fast()).issue("lumen-labs", "lantern", 42).await.unwrap();
    assert_eq!(item.url, "https://github.com/lumen-labs/lantern/issues/42");
    assert_eq!(requests(&server).await.len(), 3);

    let always = ResponseTemplate::new(500).set_body_json(json!({"message": "Server Error"}));
    let policy = RetryPolicy { server_retries: 2, ..fast() };
    let (err, sent) = issue_error(always, policy).await;
    assert!(matches!(err, ForgeError::Server { status: 500, attempts: 3, .. }), "{err:?}");
    assert!(err.to_string().contains("after 3 attempts"), "{err}");
    assert_eq!(sent, 3);
}

// ---------------------------------------------------------------------------------------------
// Azure DevOps.
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn ado_work_item_is_read_with_the_pat() {
    let body = ado_body("workitem.get");
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(format!("/{ORG}/{PROJECT}/_apis/wit/workitems/214")))
        .and(query_param("api-version", "7.1"))
        .and(query_param("$expand", "all"))
        .and(header("authorization", PAT_BASIC))
        .respond_with(ResponseTemplate::new(200).set_body_json(&body))
        .expect(1)
        .mount(&server)
        .await;

    let item = azure(&server, Some(PAT)).work_item(ORG, PROJECT, 214).await.unwrap();
    assert_eq!(item.source, "ado");
    assert_eq!(item.title, "Let a lead export the board as CSV");
    assert_eq!(item.meta.item_type, "User Story");
    assert_eq!(item.meta.state, "Active");
    assert_eq!(item.meta.labels, ["board", "csv", "export"]);
    assert_eq!(item.meta.author, "Noor Lumen");
    assert_eq!(item.meta.item_ref, "ado:lumenlabs/Lantern#214");
    assert_eq!(item.url, "https://dev.azure.com/lumenlabs/6f1c2a3b-4d5e-4f60-8a71-92b3c4d5e6f7/_workitems/edit/214");
    assert_eq!(item.url, body["_links"]["html"]["href"].as_str().unwrap());
    assert_eq!(item.body, "", "the work item has no description");

    let seen = requests(&server).await;
    assert_eq!(authorization(&seen[0]), PAT_BASIC);
    assert_eq!(query(&seen[0], "api-version").as_deref(), Some("7.1"));
}

#[tokio::test]
async fn ado_query_returns_the_batch_items_in_the_query_order() {
    let wiql_text = fixture_json("azure-devops/rest/wiql.query.flat.json")["request"]["body"]["query"]
        .as_str()
        .unwrap()
        .to_string();
    let wiql = ado_body("wiql.query.flat");
    let batch = ado_body("workitems.batch.expand-all");
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(format!("/{ORG}/{PROJECT}/_apis/wit/wiql")))
        .and(query_param("api-version", "7.1"))
        .and(header("authorization", PAT_BASIC))
        .and(body_json(json!({ "query": wiql_text })))
        .respond_with(ResponseTemplate::new(200).set_body_json(&wiql))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(format!("/{ORG}/{PROJECT}/_apis/wit/workitems")))
        .and(query_param("api-version", "7.1"))
        .and(query_param("$expand", "all"))
        .and(header("authorization", PAT_BASIC))
        .respond_with(ResponseTemplate::new(200).set_body_json(&batch))
        .expect(1)
        .mount(&server)
        .await;

    let items = azure(&server, Some(PAT)).query(ORG, PROJECT, &wiql_text).await.unwrap();
    // The query selects 231, 229, 226, 214, 198; the batch holds 233, 229 and 231. Only what
    // both hold comes back, in the query's order (233 is not selected by the query).
    let refs: Vec<&str> = items.iter().map(|i| i.meta.item_ref.as_str()).collect();
    assert_eq!(refs, ["ado:lumenlabs/Lantern#231", "ado:lumenlabs/Lantern#229"]);
    assert_eq!(items[0].title, "Test the CSV export per column type");
    assert_eq!(items[0].body, "Cover the CSV export with one test per column type.");
    assert_eq!(items[1].title, "Quote CSV fields that hold a separator");
    // The description is the HTML Azure DevOps stores, as text.
    assert_eq!(items[1].body, "Quote fields that hold a comma or a quote.");
    assert_eq!(items[1].meta.labels, ["baton", "csv"]);
    assert_eq!((items[1].meta.item_type.as_str(), items[1].meta.state.as_str()), ("Task", "To Do"));
    for (item, id) in items.iter().zip([231, 229]) {
        let recorded = batch["value"].as_array().unwrap().iter().find(|w| w["id"] == id).unwrap();
        assert_eq!(item.url, recorded["_links"]["html"]["href"].as_str().unwrap());
        assert!(!item.body.contains('<') && !item.body.contains("&nbsp;"), "{}", item.body);
    }

    let seen = requests(&server).await;
    assert_eq!(seen.len(), 2);
    let wiql_ids: Vec<String> =
        wiql["workItems"].as_array().unwrap().iter().map(|w| w["id"].as_u64().unwrap().to_string()).collect();
    assert_eq!(query(&seen[1], "ids"), Some(wiql_ids.join(",")), "one batch of the query's ids, in its order");
}

#[tokio::test]
async fn ado_sign_in_page_is_bad_credentials_naming_ado_pat() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(format!("/{ORG}/{PROJECT}/_apis/wit/workitems/12")))
        .respond_with(
            ResponseTemplate::new(203).set_body_raw(
                "<!DOCTYPE html><html><head><title>Sign In</title></head><body></body></html>",
                "text/html",
            ),
        )
        .mount(&server)
        .await;
    let err = azure(&server, Some(PAT)).work_item(ORG, PROJECT, 12).await.unwrap_err();
    assert!(matches!(err, ForgeError::BadCredentials { status: 203, .. }), "{err:?}");
    assert!(err.to_string().contains("ADO_PAT"), "{err}");
    assert_secret_free(&err);
    assert_eq!(requests(&server).await.len(), 1);
}

#[tokio::test]
async fn ado_comment_uses_the_preview_api() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(format!("/{ORG}/{PROJECT}/_apis/wit/workItems/12/comments")))
        .and(query_param("api-version", "7.1-preview.4"))
        .and(header("authorization", PAT_BASIC))
        .and(body_json(json!({"text": "Merged in #7"})))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"workItemId": 12, "id": 50, "version": 1})))
        .expect(1)
        .mount(&server)
        .await;
    let id = azure(&server, Some(PAT)).comment(ORG, PROJECT, 12, "Merged in #7").await.unwrap();
    assert_eq!(id, 50);
}

#[tokio::test]
async fn ado_without_a_pat_is_unconfigured_and_sends_nothing() {
    let server = MockServer::start().await;
    let client = azure(&server, None);
    let errs = [
        client.work_item(ORG, PROJECT, 12).await.unwrap_err(),
        client.query(ORG, PROJECT, "Select [System.Id] From WorkItems").await.unwrap_err(),
        client.comment(ORG, PROJECT, 12, "hi").await.unwrap_err(),
    ];
    for err in &errs {
        assert!(matches!(err, ForgeError::Unconfigured(_)), "{err:?}");
        assert!(err.to_string().contains("ADO_PAT"), "{err}");
    }
    assert!(requests(&server).await.is_empty());
}

// ---------------------------------------------------------------------------------------------
// The import API: each recorded error its own answer, never a credential.
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn the_import_api_answers_each_recorded_forge_error_with_its_own_status_and_no_secret() {
    use axum::body::Body;
    use axum::http::Request as HttpRequest;
    use tower::ServiceExt as _;

    let server = MockServer::start().await;
    let far_reset = (baton::clock::now().timestamp() + 3600).to_string();
    let limited = Recorded::find("github-api/errors/403.rate-limit.primary.json", 403)
        .template()
        .append_header("x-ratelimit-reset", far_reset.as_str());
    let answers = [
        (1, Recorded::find("github-api/errors/401.bad-credentials.json", 401).template()),
        (2, Recorded::find("github-api/errors/404.not-found.json", 404).template()),
        (3, limited),
        (4, Recorded::find("github-api/errors/422.validation-failed.json", 422).template()),
        (5, ResponseTemplate::new(500).set_body_json(json!({"message": "Server Error"}))),
    ];
    for (n, answer) in answers {
        Mock::given(method("GET"))
            .and(path(format!("/repos/o/r/issues/{n}")))
            .respond_with(answer)
            .mount(&server)
            .await;
    }
    let ws = crate::common::Workspace::with_repo(&[("README.md", "hi\n")]);
    let execs =
        baton::runtime::executions::Executions::open(baton::runtime::config::DataDir::open(&ws.data()).unwrap())
            .await
            .unwrap();
    let settings = ForgeSettings {
        github: baton::forge::GitHubSettings {
            token: Some(Secret::new(TOKEN)),
            api_url: Some(server.uri()),
            ..Default::default()
        },
        ..ForgeSettings::default()
    };
    let forges = baton::runtime::forge::Forges::new(settings, fast()).unwrap();
    let state = baton::web::AppState::new(execs).unwrap().with_forges(forges);
    let send = |uri: &'static str, body: Value| {
        let app = baton::web::app(state.clone());
        async move {
            let req = HttpRequest::post(uri).header("content-type", "application/json");
            let response = app.oneshot(req.body(Body::from(body.to_string())).unwrap()).await.unwrap();
            let (status, headers) = (response.status().as_u16(), response.headers().clone());
            let bytes = http_body_util::BodyExt::collect(response.into_body()).await.unwrap().to_bytes();
            (status, headers, String::from_utf8_lossy(&bytes).into_owned())
        }
    };
    let project = json!({"name": "p", "repo_path": ws.repo(), "agent_profile": "demo"});
    assert_eq!(send("/api/v1/projects", project).await.0, 201);
    let expected = [
        (1, 502, "forge_bad_credentials", "GITHUB_TOKEN"),
        (2, 404, "forge_not_found", "was not found, or the credentials have no access"),
        (3, 503, "forge_rate_limited", "retry after"),
        (4, 422, "forge_validation", "field head is invalid"),
        (5, 502, "forge_unavailable", "after 3 attempts"),
    ];
    for (n, status, code, text) in expected {
        let (got, headers, body) =
            send("/api/v1/specs/import", json!({"project": "p", "ref": format!("github:o/r#{n}")})).await;
        assert_eq!(got, status, "issue {n}: {body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["error"], code, "issue {n}: {body}");
        assert!(v["message"].as_str().unwrap().contains(text), "issue {n}: {body}");
        assert!(!body.contains(TOKEN), "issue {n} leaks the token: {body}");
        if n == 3 {
            let secs: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
            assert!((3500..=3700).contains(&secs), "Retry-After {secs}");
        }
    }
    // A forge answering a `javascript:` address, or another issue than the one asked for:
    // refused, nothing imported (found by a fresh-clone tester with a fake forge).
    let hostile = json!({"number": 6, "html_url": "javascript:alert(1)", "title": "x", "body": "", "labels": []});
    Mock::given(method("GET"))
        .and(path("/repos/o/r/issues/6"))
        .respond_with(ResponseTemplate::new(200).set_body_json(hostile))
        .mount(&server)
        .await;
    let other = json!({"number": 1, "html_url": "https://github.com/o/r/issues/1", "title": "x", "body": ""});
    Mock::given(method("GET"))
        .and(path("/repos/o/r/issues/7"))
        .respond_with(ResponseTemplate::new(200).set_body_json(other))
        .mount(&server)
        .await;
    let (status, _, body) = send("/api/v1/specs/import", json!({"project": "p", "ref": "github:o/r#6"})).await;
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("\"field\":\"source_url\""), "{body}");
    let (status, _, body) = send("/api/v1/specs/import", json!({"project": "p", "ref": "github:o/r#7"})).await;
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("not #7"), "{body}");
    let (status, _, body) = send("/api/v1/specs/import", json!({"project": "p", "ref": "github:../..#1"})).await;
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("\"field\":\"ref\""), "{body}");

    // Nothing was imported by any of them.
    let filter = baton::store::SpecFilter { limit: 10, ..Default::default() };
    assert!(state.execs.store().list_specs(&filter).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_link_back_to_a_page_already_read_ends_the_listing() {
    // Found by a fresh-clone tester: a fake forge whose `Link: rel="next"` named the same page
    // kept the import requesting it for ever.
    let server = MockServer::start().await;
    let issue =
        json!({"number": 1, "html_url": "https://github.com/o/loop/issues/1", "title": "t", "body": "", "labels": []});
    let link = format!("<{}/repos/o/loop/issues?state=open&per_page=100&labels=bug>; rel=\"next\"", server.uri());
    Mock::given(method("GET"))
        .and(path("/repos/o/loop/issues"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!([issue])).append_header("link", link.as_str()))
        .mount(&server)
        .await;
    let items = github(&server, fast()).issues_labelled("o", "loop", "bug").await.unwrap();
    assert_eq!(items.len(), 1);
    assert!(requests(&server).await.len() <= 2, "{} requests", requests(&server).await.len());
}

/// A `Link: rel="next"` naming another host is not followed with the token: the next page is
/// asked of the API address, by its number, and the other host never hears from Baton.
#[tokio::test]
async fn a_link_to_another_host_never_gets_the_token() {
    let server = MockServer::start().await;
    let elsewhere = MockServer::start().await;
    Mock::given(wiremock::matchers::any())
        .respond_with(ResponseTemplate::new(200).set_body_json(json!([])))
        .mount(&elsewhere)
        .await;
    let issue = |n: u64| json!({"number": n, "html_url": format!("https://github.com/o/r/issues/{n}"), "title": "t", "body": "", "labels": []});
    let link =
        format!("<{}/repos/o/r/issues?state=open&per_page=100&labels=bug&page=2>; rel=\"next\"", elsewhere.uri());
    Mock::given(method("GET"))
        .and(path("/repos/o/r/issues"))
        .and(wiremock::matchers::query_param("page", "2"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!([issue(2)])))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/repos/o/r/issues"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!([issue(1)])).append_header("link", link.as_str()))
        .mount(&server)
        .await;
    let items = github(&server, fast()).issues_labelled("o", "r", "bug").await.unwrap();
    assert_eq!(
        items.iter().map(|i| i.url.as_str()).collect::<Vec<_>>(),
        ["https://github.com/o/r/issues/1", "https://github.com/o/r/issues/2"]
    );
    assert!(requests(&elsewhere).await.is_empty(), "the other host was called: {:?}", requests(&elsewhere).await);
}

#[tokio::test]
async fn a_forge_that_never_answers_fails_within_the_deadline() {
    // Found by a fresh-clone tester: an import against a hanging forge took minutes.
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/repos/o/r/issues/1"))
        .respond_with(ResponseTemplate::new(200).set_delay(Duration::from_secs(30)))
        .mount(&server)
        .await;
    let policy = RetryPolicy { deadline: Duration::from_millis(400), ..fast() };
    let clock = Stopwatch::start();
    let err = github(&server, policy).issue("o", "r", 1).await.unwrap_err();
    assert!(clock.elapsed() < Duration::from_secs(5), "took {:?}", clock.elapsed());
    assert!(matches!(err, ForgeError::Network { .. }), "{err:?}");
    assert!(err.to_string().contains("no answer within"), "{err}");
    let ado = azure(&server, Some(PAT));
    let ado = AzureDevOps::new(
        &ForgeSettings {
            ado: baton::forge::AdoSettings {
                pat: Some(Secret::new(PAT)),
                api_url: Some(server.uri()),
                ..Default::default()
            },
            ..ForgeSettings::default()
        },
        policy,
    )
    .unwrap_or(ado);
    Mock::given(method("GET"))
        .and(path(format!("/{ORG}/{PROJECT}/_apis/wit/workitems/12")))
        .respond_with(ResponseTemplate::new(200).set_delay(Duration::from_secs(30)))
        .mount(&server)
        .await;
    let clock = Stopwatch::start();
    let err = ado.work_item(ORG, PROJECT, 12).await.unwrap_err();
    assert!(clock.elapsed() < Duration::from_secs(5), "took {:?}", clock.elapsed());
    assert!(matches!(err, ForgeError::Network { .. }), "{err:?}");
}

#[tokio::test]
async fn a_request_over_the_servers_time_limit_gets_the_json_error_shape() {
    // Found by a fresh-clone tester: an import against a slow forge ended in an empty 503.
    use axum::body::Body;
    use axum::http::Request as HttpRequest;
    use tower::ServiceExt as _;

    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/repos/o/r/issues/1"))
        .respond_with(ResponseTemplate::new(200).set_delay(Duration::from_secs(10)))
        .mount(&server)
        .await;
    let ws = crate::common::Workspace::with_repo(&[("README.md", "hi\n")]);
    let execs =
        baton::runtime::executions::Executions::open(baton::runtime::config::DataDir::open(&ws.data()).unwrap())
            .await
            .unwrap();
    let settings = ForgeSettings {
        github: baton::forge::GitHubSettings { api_url: Some(server.uri()), ..Default::default() },
        ..ForgeSettings::default()
    };
    let forges = baton::runtime::forge::Forges::new(settings, fast()).unwrap();
    let state =
        baton::web::AppState::new(execs).unwrap().with_forges(forges).with_request_timeout(Duration::from_millis(300));
    let post = |uri: &'static str, body: Value| {
        let app = baton::web::app(state.clone());
        async move {
            let req = HttpRequest::post(uri).header("content-type", "application/json");
            let response = app.oneshot(req.body(Body::from(body.to_string())).unwrap()).await.unwrap();
            let status = response.status().as_u16();
            let bytes = http_body_util::BodyExt::collect(response.into_body()).await.unwrap().to_bytes();
            (status, serde_json::from_slice::<Value>(&bytes).unwrap())
        }
    };
    let project = json!({"name": "p", "repo_path": ws.repo(), "agent_profile": "demo"});
    assert_eq!(post("/api/v1/projects", project).await.0, 201);
    let clock = Stopwatch::start();
    let (status, body) = post("/api/v1/specs/import", json!({"project": "p", "ref": "github:o/r#1"})).await;
    assert!(clock.elapsed() < Duration::from_secs(5), "took {:?}", clock.elapsed());
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"], "unavailable");
    assert!(body["message"].as_str().unwrap().contains("took longer than 0.3 s"), "{body}");
}
