//! Agent accounts out of quota (migration `0013_quota.sql`, issue 18.1).
//!
//! Owns the `quota_accounts` table: per account (an agent profile: `claude`, `codex`, …) until
//! when it is exhausted and the backoff last used for a stop that named no reset. Times are
//! stored fixed-width UTC, so comparing the text compares the times. It never decides how long
//! to wait: the runtime's driver does, and passes the time in.

use chrono::{DateTime, Utc};

use super::{parse_time, sortable_time, Store, StoreError};

/// An account known to be out of quota.
#[derive(Debug, Clone, PartialEq)]
pub struct QuotaAccount {
    /// The account (an agent profile name).
    pub account: String,
    /// When it is expected back.
    pub until: DateTime<Utc>,
    /// The backoff last used (seconds; 0 when the agent named its reset).
    pub backoff_secs: i64,
    /// What the agent said.
    pub reason: String,
}

impl Store {
    /// The exhaustion record of `account`, `None` when it has none (expired ones included:
    /// the caller compares `until` with its clock, and reads the last backoff).
    ///
    /// # Errors
    /// [`StoreError::Sqlx`]; [`StoreError::InvalidTimestamp`] for a stored time that is not one.
    pub async fn quota_account(&self, account: &str) -> Result<Option<QuotaAccount>, StoreError> {
        let lite = on_backend!(self, pg => pg.quota_account(account).await);
        let row = sqlx::query_as::<_, (String, i64, String)>(
            "select until, backoff_secs, reason from quota_accounts where account = ?",
        )
        .bind(account)
        .fetch_optional(&mut *lite.read().await?)
        .await?;
        row.map(|(until, backoff_secs, reason)| {
            Ok(QuotaAccount { account: account.to_string(), until: parse_time(&until)?, backoff_secs, reason })
        })
        .transpose()
    }

    /// Marks `account` exhausted until `until` (a later time already stored is kept: another
    /// execution saw a later reset), with the backoff used (`backoff_secs`, 0 when the agent
    /// named the reset) and the agent's words.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn set_quota_account(
        &self,
        account: &str,
        until: DateTime<Utc>,
        backoff_secs: i64,
        reason: &str,
    ) -> Result<(), StoreError> {
        let lite = on_backend!(self, pg => pg.set_quota_account(account, until, backoff_secs, reason).await);
        let mut tx = lite.begin_write().await?;
        sqlx::query(
            "insert into quota_accounts (account, until, backoff_secs, reason) values (?1, ?2, ?3, ?4) \
             on conflict (account) do update set until = max(until, excluded.until), \
             backoff_secs = excluded.backoff_secs, reason = excluded.reason",
        )
        .bind(account)
        .bind(sortable_time(until))
        .bind(backoff_secs)
        .bind(reason)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Forgets `account`'s exhaustion (an attempt on it succeeded): the next stop starts the
    /// backoff from a minute again.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn clear_quota_account(&self, account: &str) -> Result<(), StoreError> {
        let lite = on_backend!(self, pg => pg.clear_quota_account(account).await);
        let mut tx = lite.begin_write().await?;
        sqlx::query("delete from quota_accounts where account = ?").bind(account).execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(())
    }
}
