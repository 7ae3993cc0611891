-- quota and rate limits (issue 18.1). quota_accounts: each agent account (a profile: claude,
-- codex, …) known to be out of quota, until when, and the backoff last used when the agent
-- named no reset (it doubles from a minute to an hour); shared by every execution, so a step
-- of another execution waits instead of hitting the limit again. execution_quota_waits: the
-- board's card text of an execution whose step waits for its account, kept by triggers on the
-- journal like 0011's live rows. forward-only, like 0001.

create table quota_accounts (
    account      text primary key not null,
    -- rfc 3339 utc, fixed width: comparing the text compares the times.
    until        text not null,
    backoff_secs integer not null default 0,
    reason       text not null default ''
) strict;

create table execution_quota_waits (
    task_id text not null references executions (task_id),
    step_id text not null,
    account text not null,
    until   text not null,
    primary key (task_id, step_id)
) strict;

create trigger quota_wait_journaled after insert on execution_events when new.kind = 'quota_wait'
begin
    insert into execution_quota_waits (task_id, step_id, account, until)
    values (new.task_id, json_extract(new.payload, '$.step_id'), json_extract(new.payload, '$.account'),
            json_extract(new.payload, '$.until'))
    on conflict (task_id, step_id) do update set account = excluded.account, until = excluded.until;
    -- the stopped attempt no longer runs.
    delete from execution_running where task_id = new.task_id and step_id = json_extract(new.payload, '$.step_id');
end;

create trigger quota_wait_over after insert on execution_events
when new.kind in ('quota_resumed', 'step_dispatched', 'step_skipped', 'step_recorded')
begin
    delete from execution_quota_waits
    where task_id = new.task_id and step_id = json_extract(new.payload, '$.step_id');
end;

create trigger quota_wait_ended after insert on execution_events when new.kind in ('completed', 'cancelled')
begin
    delete from execution_quota_waits where task_id = new.task_id;
end;
