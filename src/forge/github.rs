//! The GitHub client: issues in, pull requests and comments out, through octocrab (REST,
//! `X-GitHub-Api-Version: 2022-11-28`) at a configurable base URL (GitHub Enterprise's
//! `https://HOST/api/v3`, or a test's mock server).
//!
//! Every call goes through one loop ([`call_with_retries`]) that classifies the answer and
//! retries what the policy allows. Pagination follows the `Link` headers octocrab parses.
//! Never logs a header; the token lives in octocrab's secret store.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::BodyExt as _;
use octocrab::{FromResponse, Octocrab, Page};
use serde::Serialize;
use serde_json::{json, Value};

use super::{accepted, call_with_retries, Forge, ForgeError, ForgeItem, ForgeSettings, NewPull, Reply, RetryPolicy};

/// Issues fetched by one bulk import, at most (ten pages of 100).
pub const MAX_BULK_ISSUES: usize = 1000;

/// Pages one bulk import reads, at most (the cap's ten pages of 100, and one).
pub const MAX_BULK_PAGES: usize = MAX_BULK_ISSUES / 100 + 1;

/// A page of a label listing: its number (1 is the first; a bulk import resumes from it) and
/// its address (the `Link` header's, or [`GitHub::labelled_page`]'s).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuesPageRef {
    /// The page's number.
    pub number: u32,
    /// Its address.
    uri: String,
}

impl IssuesPageRef {
    /// Its address.
    pub fn uri(&self) -> &str {
        &self.uri
    }
}

/// One page of a label listing.
#[derive(Debug, Clone)]
pub struct IssuesPage {
    /// Its issues (pull requests skipped), in GitHub's order.
    pub items: Vec<ForgeItem>,
    /// The next page; `None` on the last.
    pub next: Option<IssuesPageRef>,
}

/// A pull request on GitHub.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PullRequest {
    /// Its number.
    pub number: u64,
    /// Its web address.
    pub url: String,
    /// `open` or `closed`.
    pub state: String,
}

/// A GitHub API client.
#[derive(Debug, Clone)]
pub struct GitHub {
    client: Octocrab,
    api_url: String,
    has_token: bool,
    policy: RetryPolicy,
}

/// A successful answer, its body not yet read.
type Response = http::Response<BoxBody<Bytes, octocrab::Error>>;

impl GitHub {
    /// A client for `settings`' API address and token (anonymous without one), retrying by
    /// `policy` (`settings`' secondary rate-limit wait, when set, replaces the policy's).
    ///
    /// Errors: the API address is not a URL ([`ForgeError::Invalid`]).
    pub fn new(settings: &ForgeSettings, policy: RetryPolicy) -> Result<GitHub, ForgeError> {
        let mut policy = policy;
        if let Some(wait) = settings.github.secondary_rate_limit_wait() {
            policy.secondary_rate_limit_wait = wait;
        }
        let api_url = settings.github_api_url();
        let mut builder = Octocrab::builder()
            .base_uri(api_url.as_str())
            .map_err(|e| {
                ForgeError::Invalid(format!(
                    "the GitHub API address {api_url:?} (BATON_GITHUB_API_URL or [github] api_url) is not a URL: {e}"
                ))
            })?
            .set_connect_timeout(Some(Duration::from_secs(10)))
            .set_read_timeout(Some(Duration::from_secs(30)));
        if let Some(token) = &settings.github.token {
            builder = builder.personal_token(token.expose().to_string());
        }
        let client =
            builder.build().map_err(|e| ForgeError::Invalid(format!("the GitHub client cannot be built: {e}")))?;
        Ok(GitHub { client, api_url, has_token: settings.github.token.is_some(), policy })
    }

    /// Whether a token is configured (writing needs one).
    pub fn has_token(&self) -> bool {
        self.has_token
    }

    fn needs_token(&self, what: &str) -> Result<(), ForgeError> {
        if self.has_token {
            return Ok(());
        }
        Err(ForgeError::Unconfigured(format!(
            "{what} needs a GitHub token: set GITHUB_TOKEN (or [github] token in baton.toml)"
        )))
    }

    /// Sends `method` to `uri` (a path under the API address, or an absolute `Link` address)
    /// until it succeeds (the answer, unread) or the policy says stop.
    async fn call(&self, what: &str, method: &str, uri: &str, body: Option<&Value>) -> Result<Response, ForgeError> {
        let full = if uri.starts_with("http://") || uri.starts_with("https://") {
            // The token goes with every call: never to an address outside the API's origin.
            if !same_origin(uri, &self.api_url) {
                return Err(ForgeError::Malformed {
                    forge: Forge::GitHub,
                    what: what.into(),
                    message: format!("refusing to send the token to {uri}: it is outside {}", self.api_url),
                });
            }
            uri.to_string()
        } else {
            format!("{}{uri}", self.api_url)
        };
        let (client, full, api_url) = (&self.client, full.as_str(), self.api_url.as_str());
        call_with_retries(Forge::GitHub, what, &self.policy, move |_left| async move {
            let sent = match method {
                "POST" => client._post(full, body).await,
                _ => client._get(full).await,
            };
            let response =
                sent.map_err(|e| format!("{} (at {api_url}: is BATON_GITHUB_API_URL right?)", transport_message(&e)))?;
            let status = response.status().as_u16();
            if accepted(Forge::GitHub, status) {
                return Ok(Reply::Accepted(response));
            }
            let headers = response.headers().clone();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|e| format!("the answer was cut off: {}", transport_message(&e)))?
                .to_bytes();
            Ok(Reply::Refused { status, headers, body })
        })
        .await
    }

    /// GETs `uri` (a path under the API address) and reads its JSON body.
    ///
    /// Errors: any [`ForgeError`] of the call; a body that is not JSON.
    pub(super) async fn get_json(&self, what: &str, uri: &str) -> Result<Value, ForgeError> {
        let answer = self.call(what, "GET", uri, None).await?;
        Self::json(what, answer).await
    }

    /// The JSON body of a successful answer.
    async fn json(what: &str, response: Response) -> Result<Value, ForgeError> {
        let malformed = |message: String| ForgeError::Malformed { forge: Forge::GitHub, what: what.into(), message };
        let body = response.into_body().collect().await.map_err(|e| malformed(transport_message(&e)))?.to_bytes();
        serde_json::from_slice(&body).map_err(|e| malformed(format!("not JSON: {e}")))
    }

    /// Issue `number` of `owner/repo` as an item.
    ///
    /// Errors: the item is a pull request ([`ForgeError::Invalid`]); any [`ForgeError`] of the
    /// call.
    pub async fn issue(&self, owner: &str, repo: &str, number: u64) -> Result<ForgeItem, ForgeError> {
        let what = format!("issue {owner}/{repo}#{number}");
        let answer = self.call(&what, "GET", &format!("/repos/{owner}/{repo}/issues/{number}"), None).await?;
        let v = Self::json(&what, answer).await?;
        if v.get("number").and_then(Value::as_u64) != Some(number) {
            return Err(ForgeError::Malformed {
                forge: Forge::GitHub,
                what,
                message: format!("the answer is issue {}, not #{number} (transferred?)", v["number"]),
            });
        }
        if v.get("pull_request").is_some_and(|p| !p.is_null()) {
            return Err(ForgeError::Invalid(format!(
                "{owner}/{repo}#{number} is a pull request, not an issue: import the issue it resolves"
            )));
        }
        item_of(&what, &v, &format!("{owner}/{repo}"))
    }

    /// Page `number` (1 is the first) of the open issues of `owner/repo` carrying `label`, 100
    /// a page: where [`GitHub::issues_page`] reads it.
    pub fn labelled_page(&self, owner: &str, repo: &str, label: &str, number: u32) -> IssuesPageRef {
        let query = serde_urlencoded_pair("labels", label);
        let mut uri = format!("{}/repos/{owner}/{repo}/issues?state=open&per_page=100&{query}", self.api_url);
        if number > 1 {
            uri.push_str(&format!("&page={number}"));
        }
        IssuesPageRef { number: number.max(1), uri }
    }

    /// One page of a label listing (pull requests skipped), and the next page when its `Link`
    /// header names one (`rel="next"`; its number read from its `page` parameter).
    ///
    /// Errors: any [`ForgeError`] of the call (a rate limit among them: the page can be asked
    /// again, or resumed later by its number).
    pub async fn issues_page(
        &self,
        owner: &str,
        repo: &str,
        label: &str,
        page: &IssuesPageRef,
    ) -> Result<IssuesPage, ForgeError> {
        let what = format!("issues of {owner}/{repo} labelled {label:?} (page {})", page.number);
        let answer = self.call(&what, "GET", &page.uri, None).await?;
        // octocrab reads the page and its `Link` header (first, prev, next, last).
        let read = <Page<Value> as FromResponse>::from_response(answer).await.map_err(|e| ForgeError::Malformed {
            forge: Forge::GitHub,
            what: what.clone(),
            message: transport_message(&e),
        })?;
        let full_name = format!("{owner}/{repo}");
        let mut items = Vec::new();
        for issue in &read.items {
            if issue.get("pull_request").is_some_and(|p| !p.is_null()) {
                continue;
            }
            items.push(item_of(&what, issue, &full_name)?);
        }
        let next = read.next.map(|u| {
            let uri = u.to_string();
            let number = url::Url::parse(&uri)
                .ok()
                .and_then(|u| u.query_pairs().find(|(k, _)| k == "page").and_then(|(_, v)| v.parse().ok()))
                .unwrap_or(page.number + 1);
            // A `Link` to another host (a proxy's rewrite, a hostile answer) is not followed
            // with the token: the next page is asked of the API address by its number.
            if same_origin(&uri, &self.api_url) {
                IssuesPageRef { number, uri }
            } else {
                self.labelled_page(owner, repo, label, number)
            }
        });
        Ok(IssuesPage { items, next })
    }

    /// The open issues of `owner/repo` carrying `label`, following `Link: rel="next"` pages
    /// (pull requests skipped), at most [`MAX_BULK_ISSUES`].
    ///
    /// Errors: any [`ForgeError`] of a page.
    pub async fn issues_labelled(&self, owner: &str, repo: &str, label: &str) -> Result<Vec<ForgeItem>, ForgeError> {
        let mut next = Some(self.labelled_page(owner, repo, label, 1));
        let mut items: Vec<ForgeItem> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        while let Some(page) = next.take() {
            // A `Link` that points back at a page already read, or more pages than the cap
            // needs: stop rather than loop.
            if !seen.insert(page.uri.clone()) || seen.len() > MAX_BULK_PAGES {
                break;
            }
            let read = self.issues_page(owner, repo, label, &page).await?;
            for item in read.items {
                if !items.iter().any(|i| i.url == item.url) {
                    items.push(item);
                }
            }
            if items.len() >= MAX_BULK_ISSUES {
                items.truncate(MAX_BULK_ISSUES);
                break;
            }
            next = read.next;
        }
        Ok(items)
    }

    /// The pull request of `owner/repo` from branch `head` (of the same repository), open or
    /// closed, if there is one.
    ///
    /// Errors: any [`ForgeError`] of the call.
    pub async fn find_pull(&self, owner: &str, repo: &str, head: &str) -> Result<Option<PullRequest>, ForgeError> {
        let what = format!("pull requests of {owner}/{repo} from {head}");
        let query = serde_urlencoded_pair("head", &format!("{owner}:{head}"));
        let answer = self.call(&what, "GET", &format!("/repos/{owner}/{repo}/pulls?state=all&{query}"), None).await?;
        let v = Self::json(&what, answer).await?;
        Ok(v.as_array().and_then(|l| l.first()).map(pull_of))
    }

    /// Opens pull request `pull` on `owner/repo` (its head a branch of the same repository).
    ///
    /// Errors: no token; any [`ForgeError`] of the call (422 when one exists already or the
    /// branch is unknown).
    pub async fn create_pull(&self, owner: &str, repo: &str, pull: &NewPull<'_>) -> Result<PullRequest, ForgeError> {
        crate::crash::before_effect("forge create pull");
        let what = format!("opening a pull request on {owner}/{repo} from {}", pull.head);
        self.needs_token(&what)?;
        let payload = json!({ "title": pull.title, "head": pull.head, "base": pull.base, "body": pull.body });
        let answer = self.call(&what, "POST", &format!("/repos/{owner}/{repo}/pulls"), Some(&payload)).await?;
        Ok(pull_of(&Self::json(&what, answer).await?))
    }

    /// Comments `body` (markdown) on issue `number` of `owner/repo`; the comment's address.
    ///
    /// Errors: no token; any [`ForgeError`] of the call.
    pub async fn comment(&self, owner: &str, repo: &str, number: u64, body: &str) -> Result<String, ForgeError> {
        crate::crash::before_effect("forge comment");
        let what = format!("commenting on {owner}/{repo}#{number}");
        self.needs_token(&what)?;
        let payload = json!({ "body": body });
        let answer = self
            .call(&what, "POST", &format!("/repos/{owner}/{repo}/issues/{number}/comments"), Some(&payload))
            .await?;
        Ok(Self::json(&what, answer).await?.get("html_url").and_then(Value::as_str).unwrap_or_default().to_string())
    }
}

impl GitHub {
    /// Replies to review comment `comment_id` on pull request `number` of `owner/repo`
    /// (`POST /repos/{o}/{r}/pulls/{n}/comments/{id}/replies`): the reply's address.
    ///
    /// Errors: no token; any [`ForgeError`] of the call.
    pub async fn reply_to_review_comment(
        &self,
        owner: &str,
        repo: &str,
        number: u64,
        comment_id: u64,
        body: &str,
    ) -> Result<String, ForgeError> {
        crate::crash::before_effect("forge review reply");
        let what = format!("replying to review comment {comment_id} of {owner}/{repo}#{number}");
        self.needs_token(&what)?;
        let payload = json!({ "body": body });
        let uri = format!("/repos/{owner}/{repo}/pulls/{number}/comments/{comment_id}/replies");
        let answer = self.call(&what, "POST", &uri, Some(&payload)).await?;
        Ok(Self::json(&what, answer).await?.get("html_url").and_then(Value::as_str).unwrap_or_default().to_string())
    }
}

impl GitHub {
    /// The bodies of the comments on issue `number` of `owner/repo` updated at or after
    /// `since` (RFC 3339), oldest first, at most 100 (one page: what Baton itself posted since
    /// a moment it knows).
    ///
    /// Errors: any [`ForgeError`] of the call.
    pub async fn comments_since(
        &self,
        owner: &str,
        repo: &str,
        number: u64,
        since: &str,
    ) -> Result<Vec<String>, ForgeError> {
        let what = format!("reading the comments of {owner}/{repo}#{number}");
        let uri = format!(
            "/repos/{owner}/{repo}/issues/{number}/comments?per_page=100&{}",
            serde_urlencoded_pair("since", since)
        );
        let answer = Self::json(&what, self.call(&what, "GET", &uri, None).await?).await?;
        Ok(answer
            .as_array()
            .map(|list| list.iter().filter_map(|c| c.get("body").and_then(Value::as_str)).map(str::to_string).collect())
            .unwrap_or_default())
    }
}

fn item_of(what: &str, issue: &Value, full_name: &str) -> Result<ForgeItem, ForgeError> {
    let item = ForgeItem::from_github_issue(issue, full_name);
    if item.url.is_empty() {
        return Err(ForgeError::Malformed { forge: Forge::GitHub, what: what.into(), message: "no html_url".into() });
    }
    Ok(item)
}

fn pull_of(v: &Value) -> PullRequest {
    PullRequest {
        number: v.get("number").and_then(Value::as_u64).unwrap_or_default(),
        url: v.get("html_url").and_then(Value::as_str).unwrap_or_default().to_string(),
        state: v.get("state").and_then(Value::as_str).unwrap_or_default().to_string(),
    }
}

/// `key=value`, form-encoded.
fn serde_urlencoded_pair(key: &str, value: &str) -> String {
    url::form_urlencoded::Serializer::new(String::new()).append_pair(key, value).finish()
}

/// A transport error's text, without anything from the request.
fn transport_message(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Whether absolute address `uri` has the scheme, host and port of `base` (the API address):
/// the only addresses the token may go to.
fn same_origin(uri: &str, base: &str) -> bool {
    match (url::Url::parse(uri), url::Url::parse(base)) {
        (Ok(a), Ok(b)) => a.origin() == b.origin(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_are_form_encoded() {
        assert_eq!(serde_urlencoded_pair("labels", "needs spec&x"), "labels=needs+spec%26x");
    }
}
