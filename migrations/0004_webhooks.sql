-- forge webhooks: which deliveries were applied, how a project and a user are found from a
-- delivery. forward-only, like 0001.

-- one row per webhook delivery that passed authentication; a redelivery of the same id is
-- answered without applying anything.
create table webhook_deliveries (
    -- github, ado.
    source      text not null,
    -- github: the X-GitHub-Delivery header; ado: the notification id of the body.
    delivery_id text not null,
    received_at text not null,
    -- what it did (imported spec 3, ignored: …).
    outcome     text not null default '',
    primary key (source, delivery_id)
) strict;

-- the newest revision of a forge item that was imported (azure devops work items carry a
-- `rev`; deliveries may arrive out of order, an older one is ignored).
create table forge_item_revs (
    source text not null,
    url    text not null,
    rev    integer not null,
    primary key (source, url)
) strict;

-- the label that makes a GitHub issue a spec (empty: no issue is imported).
alter table projects add column trigger_label text not null default '';
-- the repository on its forge: `owner/name` on GitHub, `ado:<org>/<project>` or the bare
-- project name on Azure DevOps; empty: no webhook maps to this project.
alter table projects add column forge_repo text not null default '';

-- the GitHub login of a user, so `/baton approve` comments map to them (empty: none).
alter table users add column github_login text not null default '';
create unique index users_by_github_login on users (lower(github_login)) where github_login != '';

-- one spec per forge item: imports look the spec up by its source url.
create index specs_by_source_url on specs (source, source_url) where source_url != '';
