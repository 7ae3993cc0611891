//! Executions whose `ci` gate waits for the forge's checks (migration `0015_ci_waits.sql`,
//! issue 19.2).
//!
//! Reads the `execution_ci_waits` table, which triggers on the journal keep (`ci_started`
//! opens a row, `ci_checked` counts the checks, the verdict or a cancel closes it). It never
//! writes it and never decides anything about a wait: `runtime::ci` does.

use super::{Store, StoreError};

/// One execution waiting for CI.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct CiWaitRow {
    /// The execution.
    pub task_id: String,
    /// The phase whose gate waits.
    pub phase_id: i64,
    /// The pushed commit whose checks decide.
    pub sha: String,
    /// When the wait times out (RFC 3339, UTC).
    pub until: String,
    /// Checks finished.
    pub done: i64,
    /// Checks reported.
    pub total: i64,
}

impl Store {
    /// The executions waiting for the checks of commit `sha` (any case) or whose feature branch
    /// `baton/<task_id>` is one of `branches`.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn ci_waits_for(&self, sha: Option<&str>, branches: &[String]) -> Result<Vec<CiWaitRow>, StoreError> {
        let rows = match &self.backend {
            super::Backend::Postgres(pg) => pg.ci_waits().await?,
            super::Backend::Sqlite(lite) => {
                sqlx::query_as::<_, CiWaitRow>(
                    "select task_id, phase_id, sha, until, done, total from execution_ci_waits order by task_id",
                )
                .fetch_all(&mut *lite.read().await?)
                .await?
            }
        };
        let sha = sha.map(str::to_ascii_lowercase).filter(|s| !s.is_empty());
        Ok(rows
            .into_iter()
            .filter(|r| {
                sha.as_deref().is_some_and(|s| r.sha.to_ascii_lowercase() == s)
                    || branches.iter().any(|b| *b == format!("baton/{}", r.task_id))
            })
            .collect())
    }

    /// The CI wait of execution `task_id`, if its ci gate waits.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn ci_wait(&self, task_id: &str) -> Result<Option<CiWaitRow>, StoreError> {
        let lite = on_backend!(self, pg => pg.ci_wait(task_id).await);
        Ok(sqlx::query_as::<_, CiWaitRow>(
            "select task_id, phase_id, sha, until, done, total from execution_ci_waits where task_id = ?",
        )
        .bind(task_id)
        .fetch_optional(&mut *lite.read().await?)
        .await?)
    }
}
