//! The board's cards and version, `/metrics` totals, the portfolio rows and the CI waits on
//! PostgreSQL (see `pmo.rs`, `metrics.rs`, `portfolio.rs` and `ci.rs` of the store for the
//! contracts).
//!
//! Owns only these read queries, each set in one `repeatable read` transaction. Payload fields
//! are read by name with `jsonb` operators, the same fields SQLite's `json_extract` reads;
//! truthiness is SQLite's (`baton_json_truthy`, migration 0009). It never writes.

use super::super::ci::CiWaitRow;
use super::super::metrics::MetricTotals;
use super::super::pmo::CardRow;
use super::super::portfolio::{
    ExecutionSpendRow, GateRunsRow, MergedSpecRow, PortfolioFilter, PortfolioRows, SpecTransitionRow, WeeklySpendRow,
};
use super::super::StoreError;
use super::Pg;

/// One pass over the events of the four kinds `/metrics` counts.
const JOURNAL_TOTALS: &str = "select \
     count(*) filter (where kind = 'step_dispatched') as dispatches, \
     coalesce(sum((payload::jsonb ->> 'duration_seconds')::double precision) filter (where kind = 'step_recorded'), 0) \
       as agent_seconds, \
     count(*) filter (where kind = 'gate_recorded' and baton_json_truthy(payload::jsonb -> 'passed')) as gates_passed, \
     count(*) filter (where kind = 'gate_recorded' and not baton_json_truthy(payload::jsonb -> 'passed')) \
       as gates_failed, \
     count(*) filter (where kind = 'gate_skipped') as gates_skipped \
     from execution_events where kind in ('step_dispatched', 'step_recorded', 'gate_recorded', 'gate_skipped')";

/// `s` is the spec of the row's execution (a left join), filtered by `$1` (project or null).
const PROJECT_OF_TASK: &str = "($1::text is null or s.project = $1)";

impl Pg {
    pub(in super::super) async fn card_page(
        &self,
        stage_sql: &str,
        project: Option<&str>,
        archived: bool,
        offset: i64,
        limit: i64,
    ) -> Result<(Vec<CardRow>, Vec<(String, i64)>), StoreError> {
        let base = format!(
            "select s.spec_id, s.project, s.title, s.source, s.source_url, s.priority, s.status, s.risk, \
             (s.forecast_json::jsonb ->> 'mid_usd')::double precision as forecast_mid_usd, s.agents, \
             s.task_id, s.status_reason, s.updated_at, e.status as execution_status, e.current_phase, \
             e.steps_done, e.steps_total, e.spend_usd, ({stage_sql}) as stage, \
             exists (select 1 from settings p where p.key = 'paused:' || s.task_id) as paused, \
             (select p.value from settings p where p.key = 'paused:' || s.task_id and p.value != '1') as park_reason, \
             e.updated_at as execution_updated_at, l.forecast_usd as execution_forecast_usd, l.ceiling_usd, \
             coalesce(l.estimated_usd, 0.0) as spend_estimated_usd, \
             (select string_agg(r.step_id || ' ' || r.agent_name, E'\\n' order by r.step_id) \
               from execution_running r where r.task_id = s.task_id and r.running = 1) as running, \
             m.pr_number, m.pr_url, \
             (select q.account || ' ' || q.until from execution_quota_waits q where q.task_id = s.task_id \
              order by q.until limit 1) as quota_wait, \
             (select ci.done || ' ' || ci.total from execution_ci_waits ci where ci.task_id = s.task_id) as ci_wait, \
             (select rm.ci_rounds || ' ' || rm.review_rounds || ' ' || rm.parked from execution_remediation rm \
              where rm.task_id = s.task_id) as remediation \
             from specs s left join executions e on e.task_id = s.task_id \
             left join execution_live l on l.task_id = s.task_id \
             left join merges m on m.task_id = s.task_id and m.pr_url != '' \
             where ($1::text is null or s.project = $1) \
               and ($2::boolean = (s.status = 'cancelled' or coalesce(e.status, '') = 'cancelled'))"
        );
        let mut tx = self.begin_read().await?;
        let cards = sqlx::query_as::<_, CardRow>(&format!(
            "select * from (select c.*, row_number() over (partition by stage order by updated_at desc, spec_id desc) \
             as rank from ({base}) c) ranked where rank > $3 and rank <= $3 + $4 order by updated_at desc, spec_id desc"
        ))
        .bind(project)
        .bind(archived)
        .bind(offset)
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?;
        let counts =
            sqlx::query_as::<_, (String, i64)>(&format!("select stage, count(*) from ({base}) c group by stage"))
                .bind(project)
                .bind(archived)
                .fetch_all(&mut *tx)
                .await?;
        tx.commit().await?;
        Ok((cards, counts))
    }

    pub(in super::super) async fn ci_waits(&self) -> Result<Vec<CiWaitRow>, StoreError> {
        Ok(sqlx::query_as::<_, CiWaitRow>(
            "select task_id, phase_id, sha, until, done, total from execution_ci_waits order by task_id",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    pub(in super::super) async fn ci_wait(&self, task_id: &str) -> Result<Option<CiWaitRow>, StoreError> {
        Ok(sqlx::query_as::<_, CiWaitRow>(
            "select task_id, phase_id, sha, until, done, total from execution_ci_waits where task_id = $1",
        )
        .bind(task_id)
        .fetch_optional(&self.pool)
        .await?)
    }

    pub(in super::super) async fn board_version(&self) -> Result<String, StoreError> {
        Ok(sqlx::query_scalar::<_, String>(
            "select concat((select n from board_rev where id = 1), '|', count(*), ':', coalesce(sum(last_seq), 0)) \
             from executions",
        )
        .fetch_one(&self.pool)
        .await?)
    }

    pub(in super::super) async fn metric_totals(&self) -> Result<MetricTotals, StoreError> {
        let mut tx = self.begin_read().await?;
        let executions_by_status = sqlx::query_as::<_, (String, i64)>(
            "select status, count(*) from executions group by status order by status",
        )
        .fetch_all(&mut *tx)
        .await?;
        let spend_usd = sqlx::query_scalar::<_, f64>("select coalesce(sum(spend_usd), 0) from executions")
            .fetch_one(&mut *tx)
            .await?;
        let (dispatches, agent_seconds, gates_passed, gates_failed, gates_skipped) =
            sqlx::query_as::<_, (i64, f64, i64, i64, i64)>(JOURNAL_TOTALS).fetch_one(&mut *tx).await?;
        tx.commit().await?;
        let (journal_commits, journal_appends) = self.group_stats();
        Ok(MetricTotals {
            executions_by_status,
            spend_usd,
            dispatches,
            agent_seconds,
            gates_passed,
            gates_failed,
            gates_skipped,
            journal_commits,
            journal_appends,
        })
    }

    pub(in super::super) async fn portfolio_rows(&self, f: &PortfolioFilter) -> Result<PortfolioRows, StoreError> {
        let mut tx = self.begin_read().await?;
        let transitions = sqlx::query_as::<_, SpecTransitionRow>(
            "select ev.spec_id, ev.to_status, ev.at, e.status as execution_status, \
             e.updated_at as execution_updated_at, \
             case when m.task_id is not null then coalesce((select max(po.at) from spec_events po \
               where po.spec_id = s.spec_id and po.action = 'pr_opened'), m.updated_at) end as pr_opened_at \
             from spec_events ev join specs s on s.spec_id = ev.spec_id \
             left join executions e on e.task_id = s.task_id \
             left join merges m on m.task_id = s.task_id and m.state = 'opened' and m.pr_url != '' \
             where ($1::text is null or s.project = $1) and ev.at < $2 order by ev.spec_id, ev.seq",
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
             where m.to_status = 'merged' and m.from_status != 'merged' and ($1::text is null or s.project = $1) \
               and m.at >= $2 and m.at < $3 order by m.at, s.spec_id",
        )
        .bind(&f.project)
        .bind(&f.from)
        .bind(&f.until)
        .fetch_all(&mut *tx)
        .await?;
        let executions = sqlx::query_as::<_, ExecutionSpendRow>(&format!(
            "select e.task_id, s.title, e.status, e.created_at, e.spend_usd, \
             (select case when count(distinct fe.seq) > 0 \
               then coalesce(sum((st ->> 'mid_usd')::double precision), 0) end \
              from execution_events fe cross join lateral baton_json_values(fe.payload::jsonb -> 'steps') st \
              where fe.task_id = e.task_id and fe.kind = 'forecasted') as forecast_usd \
             from executions e left join specs s on s.task_id = e.task_id \
             where {PROJECT_OF_TASK} and e.created_at >= $2 and e.created_at < $3 order by e.created_at, e.task_id"
        ))
        .bind(&f.project)
        .bind(&f.from)
        .bind(&f.until)
        .fetch_all(&mut *tx)
        .await?;
        let weekly_spend = sqlx::query_as::<_, WeeklySpendRow>(&format!(
            "select to_char(date_trunc('week', l.at::timestamptz at time zone 'UTC'), 'YYYY-MM-DD') as week, \
             coalesce(l.agent_name, '') as agent_name, l.model, count(*) as attempts, \
             coalesce(sum(l.cost_usd), 0) as usd \
             from spend_ledger l left join specs s on s.task_id = l.task_id \
             where {PROJECT_OF_TASK} and l.at >= $2 and l.at < $3 \
             group by week, l.agent_name, l.model order by week, l.agent_name, l.model"
        ))
        .bind(&f.project)
        .bind(&f.from)
        .bind(&f.until)
        .fetch_all(&mut *tx)
        .await?;
        let gates = sqlx::query_as::<_, GateRunsRow>(&format!(
            "select gate_type, count(*) as runs, count(*) filter (where not passed) as failed from ( \
               select coalesce((select ph.value #>> '{{gate,gate_type}}' \
                 from jsonb_array_elements(case when jsonb_typeof(p.plan_json::jsonb -> 'phases') = 'array' \
                   then p.plan_json::jsonb -> 'phases' else '[]'::jsonb end) ph \
                 where ph.value -> 'phase_id' = g.payload::jsonb -> 'phase_id' limit 1), \
                 'phase ' || (g.payload::jsonb ->> 'phase_id')) as gate_type, \
               baton_json_truthy(g.payload::jsonb -> 'passed') as passed \
               from execution_events g join execution_plans p on p.task_id = g.task_id \
               left join specs s on s.task_id = g.task_id \
               where g.kind = 'gate_recorded' and {PROJECT_OF_TASK} and g.at >= $2 and g.at < $3) runs \
             group by gate_type order by gate_type"
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
