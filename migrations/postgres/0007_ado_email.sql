-- the azure devops identity of a user, PostgreSQL dialect of migrations/0007_ado_email.sql.
-- forward-only, like 0001.
alter table users add column ado_email text not null default '';
create unique index users_by_ado_email on users (lower(ado_email)) where ado_email != '';
