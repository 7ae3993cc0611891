-- git across machines (issue 17.3), PostgreSQL dialect of migrations/0016_project_remote.sql:
-- a project's remote (any git URL, or the path of a bare repository); empty: none.
-- forward-only, like 0001.

alter table projects add column repo_url text not null default '';
