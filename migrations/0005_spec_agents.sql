-- the board lists each card's agents: keep them in a column, written whenever the plan is,
-- instead of walking every spec's plan json on every board request.

alter table specs add column agents text not null default '';

update specs set agents = coalesce((
    select group_concat(distinct json_extract(st.value, '$.agent_name'))
    from json_each(specs.plan_json, '$.phases') ph, json_each(ph.value, '$.steps') st
), '') where plan_json is not null;

create trigger specs_agents_on_insert
after insert on specs
begin
    update specs set agents = coalesce((
        select group_concat(distinct json_extract(st.value, '$.agent_name'))
        from json_each(new.plan_json, '$.phases') ph, json_each(ph.value, '$.steps') st
    ), '') where spec_id = new.spec_id;
end;

create trigger specs_agents_on_plan
after update of plan_json on specs
begin
    update specs set agents = coalesce((
        select group_concat(distinct json_extract(st.value, '$.agent_name'))
        from json_each(new.plan_json, '$.phases') ph, json_each(ph.value, '$.steps') st
    ), '') where spec_id = new.spec_id;
end;
