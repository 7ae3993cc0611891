//! Projects, specs, users and tokens, forge bookkeeping, webhook deliveries and quota accounts
//! on PostgreSQL (see `pmo.rs`, `auth.rs`, `forge.rs`, `webhooks.rs` and `quota.rs` of the
//! store for the contracts).
//!
//! Owns their PostgreSQL statements. Every check-and-set locks the row it checks
//! (`select … for update`) or is one `insert … on conflict` statement: a spec's status
//! compare-and-set, its event numbering, report claims, delivery claims and one spec per forge
//! item hold across connections and replicas.

use chrono::{DateTime, Utc};

use super::super::forge::{MergeRow, ReportClaim};
use super::super::pmo::SPEC_COLUMNS;
use super::super::pmo::{NewSpec, ProjectRow, SpecChange, SpecEventRow, SpecFilter, SpecInsert, SpecRow, StatusRow};
use super::super::polls::PrPollRow;
use super::super::quota::QuotaAccount;
use super::super::webhooks::ForgeIdentity;
use super::super::{parse_time, sortable_time, StoreError, TokenRow, UserRow};
use super::Pg;

/// The next event number of a spec whose row the transaction has locked.
const NEXT_SPEC_SEQ: &str = "(select coalesce(max(seq), 0) + 1 from spec_events where spec_id = $1)";

impl Pg {
    pub(in super::super) async fn insert_project(&self, p: &ProjectRow) -> Result<(), StoreError> {
        let inserted = sqlx::query(
            "insert into projects (name, repo_path, default_branch, agent_profile, test_command, forge_url, \
             max_agents, created_at, require_separate_reviewer, trigger_label, forge_repo, budget_usd, repo_url) \
             values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) on conflict (name) do nothing",
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
        .execute(&self.pool)
        .await?
        .rows_affected();
        if inserted == 0 {
            return Err(StoreError::ProjectExists { name: p.name.clone() });
        }
        Ok(())
    }

    pub(in super::super) async fn list_projects(&self) -> Result<Vec<ProjectRow>, StoreError> {
        Ok(sqlx::query_as::<_, ProjectRow>("select * from projects order by name").fetch_all(&self.pool).await?)
    }

    pub(in super::super) async fn project(&self, name: &str) -> Result<Option<ProjectRow>, StoreError> {
        Ok(sqlx::query_as::<_, ProjectRow>("select * from projects where name = $1")
            .bind(name)
            .fetch_optional(&self.pool)
            .await?)
    }

    pub(in super::super) async fn delete_project(&self, name: &str) -> Result<(), StoreError> {
        let mut tx = self.begin_write().await?;
        // The project's row lock keeps a spec from being inserted for it meanwhile.
        let found = sqlx::query_scalar::<_, bool>("select true from projects where name = $1 for update")
            .bind(name)
            .fetch_optional(&mut *tx)
            .await?;
        if found.is_none() {
            return Err(StoreError::NoSuchProject { name: name.to_string() });
        }
        let specs = sqlx::query_scalar::<_, i64>("select count(*) from specs where project = $1")
            .bind(name)
            .fetch_one(&mut *tx)
            .await?;
        if specs > 0 {
            return Err(StoreError::ProjectInUse { name: name.to_string(), specs });
        }
        sqlx::query("delete from projects where name = $1").bind(name).execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(())
    }

    pub(in super::super) async fn insert_spec(&self, s: &NewSpec) -> Result<SpecInsert, StoreError> {
        let mut tx = self.begin_write().await?;
        let exists = sqlx::query_scalar::<_, bool>("select true from projects where name = $1")
            .bind(&s.project)
            .fetch_optional(&mut *tx)
            .await?;
        if exists.is_none() {
            return Err(StoreError::NoSuchProject { name: s.project.clone() });
        }
        let inserted = sqlx::query_scalar::<_, i64>(
            "insert into specs (project, title, body, source, source_url, priority, status, created_by, created_at, \
             updated_at, source_meta, source_key) values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9, $10, $11) \
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
        .bind(&s.source_meta)
        .bind(&s.source_key)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(id) = inserted else {
            let id = sqlx::query_scalar::<_, i64>("select spec_id from specs where source_key = $1")
                .bind(&s.source_key)
                .fetch_one(&mut *tx)
                .await?;
            tx.commit().await?;
            return Ok(SpecInsert::Existing(id));
        };
        sqlx::query(
            "insert into spec_events (spec_id, seq, action, from_status, to_status, actor, reason, at) \
             values ($1, 1, 'create', '', $2, $3, '', $4)",
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

    pub(in super::super) async fn spec(&self, spec_id: i64) -> Result<Option<SpecRow>, StoreError> {
        Ok(sqlx::query_as::<_, SpecRow>(&format!("select {SPEC_COLUMNS} from specs where spec_id = $1"))
            .bind(spec_id)
            .fetch_optional(&self.pool)
            .await?)
    }

    pub(in super::super) async fn spec_of_execution(&self, task_id: &str) -> Result<Option<SpecRow>, StoreError> {
        Ok(sqlx::query_as::<_, SpecRow>(&format!("select {SPEC_COLUMNS} from specs where task_id = $1"))
            .bind(task_id)
            .fetch_optional(&self.pool)
            .await?)
    }

    pub(in super::super) async fn list_specs(&self, f: &SpecFilter) -> Result<Vec<SpecRow>, StoreError> {
        Ok(sqlx::query_as::<_, SpecRow>(&format!(
            "select {SPEC_COLUMNS} from specs where ($1::text is null or status = $1) \
             and ($2::text is null or project = $2) order by updated_at desc, spec_id desc limit $3 offset $4"
        ))
        .bind(&f.status)
        .bind(&f.project)
        .bind(f.limit)
        .bind(f.offset)
        .fetch_all(&self.pool)
        .await?)
    }

    pub(in super::super) async fn change_spec(&self, spec_id: i64, c: &SpecChange) -> Result<(), StoreError> {
        let mut tx = self.begin_write().await?;
        // The row lock makes the compare-and-set (and the event's number) one decision.
        let current = sqlx::query_scalar::<_, String>("select status from specs where spec_id = $1 for update")
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
            "update specs set status = $1, status_reason = $2, updated_at = $3, \
             title = coalesce($4, title), body = coalesce($5, body), priority = coalesce($6, priority), \
             risk = coalesce($7, risk), \
             plan_json = case when $8 then $9 else plan_json end, \
             forecast_json = case when $10 then $11 else forecast_json end, \
             task_id = case when $12 then $13 else task_id end, \
             budget_usd = case when $14 then $15 else budget_usd end \
             where spec_id = $16",
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
        sqlx::query(&format!(
            "insert into spec_events (spec_id, seq, action, from_status, to_status, actor, reason, at) \
             values ($1, {NEXT_SPEC_SEQ}, $2, $3, $4, $5, $6, $7)"
        ))
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

    pub(in super::super) async fn note_spec_event(
        &self,
        spec_id: i64,
        action: &str,
        actor: &str,
        reason: &str,
        at: &str,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin_write().await?;
        let current = sqlx::query_scalar::<_, String>("select status from specs where spec_id = $1 for update")
            .bind(spec_id)
            .fetch_optional(&mut *tx)
            .await?
            .ok_or(StoreError::NoSuchSpec { spec_id })?;
        sqlx::query(&format!(
            "insert into spec_events (spec_id, seq, action, from_status, to_status, actor, reason, at) \
             values ($1, {NEXT_SPEC_SEQ}, $2, $3, $3, $4, $5, $6)"
        ))
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

    pub(in super::super) async fn spec_events(&self, spec_id: i64) -> Result<Vec<SpecEventRow>, StoreError> {
        Ok(sqlx::query_as::<_, SpecEventRow>(
            "select seq, action, from_status, to_status, actor, reason, at from spec_events where spec_id = $1 \
             order by seq",
        )
        .bind(spec_id)
        .fetch_all(&self.pool)
        .await?)
    }

    pub(in super::super) async fn spend_history(
        &self,
        per_key: usize,
    ) -> Result<Vec<(String, String, f64)>, StoreError> {
        Ok(sqlx::query_as::<_, (String, String, f64)>(
            "select agent_name, model, cost_usd from ( \
               select agent_name, model, cost_usd, at, seq, row_number() over \
                 (partition by agent_name, model order by at desc, seq desc) as n \
               from spend_ledger where cost_usd > 0 and agent_name is not null and model != '') ranked \
             where n <= $1 order by agent_name, model, at desc, seq desc",
        )
        .bind(i64::try_from(per_key).unwrap_or(i64::MAX))
        .fetch_all(&self.pool)
        .await?)
    }

    pub(in super::super) async fn attach_execution(&self, spec_id: i64, task_id: &str) -> Result<(), StoreError> {
        let done = sqlx::query("update specs set task_id = $1 where spec_id = $2 and status = 'executing'")
            .bind(task_id)
            .bind(spec_id)
            .execute(&self.pool)
            .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NoSuchSpec { spec_id });
        }
        Ok(())
    }

    pub(in super::super) async fn set_paused(&self, task_id: &str, paused: bool) -> Result<bool, StoreError> {
        let key = format!("paused:{task_id}");
        let mut tx = self.begin_write().await?;
        let done = if paused {
            sqlx::query("insert into settings (key, value) values ($1, '1') on conflict (key) do nothing")
                .bind(&key)
                .execute(&mut *tx)
                .await?
        } else {
            sqlx::query("delete from settings where key = $1").bind(&key).execute(&mut *tx).await?
        };
        let changed = done.rows_affected() > 0;
        if !changed {
            tx.rollback().await?;
            return Ok(false);
        }
        sqlx::query("update board_rev set n = n + 1 where id = 1").execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(true)
    }

    pub(in super::super) async fn count_executions_in(&self, statuses: &[&str]) -> Result<i64, StoreError> {
        if statuses.is_empty() {
            return Ok(0);
        }
        let statuses: Vec<String> = statuses.iter().map(|s| (*s).to_string()).collect();
        Ok(sqlx::query_scalar::<_, i64>("select count(*) from executions where status = any($1)")
            .bind(statuses)
            .fetch_one(&self.pool)
            .await?)
    }

    pub(in super::super) async fn park(&self, task_id: &str, reason: &str) -> Result<(), StoreError> {
        let key = format!("paused:{task_id}");
        let mut tx = self.begin_write().await?;
        sqlx::query(
            "insert into settings (key, value) values ($1, $2) on conflict (key) do update set value = excluded.value",
        )
        .bind(&key)
        .bind(reason)
        .execute(&mut *tx)
        .await?;
        sqlx::query("update board_rev set n = n + 1 where id = 1").execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(())
    }

    pub(in super::super) async fn park_reason(&self, task_id: &str) -> Result<Option<String>, StoreError> {
        Ok(sqlx::query_scalar::<_, String>("select value from settings where key = $1")
            .bind(format!("paused:{task_id}"))
            .fetch_optional(&self.pool)
            .await?
            .filter(|v| v != "1"))
    }

    pub(in super::super) async fn executions_in(&self, statuses: &[&str]) -> Result<Vec<StatusRow>, StoreError> {
        if statuses.is_empty() {
            return Ok(Vec::new());
        }
        let statuses: Vec<String> = statuses.iter().map(|s| (*s).to_string()).collect();
        Ok(sqlx::query_as::<_, StatusRow>(
            "select e.task_id, e.status, e.current_phase, e.updated_at, s.title as spec_title \
             from executions e left join specs s on s.task_id = e.task_id \
             where e.status = any($1) order by e.ord",
        )
        .bind(statuses)
        .fetch_all(&self.pool)
        .await?)
    }

    pub(in super::super) async fn is_paused(&self, task_id: &str) -> Result<bool, StoreError> {
        Ok(sqlx::query_scalar::<_, bool>("select true from settings where key = $1")
            .bind(format!("paused:{task_id}"))
            .fetch_optional(&self.pool)
            .await?
            .is_some())
    }

    // Users, tokens, approval links and decision signatures (`auth.rs`).

    pub(in super::super) async fn has_users(&self) -> Result<bool, StoreError> {
        Ok(sqlx::query_scalar::<_, bool>("select true from users limit 1").fetch_optional(&self.pool).await?.is_some())
    }

    pub(in super::super) async fn add_token(
        &self,
        name: &str,
        role: &str,
        token_hash: &str,
        label: &str,
        at: &str,
    ) -> Result<i64, StoreError> {
        let mut tx = self.begin_write().await?;
        sqlx::query(
            "insert into users (name, role, created_at) values ($1, $2, $3) \
             on conflict (name) do update set role = excluded.role",
        )
        .bind(name)
        .bind(role)
        .bind(at)
        .execute(&mut *tx)
        .await?;
        let id = sqlx::query_scalar::<_, i64>(
            "insert into api_tokens (user_name, token_hash, label, created_at) values ($1, $2, $3, $4) \
             returning token_id",
        )
        .bind(name)
        .bind(token_hash)
        .bind(label)
        .bind(at)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(id)
    }

    pub(in super::super) async fn user_of_token(&self, token_hash: &str) -> Result<Option<UserRow>, StoreError> {
        Ok(sqlx::query_as::<_, UserRow>(
            "select u.name, u.role, u.created_at from api_tokens t join users u on u.name = t.user_name \
             where t.token_hash = $1 and t.revoked_at is null",
        )
        .bind(token_hash)
        .fetch_optional(&self.pool)
        .await?)
    }

    pub(in super::super) async fn token_login(&self, token_hash: &str) -> Result<Option<(UserRow, i64)>, StoreError> {
        let row = sqlx::query_as::<_, (String, String, String, i64)>(
            "select u.name, u.role, u.created_at, t.token_id from api_tokens t join users u on u.name = t.user_name \
             where t.token_hash = $1 and t.revoked_at is null",
        )
        .bind(token_hash)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|(name, role, created_at, id)| (UserRow { name, role, created_at }, id)))
    }

    pub(in super::super) async fn session_user(
        &self,
        name: &str,
        token_id: i64,
    ) -> Result<Option<UserRow>, StoreError> {
        Ok(sqlx::query_as::<_, UserRow>(
            "select u.name, u.role, u.created_at from api_tokens t join users u on u.name = t.user_name \
             where t.token_id = $1 and u.name = $2 and t.revoked_at is null",
        )
        .bind(token_id)
        .bind(name)
        .fetch_optional(&self.pool)
        .await?)
    }

    pub(in super::super) async fn user(&self, name: &str) -> Result<Option<UserRow>, StoreError> {
        Ok(sqlx::query_as::<_, UserRow>("select name, role, created_at from users where name = $1")
            .bind(name)
            .fetch_optional(&self.pool)
            .await?)
    }

    pub(in super::super) async fn list_tokens(&self) -> Result<Vec<TokenRow>, StoreError> {
        Ok(sqlx::query_as::<_, TokenRow>(
            "select t.token_id, t.user_name, u.role, t.label, t.created_at, t.revoked_at \
             from api_tokens t join users u on u.name = t.user_name order by t.token_id desc",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    pub(in super::super) async fn revoke_token(&self, token_id: i64, at: &str) -> Result<bool, StoreError> {
        let done = sqlx::query("update api_tokens set revoked_at = $1 where token_id = $2 and revoked_at is null")
            .bind(at)
            .bind(token_id)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    pub(in super::super) async fn use_approval_link(
        &self,
        link_id: &str,
        used_by: &str,
        at: &str,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "insert into used_approval_links (link_id, used_at, used_by) values ($1, $2, $3) \
             on conflict (link_id) do nothing",
        )
        .bind(link_id)
        .bind(at)
        .bind(used_by)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    pub(in super::super) async fn approval_link_used(&self, link_id: &str) -> Result<bool, StoreError> {
        Ok(sqlx::query_scalar::<_, bool>("select true from used_approval_links where link_id = $1")
            .bind(link_id)
            .fetch_optional(&self.pool)
            .await?
            .is_some())
    }

    pub(in super::super) async fn put_decision_signature(
        &self,
        task_id: &str,
        seq: i64,
        signature: &str,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "insert into decision_signatures (task_id, seq, signature) values ($1, $2, $3) \
             on conflict (task_id, seq) do update set signature = excluded.signature",
        )
        .bind(task_id)
        .bind(seq)
        .bind(signature)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub(in super::super) async fn decision_signatures(&self, task_id: &str) -> Result<Vec<(i64, String)>, StoreError> {
        Ok(sqlx::query_as::<_, (i64, String)>(
            "select seq, signature from decision_signatures where task_id = $1 order by seq",
        )
        .bind(task_id)
        .fetch_all(&self.pool)
        .await?)
    }

    // Forge bookkeeping (`forge.rs`).

    pub(in super::super) async fn set_source_meta(&self, spec_id: i64, meta_json: &str) -> Result<(), StoreError> {
        sqlx::query("update specs set source_meta = $1 where spec_id = $2")
            .bind(meta_json)
            .bind(spec_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    pub(in super::super) async fn merge(&self, task_id: &str) -> Result<Option<MergeRow>, StoreError> {
        Ok(sqlx::query_as::<_, MergeRow>(
            "select task_id, spec_id, forge_repo, branch, base_branch, state, pushed_sha, pr_number, pr_url, error, \
             updated_at from merges where task_id = $1",
        )
        .bind(task_id)
        .fetch_optional(&self.pool)
        .await?)
    }

    pub(in super::super) async fn opened_merges(&self) -> Result<Vec<MergeRow>, StoreError> {
        Ok(sqlx::query_as::<_, MergeRow>(
            "select task_id, spec_id, forge_repo, branch, base_branch, state, pushed_sha, pr_number, pr_url, error, \
             updated_at from merges where state = 'opened' and pr_url != '' order by task_id",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    pub(in super::super) async fn pr_polls(&self) -> Result<Vec<PrPollRow>, StoreError> {
        Ok(sqlx::query_as::<_, PrPollRow>("select task_id, sha, interval_ms, next_at from pr_polls order by task_id")
            .fetch_all(&self.pool)
            .await?)
    }

    pub(in super::super) async fn put_pr_poll(&self, row: &PrPollRow) -> Result<(), StoreError> {
        sqlx::query(
            "insert into pr_polls (task_id, sha, interval_ms, next_at) values ($1, $2, $3, $4) \
             on conflict (task_id) do update set sha = excluded.sha, interval_ms = excluded.interval_ms, \
             next_at = excluded.next_at",
        )
        .bind(&row.task_id)
        .bind(&row.sha)
        .bind(row.interval_ms)
        .bind(&row.next_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub(in super::super) async fn prune_pr_polls(&self) -> Result<(), StoreError> {
        sqlx::query(super::super::polls::PRUNE_PR_POLLS).execute(&self.pool).await?;
        Ok(())
    }

    pub(in super::super) async fn put_merge(&self, row: &MergeRow) -> Result<(), StoreError> {
        sqlx::query(
            "insert into merges (task_id, spec_id, forge_repo, branch, base_branch, state, pushed_sha, pr_number, \
             pr_url, error, updated_at) values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) \
             on conflict (task_id) do update set spec_id = excluded.spec_id, forge_repo = excluded.forge_repo, \
             branch = excluded.branch, base_branch = excluded.base_branch, state = excluded.state, \
             pushed_sha = excluded.pushed_sha, pr_number = excluded.pr_number, pr_url = excluded.pr_url, \
             error = excluded.error, updated_at = excluded.updated_at",
        )
        .bind(&row.task_id)
        .bind(row.spec_id)
        .bind(&row.forge_repo)
        .bind(&row.branch)
        .bind(&row.base_branch)
        .bind(&row.state)
        .bind(&row.pushed_sha)
        .bind(row.pr_number)
        .bind(&row.pr_url)
        .bind(&row.error)
        .bind(&row.updated_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub(in super::super) async fn claim_report(
        &self,
        spec_id: i64,
        key: &str,
        max_attempts: i64,
        at: &str,
    ) -> Result<Option<ReportClaim>, StoreError> {
        let mut tx = self.begin_write().await?;
        let created = sqlx::query(
            "insert into forge_reports (spec_id, key, state, attempts, updated_at) values ($1, $2, 'pending', 1, $3) \
             on conflict (spec_id, key) do nothing",
        )
        .bind(spec_id)
        .bind(key)
        .bind(at)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if created == 1 {
            tx.commit().await?;
            return Ok(Some(ReportClaim { retry_of: None }));
        }
        // It exists: lock it, then decide on what it says.
        let (state, attempts, last) = sqlx::query_as::<_, (String, i64, String)>(
            "select state, attempts, updated_at from forge_reports where spec_id = $1 and key = $2 for update",
        )
        .bind(spec_id)
        .bind(key)
        .fetch_one(&mut *tx)
        .await?;
        if state == "posted" || attempts >= max_attempts {
            return Ok(None);
        }
        sqlx::query(
            "update forge_reports set attempts = attempts + 1, updated_at = $1 where spec_id = $2 and key = $3",
        )
        .bind(at)
        .bind(spec_id)
        .bind(key)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Some(ReportClaim { retry_of: Some(last) }))
    }

    pub(in super::super) async fn finish_report(
        &self,
        spec_id: i64,
        key: &str,
        error: &str,
        at: &str,
    ) -> Result<(), StoreError> {
        sqlx::query("update forge_reports set state = $1, error = $2, updated_at = $3 where spec_id = $4 and key = $5")
            .bind(if error.is_empty() { "posted" } else { "failed" })
            .bind(error)
            .bind(at)
            .bind(spec_id)
            .bind(key)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    pub(in super::super) async fn reports(&self, spec_id: i64) -> Result<Vec<(String, String, String)>, StoreError> {
        Ok(sqlx::query_as::<_, (String, String, String)>(
            "select key, state, error from forge_reports where spec_id = $1 order by ord",
        )
        .bind(spec_id)
        .fetch_all(&self.pool)
        .await?)
    }

    pub(in super::super) async fn reportable_specs(&self, since: &str) -> Result<Vec<(i64, String)>, StoreError> {
        Ok(sqlx::query_as::<_, (i64, String)>(
            "select s.spec_id, s.task_id from specs s left join executions e on e.task_id = s.task_id \
             where s.task_id is not null and s.source in ('github', 'ado') and s.source_meta like '%\"item_ref\"%' \
             and (s.updated_at >= $1 or coalesce(e.updated_at, '') >= $1 \
             or s.task_id in (select task_id from merges where updated_at >= $1) or s.spec_id in \
             (select spec_id from forge_reports where state != 'posted' and attempts < 5)) order by s.spec_id",
        )
        .bind(since)
        .fetch_all(&self.pool)
        .await?)
    }

    // Webhook deliveries and the look-ups a delivery needs (`webhooks.rs`).

    pub(in super::super) async fn claim_delivery(
        &self,
        source: &str,
        delivery_id: &str,
        at: &str,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "insert into webhook_deliveries (source, delivery_id, received_at, outcome) \
             values ($1, $2, $3, 'received') on conflict (source, delivery_id) do nothing",
        )
        .bind(source)
        .bind(delivery_id)
        .bind(at)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    pub(in super::super) async fn set_delivery_outcome(
        &self,
        source: &str,
        delivery_id: &str,
        outcome: &str,
    ) -> Result<(), StoreError> {
        sqlx::query("update webhook_deliveries set outcome = $1 where source = $2 and delivery_id = $3")
            .bind(outcome)
            .bind(source)
            .bind(delivery_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    pub(in super::super) async fn release_delivery(&self, source: &str, delivery_id: &str) -> Result<(), StoreError> {
        sqlx::query("delete from webhook_deliveries where source = $1 and delivery_id = $2")
            .bind(source)
            .bind(delivery_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    pub(in super::super) async fn deliveries(&self, source: &str) -> Result<Vec<(String, String)>, StoreError> {
        Ok(sqlx::query_as::<_, (String, String)>(
            "select delivery_id, outcome from webhook_deliveries where source = $1 order by received_at, delivery_id",
        )
        .bind(source)
        .fetch_all(&self.pool)
        .await?)
    }

    pub(in super::super) async fn item_rev(&self, source: &str, url: &str) -> Result<Option<i64>, StoreError> {
        Ok(sqlx::query_scalar::<_, i64>("select rev from forge_item_revs where source = $1 and url = $2")
            .bind(source)
            .bind(url)
            .fetch_optional(&self.pool)
            .await?)
    }

    pub(in super::super) async fn set_item_rev(&self, source: &str, url: &str, rev: i64) -> Result<(), StoreError> {
        sqlx::query(
            "insert into forge_item_revs (source, url, rev) values ($1, $2, $3) \
             on conflict (source, url) do update set rev = greatest(forge_item_revs.rev, excluded.rev)",
        )
        .bind(source)
        .bind(url)
        .bind(rev)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub(in super::super) async fn projects_by_forge_repo(&self, names: &[&str]) -> Result<Vec<ProjectRow>, StoreError> {
        let mut out = Vec::new();
        for name in names.iter().filter(|n| !n.is_empty()) {
            let rows = sqlx::query_as::<_, ProjectRow>(
                "select * from projects where forge_repo != '' and lower(forge_repo) = lower($1) order by name",
            )
            .bind(name)
            .fetch_all(&self.pool)
            .await?;
            for r in rows {
                if !out.iter().any(|p: &ProjectRow| p.name == r.name) {
                    out.push(r);
                }
            }
        }
        Ok(out)
    }

    pub(in super::super) async fn spec_by_source_url(
        &self,
        source: &str,
        source_url: &str,
    ) -> Result<Option<SpecRow>, StoreError> {
        Ok(sqlx::query_as::<_, SpecRow>(&format!(
            "select {SPEC_COLUMNS} from specs where source = $1 and source_url = $2 and source_url != '' \
             order by spec_id limit 1"
        ))
        .bind(source)
        .bind(source_url)
        .fetch_optional(&self.pool)
        .await?)
    }

    pub(in super::super) async fn spec_by_source_key(&self, source_key: &str) -> Result<Option<SpecRow>, StoreError> {
        if source_key.is_empty() {
            return Ok(None);
        }
        Ok(sqlx::query_as::<_, SpecRow>(&format!("select {SPEC_COLUMNS} from specs where source_key = $1"))
            .bind(source_key)
            .fetch_optional(&self.pool)
            .await?)
    }

    pub(in super::super) async fn specs_without_source_key(&self) -> Result<Vec<(i64, String, String)>, StoreError> {
        Ok(sqlx::query_as::<_, (i64, String, String)>(
            "select spec_id, source, source_url from specs \
             where source_key = '' and source != 'board' and source_url != '' order by spec_id",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    pub(in super::super) async fn claim_source_key(
        &self,
        spec_id: i64,
        source_key: &str,
        reason: impl Fn(i64) -> String,
        actor: &str,
        at: &str,
    ) -> Result<Option<i64>, StoreError> {
        let mut tx = self.begin_write().await?;
        // Claimers of one key take turns (a transaction-scoped advisory lock on the key), and the
        // spec's row is locked: the holder look-up and the update are one decision.
        sqlx::query("select pg_advisory_xact_lock(hashtextextended($1, 17))")
            .bind(source_key)
            .execute(&mut *tx)
            .await?;
        let keyless = sqlx::query_scalar::<_, bool>("select source_key = '' from specs where spec_id = $1 for update")
            .bind(spec_id)
            .fetch_optional(&mut *tx)
            .await?
            == Some(true);
        let holder = sqlx::query_scalar::<_, i64>("select spec_id from specs where source_key = $1 and spec_id != $2")
            .bind(source_key)
            .bind(spec_id)
            .fetch_optional(&mut *tx)
            .await?;
        let Some(holder) = holder else {
            if keyless {
                sqlx::query("update specs set source_key = $1 where spec_id = $2")
                    .bind(source_key)
                    .bind(spec_id)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            return Ok(None);
        };
        if keyless {
            sqlx::query("update specs set source_key = $1 where spec_id = $2")
                .bind(format!("superseded:{spec_id}"))
                .bind(spec_id)
                .execute(&mut *tx)
                .await?;
            sqlx::query(&format!(
                "insert into spec_events (spec_id, seq, action, from_status, to_status, actor, reason, at) \
                 select $1, {NEXT_SPEC_SEQ}, 'superseded_duplicate', status, status, $2, $3, $4 from specs \
                 where spec_id = $1"
            ))
            .bind(spec_id)
            .bind(actor)
            .bind(reason(holder))
            .bind(at)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(Some(holder))
    }

    pub(in super::super) async fn user_by_identity(
        &self,
        kind: ForgeIdentity,
        value: &str,
    ) -> Result<Option<UserRow>, StoreError> {
        let column = kind.column();
        Ok(sqlx::query_as::<_, UserRow>(&format!(
            "select name, role, created_at from users where {column} != '' and lower({column}) = lower($1)"
        ))
        .bind(value)
        .fetch_optional(&self.pool)
        .await?)
    }

    pub(in super::super) async fn set_identity(
        &self,
        name: &str,
        kind: ForgeIdentity,
        value: &str,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(&format!("update users set {} = $1 where name = $2", kind.column()))
            .bind(value)
            .bind(name)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    // Quota accounts (`quota.rs`).

    pub(in super::super) async fn quota_account(&self, account: &str) -> Result<Option<QuotaAccount>, StoreError> {
        let row = sqlx::query_as::<_, (String, i64, String)>(
            "select until, backoff_secs, reason from quota_accounts where account = $1",
        )
        .bind(account)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|(until, backoff_secs, reason)| {
            Ok(QuotaAccount { account: account.to_string(), until: parse_time(&until)?, backoff_secs, reason })
        })
        .transpose()
    }

    pub(in super::super) async fn set_quota_account(
        &self,
        account: &str,
        until: DateTime<Utc>,
        backoff_secs: i64,
        reason: &str,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "insert into quota_accounts (account, until, backoff_secs, reason) values ($1, $2, $3, $4) \
             on conflict (account) do update set until = greatest(quota_accounts.until, excluded.until), \
             backoff_secs = excluded.backoff_secs, reason = excluded.reason",
        )
        .bind(account)
        .bind(sortable_time(until))
        .bind(backoff_secs)
        .bind(reason)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub(in super::super) async fn clear_quota_account(&self, account: &str) -> Result<(), StoreError> {
        sqlx::query("delete from quota_accounts where account = $1").bind(account).execute(&self.pool).await?;
        Ok(())
    }
}

/// `Some(v)` → (true, v); `None` → (false, None).
fn split(v: &Option<Option<String>>) -> (bool, Option<String>) {
    match v {
        Some(inner) => (true, inner.clone()),
        None => (false, None),
    }
}
