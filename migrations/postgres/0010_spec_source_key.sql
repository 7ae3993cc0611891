-- one spec per forge item, PostgreSQL dialect of migrations/0010_spec_source_key.sql: a unique
-- item key, inserted with `on conflict (source_key) where source_key != '' do nothing`.
-- forward-only, like 0001.

alter table specs add column source_key text not null default '';

create unique index specs_by_source_key on specs (source_key) where source_key != '';
