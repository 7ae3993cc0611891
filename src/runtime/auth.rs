//! Who may do what: roles, API tokens, the server key and what it signs (browser sessions,
//! single-use approval links, decisions).
//!
//! The server key is 32 random bytes in `<data>/server.key` (hex, mode 0600), created on first
//! use. Every signature is HMAC-SHA256 over the JSON array of the signed fields (unambiguous,
//! whatever the fields contain), compared in constant time. Tokens are `baton_` + 32 hex digits
//! from the OS's random source and stored as their SHA-256 only. This module never touches
//! HTTP; the web layer decides which role a route needs.
//!
//! Replicas on one database must share the key ([`check_shared_key`]): the first `baton serve`
//! records the key's fingerprint in the database, and on PostgreSQL a replica whose key gives
//! another fingerprint refuses to start (its sessions, links and decision signatures would not
//! verify on the others).

use std::path::Path;

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::model::event::{Event, EventKind};
use crate::runtime::config::DataDir;
use crate::runtime::BadInput;

/// A role; each includes the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Reads everything.
    Viewer,
    /// Also decides approvals, feedback and interactive steps.
    Reviewer,
    /// Also creates, edits, enriches, reviews, fires, pauses, resumes, retries, skips and
    /// cancels; drives executions through the API.
    Lead,
    /// Also manages projects and users.
    Admin,
}

/// Every role, lowest first.
pub const ROLES: [Role; 4] = [Role::Viewer, Role::Reviewer, Role::Lead, Role::Admin];

impl Role {
    /// `viewer`, `reviewer`, `lead`, `admin`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Reviewer => "reviewer",
            Role::Lead => "lead",
            Role::Admin => "admin",
        }
    }

    /// Parses [`Role::as_str`]'s strings.
    pub fn parse(s: &str) -> Option<Role> {
        ROLES.into_iter().find(|r| r.as_str() == s)
    }
}

/// Checks a user name: 1–64 of `A-Z a-z 0-9 . _ - @`.
///
/// Errors ([`BadInput`]): anything else.
pub fn check_user_name(name: &str) -> Result<(), BadInput> {
    if !name.is_empty()
        && name.len() <= 64
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@'))
    {
        return Ok(());
    }
    Err(BadInput(format!("user name {name:?}: 1-64 characters of A-Z a-z 0-9 . _ - @")))
}

/// Longest actor name a door may give in open mode, bytes.
pub const ACTOR_MAX: usize = 200;

/// Checks an actor name given in open mode (no users: `--as`, `BATON_USER`, the API's
/// `X-Baton-Actor` header), which is journaled as the actor and shown on the board and in the
/// CLI: 1 to [`ACTOR_MAX`] bytes once trimmed, on one line (`model::text::is_one_line`: a line break in a name
/// made a signed approval's actor span lines, found by a tester); any other Unicode is a name.
///
/// Errors ([`BadInput`]): "expected 1 to 200 characters on one line, without control characters or
/// bidirectional overrides" (`model::text::is_one_line`).
pub fn check_actor_name(name: &str) -> Result<(), BadInput> {
    let name = name.trim();
    if !name.is_empty() && name.len() <= ACTOR_MAX && crate::model::text::is_one_line(name) {
        return Ok(());
    }
    Err(BadInput(format!(
        "expected 1 to {ACTOR_MAX} characters on one line, without control characters or bidirectional overrides"
    )))
}

/// Checks a GitHub login: 1–39 of `A-Z a-z 0-9 -`, not starting or ending with `-` (GitHub's
/// own rule).
///
/// Errors ([`BadInput`]): anything else, e.g. an empty login.
pub fn check_github_login(login: &str) -> Result<(), BadInput> {
    let ok = (1..=39).contains(&login.len())
        && login.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        && !login.starts_with('-')
        && !login.ends_with('-');
    if ok {
        return Ok(());
    }
    Err(BadInput(format!("--github-login {login:?}: 1-39 characters of A-Z a-z 0-9 -, not starting or ending with -")))
}

/// Checks an Azure DevOps e-mail (unique name): 3–254 characters, one `@` with text on both
/// sides, no whitespace or control characters.
///
/// Errors ([`BadInput`]): anything else.
pub fn check_ado_email(email: &str) -> Result<(), BadInput> {
    let ok = (3..=254).contains(&email.len())
        && !email.chars().any(|c| c.is_whitespace() || c.is_control())
        && email.split_once('@').is_some_and(|(a, b)| !a.is_empty() && !b.is_empty() && !b.contains('@'));
    if ok {
        return Ok(());
    }
    Err(BadInput(format!("--ado-email {email:?}: an e-mail address (the user's Azure DevOps unique name)")))
}

/// `n` random bytes from the OS.
///
/// Errors: `/dev/urandom` cannot be read.
pub fn random_bytes<const N: usize>() -> anyhow::Result<[u8; N]> {
    use std::io::Read as _;
    let mut bytes = [0u8; N];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes)
}

/// A new API token: `baton_` and 32 hex digits (128 random bits).
///
/// Errors: no random source.
pub fn new_token() -> anyhow::Result<String> {
    Ok(format!("baton_{}", hex::encode(random_bytes::<16>()?)))
}

/// SHA-256 of a token, hex: what the database stores.
pub fn hash_token(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// The server's signing key.
#[derive(Clone)]
pub struct ServerKey([u8; 32]);

impl std::fmt::Debug for ServerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServerKey(…)")
    }
}

/// The key file's name in the data dir.
pub const KEY_FILE: &str = "server.key";

impl ServerKey {
    /// Loads `<data>/server.key`, creating it (mode 0600) when missing.
    ///
    /// Errors: an unreadable or malformed key file (it is never overwritten), no random source.
    pub fn load_or_create(data: &DataDir) -> anyhow::Result<ServerKey> {
        let path = data.root().join(KEY_FILE);
        if !path.exists() {
            Self::create(&path)?;
        }
        let text = std::fs::read_to_string(&path).map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
        let bytes = hex::decode(text.trim()).ok().and_then(|b| <[u8; 32]>::try_from(b).ok()).ok_or_else(|| {
            BadInput(format!(
                "{} is not 64 hex digits; restore it from a backup (signatures depend on it)",
                path.display()
            ))
        })?;
        Ok(ServerKey(bytes))
    }

    fn create(path: &Path) -> anyhow::Result<()> {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let key = hex::encode(random_bytes::<32>()?);
        match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path) {
            Ok(mut f) => {
                f.write_all(key.as_bytes())?;
                f.sync_all()?;
                Ok(())
            }
            // Another process created it at the same moment: use theirs.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(anyhow::anyhow!("creating {}: {e}", path.display())),
        }
    }

    fn mac(&self, fields: &[&str]) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.0).unwrap_or_else(|_| unreachable!("any key size"));
        mac.update(serde_json::to_string(fields).unwrap_or_default().as_bytes());
        mac
    }

    /// The key's fingerprint: the first 16 bytes of [`ServerKey::sign`] of a fixed label, hex
    /// (32 digits). It tells two keys apart and reveals nothing of the key.
    pub fn fingerprint(&self) -> String {
        let sig = self.mac(&["baton server key fingerprint"]).finalize().into_bytes();
        hex::encode(&sig[..16])
    }

    /// HMAC-SHA256 of `fields`, hex.
    pub fn sign(&self, fields: &[&str]) -> String {
        hex::encode(self.mac(fields).finalize().into_bytes())
    }

    /// Whether `signature` (hex) is [`ServerKey::sign`] of `fields`, compared in constant time.
    pub fn verify(&self, fields: &[&str], signature: &str) -> bool {
        hex::decode(signature).is_ok_and(|sig| self.mac(fields).verify_slice(&sig).is_ok())
    }

    /// A session cookie value for `user`, signed in with token `token_id`, until `expires`
    /// (unix seconds): `user|token_id|expires|sig`. Revoking the token ends the session.
    pub fn session(&self, user: &str, token_id: i64, expires: i64) -> String {
        let (id, exp) = (token_id.to_string(), expires.to_string());
        format!("{user}|{id}|{exp}|{}", self.sign(&["session", user, &id, &exp]))
    }

    /// (user, token id) of a session cookie value that is genuine and not expired at `now`.
    pub fn session_user(&self, value: &str, now: i64) -> Option<(String, i64)> {
        let mut parts = value.split('|');
        let (user, id, exp, sig) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let expires: i64 = exp.parse().ok()?;
        let token_id: i64 = id.parse().ok()?;
        (parts.next().is_none() && expires > now && self.verify(&["session", user, id, exp], sig))
            .then(|| (user.to_string(), token_id))
    }

    /// A signed approval link token for `claims`: hex of the claims' JSON, `.`, signature.
    pub fn link(&self, claims: &LinkClaims) -> String {
        let body = hex::encode(serde_json::to_vec(claims).unwrap_or_default());
        let sig = self.sign(&["approval-link", &body]);
        format!("{body}.{sig}")
    }

    /// The claims of a genuine link token (expiry and use are the caller's checks).
    ///
    /// Errors: a malformed or tampered token.
    pub fn link_claims(&self, token: &str) -> Result<LinkClaims, LinkError> {
        let (body, sig) = token.split_once('.').ok_or(LinkError::Malformed)?;
        if !self.verify(&["approval-link", body], sig) {
            return Err(LinkError::Tampered);
        }
        let bytes = hex::decode(body).map_err(|_| LinkError::Malformed)?;
        serde_json::from_slice(&bytes).map_err(|_| LinkError::Malformed)
    }

    /// The signature of a decision: over (execution, phase, decision, comment, who, when).
    pub fn sign_decision(&self, d: &Decision<'_>) -> String {
        let phase = d.phase_id.to_string();
        self.sign(&["decision", d.task_id, &phase, d.decision, d.comment, d.who, d.at])
    }

    /// Whether `signature` is [`ServerKey::sign_decision`] of `d`.
    pub fn verify_decision(&self, d: &Decision<'_>, signature: &str) -> bool {
        let phase = d.phase_id.to_string();
        self.verify(&["decision", d.task_id, &phase, d.decision, d.comment, d.who, d.at], signature)
    }
}

/// (phase, decision, comment) of a decision event, as signed: approvals (`approve`,
/// `reject`, `approve-with-feedback`, with the feedback as comment), feedback answers
/// (`feedback:<question>=<index>`) and ceiling raises (`budget:raise=<usd>`, phase 0); `None`
/// for every other event.
pub fn decision_fields(kind: &EventKind) -> Option<(i64, String, String)> {
    match kind {
        EventKind::ApprovalRecorded { phase_id, result, feedback } => {
            Some((*phase_id, result.as_str().to_string(), feedback.clone()))
        }
        EventKind::FeedbackRecorded { phase_id, question_id, chosen_index } => {
            Some((*phase_id, format!("feedback:{question_id}={chosen_index}"), String::new()))
        }
        // Raising a ceiling authorises spending: signed like an approval (phase 0: it is the
        // execution's, not a phase's).
        EventKind::BudgetRaised { by_usd } => Some((0, format!("budget:raise={by_usd}"), String::new())),
        _ => None,
    }
}

/// What [`verify_decisions`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DecisionReport {
    /// Decisions whose signature matches.
    pub signed: usize,
    /// Decisions without a signature (recorded outside the server, e.g. by the CLI).
    pub unsigned: usize,
    /// Journal seqs whose signature does not match the journaled decision.
    pub bad: Vec<i64>,
}

/// What [`check_shared_key`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyCheck {
    /// No fingerprint was recorded: this key's is now (the first replica of the database).
    Recorded,
    /// The recorded fingerprint is this key's.
    Matches,
    /// SQLite only: the data directory's key was replaced since this fingerprint was recorded;
    /// the new key's is recorded now (decisions signed with the old key no longer verify).
    Replaced {
        /// The fingerprint recorded before.
        previous: String,
    },
}

/// Checks that `key`, the key of the data directory of `execs`, is the one every replica of
/// its store signs with, recording its fingerprint ([`ServerKey::fingerprint`], at `now`) when the
/// store has none. On SQLite the database and the key live in one data directory, so a
/// different fingerprint means the key file was replaced: the new one is recorded
/// ([`KeyCheck::Replaced`], the caller warns).
///
/// Errors ([`BadInput`]): on PostgreSQL, a key whose fingerprint differs from the recorded
/// one (another replica recorded its key first), naming both fingerprints and the fix; the
/// database.
pub async fn check_shared_key(
    execs: &crate::runtime::executions::Executions,
    key: &ServerKey,
    now: &str,
) -> anyhow::Result<KeyCheck> {
    let (store, data) = (execs.store(), execs.data());
    let ours = key.fingerprint();
    let recorded = store.record_key_fingerprint(&ours, now).await?;
    if recorded.fingerprint == ours {
        return Ok(if recorded.recorded_at == now { KeyCheck::Recorded } else { KeyCheck::Matches });
    }
    if store.backend_name() != "postgres" {
        store.replace_key_fingerprint(&ours, now).await?;
        return Ok(KeyCheck::Replaced { previous: recorded.fingerprint });
    }
    let path = data.root().join(KEY_FILE);
    Err(BadInput(format!(
        "this replica's server key {} (fingerprint {ours}) differs from the key the replicas of this \
         database sign with (fingerprint {}, recorded {}): sessions, approval links and decision \
         signatures would not verify across replicas. To fix it, copy server.key from a running replica; \
         see docs/src/replicas.md (it goes to {}; then start this replica again)",
        path.display(),
        recorded.fingerprint,
        recorded.recorded_at,
        path.display(),
    ))
    .into())
}

/// Checks every decision of `task_id`'s journal against its stored signature.
///
/// Errors: the database; a journal payload that is not an event.
pub async fn verify_decisions(
    store: &crate::store::Store,
    key: &ServerKey,
    task_id: &str,
) -> anyhow::Result<DecisionReport> {
    let signatures: std::collections::HashMap<i64, String> =
        store.decision_signatures(task_id).await?.into_iter().collect();
    let mut report = DecisionReport::default();
    for e in store.events(task_id, 0).await? {
        let event: Event = serde_json::from_str(&e.payload)
            .map_err(|err| anyhow::anyhow!("journal entry {} of {task_id}: {err}", e.seq))?;
        let Some((phase_id, decision, comment)) = decision_fields(&event.kind) else { continue };
        let d = Decision { task_id, phase_id, decision: &decision, comment: &comment, who: &event.actor, at: &e.at };
        match signatures.get(&e.seq) {
            None => report.unsigned += 1,
            Some(sig) if key.verify_decision(&d, sig) => report.signed += 1,
            Some(_) => report.bad.push(e.seq),
        }
    }
    Ok(report)
}

/// A recorded decision, as signed.
#[derive(Debug, Clone, Copy)]
pub struct Decision<'a> {
    /// Execution.
    pub task_id: &'a str,
    /// Phase decided on.
    pub phase_id: i64,
    /// `approve`, `reject`, `approve-with-feedback`, or `feedback:<question>=<index>`.
    pub decision: &'a str,
    /// The comment.
    pub comment: &'a str,
    /// Who decided.
    pub who: &'a str,
    /// When (the journal's RFC 3339 time).
    pub at: &'a str,
}

/// What an approval link allows: deciding one phase of one execution, once, until a time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkClaims {
    /// Random id (single use is recorded by it).
    pub link_id: String,
    /// The execution.
    pub task_id: String,
    /// The phase whose approval it decides.
    pub phase_id: i64,
    /// Expiry, unix seconds.
    pub expires: i64,
    /// Who it was made for (recorded as the decider).
    pub reviewer: String,
}

/// Why a link token was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    /// Not a link token.
    #[error("this is not an approval link")]
    Malformed,
    /// Its signature does not match (edited, or made by another server).
    #[error("this approval link has been altered or was not made by this server")]
    Tampered,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> ServerKey {
        ServerKey([7; 32])
    }

    #[test]
    fn a_fingerprint_tells_keys_apart_and_is_not_the_key() {
        let f = key().fingerprint();
        assert_eq!(f.len(), 32, "{f}");
        assert!(f.chars().all(|c| c.is_ascii_hexdigit()), "{f}");
        assert_eq!(f, key().fingerprint(), "stable");
        assert_ne!(f, ServerKey([8; 32]).fingerprint());
        assert!(!hex::encode([7u8; 32]).contains(&f), "never the key itself");
    }

    #[test]
    fn sessions_expire_and_resist_tampering() {
        let k = key();
        let v = k.session("ann", 7, 100);
        assert_eq!(k.session_user(&v, 99), Some(("ann".to_string(), 7)));
        assert_eq!(k.session_user(&v, 100), None, "expired");
        assert_eq!(k.session_user(&v.replace("ann", "bob"), 99), None, "another user");
        assert_eq!(k.session_user(&v.replace("|7|", "|8|"), 99), None, "another token");
        assert_eq!(k.session_user(&v.replace("|100|", "|999|"), 99), None, "extended");
        assert_eq!(ServerKey([8; 32]).session_user(&v, 99), None, "another server");
    }

    #[test]
    fn links_carry_their_claims_and_detect_edits() {
        let k = key();
        let claims = LinkClaims {
            link_id: "abc".into(),
            task_id: "t.1".into(),
            phase_id: 2,
            expires: 50,
            reviewer: "rita".into(),
        };
        let token = k.link(&claims);
        assert_eq!(k.link_claims(&token), Ok(claims.clone()));
        let mut other = claims;
        other.task_id = "t.2".into();
        let forged = format!("{}.{}", k.link(&other).split_once('.').unwrap().0, token.split_once('.').unwrap().1);
        assert_eq!(k.link_claims(&forged), Err(LinkError::Tampered));
        assert_eq!(k.link_claims("nonsense"), Err(LinkError::Malformed));
    }

    #[test]
    fn a_ceiling_raise_is_a_signed_decision() {
        let (phase, decision, _) = decision_fields(&EventKind::BudgetRaised { by_usd: 2.5 }).unwrap();
        assert_eq!((phase, decision.as_str()), (0, "budget:raise=2.5"));
        assert!(decision_fields(&EventKind::BudgetSet { ceiling_usd: Some(1.0), source: String::new() }).is_none());
    }

    #[test]
    fn decision_signatures_cover_every_field() {
        let k = key();
        let d = Decision { task_id: "t", phase_id: 1, decision: "approve", comment: "ok", who: "rita", at: "now" };
        let sig = k.sign_decision(&d);
        assert!(k.verify_decision(&d, &sig));
        for changed in [
            Decision { comment: "ok!", ..d },
            Decision { who: "bob", ..d },
            Decision { phase_id: 2, ..d },
            Decision { decision: "reject", ..d },
        ] {
            assert!(!k.verify_decision(&changed, &sig), "{changed:?}");
        }
        assert_eq!(Role::parse("lead"), Some(Role::Lead));
        assert!(Role::Admin > Role::Lead && Role::Reviewer > Role::Viewer);
    }
}
