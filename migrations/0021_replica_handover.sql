-- several replicas (issue 17): what a replica needs to take over an execution another one
-- drove, kept in the database instead of one replica's data directory. forward-only.

-- the feature branch of an execution and the commit it started at, recorded once when the
-- execution is created (or first driven, for one an orchestrator created): a replica without
-- the run's execution.json takes them from here instead of guessing its base.
create table execution_bases (
    task_id     text primary key not null references executions (task_id),
    branch      text not null,
    base_sha    text not null,
    recorded_at text not null
) strict;

-- an execution whose driver stopped to wait for a human (an approval, feedback, an interactive
-- step's reply, a budget): the journal head it stopped at. Claim loops leave it alone while
-- the journal's head is still there; the next event (the decision) makes it claimable again.
create table execution_idle (
    task_id text primary key not null references executions (task_id),
    seq     integer not null
) strict;
