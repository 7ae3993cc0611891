-- when the `pr-checks` pass next reads the checks of an open pull request's head (issue 19,
-- the polling fallback for lost CI webhooks): one row per execution whose pull request is
-- open, kept in the store so a restarted process, or another replica taking its turn under
-- the cluster job's lock, goes on with the same schedule instead of starting over. written by
-- `runtime::remediation` only; a row whose pull request is no longer open is deleted by the
-- next pass. forward-only, like 0001.

create table pr_polls (
    task_id     text primary key not null,
    -- the head polled; a new head starts the schedule over.
    sha         text not null,
    -- the interval after the next poll, milliseconds (doubles up to `[ci] pr_max_poll_secs`).
    interval_ms integer not null,
    -- when the next poll is due (RFC 3339, UTC).
    next_at     text not null
) strict;
