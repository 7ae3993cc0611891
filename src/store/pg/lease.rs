//! Driver leases and the active task pointer on PostgreSQL (see `lease.rs` of the store for the
//! contract).
//!
//! Owns the PostgreSQL statements of the `leases`, `settings` and `execution_idle` tables. Taking a lease locks
//! the execution's row first (`select … for update`): two takers, and a taker and an append
//! (which locks the same row), run one after the other, so the epoch moves exactly once per
//! takeover and a fenced append always sees the lease as of its commit.

use sqlx::PgConnection;

use super::super::lease::{decide_acquire, lease_window, ACTIVE_TASK_KEY};
use super::super::{LeaseInfo, StoreError};
use super::{require_execution, Pg};

/// Points the active task pointer at `task_id` in the caller's transaction (`set_active_task`,
/// and `create_execution`, which creates and activates in one commit).
pub(super) async fn put_active_task(conn: &mut PgConnection, task_id: &str) -> Result<(), StoreError> {
    sqlx::query(
        "insert into settings (key, value) values ($1, $2) on conflict (key) do update set value = excluded.value",
    )
    .bind(ACTIVE_TASK_KEY)
    .bind(task_id)
    .execute(conn)
    .await?;
    Ok(())
}

/// The current lease row of `task_id`, if any.
async fn current_lease(conn: &mut PgConnection, task_id: &str) -> Result<Option<LeaseInfo>, StoreError> {
    let row = sqlx::query_as::<_, (String, i64, String, String, String, i64, String)>(
        "select holder, pid, host, acquired_at, expires_at, epoch, home from leases where task_id = $1",
    )
    .bind(task_id)
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|(holder, pid, host, acquired_at, expires_at, epoch, home)| LeaseInfo {
        holder,
        pid: u32::try_from(pid).unwrap_or(0),
        host,
        acquired_at,
        expires_at,
        epoch,
        home,
    }))
}

impl Pg {
    pub(in super::super) async fn acquire_lease(
        &self,
        task_id: &str,
        holder: &LeaseInfo,
        now: &str,
        ttl_secs: i64,
    ) -> Result<i64, StoreError> {
        let (now, expires_at) = lease_window(now, ttl_secs)?;
        let mut tx = self.begin_write().await?;
        let highest = sqlx::query_scalar::<_, i64>("select lease_epoch from executions where task_id = $1 for update")
            .bind(task_id)
            .fetch_optional(&mut *tx)
            .await?
            .ok_or_else(|| StoreError::NotFound { task_id: task_id.to_owned() })?;
        let current = current_lease(&mut tx, task_id).await?;
        let (acquired_at, epoch) = decide_acquire(task_id, current, holder, &now, highest)?;
        write_lease(&mut tx, task_id, holder, &acquired_at, &expires_at, epoch).await?;
        tx.commit().await?;
        Ok(epoch)
    }

    /// See [`Store::claim_leases`](super::super::Store::claim_leases): the candidates' execution
    /// rows are locked `for update … skip locked`, so a replica claiming at the same moment skips
    /// what this one is taking (and an append in flight delays only its own execution's claim).
    pub(in super::super) async fn claim_leases(
        &self,
        holder: &LeaseInfo,
        exclude: &[String],
        now: &str,
        ttl_secs: i64,
        limit: usize,
    ) -> Result<Vec<(String, i64)>, StoreError> {
        let (now, expires_at) = lease_window(now, ttl_secs)?;
        let mut tx = self.begin_write().await?;
        let candidates = sqlx::query_as::<_, (String, i64)>(
            "select e.task_id, e.lease_epoch from executions e \
             left join leases l on l.task_id = e.task_id \
             where e.status in ('running', 'gate_pending', 'gate_failed') \
             and exists (select 1 from specs s where s.task_id = e.task_id) \
             and not exists (select 1 from settings p where p.key = 'paused:' || e.task_id) \
             and not exists (select 1 from execution_idle i where i.task_id = e.task_id and i.seq = e.last_seq) \
             and (l.task_id is null or l.expires_at <= $1) \
             and not (e.task_id = any($2)) \
             order by e.updated_at, e.task_id limit $3 \
             for update of e skip locked",
        )
        .bind(&now)
        .bind(exclude)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&mut *tx)
        .await?;
        let mut claimed = Vec::new();
        for (task_id, highest) in candidates {
            // The lease as it is now, not as the candidates' snapshot saw it. A replica that
            // claimed this execution and committed while this query waited for its row lock
            // wrote a lease row, not this execution row's lease condition: PostgreSQL
            // rechecks a locked row's own columns after the wait, but the left-joined lease
            // keeps its old snapshot (seen on the racing-claims test: both replicas took the
            // same four executions). The execution row is locked now, so the lease read here
            // cannot change before this transaction commits.
            let lease = sqlx::query_as::<_, (i64, String)>("select epoch, expires_at from leases where task_id = $1")
                .bind(&task_id)
                .fetch_optional(&mut *tx)
                .await?;
            if lease.as_ref().is_some_and(|(_, expires)| *expires > now) {
                continue;
            }
            let epoch = highest.max(lease.map_or(0, |(epoch, _)| epoch)) + 1;
            write_lease(&mut tx, &task_id, holder, &now, &expires_at, epoch).await?;
            claimed.push((task_id, epoch));
        }
        tx.commit().await?;
        Ok(claimed)
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

    /// See [`Store::release_lease_waiting`](super::super::Store::release_lease_waiting): the
    /// execution's row is locked first, so no append lands between reading its head and
    /// marking it.
    pub(in super::super) async fn release_lease_waiting(
        &self,
        task_id: &str,
        holder: &str,
    ) -> Result<bool, StoreError> {
        let mut tx = self.begin_write().await?;
        sqlx::query("select 1 from executions where task_id = $1 for update").bind(task_id).execute(&mut *tx).await?;
        let done = sqlx::query("delete from leases where task_id = $1 and holder = $2")
            .bind(task_id)
            .bind(holder)
            .execute(&mut *tx)
            .await?
            .rows_affected()
            > 0;
        if done {
            sqlx::query(
                "insert into execution_idle (task_id, seq) select task_id, last_seq from executions \
                 where task_id = $1 on conflict (task_id) do update set seq = excluded.seq",
            )
            .bind(task_id)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(done)
    }

    pub(in super::super) async fn lease(&self, task_id: &str) -> Result<Option<LeaseInfo>, StoreError> {
        let mut conn = self.pool.acquire().await?;
        current_lease(&mut conn, task_id).await
    }

    pub(in super::super) async fn set_active_task(&self, task_id: &str) -> Result<(), StoreError> {
        let mut tx = self.begin_write().await?;
        require_execution(&mut tx, task_id).await?;
        put_active_task(&mut tx, task_id).await?;
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

/// Writes `holder`'s lease on `task_id` (`acquired_at` to `expires_at`, at `epoch`) over any
/// previous one, and keeps `epoch` as the execution's highest, in the caller's transaction.
async fn write_lease(
    conn: &mut sqlx::PgConnection,
    task_id: &str,
    holder: &LeaseInfo,
    acquired_at: &str,
    expires_at: &str,
    epoch: i64,
) -> Result<(), StoreError> {
    sqlx::query(
        "insert into leases (task_id, holder, pid, host, acquired_at, expires_at, epoch, home) \
         values ($1, $2, $3, $4, $5, $6, $7, $8) on conflict (task_id) do update set \
         holder = excluded.holder, pid = excluded.pid, host = excluded.host, \
         acquired_at = excluded.acquired_at, expires_at = excluded.expires_at, \
         epoch = excluded.epoch, home = excluded.home",
    )
    .bind(task_id)
    .bind(&holder.holder)
    .bind(i64::from(holder.pid))
    .bind(&holder.host)
    .bind(acquired_at)
    .bind(expires_at)
    .bind(epoch)
    .bind(&holder.home)
    .execute(&mut *conn)
    .await?;
    sqlx::query("update executions set lease_epoch = $1 where task_id = $2")
        .bind(epoch)
        .bind(task_id)
        .execute(&mut *conn)
        .await?;
    Ok(())
}
