-- baton journal schema, PostgreSQL dialect of migrations/0001_journal.sql (same number, same
-- name: a test keeps the two directories in step). forward-only: never edit this file after it
-- is merged. json columns are text, stored verbatim (the hash chain hashes the text as given);
-- a check that casts them to json only proves that they parse.

-- one row per execution: the board summary and the head of the event chain.
create table executions (
    task_id       text primary key,
    status        text not null,
    current_phase text not null,
    steps_done    bigint not null,
    steps_total   bigint not null,
    spend_usd     double precision not null,
    created_at    text not null,
    updated_at    text not null,
    last_seq      bigint not null default 0 check (last_seq >= 0),
    last_hash     text not null default '0000000000000000000000000000000000000000000000000000000000000000',
    -- creation order (sqlite's rowid), for listings in creation order.
    ord           bigint generated always as identity
);

create table execution_plans (
    task_id   text primary key references executions (task_id),
    plan_json text not null check (plan_json::json is not null)
);

create index executions_by_status on executions (status, updated_at);

-- append-only, hash-chained journal; seq is 1, 2, 3 ... per execution.
create table execution_events (
    task_id         text not null references executions (task_id),
    seq             bigint not null check (seq >= 1),
    kind            text not null,
    payload         text not null check (payload::json is not null),
    idempotency_key text not null,
    at              text not null,
    prev_hash       text not null,
    hash            text not null,
    primary key (task_id, seq),
    unique (task_id, idempotency_key)
);

-- journal rows (and spec events, 0002) are never rewritten.
create function baton_append_only() returns trigger language plpgsql as $$
begin
    raise exception '% is append-only', tg_table_name;
end;
$$;

create trigger execution_events_append_only before update on execution_events
for each row execute function baton_append_only();

create table snapshots (
    task_id    text not null references executions (task_id),
    seq        bigint not null check (seq >= 0),
    state_json text not null check (state_json::json is not null),
    at         text not null,
    primary key (task_id, seq)
);

-- one driver per execution. timestamps are utc rfc 3339 with a fixed width, so text order is
-- time order.
create table leases (
    task_id     text primary key references executions (task_id),
    holder      text not null,
    pid         bigint not null,
    host        text not null,
    acquired_at text not null,
    expires_at  text not null
);

create table settings (
    key   text primary key,
    value text not null
);
