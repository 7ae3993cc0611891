//! The execution page (phases, steps, gates, journal, log tails) and its forms: pause, resume,
//! cancel, retries, skips and the approval, feedback and interact decisions. Decisions go
//! through `runtime::ops`; this file only reads forms, renders and redirects.

use askama::Template;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use serde::Deserialize;

use super::shared::{check_csrf, form_usd, layout, render, see_other, Page, Who};
use crate::engine;
use crate::model::action::{Action, ApprovalAction, FeedbackAction, InteractAction};
use crate::model::budget::TokenCounts;
use crate::model::event::EventKind;
use crate::model::state::{ApprovalDecision, ExecutionState, StepStatus};
use crate::runtime::ops::{keyed, Ops};
use crate::runtime::review::{self, PhaseReview};
use crate::runtime::runs;
use crate::web::error::AppError;
use crate::web::extract::PageForm;
use crate::web::layout::{back_to, Layout, PageError};
use crate::web::AppState;

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
    /// Some of `cost_usd` is priced from tokens (the agent reported no cost).
    cost_estimated: bool,
    /// Its tokens by kind (`in 10 · out 159 · cache 18,986`), empty when none were reported;
    /// with the cache's writes and reads apart, for the cell's title.
    tokens: (String, String),
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
    /// Its pull request once opened, and where it stands.
    pull_request: Option<crate::model::spec::PullRequest>,
    /// Remediation on the pull request (issue 19.3/4): rounds used, and why Baton parked.
    remediation: Option<(String, Option<String>)>,
    final_: bool,
    driver: Option<String>,
    steps_done: u64,
    steps_total: u64,
    spend_usd: f64,
    /// The part of `spend_usd` spent by steps whose cost is (partly) estimated, USD.
    estimated_usd: f64,
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

/// `1234567` as `1,234,567`.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, d) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(d);
    }
    out
}

/// A step's tokens by kind as the page shows them: (`in 10 · out 159 · cache 18,986`, the
/// cache's writes and reads apart); both empty without tokens.
fn token_kinds(t: &TokenCounts) -> (String, String) {
    if t.is_zero() {
        return (String::new(), String::new());
    }
    let mut line = format!("in {} · out {}", grouped(t.input), grouped(t.output));
    if t.cache() > 0 {
        line.push_str(&format!(" · cache {}", grouped(t.cache())));
    }
    let title = format!(
        "{} input, {} output, {} written to the prompt cache, {} read from it",
        grouped(t.input),
        grouped(t.output),
        grouped(t.cache_write),
        grouped(t.cache_read)
    );
    (line, title)
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
                        cost_estimated: r.is_some_and(|r| r.cost_estimated),
                        tokens: r.map(|r| token_kinds(&r.token_kinds)).unwrap_or_default(),
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
                        ) && (i > state.current_phase && !member || i == state.current_phase)
                            // A rejection stands until an amendment: a skip is refused.
                            && state.rejected_phase.is_none(),
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

pub(super) async fn execution_page(
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
    let pull_request = app.execs.pull_request(&task_id).await?;
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
        // The pool's `parked` (waiting for a decision or an event, lease released) is not the
        // execution's park above (held until a human acts): the page says `idle`, so a waiting
        // approval does not read as "parked".
        crate::runtime::pool::DriverState::Parked => "idle".to_string(),
        crate::runtime::pool::DriverState::Errored(e) => format!("errored: {e}"),
    });
    let t = ExecutionTemplate {
        layout,
        spec_id,
        status: state.status.as_str().to_string(),
        paused,
        parked,
        pull_request,
        remediation: (!state.remediation.is_untouched()).then(|| {
            let r = &state.remediation;
            let ci = r.used(crate::model::state::RemediationCause::Ci);
            let review = r.used(crate::model::state::RemediationCause::Review);
            (format!("fix rounds: {ci} CI, {review} review"), r.parked.clone())
        }),
        final_: state.status.is_final(),
        driver,
        steps_done: done,
        steps_total: total,
        spend_usd: state.counters.spend_usd,
        estimated_usd: state.step_results.values().filter(|r| r.cost_estimated).map(|r| r.cost_usd).sum(),
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
pub(super) struct ExecutionForm {
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

pub(super) type ExecutionFormResult = Result<PageForm<ExecutionForm>, AppError>;

pub(super) async fn execution_action(
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
        pub(super) async fn $name(
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
    let PageForm(f) = form.map_err(back_to(page.clone()))?;
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
                "raise" => Some(form_usd("by_usd", &f.by_usd).map_err(back_to(page.clone()))?),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_kinds_read_with_thousands_and_the_cache_apart() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1000), "1,000");
        assert_eq!(grouped(1_234_567), "1,234,567");
        assert_eq!(token_kinds(&TokenCounts::default()), (String::new(), String::new()));
        let t = TokenCounts { input: 2821, cache_write: 6346, cache_read: 12640, output: 379 };
        let (line, title) = token_kinds(&t);
        assert_eq!(line, "in 2,821 · out 379 · cache 18,986");
        assert_eq!(title, "2,821 input, 379 output, 6,346 written to the prompt cache, 12,640 read from it");
        let plain = TokenCounts { input: 5, output: 1, ..TokenCounts::default() };
        assert_eq!(token_kinds(&plain).0, "in 5 · out 1", "no cache part without cache tokens");
    }
}
