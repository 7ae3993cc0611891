-- quota and rate limits, PostgreSQL dialect of migrations/0013_quota.sql. forward-only, like
-- 0001.

create table quota_accounts (
    account      text primary key,
    -- rfc 3339 utc, fixed width: comparing the text compares the times.
    until        text not null,
    backoff_secs bigint not null default 0,
    reason       text not null default ''
);

create table execution_quota_waits (
    task_id text not null references executions (task_id),
    step_id text not null,
    account text not null,
    until   text not null,
    primary key (task_id, step_id)
);

create function baton_quota_waits() returns trigger language plpgsql as $$
declare
    p jsonb := new.payload::jsonb;
begin
    if new.kind = 'quota_wait' then
        insert into execution_quota_waits (task_id, step_id, account, until)
        values (new.task_id, p ->> 'step_id', p ->> 'account', p ->> 'until')
        on conflict (task_id, step_id) do update set account = excluded.account, until = excluded.until;
        -- the stopped attempt no longer runs.
        delete from execution_running where task_id = new.task_id and step_id = p ->> 'step_id';
    elsif new.kind in ('quota_resumed', 'step_dispatched', 'step_skipped', 'step_recorded') then
        delete from execution_quota_waits where task_id = new.task_id and step_id = p ->> 'step_id';
    elsif new.kind in ('completed', 'cancelled') then
        delete from execution_quota_waits where task_id = new.task_id;
    end if;
    return null;
end;
$$;

create trigger quota_waits after insert on execution_events
for each row execute function baton_quota_waits();
