//! Driver leases (one driver per execution) and the active task pointer.
//!
//! Owns the `leases` and `settings` tables. Lease timestamps are stored as fixed-width UTC
//! RFC 3339 with microseconds, so comparing the text compares the times. The store only records
//! pid and host; whether that process is alive is the runtime's question, never asked here.

use sqlx::SqliteConnection;

use super::{parse_time, sortable_time, LeaseInfo, Store, StoreError};

/// `settings` key of the active task pointer.
pub(super) const ACTIVE_TASK_KEY: &str = "active_task";

/// Fails with `NotFound` unless execution `task_id` exists.
async fn require_execution(conn: &mut SqliteConnection, task_id: &str) -> Result<(), StoreError> {
    let found = sqlx::query_scalar::<_, i64>("select 1 from executions where task_id = ?")
        .bind(task_id)
        .fetch_optional(conn)
        .await?;
    match found {
        Some(_) => Ok(()),
        None => Err(StoreError::NotFound { task_id: task_id.to_owned() }),
    }
}

/// The current lease row of `task_id`, if any.
async fn current_lease(conn: &mut SqliteConnection, task_id: &str) -> Result<Option<LeaseInfo>, StoreError> {
    Ok(sqlx::query_as::<_, LeaseInfo>(
        "select holder, pid, host, acquired_at, expires_at from leases where task_id = ?",
    )
    .bind(task_id)
    .fetch_optional(conn)
    .await?)
}

/// Normalises `now` and computes `now + ttl_secs`, both in sortable form.
pub(super) fn lease_window(now: &str, ttl_secs: i64) -> Result<(String, String), StoreError> {
    if ttl_secs <= 0 {
        return Err(StoreError::InvalidArgument(format!("lease ttl {ttl_secs} s is not positive")));
    }
    let now = parse_time(now)?;
    let expires = chrono::Duration::try_seconds(ttl_secs)
        .and_then(|ttl| now.checked_add_signed(ttl))
        .ok_or_else(|| StoreError::InvalidArgument(format!("lease ttl {ttl_secs} s is too large")))?;
    Ok((sortable_time(now), sortable_time(expires)))
}

impl Store {
    /// Takes the lease on `task_id` for `holder` from `now` (RFC 3339, any offset) for
    /// `ttl_secs` seconds.
    ///
    /// Succeeds if there is no lease, the lease has expired (`expires_at <= now`), or it is
    /// already held by `holder.holder` (then it is extended and keeps its original
    /// `acquired_at`). Only `holder.holder`, `pid` and `host` are read; the store sets
    /// `acquired_at` and `expires_at`.
    ///
    /// # Errors
    /// [`StoreError::LeaseHeld`] naming the current holder (id, pid, host, since, until) if
    /// another holder's lease has not expired; [`StoreError::NotFound`] if the execution does
    /// not exist; [`StoreError::InvalidArgument`] if `ttl_secs <= 0` or overflows;
    /// [`StoreError::InvalidTimestamp`] if `now` is not RFC 3339.
    #[tracing::instrument(level = "debug", skip_all, fields(task.id = %task_id, lease.holder = %holder.holder))]
    pub async fn acquire_lease(
        &self,
        task_id: &str,
        holder: &LeaseInfo,
        now: &str,
        ttl_secs: i64,
    ) -> Result<(), StoreError> {
        let lite = on_backend!(self, pg => pg.acquire_lease(task_id, holder, now, ttl_secs).await);
        let (now, expires_at) = lease_window(now, ttl_secs)?;
        let mut tx = lite.begin_write().await?;
        require_execution(&mut tx, task_id).await?;
        let acquired_at = match current_lease(&mut tx, task_id).await? {
            Some(current) if current.expires_at > now => {
                if current.holder != holder.holder {
                    return Err(StoreError::LeaseHeld { task_id: task_id.to_owned(), holder: Box::new(current) });
                }
                current.acquired_at
            }
            Some(_) | None => now,
        };
        sqlx::query(
            "insert into leases (task_id, holder, pid, host, acquired_at, expires_at) \
             values (?, ?, ?, ?, ?, ?) on conflict (task_id) do update set \
             holder = excluded.holder, pid = excluded.pid, host = excluded.host, \
             acquired_at = excluded.acquired_at, expires_at = excluded.expires_at",
        )
        .bind(task_id)
        .bind(&holder.holder)
        .bind(holder.pid)
        .bind(&holder.host)
        .bind(&acquired_at)
        .bind(&expires_at)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Extends `holder`'s lease on `task_id` to `now + ttl_secs`.
    ///
    /// Also succeeds if the lease has expired but nobody else has taken it since.
    ///
    /// # Errors
    /// [`StoreError::LeaseHeld`] if another holder now holds an unexpired lease;
    /// [`StoreError::LeaseNotHeld`] if there is no lease, or another holder's lease has
    /// expired (the caller lost it and must re-acquire); [`StoreError::InvalidArgument`],
    /// [`StoreError::InvalidTimestamp`] as for [`Store::acquire_lease`].
    #[tracing::instrument(level = "debug", skip_all, fields(task.id = %task_id, lease.holder = %holder))]
    pub async fn renew_lease(&self, task_id: &str, holder: &str, now: &str, ttl_secs: i64) -> Result<(), StoreError> {
        let lite = on_backend!(self, pg => pg.renew_lease(task_id, holder, now, ttl_secs).await);
        let (now, expires_at) = lease_window(now, ttl_secs)?;
        let mut tx = lite.begin_write().await?;
        match current_lease(&mut tx, task_id).await? {
            Some(current) if current.holder == holder => {}
            Some(current) if current.expires_at > now => {
                return Err(StoreError::LeaseHeld { task_id: task_id.to_owned(), holder: Box::new(current) });
            }
            Some(_) | None => {
                return Err(StoreError::LeaseNotHeld { task_id: task_id.to_owned(), holder: holder.to_owned() });
            }
        }
        sqlx::query("update leases set expires_at = ? where task_id = ? and holder = ?")
            .bind(&expires_at)
            .bind(task_id)
            .bind(holder)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Drops `holder`'s lease on `task_id`. Returns whether a lease was removed: `false` if
    /// there was none or it belongs to another holder (which is left alone).
    ///
    /// # Errors
    /// [`StoreError::Sqlx`] on database failure.
    #[tracing::instrument(level = "debug", skip_all, fields(task.id = %task_id, lease.holder = %holder))]
    pub async fn release_lease(&self, task_id: &str, holder: &str) -> Result<bool, StoreError> {
        let lite = on_backend!(self, pg => pg.release_lease(task_id, holder).await);
        let mut tx = lite.begin_write().await?;
        let done = sqlx::query("delete from leases where task_id = ? and holder = ?")
            .bind(task_id)
            .bind(holder)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(done.rows_affected() > 0)
    }

    /// The lease on `task_id`, expired or not (compare `expires_at` with your `now`), or
    /// `None` if there is none.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`] on database failure.
    #[tracing::instrument(level = "debug", skip_all, fields(task.id = %task_id))]
    pub async fn lease(&self, task_id: &str) -> Result<Option<LeaseInfo>, StoreError> {
        let lite = on_backend!(self, pg => pg.lease(task_id).await);
        let mut conn = lite.reader.acquire().await?;
        current_lease(&mut conn, task_id).await
    }

    /// Points the active task pointer at `task_id`.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] if the execution does not exist; [`StoreError::Sqlx`] on
    /// database failure.
    #[tracing::instrument(level = "debug", skip_all, fields(task.id = %task_id))]
    pub async fn set_active_task(&self, task_id: &str) -> Result<(), StoreError> {
        let lite = on_backend!(self, pg => pg.set_active_task(task_id).await);
        let mut tx = lite.begin_write().await?;
        require_execution(&mut tx, task_id).await?;
        sqlx::query(
            "insert into settings (key, value) values (?, ?) \
             on conflict (key) do update set value = excluded.value",
        )
        .bind(ACTIVE_TASK_KEY)
        .bind(task_id)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Clears the active task pointer (no-op if unset).
    ///
    /// # Errors
    /// [`StoreError::Sqlx`] on database failure.
    #[tracing::instrument(level = "debug", skip_all)]
    pub async fn clear_active_task(&self) -> Result<(), StoreError> {
        let lite = on_backend!(self, pg => pg.clear_active_task().await);
        let mut tx = lite.begin_write().await?;
        sqlx::query("delete from settings where key = ?").bind(ACTIVE_TASK_KEY).execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(())
    }

    /// The task id the active task pointer names, or `None` if unset.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`] on database failure.
    #[tracing::instrument(level = "debug", skip_all)]
    pub async fn active_task(&self) -> Result<Option<String>, StoreError> {
        let lite = on_backend!(self, pg => pg.active_task().await);
        Ok(sqlx::query_scalar::<_, String>("select value from settings where key = ?")
            .bind(ACTIVE_TASK_KEY)
            .fetch_optional(&lite.reader)
            .await?)
    }
}
