-- a counter that moves with every change of a spec or a project, so the board (and its live
-- stream) can tell "unchanged" from "changed within the same second" without reading the
-- specs. executions are versioned by their journal heads (`last_seq`) instead: every change
-- of an execution's summary is an append. forward-only, like 0001.

create table board_rev (
    id integer primary key check (id = 1),
    n  integer not null
) strict;
insert into board_rev (id, n) values (1, 0);

create trigger board_rev_spec_insert after insert on specs
begin
    update board_rev set n = n + 1 where id = 1;
end;

create trigger board_rev_spec_update after update on specs
begin
    update board_rev set n = n + 1 where id = 1;
end;

create trigger board_rev_spec_delete after delete on specs
begin
    update board_rev set n = n + 1 where id = 1;
end;

create trigger board_rev_project_insert after insert on projects
begin
    update board_rev set n = n + 1 where id = 1;
end;

create trigger board_rev_project_delete after delete on projects
begin
    update board_rev set n = n + 1 where id = 1;
end;
