-- several replicas on one database (issue 17.2), PostgreSQL dialect of
-- migrations/0017_replicas.sql: the lease's fencing epoch, the execution's highest epoch and the
-- holder's data directory; plus what only PostgreSQL needs, notifications for the live streams
-- of every replica: `baton_events` (payload: the task id) on every journal insert and
-- `baton_board` on every move of the board's change counter, sent by pg_notify in the writing
-- transaction, so a listener hears of a change exactly when it is committed. forward-only.

alter table leases add column epoch bigint not null default 0;
alter table leases add column home text not null default '';
alter table executions add column lease_epoch bigint not null default 0;

create function baton_notify_event() returns trigger language plpgsql as $$
begin
    perform pg_notify('baton_events', new.task_id);
    return null;
end;
$$;

create trigger notify_event after insert on execution_events
for each row execute function baton_notify_event();

create function baton_notify_board() returns trigger language plpgsql as $$
begin
    perform pg_notify('baton_board', new.n::text);
    return null;
end;
$$;

create trigger notify_board after update on board_rev
for each row execute function baton_notify_board();
