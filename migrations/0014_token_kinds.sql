-- token kinds (issue 18 §3-4): the spend ledger shows an attempt's cache writes and cache reads
-- apart from its input and output (each kind is priced at its own rate), and the board card
-- says how much of an execution's spend is an estimate (tokens × the price table, for agents
-- that report no cost: codex, gemini). `usage.cache_*` is absent in events journaled before
-- (0 then). forward-only, like 0001.

drop view spend_ledger;

create view spend_ledger as
select
    task_id,
    seq,
    at,
    json_extract(payload, '$.step_id') as step_id,
    coalesce(json_extract(payload, '$.usage.attempt'), 0) as attempt,
    json_extract(payload, '$.agent_name') as agent_name,
    coalesce(json_extract(payload, '$.usage.model'), '') as model,
    coalesce(json_extract(payload, '$.tokens'), 0) as tokens,
    coalesce(json_extract(payload, '$.usage.input_tokens'), 0) as input_tokens,
    coalesce(json_extract(payload, '$.usage.output_tokens'), 0) as output_tokens,
    coalesce(json_extract(payload, '$.usage.cache_creation_tokens'), 0) as cache_creation_tokens,
    coalesce(json_extract(payload, '$.usage.cache_read_tokens'), 0) as cache_read_tokens,
    coalesce(json_extract(payload, '$.cost_usd'), 0.0) as cost_usd,
    coalesce(json_extract(payload, '$.usage.cost_estimated'), 0) as cost_estimated,
    json_extract(payload, '$.status') as status
from execution_events
where kind = 'step_recorded';

-- the estimated part of an execution's spend, USD, kept like the rest of the card (0011).
alter table execution_live add column estimated_usd real not null default 0;

create trigger card_live_estimated after insert on execution_events
when new.kind = 'step_recorded' and coalesce(json_extract(new.payload, '$.usage.cost_estimated'), 0)
     and coalesce(json_extract(new.payload, '$.cost_usd'), 0) > 0
begin
    insert into execution_live (task_id, estimated_usd)
    values (new.task_id, json_extract(new.payload, '$.cost_usd'))
    on conflict (task_id) do update set estimated_usd = estimated_usd + excluded.estimated_usd;
end;

-- executions journaled before this migration: their estimated spend, read from the ledger once.
insert into execution_live (task_id, estimated_usd)
select l.task_id, total(l.cost_usd) from spend_ledger l join executions e on e.task_id = l.task_id
where l.cost_estimated and l.cost_usd > 0 group by l.task_id
on conflict (task_id) do update set estimated_usd = excluded.estimated_usd;
