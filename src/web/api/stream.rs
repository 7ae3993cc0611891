//! Live updates as Server-Sent Events.
//!
//! `GET /api/v1/executions/{task_id}/stream`: the execution's journal, one event per journal
//! entry (`id` = seq, `event` = kind, `data` = the entry as JSON), from the entry after
//! `Last-Event-ID` (or `?after=SEQ`), so a reconnecting client loses nothing; the stream ends
//! once the execution is final and everything was sent. `GET /api/v1/stream`: an event
//! `changed` whenever any spec or execution changed (the board re-renders on it). Both read
//! the database every [`POLL`], so changes made by other processes show up too; on PostgreSQL
//! they also wake as soon as any replica commits a change (the state's
//! [`Bell`](crate::runtime::changes::Bell), LISTEN/NOTIFY), so clients of every replica see it at
//! once.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures_util::stream::{self, Stream};
use serde::Deserialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::web::api::executions::JournalEntry;
use crate::web::api::openapi::BadRequest;
use crate::web::error::AppError;
use crate::web::AppState;

/// How often a stream looks at the database.
pub const POLL: Duration = Duration::from_millis(500);

/// Waits one [`POLL`], or less when the bell rings; false when the server began its shutdown
/// (the stream ends).
async fn pause(closing: &mut tokio::sync::watch::Receiver<bool>, bell: &mut crate::runtime::changes::Bell) -> bool {
    if *closing.borrow() {
        return false;
    }
    tokio::select! {
        () = bell.wait(POLL) => true,
        _ = closing.changed() => false,
    }
}

/// The stream routes.
pub(crate) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(journal_stream)).routes(routes!(board_stream))
}

/// `GET …/stream` query.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct StreamQuery {
    /// Resume after this journal seq when there is no `Last-Event-ID` header (0 or more).
    #[param(minimum = 0)]
    after: Option<i64>,
}

/// The `Last-Event-ID` header (documentation only: read by [`resume_after`]).
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code)]
struct LastEventId {
    /// The last journal seq received (0 or more); wins over `after`.
    #[serde(rename = "Last-Event-ID")]
    #[param(minimum = 0)]
    last_event_id: Option<i64>,
}

/// The seq to resume after: `Last-Event-ID`, else `?after`, else 0.
fn resume_after(headers: &HeaderMap, query: &StreamQuery) -> Result<i64, AppError> {
    if let Some(v) = headers.get("last-event-id") {
        // `details.field` names the header, as a bad `?after` names the parameter (it had
        // `details: null`, found by a tester).
        let bad = |message: String| AppError::BadQuery { message, field: "Last-Event-ID".into() };
        let text = v.to_str().map_err(|_| bad("Last-Event-ID: not text".into()))?;
        return text
            .trim()
            .parse::<i64>()
            .ok()
            .filter(|n| *n >= 0)
            .ok_or_else(|| bad(format!("Last-Event-ID: {text:?} is not a journal seq (0 or more)")));
    }
    match query.after {
        Some(n) if n < 0 => Err(AppError::bad_query("after: must be 0 or more")),
        Some(n) => Ok(n),
        None => Ok(0),
    }
}

/// The execution's journal as Server-Sent Events (`id` = seq, `event` = kind, `data` = the
/// journal entry), from the entry after `Last-Event-ID` or `after`; ends once the execution is
/// final and everything was sent.
#[utoipa::path(get, path = "/api/v1/executions/{task_id}/stream", tag = "stream", operation_id = "execution_stream",
    params(("task_id" = String, Path, description = "The execution's task id."), StreamQuery, LastEventId),
    responses(
        (status = 200, description = "The event stream; each `data` is a `JournalEntry`.", content_type = "text/event-stream", body = String),
        (status = 400, response = BadRequest),
    ))]
async fn journal_stream(
    State(app): State<AppState>,
    Path(task_id): Path<String>,
    headers: HeaderMap,
    query: Result<Query<StreamQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, AppError> {
    let Query(query) = query?;
    let after = resume_after(&headers, &query)?;
    if app.execs.summary(&task_id).await?.is_none() {
        return Err(AppError::NotFound(format!("no execution with task id {task_id}")));
    }
    struct Cursor {
        app: AppState,
        task_id: String,
        after: i64,
        pending: std::collections::VecDeque<SseEvent>,
        done: bool,
        closing: tokio::sync::watch::Receiver<bool>,
        bell: crate::runtime::changes::Bell,
    }
    let closing = app.closing();
    let bell = app.bell.clone();
    let cursor = Cursor { app, task_id, after, pending: Default::default(), done: false, closing, bell };
    let s = stream::unfold(cursor, |mut c| async move {
        loop {
            if let Some(ev) = c.pending.pop_front() {
                return Some((Ok(ev), c));
            }
            if c.done {
                return None;
            }
            let execs = &c.app.execs;
            let events = execs.journal(&c.task_id, c.after).await.ok().flatten().unwrap_or_default();
            for e in events {
                c.after = e.seq;
                let entry = JournalEntry::from_stored(e);
                let data = serde_json::to_string(&entry).unwrap_or_default();
                c.pending.push_back(SseEvent::default().id(entry.seq.to_string()).event(entry.kind.clone()).data(data));
            }
            if c.pending.is_empty() {
                let fin = execs
                    .summary(&c.task_id)
                    .await
                    .ok()
                    .flatten()
                    .is_none_or(|s| matches!(s.status.as_str(), "complete" | "cancelled"));
                if fin {
                    c.done = true;
                    continue;
                }
                if !pause(&mut c.closing, &mut c.bell).await {
                    return None;
                }
            }
        }
    });
    Ok(Sse::new(s).keep_alive(KeepAlive::default()))
}

/// An event `changed` whenever any spec or execution changed.
#[utoipa::path(get, path = "/api/v1/stream", tag = "stream", operation_id = "board_stream",
    responses((status = 200, description = "The event stream (`event: changed`).", content_type = "text/event-stream", body = String)))]
async fn board_stream(State(app): State<AppState>) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let first = app.execs.board_version().await.unwrap_or_default();
    let closing = app.closing();
    let bell = app.bell.clone();
    let s =
        stream::unfold((app, first, 0u64, closing, bell), |(app, mut seen, mut n, mut closing, mut bell)| async move {
            loop {
                if !pause(&mut closing, &mut bell).await {
                    return None;
                }
                let now = app.execs.board_version().await.unwrap_or_default();
                if now != seen {
                    seen = now;
                    n += 1;
                    let ev = SseEvent::default().id(n.to_string()).event("changed").data(seen.clone());
                    return Some((Ok(ev), (app, seen, n, closing, bell)));
                }
            }
        });
    Sse::new(s).keep_alive(KeepAlive::default())
}
