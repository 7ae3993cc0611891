-- outbound forge work, PostgreSQL dialect of migrations/0006_forge.sql. forward-only, like 0001.

alter table specs add column source_meta text not null default '{}';

create table merges (
    task_id     text primary key,
    spec_id     bigint,
    forge_repo  text not null,
    branch      text not null,
    base_branch text not null,
    state       text not null,
    pushed_sha  text not null default '',
    pr_number   bigint,
    pr_url      text not null default '',
    error       text not null default '',
    updated_at  text not null
);

create table forge_reports (
    spec_id    bigint not null,
    key        text not null,
    state      text not null,
    attempts   bigint not null default 0,
    error      text not null default '',
    updated_at text not null,
    -- claim order (sqlite's rowid).
    ord        bigint generated always as identity,
    primary key (spec_id, key)
);
