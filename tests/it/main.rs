//! Integration tests: the real `baton` binary, real SQLite files, real git repositories and
#![expect(clippy::unwrap_used, reason = "test helpers panic on setup failure, like the tests")]
//! worktrees, real agent subprocesses (the demo agent).

mod agents;
mod api_contract;
mod app;
mod auth;
mod bad_input;
mod book;
mod browser;
mod budget;
mod ci_gates;
mod cli;
mod common;
mod cost;
mod crash;
mod crash_everywhere;
mod daemon;
mod doors;
mod forge_clients;
mod forge_flow;
mod goal;
mod golden_plan;
mod group_commit;
mod layering;
mod mcp;
mod metrics;
mod pause;
mod portfolio;
mod postgres;
mod project_fields;
mod quota;
mod relay;
mod remediation;
mod remote;
mod replicas;
mod report;
mod run;
mod serve;
mod snapshots;
mod specs;
mod teams;
mod web;
mod webhooks;
mod wire;
mod worktree_env;
