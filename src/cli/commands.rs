//! The dispatch of a parsed command line: each `Command` to the file that runs it, with the
//! small one-shot commands (plan, replay, audit, token, approval link, gc) written here. It
//! prints results and maps nothing to exit codes itself beyond a command's own verdict; the
//! work happens in `runtime`.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context as _;

use super::execute::execute;
use super::output::EXIT_FAILED;
use super::plan_file::{check_plan, read_plan};
use super::serve::serve;
use super::service::{with_executions, with_operator_service};
use super::{daemon, demo, forge, goal};
use super::{ApprovalCommand, AuditCommand, Cli, Command, TokenCommand};
use crate::runtime;
use crate::runtime::config::DataDir;
use crate::runtime::executions::Executions;

pub(super) async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let json = cli.json;
    match cli.command {
        Command::Demo => demo::run_demo(&cli.data_dir).await,
        Command::Goal(args) => goal::run_goal(&cli.data_dir, args, json).await,
        Command::Plan { from, check } => {
            let plan = read_plan(&from)?;
            check_plan(&from, &plan)?;
            if !check {
                let data = DataDir::open(&cli.data_dir)?;
                let dir = data.plans_dir();
                std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
                let target = dir.join("current.json");
                let text = serde_json::to_string_pretty(&plan)?;
                runtime::write_atomic(&target, text.as_bytes())?;
                outln!("plan {} is valid: {}; saved as {}", plan.task_id, plan_size(&plan), target.display());
            } else {
                outln!("plan {} is valid: {}", plan.task_id, plan_size(&plan));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Execute { command } => {
            let data = DataDir::open(&cli.data_dir)?;
            execute(data, command, json, cli.as_user.as_deref()).await
        }
        Command::Replay { id, task } => {
            let json = cli.json;
            with_executions(DataDir::open(&cli.data_dir)?, async |execs| {
                let task_id = execs.resolve_task_id(id.or(task.task_id).as_deref()).await?;
                let rebuilt = execs.replay(&task_id).await?;
                let stored = execs.get(&task_id).await?;
                let summary = execs.summary(&task_id).await?;
                let rebuilt_summary = runtime::executions::summary_of(&rebuilt);
                let same_state = rebuilt.same_as(&stored);
                let same_summary = summary.as_ref() == Some(&rebuilt_summary);
                if json {
                    let report = serde_json::json!({
                        "task_id": task_id, "events": rebuilt.events_applied, "status": rebuilt.status,
                        "steps_done": rebuilt_summary.steps_done, "steps_total": rebuilt_summary.steps_total,
                        "state_matches": same_state, "summary_matches": same_summary,
                    });
                    outln!("{}", serde_json::to_string_pretty(&report)?);
                } else {
                    // Starting journals no event (the state is the plan's): with none, say
                    // so rather than "0 events", which read as if nothing was found.
                    let through = match rebuilt.events_applied {
                        0 => " (no event journaled yet)".to_owned(),
                        n => format!(" and {} journaled since", events(n)),
                    };
                    outln!(
                        "replayed {task_id} from its plan{through}: status {}, {}/{} steps done",
                        rebuilt.status,
                        rebuilt_summary.steps_done,
                        rebuilt_summary.steps_total
                    );
                    outln!("state matches the stored snapshot + journal: {}", if same_state { "yes" } else { "NO" });
                    outln!("summary matches the stored summary: {}", if same_summary { "yes" } else { "NO" });
                }
                Ok(if same_state && same_summary { ExitCode::SUCCESS } else { ExitCode::from(EXIT_FAILED) })
            })
            .await
        }
        Command::Audit { command: AuditCommand::Verify { id, task } } => {
            let json = cli.json;
            let data = DataDir::open(&cli.data_dir)?;
            with_executions(data.clone(), async |execs| {
            let task_id = execs.resolve_task_id(id.or(task.task_id).as_deref()).await?;
            let report = execs.verify_chain(&task_id).await?;
            let chain_ok = report.ok;
            let key = runtime::auth::ServerKey::load_or_create(&data)?;
            let d = execs.verify_decisions(&key, &task_id).await?;
            let code = if chain_ok && d.bad.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(EXIT_FAILED) };
            if json {
                let out = serde_json::json!({
                    "task_id": task_id, "events": report.events, "chain_intact": chain_ok,
                    "first_bad_seq": report.first_bad_seq,
                    "decisions": {"signed": d.signed, "unsigned": d.unsigned, "bad_seqs": d.bad},
                });
                outln!("{}", serde_json::to_string_pretty(&out)?);
                return Ok(code);
            }
            if report.ok {
                outln!("journal of {task_id}: {}, hash chain intact", events(report.events));
            } else {
                outln!(
                    "journal of {task_id}: {}, hash chain BROKEN at seq {}",
                    events(report.events),
                    report.first_bad_seq.map_or_else(|| "?".to_string(), |s| s.to_string())
                );
            }
            outln!(
                "decisions: {} signed and verified, {} unsigned (recorded outside the server), {} with a BAD signature{}",
                d.signed,
                d.unsigned,
                d.bad.len(),
                if d.bad.is_empty() {
                    String::new()
                } else {
                    format!(" (seq {})", d.bad.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "))
                }
            );
            Ok(code)
            })
            .await
        }
        Command::Token { command } => token_command(&cli.data_dir, command).await,
        Command::Spec { command } => forge::spec_command(&cli.data_dir, command, cli.json).await,
        Command::Merge { task_id } => forge::merge_command(&cli.data_dir, &task_id, cli.json).await,
        Command::Approval { command: ApprovalCommand::Link { task_id, reviewer, hours, base_url } } => {
            let as_user = cli.as_user.as_deref();
            with_operator_service(DataDir::open(&cli.data_dir)?, async |ops| {
                let op = ops.cli_operator(as_user).await?;
                let token = ops.mint_link(&task_id, &reviewer, hours.saturating_mul(3600), &op).await?;
                outln!("{}/approve/{token}", base_url.trim_end_matches('/'));
                Ok(ExitCode::SUCCESS)
            })
            .await
        }
        Command::Gc { hours } => {
            let data = DataDir::open(&cli.data_dir)?;
            let hours = match hours {
                Some(h) => h,
                None => data.config()?.runtime.gc_hours,
            };
            with_executions(data, async |execs| {
                let removed = runtime::gc::collect(execs, hours).await?;
                outln!("removed {removed} worktrees of final executions older than {hours} h");
                Ok(ExitCode::SUCCESS)
            })
            .await
        }
        Command::Serve { bind, demo, max_agents, role } => serve(&cli.data_dir, bind, demo, max_agents, role).await,
        Command::Daemon { command } => daemon::run(&cli.data_dir, command, json).await,
        Command::Agent { .. } | Command::Attempt { .. } => Ok(ExitCode::SUCCESS),
    }
}

/// `baton token create | list | revoke`.
async fn token_command(data_dir: &Path, command: TokenCommand) -> anyhow::Result<ExitCode> {
    with_executions(DataDir::open(data_dir)?, async |execs| token_with(execs, command).await).await
}

/// `baton token …` over `execs`.
async fn token_with(execs: &Executions, command: TokenCommand) -> anyhow::Result<ExitCode> {
    match command {
        TokenCommand::Create { user, role, label, github_login, ado_email, change_role } => {
            let new = runtime::users::NewToken { user, role, label, github_login, ado_email, change_role };
            let user = new.user.clone();
            let created = runtime::users::create_token(execs, new).await?;
            errln!("token {} for {user} ({}); it is shown once, keep it safe:", created.id, created.role.as_str());
            outln!("{}", created.token);
        }
        TokenCommand::List => {
            let tokens = runtime::users::tokens(execs).await?;
            if tokens.is_empty() {
                errln!("no tokens yet: create one with `baton token create`");
            }
            for t in tokens {
                let state = t.revoked_at.map_or_else(|| "active".to_string(), |at| format!("revoked {at}"));
                outln!("{}\t{}\t{}\t{}\t{}\t{}", t.token_id, t.user_name, t.role, t.created_at, state, t.label);
            }
        }
        TokenCommand::Revoke { id } => {
            runtime::users::revoke(execs, id).await?;
            outln!("token {id} revoked");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `n` journal events, as a count with its noun: "1 event", "12 events".
fn events(n: u64) -> String {
    if n == 1 {
        "1 event".to_string()
    } else {
        format!("{n} events")
    }
}

/// `1 phase, 2 steps`: a plan's size as `baton plan` reports it, each noun in its number.
fn plan_size(plan: &crate::model::plan::MachinePlan) -> String {
    let plural = |n: usize, noun: &str| if n == 1 { format!("1 {noun}") } else { format!("{n} {noun}s") };
    format!("{}, {}", plural(plan.phases.len(), "phase"), plural(plan.step_count(), "step"))
}
