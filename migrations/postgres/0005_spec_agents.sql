-- each card's agents in a column, PostgreSQL dialect of migrations/0005_spec_agents.sql: the
-- distinct `agent_name`s of the plan's steps, comma-separated in order of first appearance,
-- set by a trigger whenever the plan is written. forward-only, like 0001.

alter table specs add column agents text not null default '';

-- the elements of a json array, or the values of a json object (sqlite's json_each); nothing
-- for anything else.
create function baton_json_values(j jsonb) returns setof jsonb language sql immutable as $$
    select value from jsonb_array_elements(case when jsonb_typeof(j) = 'array' then j else '[]'::jsonb end)
    union all
    select value from jsonb_each(case when jsonb_typeof(j) = 'object' then j else '{}'::jsonb end)
$$;

create function baton_plan_agents(plan text) returns text language sql immutable as $$
    select coalesce(string_agg(agent, ',' order by first), '') from (
        select st.value ->> 'agent_name' as agent, min(array[ph.n, st.n]) as first
        from jsonb_array_elements(case when jsonb_typeof(plan::jsonb -> 'phases') = 'array'
                                       then plan::jsonb -> 'phases' else '[]'::jsonb end)
                 with ordinality as ph (value, n),
             jsonb_array_elements(case when jsonb_typeof(ph.value -> 'steps') = 'array'
                                       then ph.value -> 'steps' else '[]'::jsonb end)
                 with ordinality as st (value, n)
        where jsonb_typeof(st.value) = 'object' and st.value ->> 'agent_name' is not null
        group by 1
    ) agents
$$;

create function baton_specs_agents() returns trigger language plpgsql as $$
begin
    new.agents := baton_plan_agents(new.plan_json);
    return new;
end;
$$;

create trigger specs_agents_on_insert before insert on specs
for each row execute function baton_specs_agents();

create trigger specs_agents_on_plan before update of plan_json on specs
for each row execute function baton_specs_agents();
