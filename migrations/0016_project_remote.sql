-- git across machines (issue 17.3): a project's remote (any git URL, or the path of a bare
-- repository) that every replica clones under its data dir and, on PostgreSQL, pushes each
-- execution's feature branch to after every consolidation. Empty: none (the local repo_path
-- only, as before). forward-only, like 0001.

alter table projects add column repo_url text not null default '';
