//! Outbound forge bookkeeping (migration `0006_forge.sql`): the `merges` rows that make a
//! merge resumable, the `forge_reports` claims that keep report-back comments from repeating,
//! and a spec's `source_meta`.
//!
//! It never calls a forge, never runs git and never interprets an item's JSON.

use super::{Store, StoreError};

/// A merge in progress or done: one row per execution.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Serialize, utoipa::ToSchema)]
pub struct MergeRow {
    /// The execution.
    pub task_id: String,
    /// Its spec, when it came from one.
    pub spec_id: Option<i64>,
    /// The project's `forge_repo` when the merge began.
    pub forge_repo: String,
    /// `baton/<task_id>`.
    pub branch: String,
    /// The branch the pull request targets.
    pub base_branch: String,
    /// `pushing`, `pushed` or `opened`.
    pub state: String,
    /// The commit pushed (empty before).
    pub pushed_sha: String,
    /// The pull request's number (GitHub) or id (Azure DevOps).
    pub pr_number: Option<i64>,
    /// The pull request's web address (empty before).
    pub pr_url: String,
    /// The last failure (empty once a step succeeds).
    pub error: String,
    /// Last change (RFC 3339).
    pub updated_at: String,
}

/// A report claimed by [`Store::claim_report`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportClaim {
    /// When the previous attempt was last touched (RFC 3339), if this is a retry: whether that
    /// attempt's post landed is not known.
    pub retry_of: Option<String>,
}

impl Store {
    /// Sets the `source_meta` JSON of spec `spec_id` (no spec event: it is not the spec's text).
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn set_source_meta(&self, spec_id: i64, meta_json: &str) -> Result<(), StoreError> {
        let lite = on_backend!(self, pg => pg.set_source_meta(spec_id, meta_json).await);
        let mut tx = lite.begin_write().await?;
        sqlx::query("update specs set source_meta = ? where spec_id = ?")
            .bind(meta_json)
            .bind(spec_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// The merge of execution `task_id`, if one began.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn merge(&self, task_id: &str) -> Result<Option<MergeRow>, StoreError> {
        let lite = on_backend!(self, pg => pg.merge(task_id).await);
        Ok(sqlx::query_as::<_, MergeRow>("select * from merges where task_id = ?")
            .bind(task_id)
            .fetch_optional(&mut *lite.read().await?)
            .await?)
    }

    /// Every merge whose pull request is open (`state` `opened`), by execution.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn opened_merges(&self) -> Result<Vec<MergeRow>, StoreError> {
        let lite = on_backend!(self, pg => pg.opened_merges().await);
        Ok(sqlx::query_as::<_, MergeRow>(
            "select * from merges where state = 'opened' and pr_url != '' order by task_id",
        )
        .fetch_all(&mut *lite.read().await?)
        .await?)
    }

    /// Writes `row` (insert, or replace the execution's row).
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn put_merge(&self, row: &MergeRow) -> Result<(), StoreError> {
        let lite = on_backend!(self, pg => pg.put_merge(row).await);
        let mut tx = lite.begin_write().await?;
        sqlx::query(
            "insert into merges (task_id, spec_id, forge_repo, branch, base_branch, state, pushed_sha, pr_number, \
             pr_url, error, updated_at) values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) \
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
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Claims report `key` of spec `spec_id` for this caller to post (new, or pending/failed
    /// with fewer than `max_attempts` attempts; the attempt is counted now). `None` when it was
    /// posted or has used its attempts. A claim of a report tried before carries when that
    /// attempt was last touched ([`ReportClaim::retry_of`]): the earlier post may have landed
    /// (a crash between the post and [`Store::finish_report`], a timeout), so the caller looks
    /// for it on the forge before posting again.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn claim_report(
        &self,
        spec_id: i64,
        key: &str,
        max_attempts: i64,
        at: &str,
    ) -> Result<Option<ReportClaim>, StoreError> {
        let lite = on_backend!(self, pg => pg.claim_report(spec_id, key, max_attempts, at).await);
        let mut tx = lite.begin_write().await?;
        let before = sqlx::query_as::<_, (String, i64, String)>(
            "select state, attempts, updated_at from forge_reports where spec_id = ? and key = ?",
        )
        .bind(spec_id)
        .bind(key)
        .fetch_optional(&mut *tx)
        .await?;
        let claim = match before {
            None => {
                sqlx::query(
                    "insert into forge_reports (spec_id, key, state, attempts, updated_at) values (?, ?, 'pending', 1, ?)",
                )
                .bind(spec_id)
                .bind(key)
                .bind(at)
                .execute(&mut *tx)
                .await?;
                Some(ReportClaim { retry_of: None })
            }
            Some((state, attempts, last)) if state != "posted" && attempts < max_attempts => {
                sqlx::query(
                    "update forge_reports set attempts = attempts + 1, updated_at = ? where spec_id = ? and key = ?",
                )
                .bind(at)
                .bind(spec_id)
                .bind(key)
                .execute(&mut *tx)
                .await?;
                Some(ReportClaim { retry_of: Some(last) })
            }
            Some(_) => None,
        };
        tx.commit().await?;
        Ok(claim)
    }

    /// Records how report `key` of spec `spec_id` went: posted (`error` empty) or failed.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn finish_report(&self, spec_id: i64, key: &str, error: &str, at: &str) -> Result<(), StoreError> {
        let lite = on_backend!(self, pg => pg.finish_report(spec_id, key, error, at).await);
        let mut tx = lite.begin_write().await?;
        sqlx::query("update forge_reports set state = ?, error = ?, updated_at = ? where spec_id = ? and key = ?")
            .bind(if error.is_empty() { "posted" } else { "failed" })
            .bind(error)
            .bind(at)
            .bind(spec_id)
            .bind(key)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// The reports of spec `spec_id`: (key, state, error), oldest first.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn reports(&self, spec_id: i64) -> Result<Vec<(String, String, String)>, StoreError> {
        let lite = on_backend!(self, pg => pg.reports(spec_id).await);
        Ok(sqlx::query_as::<_, (String, String, String)>(
            "select key, state, error from forge_reports where spec_id = ? order by rowid",
        )
        .bind(spec_id)
        .fetch_all(&mut *lite.read().await?)
        .await?)
    }

    /// The fired forge specs (source `github` or `ado`, with an item reference in
    /// `source_meta`) whose spec row, execution or merge row (a pull request opened) changed at
    /// or after `since` (RFC 3339), or
    /// that have a report not yet posted with attempts left (fewer than 5): (spec_id,
    /// task_id), by spec id.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn reportable_specs(&self, since: &str) -> Result<Vec<(i64, String)>, StoreError> {
        let lite = on_backend!(self, pg => pg.reportable_specs(since).await);
        Ok(sqlx::query_as::<_, (i64, String)>(
            "select s.spec_id, s.task_id from specs s left join executions e on e.task_id = s.task_id \
             where s.task_id is not null and s.source in ('github', 'ado') and s.source_meta like '%\"item_ref\"%' \
             and (s.updated_at >= ?1 or coalesce(e.updated_at, '') >= ?1 \
             or s.task_id in (select task_id from merges where updated_at >= ?1) or s.spec_id in \
             (select spec_id from forge_reports where state != 'posted' and attempts < 5)) order by s.spec_id",
        )
        .bind(since)
        .fetch_all(&mut *lite.read().await?)
        .await?)
    }
}
