-- a card shows its execution's pull request, PostgreSQL dialect of
-- migrations/0012_pull_board.sql: a merge row's insert or update moves the board's counter.
-- forward-only, like 0001.

create trigger board_rev_merge after insert or update on merges
for each row execute function baton_board_rev_bump();
