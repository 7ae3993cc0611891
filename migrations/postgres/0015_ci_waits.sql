-- ci gates (issue 19.2), PostgreSQL dialect of migrations/0015_ci_waits.sql: an execution whose
-- ci gate waits for the forge's checks of a pushed commit, with how far they are; kept by a
-- trigger on the journal like 0013's quota waits. forward-only, like 0001.

create table execution_ci_waits (
    task_id  text primary key not null references executions (task_id),
    phase_id bigint not null,
    sha      text not null,
    -- rfc 3339 utc: when the wait times out.
    until    text not null,
    done     bigint not null default 0,
    total    bigint not null default 0
);

create index execution_ci_waits_sha on execution_ci_waits (sha);

create function baton_ci_waits() returns trigger language plpgsql as $$
declare
    p jsonb := new.payload::jsonb;
begin
    if new.kind = 'ci_started' then
        insert into execution_ci_waits (task_id, phase_id, sha, until, done, total)
        values (new.task_id, (p ->> 'phase_id')::bigint, p ->> 'sha', p ->> 'until', 0, 0)
        on conflict (task_id) do update set phase_id = excluded.phase_id, sha = excluded.sha,
            until = excluded.until, done = 0, total = 0;
    elsif new.kind = 'ci_checked' then
        update execution_ci_waits
        set total = (select count(*) from jsonb_array_elements(coalesce(p -> 'checks', '[]'::jsonb))),
            done = (select count(*) from jsonb_array_elements(coalesce(p -> 'checks', '[]'::jsonb)) c
                    where c ->> 'state' <> 'pending')
        where task_id = new.task_id;
    elsif new.kind in ('gate_recorded', 'gate_retried', 'cancelled', 'completed') then
        delete from execution_ci_waits where task_id = new.task_id;
    end if;
    return null;
end;
$$;

create trigger ci_waits after insert on execution_events
for each row execute function baton_ci_waits();
