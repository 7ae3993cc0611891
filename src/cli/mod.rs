//! The `baton` command line: clap commands mapped onto the runtime's services.
//!
//! Flags follow agent-baton's CLI, so an orchestrator written for it works unchanged
//! (seed-spec §0, §2.24). Output is the `ACTION:` text form (`wire`) or, with `--json`, the
//! action object. Exit codes: 0 done/ok · 1 internal error · 2 usage or bad input ·
//! 3 waiting for a human (approval, feedback, interact) · 4 execution failed.
//! This module parses and prints; the work happens in `runtime`, built by the composition
//! root (`runtime::app::App::build`): decisions through `runtime::ops` (with `--as` as the
//! operator; an `OpsError` is exit 2, or 1 when internal), reads through `runtime::views`,
//! users and tokens through `runtime::users`. No store call and no business rule here.
//!
//! One job a file: `args` the clap definitions of the subcommands (this file keeps the root
//! `Cli` and its `Command` tree), `commands` the dispatch of a parsed command line, `execute`
//! the `baton execute` family, `serve` the `baton serve` start-up, `plan_file` reading and
//! checking plan files, `output` exit codes and the printing of actions; `relay` running a call in the server
//! that serves the same data directory; `service` the doors that open a service for one command
//! and end it for the process's exit; `daemon`, `demo`,
//! `forge`, `goal`, `team_record` and `wire` as before.

mod args;
mod commands;
mod daemon;
pub mod demo;
mod execute;
mod forge;
pub mod goal;
mod output;
mod plan_file;
pub mod relay;
mod serve;
mod service;
mod team_record;
pub mod wire;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::builder::NonEmptyStringValueParser;
use clap::{Parser, Subcommand};

use crate::runtime;
use args::{AgentCommand, ApprovalCommand, AuditCommand, ExecuteCommand, Task, TokenCommand};

pub use args::{RunArgs, RunFlags};
use commands::run;
use output::conclude;
pub use output::{exit_for, print_action, print_outcome, EXIT_BAD_INPUT, EXIT_FAILED, EXIT_WAITING};
use plan_file::check_plan;
pub use plan_file::read_plan;

#[derive(Debug, Parser)]
#[command(name = "baton", version, about = "Turn specs into merged pull requests with AI coding agents")]
struct Cli {
    /// Data directory (database, worktrees, run directories, logs, baton.toml).
    #[arg(long, env = "BATON_DATA_DIR", default_value = "./.baton", global = true, allow_negative_numbers = true)]
    data_dir: PathBuf,
    /// Print actions and results as JSON.
    #[arg(long, global = true)]
    json: bool,
    /// Who you are, for decisions and operator commands: a Baton user (required once users
    /// exist; their role applies, and the separate-reviewer rule knows them). Without users,
    /// the local operator (`$USER@host`, or this name).
    #[arg(long = "as", value_name = "USER", env = "BATON_USER", global = true, allow_negative_numbers = true)]
    as_user: Option<String>,
    #[command(subcommand)]
    command: Command,
}

// `defer`: each subcommand's arguments are built only when that subcommand is the one parsed
// (here and on every subcommand enum), not the whole tree on every call: 0.5 ms of the 6 ms of
// an `execute next` at 10 steps (issue 14.8). `Command::build` still builds it all (the book's
// CLI reference does). A doc comment on a subcommand enum would then become its command's
// about, over the variant's: they have plain comments.
#[derive(Debug, Subcommand)]
#[command(defer = true)]
enum Command {
    /// Run the demo: a small repository, an example plan, the demo agent, to COMPLETE.
    Demo,
    /// Validate a MachinePlan file (and save it as the plan `execute start` uses).
    Plan {
        /// Plan file (agent-baton plan.json format).
        #[arg(long = "from", allow_negative_numbers = true)]
        from: PathBuf,
        /// Only validate; save nothing.
        #[arg(long)]
        check: bool,
    },
    /// Goal-driven execution: write a small plan whose completion condition is CONDITION and
    /// run it like `execute run`; the evaluator judges every phase boundary (the book, docs/src/running.md "Goals").
    Goal(goal::GoalArgs),
    /// Drive an execution (agent-baton's driver contract).
    Execute {
        #[command(subcommand)]
        command: ExecuteCommand,
    },
    /// Rebuild an execution from its journal and compare it with the stored state.
    Replay {
        /// Execution id (default: `--task-id`, BATON_TASK_ID, then the active execution, as for
        /// `execute`).
        #[arg(value_name = "TASK_ID", value_parser = NonEmptyStringValueParser::new())]
        id: Option<String>,
        /// `--task-id`, as the `execute` commands take it (the positional id wins).
        #[command(flatten)]
        task: Task,
    },
    /// API tokens: create (and the user with its role), list, revoke.
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// Signed single-use approval links.
    Approval {
        #[command(subcommand)]
        command: ApprovalCommand,
    },
    /// Audit commands.
    Audit {
        #[command(subcommand)]
        command: AuditCommand,
    },
    /// Serve the board and the REST API, driving fired specs, until SIGINT or SIGTERM.
    Serve {
        /// Address to listen on; only loopback is allowed until authentication exists.
        #[arg(long, default_value = crate::web::DEFAULT_BIND, allow_negative_numbers = true)]
        bind: std::net::SocketAddr,
        /// Register a demo project (a small git repository under the data dir, on the bundled
        /// demo agent) and a few specs, so the whole flow runs with no API key.
        #[arg(long)]
        demo: bool,
        /// Agents running at once across every execution (1 or more).
        #[arg(long, default_value_t = crate::runtime::pool::DEFAULT_MAX_AGENTS, allow_negative_numbers = true, value_parser = args::agent_count)]
        max_agents: usize,
        /// What this replica does: `api` serves the API and the board and drives nothing (a
        /// worker picks fired executions up), `worker` drives executions and runs the periodic
        /// jobs and serves only /healthz, /readyz and /metrics, `all` does both.
        #[arg(long, value_enum, default_value_t = serve::Role::All, allow_negative_numbers = true)]
        role: serve::Role,
    },
    /// Run `baton serve` in the background: start, stop, status.
    Daemon {
        #[command(subcommand)]
        command: daemon::DaemonCommand,
    },
    /// Specs from the forges: import.
    Spec {
        #[command(subcommand)]
        command: forge::SpecCommand,
    },
    /// Push a completed execution's feature branch and open (or find) its pull request.
    Merge {
        /// Execution id.
        #[arg(value_parser = NonEmptyStringValueParser::new())]
        task_id: String,
    },
    /// Remove worktrees of final executions older than the configured age.
    Gc {
        /// Age in hours (default: `runtime.gc_hours` of baton.toml, 72).
        #[arg(long, allow_negative_numbers = true, value_parser = args::whole_number::<u64>)]
        hours: Option<u64>,
    },
    /// Bundled agents.
    Agent {
        #[command(subcommand)]
        command: AgentCommand,
    },
    /// Internal: supervise one agent attempt (started by Baton, not by hand).
    #[command(name = "__attempt", hide = true)]
    Attempt {
        /// Run directory of the attempt.
        run_dir: PathBuf,
    },
}

impl Command {
    /// True for a command that runs one operation on the store and exits (`execute` other
    /// than `run`, `replay`, `token`, `approval`, `audit`, `plan`, `gc`, `spec`, `merge`): it
    /// gets a current-thread runtime. Its work is one task at a time, and a multi-threaded
    /// runtime would first start a worker per core, then hand each wake-up between threads:
    /// about 0.4 ms of a 7 ms `baton execute next` (issue 14.8). Commands that drive agents or
    /// serve keep the multi-threaded runtime.
    fn runs_once(&self) -> bool {
        match self {
            Command::Execute { command } => !matches!(command, ExecuteCommand::Run(_)),
            Command::Replay { .. }
            | Command::Token { .. }
            | Command::Approval { .. }
            | Command::Audit { .. }
            | Command::Plan { .. }
            | Command::Gc { .. }
            | Command::Spec { .. }
            | Command::Merge { .. } => true,
            _ => false,
        }
    }
}

/// The whole command tree as clap builds it (the book's CLI reference is generated from it:
/// `tests/it/book.rs`).
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

/// The command line, parsed. An empty `BATON_USER` is no user (as an empty variable is unset
/// for most tools), while `--as ""` stays an empty name, which the operator check refuses
/// (it ran as the default operator, found by a tester). Likewise an empty `BATON_TASK_ID` is
/// unset, while `--task-id ""` is refused (it had meant "the active execution").
fn parse() -> Result<Cli, clap::Error> {
    use clap::FromArgMatches as _;
    let matches = command().try_get_matches().map_err(without_hidden_subcommands)?;
    let mut level = &matches;
    while let Some((_, sub)) = level.subcommand() {
        level = sub;
        // `try_get_one` first: asking the source of an id a command does not have panics.
        let empty = level.try_get_one::<String>("task_id").ok().flatten().is_some_and(String::is_empty);
        if empty && level.value_source("task_id") == Some(clap::parser::ValueSource::CommandLine) {
            return Err(command().error(
                clap::error::ErrorKind::InvalidValue,
                "a value is required for '--task-id <TASK_ID>' but none was supplied",
            ));
        }
    }
    let mut cli = Cli::from_arg_matches(&matches)?;
    if matches.value_source("as_user") == Some(clap::parser::ValueSource::EnvVariable)
        && cli.as_user.as_deref().is_some_and(|name| name.trim().is_empty())
    {
        cli.as_user = None;
    }
    Ok(cli)
}

/// `e` without the hidden subcommands (`__attempt`) in the list of those a command takes:
/// clap's "requires a subcommand" error listed them (found by a tester).
fn without_hidden_subcommands(mut e: clap::Error) -> clap::Error {
    use clap::error::{ContextKind, ContextValue};
    fn hidden(cmd: &clap::Command, into: &mut Vec<String>) {
        for sub in cmd.get_subcommands() {
            if sub.is_hide_set() {
                into.push(sub.get_name().to_string());
            }
            hidden(sub, into);
        }
    }
    if let Some(ContextValue::Strings(names)) = e.get(ContextKind::ValidSubcommand) {
        let mut all = command();
        all.build();
        let mut hide = Vec::new();
        hidden(&all, &mut hide);
        let shown = names.iter().filter(|n| !hide.contains(n)).cloned().collect();
        e.insert(ContextKind::ValidSubcommand, ContextValue::Strings(shown));
    }
    e
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let mut cli = match parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { EXIT_BAD_INPUT } else { 0 });
        }
    };
    init_tracing();
    if let Some(code) = relay::forward(&mut cli) {
        return code;
    }
    match cli.command {
        Command::Attempt { run_dir } => return runtime::agent::shim::run_shim(&run_dir),
        Command::Agent { command: AgentCommand::Demo } => return agent_demo(),
        _ => {}
    }
    let once = cli.command.runs_once();
    let mut builder =
        if once { tokio::runtime::Builder::new_current_thread() } else { tokio::runtime::Builder::new_multi_thread() };
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            errln!("error: starting the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let json = cli.json;
    let code = conclude(runtime.block_on(run(cli)), json);
    if once {
        exit_now(code);
    }
    ExitCode::from(code)
}

/// Ends a one-shot command's process once its work is done and its output written: flushes
/// stdout and stderr, then exits at once (`_exit`), skipping the exit handlers. The one that
/// costs is the allocator's: mimalloc returns every free page to the kernel as the process
/// ends, one `madvise` per 64 KiB page, each splitting a huge page and flushing the TLB:
/// about 150 calls after an `execute next` at step 4,560 of 5,000, 3-5% of the call
/// (issue 14.8). Nothing is lost: the command's store work is committed and its writer closed
/// (`Store::close_for_exit`) before `run` returns, and what the handlers would free the
/// kernel frees with the process.
fn exit_now(code: u8) -> ! {
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    signal_hook::low_level::exit(i32::from(code))
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("BATON_LOG")
        // octocrab logs every failed call at ERROR; baton says what failed itself.
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,baton::progress=info,octocrab=off"));
    use std::io::IsTerminal as _;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

fn agent_demo() -> ExitCode {
    use std::io::Read as _;
    let mut prompt = String::new();
    if let Err(e) = std::io::stdin().read_to_string(&mut prompt) {
        errln!("error: reading the prompt from stdin: {e}");
        return ExitCode::from(1);
    }
    let cwd = match std::env::current_dir() {
        Ok(d) => d,
        Err(e) => {
            errln!("error: no working directory: {e}");
            return ExitCode::from(1);
        }
    };
    let mut out = std::io::stdout().lock();
    match runtime::agent::demo::run_demo_agent(&prompt, &cwd, &mut out) {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(e) => {
            errln!("error: demo agent: {e}");
            ExitCode::from(1)
        }
    }
}
