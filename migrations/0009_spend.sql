-- the spend ledger (issue 5 §1): one row per recorded agent attempt, read straight from the
-- journal's step_recorded events, so it can never disagree with them and needs no second
-- write. `usage` is absent in events journaled before it existed (model '' then).
-- forward-only, like 0001.

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
    coalesce(json_extract(payload, '$.cost_usd'), 0.0) as cost_usd,
    coalesce(json_extract(payload, '$.usage.cost_estimated'), 0) as cost_estimated,
    json_extract(payload, '$.status') as status
from execution_events
where kind = 'step_recorded';

-- the history the forecast reads: recent attempts per agent and model.
create index events_step_recorded on execution_events (kind, at) where kind = 'step_recorded';

-- ceilings: the one a reviewer sets on a spec, and a project's default (USD; null = none).
alter table specs add column budget_usd real;
alter table projects add column budget_usd real;
