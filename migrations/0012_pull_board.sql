-- a card shows its execution's pull request (issue 19.5): opening one, or a change of its row,
-- moves the board's counter like a change of a spec. forward-only, like 0001.

create trigger board_rev_merge_insert after insert on merges
begin
    update board_rev set n = n + 1 where id = 1;
end;

create trigger board_rev_merge_update after update on merges
begin
    update board_rev set n = n + 1 where id = 1;
end;
