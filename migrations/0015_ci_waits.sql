-- ci gates (issue 19.2). execution_ci_waits: an execution whose ci gate waits for the forge's
-- checks of a pushed commit, with how far they are; kept by triggers on the journal like
-- 0013's quota waits. The webhook service finds the waiting execution by sha or branch here,
-- and the board card shows "waiting for CI: <done> of <total> checks done". forward-only.

create table execution_ci_waits (
    task_id  text primary key not null references executions (task_id),
    phase_id integer not null,
    sha      text not null,
    -- rfc 3339 utc: when the wait times out.
    until    text not null,
    done     integer not null default 0,
    total    integer not null default 0
) strict;

create index execution_ci_waits_sha on execution_ci_waits (sha);

create trigger ci_wait_started after insert on execution_events when new.kind = 'ci_started'
begin
    insert into execution_ci_waits (task_id, phase_id, sha, until, done, total)
    values (new.task_id, json_extract(new.payload, '$.phase_id'), json_extract(new.payload, '$.sha'),
            json_extract(new.payload, '$.until'), 0, 0)
    on conflict (task_id) do update set phase_id = excluded.phase_id, sha = excluded.sha,
        until = excluded.until, done = 0, total = 0;
end;

create trigger ci_wait_checked after insert on execution_events when new.kind = 'ci_checked'
begin
    update execution_ci_waits
    set total = (select count(*) from json_each(new.payload, '$.checks')),
        done = (select count(*) from json_each(new.payload, '$.checks')
                where json_extract(value, '$.state') != 'pending')
    where task_id = new.task_id;
end;

create trigger ci_wait_over after insert on execution_events
when new.kind in ('gate_recorded', 'gate_retried', 'cancelled', 'completed')
begin
    delete from execution_ci_waits where task_id = new.task_id;
end;
