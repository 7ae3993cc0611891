-- the server key's fingerprint (issue 17), PostgreSQL dialect of migrations/0019_server_key.sql:
-- the fingerprint of the `server.key` every replica must share, recorded by the first
-- `baton serve` (never the key itself). One row. forward-only.

create table server_key (
    id          integer primary key check (id = 1),
    fingerprint text not null,
    recorded_at text not null
);
