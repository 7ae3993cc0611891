-- the server key's fingerprint (issue 17): every replica on one database must sign with the
-- same `server.key` (sessions, approval links, decision signatures). The first `baton serve`
-- records the fingerprint of its key here (an HMAC of a fixed label under the key, never the
-- key itself); a replica whose key gives another fingerprint refuses to start. One row.
-- forward-only.

create table server_key (
    id          integer primary key not null check (id = 1),
    fingerprint text not null,
    recorded_at text not null
) strict;
