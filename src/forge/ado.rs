//! The Azure DevOps client: work items in (one GET, or a WIQL query then batch GETs of the
//! fields), pull requests and work-item comments out, over REST api-version 7.1 (comments:
//! `7.1-preview.4`) with reqwest at a configurable base URL (`https://dev.azure.com`, a
//! server's collection URL, or a test's mock server).
//!
//! Authenticates with the PAT as Basic credentials (empty user), the documented form. Every
//! call goes through one loop ([`call_with_retries`]) that
//! classifies the answer and retries what the policy allows. Never logs a header.

use std::time::Duration;

use reqwest::{Client, Method};
use serde::Serialize;
use serde_json::{json, Value};

use super::{
    accepted, call_with_retries, Forge, ForgeError, ForgeItem, ForgeSettings, NewPull, Reply, RetryPolicy, Secret,
};

/// The REST version of every call but comments.
pub const API_VERSION: &str = "7.1";

/// The work-item comments API is still a preview in 7.1.
pub const COMMENTS_API_VERSION: &str = "7.1-preview.4";

/// Ids per batch GET (the API's limit).
pub const BATCH: usize = 200;

/// Work items fetched by one WIQL import, at most.
pub const MAX_BULK_ITEMS: usize = 1000;

/// A pull request on Azure DevOps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PullRequest {
    /// Its id.
    pub id: u64,
    /// Its web address.
    pub url: String,
    /// `active`, `completed` or `abandoned`.
    pub status: String,
}

/// An Azure DevOps REST client.
#[derive(Debug, Clone)]
pub struct AzureDevOps {
    client: Client,
    base: String,
    pat: Option<Secret>,
    policy: RetryPolicy,
}

impl AzureDevOps {
    /// A client for `settings`' address and PAT, retrying by `policy`.
    ///
    /// Errors: the HTTP client cannot be built ([`ForgeError::Invalid`]).
    pub fn new(settings: &ForgeSettings, policy: RetryPolicy) -> Result<AzureDevOps, ForgeError> {
        let client = Client::builder()
            // A bad PAT is redirected to a sign-in page: stop there and say so (and never send
            // the PAT on to wherever a redirect points).
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(10))
            .user_agent(concat!("baton/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ForgeError::Invalid(format!("the Azure DevOps client cannot be built: {e}")))?;
        Ok(AzureDevOps { client, base: settings.ado_api_url(), pat: settings.ado.pat.clone(), policy })
    }

    fn url(&self, org: &str, project: &str, path: &str) -> String {
        let enc = |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>().replace('+', "%20");
        format!("{}/{}/{}/_apis/{path}", self.base, enc(org), enc(project))
    }

    /// The address of `path` under `org`/`project`'s `_apis`.
    pub(super) fn api_url(&self, org: &str, project: &str, path: &str) -> String {
        self.url(org, project, path)
    }

    /// GETs `url` and reads its JSON body.
    ///
    /// Errors: any [`ForgeError`] of the call; a body that is not JSON.
    pub(super) async fn get_json(&self, what: &str, url: &str) -> Result<Value, ForgeError> {
        self.call(what, Method::GET, url, None).await
    }

    /// GETs `url` and reads its body as text (a build log).
    ///
    /// Errors: any [`ForgeError`] of the call.
    pub(super) async fn get_text(&self, what: &str, url: &str) -> Result<String, ForgeError> {
        let bytes = self.call_bytes(what, Method::GET, url, None).await?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Sends the request until it succeeds (its JSON body) or the policy says stop.
    async fn call(&self, what: &str, method: Method, url: &str, body: Option<&Value>) -> Result<Value, ForgeError> {
        let bytes = self.call_bytes(what, method, url, body).await?;
        serde_json::from_slice(&bytes).map_err(|e| ForgeError::Malformed {
            forge: Forge::AzureDevOps,
            what: what.into(),
            message: format!("not JSON: {e}"),
        })
    }

    /// Sends the request until it succeeds (its body) or the policy says stop.
    async fn call_bytes(
        &self,
        what: &str,
        method: Method,
        url: &str,
        body: Option<&Value>,
    ) -> Result<bytes::Bytes, ForgeError> {
        let Some(pat) = &self.pat else {
            return Err(ForgeError::Unconfigured(format!(
                "{what} needs an Azure DevOps personal access token: set ADO_PAT (or [ado] pat in baton.toml)"
            )));
        };
        let client = &self.client;
        let bytes = call_with_retries(Forge::AzureDevOps, what, &self.policy, move |left| {
            let mut request = client.request(method.clone(), url).basic_auth("", Some(pat.expose())).timeout(left);
            if let Some(b) = body {
                request = request.json(b);
            }
            async move {
                let response = request.send().await.map_err(|e| transport_message(&e))?;
                let status = response.status().as_u16();
                let headers = response.headers().clone();
                let body =
                    response.bytes().await.map_err(|e| format!("the answer was cut off: {}", transport_message(&e)))?;
                Ok(if accepted(Forge::AzureDevOps, status) {
                    Reply::Accepted(body)
                } else {
                    Reply::Refused { status, headers, body }
                })
            }
        })
        .await?;
        Ok(bytes)
    }

    /// Work item `id` of `org`/`project` as an item (`$expand=all`, so its web link comes
    /// with it).
    ///
    /// Errors: any [`ForgeError`] of the call.
    pub async fn work_item(&self, org: &str, project: &str, id: u64) -> Result<ForgeItem, ForgeError> {
        let what = format!("work item {org}/{project}#{id}");
        let url =
            format!("{}?$expand=all&api-version={API_VERSION}", self.url(org, project, &format!("wit/workitems/{id}")));
        let v = self.call(&what, Method::GET, &url, None).await?;
        if v.get("id").and_then(Value::as_u64) != Some(id) {
            return Err(ForgeError::Malformed {
                forge: Forge::AzureDevOps,
                what,
                message: format!("the answer is work item {}, not {id}", v["id"]),
            });
        }
        item_of(&what, &v, org, project)
    }

    /// The work items a WIQL query selects in `org`/`project`: the query answers ids only, the
    /// fields come from batch GETs of up to 200 ids (`$expand=all`), in the query's order; at
    /// most [`MAX_BULK_ITEMS`].
    ///
    /// Errors: any [`ForgeError`] of a call (a malformed query is the forge's 400).
    pub async fn query(&self, org: &str, project: &str, wiql: &str) -> Result<Vec<ForgeItem>, ForgeError> {
        let ids = self.query_ids(org, project, wiql).await?;
        let mut items = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(BATCH) {
            items.extend(self.work_items(org, project, chunk).await?);
        }
        Ok(items)
    }

    /// The ids a WIQL query selects in `org`/`project`, in its order, at most
    /// [`MAX_BULK_ITEMS`].
    ///
    /// Errors: any [`ForgeError`] of the call (a malformed query is the forge's 400).
    pub async fn query_ids(&self, org: &str, project: &str, wiql: &str) -> Result<Vec<u64>, ForgeError> {
        let what = format!("WIQL query in {org}/{project}");
        let url = format!("{}?api-version={API_VERSION}", self.url(org, project, "wit/wiql"));
        let v = self.call(&what, Method::POST, &url, Some(&json!({ "query": wiql }))).await?;
        Ok(v.get("workItems")
            .and_then(Value::as_array)
            .map(|l| l.iter().filter_map(|w| w.get("id").and_then(Value::as_u64)).take(MAX_BULK_ITEMS).collect())
            .unwrap_or_default())
    }

    /// Work items `ids` (at most [`BATCH`]) of `org`/`project`, one batch GET (`$expand=all`),
    /// in the order of `ids`; items deleted since are left out.
    ///
    /// Errors: any [`ForgeError`] of the call.
    pub async fn work_items(&self, org: &str, project: &str, ids: &[u64]) -> Result<Vec<ForgeItem>, ForgeError> {
        let mut items = Vec::with_capacity(ids.len());
        if ids.is_empty() {
            return Ok(items);
        }
        let list = ids.iter().take(BATCH).map(u64::to_string).collect::<Vec<_>>().join(",");
        let what = format!("work items {list} of {org}/{project}");
        let url = format!(
            "{}?ids={list}&$expand=all&errorPolicy=Omit&api-version={API_VERSION}",
            self.url(org, project, "wit/workitems")
        );
        let v = self.call(&what, Method::GET, &url, None).await?;
        let values = v.get("value").and_then(Value::as_array).cloned().unwrap_or_default();
        // The batch answers in its own order, and omits items deleted since the query
        // (`errorPolicy=Omit`, else one deleted item fails the batch); keep the query's order.
        for id in ids.iter().take(BATCH) {
            if let Some(w) = values.iter().find(|w| w.get("id").and_then(Value::as_u64) == Some(*id)) {
                items.push(item_of(&what, w, org, project)?);
            }
        }
        Ok(items)
    }

    /// The pull request of `repository` in `org`/`project` from branch `source` (any status),
    /// if there is one.
    ///
    /// Errors: any [`ForgeError`] of the call.
    pub async fn find_pull(
        &self,
        org: &str,
        project: &str,
        repository: &str,
        source: &str,
    ) -> Result<Option<PullRequest>, ForgeError> {
        let what = format!("pull requests of {org}/{project}/{repository} from {source}");
        let query = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("searchCriteria.sourceRefName", &format!("refs/heads/{source}"))
            .append_pair("searchCriteria.status", "all")
            .append_pair("api-version", API_VERSION)
            .finish();
        let path = format!("git/repositories/{repository}/pullrequests");
        let v = self.call(&what, Method::GET, &format!("{}?{query}", self.url(org, project, &path)), None).await?;
        Ok(v.get("value")
            .and_then(Value::as_array)
            .and_then(|l| l.first())
            .map(|p| self.pull_of(org, project, repository, p)))
    }

    /// Opens pull request `pull` on `repository` of `org`/`project` (the description cut to
    /// the API's 4,000 characters).
    ///
    /// Errors: any [`ForgeError`] of the call.
    pub async fn create_pull(
        &self,
        org: &str,
        project: &str,
        repository: &str,
        pull: &NewPull<'_>,
    ) -> Result<PullRequest, ForgeError> {
        crate::crash::before_effect("forge create pull");
        let what = format!("opening a pull request on {org}/{project}/{repository} from {}", pull.head);
        let path = format!("git/repositories/{repository}/pullrequests");
        let url = format!("{}?api-version={API_VERSION}", self.url(org, project, &path));
        let description: String = pull.body.chars().take(4000).collect();
        let body = json!({
            "sourceRefName": format!("refs/heads/{}", pull.head),
            "targetRefName": format!("refs/heads/{}", pull.base),
            "title": pull.title,
            "description": description,
        });
        let v = self.call(&what, Method::POST, &url, Some(&body)).await?;
        Ok(self.pull_of(org, project, repository, &v))
    }

    /// Comments `text` (markdown) on work item `id`; the comment's id.
    ///
    /// Errors: any [`ForgeError`] of the call.
    pub async fn comment(&self, org: &str, project: &str, id: u64, text: &str) -> Result<u64, ForgeError> {
        crate::crash::before_effect("forge comment");
        let what = format!("commenting on work item {org}/{project}#{id}");
        let url = format!(
            "{}?format=markdown&api-version={COMMENTS_API_VERSION}",
            self.url(org, project, &format!("wit/workItems/{id}/comments"))
        );
        let v = self.call(&what, Method::POST, &url, Some(&json!({ "text": text }))).await?;
        Ok(v.get("id").and_then(Value::as_u64).unwrap_or_default())
    }

    /// Replies on thread `thread_id` of pull request `pr_id` in `repository`
    /// (`POST …/git/repositories/{repo}/pullRequests/{id}/threads/{thread}/comments`, REST 7.1):
    /// the new comment's id.
    ///
    /// Errors: no PAT; any [`ForgeError`] of the call.
    pub async fn reply_to_thread(
        &self,
        org: &str,
        project: &str,
        repository: &str,
        pr_id: u64,
        thread_id: u64,
        text: &str,
    ) -> Result<u64, ForgeError> {
        crate::crash::before_effect("forge review reply");
        let what = format!("replying on thread {thread_id} of pull request {pr_id} in {org}/{project}/{repository}");
        let path = format!("git/repositories/{repository}/pullRequests/{pr_id}/threads/{thread_id}/comments");
        let url = format!("{}?api-version={API_VERSION}", self.url(org, project, &path));
        let body = json!({ "content": text, "parentCommentId": 1, "commentType": 1 });
        let v = self.call(&what, Method::POST, &url, Some(&body)).await?;
        Ok(v.get("id").and_then(Value::as_u64).unwrap_or_default())
    }

    /// The texts of the newest 200 comments on work item `id`, newest first.
    ///
    /// Errors: any [`ForgeError`] of the call.
    pub async fn comment_texts(&self, org: &str, project: &str, id: u64) -> Result<Vec<String>, ForgeError> {
        let what = format!("reading the comments of work item {org}/{project}#{id}");
        let url = format!(
            "{}?$top=200&order=desc&api-version={COMMENTS_API_VERSION}",
            self.url(org, project, &format!("wit/workItems/{id}/comments"))
        );
        let v = self.call(&what, Method::GET, &url, None).await?;
        Ok(v.get("comments")
            .and_then(Value::as_array)
            .map(|list| list.iter().filter_map(|c| c.get("text").and_then(Value::as_str)).map(str::to_string).collect())
            .unwrap_or_default())
    }

    fn pull_of(&self, org: &str, project: &str, repository: &str, v: &Value) -> PullRequest {
        let id = v.get("pullRequestId").and_then(Value::as_u64).unwrap_or_default();
        let web = v.pointer("/repository/webUrl").and_then(Value::as_str).map(|w| format!("{w}/pullrequest/{id}"));
        PullRequest {
            id,
            url: web.unwrap_or_else(|| format!("{}/{org}/{project}/_git/{repository}/pullrequest/{id}", self.base)),
            status: v.get("status").and_then(Value::as_str).unwrap_or_default().to_string(),
        }
    }
}

/// A work item (`id`, `fields`, `_links.html.href` or `url`) as an item.
fn item_of(what: &str, v: &Value, org: &str, project: &str) -> Result<ForgeItem, ForgeError> {
    let id = v.get("id").and_then(Value::as_u64).unwrap_or_default();
    let Some(fields) = v.get("fields").filter(|f| f.is_object()) else {
        return Err(ForgeError::Malformed {
            forge: Forge::AzureDevOps,
            what: what.into(),
            message: "no fields".into(),
        });
    };
    let url =
        v.pointer("/_links/html/href").or_else(|| v.get("url")).and_then(Value::as_str).unwrap_or_default().to_string();
    if url.is_empty() {
        return Err(ForgeError::Malformed {
            forge: Forge::AzureDevOps,
            what: what.into(),
            message: "no address".into(),
        });
    }
    Ok(ForgeItem::from_ado_fields(fields, url, format!("ado:{org}/{project}#{id}")))
}

/// A transport error's text (reqwest's text names the URL, never a header).
fn transport_message(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
