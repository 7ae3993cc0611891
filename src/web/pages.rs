//! Server-rendered pages (askama templates in `templates/`): the board, the archive, specs,
//! executions, the approvals queue and the changelist; and the plain HTML forms they post.
//!
//! Pages work without JavaScript: every action is a form that posts and is answered with a
//! 303 redirect to the page it came from (or an error page with the API's status). Every form
//! carries a CSRF token that must equal the `baton_csrf` cookie (double-submit: a cross-site
//! page can post a form but cannot read or set the cookie, which is also `SameSite=Strict`).
//! Every value is escaped by askama. Handlers call the same services as the REST API.

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE, LOCATION, SET_COOKIE};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use serde::Deserialize;

use crate::engine;
use crate::model::action::{Action, ApprovalAction, FeedbackAction, InteractAction};
use crate::model::event::EventKind;
use crate::model::plan::MachinePlan;
use crate::model::spec::{self, SpecAction, SpecStatus};
use crate::model::state::{ApprovalDecision, ExecutionState, StepStatus};
use crate::pmo::enrich::Forecast;
use crate::runtime::auth::{LinkClaims, Role};
use crate::runtime::board::{self, Board, BoardQuery};
use crate::runtime::changelist::{self, Changelist};
use crate::runtime::ops::{keyed, Door, Operator, Ops};
use crate::runtime::review::{self, PhaseReview};
use crate::runtime::runs;
use crate::runtime::specs::SpecEdit;
use crate::store::{SpecEventRow, SpecRow};
use crate::web::auth::{Identity, SESSION_COOKIE, SESSION_SECS};
use crate::web::error::AppError;
use crate::web::layout::{back_to, Layout, PageError};
use crate::web::plots;
use crate::web::AppState;

/// The CSRF cookie's name.
pub const CSRF_COOKIE: &str = "baton_csrf";

const CSS: &str = include_str!("../../static/baton.css");
const LIVE_JS: &str = include_str!("../../static/live.js");

/// The page routes.
pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/", get(board_page))
        .route("/archive", get(archive_page))
        .route("/approvals", get(approvals_page))
        .route("/portfolio", get(portfolio_page))
        .route("/specs/new", get(new_spec_page))
        .route("/specs", post(create_spec))
        .route("/specs/{id}", get(spec_page))
        .route("/specs/{id}/{action}", post(spec_action))
        .route("/executions/{task_id}", get(execution_page))
        .route("/executions/{task_id}/changelist", get(changelist_page))
        .route("/executions/{task_id}/approve", post(approve_form))
        .route("/executions/{task_id}/feedback", post(feedback_form))
        .route("/executions/{task_id}/interact", post(interact_form))
        .route("/executions/{task_id}/approval-link", post(make_approval_link))
        .route("/executions/{task_id}/merge", post(merge_form))
        .route("/specs/import", post(import_form))
        .route("/executions/{task_id}/{action}", post(execution_action))
        .route("/login", get(login_page).post(login))
        .route("/logout", post(logout))
        .route("/approve/{token}", get(link_page).post(link_decide))
        .route("/static/baton.css", get(|| async { asset("text/css; charset=utf-8", CSS) }))
        .route("/static/live.js", get(|| async { asset("text/javascript; charset=utf-8", LIVE_JS) }))
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (CACHE_CONTROL, HeaderValue::from_static("max-age=300")),
        ],
        body,
    )
        .into_response()
}

/// The `baton_csrf` cookie's value, if the request has a well-formed one.
fn cookie_token(headers: &HeaderMap) -> Option<String> {
    crate::web::auth::cookie(headers, CSRF_COOKIE).filter(|v| v.len() == 32 && v.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// 16 random bytes from the OS, hex.
fn new_token() -> String {
    use std::io::Read as _;
    let mut bytes = [0u8; 16];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        let _ = f.read_exact(&mut bytes);
    }
    hex::encode(bytes)
}

/// A rendered page, setting the CSRF cookie when the request had none.
struct Page {
    status: StatusCode,
    html: String,
    set_cookie: Option<String>,
}

impl IntoResponse for Page {
    fn into_response(self) -> Response {
        let mut response = (self.status, Html(self.html)).into_response();
        if let Some(token) = self.set_cookie {
            let cookie = format!("{CSRF_COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict");
            if let Ok(v) = HeaderValue::from_str(&cookie) {
                response.headers_mut().append(SET_COOKIE, v);
            }
        }
        response
    }
}

/// The caller as `auth::authorize` resolved it (`None` on a public page without a sign-in).
#[derive(Debug, Clone)]
pub struct Who(pub Option<Identity>);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Who {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Who(parts.extensions.get::<Identity>().cloned()))
    }
}

impl Who {
    /// The actor recorded for this caller's forms: the user, or `board` in open mode.
    fn actor(&self) -> String {
        match &self.0 {
            Some(i) if !i.open => i.name.clone(),
            _ => "board".into(),
        }
    }

    /// This caller as the operator of a board form (no identity: the least right).
    fn operator(&self) -> Operator {
        let role = self.0.as_ref().map_or(Role::Viewer, |i| i.role);
        Operator::new(self.actor(), role, Door::Form)
    }
}

async fn layout(
    app: &AppState,
    who: &Who,
    headers: &HeaderMap,
    live: bool,
) -> Result<(Layout, Option<String>), PageError> {
    let (csrf, set) = match cookie_token(headers) {
        Some(t) => (t, None),
        None => {
            let t = new_token();
            (t.clone(), Some(t))
        }
    };
    let decisions_waiting = app.execs.count_waiting().await?;
    let open_mode = who.0.as_ref().is_none_or(|i| i.open) && !app.auth_enabled().await?;
    let user = who.0.as_ref().filter(|i| !i.open).map(|i| (i.name.clone(), i.role.as_str()));
    let can_decide = who.0.as_ref().is_some_and(|i| i.role >= Role::Reviewer);
    let layout = Layout {
        csrf,
        open_mode,
        user,
        decisions_waiting: if can_decide { decisions_waiting } else { 0 },
        live: if live { "on" } else { "off" },
        submission: format!("form-{}", new_token()),
    };
    Ok((layout, set))
}

fn render(t: &impl Template, set_cookie: Option<String>) -> Result<Page, PageError> {
    let html = t.render().map_err(|e| AppError::Internal(anyhow::anyhow!("rendering a page: {e}")))?;
    Ok(Page { status: StatusCode::OK, html, set_cookie })
}

/// Refuses a form whose `csrf` field is not the request's `baton_csrf` cookie (403).
fn check_csrf(headers: &HeaderMap, token: &str) -> Result<(), AppError> {
    match cookie_token(headers) {
        Some(cookie) if !token.is_empty() && cookie.as_bytes() == token.as_bytes() => Ok(()),
        _ => Err(AppError::Forbidden(
            "the form's CSRF token does not match this browser's session: reload the page and submit again".into(),
        )),
    }
}

fn see_other(location: &str) -> Response {
    let mut r = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = HeaderValue::from_str(location) {
        r.headers_mut().insert(LOCATION, v);
    }
    r
}

#[derive(Template)]
#[template(path = "board.html")]
struct BoardTemplate {
    layout: Layout,
    board: Board,
}

async fn board_page(
    State(app): State<AppState>,
    who: Who,
    headers: HeaderMap,
    query: Result<Query<BoardQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Page, PageError> {
    let Query(q) = query?;
    let q = q.checked().map_err(AppError::BadRequest)?;
    let (layout, set) = layout(&app, &who, &headers, true).await?;
    let board = board::load(&app.execs, &app.board_cache, &q).await?;
    render(&BoardTemplate { layout, board }, set)
}

async fn archive_page(
    State(app): State<AppState>,
    who: Who,
    headers: HeaderMap,
    query: Result<Query<BoardQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Page, PageError> {
    let Query(q) = query?;
    let mut q = q.checked().map_err(AppError::BadRequest)?;
    q.archived = true;
    let (layout, set) = layout(&app, &who, &headers, false).await?;
    let board = board::load(&app.execs, &app.board_cache, &q).await?;
    render(&BoardTemplate { layout, board }, set)
}

/// The metrics page: the portfolio's figures, each as a server-drawn SVG plot and a table.
#[derive(Template)]
#[template(path = "metrics.html")]
struct MetricsTemplate {
    layout: Layout,
    p: crate::runtime::portfolio::Portfolio,
    /// The plots (SVG documents from `web::plots`, whose text plotters escapes).
    flow_svg: String,
    cycle_svg: String,
    forecast_svg: String,
    spend_svg: String,
    gates_svg: String,
}

impl MetricsTemplate {
    /// Whether the project filter names `name`.
    fn selected(&self, name: &str) -> bool {
        self.p.project.as_deref() == Some(name)
    }

    /// The page's filter as a query string (for the JSON link).
    fn query(&self) -> String {
        let mut q = url::form_urlencoded::Serializer::new(String::new());
        if let Some(name) = &self.p.project {
            q.append_pair("project", name);
        }
        q.append_pair("from", &self.p.from).append_pair("to", &self.p.to);
        q.finish()
    }
}

async fn portfolio_page(
    State(app): State<AppState>,
    who: Who,
    headers: HeaderMap,
    query: Result<Query<crate::runtime::portfolio::PortfolioQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Page, PageError> {
    let Query(q) = query?;
    let range = q.checked(app.ops.clock().now().date_naive()).map_err(AppError::BadRequest)?;
    let (layout, set) = layout(&app, &who, &headers, false).await?;
    let p = crate::runtime::portfolio::load(&app.execs, &range).await?;
    let t = MetricsTemplate {
        layout,
        flow_svg: plots::cumulative_flow(&p.flow),
        cycle_svg: plots::cycle_time(&p.cycle_time),
        forecast_svg: plots::forecast_vs_actual(&p.forecasts),
        spend_svg: plots::weekly_spend(&p.spend),
        gates_svg: plots::gate_failures(&p.gates),
        p,
    };
    render(&t, set)
}

#[derive(Template)]
#[template(path = "spec_new.html")]
struct NewSpecTemplate {
    layout: Layout,
    projects: Vec<String>,
}

async fn new_spec_page(State(app): State<AppState>, who: Who, headers: HeaderMap) -> Result<Page, PageError> {
    let (layout, set) = layout(&app, &who, &headers, false).await?;
    let projects = app.specs.projects().await?.into_iter().map(|p| p.name).collect();
    render(&NewSpecTemplate { layout, projects }, set)
}

/// The new-spec form.
#[derive(Debug, Deserialize)]
struct NewSpecForm {
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

async fn create_spec(
    State(app): State<AppState>,
    who: Who,
    headers: HeaderMap,
    form: Result<Form<NewSpecForm>, axum::extract::rejection::FormRejection>,
) -> Result<Response, PageError> {
    let back = back_to("/specs/new");
    let Form(f) = form.map_err(|e| back_to("/specs/new")(AppError::form(&e)))?;
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

async fn spec_page(
    State(app): State<AppState>,
    who: Who,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Page, PageError> {
    let id = crate::web::api::specs::spec_id(&id)?;
    let (layout, set) = layout(&app, &who, &headers, true).await?;
    let mut spec = app.specs.get(id).await?;
    let exec_status = match &spec.task_id {
        Some(t) => app.execs.summary(t).await?.map(|s| s.status),
        None => None,
    };
    let stage = board::stage_of(&spec.status, exec_status.as_deref()).title();
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
struct SpecForm {
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

async fn spec_action(
    State(app): State<AppState>,
    who: Who,
    headers: HeaderMap,
    Path((id, action)): Path<(String, String)>,
    form: Result<Form<SpecForm>, axum::extract::rejection::FormRejection>,
) -> Result<Response, PageError> {
    let id = crate::web::api::specs::spec_id(&id)?;
    let page = format!("/specs/{id}");
    let back = back_to(page.clone());
    let Form(f) = form.map_err(|e| back_to(page.clone())(AppError::form(&e)))?;
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
                    Some(crate::runtime::spend::parse_usd(raw).ok_or_else(|| {
                        back_to(page.clone())(AppError::BadRequest(format!(
                            "budget_usd: {raw:?}: {}",
                            crate::runtime::spend::USD_EXPECTED
                        )))
                    })?)
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

/// One step on the execution page.
#[derive(Debug)]
struct StepView {
    step_id: String,
    agent_name: String,
    status: &'static str,
    attempt: u32,
    /// How long its latest attempt took (`6 ms`, `1.4 s`, `3 min 12 s`; `–` before one ended).
    duration: String,
    /// When its running attempt was dispatched (RFC 3339); empty unless running.
    running_since: String,
    cost_usd: f64,
    /// The step's forecast (mid, USD) and how it was made, when the execution has one.
    forecast: Option<(f64, String)>,
    files: usize,
    error: String,
    log_tail: String,
    skippable: bool,
    /// What the agent's outcome signalled: accepted and refused gate additions, knowledge
    /// gaps, deviations (one line each, untrusted text, escaped by the template).
    signals: Vec<String>,
}

/// A step's signals as lines: `gate addition: …`, `refused gate addition: … (reason)`,
/// `knowledge gap: …`, `deviation: …`.
fn step_signals(r: &crate::model::state::StepResult) -> Vec<String> {
    let mut out: Vec<String> = r.gate_additions.iter().map(|a| format!("gate addition: {a}")).collect();
    out.extend(
        r.rejected_gate_additions.iter().map(|x| format!("refused gate addition: {} ({})", x.command, x.reason)),
    );
    out.extend(r.knowledge_gaps.iter().map(|g| format!("knowledge gap: {g}")));
    out.extend(r.scope_expansions.iter().map(|x| format!("scope expansion: {x}")));
    out.extend(r.deviations.iter().map(|d| format!("deviation: {d}")));
    out
}

/// One gate run on the execution page.
#[derive(Debug)]
struct GateView {
    gate_type: String,
    /// `passed`, `failed` or `skipped` (the CSS class and the word shown).
    outcome: &'static str,
    /// Why a skipped gate was skipped.
    skip_reason: Option<String>,
    command: Option<String>,
    output: String,
}

/// One phase on the execution page.
#[derive(Debug)]
struct PhaseView {
    phase_id: i64,
    name: String,
    state: &'static str,
    steps: Vec<StepView>,
    gates: Vec<GateView>,
}

/// One journal line on the execution page.
#[derive(Debug)]
struct JournalLine {
    seq: i64,
    at: String,
    kind: String,
    actor: String,
}

#[derive(Template)]
#[template(path = "execution.html")]
struct ExecutionTemplate {
    layout: Layout,
    task_id: String,
    spec_id: Option<i64>,
    status: String,
    paused: bool,
    /// Why the driver parked the execution (shown beside the tag; Resume picks it up again).
    parked: Option<String>,
    final_: bool,
    driver: Option<String>,
    steps_done: u64,
    steps_total: u64,
    spend_usd: f64,
    summary: String,
    failure: String,
    next_message: String,
    approval: Option<ApprovalAction>,
    /// What the pending approval approves.
    review: Option<PhaseReview>,
    feedback: Option<FeedbackAction>,
    interact: Option<InteractAction>,
    /// The pending budget decision (status `budget_exceeded`).
    budget_decision: Option<crate::model::action::BudgetAction>,
    /// Sum of the step forecasts (mid), USD; 0 without a forecast.
    forecast_usd: f64,
    /// The ceiling, USD, and where it came from.
    ceiling: Option<(f64, String)>,
    /// Reserved by attempts in flight, USD.
    reserved_usd: f64,
    /// Raises of the ceiling: "+$X by WHO at WHEN".
    raises: Vec<String>,
    /// Token-tier warnings.
    budget_warnings: Vec<String>,
    phases: Vec<PhaseView>,
    journal: Vec<JournalLine>,
}

/// Bytes of a running attempt's output shown.
const LOG_TAIL_BYTES: u64 = 4096;

fn phases_of(app: &AppState, state: &ExecutionState) -> Vec<PhaseView> {
    state
        .plan
        .phases
        .iter()
        .enumerate()
        .map(|(i, ph)| PhaseView {
            phase_id: ph.phase_id,
            name: ph.name.clone(),
            state: if state.status.is_final() && i == state.current_phase {
                state.status.as_str()
            } else if i < state.current_phase {
                "done"
            } else if i == state.current_phase {
                "current"
            } else {
                "pending"
            },
            // A team step's members (and synthesis) follow it, each a row of its own.
            steps: ph
                .steps
                .iter()
                .flat_map(|s| {
                    let mut rows = vec![(s.step_id.clone(), s.agent_name.clone(), false)];
                    for id in engine::team::unit_ids(s) {
                        let agent =
                            engine::team::work_step(state, &id).map(|w| w.agent_name.clone()).unwrap_or_default();
                        rows.push((id, agent, true));
                    }
                    rows
                })
                .map(|(step_id, agent_name, member)| {
                    let r = state.result(&step_id);
                    let status = r.map_or("pending", |r| r.status.as_str());
                    let running = r.is_some_and(|r| r.status == StepStatus::Dispatched);
                    StepView {
                        agent_name: r.map_or(agent_name, |r| r.agent_name.clone()),
                        status,
                        attempt: r.map_or(0, |r| r.attempt),
                        duration: crate::web::when::duration(r.map_or(0.0, |r| r.duration_seconds)),
                        running_since: match r {
                            Some(r) if running => r.dispatched_at.clone(),
                            _ => String::new(),
                        },
                        cost_usd: r.map_or(0.0, |r| r.cost_usd),
                        forecast: state.budget.forecasts.get(&step_id).map(|f| (f.mid_usd, f.basis.clone())),
                        files: r.map_or(0, |r| r.files_changed.len()),
                        error: r.map(|r| r.error.clone()).unwrap_or_default(),
                        signals: r
                            .map(step_signals)
                            .unwrap_or_default()
                            .into_iter()
                            .chain(engine::goal::check_lines(state, &step_id))
                            .collect(),
                        log_tail: match r {
                            Some(r) if running => runs::attempt_log_tail(
                                app.execs.data(),
                                &state.task_id,
                                &step_id,
                                r.attempt,
                                LOG_TAIL_BYTES,
                            ),
                            _ => String::new(),
                        },
                        skippable: !matches!(
                            r.map(|r| r.status),
                            Some(StepStatus::Complete | StepStatus::Skipped | StepStatus::Dispatched)
                        ) && (i > state.current_phase && !member || i == state.current_phase),
                        step_id,
                    }
                })
                .collect(),
            gates: state
                .gate_results
                .iter()
                .filter(|g| g.phase_id == ph.phase_id)
                .map(|g| GateView {
                    gate_type: g.gate_type.clone(),
                    outcome: g.outcome().as_str(),
                    skip_reason: g.skipped.clone(),
                    command: Some(g.command.clone()).filter(|c| !c.is_empty()),
                    output: g.output.clone(),
                })
                .collect(),
        })
        .collect()
}

/// Journal lines shown on the execution page (the newest).
const JOURNAL_LINES: usize = 200;

async fn execution_page(
    State(app): State<AppState>,
    who: Who,
    headers: HeaderMap,
    Path(task_id): Path<String>,
) -> Result<Page, PageError> {
    let (layout, set) = layout(&app, &who, &headers, true).await?;
    let state = crate::web::api::executions::load(&app, &task_id).await?;
    let spec_id = app.execs.spec_of(&task_id).await?.map(|s| s.spec_id);
    let paused = app.execs.is_paused(&task_id).await?;
    let parked = app.execs.park_reason(&task_id).await?;
    let events = app.execs.journal(&task_id, 0).await?.unwrap_or_default();
    let skip = events.len().saturating_sub(JOURNAL_LINES);
    let journal = events
        .into_iter()
        .skip(skip)
        .rev()
        .map(|e| {
            let actor = serde_json::from_str::<serde_json::Value>(&e.payload)
                .ok()
                .and_then(|v| v.get("actor").and_then(|a| a.as_str()).map(String::from))
                .unwrap_or_default();
            JournalLine { seq: e.seq, at: e.at, kind: e.kind, actor }
        })
        .collect();
    let action = engine::next_action(&state);
    let (mut approval, mut feedback, mut interact, mut budget_decision) = (None, None, None, None);
    let mut review = None;
    match &action {
        Action::Approval(a) => {
            review = review::phase_review(app.execs.data(), &state, a.phase_id).await;
            let mut a = a.clone();
            let context = std::mem::take(&mut a.approval_context);
            a.approval_context = crate::runtime::teams::approval_context(app.execs.data(), &state, context).await;
            approval = Some(a);
        }
        Action::Feedback(f) => feedback = Some(f.clone()),
        Action::Interact(i) => interact = Some(i.clone()),
        Action::Budget(b) => budget_decision = Some(b.clone()),
        _ => {}
    }
    let budget = &state.budget;
    let (done, total) = state.progress();
    let driver = app.pool().driver_state(&task_id).map(|d| match d {
        crate::runtime::pool::DriverState::Running => "running".to_string(),
        crate::runtime::pool::DriverState::Parked => "parked".to_string(),
        crate::runtime::pool::DriverState::Errored(e) => format!("errored: {e}"),
    });
    let t = ExecutionTemplate {
        layout,
        spec_id,
        status: state.status.as_str().to_string(),
        paused,
        parked,
        final_: state.status.is_final(),
        driver,
        steps_done: done,
        steps_total: total,
        spend_usd: state.counters.spend_usd,
        summary: state.plan.task_summary.clone(),
        failure: state.failure.clone().unwrap_or_default(),
        next_message: action.message().to_string(),
        approval,
        review,
        feedback,
        interact,
        budget_decision,
        forecast_usd: (budget.forecasts.values().map(|f| f.mid_usd).sum::<f64>() * 100.0).round() / 100.0,
        ceiling: budget.ceiling_usd.map(|c| (c, budget.source.clone())),
        reserved_usd: budget.reserved_usd(),
        raises: budget.raises.iter().map(|r| format!("+${:.2} by {} at {}", r.by_usd, r.actor, r.at)).collect(),
        budget_warnings: budget.warnings.clone(),
        phases: phases_of(&app, &state),
        journal,
        task_id,
    };
    render(&t, set)
}

/// Every execution form's fields.
#[derive(Debug, Deserialize)]
struct ExecutionForm {
    /// Missing: empty, which `check_csrf` refuses (403) like a wrong token.
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    phase_id: Option<i64>,
    #[serde(default)]
    result: String,
    #[serde(default)]
    feedback: String,
    #[serde(default)]
    question_id: String,
    #[serde(default)]
    chosen_index: Option<usize>,
    #[serde(default)]
    step_id: String,
    #[serde(default)]
    input: String,
    #[serde(default)]
    done: Option<String>,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    by_usd: String,
    /// The form's idempotency key (`Layout::submission` and the form's name).
    #[serde(default)]
    submission: String,
}

type ExecutionFormResult = Result<Form<ExecutionForm>, axum::extract::rejection::FormRejection>;

async fn execution_action(
    State(app): State<AppState>,
    who: Who,
    headers: HeaderMap,
    Path((task_id, action)): Path<(String, String)>,
    form: ExecutionFormResult,
) -> Result<Response, PageError> {
    act(app, who, headers, task_id, &action, form).await
}

/// The decision forms have their own routes (deciding needs the reviewer role, not lead):
/// `approve_form`, `feedback_form`, `interact_form`.
macro_rules! decision_form {
    ($name:ident, $action:literal) => {
        async fn $name(
            State(app): State<AppState>,
            who: Who,
            headers: HeaderMap,
            Path(task_id): Path<String>,
            form: ExecutionFormResult,
        ) -> Result<Response, PageError> {
            act(app, who, headers, task_id, $action, form).await
        }
    };
}

decision_form!(approve_form, "approve");
decision_form!(feedback_form, "feedback");
decision_form!(interact_form, "interact");

async fn act(
    app: AppState,
    who: Who,
    headers: HeaderMap,
    task_id: String,
    action: &str,
    form: ExecutionFormResult,
) -> Result<Response, PageError> {
    let page = format!("/executions/{task_id}");
    let back = back_to(page.clone());
    let Form(f) = form.map_err(|e| back_to(page.clone())(AppError::form(&e)))?;
    check_csrf(&headers, &f.csrf).map_err(back_to(page.clone()))?;
    let op = who.operator();
    // Each rendered form carries its own key: a double submit is a resend, a second form a
    // second decision.
    let key = Some(f.submission.trim().to_string()).filter(|k| !k.is_empty());
    let missing = |field: &str| AppError::BadRequest(format!("{field}: missing"));
    let kind = match action {
        "approve" => {
            let result = match f.result.as_str() {
                "approve" => ApprovalDecision::Approve,
                "reject" => ApprovalDecision::Reject,
                "approve-with-feedback" => ApprovalDecision::ApproveWithFeedback,
                other => {
                    return Err(back(AppError::BadRequest(format!("result: {other:?} is not an approval option"))))
                }
            };
            let phase_id = f.phase_id.ok_or_else(|| missing("phase_id")).map_err(back_to(page.clone()))?;
            EventKind::ApprovalRecorded { phase_id, result, feedback: f.feedback }
        }
        "feedback" => EventKind::FeedbackRecorded {
            phase_id: f.phase_id.ok_or_else(|| missing("phase_id")).map_err(back_to(page.clone()))?,
            question_id: f.question_id,
            chosen_index: f.chosen_index.ok_or_else(|| missing("chosen_index")).map_err(back_to(page.clone()))?,
        },
        "interact" if f.done.is_some() => EventKind::InteractCompleted { step_id: f.step_id },
        "interact" => EventKind::InteractInput { step_id: f.step_id, input: f.input },
        "retry-step" => EventKind::StepRetried { step_id: f.step_id },
        "skip" => EventKind::StepSkipped { step_id: f.step_id, reason: "skipped on the board".into() },
        "cancel" => EventKind::Cancelled {
            reason: if f.reason.trim().is_empty() { "cancelled on the board".into() } else { f.reason },
        },
        "budget" => {
            let by_usd = match f.result.as_str() {
                "raise" => Some(crate::runtime::spend::parse_usd(&f.by_usd).ok_or_else(|| {
                    back_to(page.clone())(AppError::BadRequest(format!(
                        "by_usd: {:?}: {}",
                        f.by_usd,
                        crate::runtime::spend::USD_EXPECTED
                    )))
                })?),
                _ => None,
            };
            let decision = Ops::budget_decision(&f.result, by_usd).map_err(|e| back_to(page.clone())(e.into()))?;
            app.ops.budget(&task_id, decision, key, &op).await.map_err(|e| back(e.into()))?;
            return Ok(see_other(&page));
        }
        "pause" | "resume" => {
            app.ops.set_paused(&task_id, action == "pause", &op).await.map_err(|e| back(e.into()))?;
            return Ok(see_other(&page));
        }
        other => return Err(back(AppError::NotFound(format!("no execution action {other:?}")))),
    };
    app.ops.record(&task_id, keyed(kind, key), &op).await.map_err(|e| back(e.into()))?;
    Ok(see_other(&page))
}

#[derive(Template)]
#[template(path = "approvals.html")]
struct ApprovalsTemplate {
    layout: Layout,
    rows: Vec<WaitingView>,
}

/// One row of the approvals page: what waits and, for an approval, what it approves.
struct WaitingView {
    row: crate::runtime::views::Waiting,
    approval: Option<ApprovalAction>,
    review: Option<PhaseReview>,
}

async fn approvals_page(State(app): State<AppState>, who: Who, headers: HeaderMap) -> Result<Page, PageError> {
    let (layout, set) = layout(&app, &who, &headers, true).await?;
    let mut rows = Vec::new();
    for row in app.execs.waiting().await? {
        // Only an approval shows what is being approved: its state is read for the review;
        // feedback and budget decisions are listed from their summary rows alone.
        if row.status != "approval_pending" {
            rows.push(WaitingView { row, approval: None, review: None });
            continue;
        }
        let state = crate::web::api::executions::load(&app, &row.task_id).await?;
        let (approval, review) = match engine::next_action(&state) {
            Action::Approval(a) => {
                let review = review::phase_review(app.execs.data(), &state, a.phase_id).await;
                (Some(a), review)
            }
            _ => (None, None),
        };
        rows.push(WaitingView { row, approval, review });
    }
    render(&ApprovalsTemplate { layout, rows }, set)
}

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

async fn changelist_page(
    State(app): State<AppState>,
    who: Who,
    headers: HeaderMap,
    Path(task_id): Path<String>,
) -> Result<Page, PageError> {
    let (layout, set) = layout(&app, &who, &headers, false).await?;
    let state = crate::web::api::executions::load(&app, &task_id).await?;
    let mut cl = changelist::changelist(app.execs.data(), &state).await?;
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

/// The reason of the newest `import_update_ignored` event of a spec still approved or
/// executing (a forge change after approval, left for the lead).
fn flagged_change(spec: &SpecRow, events: &[SpecEventRow]) -> Option<String> {
    if !matches!(spec.status.as_str(), "approved" | "executing") {
        return None;
    }
    events.iter().rev().find(|e| e.action == "import_update_ignored").map(|e| format!("{} ({})", e.reason, e.at))
}

/// A form with only its CSRF token.
#[derive(Debug, Deserialize)]
struct CsrfForm {
    /// Missing: empty, which `check_csrf` refuses (403) like a wrong token.
    #[serde(default)]
    csrf: String,
}

/// `POST /executions/{task_id}/merge`: push and open (or find) the pull request, then back
/// to the changelist, which links it.
async fn merge_form(
    State(app): State<AppState>,
    who: Who,
    headers: HeaderMap,
    Path(task_id): Path<String>,
    form: Result<Form<CsrfForm>, axum::extract::rejection::FormRejection>,
) -> Result<Response, PageError> {
    let page = format!("/executions/{task_id}/changelist");
    let Form(f) = form.map_err(|e| back_to(page.clone())(AppError::form(&e)))?;
    check_csrf(&headers, &f.csrf).map_err(back_to(page.clone()))?;
    crate::runtime::merge::merge(&app.execs, &app.forges, &task_id, &who.actor())
        .await
        .map_err(|e| back_to(page.clone())(e.into()))?;
    Ok(see_other(&page))
}

/// The import form of the new-spec page.
#[derive(Debug, Deserialize)]
struct ImportForm {
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
async fn import_form(
    State(app): State<AppState>,
    who: Who,
    headers: HeaderMap,
    form: Result<Form<ImportForm>, axum::extract::rejection::FormRejection>,
) -> Result<Response, PageError> {
    let back = || back_to("/specs/new");
    let Form(f) = form.map_err(|e| back()(AppError::form(&e)))?;
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

#[derive(Template)]
#[template(path = "login.html")]
struct LoginTemplate {
    layout: Layout,
    next: String,
}

/// `?next=` of the login page: a local path only (never another site).
#[derive(Debug, Deserialize)]
struct NextQuery {
    next: Option<String>,
}

/// A redirect target after sign-in: a path on this site only (`/`, then no `/` or `\`; only
/// visible ASCII, so no tab or newline a browser would strip into `//other.site`).
fn local_path(next: Option<String>) -> String {
    next.filter(|n| {
        n.starts_with('/') && !n[1..].starts_with(['/', '\\']) && n.bytes().all(|b| b.is_ascii_graphic() && b != b'\\')
    })
    .unwrap_or_else(|| "/".into())
}

async fn login_page(
    State(app): State<AppState>,
    who: Who,
    headers: HeaderMap,
    Query(q): Query<NextQuery>,
) -> Result<Page, PageError> {
    let (layout, set) = layout(&app, &who, &headers, false).await?;
    render(&LoginTemplate { layout, next: local_path(q.next) }, set)
}

/// The login form.
#[derive(Debug, Deserialize)]
struct LoginForm {
    /// Missing: empty, which `check_csrf` refuses (403) like a wrong token.
    #[serde(default)]
    csrf: String,
    token: String,
    #[serde(default)]
    next: Option<String>,
}

async fn login(
    State(app): State<AppState>,
    headers: HeaderMap,
    form: Result<Form<LoginForm>, axum::extract::rejection::FormRejection>,
) -> Result<Response, PageError> {
    let back = || back_to("/login");
    let Form(f) = form.map_err(|e| back()(AppError::form(&e)))?;
    check_csrf(&headers, &f.csrf).map_err(back())?;
    let (user, token_id) = crate::runtime::users::sign_in(&app.execs, f.token.trim())
        .await
        .map_err(|e| back()(e.into()))?
        .ok_or_else(|| back()(AppError::Unauthorized("unknown or revoked token".into())))?;
    let value = app.key.session(&user.name, token_id, crate::clock::now().timestamp() + SESSION_SECS);
    let mut response = see_other(&local_path(f.next));
    let cookie = format!("{SESSION_COOKIE}={value}; Path=/; HttpOnly; SameSite=Lax; Max-Age={SESSION_SECS}");
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        response.headers_mut().append(SET_COOKIE, v);
    }
    Ok(response)
}

/// The logout form (only the CSRF token).
#[derive(Debug, Deserialize)]
struct CsrfOnly {
    /// Missing: empty, which `check_csrf` refuses (403) like a wrong token.
    #[serde(default)]
    csrf: String,
}

async fn logout(
    headers: HeaderMap,
    form: Result<Form<CsrfOnly>, axum::extract::rejection::FormRejection>,
) -> Result<Response, PageError> {
    let Form(f) = form.map_err(|e| AppError::form(&e))?;
    check_csrf(&headers, &f.csrf)?;
    let mut response = see_other("/login");
    let cookie = format!("{SESSION_COOKIE}=; Path=/; HttpOnly; SameSite=Lax; Max-Age=0");
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        response.headers_mut().append(SET_COOKIE, v);
    }
    Ok(response)
}

/// How long an approval link made on the page lasts, seconds.
pub const LINK_SECS: i64 = 24 * 3600;

#[derive(Template)]
#[template(path = "link_made.html")]
struct LinkMadeTemplate {
    layout: Layout,
    task_id: String,
    link: String,
    reviewer: String,
}

/// The "make an approval link" form.
#[derive(Debug, Deserialize)]
struct LinkForm {
    /// Missing: empty, which `check_csrf` refuses (403) like a wrong token.
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    reviewer: String,
}

async fn make_approval_link(
    State(app): State<AppState>,
    who: Who,
    headers: HeaderMap,
    Path(task_id): Path<String>,
    form: Result<Form<LinkForm>, axum::extract::rejection::FormRejection>,
) -> Result<Page, PageError> {
    let page = format!("/executions/{task_id}");
    let Form(f) = form.map_err(|e| back_to(page.clone())(AppError::form(&e)))?;
    check_csrf(&headers, &f.csrf).map_err(back_to(page.clone()))?;
    let reviewer = f.reviewer.trim();
    crate::runtime::auth::check_user_name(reviewer)
        .map_err(|e| back_to(page.clone())(AppError::BadRequest(format!("reviewer: {e}"))))?;
    let token = app
        .ops
        .mint_link(&task_id, reviewer, LINK_SECS, &who.operator())
        .await
        .map_err(|e| back_to(page.clone())(e.into()))?;
    let link = format!("/approve/{token}");
    let (layout, set) = layout(&app, &who, &headers, false).await?;
    let host = headers.get("host").and_then(|h| h.to_str().ok()).unwrap_or("127.0.0.1:8741");
    let t = LinkMadeTemplate { layout, task_id, link: format!("http://{host}{link}"), reviewer: reviewer.to_string() };
    render(&t, set)
}

#[derive(Template)]
#[template(path = "link_done.html")]
struct LinkDoneTemplate {
    layout: Layout,
    decision: String,
    task_id: String,
}

#[derive(Template)]
#[template(path = "link.html")]
struct LinkTemplate {
    layout: Layout,
    claims: LinkClaims,
    approval: ApprovalAction,
    summary: String,
    review: Option<PhaseReview>,
}

async fn link_page(
    State(app): State<AppState>,
    who: Who,
    headers: HeaderMap,
    Path(token): Path<String>,
) -> Result<Page, PageError> {
    let (claims, approval, summary) = app.ops.check_link(&token).await?;
    let state = crate::web::api::executions::load(&app, &claims.task_id).await?;
    let review = review::phase_review(app.execs.data(), &state, approval.phase_id).await;
    let (layout, set) = layout(&app, &who, &headers, false).await?;
    render(&LinkTemplate { layout, claims, approval, summary, review }, set)
}

/// The approval link's form.
#[derive(Debug, Deserialize)]
struct LinkDecisionForm {
    /// Missing: empty, which `check_csrf` refuses (403) like a wrong token.
    #[serde(default)]
    csrf: String,
    result: String,
    #[serde(default)]
    feedback: String,
    /// The form's idempotency key.
    #[serde(default)]
    submission: String,
}

async fn link_decide(
    State(app): State<AppState>,
    headers: HeaderMap,
    Path(token): Path<String>,
    form: Result<Form<LinkDecisionForm>, axum::extract::rejection::FormRejection>,
) -> Result<Response, PageError> {
    let Form(f) = form.map_err(|e| AppError::form(&e))?;
    check_csrf(&headers, &f.csrf)?;
    let result = ApprovalDecision::parse(&f.result)
        .ok_or_else(|| AppError::BadRequest(format!("result: {:?} is not an approval option", f.result)))?;
    let key = Some(f.submission.trim().to_string()).filter(|k| !k.is_empty());
    let (claims, _) = app.ops.redeem_link(&token, result, f.feedback, key).await?;
    let (layout, set) = layout(&app, &Who(None), &headers, false).await?;
    let t = LinkDoneTemplate { layout, decision: result.as_str().to_string(), task_id: claims.task_id };
    Ok(render(&t, set)?.into_response())
}
