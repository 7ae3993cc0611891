-- the spec queue: projects, specs and each spec's lifecycle events. forward-only, like 0001.

-- a repository baton works on, with the defaults its specs get.
create table projects (
    name           text primary key not null check (length(name) between 1 and 64),
    repo_path      text not null,
    default_branch text not null,
    -- agent profile of its executions (demo, claude, codex, command).
    agent_profile  text not null,
    -- test gate command; empty: detected from the repository at enrichment.
    test_command   text not null default '',
    -- link to the repository on its forge; empty when none.
    forge_url      text not null default '',
    -- concurrent agents across this project's executions; 0: only the global cap applies.
    max_agents     integer not null default 0 check (max_agents >= 0),
    created_at     text not null
) strict;

-- one row per spec. status is the stored lifecycle (draft … approved, executing, merged,
-- cancelled); once fired, where it stands is read from its execution's summary row.
create table specs (
    spec_id       integer primary key autoincrement,
    project       text not null references projects (name),
    title         text not null,
    body          text not null,
    -- board, github, ado.
    source        text not null default 'board',
    source_url    text not null default '',
    -- 0 (highest) .. 3.
    priority      integer not null default 2 check (priority between 0 and 3),
    status        text not null,
    -- LOW, MEDIUM, HIGH, CRITICAL once enriched; empty before.
    risk          text not null default '',
    plan_json     text check (plan_json is null or json_valid(plan_json)),
    forecast_json text check (forecast_json is null or json_valid(forecast_json)),
    task_id       text references executions (task_id),
    -- why it was last bounced, cancelled or failed to fire.
    status_reason text not null default '',
    created_by    text not null,
    created_at    text not null,
    updated_at    text not null
) strict;

create index specs_by_status on specs (status, updated_at);
create index specs_by_project on specs (project, status);

-- every transition of a spec, with who and when; append-only.
create table spec_events (
    spec_id     integer not null references specs (spec_id),
    seq         integer not null check (seq >= 1),
    action      text not null,
    from_status text not null,
    to_status   text not null,
    actor       text not null,
    reason      text not null default '',
    at          text not null,
    primary key (spec_id, seq)
) strict;

create trigger spec_events_append_only
before update on spec_events
begin
    select raise(abort, 'spec_events is append-only');
end;
