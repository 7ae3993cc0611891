-- remediation rounds on an open pull request (issue 19.3/4), PostgreSQL dialect of
-- migrations/0016_remediation.sql: ci fix rounds, review rounds and why Baton stopped starting
-- them, kept by a trigger on the journal like 0015's ci waits. forward-only, like 0001.

create table execution_remediation (
    task_id       text primary key not null references executions (task_id),
    ci_rounds     bigint not null default 0,
    review_rounds bigint not null default 0,
    -- why no more rounds start (empty: they may).
    parked        text not null default ''
);

create function baton_remediation() returns trigger language plpgsql as $$
declare
    p jsonb := new.payload::jsonb;
begin
    if new.kind = 'remediation_started' then
        insert into execution_remediation (task_id, ci_rounds, review_rounds, parked)
        values (new.task_id, 0, 0, '')
        on conflict (task_id) do nothing;
        update execution_remediation
        set ci_rounds = ci_rounds + (case when p ->> 'cause' = 'ci' then 1 else 0 end),
            review_rounds = review_rounds + (case when p ->> 'cause' = 'review' then 1 else 0 end)
        where task_id = new.task_id;
    elsif new.kind = 'remediation_parked' then
        insert into execution_remediation (task_id, ci_rounds, review_rounds, parked)
        values (new.task_id, 0, 0, coalesce(p ->> 'reason', 'parked'))
        on conflict (task_id) do update set parked = excluded.parked;
    end if;
    return null;
end;
$$;

create trigger remediation after insert on execution_events
for each row execute function baton_remediation();

-- the card moves when a round starts or parks.
create trigger board_rev_remediation after insert or update on execution_remediation
for each row execute function baton_board_rev_bump();
