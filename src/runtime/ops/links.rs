//! Approval links (part of the operator service, see `ops`): minting a single-use link for a
//! pending approval, checking it when the page opens and redeeming it once. Who may be named
//! on a link is checked when it is minted and again when it is redeemed. It never parses HTTP
//! and never prints.

use super::*;

/// The longest an approval link is valid, seconds (30 days): a link is a bearer credential for
/// one decision, and one that outlives its review is a risk, not a convenience.
pub const MAX_LINK_SECS: i64 = 30 * 24 * 3600;

impl Ops {
    // Approval links

    /// Whether `reviewer` may decide approvals: with users, one of them with the reviewer role
    /// or above; with none (open mode), any well-formed name.
    async fn check_reviewer(&self, reviewer: &str) -> Result<Role, OpsError> {
        crate::runtime::auth::check_user_name(reviewer)
            .map_err(|e| OpsError::Invalid { field: "reviewer".into(), message: e.0 })?;
        let store = self.execs.store();
        if !store.has_users().await? {
            return Ok(Role::Admin);
        }
        match store.user(reviewer).await? {
            Some(u) if role_of(&u) >= Role::Reviewer => Ok(role_of(&u)),
            Some(u) => Err(OpsError::Forbidden(format!(
                "{reviewer} is a {} now; deciding approvals needs the reviewer role",
                u.role
            ))),
            None => {
                Err(OpsError::Invalid { field: "reviewer".into(), message: format!("{reviewer} is not a Baton user") })
            }
        }
    }

    /// Mints a single-use approval link for `task_id`'s pending approval, decided by
    /// `reviewer`, valid `secs` seconds (at most [`MAX_LINK_SECS`]); returns the token (the
    /// link is `/approve/<token>`).
    ///
    /// Errors: a lifetime out of range ([`OpsError::Invalid`], field `hours`); the reviewer is not a user who may decide, or is a requester of the execution
    /// under the separate-reviewer rule; the execution does not wait for an approval (409);
    /// the minting operator is below lead.
    pub async fn mint_link(&self, task_id: &str, reviewer: &str, secs: i64, op: &Operator) -> Result<String, OpsError> {
        if op.role < Role::Lead {
            return Err(OpsError::Forbidden(format!(
                "{} is a {}; making approval links needs the lead role",
                op.name,
                op.role.as_str()
            )));
        }
        if !(1..=MAX_LINK_SECS).contains(&secs) {
            return Err(OpsError::Invalid {
                field: "hours".into(),
                message: format!(
                    "a link is valid for 1 to {} hours ({} days); {} hours were asked",
                    MAX_LINK_SECS / 3600,
                    MAX_LINK_SECS / (24 * 3600),
                    secs / 3600
                ),
            });
        }
        let state = self.get(task_id).await?;
        let Action::Approval(a) = engine::next_action(&state) else {
            return Err(OpsError::Conflict {
                message: format!("execution {task_id} does not wait for an approval"),
                reason: "not_pending",
            });
        };
        self.check_reviewer(reviewer).await?;
        self.check_separate_reviewer(task_id, reviewer).await?;
        let claims = LinkClaims {
            link_id: hex::encode(crate::runtime::auth::random_bytes::<16>()?),
            task_id: task_id.to_string(),
            phase_id: a.phase_id,
            expires: self.clock.now().timestamp() + secs,
            reviewer: reviewer.to_string(),
        };
        Ok(self.key.link(&claims))
    }

    /// Checks a link token: genuine, not expired, not used, made for a user who may still
    /// decide, and its execution waits for the approval of its phase. Returns its claims, the
    /// pending approval and the plan's summary.
    ///
    /// Errors: tampered or malformed (403), expired (410), used or not pending (409; decided
    /// meanwhile: [`OpsError::AlreadyDecided`]), its reviewer demoted or removed (403).
    pub async fn check_link(&self, token: &str) -> Result<(LinkClaims, ApprovalAction, String), OpsError> {
        let claims = self.key.link_claims(token).map_err(|e| match e {
            LinkError::Malformed | LinkError::Tampered => OpsError::Forbidden(e.to_string()),
        })?;
        if claims.expires <= self.clock.now().timestamp() {
            return Err(OpsError::Gone("this approval link has expired; ask for a new one".into()));
        }
        if self.execs.store().approval_link_used(&claims.link_id).await? {
            return Err(OpsError::Conflict { message: "this approval link was already used".into(), reason: "used" });
        }
        self.check_reviewer(&claims.reviewer)
            .await
            .map_err(|e| OpsError::Forbidden(format!("this approval link can no longer be used: {e}")))?;
        let state = self.get(&claims.task_id).await?;
        match engine::next_action(&state) {
            Action::Approval(a) if a.phase_id == claims.phase_id => Ok((claims, a, state.plan.task_summary.clone())),
            // Decided meanwhile (through another door): the decision that stands, as every
            // door names it.
            _ => Err(already_decided(&state, claims.phase_id).unwrap_or_else(|| OpsError::Conflict {
                message: format!(
                    "execution {} does not wait for the approval of phase {} any more",
                    claims.task_id, claims.phase_id
                ),
                reason: "not_pending",
            })),
        }
    }

    /// Decides through an approval link: checks it ([`Ops::check_link`]), records the decision
    /// as its reviewer's (`<reviewer> (approval link)`), then spends the link. A decision the
    /// engine refuses leaves the link usable; two racing uses record one decision. The resend
    /// of the submission that spent it (the same key) answers the first outcome, as every door
    /// answers a resend, instead of "already used".
    ///
    /// Errors: as [`Ops::check_link`] and [`Ops::record`].
    pub async fn redeem_link(
        &self,
        token: &str,
        result: ApprovalDecision,
        feedback: String,
        key: Option<String>,
    ) -> Result<(LinkClaims, Decided), OpsError> {
        let claims = match self.check_link(token).await {
            Ok((claims, _, _)) => claims,
            Err(refused) => match self.resent_link(token, key.as_deref(), &refused).await? {
                Some(claims) => claims,
                None => return Err(refused),
            },
        };
        let role = self.check_reviewer(&claims.reviewer).await?;
        let op = Operator::new(claims.reviewer.clone(), role, Door::Link);
        let decided = self.approve(&claims.task_id, claims.phase_id, result, feedback, key, &op).await?;
        let who = format!("{}{LINK_ACTOR_SUFFIX}", claims.reviewer);
        self.execs.store().use_approval_link(&claims.link_id, &who, &self.clock.now_rfc3339()).await?;
        Ok((claims, decided))
    }

    /// The claims of a link whose use was refused as spent when `key` (the submission's) is
    /// the one that spent it: the refused use is that submission resent.
    async fn resent_link(
        &self,
        token: &str,
        key: Option<&str>,
        refused: &OpsError,
    ) -> Result<Option<LinkClaims>, OpsError> {
        let (Some(key), OpsError::Conflict { reason: "used", .. }) = (key, refused) else { return Ok(None) };
        let Ok(claims) = self.key.link_claims(token) else { return Ok(None) };
        let state = self.get(&claims.task_id).await?;
        Ok(self.execs.key_applied(&state, key).await?.then_some(claims))
    }
}
