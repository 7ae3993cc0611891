//! Webhook deliveries and the look-ups a delivery needs (migration `0004_webhooks.sql`).
//!
//! Owns the `webhook_deliveries` and `forge_item_revs` tables and the `github_login` and
//! `ado_email` of users; finds projects by `forge_repo` and specs by `source_url` or by their
//! item's key (`source_key`, migration 0010). It never authenticates a delivery nor interprets
//! its payload: the web layer verifies, the runtime imports.

use super::pmo::{ProjectRow, SpecRow};
use super::{Store, StoreError, UserRow};

impl Store {
    /// Claims delivery `delivery_id` of `source`: `true` the first time, `false` when it was
    /// claimed before (a redelivery).
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn claim_delivery(&self, source: &str, delivery_id: &str, at: &str) -> Result<bool, StoreError> {
        let lite = on_backend!(self, pg => pg.claim_delivery(source, delivery_id, at).await);
        let mut tx = lite.begin_write().await?;
        let done = sqlx::query(
            "insert into webhook_deliveries (source, delivery_id, received_at, outcome) values (?, ?, ?, 'received') \
             on conflict (source, delivery_id) do nothing",
        )
        .bind(source)
        .bind(delivery_id)
        .bind(at)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(done.rows_affected() == 1)
    }

    /// Sets what a claimed delivery did.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn set_delivery_outcome(&self, source: &str, delivery_id: &str, outcome: &str) -> Result<(), StoreError> {
        let lite = on_backend!(self, pg => pg.set_delivery_outcome(source, delivery_id, outcome).await);
        let mut tx = lite.begin_write().await?;
        sqlx::query("update webhook_deliveries set outcome = ? where source = ? and delivery_id = ?")
            .bind(outcome)
            .bind(source)
            .bind(delivery_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Forgets a claimed delivery whose handling failed, so the forge's retry applies it.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn release_delivery(&self, source: &str, delivery_id: &str) -> Result<(), StoreError> {
        let lite = on_backend!(self, pg => pg.release_delivery(source, delivery_id).await);
        let mut tx = lite.begin_write().await?;
        sqlx::query("delete from webhook_deliveries where source = ? and delivery_id = ?")
            .bind(source)
            .bind(delivery_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Recorded deliveries of `source` as (delivery id, outcome), oldest first.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn deliveries(&self, source: &str) -> Result<Vec<(String, String)>, StoreError> {
        let lite = on_backend!(self, pg => pg.deliveries(source).await);
        Ok(sqlx::query_as::<_, (String, String)>(
            "select delivery_id, outcome from webhook_deliveries where source = ? order by received_at, delivery_id",
        )
        .bind(source)
        .fetch_all(&mut *lite.read().await?)
        .await?)
    }

    /// The newest imported revision of the forge item at `url`, if any.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn item_rev(&self, source: &str, url: &str) -> Result<Option<i64>, StoreError> {
        let lite = on_backend!(self, pg => pg.item_rev(source, url).await);
        Ok(sqlx::query_scalar::<_, i64>("select rev from forge_item_revs where source = ? and url = ?")
            .bind(source)
            .bind(url)
            .fetch_optional(&mut *lite.read().await?)
            .await?)
    }

    /// Records `rev` as the imported revision of the item at `url` (kept when it is newer).
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn set_item_rev(&self, source: &str, url: &str, rev: i64) -> Result<(), StoreError> {
        let lite = on_backend!(self, pg => pg.set_item_rev(source, url, rev).await);
        let mut tx = lite.begin_write().await?;
        sqlx::query(
            "insert into forge_item_revs (source, url, rev) values (?, ?, ?) \
             on conflict (source, url) do update set rev = max(rev, excluded.rev)",
        )
        .bind(source)
        .bind(url)
        .bind(rev)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// The projects whose `forge_repo` is one of `names` (compared without case), by name.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn projects_by_forge_repo(&self, names: &[&str]) -> Result<Vec<ProjectRow>, StoreError> {
        let lite = on_backend!(self, pg => pg.projects_by_forge_repo(names).await);
        let mut out = Vec::new();
        for name in names.iter().filter(|n| !n.is_empty()) {
            let rows = sqlx::query_as::<_, ProjectRow>(
                "select * from projects where forge_repo != '' and lower(forge_repo) = lower(?) order by name",
            )
            .bind(name)
            .fetch_all(&mut *lite.read().await?)
            .await?;
            for r in rows {
                if !out.iter().any(|p: &ProjectRow| p.name == r.name) {
                    out.push(r);
                }
            }
        }
        Ok(out)
    }

    /// The spec imported from `source_url` of `source`, if any (the oldest when several).
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn spec_by_source_url(&self, source: &str, source_url: &str) -> Result<Option<SpecRow>, StoreError> {
        let lite = on_backend!(self, pg => pg.spec_by_source_url(source, source_url).await);
        Ok(sqlx::query_as::<_, SpecRow>(&format!(
            "select {} from specs where source = ? and source_url = ? and source_url != '' order by spec_id limit 1",
            super::pmo::SPEC_COLUMNS
        ))
        .bind(source)
        .bind(source_url)
        .fetch_optional(&mut *lite.read().await?)
        .await?)
    }

    /// The spec of the forge item whose identity is `source_key` (`forge::item_key`), if any.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn spec_by_source_key(&self, source_key: &str) -> Result<Option<SpecRow>, StoreError> {
        let lite = on_backend!(self, pg => pg.spec_by_source_key(source_key).await);
        if source_key.is_empty() {
            return Ok(None);
        }
        Ok(sqlx::query_as::<_, SpecRow>(&format!(
            "select {} from specs where source_key = ?",
            super::pmo::SPEC_COLUMNS
        ))
        .bind(source_key)
        .fetch_optional(&mut *lite.read().await?)
        .await?)
    }

    /// Forge specs written before their item's key was kept (migration 0010), oldest first:
    /// (spec id, source, source url).
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn specs_without_source_key(&self) -> Result<Vec<(i64, String, String)>, StoreError> {
        let lite = on_backend!(self, pg => pg.specs_without_source_key().await);
        Ok(sqlx::query_as::<_, (i64, String, String)>(
            "select spec_id, source, source_url from specs \
             where source_key = '' and source != 'board' and source_url != '' order by spec_id",
        )
        .fetch_all(&mut *lite.read().await?)
        .await?)
    }

    /// Gives spec `spec_id` (still without a key) the item key `source_key`, unless another
    /// spec holds it: then the spec gets `superseded:<spec_id>` instead, with a spec event
    /// `superseded_duplicate` (`reason`, by `actor` at `at`), in the same transaction; returns
    /// the spec holding the key then. `Ok(None)` when the key was given (or the spec has one
    /// already).
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn claim_source_key(
        &self,
        spec_id: i64,
        source_key: &str,
        reason: impl Fn(i64) -> String,
        actor: &str,
        at: &str,
    ) -> Result<Option<i64>, StoreError> {
        let lite = on_backend!(self, pg => pg.claim_source_key(spec_id, source_key, reason, actor, at).await);
        let mut tx = lite.begin_write().await?;
        let holder = sqlx::query_scalar::<_, i64>("select spec_id from specs where source_key = ? and spec_id != ?")
            .bind(source_key)
            .bind(spec_id)
            .fetch_optional(&mut *tx)
            .await?;
        let Some(holder) = holder else {
            sqlx::query("update specs set source_key = ? where spec_id = ? and source_key = ''")
                .bind(source_key)
                .bind(spec_id)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            return Ok(None);
        };
        let done = sqlx::query("update specs set source_key = ? where spec_id = ? and source_key = ''")
            .bind(format!("superseded:{spec_id}"))
            .bind(spec_id)
            .execute(&mut *tx)
            .await?;
        if done.rows_affected() == 1 {
            sqlx::query(
                "insert into spec_events (spec_id, seq, action, from_status, to_status, actor, reason, at) \
                 select ?1, (select coalesce(max(seq), 0) + 1 from spec_events where spec_id = ?1), \
                 'superseded_duplicate', status, status, ?2, ?3, ?4 from specs where spec_id = ?1",
            )
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

    /// The user whose forge identity `kind` is `value` (compared without case).
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn user_by_identity(&self, kind: ForgeIdentity, value: &str) -> Result<Option<UserRow>, StoreError> {
        let lite = on_backend!(self, pg => pg.user_by_identity(kind, value).await);
        let column = kind.column();
        Ok(sqlx::query_as::<_, UserRow>(&format!(
            "select name, role, created_at from users where {column} != '' and lower({column}) = lower(?)"
        ))
        .bind(value)
        .fetch_optional(&mut *lite.read().await?)
        .await?)
    }

    /// Sets (or, with `""`, clears) the forge identity `kind` of user `name`; `false` when no
    /// such user.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`] (the identity is another user's: a unique index).
    pub async fn set_identity(&self, name: &str, kind: ForgeIdentity, value: &str) -> Result<bool, StoreError> {
        let lite = on_backend!(self, pg => pg.set_identity(name, kind, value).await);
        let mut tx = lite.begin_write().await?;
        let done = sqlx::query(&format!("update users set {} = ? where name = ?", kind.column()))
            .bind(value)
            .bind(name)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(done.rows_affected() == 1)
    }
}

/// Which forge identity of a user maps a forge comment to them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForgeIdentity {
    /// Their GitHub login (`users.github_login`, migration 0004).
    GitHubLogin,
    /// Their Azure DevOps e-mail / unique name (`users.ado_email`, migration 0007).
    AdoEmail,
}

impl ForgeIdentity {
    /// The `users` column (a fixed name, never user input).
    pub(super) fn column(self) -> &'static str {
        match self {
            ForgeIdentity::GitHubLogin => "github_login",
            ForgeIdentity::AdoEmail => "ado_email",
        }
    }
}
