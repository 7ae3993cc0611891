//! Tests of the forge's reference parsing, answer classification and retry loop.

use std::time::Duration;

use reqwest::header::HeaderMap;

use super::*;

fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.insert(*k, v.parse().unwrap());
    }
    h
}

fn verdict(status: u16, h: &[(&'static str, &str)], body: &str, attempts: Attempts) -> Verdict {
    let h = headers(h);
    let answer = Answer { status, headers: &h, body: body.as_bytes() };
    classify(Forge::GitHub, "GET x", answer, attempts, &RetryPolicy::default(), 1000)
}

#[test]
fn references_parse_and_print() {
    let r = ItemRef::parse(" github:octo-org/hello.rs#42 ").unwrap();
    assert_eq!(r, ItemRef::GitHub { owner: "octo-org".into(), repo: "hello.rs".into(), number: 42 });
    assert_eq!(r.to_string(), "github:octo-org/hello.rs#42");
    let r = ItemRef::parse("ado:fabrikam/Fabrikam-Fiber-Git#12").unwrap();
    assert_eq!(r.to_string(), "ado:fabrikam/Fabrikam-Fiber-Git#12");
    assert_eq!(
        ItemRef::parse("ado:org/My Project#3").unwrap(),
        ItemRef::Ado { org: "org".into(), project: "My Project".into(), id: 3 }
    );
    let long = format!("github:{}/r#1", "o".repeat(10_000));
    assert!(ItemRef::parse(&long).unwrap_err().to_string().len() < 300, "a long input is cut in the message");
    for bad in [
        "",
        "github:o/r",
        "github:o/r#0",
        "github:o/r#+1",
        "github:o#1",
        "gitlab:o/r#1",
        "github:o/r/x#1",
        "github:o /r#1",
        "github:../..#1",
        "ado:../..#1",
        "github:o/r%2f#1",
        "github:o/`id`#1",
        "github:o/r\u{202e}#1",
        "ado:org/ My#1",
    ] {
        let e = ItemRef::parse(bad).unwrap_err().to_string();
        assert!(e.contains("github:OWNER/REPO#NUMBER"), "{bad}: {e}");
    }
    assert_eq!(RepoRef::parse("o/r").unwrap(), RepoRef::GitHub { owner: "o".into(), repo: "r".into() });
    assert_eq!(
        RepoRef::parse("ado:org/proj").unwrap(),
        RepoRef::Ado { org: "org".into(), project: "proj".into(), repository: "proj".into() }
    );
    assert_eq!(
        RepoRef::parse("ado:org/proj/repo").unwrap(),
        RepoRef::Ado { org: "org".into(), project: "proj".into(), repository: "repo".into() }
    );
    assert!(RepoRef::parse("ado:org").is_err());
    assert!(RepoRef::parse("justaname").is_err());
    assert!(RepoRef::parse("ado:org/My Project").is_ok());
    assert!(RepoRef::parse("../..").is_err());
}

#[test]
fn environment_overrides_the_file_and_secrets_never_print() {
    let file: ForgeSettings =
        toml::from_str("[github]\ntoken = 'from-file'\napi_url = 'http://ghe/api/v3/'\n[ado]\npat = ''\n").unwrap();
    let env = |k: &str| match k {
        "GITHUB_TOKEN" => Some("from-env".to_string()),
        "BATON_ADO_API_URL" => Some("http://ado.local".to_string()),
        _ => None,
    };
    let s = file.with_env(env);
    assert_eq!(s.github.token.as_ref().unwrap().expose(), "from-env");
    assert_eq!(s.github_api_url(), "http://ghe/api/v3");
    assert_eq!(s.ado_api_url(), "http://ado.local");
    assert!(s.ado.pat.is_none(), "an empty PAT counts as unset");
    assert!(!format!("{s:?}").contains("from-env"));
    assert_eq!(ForgeSettings::default().github_api_url(), DEFAULT_GITHUB_API_URL);
}

#[test]
fn githubs_secondary_rate_limit_is_a_rate_limit_of_at_least_a_minute() {
    let body = r#"{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again.","documentation_url":"https://docs.github.com/rest/using-the-rest-api/rate-limits-for-the-rest-api#about-secondary-rate-limits","status":"403"}"#;
    let none = Attempts::default();
    // No rate headers: a minute. The default policy waits up to a minute within a call
    // (when its deadline leaves the time: the call loop checks).
    assert!(matches!(verdict(403, &[], body, none), Verdict::Retry(d) if d == Duration::from_secs(60)));
    let short = RetryPolicy { max_rate_limit_wait: Duration::from_secs(10), ..RetryPolicy::default() };
    let h = HeaderMap::new();
    let answer = Answer { status: 403, headers: &h, body: body.as_bytes() };
    let Verdict::Fail(e) = classify(Forge::GitHub, "GET x", answer, none, &short, 1000) else {
        panic!("a minute's wait is over this policy's limit")
    };
    let ForgeError::RateLimited { status, retry_after_secs, wait, secondary, ref message, .. } = e else {
        panic!("{e:?}")
    };
    assert_eq!((status, retry_after_secs, wait, secondary), (403, Some(60), Some(Duration::from_secs(60)), true));
    assert!(message.contains("secondary rate limit"), "{message}");
    assert!(e.to_string().contains("a secondary rate limit; retry after 1970-01-01T00:17:40Z (in 60 s)"), "{e}");
    // `retry-after` wins; a shorter configured wait is taken; 429 too.
    let with_retry_after = headers(&[("retry-after", "90")]);
    let answer = Answer { status: 429, headers: &with_retry_after, body: body.as_bytes() };
    assert!(matches!(
        classify(Forge::GitHub, "GET x", answer, none, &short, 1000),
        Verdict::Fail(ForgeError::RateLimited { retry_after_secs: Some(90), secondary: true, .. })
    ));
    let quick = RetryPolicy { secondary_rate_limit_wait: Duration::from_millis(200), ..short };
    let answer = Answer { status: 403, headers: &h, body: body.as_bytes() };
    assert!(
        matches!(classify(Forge::GitHub, "GET x", answer, none, &quick, 0), Verdict::Retry(d) if d == Duration::from_millis(200))
    );
    // Recognised by the documentation URL alone, or the older "abuse" wording.
    let by_url = r#"{"message":"Forbidden","documentation_url":"https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits"}"#;
    assert!(is_secondary_rate_limit(by_url.as_bytes()));
    assert!(is_secondary_rate_limit(br#"{"message":"You have triggered an abuse detection mechanism."}"#));
    // A 403 that says nothing of limits is a refusal, as before.
    assert!(!is_secondary_rate_limit(br#"{"message":"Resource not accessible by integration"}"#));
    assert!(matches!(
        verdict(403, &[], r#"{"message":"Resource not accessible by integration"}"#, none),
        Verdict::Fail(ForgeError::Refused { status: 403, .. })
    ));
}

#[test]
fn answers_are_classified_as_the_forges_document() {
    let none = Attempts::default();
    assert!(matches!(verdict(200, &[], "{}", none), Verdict::Success));
    assert!(matches!(verdict(401, &[], r#"{"message":"Bad credentials"}"#, none),
        Verdict::Fail(ForgeError::BadCredentials { ref message, .. }) if message == "Bad credentials"));
    assert!(matches!(
        verdict(404, &[], r#"{"message":"Not Found"}"#, none),
        Verdict::Fail(ForgeError::NotFound { .. })
    ));
    // A reset 30 s away is waited for; one an hour away is not.
    let soon = verdict(403, &[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "1029")], "{}", none);
    assert!(matches!(soon, Verdict::Retry(d) if d == Duration::from_secs(30)), "{soon:?}");
    let Verdict::Fail(e) = verdict(403, &[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "4600")], "{}", none)
    else {
        panic!("an hour's wait must fail")
    };
    assert!(e.to_string().contains("retry after 1970-01-01T01:16:41Z (in 3601 s)"), "{e}");
    assert!(matches!(verdict(429, &[("retry-after", "5")], "{}", none), Verdict::Retry(d) if d.as_secs() == 5));
    let spent = Attempts { server: 0, rate_limit: 2 };
    assert!(matches!(
        verdict(429, &[("retry-after", "5")], "{}", spent),
        Verdict::Fail(ForgeError::RateLimited { .. })
    ));
    let Verdict::Fail(e) = verdict(403, &[("x-ratelimit-remaining", "0")], "{}", none) else { panic!() };
    assert!(e.to_string().contains("retry later"), "{e}");
    assert!(matches!(
        verdict(403, &[], r#"{"message":"Resource not accessible"}"#, none),
        Verdict::Fail(ForgeError::Refused { status: 403, .. })
    ));
    let Verdict::Fail(e) = verdict(
        422,
        &[],
        r#"{"message":"Validation Failed","errors":[{"resource":"Label","code":"invalid","field":"color"}]}"#,
        none,
    ) else {
        panic!()
    };
    assert_eq!(e.to_string(), "GitHub refused GET x as invalid (422 Validation Failed): field color is invalid");
    assert!(matches!(verdict(502, &[], "", none), Verdict::Retry(d) if d == Duration::from_millis(500)));
    assert!(
        matches!(verdict(502, &[], "", Attempts { server: 2, rate_limit: 0 }), Verdict::Retry(d) if d == Duration::from_secs(2))
    );
    assert!(matches!(
        verdict(503, &[], "", Attempts { server: 3, rate_limit: 0 }),
        Verdict::Fail(ForgeError::Server { attempts: 4, .. })
    ));
    let ado = classify(
        Forge::AzureDevOps,
        "GET y",
        Answer { status: 203, headers: &HeaderMap::new(), body: b"<html>" },
        none,
        &RetryPolicy::default(),
        0,
    );
    assert!(matches!(ado, Verdict::Fail(ForgeError::BadCredentials { .. })));
    let signin = headers(&[("location", "https://spsprodweu5.vssps.visualstudio.com/_signin?realm=x")]);
    let ado = classify(
        Forge::AzureDevOps,
        "GET y",
        Answer { status: 302, headers: &signin, body: b"" },
        none,
        &RetryPolicy::default(),
        0,
    );
    assert!(matches!(ado, Verdict::Fail(ForgeError::BadCredentials { status: 302, .. })), "{ado:?}");
}
