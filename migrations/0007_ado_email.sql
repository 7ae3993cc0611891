-- the azure devops identity of a user (their e-mail / unique name), so their `/baton approve`
-- and `/baton reject <reason>` work-item comments decide approvals. forward-only, like 0001.
alter table users add column ado_email text not null default '';
create unique index users_by_ado_email on users (lower(ado_email)) where ado_email != '';
