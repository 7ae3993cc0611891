//! Webhook intake bookkeeping: which deliveries count as seen ([`DeliveryKind`]: an item
//! import only once applied, a comment decision always, anything else once answered), the
//! projects a forge repository feeds, the spec of a forge item, and the last imported revision
//! of an Azure DevOps work item (an older revision never overwrites a newer one).
//!
//! The webhook door verifies signatures and reads payloads; what a delivery changes goes
//! through `runtime::specs` and `runtime::ops`. This module never parses HTTP.

use crate::clock;
use crate::runtime::executions::Executions;
use crate::store::ProjectRow;

/// What a delivery asks for: it decides when the delivery counts as seen, so that a
/// redelivery (the same id: GitHub's "Redeliver", Azure DevOps' retries) is answered
/// `duplicate` only when applying it again would be wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryKind {
    /// An issue or work item to import (`issues` `opened` / `labeled` / `edited`,
    /// `workitem.created` / `workitem.updated`): seen only once applied. One answered
    /// "ignored" (no project for the repository yet, no trigger label, no text change) or
    /// failed is forgotten, so its redelivery is handled afresh (importing is idempotent: one
    /// spec per item).
    ItemImport,
    /// A comment that may decide an approval (`issue_comment` `created`,
    /// `workitem.commented`) or start a review round (`pull_request_review` `submitted`,
    /// `pull_request_review_comment` `created`, `ms.vss-code.git-pullrequest-comment-event`):
    /// seen whatever happened to it (decided, ignored or failed), so a
    /// delivered comment never decides a later approval.
    Decision,
    /// Anything else (merged pull requests, events Baton does not handle): seen once answered;
    /// a failure is forgotten so the forge's retry applies.
    Other,
}

impl DeliveryKind {
    /// The kind of a GitHub delivery of `event` (`X-GitHub-Event`) with payload `action`.
    pub fn of_github(event: &str, action: &str) -> DeliveryKind {
        match (event, action) {
            ("issues", "opened" | "labeled" | "edited") => DeliveryKind::ItemImport,
            ("issue_comment", "created")
            | ("pull_request_review", "submitted")
            | ("pull_request_review_comment", "created") => DeliveryKind::Decision,
            _ => DeliveryKind::Other,
        }
    }

    /// The kind of an Azure DevOps service hook notification of `event_type`.
    pub fn of_ado(event_type: &str) -> DeliveryKind {
        match event_type {
            "workitem.created" | "workitem.updated" => DeliveryKind::ItemImport,
            "workitem.commented" | "ms.vss-code.git-pullrequest-comment-event" => DeliveryKind::Decision,
            _ => DeliveryKind::Other,
        }
    }
}

/// Whether delivery `delivery` from `source` (`github`, `ado`) is new: claims it; `false` for
/// a redelivery of one already claimed (apply nothing).
///
/// Errors: the database.
pub async fn claim(execs: &Executions, source: &str, delivery: &str) -> anyhow::Result<bool> {
    Ok(execs.store().claim_delivery(source, delivery, &clock::now_rfc3339()).await?)
}

/// Settles a claimed delivery of `kind` that was answered: keeps its outcome (`outcome`, the
/// answer's JSON) so a redelivery is a duplicate, except an item import that was not
/// `applied` (answered "ignored"), which is forgotten so its redelivery applies.
///
/// Errors: the database.
pub async fn finish(
    execs: &Executions,
    source: &str,
    delivery: &str,
    kind: DeliveryKind,
    applied: bool,
    outcome: &str,
) -> anyhow::Result<()> {
    if kind == DeliveryKind::ItemImport && !applied {
        return Ok(execs.store().release_delivery(source, delivery).await?);
    }
    Ok(execs.store().set_delivery_outcome(source, delivery, outcome).await?)
}

/// Settles a claimed delivery of `kind` whose handling failed (`error`): forgotten so the
/// forge's retry applies, except a comment decision, which stays seen (its outcome the
/// failure): a comment is applied at most once, whatever happened to it.
///
/// Errors: the database.
pub async fn failed(
    execs: &Executions,
    source: &str,
    delivery: &str,
    kind: DeliveryKind,
    error: &str,
) -> anyhow::Result<()> {
    if kind == DeliveryKind::Decision {
        let outcome = serde_json::json!({ "failed": error }).to_string();
        return Ok(execs.store().set_delivery_outcome(source, delivery, &outcome).await?);
    }
    Ok(execs.store().release_delivery(source, delivery).await?)
}

/// The address under which the spec of the forge item at `url` (on `source`) was imported:
/// the spec found by the item's key ([`crate::forge::item_key`]), whichever address of the
/// item it was imported from; `url` itself when no spec came from the item.
///
/// Errors: the database.
pub async fn spec_url(execs: &Executions, source: &str, url: &str) -> anyhow::Result<String> {
    let key = crate::forge::item_key(source, url);
    Ok(execs.store().spec_by_source_key(&key).await?.map_or_else(|| url.to_string(), |s| s.source_url))
}

/// The projects whose `forge_repo` is one of `names` (`owner/repo`, `github:owner/repo`,
/// `ado:org/project`, `project`).
///
/// Errors: the database.
pub async fn projects_for(execs: &Executions, names: &[&str]) -> anyhow::Result<Vec<ProjectRow>> {
    Ok(execs.store().projects_by_forge_repo(names).await?)
}

/// Whether revision `rev` of the item at `url` is newer than the one imported last (or none
/// was); returns the one imported when it is not.
///
/// Errors: the database.
pub async fn older_revision(execs: &Executions, source: &str, url: &str, rev: i64) -> anyhow::Result<Option<i64>> {
    Ok(execs.store().item_rev(source, url).await?.filter(|seen| rev <= *seen))
}

/// Records `rev` as the imported revision of the item at `url`.
///
/// Errors: the database.
pub async fn imported_revision(execs: &Executions, source: &str, url: &str, rev: i64) -> anyhow::Result<()> {
    Ok(execs.store().set_item_rev(source, url, rev).await?)
}
