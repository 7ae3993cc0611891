//! Projects, specs and spec events (migration `0002_pmo.sql`).
//!
//! Owns the `projects`, `specs` and `spec_events` tables. A spec's status changes only by
//! [`Store::change_spec`], a compare-and-set on the status the caller saw, written with its
//! event in one transaction: two people acting on one spec at once get one change and one
//! [`StoreError::SpecChanged`]. Which transitions are legal is the caller's rule
//! (`model::spec`); the store never judges them.

use super::{Store, StoreError};

/// A registered project.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow, serde::Serialize, utoipa::ToSchema)]
pub struct ProjectRow {
    /// Unique name (1–64 characters).
    pub name: String,
    /// Absolute path of its git repository; empty for a project registered with its remote
    /// (`repo_url`) alone on PostgreSQL, whose repository is each replica's clone.
    pub repo_path: String,
    /// Branch its feature branches start from.
    pub default_branch: String,
    /// Agent profile of its executions (`demo`, `claude`, …).
    pub agent_profile: String,
    /// Test gate command; empty: detected at enrichment.
    pub test_command: String,
    /// Link to the repository on its forge; empty when none.
    pub forge_url: String,
    /// Concurrent agents across its executions; 0: only the global cap.
    pub max_agents: i64,
    /// When it was registered (RFC 3339).
    pub created_at: String,
    /// Whoever fired an execution may not decide its approvals.
    pub require_separate_reviewer: bool,
    /// The label that makes a GitHub issue a spec; empty: no issue is imported.
    pub trigger_label: String,
    /// The repository on its forge (`owner/name`, `ado:<org>/<project>` or an Azure DevOps
    /// project name) that webhooks map to this project; empty: none.
    pub forge_repo: String,
    /// Default USD ceiling of its executions (a spec's reviewed ceiling wins); `None`: none.
    pub budget_usd: Option<f64>,
    /// Its remote: a git URL (or the path of a bare repository) every replica clones under
    /// its data dir and, on PostgreSQL, pushes each feature branch to after every
    /// consolidation; empty: none (issue 17.3).
    pub repo_url: String,
}

/// A spec, whole.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow, serde::Serialize, utoipa::ToSchema)]
pub struct SpecRow {
    /// Id (1, 2, …).
    pub spec_id: i64,
    /// Project name.
    pub project: String,
    /// Title.
    pub title: String,
    /// Body (free text).
    pub body: String,
    /// `board`, `github`, `ado`.
    pub source: String,
    /// Link to where it came from; empty when written on the board.
    pub source_url: String,
    /// 0 (highest) … 3.
    pub priority: i64,
    /// Stored status (`model::spec::SpecStatus` string).
    pub status: String,
    /// Risk tier once enriched, else empty.
    pub risk: String,
    /// The plan (MachinePlan JSON) once enriched (left out of JSON when none, e.g. in the
    /// API's spec view, which carries it as `plan`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan_json: Option<String>,
    /// The forecast JSON once enriched (left out of JSON when none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forecast_json: Option<String>,
    /// Its execution once fired.
    pub task_id: Option<String>,
    /// Why it was last bounced, cancelled or failed to fire.
    pub status_reason: String,
    /// Who created it.
    pub created_by: String,
    /// Created (RFC 3339).
    pub created_at: String,
    /// Last changed (RFC 3339).
    pub updated_at: String,
    /// What else its forge said of it (`forge::ItemMeta` JSON; `{}` for board specs).
    pub source_meta: String,
    /// The USD ceiling its reviewer set for its execution; `None`: the project's default.
    pub budget_usd: Option<f64>,
}

/// A spec as a board card: its row without body and plan, joined with its execution's summary.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow, serde::Serialize)]
pub struct CardRow {
    /// Id.
    pub spec_id: i64,
    /// Project name.
    pub project: String,
    /// Title.
    pub title: String,
    /// `board`, `github`, `ado`.
    pub source: String,
    /// Link to where it came from.
    pub source_url: String,
    /// 0 … 3.
    pub priority: i64,
    /// Stored status.
    pub status: String,
    /// Risk tier.
    pub risk: String,
    /// Expected cost from the forecast, USD.
    pub forecast_mid_usd: Option<f64>,
    /// Distinct agent names of the plan, comma-separated (kept by a trigger when the plan is
    /// written; empty before enrichment).
    pub agents: Option<String>,
    /// Its execution once fired.
    pub task_id: Option<String>,
    /// Why it was last bounced or cancelled.
    pub status_reason: String,
    /// Last changed (RFC 3339).
    pub updated_at: String,
    /// The execution's status (`running`, `approval_pending`, …).
    pub execution_status: Option<String>,
    /// `"<id> <name>"` of the execution's current phase.
    pub current_phase: Option<String>,
    /// Steps done.
    pub steps_done: Option<i64>,
    /// Steps in the plan.
    pub steps_total: Option<i64>,
    /// Spend so far, USD.
    pub spend_usd: Option<f64>,
    /// The board column it falls in (the caller's stage expression).
    pub stage: String,
    /// Its execution is paused.
    pub paused: bool,
    /// Why its driver parked it ([`Store::park`]), when it did.
    pub park_reason: Option<String>,
    /// When its execution last changed (RFC 3339): its newest event.
    pub execution_updated_at: Option<String>,
    /// The execution's own forecast (sum of its steps' mid forecasts), USD (migration 0011's
    /// `execution_live`, kept by triggers on the journal).
    pub execution_forecast_usd: Option<f64>,
    /// The execution's ceiling, USD.
    pub ceiling_usd: Option<f64>,
    /// How much of its spend is estimated (tokens × the price table, for agents that report
    /// no cost), USD (migration 0014, kept by a trigger on the journal); 0 when none is.
    pub spend_estimated_usd: f64,
    /// The attempts running now, one `"<step> <agent>"` a line, by step (empty when none).
    pub running: Option<String>,
    /// Its pull request's number (GitHub) or id (Azure DevOps), once opened (`merges`).
    pub pr_number: Option<i64>,
    /// Its pull request's web address, once opened (`merges`; empty before).
    pub pr_url: Option<String>,
    /// The earliest quota wait of its steps as `"<account> <until>"` (migration 0013's
    /// `execution_quota_waits`), when one waits.
    #[sqlx(default)]
    pub quota_wait: Option<String>,
    /// Its ci gate's wait as `"<done> <total>"` (migration 0015's `execution_ci_waits`), when
    /// it waits for the forge's checks.
    #[sqlx(default)]
    pub ci_wait: Option<String>,
    /// Its remediation rounds as `"<ci rounds> <review rounds> <why parked>"` (migration
    /// 0016's `execution_remediation`), once one started or Baton parked.
    #[sqlx(default)]
    pub remediation: Option<String>,
}

/// An execution in one of the statuses asked for, with its spec's title
/// ([`Store::executions_in`]).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct StatusRow {
    /// The execution.
    pub task_id: String,
    /// Its summary status.
    pub status: String,
    /// Its current phase (`"<id> <name>"`).
    pub current_phase: String,
    /// When it last changed (RFC 3339).
    pub updated_at: String,
    /// Its spec's title, when it was fired from one.
    pub spec_title: Option<String>,
}

/// One transition of a spec.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Serialize, utoipa::ToSchema)]
pub struct SpecEventRow {
    /// 1, 2, … per spec.
    pub seq: i64,
    /// `create`, `enrich`, `approve`, … (`model::spec::SpecAction` strings, and `create`).
    pub action: String,
    /// Status before (empty for `create`).
    pub from_status: String,
    /// Status after.
    pub to_status: String,
    /// Who did it.
    pub actor: String,
    /// The reason or comment given.
    pub reason: String,
    /// When (RFC 3339).
    pub at: String,
}

/// A new spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSpec {
    /// Project name (must exist).
    pub project: String,
    /// Title.
    pub title: String,
    /// Body.
    pub body: String,
    /// `board`, `github`, `ado`.
    pub source: String,
    /// Link to where it came from.
    pub source_url: String,
    /// `forge::ItemMeta` JSON (`{}` for board specs).
    pub source_meta: String,
    /// The identity of its forge item (`forge::item_key`), unique among specs; empty for board
    /// specs.
    pub source_key: String,
    /// 0 … 3.
    pub priority: i64,
    /// Initial status (`draft`, `imported`).
    pub status: String,
    /// Who creates it.
    pub actor: String,
    /// When (RFC 3339).
    pub at: String,
}

/// What [`Store::insert_spec`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecInsert {
    /// A new spec, with this id.
    Created(i64),
    /// A spec with the same `source_key` exists (this id): nothing was written.
    Existing(i64),
}

/// A change of a spec: its event, and the columns it sets (`None`: unchanged).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpecChange {
    /// The action (`edit`, `enrich`, …).
    pub action: String,
    /// The status the caller saw; the change fails with [`StoreError::SpecChanged`] otherwise.
    pub expected: String,
    /// The status after.
    pub to: String,
    /// Who.
    pub actor: String,
    /// Reason or comment (also stored as `status_reason`).
    pub reason: String,
    /// When (RFC 3339).
    pub at: String,
    /// New title.
    pub title: Option<String>,
    /// New body.
    pub body: Option<String>,
    /// New priority.
    pub priority: Option<i64>,
    /// New risk tier.
    pub risk: Option<String>,
    /// New plan (`Some(None)` clears it).
    pub plan_json: Option<Option<String>>,
    /// New forecast (`Some(None)` clears it).
    pub forecast_json: Option<Option<String>>,
    /// The execution (set when fired, `Some(None)` clears it when firing failed).
    pub task_id: Option<Option<String>>,
    /// The reviewed USD ceiling (`Some(None)` clears it).
    pub budget_usd: Option<Option<f64>>,
}

/// Filters of [`Store::list_specs`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpecFilter {
    /// Only this stored status.
    pub status: Option<String>,
    /// Only this project.
    pub project: Option<String>,
    /// At most this many (newest first).
    pub limit: i64,
    /// Skip this many.
    pub offset: i64,
}

pub(super) const SPEC_COLUMNS: &str =
    "spec_id, project, title, body, source, source_url, priority, status, risk, plan_json, \
     forecast_json, task_id, status_reason, created_by, created_at, updated_at, source_meta, budget_usd";

impl Store {
    /// Registers a project.
    ///
    /// # Errors
    /// [`StoreError::ProjectExists`] when the name is taken; [`StoreError::Sqlx`] otherwise.
    pub async fn insert_project(&self, p: &ProjectRow) -> Result<(), StoreError> {
        let lite = on_backend!(self, pg => pg.insert_project(p).await);
        let mut tx = lite.begin_write().await?;
        let exists = sqlx::query_scalar::<_, i64>("select 1 from projects where name = ?")
            .bind(&p.name)
            .fetch_optional(&mut *tx)
            .await?;
        if exists.is_some() {
            return Err(StoreError::ProjectExists { name: p.name.clone() });
        }
        sqlx::query(
            "insert into projects (name, repo_path, default_branch, agent_profile, test_command, forge_url, \
             max_agents, created_at, require_separate_reviewer, trigger_label, forge_repo, budget_usd, repo_url) \
             values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(&p.name)
        .bind(&p.repo_path)
        .bind(&p.default_branch)
        .bind(&p.agent_profile)
        .bind(&p.test_command)
        .bind(&p.forge_url)
        .bind(p.max_agents)
        .bind(&p.created_at)
        .bind(p.require_separate_reviewer)
        .bind(&p.trigger_label)
        .bind(&p.forge_repo)
        .bind(p.budget_usd)
        .bind(&p.repo_url)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// All projects by name.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn list_projects(&self) -> Result<Vec<ProjectRow>, StoreError> {
        let lite = on_backend!(self, pg => pg.list_projects().await);
        Ok(sqlx::query_as::<_, ProjectRow>("select * from projects order by name")
            .fetch_all(&mut *lite.read().await?)
            .await?)
    }

    /// One project.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn project(&self, name: &str) -> Result<Option<ProjectRow>, StoreError> {
        let lite = on_backend!(self, pg => pg.project(name).await);
        Ok(sqlx::query_as::<_, ProjectRow>("select * from projects where name = ?")
            .bind(name)
            .fetch_optional(&mut *lite.read().await?)
            .await?)
    }

    /// Removes a project that has no specs.
    ///
    /// # Errors
    /// [`StoreError::NoSuchProject`]; [`StoreError::ProjectInUse`] with its spec count.
    pub async fn delete_project(&self, name: &str) -> Result<(), StoreError> {
        let lite = on_backend!(self, pg => pg.delete_project(name).await);
        let mut tx = lite.begin_write().await?;
        let specs = sqlx::query_scalar::<_, i64>("select count(*) from specs where project = ?")
            .bind(name)
            .fetch_one(&mut *tx)
            .await?;
        if specs > 0 {
            return Err(StoreError::ProjectInUse { name: name.to_string(), specs });
        }
        let done = sqlx::query("delete from projects where name = ?").bind(name).execute(&mut *tx).await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NoSuchProject { name: name.to_string() });
        }
        tx.commit().await?;
        Ok(())
    }

    /// Creates a spec with its `create` event, unless a spec of the same forge item exists:
    /// insert-or-get on the unique `source_key` (migration 0010), decided by the database in
    /// one write transaction, so deliveries and imports of one item at the same moment create
    /// one spec. A spec without a key (written on the board) is always created.
    ///
    /// # Errors
    /// [`StoreError::NoSuchProject`]; [`StoreError::Sqlx`].
    pub async fn insert_spec(&self, s: &NewSpec) -> Result<SpecInsert, StoreError> {
        let lite = on_backend!(self, pg => pg.insert_spec(s).await);
        let mut tx = lite.begin_write().await?;
        let exists = sqlx::query_scalar::<_, i64>("select 1 from projects where name = ?")
            .bind(&s.project)
            .fetch_optional(&mut *tx)
            .await?;
        if exists.is_none() {
            return Err(StoreError::NoSuchProject { name: s.project.clone() });
        }
        let inserted = sqlx::query_scalar::<_, i64>(
            "insert into specs (project, title, body, source, source_url, priority, status, created_by, created_at, \
             updated_at, source_meta, source_key) values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) \
             on conflict (source_key) where source_key != '' do nothing returning spec_id",
        )
        .bind(&s.project)
        .bind(&s.title)
        .bind(&s.body)
        .bind(&s.source)
        .bind(&s.source_url)
        .bind(s.priority)
        .bind(&s.status)
        .bind(&s.actor)
        .bind(&s.at)
        .bind(&s.at)
        .bind(&s.source_meta)
        .bind(&s.source_key)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(id) = inserted else {
            let id = sqlx::query_scalar::<_, i64>("select spec_id from specs where source_key = ?")
                .bind(&s.source_key)
                .fetch_one(&mut *tx)
                .await?;
            tx.commit().await?;
            return Ok(SpecInsert::Existing(id));
        };
        sqlx::query(
            "insert into spec_events (spec_id, seq, action, from_status, to_status, actor, reason, at) \
             values (?, 1, 'create', '', ?, ?, '', ?)",
        )
        .bind(id)
        .bind(&s.status)
        .bind(&s.actor)
        .bind(&s.at)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(SpecInsert::Created(id))
    }

    /// One spec.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn spec(&self, spec_id: i64) -> Result<Option<SpecRow>, StoreError> {
        let lite = on_backend!(self, pg => pg.spec(spec_id).await);
        Ok(sqlx::query_as::<_, SpecRow>(&format!("select {SPEC_COLUMNS} from specs where spec_id = ?"))
            .bind(spec_id)
            .fetch_optional(&mut *lite.read().await?)
            .await?)
    }

    /// The spec fired as execution `task_id`, if any.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn spec_of_execution(&self, task_id: &str) -> Result<Option<SpecRow>, StoreError> {
        let lite = on_backend!(self, pg => pg.spec_of_execution(task_id).await);
        Ok(sqlx::query_as::<_, SpecRow>(&format!("select {SPEC_COLUMNS} from specs where task_id = ?"))
            .bind(task_id)
            .fetch_optional(&mut *lite.read().await?)
            .await?)
    }

    /// Specs, newest change first, filtered.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn list_specs(&self, f: &SpecFilter) -> Result<Vec<SpecRow>, StoreError> {
        let lite = on_backend!(self, pg => pg.list_specs(f).await);
        Ok(sqlx::query_as::<_, SpecRow>(&format!(
            "select {SPEC_COLUMNS} from specs where (?1 is null or status = ?1) and (?2 is null or project = ?2) \
             order by updated_at desc, spec_id desc limit ?3 offset ?4"
        ))
        .bind(&f.status)
        .bind(&f.project)
        .bind(f.limit)
        .bind(f.offset)
        .fetch_all(&mut *lite.read().await?)
        .await?)
    }

    /// One page of cards per board column, and every column's count: each card one row of
    /// the spec, its execution's summary and its live row (what runs now, forecast, ceiling),
    /// so the cost does not grow with any journal's length.
    ///
    /// `stage_sql` is an SQL expression over `s` (specs) and `e` (its execution's summary row)
    /// naming a card's column; the caller builds it from its own rules (trusted text, never
    /// user input). Cards are those of `project` (all when `None`), cancelled ones only when
    /// `archived`; each column holds the cards ranked `offset + 1 ..= offset + limit` by newest
    /// change. Returns (cards with their `stage`, (stage, count) of every non-empty column).
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn card_page(
        &self,
        stage_sql: &str,
        project: Option<&str>,
        archived: bool,
        offset: i64,
        limit: i64,
    ) -> Result<(Vec<CardRow>, Vec<(String, i64)>), StoreError> {
        let lite = on_backend!(self, pg => pg.card_page(stage_sql, project, archived, offset, limit).await);
        let base = format!(
            "select s.spec_id, s.project, s.title, s.source, s.source_url, s.priority, s.status, s.risk, \
             json_extract(s.forecast_json, '$.mid_usd') as forecast_mid_usd, s.agents, \
             s.task_id, s.status_reason, s.updated_at, e.status as execution_status, e.current_phase, \
             e.steps_done, e.steps_total, e.spend_usd, ({stage_sql}) as stage, \
             exists (select 1 from settings p where p.key = 'paused:' || s.task_id) as paused, \
             (select p.value from settings p where p.key = 'paused:' || s.task_id and p.value != '1') as park_reason, \
             e.updated_at as execution_updated_at, l.forecast_usd as execution_forecast_usd, l.ceiling_usd, \
             coalesce(l.estimated_usd, 0.0) as spend_estimated_usd, \
             (select group_concat(r.step_id || ' ' || r.agent_name, char(10)) from \
               (select step_id, agent_name from execution_running where task_id = s.task_id and running = 1 \
                order by step_id) r) as running, m.pr_number, m.pr_url, \
             (select q.account || ' ' || q.until from execution_quota_waits q where q.task_id = s.task_id \
              order by q.until limit 1) as quota_wait, \
             (select ci.done || ' ' || ci.total from execution_ci_waits ci where ci.task_id = s.task_id) as ci_wait, \
             (select rm.ci_rounds || ' ' || rm.review_rounds || ' ' || rm.parked from execution_remediation rm \
              where rm.task_id = s.task_id) as remediation \
             from specs s left join executions e on e.task_id = s.task_id \
             left join execution_live l on l.task_id = s.task_id \
             left join merges m on m.task_id = s.task_id and m.pr_url != '' \
             where (?1 is null or s.project = ?1) \
               and ((?2 = 1) = (s.status = 'cancelled' or coalesce(e.status, '') = 'cancelled'))"
        );
        let mut tx = lite.begin_read().await?;
        let cards = sqlx::query_as::<_, CardRow>(&format!(
            "select * from (select c.*, row_number() over (partition by stage order by updated_at desc, spec_id desc) \
             as rank from ({base}) c) where rank > ?3 and rank <= ?3 + ?4 order by updated_at desc, spec_id desc"
        ))
        .bind(project)
        .bind(i64::from(archived))
        .bind(offset)
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?;
        let counts =
            sqlx::query_as::<_, (String, i64)>(&format!("select stage, count(*) from ({base}) group by stage"))
                .bind(project)
                .bind(i64::from(archived))
                .fetch_all(&mut *tx)
                .await?;
        tx.commit().await?;
        Ok((cards, counts))
    }

    /// Changes a spec if its status is still `change.expected`, appending the event.
    ///
    /// # Errors
    /// [`StoreError::NoSuchSpec`]; [`StoreError::SpecChanged`] with the current status when it
    /// is not `expected` (nothing is written); [`StoreError::Sqlx`].
    pub async fn change_spec(&self, spec_id: i64, c: &SpecChange) -> Result<(), StoreError> {
        let lite = on_backend!(self, pg => pg.change_spec(spec_id, c).await);
        let mut tx = lite.begin_write().await?;
        let current = sqlx::query_scalar::<_, String>("select status from specs where spec_id = ?")
            .bind(spec_id)
            .fetch_optional(&mut *tx)
            .await?
            .ok_or(StoreError::NoSuchSpec { spec_id })?;
        if current != c.expected {
            return Err(StoreError::SpecChanged { spec_id, current });
        }
        let (set_plan, plan) = split(&c.plan_json);
        let (set_forecast, forecast) = split(&c.forecast_json);
        let (set_task, task) = split(&c.task_id);
        let (set_budget, budget) = match c.budget_usd {
            Some(b) => (true, b),
            None => (false, None),
        };
        sqlx::query(
            "update specs set status = ?, status_reason = ?, updated_at = ?, \
             title = coalesce(?, title), body = coalesce(?, body), priority = coalesce(?, priority), \
             risk = coalesce(?, risk), \
             plan_json = case when ? then ? else plan_json end, \
             forecast_json = case when ? then ? else forecast_json end, \
             task_id = case when ? then ? else task_id end, \
             budget_usd = case when ? then ? else budget_usd end \
             where spec_id = ?",
        )
        .bind(&c.to)
        .bind(&c.reason)
        .bind(&c.at)
        .bind(&c.title)
        .bind(&c.body)
        .bind(c.priority)
        .bind(&c.risk)
        .bind(set_plan)
        .bind(plan)
        .bind(set_forecast)
        .bind(forecast)
        .bind(set_task)
        .bind(task)
        .bind(set_budget)
        .bind(budget)
        .bind(spec_id)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "insert into spec_events (spec_id, seq, action, from_status, to_status, actor, reason, at) \
             values (?1, (select coalesce(max(seq), 0) + 1 from spec_events where spec_id = ?1), ?2, ?3, ?4, ?5, ?6, ?7)",
        )
        .bind(spec_id)
        .bind(&c.action)
        .bind(&current)
        .bind(&c.to)
        .bind(&c.actor)
        .bind(&c.reason)
        .bind(&c.at)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Appends an event to a spec without changing it (from and to its current status): a
    /// forge update that was not applied, say.
    ///
    /// # Errors
    /// [`StoreError::NoSuchSpec`]; [`StoreError::Sqlx`].
    pub async fn note_spec_event(
        &self,
        spec_id: i64,
        action: &str,
        actor: &str,
        reason: &str,
        at: &str,
    ) -> Result<(), StoreError> {
        let lite = on_backend!(self, pg => pg.note_spec_event(spec_id, action, actor, reason, at).await);
        let mut tx = lite.begin_write().await?;
        let current = sqlx::query_scalar::<_, String>("select status from specs where spec_id = ?")
            .bind(spec_id)
            .fetch_optional(&mut *tx)
            .await?
            .ok_or(StoreError::NoSuchSpec { spec_id })?;
        sqlx::query(
            "insert into spec_events (spec_id, seq, action, from_status, to_status, actor, reason, at) \
             values (?1, (select coalesce(max(seq), 0) + 1 from spec_events where spec_id = ?1), ?2, ?3, ?3, ?4, ?5, ?6)",
        )
        .bind(spec_id)
        .bind(action)
        .bind(&current)
        .bind(actor)
        .bind(reason)
        .bind(at)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// A spec's events in order.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn spec_events(&self, spec_id: i64) -> Result<Vec<SpecEventRow>, StoreError> {
        let lite = on_backend!(self, pg => pg.spec_events(spec_id).await);
        Ok(sqlx::query_as::<_, SpecEventRow>(
            "select seq, action, from_status, to_status, actor, reason, at from spec_events where spec_id = ? \
             order by seq",
        )
        .bind(spec_id)
        .fetch_all(&mut *lite.read().await?)
        .await?)
    }

    /// The spend ledger's recent history: per (agent, model) the costs of the newest
    /// `per_key` recorded attempts with a cost, newest first (the `spend_ledger` view over the
    /// journal's `step_recorded` events, migration 0009).
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn spend_history(&self, per_key: usize) -> Result<Vec<(String, String, f64)>, StoreError> {
        let lite = on_backend!(self, pg => pg.spend_history(per_key).await);
        Ok(sqlx::query_as::<_, (String, String, f64)>(
            "select agent_name, model, cost_usd from ( \
               select agent_name, model, cost_usd, at, seq, row_number() over \
                 (partition by agent_name, model order by at desc, seq desc) as n \
               from spend_ledger where cost_usd > 0 and agent_name is not null and model != '') \
             where n <= ? order by agent_name, model, at desc, seq desc",
        )
        .bind(i64::try_from(per_key).unwrap_or(i64::MAX))
        .fetch_all(&mut *lite.read().await?)
        .await?)
    }
}

impl Store {
    /// Links a fired spec (status `executing`) to its execution, once it exists.
    ///
    /// # Errors
    /// [`StoreError::NoSuchSpec`] unless the spec exists and is `executing`; [`StoreError::Sqlx`]
    /// (the execution must exist).
    pub async fn attach_execution(&self, spec_id: i64, task_id: &str) -> Result<(), StoreError> {
        let lite = on_backend!(self, pg => pg.attach_execution(spec_id, task_id).await);
        let mut tx = lite.begin_write().await?;
        let done = sqlx::query("update specs set task_id = ? where spec_id = ? and status = 'executing'")
            .bind(task_id)
            .bind(spec_id)
            .execute(&mut *tx)
            .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NoSuchSpec { spec_id });
        }
        tx.commit().await?;
        Ok(())
    }

    /// Seq of an execution's newest event (0 before the first); `None` when it does not exist.
    /// A primary-key lookup: cheap enough to poll every second.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn head_seq(&self, task_id: &str) -> Result<Option<i64>, StoreError> {
        let lite = on_backend!(self, pg => pg.head_seq(task_id).await);
        Ok(sqlx::query_scalar::<_, i64>("select last_seq from executions where task_id = ?")
            .bind(task_id)
            .fetch_optional(&mut *lite.read().await?)
            .await?)
    }

    /// Marks an execution paused (`paused = true`) or not, in `settings`, and moves the
    /// board's version; true when that changed the setting (false: it was already so, and
    /// nothing is written).
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn set_paused(&self, task_id: &str, paused: bool) -> Result<bool, StoreError> {
        let lite = on_backend!(self, pg => pg.set_paused(task_id, paused).await);
        let key = format!("paused:{task_id}");
        let mut tx = lite.begin_write().await?;
        let done = if paused {
            sqlx::query("insert into settings (key, value) values (?, '1') on conflict (key) do nothing")
                .bind(&key)
                .execute(&mut *tx)
                .await?
        } else {
            sqlx::query("delete from settings where key = ?").bind(&key).execute(&mut *tx).await?
        };
        let changed = done.rows_affected() > 0;
        if !changed {
            // Dropped uncommitted: rolled back, nothing written.
            drop(tx);
            return Ok(false);
        }
        // The board shows a paused card as such: its version moves.
        sqlx::query("update board_rev set n = n + 1 where id = 1").execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// A text that changes whenever any spec, project or execution changes: the `board_rev`
    /// counter (moved by triggers on specs and projects, migration `0008_board_rev.sql`) and
    /// the executions' count and summed journal heads (every summary change is an append).
    /// The board's live stream and its cache key on it.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn board_version(&self) -> Result<String, StoreError> {
        let lite = on_backend!(self, pg => pg.board_version().await);
        Ok(sqlx::query_scalar::<_, String>(
            "select (select n from board_rev where id = 1) || '|' || \
             (select count(*) || ':' || coalesce(sum(last_seq), 0) from executions)",
        )
        .fetch_one(&mut *lite.read().await?)
        .await?)
    }

    /// How many executions have one of `statuses` (summary statuses).
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn count_executions_in(&self, statuses: &[&str]) -> Result<i64, StoreError> {
        let lite = on_backend!(self, pg => pg.count_executions_in(statuses).await);
        if statuses.is_empty() {
            return Ok(0);
        }
        let marks = vec!["?"; statuses.len()].join(", ");
        let sql = format!("select count(*) from executions where status in ({marks})");
        let mut query = sqlx::query_scalar::<_, i64>(&sql);
        for s in statuses {
            query = query.bind(*s);
        }
        Ok(query.fetch_one(&mut *lite.read().await?).await?)
    }

    /// Parks an execution: paused, with `reason` (what a human must do before resuming, e.g.
    /// switch a checkout away from its feature branch) as the pause's value; an operator's pause
    /// (value `1`) already there gets the reason. [`Store::set_paused`] with `false` clears both.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn park(&self, task_id: &str, reason: &str) -> Result<(), StoreError> {
        let lite = on_backend!(self, pg => pg.park(task_id, reason).await);
        let key = format!("paused:{task_id}");
        let mut tx = lite.begin_write().await?;
        sqlx::query(
            "insert into settings (key, value) values (?, ?) on conflict (key) do update set value = excluded.value",
        )
        .bind(&key)
        .bind(reason)
        .execute(&mut *tx)
        .await?;
        sqlx::query("update board_rev set n = n + 1 where id = 1").execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Why an execution is parked ([`Store::park`]); `None` when it is not paused or an
    /// operator paused it.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn park_reason(&self, task_id: &str) -> Result<Option<String>, StoreError> {
        let lite = on_backend!(self, pg => pg.park_reason(task_id).await);
        Ok(sqlx::query_scalar::<_, String>("select value from settings where key = ?")
            .bind(format!("paused:{task_id}"))
            .fetch_optional(&mut *lite.read().await?)
            .await?
            .filter(|v| v != "1"))
    }

    /// The executions whose summary status is one of `statuses`, with their spec's title, in
    /// creation order: one query over the summary rows (the approvals queue).
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn executions_in(&self, statuses: &[&str]) -> Result<Vec<StatusRow>, StoreError> {
        let lite = on_backend!(self, pg => pg.executions_in(statuses).await);
        if statuses.is_empty() {
            return Ok(Vec::new());
        }
        let marks = vec!["?"; statuses.len()].join(", ");
        let sql = format!(
            "select e.task_id, e.status, e.current_phase, e.updated_at, s.title as spec_title \
             from executions e left join specs s on s.task_id = e.task_id \
             where e.status in ({marks}) order by e.rowid"
        );
        let mut query = sqlx::query_as::<_, StatusRow>(&sql);
        for s in statuses {
            query = query.bind(*s);
        }
        Ok(query.fetch_all(&mut *lite.read().await?).await?)
    }

    /// Whether an execution is paused.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn is_paused(&self, task_id: &str) -> Result<bool, StoreError> {
        let lite = on_backend!(self, pg => pg.is_paused(task_id).await);
        Ok(sqlx::query_scalar::<_, i64>("select 1 from settings where key = ?")
            .bind(format!("paused:{task_id}"))
            .fetch_optional(&mut *lite.read().await?)
            .await?
            .is_some())
    }
}

/// `Some(v)` → (true, v); `None` → (false, None).
fn split(v: &Option<Option<String>>) -> (bool, Option<String>) {
    match v {
        Some(inner) => (true, inner.clone()),
        None => (false, None),
    }
}
