-- the spend ledger, PostgreSQL dialect of migrations/0009_spend.sql: one row per recorded
-- agent attempt, read straight from the journal's step_recorded events. forward-only, like 0001.

-- sqlite's truthiness of a json value: true, or a non-zero number.
create function baton_json_truthy(j jsonb) returns boolean language sql immutable as $$
    select case jsonb_typeof(j)
        when 'boolean' then j::text::boolean
        when 'number' then j::text::numeric != 0
        else false end
$$;

create view spend_ledger as
select
    task_id,
    seq,
    at,
    p ->> 'step_id' as step_id,
    coalesce((p #>> '{usage,attempt}')::numeric::bigint, 0) as attempt,
    p ->> 'agent_name' as agent_name,
    coalesce(p #>> '{usage,model}', '') as model,
    coalesce((p ->> 'tokens')::numeric::bigint, 0) as tokens,
    coalesce((p #>> '{usage,input_tokens}')::numeric::bigint, 0) as input_tokens,
    coalesce((p #>> '{usage,output_tokens}')::numeric::bigint, 0) as output_tokens,
    coalesce((p ->> 'cost_usd')::double precision, 0.0) as cost_usd,
    baton_json_truthy(p #> '{usage,cost_estimated}') as cost_estimated,
    p ->> 'status' as status
from (select task_id, seq, at, payload::jsonb as p from execution_events where kind = 'step_recorded') e;

create index events_step_recorded on execution_events (kind, at) where kind = 'step_recorded';

alter table specs add column budget_usd double precision;
alter table projects add column budget_usd double precision;
