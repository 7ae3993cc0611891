//! Executions over REST: list, show, journal, next action, and recording events (the CLI's
//! driver contract: `record`, `approve`, `feedback`, `cancel`, `retry-step`, `skip`, …).
//!
//! Recording is [`Executions::record_once`](crate::runtime::executions::Executions::record_once),
//! as for the CLI. Records this process makes on one execution are also serialised by
//! [`AppState::record_lock`], because the lease is re-entrant for its holder (this process).

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use crate::engine;
use crate::engine::budget::{MAX_CEILING_USD, MIN_CEILING_USD};
use crate::model::action::Action;
use crate::model::event::{Event, EventKind};
use crate::model::state::{ApprovalDecision, ExecutionState};
use crate::web::error::AppError;
use crate::web::extract::{Actor, ApiJson};
use crate::web::AppState;

/// Routes under `/api/v1/executions`.
pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/", get(list))
        .route("/{task_id}", get(show))
        .route("/{task_id}/journal", get(journal))
        .route("/{task_id}/next", get(next))
        .route("/{task_id}/events", post(record_event))
        .route("/{task_id}/approve", post(approve))
        .route("/{task_id}/feedback", post(feedback))
        .route("/{task_id}/cancel", post(cancel))
        .route("/{task_id}/retry-step", post(retry_step))
        .route("/{task_id}/skip", post(skip))
        .route("/{task_id}/gate", post(gate))
        .route("/{task_id}/interact", post(interact))
        .route("/{task_id}/amend", post(amend))
        .route("/{task_id}/pause", post(pause))
        .route("/{task_id}/resume", post(resume))
        .route("/{task_id}/merge", get(merge_state).post(merge))
        .route("/{task_id}/budget", post(budget))
}

/// One execution in the list (its board summary).
#[derive(Debug, Serialize)]
pub struct ExecutionListItem {
    /// Task id.
    pub task_id: String,
    /// Status (`running`, `approval_pending`, …).
    pub status: String,
    /// `"<id> <name>"` of the current phase, empty when none.
    pub current_phase: String,
    /// Steps done.
    pub steps_done: i64,
    /// Steps in the plan.
    pub steps_total: i64,
    /// Spend so far, USD.
    pub spend_usd: f64,
    /// Created (RFC 3339).
    pub created_at: String,
    /// Last event (RFC 3339).
    pub updated_at: String,
}

async fn list(State(app): State<AppState>) -> Result<Json<Vec<ExecutionListItem>>, AppError> {
    let rows = app.execs.store().list_executions().await.map_err(anyhow::Error::from)?;
    let items = rows
        .into_iter()
        .map(|r| ExecutionListItem {
            task_id: r.task_id,
            status: r.summary.status,
            current_phase: r.summary.current_phase,
            steps_done: r.summary.steps_done,
            steps_total: r.summary.steps_total,
            spend_usd: r.summary.spend_usd,
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
        .collect();
    Ok(Json(items))
}

/// An execution's state with the action the engine asks for next.
#[derive(Debug, Serialize)]
pub struct ExecutionView {
    /// The whole state (plan, results, counters, …).
    #[serde(flatten)]
    pub state: ExecutionState,
    /// What the engine asks for next.
    pub next_action: Action,
}

/// The execution `task_id`, or 404.
pub(crate) async fn load(app: &AppState, task_id: &str) -> Result<ExecutionState, AppError> {
    app.execs.load(task_id).await?.ok_or_else(|| no_such(task_id))
}

fn no_such(task_id: &str) -> AppError {
    AppError::NotFound(format!("no execution with task id {task_id}"))
}

async fn show(State(app): State<AppState>, Path(task_id): Path<String>) -> Result<Json<ExecutionView>, AppError> {
    let state = load(&app, &task_id).await?;
    let next_action = engine::next_action(&state);
    Ok(Json(ExecutionView { state, next_action }))
}

/// One journal entry; `payload` is the event's JSON.
#[derive(Debug, Serialize)]
pub struct JournalEntry {
    /// Sequence number (1-based).
    pub seq: i64,
    /// Event kind.
    pub kind: String,
    /// When it was recorded (RFC 3339).
    pub at: String,
    /// The event.
    pub payload: serde_json::Value,
    /// Its idempotency key.
    pub idempotency_key: String,
    /// Chain hash.
    pub hash: String,
}

impl JournalEntry {
    /// The entry of a stored event (a payload that is not JSON is kept as a string).
    pub fn from_stored(e: crate::store::StoredEvent) -> JournalEntry {
        JournalEntry {
            payload: serde_json::from_str(&e.payload).unwrap_or(serde_json::Value::String(e.payload)),
            seq: e.seq,
            kind: e.kind,
            at: e.at,
            idempotency_key: e.idempotency_key,
            hash: e.hash,
        }
    }
}

async fn journal(
    State(app): State<AppState>,
    Path(task_id): Path<String>,
) -> Result<Json<Vec<JournalEntry>>, AppError> {
    let store = app.execs.store();
    if store.summary(&task_id).await.map_err(anyhow::Error::from)?.is_none() {
        return Err(no_such(&task_id));
    }
    let events = store.events(&task_id, 0).await.map_err(anyhow::Error::from)?;
    Ok(Json(events.into_iter().map(JournalEntry::from_stored).collect()))
}

/// `?all=true`: every dispatchable action instead of the next one.
#[derive(Debug, Deserialize)]
struct NextQuery {
    #[serde(default)]
    all: bool,
}

async fn next(
    State(app): State<AppState>,
    Path(task_id): Path<String>,
    query: Result<Query<NextQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<serde_json::Value>, AppError> {
    let Query(query) = query?;
    let state = load(&app, &task_id).await?;
    let body = if query.all {
        serde_json::to_value(engine::next_actions(&state))
    } else {
        serde_json::to_value(engine::next_action(&state))
    };
    Ok(Json(body.map_err(anyhow::Error::from)?))
}

/// The answer to a recording request: 201 when recorded, 200 for a duplicate.
#[derive(Debug, Serialize)]
pub struct Recorded {
    /// False when the idempotency key was already applied (nothing changed).
    pub recorded: bool,
    /// The event's idempotency key (explicit or derived).
    pub idempotency_key: String,
    /// What the engine asks for next.
    pub next_action: Action,
}

/// Records `event` under the lease (see the module doc).
async fn record(app: &AppState, task_id: &str, event: Event) -> Result<(StatusCode, Json<Recorded>), AppError> {
    let execs = &app.execs;
    if execs.store().summary(task_id).await.map_err(anyhow::Error::from)?.is_none() {
        return Err(no_such(task_id));
    }
    let lock = app.record_lock(task_id);
    let _serialised = lock.lock().await;
    if matches!(event.kind, EventKind::ApprovalRecorded { .. }) {
        check_separate_reviewer(app, task_id, &event.actor).await?;
    }
    let decision = crate::runtime::auth::decision_fields(&event.kind);
    let cancel = matches!(event.kind, EventKind::Cancelled { .. });
    if cancel {
        // This process's own driver holds the lease: stop it first (its agents are stopped
        // with the cancel).
        app.pool().halt(task_id).await;
    }
    // This process's own driver, while it runs, holds the lease: an operator event (skip,
    // retry, amend …) stops it for the record and starts it again after (its running agents
    // are re-adopted), as a pause and resume would.
    let running = matches!(app.pool().driver_state(task_id), Some(crate::runtime::pool::DriverState::Running));
    let restart = !cancel && running;
    if restart {
        app.pool().halt(task_id).await;
    }
    let done = execs.record_once(task_id, event).await;
    if restart {
        let project = crate::runtime::specs::project_of(execs, task_id).await?;
        app.pool().drive(task_id, project.as_deref());
    }
    let done = done?;
    if !cancel && !done.applied.duplicate {
        // A parked driver goes on at once (a decision, a retry, a skip).
        app.pool().wake(task_id);
    }
    if done.stopped_attempts > 0 {
        tracing::info!(task.id = %task_id, "stopped {} running agent attempts", done.stopped_attempts);
    }
    let (state, applied) = (done.state, done.applied);
    if let (Some((phase_id, decision, comment)), false) = (decision, applied.duplicate) {
        sign_decision(app, task_id, &applied.key, phase_id, &decision, &comment).await?;
    }
    let status = if applied.duplicate { StatusCode::OK } else { StatusCode::CREATED };
    let next_action = engine::next_action(&state);
    Ok((status, Json(Recorded { recorded: !applied.duplicate, idempotency_key: applied.key, next_action })))
}

/// Signs the decision journaled under `key` with the server key (who and when as journaled).
async fn sign_decision(
    app: &AppState,
    task_id: &str,
    key: &str,
    phase_id: i64,
    decision: &str,
    comment: &str,
) -> Result<(), AppError> {
    let store = app.execs.store();
    let head = store.head_seq(task_id).await.map_err(anyhow::Error::from)?.unwrap_or(0);
    let recent = store.events(task_id, (head - 16).max(0)).await.map_err(anyhow::Error::from)?;
    let Some(entry) = recent.iter().rev().find(|e| e.idempotency_key == key) else {
        return Err(AppError::Internal(anyhow::anyhow!("the decision {key} of {task_id} is not in the journal")));
    };
    let payload: serde_json::Value = serde_json::from_str(&entry.payload).map_err(anyhow::Error::from)?;
    let who = payload.get("actor").and_then(|a| a.as_str()).unwrap_or_default();
    let d = crate::runtime::auth::Decision { task_id, phase_id, decision, comment, who, at: &entry.at };
    let signature = app.key.sign_decision(&d);
    store.put_decision_signature(task_id, entry.seq, &signature).await.map_err(anyhow::Error::from)?;
    Ok(())
}

/// Suffix of the actor of a decision made through an approval link.
pub(crate) const LINK_ACTOR_SUFFIX: &str = " (approval link)";

/// Refuses an approval by whoever fired the execution when its project requires a separate
/// reviewer (403); a decision through an approval link counts as its reviewer's.
pub(crate) async fn check_separate_reviewer(app: &AppState, task_id: &str, actor: &str) -> Result<(), AppError> {
    let actor = actor.strip_suffix(LINK_ACTOR_SUFFIX).unwrap_or(actor);
    let store = app.execs.store();
    let Some(spec) = store.spec_of_execution(task_id).await.map_err(anyhow::Error::from)? else { return Ok(()) };
    let project = store.project(&spec.project).await.map_err(anyhow::Error::from)?;
    if !project.is_some_and(|p| p.require_separate_reviewer) {
        return Ok(());
    }
    let events = store.spec_events(spec.spec_id).await.map_err(anyhow::Error::from)?;
    let initiator = events.iter().rev().find(|e| e.action == "fire").map(|e| e.actor.as_str());
    if initiator == Some(actor) {
        return Err(AppError::Forbidden(format!(
            "{actor} fired this execution, and project {} requires a separate reviewer for its approvals",
            spec.project
        )));
    }
    Ok(())
}

/// Records `event` (its actor set by the caller) as the REST routes do: the lease, this
/// process's record lock, waking or stopping the pool's driver. For the HTML forms.
///
/// Errors: as the REST routes (404 unknown, 409 refused, 422 invalid).
pub(crate) async fn record_event_as(app: &AppState, task_id: &str, event: Event) -> Result<Recorded, AppError> {
    record(app, task_id, event).await.map(|(_, Json(r))| r)
}

/// Builds the event of a convenience route.
fn event(kind: EventKind, key: Option<String>, actor: Actor) -> Event {
    let mut event = Event::new(kind).by(actor.0);
    event.idempotency_key = key;
    event
}

/// `POST …/events`: any [`Event`]; the actor is always the caller's (header, else `api`).
async fn record_event(
    State(app): State<AppState>,
    Path(task_id): Path<String>,
    actor: Actor,
    ApiJson(body): ApiJson<Event>,
) -> Result<(StatusCode, Json<Recorded>), AppError> {
    record(&app, &task_id, event(body.kind, body.idempotency_key, actor)).await
}

/// `POST …/approve` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ApproveBody {
    phase_id: i64,
    result: ApprovalDecision,
    #[serde(default)]
    feedback: String,
    #[serde(default)]
    idempotency_key: Option<String>,
}

async fn approve(
    State(app): State<AppState>,
    Path(task_id): Path<String>,
    actor: Actor,
    ApiJson(b): ApiJson<ApproveBody>,
) -> Result<(StatusCode, Json<Recorded>), AppError> {
    let kind = EventKind::ApprovalRecorded { phase_id: b.phase_id, result: b.result, feedback: b.feedback };
    record(&app, &task_id, event(kind, b.idempotency_key, actor)).await
}

/// `POST …/budget` body: the decision on an execution parked at its USD ceiling.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BudgetBody {
    /// `raise` or `stop`.
    decision: String,
    /// With `raise`: by how much, USD (> 0).
    #[serde(default)]
    by_usd: Option<f64>,
    #[serde(default)]
    idempotency_key: Option<String>,
}

/// The event of a budget decision on `task_id`: `raise` (by `by_usd`) or `stop` (a cancel with
/// the reason). Shared by the REST route and the execution page's form.
///
/// Errors: an unknown decision or a missing amount (422 naming the field); `stop` of an
/// execution that is not parked at its ceiling (409: cancel it instead).
pub(crate) async fn budget_event(
    app: &AppState,
    task_id: &str,
    decision: &str,
    by_usd: Option<f64>,
) -> Result<EventKind, AppError> {
    let by_usd_invalid =
        |message: String| AppError::Invalid { message, details: serde_json::json!({"field": "by_usd"}) };
    match decision {
        "raise" => match by_usd {
            Some(v) if v.is_finite() && (MIN_CEILING_USD..=MAX_CEILING_USD).contains(&v) => {
                Ok(EventKind::BudgetRaised { by_usd: v })
            }
            Some(v) => Err(by_usd_invalid(format!("by_usd: {v} {}", crate::runtime::spend::USD_EXPECTED))),
            None => Err(by_usd_invalid("by_usd: a raise needs the amount in USD".into())),
        },
        "stop" if by_usd.is_some() => Err(by_usd_invalid("by_usd: only a raise takes an amount".into())),
        "stop" => {
            let state = load(app, task_id).await?;
            if state.status != crate::model::state::ExecutionStatus::BudgetExceeded {
                let hint = if state.status.is_terminal() { "" } else { ": cancel it instead" };
                return Err(AppError::Conflict {
                    message: format!("execution {task_id} is {}, not parked at its budget ceiling{hint}", state.status),
                    reason: Some("wrong_status"),
                });
            }
            Ok(EventKind::Cancelled { reason: "stopped at the budget ceiling".into() })
        }
        other => Err(AppError::Invalid {
            message: format!("decision: {other:?} is not a budget decision (raise or stop)"),
            details: serde_json::json!({"field": "decision"}),
        }),
    }
}

async fn budget(
    State(app): State<AppState>,
    Path(task_id): Path<String>,
    actor: Actor,
    ApiJson(b): ApiJson<BudgetBody>,
) -> Result<(StatusCode, Json<Recorded>), AppError> {
    let kind = budget_event(&app, &task_id, &b.decision, b.by_usd).await?;
    record(&app, &task_id, event(kind, b.idempotency_key, actor)).await
}

/// `POST …/feedback` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FeedbackBody {
    phase_id: i64,
    question_id: String,
    chosen_index: usize,
    #[serde(default)]
    idempotency_key: Option<String>,
}

async fn feedback(
    State(app): State<AppState>,
    Path(task_id): Path<String>,
    actor: Actor,
    ApiJson(b): ApiJson<FeedbackBody>,
) -> Result<(StatusCode, Json<Recorded>), AppError> {
    let kind =
        EventKind::FeedbackRecorded { phase_id: b.phase_id, question_id: b.question_id, chosen_index: b.chosen_index };
    record(&app, &task_id, event(kind, b.idempotency_key, actor)).await
}

/// `POST …/cancel` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CancelBody {
    #[serde(default)]
    reason: String,
}

async fn cancel(
    State(app): State<AppState>,
    Path(task_id): Path<String>,
    actor: Actor,
    ApiJson(b): ApiJson<CancelBody>,
) -> Result<(StatusCode, Json<Recorded>), AppError> {
    record(&app, &task_id, event(EventKind::Cancelled { reason: b.reason }, None, actor)).await
}

/// `POST …/retry-step` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RetryStepBody {
    step_id: String,
}

async fn retry_step(
    State(app): State<AppState>,
    Path(task_id): Path<String>,
    actor: Actor,
    ApiJson(b): ApiJson<RetryStepBody>,
) -> Result<(StatusCode, Json<Recorded>), AppError> {
    record(&app, &task_id, event(EventKind::StepRetried { step_id: b.step_id }, None, actor)).await
}

/// `POST …/skip` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SkipBody {
    step_id: String,
    #[serde(default)]
    reason: String,
}

async fn skip(
    State(app): State<AppState>,
    Path(task_id): Path<String>,
    actor: Actor,
    ApiJson(b): ApiJson<SkipBody>,
) -> Result<(StatusCode, Json<Recorded>), AppError> {
    let kind = EventKind::StepSkipped { step_id: b.step_id, reason: b.reason };
    record(&app, &task_id, event(kind, None, actor)).await
}

/// What pause and resume answer.
#[derive(Debug, Serialize)]
pub struct PauseState {
    /// The execution.
    pub task_id: String,
    /// Whether it is paused now.
    pub paused: bool,
}

/// Pauses (`paused`: no new dispatches; its driver stops, running agents finish and are
/// harvested on resume) or resumes an execution; idempotent. Shared by the REST routes and the
/// execution page's buttons.
///
/// Errors: unknown execution (404), a final one (409).
pub(crate) async fn set_paused(app: &AppState, task_id: &str, paused: bool) -> Result<PauseState, AppError> {
    let state = load(app, task_id).await?;
    if state.status.is_final() {
        return Err(AppError::Conflict {
            message: format!("execution {task_id} is {}", state.status),
            reason: Some("final"),
        });
    }
    app.execs.store().set_paused(task_id, paused).await.map_err(anyhow::Error::from)?;
    if paused {
        app.pool().halt(task_id).await;
    } else if crate::runtime::driver::meta_path(app.execs.data(), task_id).exists() {
        let project = crate::runtime::specs::project_of(&app.execs, task_id).await?;
        app.pool().drive(task_id, project.as_deref());
    }
    Ok(PauseState { task_id: task_id.to_string(), paused })
}

/// `POST …/pause`.
async fn pause(State(app): State<AppState>, Path(task_id): Path<String>) -> Result<Json<PauseState>, AppError> {
    Ok(Json(set_paused(&app, &task_id, true).await?))
}

/// `POST …/resume`.
async fn resume(State(app): State<AppState>, Path(task_id): Path<String>) -> Result<Json<PauseState>, AppError> {
    Ok(Json(set_paused(&app, &task_id, false).await?))
}

/// `POST …/gate` body (an external driver's gate result).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GateBody {
    phase_id: i64,
    passed: bool,
    #[serde(default)]
    output: String,
    #[serde(default)]
    command: Option<String>,
    #[serde(default)]
    exit_code: Option<i32>,
    #[serde(default)]
    idempotency_key: Option<String>,
}

async fn gate(
    State(app): State<AppState>,
    Path(task_id): Path<String>,
    actor: Actor,
    ApiJson(b): ApiJson<GateBody>,
) -> Result<(StatusCode, Json<Recorded>), AppError> {
    let kind = EventKind::GateRecorded {
        phase_id: b.phase_id,
        passed: b.passed,
        output: b.output,
        command: b.command,
        exit_code: b.exit_code,
    };
    record(&app, &task_id, event(kind, b.idempotency_key, actor)).await
}

/// `POST …/interact` body: a reply to an interactive step, or `complete: true` to end it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct InteractBody {
    step_id: String,
    #[serde(default)]
    input: String,
    #[serde(default)]
    complete: bool,
    #[serde(default)]
    idempotency_key: Option<String>,
}

async fn interact(
    State(app): State<AppState>,
    Path(task_id): Path<String>,
    actor: Actor,
    ApiJson(b): ApiJson<InteractBody>,
) -> Result<(StatusCode, Json<Recorded>), AppError> {
    if b.complete && !b.input.is_empty() {
        return Err(AppError::Unprocessable("give either input (a reply) or complete: true, not both".into()));
    }
    let kind = if b.complete {
        EventKind::InteractCompleted { step_id: b.step_id }
    } else {
        EventKind::InteractInput { step_id: b.step_id, input: b.input }
    };
    record(&app, &task_id, event(kind, b.idempotency_key, actor)).await
}

/// `POST …/amend`: the fields of an `amended` event (`description`, `phases` and
/// `after_phase`, or `steps`), without `kind`.
async fn amend(
    State(app): State<AppState>,
    Path(task_id): Path<String>,
    actor: Actor,
    ApiJson(mut body): ApiJson<serde_json::Value>,
) -> Result<(StatusCode, Json<Recorded>), AppError> {
    let Some(fields) = body.as_object_mut() else {
        return Err(AppError::Unprocessable("the amendment must be a JSON object".into()));
    };
    if fields.contains_key("kind") {
        return Err(AppError::Unprocessable("kind: not allowed here (this route records an amendment)".into()));
    }
    fields.insert("kind".into(), serde_json::Value::String("amended".into()));
    let parsed: Event = serde_json::from_value(body).map_err(|e| AppError::Unprocessable(format!("amendment: {e}")))?;
    record(&app, &task_id, event(parsed.kind, parsed.idempotency_key, actor)).await
}

/// `POST …/merge`: push the feature branch and find or open the pull request (idempotent).
async fn merge(
    State(app): State<AppState>,
    Path(task_id): Path<String>,
    actor: Actor,
) -> Result<Json<crate::store::MergeRow>, AppError> {
    Ok(Json(crate::runtime::merge::merge(&app.execs, &app.forges, &task_id, &actor.0).await?))
}

/// `GET …/merge`: how the execution's merge stands; 404 before one began.
async fn merge_state(
    State(app): State<AppState>,
    Path(task_id): Path<String>,
) -> Result<Json<crate::store::MergeRow>, AppError> {
    // An unknown execution is "no execution", not "not merged" (found by a fresh-clone tester).
    load(&app, &task_id).await?;
    match app.execs.store().merge(&task_id).await.map_err(anyhow::Error::from)? {
        Some(row) => Ok(Json(row)),
        None => Err(AppError::NotFound(format!("execution {task_id} has not been merged"))),
    }
}
