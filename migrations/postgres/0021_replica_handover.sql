-- several replicas (issue 17), PostgreSQL dialect of migrations/0020_replica_handover.sql:
-- an execution's feature branch and base commit, recorded once, and the journal head an
-- execution waiting for a human stopped at (claim loops leave it alone until the journal
-- moves). forward-only, like 0001.

create table execution_bases (
    task_id     text primary key not null references executions (task_id),
    branch      text not null,
    base_sha    text not null,
    recorded_at text not null
);

create table execution_idle (
    task_id text primary key not null references executions (task_id),
    seq     bigint not null
);
