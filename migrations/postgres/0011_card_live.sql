-- the board's live cards, PostgreSQL dialect of migrations/0011_card_live.sql: what an open
-- execution runs now, and its forecast and ceiling, kept by a trigger on the journal as events
-- are appended (the same rules as sqlite's triggers, which mirror engine::mutate and
-- engine::budget). a PostgreSQL database is created by this version of baton with every
-- migration at once, so there is never a journal to backfill here. forward-only, like 0001.

create table execution_live (
    task_id      text primary key references executions (task_id),
    forecast_usd double precision not null default 0,
    ceiling_usd  double precision
);

create table execution_running (
    task_id    text not null references executions (task_id),
    step_id    text not null,
    agent_name text not null,
    -- 0 while the step waits for a human's reply (interacting).
    running    bigint not null default 1,
    primary key (task_id, step_id)
);

create function baton_card_live() returns trigger language plpgsql as $$
declare
    p jsonb := new.payload::jsonb;
begin
    if new.kind = 'forecasted' then
        insert into execution_live (task_id, forecast_usd)
        values (new.task_id, (select coalesce(sum((v ->> 'mid_usd')::double precision), 0)
                              from baton_json_values(p -> 'steps') v))
        on conflict (task_id) do update set forecast_usd = excluded.forecast_usd;
    elsif new.kind = 'budget_set' then
        insert into execution_live (task_id, ceiling_usd)
        values (new.task_id, (p ->> 'ceiling_usd')::double precision)
        on conflict (task_id) do update set ceiling_usd = excluded.ceiling_usd;
    elsif new.kind = 'budget_raised' then
        update execution_live set ceiling_usd = coalesce(ceiling_usd, 0) + (p ->> 'by_usd')::double precision
        where task_id = new.task_id;
    elsif new.kind = 'step_dispatched' then
        insert into execution_running (task_id, step_id, agent_name, running)
        values (new.task_id, p ->> 'step_id', p ->> 'agent_name', 1)
        on conflict (task_id, step_id) do update set agent_name = excluded.agent_name, running = 1;
    elsif new.kind = 'step_recorded' then
        update execution_running set running = 0
        where task_id = new.task_id and step_id = p ->> 'step_id' and p ->> 'status' = 'interacting';
        delete from execution_running
        where task_id = new.task_id and step_id = p ->> 'step_id'
          and coalesce(p ->> 'status', '') != 'interacting';
        update execution_live set forecast_usd = forecast_usd + coalesce((p ->> 'cost_usd')::double precision, 0)
        where task_id = new.task_id and p ->> 'status' = 'budget_stopped';
    elsif new.kind = 'interact_input' then
        update execution_running set running = 1 where task_id = new.task_id and step_id = p ->> 'step_id';
    elsif new.kind in ('interact_completed', 'step_requeued', 'step_retried', 'step_skipped') then
        delete from execution_running where task_id = new.task_id and step_id = p ->> 'step_id';
    elsif new.kind in ('completed', 'cancelled') then
        delete from execution_running where task_id = new.task_id;
    end if;
    return null;
end;
$$;

create trigger card_live after insert on execution_events
for each row execute function baton_card_live();
