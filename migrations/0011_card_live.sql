-- the board's live cards (issue 16): what an open execution runs now, and its forecast and
-- ceiling, kept by triggers on the journal as events are appended, so the board reads one
-- row per card instead of loading each open execution's state (its cost no longer grows with
-- journal length). the rules mirror the engine's (engine::mutate, engine::budget): a dispatch
-- runs a step until its result, an interactive step runs again on a human's input; the
-- forecast is the sum of the forecasted event's mid forecasts, grown by what an attempt
-- stopped at the ceiling used. forward-only, like 0001.

create table execution_live (
    task_id      text primary key not null references executions (task_id),
    forecast_usd real not null default 0,
    ceiling_usd  real
) strict;

create table execution_running (
    task_id    text not null references executions (task_id),
    step_id    text not null,
    agent_name text not null,
    -- 0 while the step waits for a human's reply (interacting).
    running    integer not null default 1,
    primary key (task_id, step_id)
) strict;

create trigger card_live_forecasted after insert on execution_events when new.kind = 'forecasted'
begin
    insert into execution_live (task_id, forecast_usd)
    values (new.task_id, (select total(json_extract(value, '$.mid_usd')) from json_each(new.payload, '$.steps')))
    on conflict (task_id) do update set forecast_usd = excluded.forecast_usd;
end;

create trigger card_live_budget_set after insert on execution_events when new.kind = 'budget_set'
begin
    insert into execution_live (task_id, ceiling_usd)
    values (new.task_id, json_extract(new.payload, '$.ceiling_usd'))
    on conflict (task_id) do update set ceiling_usd = excluded.ceiling_usd;
end;

create trigger card_live_budget_raised after insert on execution_events when new.kind = 'budget_raised'
begin
    update execution_live set ceiling_usd = coalesce(ceiling_usd, 0) + json_extract(new.payload, '$.by_usd')
    where task_id = new.task_id;
end;

create trigger card_live_dispatched after insert on execution_events when new.kind = 'step_dispatched'
begin
    insert into execution_running (task_id, step_id, agent_name, running)
    values (new.task_id, json_extract(new.payload, '$.step_id'), json_extract(new.payload, '$.agent_name'), 1)
    on conflict (task_id, step_id) do update set agent_name = excluded.agent_name, running = 1;
end;

create trigger card_live_recorded after insert on execution_events when new.kind = 'step_recorded'
begin
    update execution_running set running = 0
    where task_id = new.task_id and step_id = json_extract(new.payload, '$.step_id')
      and json_extract(new.payload, '$.status') = 'interacting';
    delete from execution_running
    where task_id = new.task_id and step_id = json_extract(new.payload, '$.step_id')
      and coalesce(json_extract(new.payload, '$.status'), '') != 'interacting';
    update execution_live set forecast_usd = forecast_usd + coalesce(json_extract(new.payload, '$.cost_usd'), 0)
    where task_id = new.task_id and json_extract(new.payload, '$.status') = 'budget_stopped';
end;

create trigger card_live_interact_input after insert on execution_events when new.kind = 'interact_input'
begin
    update execution_running set running = 1
    where task_id = new.task_id and step_id = json_extract(new.payload, '$.step_id');
end;

create trigger card_live_step_done after insert on execution_events
when new.kind in ('interact_completed', 'step_requeued', 'step_retried', 'step_skipped')
begin
    delete from execution_running where task_id = new.task_id and step_id = json_extract(new.payload, '$.step_id');
end;

create trigger card_live_ended after insert on execution_events when new.kind in ('completed', 'cancelled')
begin
    delete from execution_running where task_id = new.task_id;
end;

-- executions journaled before this migration: the same rows, read from their journals once.
insert into execution_live (task_id, forecast_usd, ceiling_usd)
select e.task_id,
       (select total(json_extract(st.value, '$.mid_usd')) from execution_events f, json_each(f.payload, '$.steps') st
        where f.task_id = e.task_id and f.kind = 'forecasted')
       + (select total(coalesce(json_extract(r.payload, '$.cost_usd'), 0)) from execution_events r
          where r.task_id = e.task_id and r.kind = 'step_recorded' and json_extract(r.payload, '$.status') = 'budget_stopped'),
       (select json_extract(b.payload, '$.ceiling_usd')
               + (select total(json_extract(r.payload, '$.by_usd')) from execution_events r
                  where r.task_id = e.task_id and r.kind = 'budget_raised' and r.seq > b.seq)
        from execution_events b where b.task_id = e.task_id and b.kind = 'budget_set' order by b.seq desc limit 1)
from executions e;

insert into execution_running (task_id, step_id, agent_name, running)
select d.task_id, json_extract(d.payload, '$.step_id'), json_extract(d.payload, '$.agent_name'), 1
from execution_events d join executions e on e.task_id = d.task_id
where d.kind = 'step_dispatched' and e.status not in ('complete', 'failed', 'cancelled')
  and not exists (
    select 1 from execution_events r where r.task_id = d.task_id and r.seq > d.seq
      and r.kind in ('step_dispatched', 'step_recorded', 'step_requeued', 'step_retried', 'step_skipped')
      and json_extract(r.payload, '$.step_id') = json_extract(d.payload, '$.step_id'));
