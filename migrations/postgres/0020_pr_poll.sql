-- when the `pr-checks` pass next reads the checks of an open pull request's head (issue 19),
-- PostgreSQL dialect of migrations/0020_pr_poll.sql: one row per execution whose pull request
-- is open, shared by every replica. forward-only, like 0001.

create table pr_polls (
    task_id     text primary key not null,
    -- the head polled; a new head starts the schedule over.
    sha         text not null,
    -- the interval after the next poll, milliseconds (doubles up to `[ci] pr_max_poll_secs`).
    interval_ms bigint not null,
    -- when the next poll is due (RFC 3339, UTC).
    next_at     text not null
);
