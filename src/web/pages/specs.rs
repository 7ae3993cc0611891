//! The spec pages and their forms: the new-spec page and its create and import forms, a spec's
//! page (with the flag of a forge change after approval) and its action buttons. Decisions go
//! through the same services as the REST API; this file only reads forms and renders.

use askama::Template;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use serde::Deserialize;

use super::shared::{check_csrf, form_usd, layout, render, see_other, Page, Who};
use crate::model::plan::MachinePlan;
use crate::model::spec::{self, SpecAction, SpecStatus};
use crate::pmo::enrich::Forecast;
use crate::runtime::board::{self};
use crate::runtime::specs::SpecEdit;
use crate::store::{SpecEventRow, SpecRow};
use crate::web::error::AppError;
use crate::web::extract::PageForm;
use crate::web::layout::{back_to, Layout, PageError};
use crate::web::AppState;

#[derive(Template)]
#[template(path = "spec_new.html")]
struct NewSpecTemplate {
    layout: Layout,
    projects: Vec<String>,
}

pub(super) async fn new_spec_page(
    State(app): State<AppState>,
    who: Who,
    headers: HeaderMap,
) -> Result<Page, PageError> {
    let (layout, set) = layout(&app, &who, &headers, false).await?;
    let projects = app.specs.projects().await?.into_iter().map(|p| p.name).collect();
    render(&NewSpecTemplate { layout, projects }, set)
}

/// The new-spec form.
#[derive(Debug, Deserialize)]
pub(super) struct NewSpecForm {
    /// Missing: empty, which `check_csrf` refuses (403) like a wrong token.
    #[serde(default)]
    csrf: String,
    project: String,
    title: String,
    #[serde(default)]
    body: String,
    #[serde(default)]
    priority: Option<i64>,
}

pub(super) async fn create_spec(
    State(app): State<AppState>,
    who: Who,
    headers: HeaderMap,
    form: Result<PageForm<NewSpecForm>, AppError>,
) -> Result<Response, PageError> {
    let back = back_to("/specs/new");
    let PageForm(f) = form.map_err(back_to("/specs/new"))?;
    check_csrf(&headers, &f.csrf).map_err(back_to("/specs/new"))?;
    let input =
        crate::runtime::specs::SpecInput { project: f.project, title: f.title, body: f.body, priority: f.priority };
    let row = app.specs.create(input, "board", "", &who.actor()).await.map_err(|e| back(e.into()))?;
    Ok(see_other(&format!("/specs/{}", row.spec_id)))
}

#[derive(Template)]
#[template(path = "spec.html")]
struct SpecTemplate {
    layout: Layout,
    spec: SpecRow,
    /// The status shown (`board::shown_status`).
    status: String,
    stage: &'static str,
    plan: Option<MachinePlan>,
    forecast: Option<Forecast>,
    events: Vec<SpecEventRow>,
    can_enrich: bool,
    can_submit: bool,
    can_review: bool,
    can_fire: bool,
    can_cancel: bool,
    can_edit: bool,
    /// What the forge says of an imported spec.
    meta: crate::forge::ItemMeta,
    /// The newest forge change that was not applied (the spec was approved or fired): the
    /// lead decides what to do with it.
    flagged: Option<String>,
}

pub(super) async fn spec_page(
    State(app): State<AppState>,
    who: Who,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Page, PageError> {
    let id = crate::web::api::specs::spec_id(&id)?;
    let (layout, set) = layout(&app, &who, &headers, true).await?;
    let mut spec = app.specs.get(id).await?;
    let (exec_status, pr_opened) = match &spec.task_id {
        Some(t) => (app.execs.summary(t).await?.map(|s| s.status), app.execs.pull_request(t).await?.is_some()),
        None => (None, false),
    };
    let stage = board::stage_of_pull(&spec.status, exec_status.as_deref(), pr_opened).title();
    let shown = board::shown_status(&spec.status, exec_status.as_deref());
    let plan = spec.plan_json.take().and_then(|t| serde_json::from_str(&t).ok());
    let forecast = spec.forecast_json.take().and_then(|t| serde_json::from_str(&t).ok());
    let events = app.specs.events(id).await?;
    let flagged = flagged_change(&spec, &events);
    let status = SpecStatus::parse(&spec.status).unwrap_or(SpecStatus::Cancelled);
    let can = |a: SpecAction| spec::transition(status, a).is_ok();
    let t = SpecTemplate {
        layout,
        status: shown,
        stage,
        plan,
        forecast,
        events,
        can_enrich: can(SpecAction::Enrich),
        can_submit: can(SpecAction::Submit),
        can_review: can(SpecAction::Approve),
        can_fire: can(SpecAction::Fire),
        can_cancel: can(SpecAction::Cancel),
        can_edit: can(SpecAction::Edit),
        meta: serde_json::from_str(&spec.source_meta).unwrap_or_default(),
        flagged,
        spec,
    };
    render(&t, set)
}

/// Every spec form's fields (each action reads the ones it needs).
#[derive(Debug, Deserialize)]
pub(super) struct SpecForm {
    /// Missing: empty, which `check_csrf` refuses (403) like a wrong token.
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    decision: String,
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    body: Option<String>,
    #[serde(default)]
    priority: Option<String>,
    #[serde(default)]
    plan: String,
    #[serde(default)]
    budget_usd: String,
}

pub(super) async fn spec_action(
    State(app): State<AppState>,
    who: Who,
    headers: HeaderMap,
    Path((id, action)): Path<(String, String)>,
    form: Result<PageForm<SpecForm>, AppError>,
) -> Result<Response, PageError> {
    let id = crate::web::api::specs::spec_id(&id)?;
    let page = format!("/specs/{id}");
    let back = back_to(page.clone());
    let PageForm(f) = form.map_err(back_to(page.clone()))?;
    check_csrf(&headers, &f.csrf).map_err(back_to(page.clone()))?;
    let actor = who.actor();
    let actor = actor.as_str();
    let s = &app.specs;
    let result = match action.as_str() {
        "enrich" => s.enrich(id, actor).await,
        "submit" => s.submit(id, actor).await,
        "review" => match f.decision.as_str() {
            "approve" | "bounce" => {
                let raw = f.budget_usd.trim();
                let budget = if raw.is_empty() {
                    None
                } else {
                    Some(form_usd("budget_usd", raw).map_err(back_to(page.clone()))?)
                };
                s.review(id, f.decision == "approve", &f.reason, actor, budget).await
            }
            other => return Err(back(AppError::BadRequest(format!("decision: {other:?} is not approve or bounce")))),
        },
        "fire" => s.fire(id, actor).await,
        "cancel" => s.cancel(id, &f.reason, actor).await,
        "edit" => {
            let priority = match f.priority.as_deref().map(str::trim).filter(|p| !p.is_empty()) {
                Some(p) => Some(p.parse::<i64>().map_err(|_| {
                    back_to(page.clone())(AppError::BadRequest(format!("priority: {p:?} is not a number")))
                })?),
                None => None,
            };
            s.edit(id, SpecEdit { title: f.title, body: f.body, priority }, actor).await
        }
        "plan" => {
            let value: serde_json::Value = serde_json::from_str(&f.plan)
                .map_err(|e| back_to(page.clone())(AppError::BadRequest(format!("plan: not JSON: {e}"))))?;
            s.upload_plan(id, value, actor).await
        }
        other => return Err(back(AppError::NotFound(format!("no spec action {other:?}")))),
    };
    let row = result.map_err(|e| back_to(page.clone())(e.into()))?;
    // Fire goes on to the execution it started.
    match row.task_id {
        Some(task_id) if action == "fire" => Ok(see_other(&format!("/executions/{task_id}"))),
        _ => Ok(see_other(&page)),
    }
}

/// The reason of the newest `import_update_ignored` event of a spec still approved or
/// executing (a forge change after approval, left for the lead).
fn flagged_change(spec: &SpecRow, events: &[SpecEventRow]) -> Option<String> {
    if !matches!(spec.status.as_str(), "approved" | "executing") {
        return None;
    }
    events.iter().rev().find(|e| e.action == "import_update_ignored").map(|e| format!("{} ({})", e.reason, e.at))
}

/// The import form of the new-spec page.
#[derive(Debug, Deserialize)]
pub(super) struct ImportForm {
    /// Missing: empty, which `check_csrf` refuses (403) like a wrong token.
    #[serde(default)]
    csrf: String,
    project: String,
    reference: String,
    #[serde(default)]
    label: String,
    #[serde(default)]
    wiql: String,
}

/// `POST /specs/import`: one item → its spec's page; several → the board.
pub(super) async fn import_form(
    State(app): State<AppState>,
    who: Who,
    headers: HeaderMap,
    form: Result<PageForm<ImportForm>, AppError>,
) -> Result<Response, PageError> {
    let back = || back_to("/specs/new");
    let PageForm(f) = form.map_err(back())?;
    check_csrf(&headers, &f.csrf).map_err(back())?;
    let label = Some(f.label.as_str()).filter(|l| !l.trim().is_empty());
    let wiql = Some(f.wiql.as_str()).filter(|q| !q.trim().is_empty());
    let request =
        crate::runtime::forge::ImportRequest::parse(&f.reference, label, wiql).map_err(|e| back()(e.into()))?;
    let outcomes = crate::runtime::forge::import(&app.specs, &app.forges, &f.project, &request, &who.actor())
        .await
        .map_err(|e| back()(e.into()))?;
    Ok(match outcomes.as_slice() {
        [one] => see_other(&format!("/specs/{}", one.spec().spec_id)),
        _ => see_other("/"),
    })
}
