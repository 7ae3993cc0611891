//! The CI result of one commit, as the forges report it (issue 19.2): GitHub check runs
//! (`GET /repos/{o}/{r}/commits/{ref}/check-runs`) and the combined commit status
//! (`GET /repos/{o}/{r}/commits/{ref}/status`); Azure DevOps builds of the branch at that
//! commit (`GET {org}/{project}/_apis/build/builds?branchName=…`) and the commit's statuses
//! (`GET …/_apis/git/repositories/{repo}/commits/{sha}/statuses`), REST 7.1.
//!
//! The readers ([`github_check_runs`], [`github_statuses`], [`ado_builds`], [`ado_statuses`])
//! are pure: JSON in, [`CiCheck`]s out, one per check name (the newest run of a name wins).
//! Names and summaries are forge text: trimmed and cut here, never interpreted; whoever shows
//! them escapes them. This module never decides whether a gate passes.

use serde_json::Value;

use crate::model::state::{CiCheck, CiCheckState};
use crate::model::text::cut;

use super::ado::{AzureDevOps, API_VERSION};
use super::github::GitHub;
use super::ForgeError;

/// Characters of a check's name kept.
const MAX_NAME_CHARS: usize = 200;
/// Characters of a check's summary kept.
const MAX_SUMMARY_CHARS: usize = 500;

fn text(v: &Value, key: &str) -> String {
    v.get(key).and_then(Value::as_str).unwrap_or_default().trim().to_string()
}

/// One line of forge text: control characters dropped, trimmed, cut.
fn clean(s: &str, max: usize) -> String {
    let one: String = s.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    cut(one.split_whitespace().collect::<Vec<_>>().join(" ").trim(), max)
}

/// Adds `check` unless a newer one (`order` higher) of the same name is there.
fn keep_newest(out: &mut Vec<(i64, CiCheck)>, order: i64, check: CiCheck) {
    if check.name.is_empty() {
        return;
    }
    match out.iter_mut().find(|(_, c)| c.name == check.name) {
        Some(slot) if slot.0 < order => *slot = (order, check),
        Some(_) => {}
        None => out.push((order, check)),
    }
}

/// The check runs of a GitHub `check-runs` answer (`{"total_count", "check_runs": [...]}`):
/// `completed` with conclusion `success`, `neutral` or `skipped` passed, any other conclusion
/// failed, any other status pending. Summary: the output's title and summary.
pub fn github_check_runs(answer: &Value) -> Vec<CiCheck> {
    let mut out = Vec::new();
    for run in answer.get("check_runs").and_then(Value::as_array).into_iter().flatten() {
        let state = if text(run, "status") == "completed" {
            match text(run, "conclusion").as_str() {
                "success" | "neutral" | "skipped" => CiCheckState::Passed,
                _ => CiCheckState::Failed,
            }
        } else {
            CiCheckState::Pending
        };
        let output = run.get("output").cloned().unwrap_or(Value::Null);
        let mut summary = [text(&output, "title"), text(&output, "summary")]
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(": ");
        if summary.is_empty() && state == CiCheckState::Failed {
            summary = text(run, "conclusion");
        }
        let check = CiCheck {
            name: clean(&text(run, "name"), MAX_NAME_CHARS),
            state,
            summary: clean(&summary, MAX_SUMMARY_CHARS),
        };
        keep_newest(&mut out, run.get("id").and_then(Value::as_i64).unwrap_or(0), check);
    }
    out.into_iter().map(|(_, c)| c).collect()
}

/// The statuses of a GitHub combined status answer (`{"state", "statuses": [...]}`, the newest
/// per context): `success` passed, `pending` pending, `failure` and `error` failed.
pub fn github_statuses(answer: &Value) -> Vec<CiCheck> {
    let mut out = Vec::new();
    for s in answer.get("statuses").and_then(Value::as_array).into_iter().flatten() {
        let state = match text(s, "state").as_str() {
            "success" => CiCheckState::Passed,
            "pending" => CiCheckState::Pending,
            _ => CiCheckState::Failed,
        };
        let check = CiCheck {
            name: clean(&text(s, "context"), MAX_NAME_CHARS),
            state,
            summary: clean(&text(s, "description"), MAX_SUMMARY_CHARS),
        };
        keep_newest(&mut out, s.get("id").and_then(Value::as_i64).unwrap_or(0), check);
    }
    out.into_iter().map(|(_, c)| c).collect()
}

/// The builds of an Azure DevOps build list (`{"count", "value": [...]}`) whose
/// `sourceVersion` is `sha`, one per definition (the newest): `completed` with result
/// `succeeded` passed, any other result failed, any other status pending.
pub fn ado_builds(answer: &Value, sha: &str) -> Vec<CiCheck> {
    let mut out = Vec::new();
    for b in answer.get("value").and_then(Value::as_array).into_iter().flatten() {
        if !text(b, "sourceVersion").eq_ignore_ascii_case(sha) {
            continue;
        }
        let result = text(b, "result");
        let state = if text(b, "status") == "completed" {
            if result == "succeeded" {
                CiCheckState::Passed
            } else {
                CiCheckState::Failed
            }
        } else {
            CiCheckState::Pending
        };
        let definition = b.get("definition").map(|d| text(d, "name")).unwrap_or_default();
        let name = if definition.is_empty() { format!("build {}", text(b, "buildNumber")) } else { definition };
        let number = text(b, "buildNumber");
        let summary = match state {
            CiCheckState::Pending => format!("build {number} {}", text(b, "status")),
            _ => format!("build {number} {result}"),
        };
        let check = CiCheck { name: clean(&name, MAX_NAME_CHARS), state, summary: clean(&summary, MAX_SUMMARY_CHARS) };
        keep_newest(&mut out, b.get("id").and_then(Value::as_i64).unwrap_or(0), check);
    }
    out.into_iter().map(|(_, c)| c).collect()
}

/// The statuses of an Azure DevOps commit status list (`{"count", "value": [...]}`): named
/// `genre/name` of their context; `succeeded` passed, `pending` and `notSet` pending,
/// `notApplicable` left out, `failed` and `error` failed.
pub fn ado_statuses(answer: &Value) -> Vec<CiCheck> {
    let mut out = Vec::new();
    for s in answer.get("value").and_then(Value::as_array).into_iter().flatten() {
        let state = match text(s, "state").as_str() {
            "succeeded" => CiCheckState::Passed,
            "pending" | "notSet" | "" => CiCheckState::Pending,
            "notApplicable" => continue,
            _ => CiCheckState::Failed,
        };
        let context = s.get("context").cloned().unwrap_or(Value::Null);
        let (genre, name) = (text(&context, "genre"), text(&context, "name"));
        let name = if genre.is_empty() { name } else { format!("{genre}/{name}") };
        let check = CiCheck {
            name: clean(&name, MAX_NAME_CHARS),
            state,
            summary: clean(&text(s, "description"), MAX_SUMMARY_CHARS),
        };
        keep_newest(&mut out, s.get("id").and_then(Value::as_i64).unwrap_or(0), check);
    }
    out.into_iter().map(|(_, c)| c).collect()
}

/// `more`, then each check of `extra` whose name `more` lacks.
fn merge(mut more: Vec<CiCheck>, extra: Vec<CiCheck>) -> Vec<CiCheck> {
    for c in extra {
        if !more.iter().any(|m| m.name == c.name) {
            more.push(c);
        }
    }
    more
}

impl GitHub {
    /// Every check of commit `sha` of `owner/repo`: its check runs (first 100) and its
    /// combined status's statuses, one per name.
    ///
    /// Errors: any [`ForgeError`] of the calls.
    pub async fn commit_checks(&self, owner: &str, repo: &str, sha: &str) -> Result<Vec<CiCheck>, ForgeError> {
        let runs = self
            .get_json(
                &format!("check runs of {owner}/{repo}@{sha}"),
                &format!("/repos/{owner}/{repo}/commits/{sha}/check-runs?per_page=100"),
            )
            .await?;
        let status = self
            .get_json(
                &format!("the combined status of {owner}/{repo}@{sha}"),
                &format!("/repos/{owner}/{repo}/commits/{sha}/status?per_page=100"),
            )
            .await?;
        Ok(merge(github_check_runs(&runs), github_statuses(&status)))
    }
}

/// What a failed check says beyond its summary: the output's text and its annotations
/// (`path:line: message`), or a log tail — forge text, cut to [`MAX_DETAIL_CHARS`], never
/// interpreted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckDetail {
    /// The check's name.
    pub name: String,
    /// The details (may be empty).
    pub text: String,
}

/// Characters of one failed check's details kept.
pub const MAX_DETAIL_CHARS: usize = 4000;

/// Characters of forge text kept per line of details.
const MAX_LINE_CHARS: usize = 400;

/// The `path:line: [level] message` lines of a GitHub annotations answer (an array).
pub fn github_annotations(answer: &Value) -> Vec<String> {
    answer
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| {
            let line = a.get("start_line").and_then(Value::as_i64).map(|l| format!(":{l}")).unwrap_or_default();
            let level = text(a, "annotation_level");
            let message = [text(a, "title"), text(a, "message")]
                .into_iter()
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join(": ");
            clean(&format!("{}{line}: [{level}] {message}", text(a, "path")), MAX_LINE_CHARS)
        })
        .collect()
}

impl GitHub {
    /// The details of the failed check runs of commit `sha` of `owner/repo`: each run's output
    /// text and its first 50 annotations.
    ///
    /// Errors: any [`ForgeError`] of the calls.
    pub async fn failed_check_details(
        &self,
        owner: &str,
        repo: &str,
        sha: &str,
    ) -> Result<Vec<CheckDetail>, ForgeError> {
        let runs = self
            .get_json(
                &format!("check runs of {owner}/{repo}@{sha}"),
                &format!("/repos/{owner}/{repo}/commits/{sha}/check-runs?per_page=100"),
            )
            .await?;
        let failed: Vec<CiCheck> =
            github_check_runs(&runs).into_iter().filter(|c| c.state == CiCheckState::Failed).collect();
        let mut out = Vec::new();
        for run in runs.get("check_runs").and_then(Value::as_array).into_iter().flatten() {
            let name = clean(&text(run, "name"), MAX_NAME_CHARS);
            if !failed.iter().any(|c| c.name == name) || out.iter().any(|d: &CheckDetail| d.name == name) {
                continue;
            }
            let mut lines = Vec::new();
            let body = run.get("output").map(|o| text(o, "text")).unwrap_or_default();
            if !body.is_empty() {
                lines.push(cut(&body, MAX_DETAIL_CHARS / 2));
            }
            let count = run.pointer("/output/annotations_count").and_then(Value::as_i64).unwrap_or(0);
            if let (Some(id), true) = (run.get("id").and_then(Value::as_i64), count > 0) {
                let annotations = self
                    .get_json(
                        &format!("annotations of check run {id} of {owner}/{repo}"),
                        &format!("/repos/{owner}/{repo}/check-runs/{id}/annotations?per_page=50"),
                    )
                    .await?;
                lines.extend(github_annotations(&annotations));
            }
            out.push(CheckDetail { name, text: cut(&lines.join("\n"), MAX_DETAIL_CHARS) });
        }
        Ok(out)
    }
}

impl AzureDevOps {
    /// The newest 100 builds of branch `branch` in `org`/`project`, newest first (REST 7.1
    /// `GET …/_apis/build/builds?branchName=refs/heads/…`), as the forge sent them.
    ///
    /// Errors: any [`ForgeError`] of the call.
    async fn branch_builds(&self, org: &str, project: &str, branch: &str) -> Result<Value, ForgeError> {
        let query = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("branchName", &format!("refs/heads/{branch}"))
            .append_pair("queryOrder", "queueTimeDescending")
            .append_pair("$top", "100")
            .append_pair("api-version", API_VERSION)
            .finish();
        self.get_json(
            &format!("builds of {org}/{project} on {branch}"),
            &format!("{}?{query}", self.api_url(org, project, "build/builds")),
        )
        .await
    }

    /// Every check of commit `sha` on branch `branch` of `repository` in `org`/`project`: the
    /// builds of the branch at that commit and the commit's statuses, one per name.
    ///
    /// Errors: any [`ForgeError`] of the calls.
    pub async fn commit_checks(
        &self,
        org: &str,
        project: &str,
        repository: &str,
        branch: &str,
        sha: &str,
    ) -> Result<Vec<CiCheck>, ForgeError> {
        let builds = self.branch_builds(org, project, branch).await?;
        let path = format!("git/repositories/{repository}/commits/{sha}/statuses");
        let statuses = self
            .get_json(
                &format!("statuses of {org}/{project}/{repository}@{sha}"),
                &format!("{}?latestOnly=true&api-version={API_VERSION}", self.api_url(org, project, &path)),
            )
            .await?;
        Ok(merge(ado_builds(&builds, sha), ado_statuses(&statuses)))
    }
}

/// Lines of a failed Azure DevOps task's log kept in its details: the last ones.
pub const LOG_TAIL_LINES: usize = 50;

/// The failed tasks of an Azure DevOps build timeline (`{"records": [...]}`): each record of
/// type `Task` whose result is `failed` and that has a log, as (name, log id), in order.
pub fn ado_failed_tasks(timeline: &Value) -> Vec<(String, u64)> {
    timeline
        .get("records")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|r| text(r, "type") == "Task" && text(r, "result") == "failed")
        .filter_map(|r| {
            let log = r.pointer("/log/id").and_then(Value::as_u64)?;
            Some((clean(&text(r, "name"), MAX_NAME_CHARS), log))
        })
        .collect()
}

/// The last [`LOG_TAIL_LINES`] lines of a build log (plain text, or the JSON shape
/// `{"count", "value": [lines]}`): each line's leading timestamp dropped, control
/// characters dropped, cut to 400 characters; empty lines left out.
pub fn log_tail(body: &str) -> Vec<String> {
    let lines: Vec<String> = match serde_json::from_str::<Value>(body) {
        Ok(v) if v.get("value").is_some_and(Value::is_array) => {
            v["value"].as_array().into_iter().flatten().filter_map(Value::as_str).map(str::to_string).collect()
        }
        _ => body.lines().map(str::to_string).collect(),
    };
    let kept: Vec<String> = lines
        .iter()
        .map(|l| {
            // `2026-11-30T10:40:12.1234567Z message`: the timestamp says nothing to a fixer.
            let l = l.trim_start_matches('\u{feff}');
            match l.split_once(' ') {
                Some((stamp, rest)) if stamp.len() >= 20 && stamp.ends_with('Z') && stamp.as_bytes()[4] == b'-' => rest,
                _ => l,
            }
        })
        .map(|l| {
            let one: String = l.chars().map(|c| if c.is_control() && c != '\t' { ' ' } else { c }).collect();
            cut(one.trim_end(), MAX_LINE_CHARS)
        })
        .filter(|l| !l.trim().is_empty())
        .collect();
    kept[kept.len().saturating_sub(LOG_TAIL_LINES)..].to_vec()
}

impl AzureDevOps {
    /// The details of the failed builds of commit `sha` on branch `branch` (the newest build
    /// per definition): for each, the tail of every failed task's log (Timeline → the task's
    /// log id → `GET …/_apis/build/builds/{id}/logs/{logId}`), named by the task.
    ///
    /// Errors: any [`ForgeError`] of the calls.
    pub async fn failed_build_details(
        &self,
        org: &str,
        project: &str,
        branch: &str,
        sha: &str,
    ) -> Result<Vec<CheckDetail>, ForgeError> {
        let builds = self.branch_builds(org, project, branch).await?;
        let failed: Vec<String> =
            ado_builds(&builds, sha).into_iter().filter(|c| c.state == CiCheckState::Failed).map(|c| c.name).collect();
        // The newest build of each failed definition.
        let mut newest: Vec<(String, i64)> = Vec::new();
        for b in builds.get("value").and_then(Value::as_array).into_iter().flatten() {
            if !text(b, "sourceVersion").eq_ignore_ascii_case(sha) || text(b, "status") != "completed" {
                continue;
            }
            let definition = b.get("definition").map(|d| text(d, "name")).unwrap_or_default();
            let name = if definition.is_empty() { format!("build {}", text(b, "buildNumber")) } else { definition };
            let name = clean(&name, MAX_NAME_CHARS);
            let Some(id) = b.get("id").and_then(Value::as_i64) else { continue };
            if !failed.contains(&name) {
                continue;
            }
            match newest.iter_mut().find(|(n, _)| *n == name) {
                Some(slot) if slot.1 < id => slot.1 = id,
                Some(_) => {}
                None => newest.push((name, id)),
            }
        }
        let mut out = Vec::new();
        for (name, id) in newest {
            let timeline = self
                .get_json(
                    &format!("the timeline of build {id} of {org}/{project}"),
                    &format!(
                        "{}?api-version={API_VERSION}",
                        self.api_url(org, project, &format!("build/builds/{id}/timeline"))
                    ),
                )
                .await?;
            let mut parts = Vec::new();
            for (task, log) in ado_failed_tasks(&timeline).into_iter().take(3) {
                let body = self
                    .get_text(
                        &format!("log {log} of build {id} of {org}/{project}"),
                        &format!(
                            "{}?api-version={API_VERSION}",
                            self.api_url(org, project, &format!("build/builds/{id}/logs/{log}"))
                        ),
                    )
                    .await?;
                parts.push(format!("task `{task}` failed; the end of its log:\n{}", log_tail(&body).join("\n")));
            }
            let joined = parts.join("\n\n");
            // Keep the end: the error is at the bottom of a log.
            let count = joined.chars().count();
            let text =
                if count > MAX_DETAIL_CHARS { joined.chars().skip(count - MAX_DETAIL_CHARS).collect() } else { joined };
            out.push(CheckDetail { name, text });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod log_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_log_tail_keeps_the_last_lines_without_their_timestamps() {
        let body: String =
            (0..80).map(|i| format!("2026-11-30T10:40:{:02}.1234567Z line {i}\r\n", i % 60)).collect::<String>();
        let tail = log_tail(&body);
        assert_eq!(tail.len(), LOG_TAIL_LINES);
        assert_eq!((tail[0].as_str(), tail[49].as_str()), ("line 30", "line 79"));
        let json = json!({"count": 2, "value": ["2026-11-30T10:40:00.0000000Z a", "b\u{1b}[31m"]}).to_string();
        assert_eq!(log_tail(&json), ["a", "b [31m"]);
    }

    #[test]
    fn failed_tasks_come_from_the_timeline_records() {
        let t = json!({"records": [
            {"type": "Stage", "name": "Build", "result": "failed", "log": {"id": 1}},
            {"type": "Task", "name": "cargo test", "result": "failed", "log": {"id": 7}},
            {"type": "Task", "name": "checkout", "result": "succeeded", "log": {"id": 3}},
            {"type": "Task", "name": "no log", "result": "failed"},
        ]});
        assert_eq!(ado_failed_tasks(&t), [("cargo test".to_string(), 7)]);
    }
}
