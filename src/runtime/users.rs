//! Users and their API tokens: who exists, which user a token or a browser session belongs
//! to, and the rules for creating tokens (a role belongs to the user, a forge identity to one
//! user only) and revoking them.
//!
//! The doors (`baton token …`, the web's sign-in and its bearer check) parse and print; the
//! rules are here. Roles and signatures themselves are `runtime::auth`. This module never
//! parses HTTP or command lines.

use crate::runtime::auth::{self, Role};
use crate::runtime::executions::Executions;
use crate::runtime::BadInput;
use crate::store::{ForgeIdentity, TokenRow, UserRow};

/// What `baton token create` asks for.
#[derive(Debug, Clone, Default)]
pub struct NewToken {
    /// The user (created when new).
    pub user: String,
    /// `viewer`, `reviewer`, `lead` or `admin`.
    pub role: String,
    /// A label for the token.
    pub label: String,
    /// The user's GitHub login (for `/baton approve` comments).
    pub github_login: Option<String>,
    /// The user's Azure DevOps e-mail.
    pub ado_email: Option<String>,
    /// Allow changing an existing user's role.
    pub change_role: bool,
}

/// A created token.
#[derive(Debug, Clone)]
pub struct CreatedToken {
    /// Its id (for revoking).
    pub id: i64,
    /// The token itself (shown once; only its hash is stored).
    pub token: String,
    /// The user's role now.
    pub role: Role,
}

/// Whether any user exists (then every non-public route needs a credential).
///
/// Errors: the database.
pub async fn any(execs: &Executions) -> anyhow::Result<bool> {
    Ok(execs.store().has_users().await?)
}

/// The user of API token `token` (not revoked), if any.
///
/// Errors: the database.
pub async fn of_token(execs: &Executions, token: &str) -> anyhow::Result<Option<UserRow>> {
    Ok(execs.store().user_of_token(&auth::hash_token(token)).await?)
}

/// The user of a token being exchanged for a browser session, with the token's id (a
/// session ends when its token is revoked).
///
/// Errors: the database.
pub async fn sign_in(execs: &Executions, token: &str) -> anyhow::Result<Option<(UserRow, i64)>> {
    Ok(execs.store().token_login(&auth::hash_token(token)).await?)
}

/// The user of a session signed in with token `token_id`, while that token is not revoked.
///
/// Errors: the database.
pub async fn of_session(execs: &Executions, name: &str, token_id: i64) -> anyhow::Result<Option<UserRow>> {
    Ok(execs.store().session_user(name, token_id).await?)
}

/// The role of a stored user (an unknown role string reads as viewer: the least right).
pub fn role_of(user: &UserRow) -> Role {
    Role::parse(&user.role).unwrap_or(Role::Viewer)
}

/// Creates a token (and the user, or sets their role with `change_role`), mapping the forge
/// identities given. Everything is checked before anything is written.
///
/// Errors ([`BadInput`]): a bad user name, role, login or e-mail; a role change without
/// `change_role`; an identity that is another user's.
pub async fn create_token(execs: &Executions, t: NewToken) -> anyhow::Result<CreatedToken> {
    let store = execs.store();
    auth::check_user_name(&t.user)?;
    let role = Role::parse(&t.role)
        .ok_or_else(|| BadInput(format!("--role {}: expected viewer, reviewer, lead or admin", t.role)))?;
    let user = &t.user;
    if let Some(existing) = store.user(user).await?.filter(|u| u.role != role.as_str() && !t.change_role) {
        return Err(BadInput(format!(
            "user {user} is a {}: a role belongs to the user, so a {} token would make every token of {user} a \
             {} token; pass --change-role to do that",
            existing.role,
            role.as_str(),
            role.as_str()
        ))
        .into());
    }
    let identities: Vec<(ForgeIdentity, &str, &str, &str)> = [
        (ForgeIdentity::GitHubLogin, "--github-login", "login", t.github_login.as_deref()),
        (ForgeIdentity::AdoEmail, "--ado-email", "e-mail", t.ado_email.as_deref()),
    ]
    .into_iter()
    .filter_map(|(kind, flag, noun, value)| value.map(|v| (kind, flag, noun, v.trim())))
    .collect();
    // Checked before the token exists, so a refused identity stores none.
    for (kind, flag, noun, value) in &identities {
        match kind {
            ForgeIdentity::GitHubLogin => auth::check_github_login(value)?,
            ForgeIdentity::AdoEmail => auth::check_ado_email(value)?,
        }
        if let Some(other) = store.user_by_identity(*kind, value).await?.filter(|u| &u.name != user) {
            return Err(BadInput(format!("{flag} {value}: already the {noun} of {}", other.name)).into());
        }
    }
    let token = auth::new_token()?;
    let id =
        store.add_token(user, role.as_str(), &auth::hash_token(&token), &t.label, &crate::clock::now_rfc3339()).await?;
    for (kind, flag, noun, value) in &identities {
        store
            .set_identity(user, *kind, value)
            .await
            .map_err(|e| BadInput(format!("{flag} {value}: {e} (is it another user's {noun}?)")))?;
    }
    Ok(CreatedToken { id, token, role })
}

/// Every token (never the token itself).
///
/// Errors: the database.
pub async fn tokens(execs: &Executions) -> anyhow::Result<Vec<TokenRow>> {
    Ok(execs.store().list_tokens().await?)
}

/// Revokes token `id`; its sessions end with it.
///
/// Errors ([`BadInput`]): no active token with that id; the database.
pub async fn revoke(execs: &Executions, id: i64) -> anyhow::Result<()> {
    if !execs.store().revoke_token(id, &crate::clock::now_rfc3339()).await? {
        return Err(BadInput(format!("no active token with id {id}")).into());
    }
    Ok(())
}
