-- one spec per forge item, decided by the database: each imported spec carries the identity of
-- its item (`forge::item_key`: `github:<host>/<owner>/<repo>#<n>`, `ado:<org>#<id>`, …), unique
-- among specs. imports and webhooks insert with `on conflict (source_key) do nothing` and then
-- read the spec that holds the key, so two deliveries of one issue at the same moment (or an
-- import racing a webhook) make one spec. forward-only, like 0001.
--
-- existing databases: the column starts empty (`''`, which the unique index leaves out), so
-- this migration cannot fail on the duplicates the old check-then-insert may have left behind.
-- the keys are filled by baton when it opens the database
-- (`runtime::executions::backfill_source_keys`), which reads the key from each forge spec's
-- `source_url`, oldest spec first: the oldest spec of an item gets its key and stays the item's
-- spec (the one the old lookup found too); each younger duplicate keeps its text, status,
-- plan and history, gets `superseded:<its spec id>` as its key (never an item's key, so imports
-- and webhooks leave it alone) and a spec event `superseded_duplicate` naming the spec that
-- holds the item. nothing is deleted; a lead may cancel the duplicates.

alter table specs add column source_key text not null default '';

create unique index specs_by_source_key on specs (source_key) where source_key != '';
