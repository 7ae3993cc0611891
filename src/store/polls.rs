//! The poll schedule of open pull requests (migration `0020_pr_poll.sql`, issue 19): when the
//! `pr-checks` pass next reads the checks of each open pull request's head, kept where every
//! replica (and a restarted process) reads it.
//!
//! Rows are written whole by `runtime::remediation`, which decides the schedule; this module
//! never computes a due time and never reads a forge.

use super::{Store, StoreError};

/// When the checks of one open pull request's head are read next.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct PrPollRow {
    /// The execution whose pull request it is.
    pub task_id: String,
    /// The head polled (a new head starts the schedule over).
    pub sha: String,
    /// The interval after the next poll, milliseconds.
    pub interval_ms: i64,
    /// When the next poll is due (RFC 3339, UTC).
    pub next_at: String,
}

impl Store {
    /// Every poll schedule, by execution.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn pr_polls(&self) -> Result<Vec<PrPollRow>, StoreError> {
        let lite = on_backend!(self, pg => pg.pr_polls().await);
        Ok(sqlx::query_as::<_, PrPollRow>("select task_id, sha, interval_ms, next_at from pr_polls order by task_id")
            .fetch_all(&mut *lite.read().await?)
            .await?)
    }

    /// Writes `row` (insert, or replace the execution's schedule).
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn put_pr_poll(&self, row: &PrPollRow) -> Result<(), StoreError> {
        let lite = on_backend!(self, pg => pg.put_pr_poll(row).await);
        let mut tx = lite.begin_write().await?;
        sqlx::query(
            "insert into pr_polls (task_id, sha, interval_ms, next_at) values (?, ?, ?, ?) \
             on conflict (task_id) do update set sha = excluded.sha, interval_ms = excluded.interval_ms, \
             next_at = excluded.next_at",
        )
        .bind(&row.task_id)
        .bind(&row.sha)
        .bind(row.interval_ms)
        .bind(&row.next_at)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Deletes the schedules of executions whose pull request is no longer open (no `merges`
    /// row in state `opened` with an address).
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn prune_pr_polls(&self) -> Result<(), StoreError> {
        let lite = on_backend!(self, pg => pg.prune_pr_polls().await);
        let mut tx = lite.begin_write().await?;
        sqlx::query(PRUNE_PR_POLLS).execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(())
    }
}

/// The statement of [`Store::prune_pr_polls`] (the same in both dialects).
pub(super) const PRUNE_PR_POLLS: &str = "delete from pr_polls where task_id not in \
     (select task_id from merges where state = 'opened' and pr_url != '')";
