//! The changelist page of an execution (its commits and files) and the merge form posted from
//! it. The merge itself is the operator service's; this file only renders and redirects.

use askama::Template;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use serde::Deserialize;

use super::shared::{check_csrf, layout, render, see_other, Page, Who};
use crate::runtime::changelist::{self, Changelist};
use crate::web::error::AppError;
use crate::web::extract::PageForm;
use crate::web::layout::{back_to, Layout, PageError};
use crate::web::AppState;

/// A commit of the changelist page.
#[derive(Debug)]
struct CommitView {
    short: String,
    step_id: String,
    agent_name: String,
    summary: String,
    files: Vec<crate::runtime::changelist::FileStat>,
}

#[derive(Template)]
#[template(path = "changelist.html")]
struct ChangelistTemplate {
    layout: Layout,
    task_id: String,
    base_short: String,
    tip_short: String,
    commits: Vec<CommitView>,
    cl: Changelist,
    /// The project's forge link (empty: none, merge locally).
    forge_repo: String,
    /// The execution is complete, its project has a forge link and no pull request is linked
    /// yet: the Merge button.
    can_merge: bool,
    /// The pull request, once merged.
    merge: Option<crate::store::MergeRow>,
    /// For a project without a forge link: the git commands that merge the branch locally.
    local_commands: Vec<String>,
}

fn short(sha: &str) -> String {
    sha.get(..10).unwrap_or(sha).to_string()
}

pub(super) async fn changelist_page(
    State(app): State<AppState>,
    who: Who,
    headers: HeaderMap,
    Path(task_id): Path<String>,
) -> Result<Page, PageError> {
    let (layout, set) = layout(&app, &who, &headers, false).await?;
    let state = crate::web::api::executions::load(&app, &task_id).await?;
    let mut cl = changelist::changelist(&app.execs, &state).await?;
    let commits = std::mem::take(&mut cl.commits)
        .into_iter()
        .map(|c| CommitView {
            short: short(&c.sha),
            step_id: c.step_id,
            agent_name: c.agent_name,
            summary: c.summary,
            files: c.files,
        })
        .collect();
    let project = app.execs.project_of(&task_id).await?;
    let forge_repo = project.as_ref().map(|p| p.forge_repo.trim().to_string()).unwrap_or_default();
    let complete = state.status == crate::model::state::ExecutionStatus::Complete;
    let local_commands = match &project {
        Some(p) if forge_repo.is_empty() && complete => {
            let base = crate::runtime::merge::base_branch(p).await.unwrap_or_else(|_| "<your branch>".into());
            crate::runtime::merge::local_merge_commands(&cl.repo.display().to_string(), &base, &cl.branch)
        }
        _ => Vec::new(),
    };
    let merge = app.execs.merge_row(&task_id).await?;
    let t = ChangelistTemplate {
        layout,
        base_short: short(&cl.base_sha),
        tip_short: short(&cl.tip_sha),
        commits,
        can_merge: crate::runtime::merge::mergeable(&state, project.as_ref())
            && merge.as_ref().is_none_or(|m| m.pr_url.is_empty()),
        merge,
        local_commands,
        forge_repo,
        cl,
        task_id,
    };
    render(&t, set)
}

/// A form with only its CSRF token.
#[derive(Debug, Deserialize)]
pub(super) struct CsrfForm {
    /// Missing: empty, which `check_csrf` refuses (403) like a wrong token.
    #[serde(default)]
    csrf: String,
}

/// `POST /executions/{task_id}/merge`: push and open (or find) the pull request, then back
/// to the changelist, which links it.
pub(super) async fn merge_form(
    State(app): State<AppState>,
    who: Who,
    headers: HeaderMap,
    Path(task_id): Path<String>,
    form: Result<PageForm<CsrfForm>, AppError>,
) -> Result<Response, PageError> {
    let page = format!("/executions/{task_id}/changelist");
    let PageForm(f) = form.map_err(back_to(page.clone()))?;
    check_csrf(&headers, &f.csrf).map_err(back_to(page.clone()))?;
    crate::runtime::merge::merge(&app.execs, &app.forges, &task_id, &who.actor())
        .await
        .map_err(|e| back_to(page.clone())(e.into()))?;
    Ok(see_other(&page))
}
