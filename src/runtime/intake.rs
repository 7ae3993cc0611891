//! Webhook intake bookkeeping: each delivery applied at most once (claimed before it is
//! handled, its outcome kept, forgotten again when handling failed so the forge's retry
//! applies), the projects a forge repository feeds, the spec of a forge item, and the last
//! imported revision of an Azure DevOps work item (an older revision never overwrites a newer
//! one).
//!
//! The webhook door verifies signatures and reads payloads; what a delivery changes goes
//! through `runtime::specs` and `runtime::ops`. This module never parses HTTP.

use crate::clock;
use crate::runtime::executions::Executions;
use crate::store::ProjectRow;

/// Whether delivery `delivery` from `source` (`github`, `ado`) is new: claims it; `false` for
/// a redelivery of one already claimed (apply nothing).
///
/// Errors: the database.
pub async fn claim(execs: &Executions, source: &str, delivery: &str) -> anyhow::Result<bool> {
    Ok(execs.store().claim_delivery(source, delivery, &clock::now_rfc3339()).await?)
}

/// Keeps what a claimed delivery did (its answer's JSON).
///
/// Errors: the database.
pub async fn finish(execs: &Executions, source: &str, delivery: &str, outcome: &str) -> anyhow::Result<()> {
    Ok(execs.store().set_delivery_outcome(source, delivery, outcome).await?)
}

/// Forgets the claim of a delivery whose handling failed, so the forge's retry applies.
///
/// Errors: the database.
pub async fn release(execs: &Executions, source: &str, delivery: &str) -> anyhow::Result<()> {
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
