-- the board's change counter, PostgreSQL dialect of migrations/0008_board_rev.sql: moved by
-- every insert, update or delete of a spec and every insert or delete of a project.
-- forward-only, like 0001.

create table board_rev (
    id integer primary key check (id = 1),
    n  bigint not null
);
insert into board_rev (id, n) values (1, 0);

create function baton_board_rev_bump() returns trigger language plpgsql as $$
begin
    update board_rev set n = n + 1 where id = 1;
    return null;
end;
$$;

create trigger board_rev_spec after insert or update or delete on specs
for each row execute function baton_board_rev_bump();

create trigger board_rev_project after insert or delete on projects
for each row execute function baton_board_rev_bump();
