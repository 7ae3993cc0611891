//! Driver leases and the active task pointer on PostgreSQL (see `lease.rs` of the store for the
//! contract).
//!
//! Owns the PostgreSQL statements of the `leases` and `settings` tables. Taking a lease is one
//! `insert … on conflict … do update … where` statement: the row's own lock decides between two
//! takers, never a read followed by a write.

use sqlx::PgConnection;

use super::super::lease::{lease_window, ACTIVE_TASK_KEY};
use super::super::{LeaseInfo, StoreError};
use super::{require_execution, Pg};

/// Attempts of [`Pg::acquire_lease`] when the lease it was refused vanished before it could
/// read it (released or taken over in between).
const ACQUIRE_ATTEMPTS: u32 = 3;

/// The current lease row of `task_id`, if any.
async fn current_lease(conn: &mut PgConnection, task_id: &str) -> Result<Option<LeaseInfo>, StoreError> {
    let row = sqlx::query_as::<_, (String, i64, String, String, String)>(
        "select holder, pid, host, acquired_at, expires_at from leases where task_id = $1",
    )
    .bind(task_id)
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|(holder, pid, host, acquired_at, expires_at)| LeaseInfo {
        holder,
        pid: u32::try_from(pid).unwrap_or(0),
        host,
        acquired_at,
        expires_at,
    }))
}

impl Pg {
    pub(in super::super) async fn acquire_lease(
        &self,
        task_id: &str,
        holder: &LeaseInfo,
        now: &str,
        ttl_secs: i64,
    ) -> Result<(), StoreError> {
        let (now, expires_at) = lease_window(now, ttl_secs)?;
        let mut conn = self.pool.acquire().await?;
        require_execution(&mut conn, task_id).await?;
        for _ in 0..ACQUIRE_ATTEMPTS {
            // Taken when free, expired, or already ours (then it keeps its acquired_at).
            let taken = sqlx::query(
                "insert into leases (task_id, holder, pid, host, acquired_at, expires_at) \
                 values ($1, $2, $3, $4, $5, $6) on conflict (task_id) do update set \
                 acquired_at = case when leases.holder = excluded.holder and leases.expires_at > excluded.acquired_at \
                   then leases.acquired_at else excluded.acquired_at end, \
                 holder = excluded.holder, pid = excluded.pid, host = excluded.host, \
                 expires_at = excluded.expires_at \
                 where leases.holder = excluded.holder or leases.expires_at <= excluded.acquired_at",
            )
            .bind(task_id)
            .bind(&holder.holder)
            .bind(i64::from(holder.pid))
            .bind(&holder.host)
            .bind(&now)
            .bind(&expires_at)
            .execute(&mut *conn)
            .await?
            .rows_affected();
            if taken == 1 {
                return Ok(());
            }
            if let Some(current) = current_lease(&mut conn, task_id).await? {
                if current.holder != holder.holder && current.expires_at > now {
                    return Err(StoreError::LeaseHeld { task_id: task_id.to_owned(), holder: Box::new(current) });
                }
            }
        }
        Err(StoreError::InvalidArgument(format!("the lease on execution {task_id} changed hands while it was taken")))
    }

    pub(in super::super) async fn renew_lease(
        &self,
        task_id: &str,
        holder: &str,
        now: &str,
        ttl_secs: i64,
    ) -> Result<(), StoreError> {
        let (now, expires_at) = lease_window(now, ttl_secs)?;
        let mut conn = self.pool.acquire().await?;
        let renewed = sqlx::query("update leases set expires_at = $1 where task_id = $2 and holder = $3")
            .bind(&expires_at)
            .bind(task_id)
            .bind(holder)
            .execute(&mut *conn)
            .await?
            .rows_affected();
        if renewed == 1 {
            return Ok(());
        }
        match current_lease(&mut conn, task_id).await? {
            Some(current) if current.expires_at > now => {
                Err(StoreError::LeaseHeld { task_id: task_id.to_owned(), holder: Box::new(current) })
            }
            Some(_) | None => Err(StoreError::LeaseNotHeld { task_id: task_id.to_owned(), holder: holder.to_owned() }),
        }
    }

    pub(in super::super) async fn release_lease(&self, task_id: &str, holder: &str) -> Result<bool, StoreError> {
        let done = sqlx::query("delete from leases where task_id = $1 and holder = $2")
            .bind(task_id)
            .bind(holder)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    pub(in super::super) async fn lease(&self, task_id: &str) -> Result<Option<LeaseInfo>, StoreError> {
        let mut conn = self.pool.acquire().await?;
        current_lease(&mut conn, task_id).await
    }

    pub(in super::super) async fn set_active_task(&self, task_id: &str) -> Result<(), StoreError> {
        let mut tx = self.begin_write().await?;
        require_execution(&mut tx, task_id).await?;
        sqlx::query(
            "insert into settings (key, value) values ($1, $2) on conflict (key) do update set value = excluded.value",
        )
        .bind(ACTIVE_TASK_KEY)
        .bind(task_id)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    pub(in super::super) async fn clear_active_task(&self) -> Result<(), StoreError> {
        sqlx::query("delete from settings where key = $1").bind(ACTIVE_TASK_KEY).execute(&self.pool).await?;
        Ok(())
    }

    pub(in super::super) async fn active_task(&self) -> Result<Option<String>, StoreError> {
        Ok(sqlx::query_scalar::<_, String>("select value from settings where key = $1")
            .bind(ACTIVE_TASK_KEY)
            .fetch_optional(&self.pool)
            .await?)
    }
}
