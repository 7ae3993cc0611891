//! What reviewers wrote on a pull request, with where they wrote it (issue 19.4): a GitHub
//! review's line comments (`GET /repos/{o}/{r}/pulls/{n}/reviews/{id}/comments`), the review
//! itself (`GET /repos/{o}/{r}/pulls/{n}/reviews/{id}`: its state, body and author) and the file
//! and line of an Azure DevOps pull request thread (`GET …/pullRequests/{id}/threads/{thread}`,
//! REST 7.1: `threadContext.filePath`, `rightFileStart.line`).
//!
//! The readers ([`github_review_comments`], [`github_review`], [`ado_thread_context`]) are pure: JSON in, values
//! out. Bodies and diff hunks are forge text: trimmed and cut here, never interpreted; whoever
//! puts them in a prompt quotes them. This module never decides whether a comment starts a
//! round.

use serde_json::Value;

use crate::model::text::cut;

use super::ado::{AzureDevOps, API_VERSION};
use super::github::GitHub;
use super::ForgeError;

/// Characters of a comment's body kept.
pub const MAX_BODY_CHARS: usize = 4_000;
/// Characters of a file path kept.
const MAX_PATH_CHARS: usize = 300;
/// Lines of a diff hunk kept: the last ones, which end at the commented line.
pub const HUNK_LINES: usize = 12;

/// One line comment of a review.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineComment {
    /// Its id (what a reply answers).
    pub id: u64,
    /// The file it is on.
    pub path: String,
    /// The line it is on (`line`, else `original_line`).
    pub line: Option<i64>,
    /// The end of the diff hunk around it ([`trim_hunk`]).
    pub diff_hunk: String,
    /// What the reviewer wrote.
    pub body: String,
    /// Who wrote it (their login).
    pub author: String,
}

/// The last [`HUNK_LINES`] lines of a diff hunk (GitHub's `diff_hunk` ends at the commented
/// line), each cut to 300 characters; the `@@` header is kept when lines were dropped.
pub fn trim_hunk(hunk: &str) -> String {
    let lines: Vec<&str> = hunk.trim_end().lines().collect();
    if lines.len() <= HUNK_LINES {
        return lines.iter().map(|l| cut(l, 300)).collect::<Vec<_>>().join("\n");
    }
    let mut out: Vec<String> = Vec::new();
    if let Some(head) = lines.first().filter(|l| l.starts_with("@@")) {
        out.push(cut(head, 300));
        out.push("…".into());
    }
    out.extend(lines[lines.len() - HUNK_LINES..].iter().map(|l| cut(l, 300)));
    out.join("\n")
}

fn text<'v>(v: &'v Value, pointer: &str) -> &'v str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or_default()
}

/// The comments of a GitHub "list comments for a pull request review" answer (an array of
/// review comments), in its order; comments without an id or a body are left out.
pub fn github_review_comments(answer: &Value) -> Vec<LineComment> {
    answer
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| {
            let id = c.get("id").and_then(Value::as_u64)?;
            let body = text(c, "/body").trim();
            if body.is_empty() {
                return None;
            }
            Some(LineComment {
                id,
                path: cut(text(c, "/path").trim(), MAX_PATH_CHARS),
                line: c.get("line").and_then(Value::as_i64).or_else(|| c.get("original_line").and_then(Value::as_i64)),
                diff_hunk: trim_hunk(text(c, "/diff_hunk")),
                body: cut(body, MAX_BODY_CHARS),
                author: text(c, "/user/login").to_string(),
            })
        })
        .collect()
}

/// A GitHub review as its own endpoint answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Review {
    /// Its id.
    pub id: u64,
    /// `CHANGES_REQUESTED`, `COMMENTED`, `APPROVED`, … (lower-cased).
    pub state: String,
    /// What the reviewer wrote as the review's body (trimmed, cut; may be empty).
    pub body: String,
    /// Who wrote it (their login).
    pub author: String,
}

/// A GitHub "get a review for a pull request" answer; `None` without an id.
pub fn github_review(answer: &Value) -> Option<Review> {
    Some(Review {
        id: answer.get("id").and_then(Value::as_u64)?,
        state: text(answer, "/state").to_ascii_lowercase(),
        body: cut(text(answer, "/body").trim(), MAX_BODY_CHARS),
        author: text(answer, "/user/login").to_string(),
    })
}

/// The file (without its leading `/`) and line of an Azure DevOps thread (`threadContext`:
/// `filePath`, `rightFileStart.line`, else `leftFileStart.line`); empty and `None` for a
/// thread on the pull request as a whole.
pub fn ado_thread_context(thread: &Value) -> (String, Option<i64>) {
    let context = thread.get("threadContext").unwrap_or(&Value::Null);
    let path = text(context, "/filePath").trim().trim_start_matches('/');
    let line = context
        .pointer("/rightFileStart/line")
        .or_else(|| context.pointer("/leftFileStart/line"))
        .and_then(Value::as_i64);
    (cut(path, MAX_PATH_CHARS), if path.is_empty() { None } else { line })
}

impl GitHub {
    /// The line comments of review `review_id` on pull request `number` of `owner/repo`
    /// (first 100).
    ///
    /// Errors: any [`ForgeError`] of the call.
    pub async fn review_comments(
        &self,
        owner: &str,
        repo: &str,
        number: u64,
        review_id: u64,
    ) -> Result<Vec<LineComment>, ForgeError> {
        let answer = self
            .get_json(
                &format!("the comments of review {review_id} of {owner}/{repo}#{number}"),
                &format!("/repos/{owner}/{repo}/pulls/{number}/reviews/{review_id}/comments?per_page=100"),
            )
            .await?;
        Ok(github_review_comments(&answer))
    }

    /// Review `review_id` of pull request `number` of `owner/repo` (its state, body, author).
    ///
    /// Errors: any [`ForgeError`] of the call; [`ForgeError::Malformed`] for an answer without
    /// an id.
    pub async fn review(&self, owner: &str, repo: &str, number: u64, review_id: u64) -> Result<Review, ForgeError> {
        let what = format!("review {review_id} of {owner}/{repo}#{number}");
        let answer = self.get_json(&what, &format!("/repos/{owner}/{repo}/pulls/{number}/reviews/{review_id}")).await?;
        github_review(&answer).ok_or_else(|| ForgeError::Malformed {
            forge: super::Forge::GitHub,
            what,
            message: "the review has no id".into(),
        })
    }
}

impl AzureDevOps {
    /// The file and line of thread `thread_id` of pull request `pr_id` in `repository`
    /// ([`ado_thread_context`]).
    ///
    /// Errors: any [`ForgeError`] of the call.
    pub async fn thread_context(
        &self,
        org: &str,
        project: &str,
        repository: &str,
        pr_id: u64,
        thread_id: u64,
    ) -> Result<(String, Option<i64>), ForgeError> {
        let path = format!("git/repositories/{repository}/pullRequests/{pr_id}/threads/{thread_id}");
        let thread = self
            .get_json(
                &format!("thread {thread_id} of pull request {pr_id} in {org}/{project}/{repository}"),
                &format!("{}?api-version={API_VERSION}", self.api_url(org, project, &path)),
            )
            .await?;
        Ok(ado_thread_context(&thread))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn review_comments_keep_path_line_and_the_end_of_the_hunk() {
        let hunk = (0..20).map(|i| format!("+line {i}")).collect::<Vec<_>>().join("\n");
        let hunk = format!("@@ -1,3 +1,20 @@\n{hunk}");
        let answer = json!([
            {"id": 10, "path": "src/lib.rs", "line": 7, "diff_hunk": hunk, "body": " Rename this. ",
             "user": {"login": "tessa-lumen"}},
            {"id": 11, "path": "a.rs", "line": null, "original_line": 3, "diff_hunk": "@@ -1 +1 @@\n+x", "body": "x",
             "user": {"login": "t"}},
            {"id": 12, "path": "a.rs", "body": "  "},
        ]);
        let got = github_review_comments(&answer);
        assert_eq!(got.len(), 2);
        assert_eq!(
            (got[0].id, got[0].path.as_str(), got[0].line, got[0].body.as_str()),
            (10, "src/lib.rs", Some(7), "Rename this.")
        );
        assert!(got[0].diff_hunk.starts_with("@@ -1,3 +1,20 @@\n…\n+line 8") && got[0].diff_hunk.ends_with("+line 19"));
        assert_eq!(got[1].line, Some(3));
    }

    #[test]
    fn a_review_reads_its_state_body_and_author() {
        let answer = json!({"id": 7, "state": "CHANGES_REQUESTED", "body": " Drop `--locked`. ",
                            "user": {"login": "tessa-lumen"}});
        let review = github_review(&answer).unwrap();
        assert_eq!(
            (review.id, review.state.as_str(), review.body.as_str(), review.author.as_str()),
            (7, "changes_requested", "Drop `--locked`.", "tessa-lumen")
        );
        assert_eq!(github_review(&json!({"state": "COMMENTED"})), None);
    }

    #[test]
    fn a_thread_context_gives_the_file_and_the_right_side_line() {
        let t = json!({"threadContext": {"filePath": "/README.md", "rightFileStart": {"line": 4, "offset": 1}}});
        assert_eq!(ado_thread_context(&t), ("README.md".to_string(), Some(4)));
        assert_eq!(ado_thread_context(&json!({"threadContext": null})), (String::new(), None));
    }
}
