-- token kinds, PostgreSQL dialect of migrations/0014_token_kinds.sql: the spend ledger shows
-- cache writes and reads, and the card's estimated spend is kept by a trigger on the journal.
-- no journal to backfill (see 0011). forward-only, like 0001.

drop view spend_ledger;

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
    coalesce((p #>> '{usage,cache_creation_tokens}')::numeric::bigint, 0) as cache_creation_tokens,
    coalesce((p #>> '{usage,cache_read_tokens}')::numeric::bigint, 0) as cache_read_tokens,
    coalesce((p ->> 'cost_usd')::double precision, 0.0) as cost_usd,
    baton_json_truthy(p #> '{usage,cost_estimated}') as cost_estimated,
    p ->> 'status' as status
from (select task_id, seq, at, payload::jsonb as p from execution_events where kind = 'step_recorded') e;

alter table execution_live add column estimated_usd double precision not null default 0;

create function baton_card_live_estimated() returns trigger language plpgsql as $$
declare
    p jsonb := new.payload::jsonb;
    cost double precision := coalesce((p ->> 'cost_usd')::double precision, 0);
begin
    if new.kind = 'step_recorded' and baton_json_truthy(p #> '{usage,cost_estimated}') and cost > 0 then
        insert into execution_live (task_id, estimated_usd) values (new.task_id, cost)
        on conflict (task_id) do update set estimated_usd = execution_live.estimated_usd + excluded.estimated_usd;
    end if;
    return null;
end;
$$;

create trigger card_live_estimated after insert on execution_events
for each row execute function baton_card_live_estimated();
