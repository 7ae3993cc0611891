//! Users, API tokens, used approval links and decision signatures (migration `0003_auth.sql`).
//!
//! Owns the `users`, `api_tokens`, `used_approval_links` and `decision_signatures` tables.
//! Tokens are stored as their SHA-256 only (the caller hashes); the store never sees a token,
//! never judges a role, and never computes a signature.

use super::{Store, StoreError};

/// A user.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Serialize)]
pub struct UserRow {
    /// Unique name.
    pub name: String,
    /// `viewer`, `reviewer`, `lead` or `admin`.
    pub role: String,
    /// When created (RFC 3339).
    pub created_at: String,
}

/// An API token's record (never the token).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Serialize)]
pub struct TokenRow {
    /// Id (for `baton token revoke`).
    pub token_id: i64,
    /// Its user.
    pub user_name: String,
    /// The user's role (a token carries its user's role).
    pub role: String,
    /// Free text.
    pub label: String,
    /// When created (RFC 3339).
    pub created_at: String,
    /// When revoked (RFC 3339).
    pub revoked_at: Option<String>,
}

impl Store {
    /// Whether any user exists (no users: the server runs open on loopback).
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn has_users(&self) -> Result<bool, StoreError> {
        let lite = on_backend!(self, pg => pg.has_users().await);
        Ok(sqlx::query_scalar::<_, i64>("select 1 from users limit 1")
            .fetch_optional(&mut *lite.read().await?)
            .await?
            .is_some())
    }

    /// Creates `name` with `role`, or sets the role of an existing user; then adds a token
    /// (its SHA-256 `token_hash`) for it. Returns the token's id.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`] (a role outside the four, a duplicate hash).
    pub async fn add_token(
        &self,
        name: &str,
        role: &str,
        token_hash: &str,
        label: &str,
        at: &str,
    ) -> Result<i64, StoreError> {
        let lite = on_backend!(self, pg => pg.add_token(name, role, token_hash, label, at).await);
        let mut tx = lite.begin_write().await?;
        sqlx::query(
            "insert into users (name, role, created_at) values (?, ?, ?) \
             on conflict (name) do update set role = excluded.role",
        )
        .bind(name)
        .bind(role)
        .bind(at)
        .execute(&mut *tx)
        .await?;
        let id = sqlx::query_scalar::<_, i64>(
            "insert into api_tokens (user_name, token_hash, label, created_at) values (?, ?, ?, ?) returning token_id",
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

    /// The user of an unrevoked token with this hash (a read: checking a token writes nothing).
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn user_of_token(&self, token_hash: &str) -> Result<Option<UserRow>, StoreError> {
        let lite = on_backend!(self, pg => pg.user_of_token(token_hash).await);
        Ok(sqlx::query_as::<_, UserRow>(
            "select u.name, u.role, u.created_at from api_tokens t join users u on u.name = t.user_name \
             where t.token_hash = ? and t.revoked_at is null",
        )
        .bind(token_hash)
        .fetch_optional(&mut *lite.read().await?)
        .await?)
    }

    /// The user and token id of an unrevoked token with this hash (for signing in).
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn token_login(&self, token_hash: &str) -> Result<Option<(UserRow, i64)>, StoreError> {
        let lite = on_backend!(self, pg => pg.token_login(token_hash).await);
        let row = sqlx::query_as::<_, (String, String, String, i64)>(
            "select u.name, u.role, u.created_at, t.token_id from api_tokens t join users u on u.name = t.user_name \
             where t.token_hash = ? and t.revoked_at is null",
        )
        .bind(token_hash)
        .fetch_optional(&mut *lite.read().await?)
        .await?;
        Ok(row.map(|(name, role, created_at, id)| (UserRow { name, role, created_at }, id)))
    }

    /// The user of a session signed in with token `token_id`, while that token is unrevoked and
    /// still the user's.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn session_user(&self, name: &str, token_id: i64) -> Result<Option<UserRow>, StoreError> {
        let lite = on_backend!(self, pg => pg.session_user(name, token_id).await);
        Ok(sqlx::query_as::<_, UserRow>(
            "select u.name, u.role, u.created_at from api_tokens t join users u on u.name = t.user_name \
             where t.token_id = ? and u.name = ? and t.revoked_at is null",
        )
        .bind(token_id)
        .bind(name)
        .fetch_optional(&mut *lite.read().await?)
        .await?)
    }

    /// One user.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn user(&self, name: &str) -> Result<Option<UserRow>, StoreError> {
        let lite = on_backend!(self, pg => pg.user(name).await);
        Ok(sqlx::query_as::<_, UserRow>("select name, role, created_at from users where name = ?")
            .bind(name)
            .fetch_optional(&mut *lite.read().await?)
            .await?)
    }

    /// Every token record, newest first.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn list_tokens(&self) -> Result<Vec<TokenRow>, StoreError> {
        let lite = on_backend!(self, pg => pg.list_tokens().await);
        Ok(sqlx::query_as::<_, TokenRow>(
            "select t.token_id, t.user_name, u.role, t.label, t.created_at, t.revoked_at \
             from api_tokens t join users u on u.name = t.user_name order by t.token_id desc",
        )
        .fetch_all(&mut *lite.read().await?)
        .await?)
    }

    /// Revokes a token; false when there is no such unrevoked token.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn revoke_token(&self, token_id: i64, at: &str) -> Result<bool, StoreError> {
        let lite = on_backend!(self, pg => pg.revoke_token(token_id, at).await);
        let mut tx = lite.begin_write().await?;
        let done = sqlx::query("update api_tokens set revoked_at = ? where token_id = ? and revoked_at is null")
            .bind(at)
            .bind(token_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(done.rows_affected() == 1)
    }

    /// Marks an approval link used; false when it already was (links are single-use).
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn use_approval_link(&self, link_id: &str, used_by: &str, at: &str) -> Result<bool, StoreError> {
        let lite = on_backend!(self, pg => pg.use_approval_link(link_id, used_by, at).await);
        let mut tx = lite.begin_write().await?;
        let done = sqlx::query(
            "insert into used_approval_links (link_id, used_at, used_by) values (?, ?, ?) \
             on conflict (link_id) do nothing",
        )
        .bind(link_id)
        .bind(at)
        .bind(used_by)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(done.rows_affected() == 1)
    }

    /// Whether an approval link was used.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn approval_link_used(&self, link_id: &str) -> Result<bool, StoreError> {
        let lite = on_backend!(self, pg => pg.approval_link_used(link_id).await);
        Ok(sqlx::query_scalar::<_, i64>("select 1 from used_approval_links where link_id = ?")
            .bind(link_id)
            .fetch_optional(&mut *lite.read().await?)
            .await?
            .is_some())
    }

    /// Stores the signature of the decision at journal position (`task_id`, `seq`).
    ///
    /// # Errors
    /// [`StoreError::Sqlx`] (the execution must exist).
    pub async fn put_decision_signature(&self, task_id: &str, seq: i64, signature: &str) -> Result<(), StoreError> {
        let lite = on_backend!(self, pg => pg.put_decision_signature(task_id, seq, signature).await);
        let mut tx = lite.begin_write().await?;
        sqlx::query(
            "insert into decision_signatures (task_id, seq, signature) values (?, ?, ?) \
             on conflict (task_id, seq) do update set signature = excluded.signature",
        )
        .bind(task_id)
        .bind(seq)
        .bind(signature)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// The decision signatures of an execution: (seq, signature), by seq.
    ///
    /// # Errors
    /// [`StoreError::Sqlx`].
    pub async fn decision_signatures(&self, task_id: &str) -> Result<Vec<(i64, String)>, StoreError> {
        let lite = on_backend!(self, pg => pg.decision_signatures(task_id).await);
        Ok(sqlx::query_as::<_, (i64, String)>(
            "select seq, signature from decision_signatures where task_id = ? order by seq",
        )
        .bind(task_id)
        .fetch_all(&mut *lite.read().await?)
        .await?)
    }
}
