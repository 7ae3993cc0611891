//! The raw rows of the portfolio figures (the metrics page, `GET /api/v1/metrics`): spec
//! transitions, executions with their forecast and spend, the spend ledger by week, agent and
//! model, and gate runs by gate type, each filtered by project and time range.
//!
//! Owns only these read queries, from one consistent read transaction. Like `metrics.rs` it
//! reads event payloads only by name, in SQL (`steps.*.mid_usd` of `forecasted`, `phase_id` and
//! `passed` of `gate_recorded`, a phase's `gate.gate_type` in the stored plan); it never
//! decodes an event, never judges a figure (the runtime's `portfolio` view does), never
//! writes, and never imports anything above the store.

use super::{Store, StoreError};

/// What [`Store::portfolio_rows`] reads: `project` (`None`: every project; executions fired
/// from no spec count only then), and the range `[from, until)` as RFC 3339 text (or plain
/// dates, `2026-11-01`), compared as text: timestamps are UTC with a fixed width.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortfolioFilter {
    /// Only this project's specs and their executions.
    pub project: Option<String>,
    /// First instant counted.
    pub from: String,
    /// First instant no longer counted.
    pub until: String,
}

/// One spec transition before `until` (the cumulative flow replays them).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct SpecTransitionRow {
    /// The spec.
    pub spec_id: i64,
    /// Status after (`model::spec::SpecStatus` string).
    pub to_status: String,
    /// When (RFC 3339).
    pub at: String,
    /// The spec's execution's summary status now (`complete`, `failed`, …), if fired.
    pub execution_status: Option<String>,
    /// When that execution last changed (RFC 3339): when it ended, for an ended one.
    pub execution_updated_at: Option<String>,
    /// When its execution's pull request was opened (RFC 3339): the spec's newest `pr_opened`
    /// event (later writes to the merge row, a remediation round's push, do not move it; the
    /// row's `updated_at` only for a pull request opened before that event was written);
    /// `None` when none is open.
    pub pr_opened_at: Option<String>,
}

/// A spec merged in the range, with the fire that led to it.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct MergedSpecRow {
    /// The spec.
    pub spec_id: i64,
    /// Its title (untrusted text).
    pub title: String,
    /// Its latest `fire` before the merge (RFC 3339); `None` when it has none.
    pub fired_at: Option<String>,
    /// When it was marked merged (RFC 3339).
    pub merged_at: String,
}

/// An execution created in the range, with its own forecast and what it spent.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct ExecutionSpendRow {
    /// The execution.
    pub task_id: String,
    /// Its spec's title, when fired from one (untrusted text).
    pub title: Option<String>,
    /// Summary status.
    pub status: String,
    /// Created (RFC 3339).
    pub created_at: String,
    /// The sum of its `forecasted` event's mid forecasts, USD; `None` without one.
    pub forecast_usd: Option<f64>,
    /// Spend so far, USD.
    pub spend_usd: f64,
}

/// Spend of one agent on one model in one week (Monday to Sunday, UTC).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct WeeklySpendRow {
    /// The week's Monday (`2026-11-30`).
    pub week: String,
    /// Agent name (from the plan: untrusted text).
    pub agent_name: String,
    /// Model (empty when the attempt did not say).
    pub model: String,
    /// Recorded attempts.
    pub attempts: i64,
    /// Their cost, USD.
    pub usd: f64,
}

/// Gate runs of one gate type.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct GateRunsRow {
    /// The phase's gate type in the plan (`test`, `lint`, …; plan text), or `phase N` when
    /// the phase is no longer in the stored plan.
    pub gate_type: String,
    /// Runs (`gate_recorded` events).
    pub runs: i64,
    /// Runs that failed.
    pub failed: i64,
}

/// Everything [`Store::portfolio_rows`] returns.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PortfolioRows {
    /// Spec transitions before `until`, by spec then order.
    pub transitions: Vec<SpecTransitionRow>,
    /// Specs merged in the range, by merge time.
    pub merged: Vec<MergedSpecRow>,
    /// Executions created in the range, oldest first.
    pub executions: Vec<ExecutionSpendRow>,
    /// Spend by week, agent and model in the range.
    pub weekly_spend: Vec<WeeklySpendRow>,
    /// Gate runs in the range by gate type.
    pub gates: Vec<GateRunsRow>,
}

/// `s` is the spec of `task_id` (a left join: `s.project` is null for an execution fired from
/// no spec), filtered by `?1` (project or null).
const PROJECT_OF_TASK: &str = "(?1 is null or s.project = ?1)";

impl Store {
    /// The rows of the portfolio figures for `f`, in one read transaction.
    ///
    /// Cost: spec transitions and merges are read whole for the project (a spec has a handful);
    /// the forecast, spend and gate figures read the journal's `forecasted`, `step_recorded`
    /// and `gate_recorded` events in the range (a page an operator opens, not a hot path).
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn portfolio_rows(&self, f: &PortfolioFilter) -> Result<PortfolioRows, StoreError> {
        let lite = on_backend!(self, pg => pg.portfolio_rows(f).await);
        let mut tx = lite.begin_read().await?;
        let transitions = sqlx::query_as::<_, SpecTransitionRow>(
            "select ev.spec_id, ev.to_status, ev.at, e.status as execution_status, \
             e.updated_at as execution_updated_at, \
             case when m.task_id is not null then coalesce((select max(po.at) from spec_events po \
               where po.spec_id = s.spec_id and po.action = 'pr_opened'), m.updated_at) end as pr_opened_at \
             from spec_events ev join specs s on s.spec_id = ev.spec_id \
             left join executions e on e.task_id = s.task_id \
             left join merges m on m.task_id = s.task_id and m.state = 'opened' and m.pr_url != '' \
             where (?1 is null or s.project = ?1) and ev.at < ?2 order by ev.spec_id, ev.seq",
        )
        .bind(&f.project)
        .bind(&f.until)
        .fetch_all(&mut *tx)
        .await?;
        let merged = sqlx::query_as::<_, MergedSpecRow>(
            "select s.spec_id, s.title, m.at as merged_at, \
             (select max(fe.at) from spec_events fe where fe.spec_id = m.spec_id and fe.action = 'fire' \
              and fe.at <= m.at) as fired_at \
             from spec_events m join specs s on s.spec_id = m.spec_id \
             where m.to_status = 'merged' and m.from_status != 'merged' and (?1 is null or s.project = ?1) \
               and m.at >= ?2 and m.at < ?3 order by m.at, s.spec_id",
        )
        .bind(&f.project)
        .bind(&f.from)
        .bind(&f.until)
        .fetch_all(&mut *tx)
        .await?;
        let executions = sqlx::query_as::<_, ExecutionSpendRow>(&format!(
            "select e.task_id, s.title, e.status, e.created_at, e.spend_usd, \
             (select case when count(distinct fe.seq) > 0 then total(json_extract(st.value, '$.mid_usd')) end \
              from execution_events fe, json_each(fe.payload, '$.steps') st \
              where fe.task_id = e.task_id and fe.kind = 'forecasted') as forecast_usd \
             from executions e left join specs s on s.task_id = e.task_id \
             where {PROJECT_OF_TASK} and e.created_at >= ?2 and e.created_at < ?3 order by e.created_at, e.task_id"
        ))
        .bind(&f.project)
        .bind(&f.from)
        .bind(&f.until)
        .fetch_all(&mut *tx)
        .await?;
        let weekly_spend = sqlx::query_as::<_, WeeklySpendRow>(&format!(
            "select date(l.at, 'weekday 0', '-6 days') as week, coalesce(l.agent_name, '') as agent_name, \
             l.model, count(*) as attempts, total(l.cost_usd) as usd \
             from spend_ledger l left join specs s on s.task_id = l.task_id \
             where {PROJECT_OF_TASK} and l.at >= ?2 and l.at < ?3 \
             group by week, l.agent_name, l.model order by week, l.agent_name, l.model"
        ))
        .bind(&f.project)
        .bind(&f.from)
        .bind(&f.until)
        .fetch_all(&mut *tx)
        .await?;
        let gates = sqlx::query_as::<_, GateRunsRow>(&format!(
            "select coalesce((select json_extract(ph.value, '$.gate.gate_type') from json_each(p.plan_json, '$.phases') ph \
               where json_extract(ph.value, '$.phase_id') = json_extract(g.payload, '$.phase_id')), \
               'phase ' || json_extract(g.payload, '$.phase_id')) as gate_type, \
             count(*) as runs, \
             coalesce(sum(coalesce(json_extract(g.payload, '$.passed'), 0) = 0), 0) as failed \
             from execution_events g join execution_plans p on p.task_id = g.task_id \
             left join specs s on s.task_id = g.task_id \
             where g.kind = 'gate_recorded' and {PROJECT_OF_TASK} and g.at >= ?2 and g.at < ?3 \
             group by 1 order by 1"
        ))
        .bind(&f.project)
        .bind(&f.from)
        .bind(&f.until)
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(PortfolioRows { transitions, merged, executions, weekly_spend, gates })
    }
}
