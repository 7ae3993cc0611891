//! Forge items into specs: one item, one spec ([`Specs::import`], [`Specs::reimport`]), items
//! fitted to the spec limits ([`ForgeItem::fitted`]), and the end of a spec's pull request
//! ([`Specs::mark_pull_ended`]). It never calls a forge: items arrive already read.

use super::{SpecError, SpecInput, Specs, MAX_BODY_BYTES, MAX_TITLE_CHARS};
use crate::clock;
use crate::forge::ForgeItem;
use crate::model::spec::{self, SpecAction};
use crate::store::{SpecChange, SpecInsert, SpecRow};

impl Specs {
    /// Imports a forge item into `project`: creates its spec (source and url from the item,
    /// status `imported`), or updates the spec of the same item as [`Specs::reimport`] does.
    /// One item, one spec, decided by the database: the spec carries the item's key
    /// ([`ForgeItem::key`], unique), inserted with insert-or-get, so deliveries and imports of
    /// one item at the same moment make one spec (the others update or leave it).
    ///
    /// Errors: the database; an unknown project (not found).
    pub async fn import(&self, project: &str, item: ForgeItem, actor: &str) -> Result<ImportOutcome, SpecError> {
        let item = item.fitted();
        // The address becomes a link on every page: a forge answering `javascript:…` (or
        // anything but a web address) is refused, never linked.
        let scheme_ok = item.url.starts_with("https://") || item.url.starts_with("http://");
        if !scheme_ok || item.url.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(SpecError::Invalid {
                field: "source_url".into(),
                message: format!(
                    "the {} item's address {:?} is not an http(s) address",
                    item.source,
                    item.url.chars().take(80).collect::<String>()
                ),
            });
        }
        let key = item.key();
        if let Some(row) = self.execs.store().spec_by_source_key(&key).await? {
            return self.reimport_row(row, item, actor).await;
        }
        let meta = meta_json(&item.meta);
        let input =
            SpecInput { project: project.into(), title: item.title.clone(), body: item.body.clone(), priority: None };
        match self.insert(input, &item.source, &item.url, &meta, &key, actor).await? {
            SpecInsert::Created(id) => Ok(ImportOutcome::Created(self.get(id).await?)),
            // Another delivery or import of the item made its spec meanwhile.
            SpecInsert::Existing(id) => {
                let row = self.get(id).await?;
                self.reimport_row(row, item, actor).await
            }
        }
    }

    /// Updates the spec imported from `item` (found by its key, [`ForgeItem::key`]) with its
    /// title and body; `None` when no spec came from it. A spec not yet approved is imported again (its plan dropped); an
    /// approved, fired or final one keeps its text and plan, and the update is noted as a spec
    /// event `import_update_ignored` ([`ImportOutcome::Ignored`]).
    ///
    /// Errors: the database.
    pub async fn reimport(&self, item: ForgeItem, actor: &str) -> Result<Option<ImportOutcome>, SpecError> {
        let item = item.fitted();
        match self.execs.store().spec_by_source_key(&item.key()).await? {
            Some(row) => Ok(Some(self.reimport_row(row, item, actor).await?)),
            None => Ok(None),
        }
    }

    async fn reimport_row(&self, mut row: SpecRow, item: ForgeItem, actor: &str) -> Result<ImportOutcome, SpecError> {
        // Labels, state and the like follow the item whatever the spec's status.
        let meta = meta_json(&item.meta);
        if meta != row.source_meta && !item.meta.item_ref.is_empty() {
            self.execs.store().set_source_meta(row.spec_id, &meta).await?;
            row.source_meta = meta;
        }
        if row.title == item.title && row.body == item.body {
            return Ok(ImportOutcome::Unchanged(row));
        }
        if spec::transition(Self::status_of(&row)?, SpecAction::Reimport).is_err() {
            use sha2::Digest as _;
            let text_id = hex::encode(sha2::Sha256::digest(format!("{}\n{}", item.title, item.body)));
            let reason = format!(
                "the {} item's text changed after the spec was {} (new text {}): the spec's text and plan stay \
                 as they are",
                item.source,
                row.status,
                &text_id[..12]
            );
            let store = self.execs.store();
            // Flagged once per change: the same text imported again adds nothing.
            let events = store.spec_events(row.spec_id).await?;
            if events.last().is_none_or(|l| l.action != "import_update_ignored" || l.reason != reason) {
                store
                    .note_spec_event(row.spec_id, "import_update_ignored", actor, &reason, &clock::now_rfc3339())
                    .await?;
            }
            return Ok(ImportOutcome::Ignored { spec: row, reason });
        }
        let mut changed = Vec::new();
        if row.title != item.title {
            changed.push("title");
        }
        if row.body != item.body {
            changed.push("body");
        }
        let change = SpecChange {
            title: Some(item.title),
            body: Some(item.body),
            plan_json: Some(None),
            forecast_json: Some(None),
            risk: Some(String::new()),
            reason: format!("updated from {}", item.url),
            ..SpecChange::default()
        };
        let spec = self.change(&row, SpecAction::Reimport, actor, change).await?;
        Ok(ImportOutcome::Updated { spec, changed })
    }

    /// Marks the spec fired as `task_id` `merged` (its pull request `pr_url` was merged) or
    /// `closed_unmerged` (it was closed without merging); `None` when no spec was fired as
    /// `task_id`. Callers go through [`crate::runtime::pulls::pull_request_ended`], which
    /// checks the pull request belongs to the spec's project.
    ///
    /// Errors: the spec is not `executing` (conflict); the database.
    pub async fn mark_pull_ended(
        &self,
        task_id: &str,
        pr_url: &str,
        merged: bool,
        actor: &str,
    ) -> Result<Option<SpecRow>, SpecError> {
        let Some(row) = self.execs.store().spec_of_execution(task_id).await? else { return Ok(None) };
        let (action, reason) = if merged {
            (SpecAction::Merged, format!("merged: {pr_url}"))
        } else {
            (SpecAction::ClosedUnmerged, format!("closed without merging: {pr_url}"))
        };
        let change = SpecChange { reason, ..SpecChange::default() };
        Ok(Some(self.change(&row, action, actor, change).await?))
    }
}

/// An item's meta as the spec's `source_meta` JSON.
fn meta_json(meta: &crate::forge::ItemMeta) -> String {
    serde_json::to_string(meta).unwrap_or_else(|_| "{}".into())
}

impl ForgeItem {
    /// The item with its title made one line of at most [`MAX_TITLE_CHARS`] characters
    /// (`(untitled)` when empty) and its body cut to [`MAX_BODY_BYTES`] bytes at a character
    /// boundary, with a note pointing at the item.
    pub fn fitted(mut self) -> ForgeItem {
        let one_line: String = self.title.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
        let mut title = one_line.trim().to_string();
        if title.is_empty() {
            title = "(untitled)".into();
        }
        if title.chars().count() > MAX_TITLE_CHARS {
            title = crate::model::text::cut(&title, MAX_TITLE_CHARS - 1);
        }
        self.title = title;
        if self.body.len() > MAX_BODY_BYTES {
            let note = format!("\n\n… (cut to fit; the whole text is at {})", self.url);
            let mut end = MAX_BODY_BYTES.saturating_sub(note.len());
            while !self.body.is_char_boundary(end) {
                end -= 1;
            }
            self.body.truncate(end);
            self.body.push_str(&note);
        }
        self
    }
}

/// What an import did.
#[derive(Debug, Clone, PartialEq)]
pub enum ImportOutcome {
    /// A new spec (status `imported`).
    Created(SpecRow),
    /// The item's spec got the new title and body, and is `imported` again (its plan dropped).
    Updated {
        /// The spec, updated.
        spec: SpecRow,
        /// What changed: `title`, `body` or both.
        changed: Vec<&'static str>,
    },
    /// The item's spec already has this title and body.
    Unchanged(SpecRow),
    /// The item's spec is approved, fired or final: its plan stays, the update is noted as a
    /// spec event `import_update_ignored`.
    Ignored {
        /// The spec, unchanged.
        spec: SpecRow,
        /// Why.
        reason: String,
    },
}

impl ImportOutcome {
    /// The spec concerned.
    pub fn spec(&self) -> &SpecRow {
        match self {
            ImportOutcome::Created(s) | ImportOutcome::Unchanged(s) => s,
            ImportOutcome::Updated { spec, .. } | ImportOutcome::Ignored { spec, .. } => spec,
        }
    }

    /// `created`, `updated`, `unchanged` or `ignored`.
    pub fn as_str(&self) -> &'static str {
        match self {
            ImportOutcome::Created(_) => "created",
            ImportOutcome::Updated { .. } => "updated",
            ImportOutcome::Unchanged(_) => "unchanged",
            ImportOutcome::Ignored { .. } => "ignored",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_and_bodies_are_fitted_to_the_spec_limits() {
        let item = ForgeItem {
            source: "github".into(),
            url: "https://example.invalid/1".into(),
            title: format!("  {}\n", "é".repeat(300)),
            body: "ü".repeat(MAX_BODY_BYTES),
            ..ForgeItem::default()
        }
        .fitted();
        assert_eq!(item.title.chars().count(), MAX_TITLE_CHARS);
        assert!(item.title.ends_with('…'));
        assert!(item.body.len() <= MAX_BODY_BYTES);
        assert!(item.body.ends_with("https://example.invalid/1)"));
        let empty = ForgeItem { source: "ado".into(), title: " ".into(), ..ForgeItem::default() };
        assert_eq!(empty.fitted().title, "(untitled)");
    }
}
