//! Executions over REST: list, show, journal, next action, and recording events (the CLI's
//! driver contract: `record`, `approve`, `feedback`, `cancel`, `retry-step`, `skip`, …).
//!
//! Every recording route parses its body into an event and calls the operator service
//! ([`crate::runtime::ops::Ops`]), which decides (role, separate reviewer, idempotency,
//! the record lock, signing); this module only formats its answer.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::model::action::Action;
use crate::model::event::{Event, EventKind};
use crate::model::state::{ApprovalDecision, ExecutionState};
use crate::runtime::ops::{keyed, Decided, Operator, Ops, PauseState};
use crate::web::api::openapi::{BadGateway, BadRequest, Conflict, NotFound};
use crate::web::error::{AppError, Problem};
use crate::web::extract::{decode_object, Actor, ApiJson, ApiJsonOrEmpty, Caller};
use crate::web::AppState;

/// Routes under `/api/v1/executions`.
pub(crate) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(show))
        .routes(routes!(journal))
        .routes(routes!(next))
        .routes(routes!(record_event))
        .routes(routes!(approve))
        .routes(routes!(feedback))
        .routes(routes!(cancel))
        .routes(routes!(retry_step))
        .routes(routes!(skip))
        .routes(routes!(gate))
        .routes(routes!(interact))
        .routes(routes!(amend))
        .routes(routes!(pause))
        .routes(routes!(resume))
        .routes(routes!(merge_state, merge))
        .routes(routes!(budget))
}

/// The `{task_id}` path parameter.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // Documents the parameter; handlers take it as `Path<String>`.
struct TaskIdParam {
    /// The execution's task id.
    task_id: String,
}

/// One execution in the list (its board summary).
#[derive(Debug, Serialize, utoipa::ToSchema)]
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

/// Every execution, as its board summary.
#[utoipa::path(get, path = "/", tag = "executions", operation_id = "list_executions",
    responses((status = 200, description = "The executions.", body = Vec<ExecutionListItem>)))]
async fn list(State(app): State<AppState>) -> Result<Json<Vec<ExecutionListItem>>, AppError> {
    let rows = app.execs.list().await?;
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
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ExecutionView {
    /// The whole state (plan, results, counters, …).
    #[serde(flatten)]
    pub state: ExecutionState,
    /// What the engine asks for next.
    pub next_action: Action,
    /// Paused by an operator: no new dispatches until resumed (its status stays the engine's).
    pub paused: bool,
    /// Why its driver parked it (paused until a human acts, e.g. `feature branch `baton/x` is
    /// checked out at PATH: switch away and resume`); absent when it is not parked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parked: Option<String>,
    /// Its pull request once opened (number, address, `open` / `merged` / `closed_unmerged`);
    /// absent before.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pull_request: Option<crate::model::spec::PullRequest>,
}

/// The execution `task_id`, or 404.
pub(crate) async fn load(app: &AppState, task_id: &str) -> Result<std::sync::Arc<ExecutionState>, AppError> {
    app.execs.load_shared(task_id).await?.ok_or_else(|| no_such(task_id))
}

fn no_such(task_id: &str) -> AppError {
    AppError::NotFound(format!("no execution with task id {task_id}"))
}

/// An execution's whole state with the next action.
#[utoipa::path(get, path = "/{task_id}", tag = "executions", operation_id = "show_execution", params(TaskIdParam),
    responses((status = 200, description = "The execution.", body = ExecutionView)))]
async fn show(State(app): State<AppState>, Path(task_id): Path<String>) -> Result<Json<ExecutionView>, AppError> {
    let state = load(&app, &task_id).await?;
    // What `GET …/next` answers (held back while paused or driven): the engine's own answer
    // here had said DISPATCH for a paused execution.
    let next_action = app.ops.peek_next_action(&state).await?;
    let paused = app.execs.is_paused(&task_id).await?;
    let parked = app.execs.park_reason(&task_id).await?;
    let pull_request = app.execs.pull_request(&task_id).await?;
    Ok(Json(ExecutionView { state: std::sync::Arc::unwrap_or_clone(state), next_action, paused, parked, pull_request }))
}

/// One journal entry; `payload` is the event's JSON.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct JournalEntry {
    /// Sequence number (1-based).
    pub seq: i64,
    /// Event kind.
    pub kind: String,
    /// When it was recorded (RFC 3339).
    pub at: String,
    /// The event.
    #[schema(value_type = Event)]
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

/// An execution's journal, oldest first.
#[utoipa::path(get, path = "/{task_id}/journal", tag = "executions", operation_id = "execution_journal", params(TaskIdParam),
    responses((status = 200, description = "Every journal entry.", body = Vec<JournalEntry>)))]
async fn journal(
    State(app): State<AppState>,
    Path(task_id): Path<String>,
) -> Result<Json<Vec<JournalEntry>>, AppError> {
    let events = app.execs.journal(&task_id, 0).await?.ok_or_else(|| no_such(&task_id))?;
    Ok(Json(events.into_iter().map(JournalEntry::from_stored).collect()))
}

/// `GET …/next` query.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct NextQuery {
    /// Every dispatchable action (an array) instead of the next one; when none is, an array
    /// of the one next action (never empty).
    #[serde(default)]
    #[param(default = false)]
    all: bool,
}

/// `GET …/next` answer: the next action, or with `?all=true` every dispatchable one.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum NextAnswer {
    /// The next action.
    One(Box<Action>),
    /// Every dispatchable action (`?all=true`), or the one next action when none is.
    All(Vec<Action>),
}

/// What the engine asks for next.
#[utoipa::path(get, path = "/{task_id}/next", tag = "executions", operation_id = "next_action", params(TaskIdParam, NextQuery),
    responses(
        (status = 200, description = "The next action (an array with `all=true`).", body = NextAnswer),
        (status = 400, response = BadRequest),
    ))]
async fn next(
    State(app): State<AppState>,
    Path(task_id): Path<String>,
    query: Result<Query<NextQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<NextAnswer>, AppError> {
    let Query(query) = query?;
    Ok(Json(if query.all {
        NextAnswer::All(app.ops.next_actions(&task_id).await?)
    } else {
        NextAnswer::One(Box::new(app.ops.next_action(&task_id).await?))
    }))
}

/// The answer to a recording request: 201 when recorded, 200 for a resend.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Recorded {
    /// False when the idempotency key was already applied (nothing changed).
    pub recorded: bool,
    /// The event's idempotency key (explicit or derived).
    pub idempotency_key: String,
    /// What the engine asks for next.
    pub next_action: Action,
}

impl From<&Decided> for Recorded {
    fn from(d: &Decided) -> Self {
        Recorded {
            recorded: d.recorded,
            idempotency_key: d.idempotency_key.clone(),
            next_action: d.next_action.clone(),
        }
    }
}

/// The status and body of a decision: 201 when recorded, 200 for a resend.
fn answer(d: &Decided) -> (StatusCode, Json<Recorded>) {
    (if d.recorded { StatusCode::CREATED } else { StatusCode::OK }, Json(Recorded::from(d)))
}

/// Records `event` for `op` through the operator service.
async fn record(
    app: &AppState,
    task_id: &str,
    event: Event,
    op: &Operator,
) -> Result<(StatusCode, Json<Recorded>), AppError> {
    Ok(answer(&app.ops.record(task_id, event, op).await?))
}

/// `POST …/events`: any [`Event`]; the actor is always the caller's (header, else `api`).
#[utoipa::path(post, path = "/{task_id}/events", tag = "executions", operation_id = "record_event", params(TaskIdParam),
    request_body = Event,
    responses(
        (status = 200, description = "Already recorded under this idempotency key: nothing changed.", body = Recorded),
        (status = 201, description = "Recorded.", body = Recorded),
        (status = 409, response = Conflict),
    ))]
async fn record_event(
    State(app): State<AppState>,
    Path(task_id): Path<String>,
    Caller(op): Caller,
    ApiJson(body): ApiJson<serde_json::Value>,
) -> Result<(StatusCode, Json<Recorded>), AppError> {
    refuse_unknown_event_fields(&body)?;
    let body: Event = decode_object(&body)?;
    record(&app, &task_id, keyed(body.kind, body.idempotency_key), &op).await
}

/// A field the event's kind does not have is refused (422 naming it), as every other body's
/// is: serde's flattened, internally tagged `Event` drops it, so `"outcom": "LGTM"` was
/// journaled as an empty outcome (found by a tester). The fields of each kind are its
/// schema's properties in the OpenAPI document, which the model's own types generate, with
/// the envelope's `idempotency_key` and `actor`. A body whose `kind` names no event is left to
/// the decoder's error.
fn refuse_unknown_event_fields(body: &serde_json::Value) -> Result<(), AppError> {
    use std::collections::{BTreeSet, HashMap};
    use std::sync::OnceLock;
    static FIELDS: OnceLock<HashMap<String, BTreeSet<String>>> = OnceLock::new();
    let fields = FIELDS.get_or_init(|| {
        let doc: serde_json::Value = serde_json::from_str(crate::web::api::openapi::openapi_json()).unwrap_or_default();
        let variants = doc.pointer("/components/schemas/EventKind/oneOf").and_then(|v| v.as_array());
        variants
            .into_iter()
            .flatten()
            .filter_map(|variant| {
                let properties = variant.get("properties")?.as_object()?;
                let kind = properties.get("kind")?.pointer("/enum/0")?.as_str()?.to_string();
                let names = properties.keys().cloned().chain(["idempotency_key".into(), "actor".into()]).collect();
                Some((kind, names))
            })
            .collect()
    });
    let (Some(object), Some(kind)) = (body.as_object(), body.get("kind").and_then(|k| k.as_str())) else {
        return Ok(());
    };
    let Some(known) = fields.get(kind) else { return Ok(()) };
    match object.keys().find(|key| !known.contains(key.as_str())) {
        Some(unknown) => Err(AppError::Body {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            message: format!(
                "unknown field `{unknown}` of a `{kind}` event, expected one of: {}",
                known.iter().map(String::as_str).collect::<Vec<_>>().join(", ")
            ),
            field: Some(unknown.clone()),
            at: None,
        }),
        None => Ok(()),
    }
}

/// `POST …/approve` body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ApproveBody {
    /// The phase whose approval is pending.
    pub phase_id: i64,
    /// The decision.
    pub result: ApprovalDecision,
    /// What to change (with `approve_with_feedback` or `reject`).
    #[serde(default)]
    pub feedback: String,
    /// Explicit idempotency key (default: derived from the decision).
    #[serde(default)]
    pub idempotency_key: Option<String>,
}

/// Decides the pending approval of a phase (reviewer).
#[utoipa::path(post, path = "/{task_id}/approve", tag = "executions", operation_id = "approve", params(TaskIdParam),
    request_body = ApproveBody,
    responses(
        (status = 200, description = "Already recorded under this idempotency key: nothing changed.", body = Recorded),
        (status = 201, description = "Recorded.", body = Recorded),
        (status = 409, response = Conflict),
    ))]
async fn approve(
    State(app): State<AppState>,
    Path(task_id): Path<String>,
    Caller(op): Caller,
    ApiJson(b): ApiJson<ApproveBody>,
) -> Result<(StatusCode, Json<Recorded>), AppError> {
    let d = app.ops.approve(&task_id, b.phase_id, b.result, b.feedback, b.idempotency_key, &op).await?;
    Ok(answer(&d))
}

/// `POST …/budget` body: the decision on an execution parked at its USD ceiling.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BudgetBody {
    /// `raise` or `stop`.
    pub decision: String,
    /// With `raise`: by how much, USD (> 0).
    #[serde(default)]
    pub by_usd: Option<f64>,
    /// Explicit idempotency key.
    #[serde(default)]
    pub idempotency_key: Option<String>,
}

/// Raises the ceiling of an execution parked at it, or stops it there.
#[utoipa::path(post, path = "/{task_id}/budget", tag = "executions", operation_id = "budget", params(TaskIdParam),
    request_body = BudgetBody,
    responses(
        (status = 200, description = "Already recorded under this idempotency key: nothing changed.", body = Recorded),
        (status = 201, description = "Recorded.", body = Recorded),
        (status = 409, response = Conflict),
    ))]
async fn budget(
    State(app): State<AppState>,
    Path(task_id): Path<String>,
    Caller(op): Caller,
    ApiJson(b): ApiJson<BudgetBody>,
) -> Result<(StatusCode, Json<Recorded>), AppError> {
    let decision = Ops::budget_decision(&b.decision, b.by_usd)?;
    Ok(answer(&app.ops.budget(&task_id, decision, b.idempotency_key, &op).await?))
}

/// `POST …/feedback` body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FeedbackBody {
    /// The phase asking.
    pub phase_id: i64,
    /// The question.
    pub question_id: String,
    /// The chosen option (0-based).
    pub chosen_index: usize,
    /// Explicit idempotency key.
    #[serde(default)]
    pub idempotency_key: Option<String>,
}

/// Answers a feedback question (reviewer).
#[utoipa::path(post, path = "/{task_id}/feedback", tag = "executions", operation_id = "feedback", params(TaskIdParam),
    request_body = FeedbackBody,
    responses(
        (status = 200, description = "Already recorded under this idempotency key: nothing changed.", body = Recorded),
        (status = 201, description = "Recorded.", body = Recorded),
        (status = 409, response = Conflict),
    ))]
async fn feedback(
    State(app): State<AppState>,
    Path(task_id): Path<String>,
    Caller(op): Caller,
    ApiJson(b): ApiJson<FeedbackBody>,
) -> Result<(StatusCode, Json<Recorded>), AppError> {
    let kind =
        EventKind::FeedbackRecorded { phase_id: b.phase_id, question_id: b.question_id, chosen_index: b.chosen_index };
    record(&app, &task_id, keyed(kind, b.idempotency_key), &op).await
}

/// `POST …/cancel` body (optional: no body at all cancels without a reason).
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = ExecutionCancelBody)]
pub struct CancelBody {
    /// Why.
    #[serde(default)]
    pub reason: String,
}

/// Cancels the execution.
#[utoipa::path(post, path = "/{task_id}/cancel", tag = "executions", operation_id = "cancel_execution", params(TaskIdParam),
    request_body = CancelBody,
    responses(
        (status = 200, description = "Already recorded under this idempotency key: nothing changed.", body = Recorded),
        (status = 201, description = "Recorded.", body = Recorded),
        (status = 409, response = Conflict),
    ))]
async fn cancel(
    State(app): State<AppState>,
    Path(task_id): Path<String>,
    Caller(op): Caller,
    ApiJsonOrEmpty(b): ApiJsonOrEmpty<CancelBody>,
) -> Result<(StatusCode, Json<Recorded>), AppError> {
    record(&app, &task_id, keyed(EventKind::Cancelled { reason: b.reason }, None), &op).await
}

/// `POST …/retry-step` body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RetryStepBody {
    /// The failed step.
    pub step_id: String,
}

/// Runs a failed step again.
#[utoipa::path(post, path = "/{task_id}/retry-step", tag = "executions", operation_id = "retry_step", params(TaskIdParam),
    request_body = RetryStepBody,
    responses(
        (status = 200, description = "Already recorded under this idempotency key: nothing changed.", body = Recorded),
        (status = 201, description = "Recorded.", body = Recorded),
        (status = 409, response = Conflict),
    ))]
async fn retry_step(
    State(app): State<AppState>,
    Path(task_id): Path<String>,
    Caller(op): Caller,
    ApiJson(b): ApiJson<RetryStepBody>,
) -> Result<(StatusCode, Json<Recorded>), AppError> {
    record(&app, &task_id, keyed(EventKind::StepRetried { step_id: b.step_id }, None), &op).await
}

/// `POST …/skip` body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SkipBody {
    /// The step.
    pub step_id: String,
    /// Why.
    #[serde(default)]
    pub reason: String,
}

/// Skips a step.
#[utoipa::path(post, path = "/{task_id}/skip", tag = "executions", operation_id = "skip_step", params(TaskIdParam),
    request_body = SkipBody,
    responses(
        (status = 200, description = "Already recorded under this idempotency key: nothing changed.", body = Recorded),
        (status = 201, description = "Recorded.", body = Recorded),
        (status = 409, response = Conflict),
    ))]
async fn skip(
    State(app): State<AppState>,
    Path(task_id): Path<String>,
    Caller(op): Caller,
    ApiJson(b): ApiJson<SkipBody>,
) -> Result<(StatusCode, Json<Recorded>), AppError> {
    let kind = EventKind::StepSkipped { step_id: b.step_id, reason: b.reason };
    record(&app, &task_id, keyed(kind, None), &op).await
}

/// `POST …/pause` and `…/resume` body: nothing, or an empty object (`{}`); any field is refused
/// (422) rather than silently ignored.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PauseBody {}

/// `POST …/pause`: no new dispatches until resumed.
#[utoipa::path(post, path = "/{task_id}/pause", tag = "executions", operation_id = "pause", params(TaskIdParam),
    request_body = PauseBody,
    responses(
        (status = 200, description = "Paused (or already paused).", body = PauseState),
        (status = 409, response = Conflict),
    ))]
async fn pause(
    State(app): State<AppState>,
    Path(task_id): Path<String>,
    Caller(op): Caller,
    ApiJsonOrEmpty(PauseBody {}): ApiJsonOrEmpty<PauseBody>,
) -> Result<Json<PauseState>, AppError> {
    Ok(Json(app.ops.set_paused(&task_id, true, &op).await?))
}

/// `POST …/resume`.
#[utoipa::path(post, path = "/{task_id}/resume", tag = "executions", operation_id = "resume", params(TaskIdParam),
    request_body = PauseBody,
    responses(
        (status = 200, description = "Resumed (or was not paused).", body = PauseState),
        (status = 409, response = Conflict),
    ))]
async fn resume(
    State(app): State<AppState>,
    Path(task_id): Path<String>,
    Caller(op): Caller,
    ApiJsonOrEmpty(PauseBody {}): ApiJsonOrEmpty<PauseBody>,
) -> Result<Json<PauseState>, AppError> {
    Ok(Json(app.ops.set_paused(&task_id, false, &op).await?))
}

/// `POST …/gate` body (an external driver's gate result).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GateBody {
    /// The phase whose gate ran.
    pub phase_id: i64,
    /// Whether it passed.
    pub passed: bool,
    /// The gate had nothing to run (the GATE action's `skip_reason`): recorded as
    /// `gate_skipped`, never a pass; `passed` must then be false.
    #[serde(default)]
    pub skipped: bool,
    /// Its output.
    #[serde(default)]
    pub output: String,
    /// The command run.
    #[serde(default)]
    pub command: Option<String>,
    /// Its exit code.
    #[serde(default)]
    pub exit_code: Option<i32>,
    /// Explicit idempotency key.
    #[serde(default)]
    pub idempotency_key: Option<String>,
}

/// Records an external driver's gate result.
#[utoipa::path(post, path = "/{task_id}/gate", tag = "executions", operation_id = "record_gate", params(TaskIdParam),
    request_body = GateBody,
    responses(
        (status = 200, description = "Already recorded under this idempotency key: nothing changed.", body = Recorded),
        (status = 201, description = "Recorded.", body = Recorded),
        (status = 409, response = Conflict),
    ))]
async fn gate(
    State(app): State<AppState>,
    Path(task_id): Path<String>,
    Caller(op): Caller,
    ApiJson(b): ApiJson<GateBody>,
) -> Result<(StatusCode, Json<Recorded>), AppError> {
    let kind = match (b.skipped, b.passed) {
        (true, true) => {
            return Err(AppError::invalid_field(
                "skipped",
                "a skipped gate is not a pass; send passed: false with skipped: true",
            ))
        }
        (true, false) => EventKind::GateSkipped { phase_id: b.phase_id, reason: b.output },
        (false, passed) => EventKind::GateRecorded {
            phase_id: b.phase_id,
            passed,
            output: b.output,
            command: b.command,
            exit_code: b.exit_code,
        },
    };
    record(&app, &task_id, keyed(kind, b.idempotency_key), &op).await
}

/// `POST …/interact` body: a reply to an interactive step, or `complete: true` to end it.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct InteractBody {
    /// The interactive step.
    pub step_id: String,
    /// The reply.
    #[serde(default)]
    pub input: String,
    /// End the step instead of replying.
    #[serde(default)]
    pub complete: bool,
    /// Explicit idempotency key.
    #[serde(default)]
    pub idempotency_key: Option<String>,
}

/// Replies to an interactive step, or ends it (reviewer).
#[utoipa::path(post, path = "/{task_id}/interact", tag = "executions", operation_id = "interact", params(TaskIdParam),
    request_body = InteractBody,
    responses(
        (status = 200, description = "Already recorded under this idempotency key: nothing changed.", body = Recorded),
        (status = 201, description = "Recorded.", body = Recorded),
        (status = 409, response = Conflict),
    ))]
async fn interact(
    State(app): State<AppState>,
    Path(task_id): Path<String>,
    Caller(op): Caller,
    ApiJson(b): ApiJson<InteractBody>,
) -> Result<(StatusCode, Json<Recorded>), AppError> {
    if b.complete && !b.input.is_empty() {
        return Err(AppError::invalid_field("complete", "give either input (a reply) or complete: true, not both"));
    }
    let kind = if b.complete {
        EventKind::InteractCompleted { step_id: b.step_id }
    } else {
        EventKind::InteractInput { step_id: b.step_id, input: b.input }
    };
    record(&app, &task_id, keyed(kind, b.idempotency_key), &op).await
}

/// `POST …/amend` body: the fields of an `amended` event, without `kind`. A wrongly shaped
/// one is refused naming its field (`details.field`, e.g. `phases[0].name`).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AmendBody {
    /// Why.
    pub description: String,
    /// What amended (default `manual`).
    #[serde(default = "crate::model::event::default_trigger")]
    pub trigger: String,
    /// New phases (their ids are assigned by renumbering).
    #[serde(default)]
    pub phases: Vec<crate::model::plan::PlanPhase>,
    /// Insert the phases after the phase with this id (default: after the current phase).
    #[serde(default)]
    pub after_phase: Option<i64>,
    /// Steps appended to existing phases.
    #[serde(default)]
    pub steps: Vec<crate::model::event::AddedStep>,
    /// Explicit idempotency key.
    #[serde(default)]
    pub idempotency_key: Option<String>,
}

/// Amends the plan: phases inserted after a phase, or steps appended to existing phases.
#[utoipa::path(post, path = "/{task_id}/amend", tag = "executions", operation_id = "amend", params(TaskIdParam),
    request_body = AmendBody,
    responses(
        (status = 200, description = "Already recorded under this idempotency key: nothing changed.", body = Recorded),
        (status = 201, description = "Recorded.", body = Recorded),
        (status = 409, response = Conflict),
    ))]
async fn amend(
    State(app): State<AppState>,
    Path(task_id): Path<String>,
    Caller(op): Caller,
    ApiJson(b): ApiJson<AmendBody>,
) -> Result<(StatusCode, Json<Recorded>), AppError> {
    let kind = EventKind::Amended {
        description: b.description,
        trigger: b.trigger,
        phases: b.phases,
        after_phase: b.after_phase,
        steps: b.steps,
    };
    record(&app, &task_id, keyed(kind, b.idempotency_key), &op).await
}

/// `POST …/merge`: push the feature branch and find or open the pull request (idempotent).
#[utoipa::path(post, path = "/{task_id}/merge", tag = "executions", operation_id = "merge", params(TaskIdParam),
    responses(
        (status = 200, description = "Pushed, and the pull request found or opened.", body = crate::store::MergeRow),
        (status = 409, response = Conflict),
        (status = 502, response = BadGateway),
        (status = 503, description = "The forge rate-limits (`forge_rate_limited`, with `Retry-After`) or is not configured (`forge_unconfigured`).", body = Problem),
    ))]
async fn merge(
    State(app): State<AppState>,
    Path(task_id): Path<String>,
    actor: Actor,
) -> Result<Json<crate::store::MergeRow>, AppError> {
    Ok(Json(crate::runtime::merge::merge(&app.execs, &app.forges, &task_id, &actor.0).await?))
}

/// `GET …/merge`: how the execution's merge stands; 404 before one began.
#[utoipa::path(get, path = "/{task_id}/merge", tag = "executions", operation_id = "merge_state", params(TaskIdParam),
    responses(
        (status = 200, description = "The merge.", body = crate::store::MergeRow),
        (status = 404, response = NotFound),
    ))]
async fn merge_state(
    State(app): State<AppState>,
    Path(task_id): Path<String>,
) -> Result<Json<crate::store::MergeRow>, AppError> {
    // An unknown execution is "no execution", not "not merged" (found by a fresh-clone tester).
    load(&app, &task_id).await?;
    match app.execs.merge_row(&task_id).await? {
        Some(row) => Ok(Json(row)),
        None => Err(AppError::NotFound(format!("execution {task_id} has not been merged"))),
    }
}
