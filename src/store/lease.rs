//! Driver leases (one driver per execution) and the active task pointer.
//!
//! Owns the `leases` and `settings` tables, the `lease_epoch` column of `executions` (the
//! highest fencing epoch the execution ever leased out), and `execution_idle` (the journal head
//! at which an execution's driver let its lease go to wait for a human: claims leave it alone
//! until the journal moves). Lease timestamps are stored as
//! fixed-width UTC RFC 3339 with microseconds, so comparing the text compares the times. The
//! store only records pid, host and home; whether that process is alive is the runtime's
//! question, never asked here.
//!
//! Fencing: a takeover (no lease, an expired one, or another holder's expired one) takes epoch
//! `lease_epoch + 1`; renewing or re-acquiring one's own live lease keeps it. A fenced append
//! checks holder and epoch in its own transaction (`journal.rs`, `writer.rs`), and takeovers
//! write in the same single writer's transactions, so an append never lands after a takeover
//! it did not see.

use sqlx::SqliteConnection;

use super::{parse_time, sortable_time, Fence, LeaseInfo, Store, StoreError};

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

/// Points the active task pointer at `task_id` in the caller's transaction (`set_active_task`,
/// and `create_execution`, which creates and activates in one commit).
pub(super) async fn put_active_task(conn: &mut SqliteConnection, task_id: &str) -> Result<(), StoreError> {
    sqlx::query(
        "insert into settings (key, value) values (?, ?) on conflict (key) do update set value = excluded.value",
    )
    .bind(ACTIVE_TASK_KEY)
    .bind(task_id)
    .execute(conn)
    .await?;
    Ok(())
}

/// The current lease row of `task_id`, if any.
pub(super) async fn current_lease(conn: &mut SqliteConnection, task_id: &str) -> Result<Option<LeaseInfo>, StoreError> {
    Ok(sqlx::query_as::<_, LeaseInfo>(
        "select holder, pid, host, acquired_at, expires_at, epoch, home from leases where task_id = ?",
    )
    .bind(task_id)
    .fetch_optional(conn)
    .await?)
}

/// The executions [`Store::claim_leases`] may take (SQLite; `?` is `now`): `(task_id,
/// lease_epoch, the expired lease's epoch or 0)`, least recently updated first.
const CLAIMABLE_SQL: &str = "select e.task_id, e.lease_epoch, coalesce(l.epoch, 0) from executions e \
     left join leases l on l.task_id = e.task_id \
     where e.status in ('running', 'gate_pending', 'gate_failed') \
     and exists (select 1 from specs s where s.task_id = e.task_id) \
     and not exists (select 1 from settings p where p.key = 'paused:' || e.task_id) \
     and not exists (select 1 from execution_idle i where i.task_id = e.task_id and i.seq = e.last_seq) \
     and (l.task_id is null or l.expires_at <= ?) \
     order by e.updated_at, e.task_id";

/// What taking the lease does, given the `current` lease row and the execution's `highest`
/// epoch: `(acquired_at, epoch)` to write, or [`StoreError::LeaseHeld`]. Shared by both
/// backends, which call it with the rows locked.
pub(super) fn decide_acquire(
    task_id: &str,
    current: Option<LeaseInfo>,
    holder: &LeaseInfo,
    now: &str,
    highest: i64,
) -> Result<(String, i64), StoreError> {
    match current {
        Some(current) if current.expires_at.as_str() > now => {
            if current.holder != holder.holder {
                return Err(StoreError::LeaseHeld { task_id: task_id.to_owned(), holder: Box::new(current) });
            }
            Ok((current.acquired_at, current.epoch))
        }
        Some(expired) => Ok((now.to_owned(), highest.max(expired.epoch) + 1)),
        None => Ok((now.to_owned(), highest + 1)),
    }
}

/// Whether `fence` is the current lease of `task_id` (`Ok`), else [`StoreError::Fenced`]
/// naming the lease now. Backend-neutral: the caller read `current` inside its append's
/// transaction.
pub(super) fn check_fence(task_id: &str, fence: &Fence, current: Option<(String, i64)>) -> Result<(), StoreError> {
    match current {
        Some((holder, epoch)) if holder == fence.holder && epoch == fence.epoch => Ok(()),
        other => {
            let (current_holder, current) = other.unwrap_or_default();
            Err(StoreError::Fenced {
                task_id: task_id.to_owned(),
                holder: fence.holder.clone(),
                epoch: fence.epoch,
                current_holder,
                current,
            })
        }
    }
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
    /// `ttl_secs` seconds, and returns its fencing epoch.
    ///
    /// Succeeds if there is no lease, the lease has expired (`expires_at <= now`), or it is
    /// already held by `holder.holder` (then it is extended and keeps its original
    /// `acquired_at` and its epoch). Any other success is a takeover: the epoch becomes one more
    /// than the highest this execution ever had, so every earlier holder's fenced appends are
    /// refused from now on. Only `holder.holder`, `pid`, `host` and `home` are read; the store
    /// sets `acquired_at`, `expires_at` and `epoch`.
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
    ) -> Result<i64, StoreError> {
        let lite = on_backend!(self, pg => pg.acquire_lease(task_id, holder, now, ttl_secs).await);
        let (now, expires_at) = lease_window(now, ttl_secs)?;
        let mut tx = lite.begin_write().await?;
        let highest = sqlx::query_scalar::<_, i64>("select lease_epoch from executions where task_id = ?")
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

    /// Claims up to `limit` executions for `holder`: each fired for a spec, with work a driver
    /// can do without a human (status `running`, `gate_pending` or `gate_failed`, and not left
    /// waiting for a human by [`Store::release_lease_waiting`] at its journal's current head),
    /// not paused, not in `exclude` (what the caller drives already), and with no lease or an expired one
    /// (its holder was killed, paused or cut off). Each is leased to `holder` from `now` for
    /// `ttl_secs` as a takeover (a new epoch). Returns `(task_id, epoch)` pairs, least recently
    /// updated first.
    ///
    /// SQLite: one writer's transaction. PostgreSQL: the candidates are locked
    /// `for update skip locked`, so replicas claiming at once never get the same execution.
    ///
    /// # Errors
    /// [`StoreError::InvalidArgument`] / [`StoreError::InvalidTimestamp`] as for
    /// [`Store::acquire_lease`]; [`StoreError::Sqlx`] on database failure.
    #[tracing::instrument(level = "debug", skip_all, fields(lease.holder = %holder.holder, limit))]
    pub async fn claim_leases(
        &self,
        holder: &LeaseInfo,
        exclude: &[String],
        now: &str,
        ttl_secs: i64,
        limit: usize,
    ) -> Result<Vec<(String, i64)>, StoreError> {
        let lite = on_backend!(self, pg => pg.claim_leases(holder, exclude, now, ttl_secs, limit).await);
        let (now, expires_at) = lease_window(now, ttl_secs)?;
        let mut tx = lite.begin_write().await?;
        let candidates = sqlx::query_as::<_, (String, i64, i64)>(CLAIMABLE_SQL).bind(&now).fetch_all(&mut *tx).await?;
        let mut claimed = Vec::new();
        for (task_id, highest, current) in candidates {
            if claimed.len() >= limit {
                break;
            }
            if exclude.contains(&task_id) {
                continue;
            }
            let epoch = highest.max(current) + 1;
            write_lease(&mut tx, &task_id, holder, &now, &expires_at, epoch).await?;
            claimed.push((task_id, epoch));
        }
        tx.commit().await?;
        Ok(claimed)
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

    /// [`Store::release_lease`] by a driver that stopped because the execution waits for a
    /// human (an approval, feedback, an interactive step's reply, a budget): in the same
    /// transaction, when the lease was `holder`'s, the execution is marked as waiting at its
    /// journal's current head, and [`Store::claim_leases`] leaves it alone until an event is
    /// appended after that head (the decision). Returns whether a lease was removed.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`] on database failure.
    #[tracing::instrument(level = "debug", skip_all, fields(task.id = %task_id, lease.holder = %holder))]
    pub async fn release_lease_waiting(&self, task_id: &str, holder: &str) -> Result<bool, StoreError> {
        let lite = on_backend!(self, pg => pg.release_lease_waiting(task_id, holder).await);
        let mut tx = lite.begin_write().await?;
        let done = sqlx::query("delete from leases where task_id = ? and holder = ?")
            .bind(task_id)
            .bind(holder)
            .execute(&mut *tx)
            .await?
            .rows_affected()
            > 0;
        if done {
            sqlx::query(
                "insert into execution_idle (task_id, seq) select task_id, last_seq from executions \
                 where task_id = ? on conflict (task_id) do update set seq = excluded.seq",
            )
            .bind(task_id)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(done)
    }

    /// The lease on `task_id`, expired or not (compare `expires_at` with your `now`), or
    /// `None` if there is none.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`] on database failure.
    #[tracing::instrument(level = "debug", skip_all, fields(task.id = %task_id))]
    pub async fn lease(&self, task_id: &str) -> Result<Option<LeaseInfo>, StoreError> {
        let lite = on_backend!(self, pg => pg.lease(task_id).await);
        let mut conn = lite.read().await?;
        current_lease(&mut conn, task_id).await
    }

    /// Whether `fence` is still `task_id`'s lease: `Ok` when its holder and epoch are the
    /// lease's now, else [`StoreError::Fenced`] naming the lease now, the refusal an append
    /// with that fence would get ([`Store::append_fenced`]). For a holder that must tell
    /// whether something it was refused for comes from its lease having been taken over.
    ///
    /// # Errors
    /// [`StoreError::Fenced`]; [`StoreError::Sqlx`] on database failure.
    pub async fn check_fence(&self, task_id: &str, fence: &Fence) -> Result<(), StoreError> {
        let current = self.lease(task_id).await?.map(|lease| (lease.holder, lease.epoch));
        check_fence(task_id, fence, current)
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
        put_active_task(&mut tx, task_id).await?;
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
            .fetch_optional(&mut *lite.read().await?)
            .await?)
    }
}

/// Writes `holder`'s lease on `task_id` (`acquired_at` to `expires_at`, at `epoch`) over any
/// previous one, and keeps `epoch` as the execution's highest, in the caller's transaction.
async fn write_lease(
    conn: &mut sqlx::SqliteConnection,
    task_id: &str,
    holder: &LeaseInfo,
    acquired_at: &str,
    expires_at: &str,
    epoch: i64,
) -> Result<(), StoreError> {
    sqlx::query(
        "insert into leases (task_id, holder, pid, host, acquired_at, expires_at, epoch, home) \
         values (?, ?, ?, ?, ?, ?, ?, ?) on conflict (task_id) do update set \
         holder = excluded.holder, pid = excluded.pid, host = excluded.host, \
         acquired_at = excluded.acquired_at, expires_at = excluded.expires_at, \
         epoch = excluded.epoch, home = excluded.home",
    )
    .bind(task_id)
    .bind(&holder.holder)
    .bind(holder.pid)
    .bind(&holder.host)
    .bind(acquired_at)
    .bind(expires_at)
    .bind(epoch)
    .bind(&holder.home)
    .execute(&mut *conn)
    .await?;
    sqlx::query("update executions set lease_epoch = ? where task_id = ?")
        .bind(epoch)
        .bind(task_id)
        .execute(&mut *conn)
        .await?;
    Ok(())
}
