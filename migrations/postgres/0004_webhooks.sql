-- forge webhooks, PostgreSQL dialect of migrations/0004_webhooks.sql. forward-only, like 0001.

create table webhook_deliveries (
    source      text not null,
    delivery_id text not null,
    received_at text not null,
    outcome     text not null default '',
    primary key (source, delivery_id)
);

create table forge_item_revs (
    source text not null,
    url    text not null,
    rev    bigint not null,
    primary key (source, url)
);

alter table projects add column trigger_label text not null default '';
alter table projects add column forge_repo text not null default '';

alter table users add column github_login text not null default '';
create unique index users_by_github_login on users (lower(github_login)) where github_login != '';

create index specs_by_source_url on specs (source, source_url) where source_url != '';
