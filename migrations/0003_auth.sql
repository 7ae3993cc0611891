-- who may do what: users with roles, their api tokens (hashed), single-use approval links,
-- and the server's signatures over decisions. forward-only, like 0001.

create table users (
    name       text primary key not null check (length(name) between 1 and 64),
    -- viewer, reviewer, lead, admin.
    role       text not null check (role in ('viewer', 'reviewer', 'lead', 'admin')),
    created_at text not null
) strict;

create table api_tokens (
    token_id     integer primary key autoincrement,
    user_name    text not null references users (name),
    -- sha-256 of the token, hex; the token itself is shown once and never stored.
    token_hash   text not null unique,
    label        text not null default '',
    created_at   text not null,
    revoked_at   text
) strict;

-- approval links that were used (a link is single-use: its id is inserted once).
create table used_approval_links (
    link_id text primary key not null,
    used_at text not null,
    used_by text not null
) strict;

-- the server's hmac-sha256 signature over each decision it recorded, by journal position.
create table decision_signatures (
    task_id   text not null references executions (task_id),
    seq       integer not null,
    signature text not null,
    primary key (task_id, seq)
) strict;

-- a project may require that the person who fired an execution does not decide its approvals.
alter table projects add column require_separate_reviewer integer not null default 0;
