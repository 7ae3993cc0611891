//! Aggregates for `GET /metrics`: executions by status, spend, and journal totals (dispatches,
//! agent seconds, gate results), read at scrape time with a few aggregate queries.
//!
//! Owns only these read queries. They are the one place the store looks inside an event
//! payload, and only by name, in SQL: `duration_seconds` of `step_recorded` and `passed` of
//! `gate_recorded` (the journal's stable wire format). It never decodes an event, never writes,
//! and never imports anything above the store.

use super::{Store, StoreError};

/// Everything `/metrics` reads from the store: the database's totals, from one consistent read
/// transaction, and this process's group-commit counters.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetricTotals {
    /// Executions per summary status (`running`, `complete`, …), sorted by status; statuses
    /// with no execution are absent.
    pub executions_by_status: Vec<(String, i64)>,
    /// Sum of every execution's `spend_usd`.
    pub spend_usd: f64,
    /// `step_dispatched` events in every journal.
    pub dispatches: i64,
    /// Sum of `duration_seconds` over every `step_recorded` event (agent wall time).
    pub agent_seconds: f64,
    /// `gate_recorded` events with `passed: true`.
    pub gates_passed: i64,
    /// `gate_recorded` events with `passed: false`.
    pub gates_failed: i64,
    /// `gate_skipped` events (a gate with nothing to run: neither a pass nor a failure).
    pub gates_skipped: i64,
    /// Commits of the journal's group path (one fsync each) that appended events, since this
    /// process opened the store.
    pub journal_commits: u64,
    /// Events those commits appended; `journal_appends / journal_commits` is the mean group
    /// size (1 when appends never overlap).
    pub journal_appends: u64,
}

/// The journal aggregates of one scan, in the order of [`JOURNAL_TOTALS`]' columns.
#[derive(sqlx::FromRow)]
struct JournalRow {
    dispatches: i64,
    agent_seconds: f64,
    gates_passed: i64,
    gates_failed: i64,
    gates_skipped: i64,
}

/// One pass over the events of the four kinds that matter (a row's payload is only parsed
/// when its kind needs a field). `total()` is SQLite's sum that is always a float (0.0 over no
/// rows).
const JOURNAL_TOTALS: &str = "select \
     coalesce(sum(kind = 'step_dispatched'), 0) as dispatches, \
     total(case when kind = 'step_recorded' then json_extract(payload, '$.duration_seconds') end) as agent_seconds, \
     coalesce(sum(kind = 'gate_recorded' and json_extract(payload, '$.passed') = 1), 0) as gates_passed, \
     coalesce(sum(kind = 'gate_recorded' and coalesce(json_extract(payload, '$.passed'), 0) = 0), 0) as gates_failed, \
     coalesce(sum(kind = 'gate_skipped'), 0) as gates_skipped \
     from execution_events where kind in ('step_dispatched', 'step_recorded', 'gate_recorded', 'gate_skipped')";

impl Store {
    /// The totals `/metrics` exposes, read in one transaction (so the families agree).
    ///
    /// Cost: the summary table is small (one row per execution); the journal totals scan the
    /// events of four kinds, so a scrape costs time linear in the journal's size.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn metric_totals(&self) -> Result<MetricTotals, StoreError> {
        let lite = on_backend!(self, pg => pg.metric_totals().await);
        let mut tx = lite.begin_read().await?;
        let executions_by_status = sqlx::query_as::<_, (String, i64)>(
            "select status, count(*) from executions group by status order by status",
        )
        .fetch_all(&mut *tx)
        .await?;
        let spend_usd =
            sqlx::query_scalar::<_, f64>("select total(spend_usd) from executions").fetch_one(&mut *tx).await?;
        let journal = sqlx::query_as::<_, JournalRow>(JOURNAL_TOTALS).fetch_one(&mut *tx).await?;
        tx.commit().await?;
        let (journal_commits, journal_appends) = lite.writer.group_stats();
        Ok(MetricTotals {
            executions_by_status,
            spend_usd,
            dispatches: journal.dispatches,
            agent_seconds: journal.agent_seconds,
            gates_passed: journal.gates_passed,
            gates_failed: journal.gates_failed,
            gates_skipped: journal.gates_skipped,
            journal_commits,
            journal_appends,
        })
    }
}
