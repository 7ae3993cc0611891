-- several replicas on one database (issue 17.2): every lease carries a fencing epoch, and the
-- execution remembers the highest epoch it ever leased out, so an epoch keeps growing when a
-- lease is released and taken again. `home` is the holder's data directory: a holder on the
-- same host with the same home re-adopts a fenced-out holder's agents; any other holder does
-- not, so the fenced-out one stops them. forward-only.

alter table leases add column epoch integer not null default 0;
alter table leases add column home text not null default '';
alter table executions add column lease_epoch integer not null default 0;
