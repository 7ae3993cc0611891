-- baton journal schema. forward-only: never edit this file after it is merged; add 0002_*.sql.
-- json columns are opaque text to the store; json_valid checks only that they parse.

-- one row per execution: the board summary and the head of the event chain. the row is
-- rewritten on every append, so it holds nothing whose size grows with the plan.
create table executions (
    task_id       text primary key not null,
    status        text not null,
    current_phase text not null,
    steps_done    integer not null,
    steps_total   integer not null,
    spend_usd     real not null,
    created_at    text not null,
    updated_at    text not null,
    -- seq and hash of the newest event (0 and 64 zeros before the first), so an append is a
    -- primary key lookup and never scans the journal.
    last_seq      integer not null default 0 check (last_seq >= 0),
    last_hash     text not null default '0000000000000000000000000000000000000000000000000000000000000000'
) strict;

-- the plan as created, apart from the hot summary row (written once, read on load).
create table execution_plans (
    task_id   text primary key not null references executions (task_id),
    plan_json text not null check (json_valid(plan_json))
) strict;

-- the board lists executions by status, newest first.
create index executions_by_status on executions (status, updated_at);

-- append-only, hash-chained journal; seq is 1, 2, 3 ... per execution.
create table execution_events (
    task_id         text not null references executions (task_id),
    seq             integer not null check (seq >= 1),
    kind            text not null,
    payload         text not null check (json_valid(payload)),
    idempotency_key text not null,
    at              text not null,
    prev_hash       text not null,
    hash            text not null,
    primary key (task_id, seq),
    unique (task_id, idempotency_key)
) strict;

-- journal rows are never rewritten (verify_chain still detects edits made after dropping this).
create trigger execution_events_append_only
before update on execution_events
begin
    select raise(abort, 'execution_events is append-only');
end;

-- periodic engine state snapshots; the store keeps only the latest few per execution.
create table snapshots (
    task_id    text not null references executions (task_id),
    seq        integer not null check (seq >= 0),
    state_json text not null check (json_valid(state_json)),
    at         text not null,
    primary key (task_id, seq)
) strict;

-- one driver per execution. timestamps are utc rfc 3339 with a fixed width, so text order is
-- time order.
create table leases (
    task_id     text primary key not null references executions (task_id),
    holder      text not null,
    pid         integer not null,
    host        text not null,
    acquired_at text not null,
    expires_at  text not null
) strict;

-- small key/value settings, e.g. the active task pointer.
create table settings (
    key   text primary key not null,
    value text not null
) strict;
