-- remediation rounds on an open pull request (issue 19.3/4). execution_remediation: how many
-- ci fix rounds and review rounds an execution ran, and why Baton stopped starting them (it
-- asks a human); kept by triggers on the journal like 0015's ci waits, so the board card
-- says so without reading the journal. forward-only.

create table execution_remediation (
    task_id       text primary key not null references executions (task_id),
    ci_rounds     integer not null default 0,
    review_rounds integer not null default 0,
    -- why no more rounds start (empty: they may).
    parked        text not null default ''
) strict;

create trigger remediation_started after insert on execution_events when new.kind = 'remediation_started'
begin
    insert into execution_remediation (task_id, ci_rounds, review_rounds, parked)
    values (new.task_id, 0, 0, '')
    on conflict (task_id) do nothing;
    update execution_remediation
    set ci_rounds = ci_rounds + (json_extract(new.payload, '$.cause') = 'ci'),
        review_rounds = review_rounds + (json_extract(new.payload, '$.cause') = 'review')
    where task_id = new.task_id;
end;

create trigger remediation_parked after insert on execution_events when new.kind = 'remediation_parked'
begin
    insert into execution_remediation (task_id, ci_rounds, review_rounds, parked)
    values (new.task_id, 0, 0, coalesce(json_extract(new.payload, '$.reason'), 'parked'))
    on conflict (task_id) do update set parked = excluded.parked;
end;

-- the card moves when a round starts or parks.
create trigger board_rev_remediation_insert after insert on execution_remediation
begin
    update board_rev set n = n + 1 where id = 1;
end;

create trigger board_rev_remediation_update after update on execution_remediation
begin
    update board_rev set n = n + 1 where id = 1;
end;
