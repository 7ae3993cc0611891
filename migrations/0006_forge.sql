-- outbound forge work: what else an imported item said, pull requests opened for executions,
-- and the comments reported back on source items. forward-only, like 0001.

-- labels, author, type, state and the item reference (`github:o/r#n`, `ado:org/project#id`)
-- of an imported spec, as JSON; `{}` for specs written on the board.
alter table specs add column source_meta text not null default '{}';

-- one row per execution being merged: the feature branch pushed, then its pull request.
-- written before each outbound step so a merge re-run after a crash finishes the job.
create table merges (
    task_id     text primary key,
    spec_id     integer,
    -- the project's forge_repo at the time.
    forge_repo  text not null,
    branch      text not null,
    base_branch text not null,
    -- pushing, pushed, opened.
    state       text not null,
    pushed_sha  text not null default '',
    pr_number   integer,
    pr_url      text not null default '',
    -- the last failure, empty once a step succeeds.
    error       text not null default '',
    updated_at  text not null
) strict;

-- one row per comment reported back on a spec's source item, keyed by what it reports
-- (`fired`, `waiting:<phase>:<requested_at>`, `failed`, `pr:<url>`): a report is claimed
-- before it is posted, so none is posted twice by two reporters.
create table forge_reports (
    spec_id    integer not null,
    key        text not null,
    -- pending, posted, failed (gave up after attempts).
    state      text not null,
    attempts   integer not null default 0,
    error      text not null default '',
    updated_at text not null,
    primary key (spec_id, key)
) strict;
