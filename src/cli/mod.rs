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

mod daemon;
pub mod demo;
mod forge;
pub mod goal;
mod team_record;
pub mod wire;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};

use crate::engine::{self, EngineError};
use crate::model::action::{Action, ActionType};
use crate::model::event::{AddedStep, Event, EventKind, RecordStatus};
use crate::model::plan::{MachinePlan, PlanPhase, PlanStep};
use crate::model::state::{ApprovalDecision, ExecutionState};
use crate::runtime;
use crate::runtime::app::{App, AppConfig};
use crate::runtime::config::DataDir;
use crate::runtime::executions::Executions;
use crate::runtime::ops::{BudgetDecision, Ops, OpsError};
use crate::runtime::BadInput;
use crate::store::StoreError;

/// Exit code: waiting for a human decision.
pub const EXIT_WAITING: u8 = 3;
/// Exit code: the execution failed.
pub const EXIT_FAILED: u8 = 4;
/// Exit code: usage error or bad input.
pub const EXIT_BAD_INPUT: u8 = 2;

#[derive(Debug, Parser)]
#[command(name = "baton", version, about = "Turn specs into merged pull requests with AI coding agents")]
struct Cli {
    /// Data directory (database, worktrees, run directories, logs, baton.toml).
    #[arg(long, env = "BATON_DATA_DIR", default_value = "./.baton", global = true)]
    data_dir: PathBuf,
    /// Print actions and results as JSON.
    #[arg(long, global = true)]
    json: bool,
    /// Who you are, for decisions and operator commands: a Baton user (required once users
    /// exist; their role applies, and the separate-reviewer rule knows them). Without users,
    /// the local operator (`$USER@host`, or this name).
    #[arg(long = "as", value_name = "USER", env = "BATON_USER", global = true)]
    as_user: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the demo: a small repository, an example plan, the demo agent, to COMPLETE.
    Demo,
    /// Validate a MachinePlan file (and save it as the plan `execute start` uses).
    Plan {
        /// Plan file (agent-baton plan.json format).
        #[arg(long = "from")]
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
        /// Execution id.
        task_id: String,
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
        #[arg(long, default_value = crate::web::DEFAULT_BIND)]
        bind: std::net::SocketAddr,
        /// Register a demo project (a small git repository under the data dir, on the bundled
        /// demo agent) and a few specs, so the whole flow runs with no API key.
        #[arg(long)]
        demo: bool,
        /// Agents running at once across every execution.
        #[arg(long, default_value_t = crate::runtime::pool::DEFAULT_MAX_AGENTS)]
        max_agents: usize,
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
        task_id: String,
    },
    /// Remove worktrees of final executions older than the configured age.
    Gc {
        /// Age in hours (default: `runtime.gc_hours` of baton.toml, 72).
        #[arg(long)]
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

#[derive(Debug, Subcommand)]
enum TokenCommand {
    /// Create a token for USER (created with ROLE if new) and print it once. The server stores
    /// only its hash. A role belongs to the user, not the token: giving an existing user
    /// another role needs --change-role (and changes every token of theirs).
    Create {
        /// User name (1-64 of A-Z a-z 0-9 . _ - @).
        #[arg(long)]
        user: String,
        /// viewer, reviewer, lead or admin.
        #[arg(long)]
        role: String,
        /// What the token is for.
        #[arg(long, default_value = "")]
        label: String,
        /// The user's GitHub login: their `/baton approve` and `/baton reject` issue comments
        /// decide approvals (webhooks).
        #[arg(long)]
        github_login: Option<String>,
        /// The user's Azure DevOps e-mail (unique name): their `/baton approve` and `/baton
        /// reject` work-item comments decide approvals (webhooks).
        #[arg(long)]
        ado_email: Option<String>,
        /// Let an existing user's role become ROLE (all their tokens change with it).
        #[arg(long)]
        change_role: bool,
    },
    /// List tokens, tab-separated: id, user, role, created, state, label (never the tokens).
    List,
    /// Revoke a token by its id (from `token list`).
    Revoke {
        /// Token id.
        id: i64,
    },
}

#[derive(Debug, Subcommand)]
enum ApprovalCommand {
    /// Print a signed single-use link that decides the pending approval of an execution
    /// without signing in.
    Link {
        /// Execution id.
        #[arg(long)]
        task_id: String,
        /// Who the link is for (recorded as the decider).
        #[arg(long)]
        reviewer: String,
        /// Hours until it expires (1 to 720: 30 days).
        #[arg(long, default_value_t = 24, value_parser = clap::value_parser!(u32).range(1..))]
        hours: u32,
        /// The server's address as reviewers reach it (an http or https URL).
        #[arg(long, default_value = "http://127.0.0.1:8741", value_parser = http_base_url)]
        base_url: String,
    },
}

#[derive(Debug, Subcommand)]
enum AuditCommand {
    /// Check the hash chain of an execution's journal and the signatures of its decisions.
    Verify {
        /// Execution id.
        task_id: String,
    },
}

#[derive(Debug, Subcommand)]
enum AgentCommand {
    /// The deterministic demo agent: prompt on stdin, claude-style stream-json on stdout.
    Demo,
}

#[derive(Debug, Args, Clone)]
struct Task {
    /// Execution id (default: BATON_TASK_ID, then the active execution).
    #[arg(long, env = "BATON_TASK_ID")]
    task_id: Option<String>,
}

#[derive(Debug, Args, Clone)]
struct Key {
    /// Idempotency key (default: derived from the event): the same key twice has one effect.
    #[arg(long)]
    idempotency_key: Option<String>,
}

#[derive(Debug, Subcommand)]
enum ExecuteCommand {
    /// Start an execution of a plan and print the first action.
    Start {
        /// Plan file (default: the plan saved by `baton plan --from`).
        #[arg(long)]
        plan: Option<PathBuf>,
    },
    /// Print the next action (`--all`: every dispatchable step).
    Next {
        #[command(flatten)]
        task: Task,
        /// Every step that may be dispatched now.
        #[arg(long)]
        all: bool,
    },
    /// Mark a step dispatched.
    Dispatched {
        #[command(flatten)]
        task: Task,
        #[command(flatten)]
        key: Key,
        /// Step id.
        #[arg(long)]
        step_id: String,
        /// Agent name.
        #[arg(long)]
        agent: String,
    },
    /// Record a step's result (also a team member's: its member id is the step id;
    /// `team-record` is accepted as an alias, as agent-baton spells it).
    #[command(alias = "team-record")]
    Record {
        #[command(flatten)]
        task: Task,
        #[command(flatten)]
        key: Key,
        /// Step id (a team member's id, e.g. 1.1.a, for a member).
        #[arg(long)]
        step_id: String,
        /// A team member's id (agent-baton's `team-record --member-id`): recorded instead of
        /// --step-id, which then names its team step.
        #[arg(long)]
        member_id: Option<String>,
        /// Agent name.
        #[arg(long)]
        agent: String,
        /// complete | failed | interacting | budget_stopped (a dispatched attempt stopped at
        /// the budget ceiling).
        #[arg(long, default_value = "complete")]
        status: String,
        /// The agent's outcome text.
        #[arg(long, default_value = "")]
        outcome: String,
        /// Changed files, comma-separated.
        #[arg(long, value_delimiter = ',')]
        files: Vec<String>,
        /// Commit hash.
        #[arg(long, default_value = "")]
        commit: String,
        /// Tokens used.
        #[arg(long, default_value_t = 0)]
        tokens: u64,
        /// Cost in USD.
        #[arg(long, default_value_t = 0.0)]
        cost: f64,
        /// Duration in seconds.
        #[arg(long, default_value_t = 0.0)]
        duration: f64,
        /// Error text (failed).
        #[arg(long, default_value = "")]
        error: String,
    },
    /// Record a gate result.
    Gate {
        #[command(flatten)]
        task: Task,
        #[command(flatten)]
        key: Key,
        /// Phase id.
        #[arg(long, allow_negative_numbers = true)]
        phase_id: i64,
        /// pass | fail | skip (skip: only when the GATE action says it has nothing to run;
        /// a skipped gate lets the phase go on but is not a pass).
        #[arg(long)]
        result: String,
        /// Gate output (for skip: the reason seen, optional).
        #[arg(long, default_value = "")]
        output: String,
    },
    /// Record an approval decision.
    Approve {
        #[command(flatten)]
        task: Task,
        #[command(flatten)]
        key: Key,
        /// Phase id.
        #[arg(long, allow_negative_numbers = true)]
        phase_id: i64,
        /// approve | reject | approve-with-feedback.
        #[arg(long)]
        result: String,
        /// Feedback text.
        #[arg(long, default_value = "")]
        feedback: String,
    },
    /// Answer a feedback question.
    Feedback {
        #[command(flatten)]
        task: Task,
        #[command(flatten)]
        key: Key,
        /// Phase id.
        #[arg(long, allow_negative_numbers = true)]
        phase_id: i64,
        /// Question id.
        #[arg(long)]
        question_id: String,
        /// Chosen option (0-based).
        #[arg(long)]
        chosen_index: usize,
    },
    /// Reply to an interactive step, or end it.
    Interact {
        #[command(flatten)]
        task: Task,
        #[command(flatten)]
        key: Key,
        /// Step id.
        #[arg(long)]
        step_id: String,
        /// Reply text.
        #[arg(long, conflicts_with = "complete", required_unless_present = "complete")]
        input: Option<String>,
        /// End the interaction with the agent's last output.
        #[arg(long)]
        complete: bool,
    },
    /// Amend the plan: insert phases, add steps.
    Amend {
        #[command(flatten)]
        task: Task,
        #[command(flatten)]
        key: Key,
        /// Why.
        #[arg(long)]
        description: String,
        /// `NAME:AGENT`: a new phase with one step for AGENT (task = the description).
        #[arg(long)]
        add_phase: Vec<String>,
        /// Insert new phases after this phase id (default: after the current phase).
        #[arg(long, allow_negative_numbers = true)]
        after_phase: Option<i64>,
        /// `PHASE:AGENT:DESC`: a step appended to phase PHASE.
        #[arg(long)]
        add_step: Vec<String>,
    },
    /// Go on: lift a pause, acknowledge a due CHECKPOINT, and (for an execution an external
    /// orchestrator drives) offer again the steps it had dispatched; print the next action.
    Resume {
        #[command(flatten)]
        task: Task,
    },
    /// Pause: no new dispatches (running agents finish) until `execute resume`.
    Pause {
        #[command(flatten)]
        task: Task,
    },
    /// Show an execution's status.
    Status {
        #[command(flatten)]
        task: Task,
    },
    /// Finalize an execution whose phases are all done.
    Complete {
        #[command(flatten)]
        task: Task,
    },
    /// Cancel an execution.
    Cancel {
        #[command(flatten)]
        task: Task,
        /// Why.
        #[arg(long, default_value = "")]
        reason: String,
    },
    /// Decide an execution parked at its USD ceiling (BUDGET): raise the ceiling or stop.
    #[command(group = clap::ArgGroup::new("decision").required(true).args(["raise", "stop"]))]
    Budget {
        #[command(flatten)]
        task: Task,
        #[command(flatten)]
        key: Key,
        /// Raise the ceiling by this many USD; the next `execute run` resumes where it stopped.
        #[arg(long, value_name = "USD")]
        raise: Option<String>,
        /// Stop the execution (it is cancelled, with the reason).
        #[arg(long)]
        stop: bool,
    },
    /// Retry a failed step (reopens a failed execution).
    RetryStep {
        #[command(flatten)]
        task: Task,
        /// Step id.
        #[arg(long)]
        step_id: String,
    },
    /// Retry a failed gate (reopens a failed execution).
    RetryGate {
        #[command(flatten)]
        task: Task,
        /// Phase id.
        #[arg(long, allow_negative_numbers = true)]
        phase_id: i64,
    },
    /// Skip a step: it counts as done for its dependants.
    Skip {
        #[command(flatten)]
        task: Task,
        /// Step id.
        #[arg(long)]
        step_id: String,
        /// Why.
        #[arg(long, default_value = "")]
        reason: String,
    },
    /// List executions.
    List,
    /// Run a plan headlessly: real agents in worktrees, gates, consolidation on one branch.
    Run(RunArgs),
}

/// `baton execute run` flags.
#[derive(Debug, Args, Clone)]
pub struct RunArgs {
    /// Plan file; its task id resumes a live execution.
    #[arg(long)]
    pub plan: Option<PathBuf>,
    /// Execution to resume (instead of --plan).
    #[arg(long, env = "BATON_TASK_ID")]
    pub task_id: Option<String>,
    /// How the run works (shared with `baton goal`).
    #[command(flatten)]
    pub flags: RunFlags,
}

/// The flags of a driver run, shared by `execute run` and `baton goal`.
#[derive(Debug, Args, Clone, Default)]
pub struct RunFlags {
    /// The git repository to work on (its checkout is never modified). Default: the current
    /// directory for a new execution, the execution's own repository when resuming.
    #[arg(long)]
    pub repo: Option<PathBuf>,
    /// Agent profile for agents that baton.toml maps nowhere: demo | claude | codex | command.
    /// Default: `claude` for a new execution, the profile it started with when resuming.
    #[arg(long)]
    pub agent: Option<String>,
    /// Base of the feature branch (default: the repository's current branch tip).
    #[arg(long)]
    pub base: Option<String>,
    /// Concurrent agents (default: baton.toml, 3; the plan's resource limits may lower it).
    #[arg(long)]
    pub max_parallel: Option<usize>,
    /// USD ceiling of a new execution, evaluators included (default: BATON_RUN_BUDGET_USD).
    /// Dispatch stops before a step whose forecast would cross it; the run then exits 3 (BUDGET).
    #[arg(long, value_name = "USD")]
    pub max_spend_usd: Option<String>,
}

impl RunFlags {
    /// The driver's options for these flags (plan and task id left for the caller).
    ///
    /// Errors ([`BadInput`]): `--max-spend-usd` is not a USD amount from 0.01 to 1 000 000.
    pub fn options(self) -> Result<runtime::driver::RunOptions, BadInput> {
        let budget = max_spend_flag(self.max_spend_usd.as_deref())?;
        Ok(runtime::driver::RunOptions {
            repo: self.repo,
            agent: self.agent,
            base: self.base,
            max_parallel: self.max_parallel,
            budget,
            ..runtime::driver::RunOptions::default()
        })
    }
}

/// `--max-spend-usd` (of `execute run` and `baton goal`) as the driver's ceiling and source.
///
/// Errors ([`BadInput`]): not a USD amount from 0.01 to 1 000 000.
fn max_spend_flag(raw: Option<&str>) -> Result<Option<(f64, String)>, BadInput> {
    raw.map(|raw| {
        runtime::spend::parse_usd(raw)
            .map(|usd| (usd, "--max-spend-usd".to_string()))
            .ok_or_else(|| BadInput(format!("--max-spend-usd {raw:?}: {}", runtime::spend::USD_EXPECTED)))
    })
    .transpose()
}

/// The whole command tree as clap builds it (the book's CLI reference is generated from it:
/// `tests/it/book.rs`).
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { EXIT_BAD_INPUT } else { 0 });
        }
    };
    init_tracing();
    match cli.command {
        Command::Attempt { run_dir } => return runtime::agent::shim::run_shim(&run_dir),
        Command::Agent { command: AgentCommand::Demo } => return agent_demo(),
        _ => {}
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            errln!("error: starting the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let json = cli.json;
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            errln!("error: {e:#}");
            let code = exit_code_of(&e);
            if json {
                // With --json, a script reads the failure from stdout too.
                outln!("{}", serde_json::json!({ "error": format!("{e:#}"), "exit_code": code }));
            }
            ExitCode::from(code)
        }
    }
}

/// `--base-url`: an absolute http(s) URL (a link printed with another scheme, such as
/// `javascript:`, would be one a reviewer must never follow).
fn http_base_url(text: &str) -> Result<String, String> {
    match url::Url::parse(text) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => Ok(text.to_string()),
        Ok(u) => Err(format!("expected an http or https URL with a host, not a {} URL", u.scheme())),
        Err(e) => Err(format!("not a URL ({e}); for example https://baton.example.com")),
    }
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

/// 2 for a client's mistake, 130 for an interrupted run, 1 for anything else.
fn exit_code_of(e: &anyhow::Error) -> u8 {
    for cause in e.chain() {
        if cause.is::<runtime::driver::Interrupted>() {
            return 130;
        }
        if cause.is::<runtime::driver::Parked>() {
            return EXIT_WAITING;
        }
        if let Some(refused) = cause.downcast_ref::<OpsError>() {
            return match refused {
                OpsError::Internal(inner) => exit_code_of(inner),
                _ => EXIT_BAD_INPUT,
            };
        }
        if cause.is::<BadInput>() || cause.is::<EngineError>() || cause.is::<crate::git::GitError>() {
            return EXIT_BAD_INPUT;
        }
        if let Some(s) = cause.downcast_ref::<StoreError>() {
            if matches!(
                s,
                StoreError::NotFound { .. } | StoreError::AlreadyExists { .. } | StoreError::LeaseHeld { .. }
            ) {
                return EXIT_BAD_INPUT;
            }
        }
    }
    1
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

/// Reads and parses a plan file; errors name the file and the JSON path.
pub fn read_plan(path: &Path) -> anyhow::Result<MachinePlan> {
    let text =
        std::fs::read_to_string(path).map_err(|e| BadInput(format!("cannot read plan {}: {e}", path.display())))?;
    let plan = MachinePlan::from_json(&text).map_err(|e| BadInput(format!("{}: {e}", path.display())))?;
    for warning in plan.unknown_keys() {
        errln!("warning: {}: {warning}", path.display());
    }
    Ok(plan)
}

fn check_plan(path: &Path, plan: &MachinePlan) -> anyhow::Result<()> {
    if let Err(problems) = engine::validate(plan) {
        let lines: Vec<String> = problems.iter().map(|p| format!("  {p}")).collect();
        return Err(BadInput(format!("{} is not a valid plan:\n{}", path.display(), lines.join("\n"))).into());
    }
    Ok(())
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
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
                outln!(
                    "plan {} is valid: {} phases, {} steps; saved as {}",
                    plan.task_id,
                    plan.phases.len(),
                    plan.step_count(),
                    target.display()
                );
            } else {
                outln!("plan {} is valid: {} phases, {} steps", plan.task_id, plan.phases.len(), plan.step_count());
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Execute { command } => {
            let data = DataDir::open(&cli.data_dir)?;
            execute(data, command, json, cli.as_user.as_deref()).await
        }
        Command::Replay { task_id } => {
            let execs = Executions::open(DataDir::open(&cli.data_dir)?).await?;
            let rebuilt = execs.replay(&task_id).await?;
            let stored = execs.get(&task_id).await?;
            let summary = execs.summary(&task_id).await?;
            let rebuilt_summary = runtime::executions::summary_of(&rebuilt);
            let same_state = rebuilt == stored;
            let same_summary = summary.as_ref() == Some(&rebuilt_summary);
            outln!(
                "replayed {} events of {task_id}: status {}, {}/{} steps done",
                rebuilt.events_applied,
                rebuilt.status,
                rebuilt_summary.steps_done,
                rebuilt_summary.steps_total
            );
            outln!("state matches the stored snapshot + journal: {}", if same_state { "yes" } else { "NO" });
            outln!("summary matches the stored summary: {}", if same_summary { "yes" } else { "NO" });
            Ok(if same_state && same_summary { ExitCode::SUCCESS } else { ExitCode::from(EXIT_FAILED) })
        }
        Command::Audit { command: AuditCommand::Verify { task_id } } => {
            let data = DataDir::open(&cli.data_dir)?;
            let execs = Executions::open(data.clone()).await?;
            let report = execs.verify_chain(&task_id).await?;
            let chain_ok = report.ok;
            if report.ok {
                outln!("journal of {task_id}: {} events, hash chain intact", report.events);
            } else {
                outln!(
                    "journal of {task_id}: {} events, hash chain BROKEN at seq {}",
                    report.events,
                    report.first_bad_seq.map_or_else(|| "?".to_string(), |s| s.to_string())
                );
            }
            let key = runtime::auth::ServerKey::load_or_create(&data)?;
            let d = execs.verify_decisions(&key, &task_id).await?;
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
            Ok(if chain_ok && d.bad.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(EXIT_FAILED) })
        }
        Command::Token { command } => token_command(&cli.data_dir, command).await,
        Command::Spec { command } => forge::spec_command(&cli.data_dir, command, cli.json).await,
        Command::Merge { task_id } => forge::merge_command(&cli.data_dir, &task_id, cli.json).await,
        Command::Approval { command: ApprovalCommand::Link { task_id, reviewer, hours, base_url } } => {
            let ops = operator_service(DataDir::open(&cli.data_dir)?).await?;
            let op = ops.cli_operator(cli.as_user.as_deref()).await?;
            let token = ops.mint_link(&task_id, &reviewer, i64::from(hours) * 3600, &op).await?;
            outln!("{}/approve/{token}", base_url.trim_end_matches('/'));
            Ok(ExitCode::SUCCESS)
        }
        Command::Gc { hours } => {
            let data = DataDir::open(&cli.data_dir)?;
            let hours = match hours {
                Some(h) => h,
                None => data.config()?.runtime.gc_hours,
            };
            let execs = Executions::open(data).await?;
            let removed = runtime::gc::collect(&execs, hours).await?;
            outln!("removed {removed} worktrees of final executions older than {hours} h");
            Ok(ExitCode::SUCCESS)
        }
        Command::Serve { bind, demo, max_agents } => serve(&cli.data_dir, bind, demo, max_agents).await,
        Command::Daemon { command } => daemon::run(&cli.data_dir, command, json).await,
        Command::Agent { .. } | Command::Attempt { .. } => Ok(ExitCode::SUCCESS),
    }
}

/// Prints an action (text or JSON) and returns the exit code it implies.
pub fn print_action(action: &Action, task_id: &str, json: bool) -> ExitCode {
    if json {
        outln!("{}", serde_json::to_string_pretty(action).unwrap_or_default());
    } else {
        out!("{}", wire::render(action, task_id));
    }
    exit_for(action)
}

/// Prints how a run ended (the action, and the feature branch when complete).
pub fn print_outcome(outcome: &runtime::driver::RunOutcome, json: bool) -> ExitCode {
    let code = print_action(&outcome.action, &outcome.task_id, json);
    if !json && outcome.action.action_type() == ActionType::Complete {
        outln!("Feature branch: {}", outcome.branch);
    }
    code
}

/// Exit code implied by an action: 3 for a human decision, 4 for FAILED, else 0.
pub fn exit_for(action: &Action) -> ExitCode {
    match action.action_type() {
        ActionType::Approval | ActionType::Feedback | ActionType::Interact | ActionType::Budget => {
            ExitCode::from(EXIT_WAITING)
        }
        ActionType::Failed => ExitCode::from(EXIT_FAILED),
        ActionType::Dispatch | ActionType::Gate | ActionType::Wait | ActionType::Complete | ActionType::Checkpoint => {
            ExitCode::SUCCESS
        }
    }
}

/// The operator service of a one-shot process over `data`, from the composition root (its
/// pool stays idle: a driver in another process is reached through the lease).
async fn operator_service(data: DataDir) -> anyhow::Result<Ops> {
    Ok(App::build(AppConfig::new(data.root())).await?.ops)
}

async fn execute(
    data: DataDir,
    command: ExecuteCommand,
    json: bool,
    as_user: Option<&str>,
) -> anyhow::Result<ExitCode> {
    if let ExecuteCommand::Run(args) = command {
        let plan = match &args.plan {
            Some(path) => {
                let plan = read_plan(path)?;
                check_plan(path, &plan)?;
                Some(plan)
            }
            None => None,
        };
        let options = runtime::driver::RunOptions { plan, task_id: args.task_id, ..args.flags.options()? };
        let outcome = runtime::driver::run(data, options).await?;
        return Ok(print_outcome(&outcome, json));
    }
    let ops = operator_service(data).await?;
    let execs = ops.execs().clone();
    match command {
        ExecuteCommand::Start { plan } => {
            let path = match plan {
                Some(p) => p,
                None => {
                    let saved = execs.data().plans_dir().join("current.json");
                    if !saved.exists() {
                        return Err(BadInput(
                            "no plan: pass --plan FILE or save one with `baton plan --from FILE`".into(),
                        )
                        .into());
                    }
                    saved
                }
            };
            let plan = read_plan(&path)?;
            check_plan(&path, &plan)?;
            let state = execs.create(plan).await?;
            Ok(print_action(&engine::next_action(&state), &state.task_id, json))
        }
        ExecuteCommand::Next { task, all } => {
            let task_id = execs.resolve_task_id(task.task_id.as_deref()).await?;
            if all {
                let actions = ops.next_actions(&task_id).await?;
                if json {
                    outln!("{}", serde_json::to_string_pretty(&actions)?);
                } else {
                    for a in &actions {
                        out!("{}", wire::render(a, &task_id));
                    }
                    if actions.is_empty() {
                        return Ok(print_action(&ops.next_action(&task_id).await?, &task_id, json));
                    }
                }
                Ok(ExitCode::SUCCESS)
            } else {
                Ok(print_action(&ops.next_action(&task_id).await?, &task_id, json))
            }
        }
        ExecuteCommand::Status { task } => {
            let task_id = execs.resolve_task_id(task.task_id.as_deref()).await?;
            let state = execs.get(&task_id).await?;
            let paused = execs.is_paused(&task_id).await?;
            let parked = execs.park_reason(&task_id).await?;
            print_status(&state, paused, parked.as_deref(), json)?;
            Ok(ExitCode::SUCCESS)
        }
        ExecuteCommand::Pause { task } => {
            let task_id = execs.resolve_task_id(task.task_id.as_deref()).await?;
            let op = ops.cli_operator(as_user).await?;
            ops.set_paused(&task_id, true, &op).await?;
            errln!("execution {task_id} paused: no new dispatches until `baton execute resume`");
            Ok(ExitCode::SUCCESS)
        }
        ExecuteCommand::Resume { task } => {
            let task_id = execs.resolve_task_id(task.task_id.as_deref()).await?;
            let op = ops.cli_operator(as_user).await?;
            execs.get(&task_id).await?;
            if execs.is_paused(&task_id).await? {
                ops.set_paused(&task_id, false, &op).await?;
                errln!("execution {task_id} resumed from its pause");
            }
            let resumed = ops.resume(&task_id, &op).await?;
            if runtime::runs::meta_path(execs.data(), &task_id).exists() {
                errln!(
                    "execution {task_id} is driven by `baton execute run`: run it again to recover its attempts \
                     (running ones are re-adopted, finished ones harvested, dead ones re-run)"
                );
            }
            for step_id in &resumed.requeued {
                errln!("step {step_id} was dispatched when the driver stopped; it is offered again");
            }
            if !resumed.idempotency_key.is_empty() {
                errln!("checkpoint acknowledged; the execution goes on");
            }
            Ok(print_action(&resumed.next_action, &task_id, json))
        }
        ExecuteCommand::List => {
            let rows = execs.list().await?;
            if json {
                let list: Vec<serde_json::Value> = rows
                    .iter()
                    .map(|r| {
                        serde_json::json!({
                            "task_id": r.task_id, "status": r.summary.status, "current_phase": r.summary.current_phase,
                            "steps_done": r.summary.steps_done, "steps_total": r.summary.steps_total,
                            "spend_usd": r.summary.spend_usd, "created_at": r.created_at, "updated_at": r.updated_at,
                        })
                    })
                    .collect();
                outln!("{}", serde_json::to_string_pretty(&list)?);
            } else if rows.is_empty() {
                outln!("no executions");
            } else {
                for r in rows {
                    outln!(
                        "{}  {:<16} {}/{} steps  ${:.2}  {}",
                        r.task_id,
                        r.summary.status,
                        r.summary.steps_done,
                        r.summary.steps_total,
                        r.summary.spend_usd,
                        r.summary.current_phase
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        other => record_command(&ops, other, json, as_user).await,
    }
}

/// `baton token create | list | revoke`.
async fn token_command(data_dir: &Path, command: TokenCommand) -> anyhow::Result<ExitCode> {
    let execs = Executions::open(DataDir::open(data_dir)?).await?;
    match command {
        TokenCommand::Create { user, role, label, github_login, ado_email, change_role } => {
            let new = runtime::users::NewToken { user, role, label, github_login, ado_email, change_role };
            let user = new.user.clone();
            let created = runtime::users::create_token(&execs, new).await?;
            errln!("token {} for {user} ({}); it is shown once, keep it safe:", created.id, created.role.as_str());
            outln!("{}", created.token);
        }
        TokenCommand::List => {
            for t in runtime::users::tokens(&execs).await? {
                let state = t.revoked_at.map_or_else(|| "active".to_string(), |at| format!("revoked {at}"));
                outln!("{}\t{}\t{}\t{}\t{}\t{}", t.token_id, t.user_name, t.role, t.created_at, state, t.label);
            }
        }
        TokenCommand::Revoke { id } => {
            runtime::users::revoke(&execs, id).await?;
            outln!("token {id} revoked");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// How long `baton serve` waits for its drivers to stop on shutdown.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(30);

/// `baton serve`: checks the address, locks the data dir, recovers every execution it was
/// driving, seeds the demo when asked, publishes its address in `serve.json` (for `baton daemon
/// status`), serves until SIGINT/SIGTERM, then stops its drivers.
async fn serve(data_dir: &Path, bind: std::net::SocketAddr, demo: bool, max_agents: usize) -> anyhow::Result<ExitCode> {
    let data = DataDir::open(data_dir)?;
    // A bad ceiling in the environment would fail every fired spec's driver: refuse it now.
    runtime::spend::ceiling_from_env(|k| std::env::var(k).ok())?;
    let _lock = crate::runtime::server_lock(&data)?;
    let app = App::build(AppConfig::new(data.root()).max_agents(max_agents)).await?;
    let has_users = runtime::users::any(&app.execs).await?;
    crate::web::check_bind(bind, has_users)?;
    let pool = app.pool.clone();
    let env = |k: &str| std::env::var(k).ok();
    let settings = data.config()?.forge_settings(env);
    let forges = crate::runtime::forge::Forges::new(settings.clone(), crate::forge::RetryPolicy::default())?;
    let state = crate::web::AppState::from_app(app)?
        .with_webhooks(crate::web::WebhookConfig::from_settings(&settings, env))
        .with_forges(forges);
    state.specs.load_project_caps().await?;
    if demo {
        demo::seed_board(&data, &state.specs).await?;
    }
    let listener = tokio::net::TcpListener::bind(bind).await.map_err(|e| {
        runtime::BadInput(format!("--bind {bind}: {e} (is another server listening there? pick another port)"))
    })?;
    let addr = listener.local_addr().context("reading the listening address")?;
    let _published = daemon::publish(&data, addr)?;
    let public_url = std::env::var("BATON_PUBLIC_URL")
        .ok()
        .filter(|u| !u.trim().is_empty())
        .unwrap_or_else(|| format!("http://{addr}"));
    let reporter = crate::runtime::report::Reporter::new(
        state.execs.clone(),
        state.forges.clone(),
        &public_url,
        state.ops.clock().clone(),
    );
    tokio::spawn(reporter.run(state.closing()));
    let recovered = pool.recover().await?;
    if recovered > 0 {
        errln!("resumed {recovered} executions");
    }
    errln!("baton serving http://{addr}/ (data dir {})", data_dir.display());
    if has_users {
        errln!("authentication on: API calls need a token (Authorization: Bearer …), browsers sign in at /login");
    } else {
        errln!(
            "open mode: no users are configured and the server only listens on loopback; anyone on this machine \
             may act (create users with `baton token create --user NAME --role ROLE`)"
        );
    }
    tracing::info!(%addr, "serving");
    crate::web::serve(listener, state, crate::web::shutdown_signal()).await?;
    errln!("stopping: drivers stop now; running agents keep going and are picked up at the next start");
    pool.shutdown(SHUTDOWN_GRACE).await;
    errln!("baton serve stopped");
    Ok(ExitCode::SUCCESS)
}

fn split_n<'a>(value: &'a str, n: usize, flag: &str, shape: &str) -> anyhow::Result<Vec<&'a str>> {
    let parts: Vec<&str> = value.splitn(n, ':').collect();
    if parts.len() != n || parts.iter().any(|p| p.trim().is_empty()) {
        return Err(BadInput(format!("{flag} {value:?}: expected {shape}")).into());
    }
    Ok(parts)
}

/// Builds the event of a recording command (validating its flags).
fn event_of(command: ExecuteCommand) -> anyhow::Result<(Option<String>, Event)> {
    let (task, key, kind) = match command {
        ExecuteCommand::Dispatched { task, key, step_id, agent } => {
            (task, key.idempotency_key, EventKind::StepDispatched { step_id, agent_name: agent })
        }
        ExecuteCommand::Record {
            task,
            key,
            step_id,
            member_id,
            agent,
            status,
            outcome,
            files,
            commit,
            tokens,
            cost,
            duration,
            error,
        } => {
            let status = RecordStatus::parse(&status).ok_or_else(|| {
                BadInput(format!("--status {status:?}: expected complete, failed, interacting or budget_stopped"))
            })?;
            if !cost.is_finite() || cost < 0.0 {
                return Err(BadInput(format!("--cost {cost}: expected a non-negative number")).into());
            }
            if !duration.is_finite() || duration < 0.0 {
                return Err(BadInput(format!("--duration {duration}: expected a non-negative number")).into());
            }
            let files = files.into_iter().map(|f| f.trim().to_string()).filter(|f| !f.is_empty()).collect();
            let step_id = member_id.unwrap_or(step_id);
            (
                task,
                key.idempotency_key,
                EventKind::StepRecorded {
                    step_id,
                    agent_name: agent,
                    status,
                    outcome,
                    files_changed: files,
                    commit_hash: commit,
                    tokens,
                    cost_usd: cost,
                    duration_seconds: duration,
                    error,
                    usage: None,
                },
            )
        }
        ExecuteCommand::Gate { task, key, phase_id, result, output } => {
            let kind = match result.as_str() {
                "pass" | "fail" => EventKind::GateRecorded {
                    phase_id,
                    passed: result == "pass",
                    output,
                    command: None,
                    exit_code: None,
                },
                "skip" => EventKind::GateSkipped { phase_id, reason: output },
                other => return Err(BadInput(format!("--result {other:?}: expected pass, fail or skip")).into()),
            };
            (task, key.idempotency_key, kind)
        }
        ExecuteCommand::Approve { task, key, phase_id, result, feedback } => {
            let decision = ApprovalDecision::parse(&result).ok_or_else(|| {
                BadInput(format!("--result {result:?}: expected approve, reject or approve-with-feedback"))
            })?;
            (task, key.idempotency_key, EventKind::ApprovalRecorded { phase_id, result: decision, feedback })
        }
        ExecuteCommand::Feedback { task, key, phase_id, question_id, chosen_index } => {
            (task, key.idempotency_key, EventKind::FeedbackRecorded { phase_id, question_id, chosen_index })
        }
        ExecuteCommand::Interact { task, key, step_id, input, complete } => {
            let kind = match (input, complete) {
                (_, true) => EventKind::InteractCompleted { step_id },
                (Some(input), false) => EventKind::InteractInput { step_id, input },
                (None, false) => return Err(BadInput("interact needs --input TEXT or --complete".into()).into()),
            };
            (task, key.idempotency_key, kind)
        }
        ExecuteCommand::Amend { task, key, description, add_phase, after_phase, add_step } => {
            let mut phases = Vec::new();
            for spec in &add_phase {
                let parts = split_n(spec, 2, "--add-phase", "NAME:AGENT")?;
                let mut phase = PlanPhase::new(0, parts[0].trim());
                phase.steps.push(PlanStep::new("", parts[1].trim(), description.clone()));
                phases.push(phase);
            }
            let mut steps = Vec::new();
            for spec in &add_step {
                let parts = split_n(spec, 3, "--add-step", "PHASE:AGENT:DESC")?;
                let phase_id: i64 = parts[0]
                    .trim()
                    .parse()
                    .map_err(|_| BadInput(format!("--add-step {spec:?}: PHASE must be a phase id")))?;
                steps.push(AddedStep { phase_id, step: PlanStep::new("", parts[1].trim(), parts[2].trim()) });
            }
            if description.trim().is_empty() {
                return Err(BadInput("--description must not be empty".into()).into());
            }
            (
                task,
                key.idempotency_key,
                EventKind::Amended { description, trigger: "manual".into(), phases, after_phase, steps },
            )
        }
        ExecuteCommand::Complete { task } => (task, None, EventKind::Completed),
        ExecuteCommand::Cancel { task, reason } => (task, None, EventKind::Cancelled { reason }),
        ExecuteCommand::Budget { task, key, raise, stop } => match raise {
            Some(raw) if !stop => {
                let by_usd = runtime::spend::parse_usd(&raw)
                    .ok_or_else(|| BadInput(format!("--raise {raw:?}: {}", runtime::spend::USD_EXPECTED)))?;
                (task, key.idempotency_key, EventKind::BudgetRaised { by_usd })
            }
            _ => (task, key.idempotency_key, EventKind::Cancelled { reason: runtime::ops::STOPPED_AT_CEILING.into() }),
        },
        ExecuteCommand::RetryStep { task, step_id } => (task, None, EventKind::StepRetried { step_id }),
        ExecuteCommand::RetryGate { task, phase_id } => (task, None, EventKind::GateRetried { phase_id }),
        ExecuteCommand::Skip { task, step_id, reason } => (task, None, EventKind::StepSkipped { step_id, reason }),
        ExecuteCommand::Start { .. }
        | ExecuteCommand::Next { .. }
        | ExecuteCommand::Resume { .. }
        | ExecuteCommand::Pause { .. }
        | ExecuteCommand::Status { .. }
        | ExecuteCommand::List
        | ExecuteCommand::Run(_) => return Err(anyhow::anyhow!("not a recording command")),
    };
    Ok((task.task_id, runtime::ops::keyed(kind, key)))
}

async fn record_command(
    ops: &Ops,
    command: ExecuteCommand,
    json: bool,
    as_user: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let execs = ops.execs();
    let member = match &command {
        ExecuteCommand::Record { step_id, member_id: Some(m), .. } => Some((step_id.clone(), m.clone())),
        _ => None,
    };
    let (task_id, event) = event_of(command)?;
    let task_id = execs.resolve_task_id(task_id.as_deref()).await?;
    // An unknown task id is one line naming it, for every command (found by a tester: it
    // surfaced as the lease's "acquiring the lease: execution … not found"): the operator
    // service checks it before the lease. Only a member's record loads the state here.
    if let Some((step_id, member_id)) = member {
        let state = execs.get(&task_id).await?;
        team_record::check_member(&state, &step_id, &member_id)?;
    }
    let op = ops.cli_operator(as_user).await?;
    let kind = event.kind.name();
    let budget = match &event.kind {
        EventKind::BudgetRaised { by_usd } => Some(BudgetDecision::Raise(*by_usd)),
        EventKind::Cancelled { reason } if reason == runtime::ops::STOPPED_AT_CEILING => Some(BudgetDecision::Stop),
        _ => None,
    };
    let done = match budget {
        // `execute budget` answers a BUDGET action; cancelling anything else is `execute
        // cancel`'s job.
        Some(decision) => ops.budget(&task_id, decision, event.idempotency_key, &op).await?,
        None => ops.record(&task_id, event, &op).await?,
    };
    if done.stopped_attempts > 0 {
        errln!("stopped {} running agent attempts of {task_id}", done.stopped_attempts);
    }
    if done.recorded {
        errln!("recorded {kind} for {task_id}");
    } else {
        errln!("{kind} for {task_id} was already applied (idempotency key {}): nothing changed", done.idempotency_key);
    }
    Ok(print_action(&done.next_action, &task_id, json))
}

fn print_status(state: &ExecutionState, paused: bool, parked: Option<&str>, json: bool) -> anyhow::Result<()> {
    if json {
        let mut value = serde_json::to_value(state)?;
        if let Some(fields) = value.as_object_mut() {
            fields.insert("paused".into(), serde_json::Value::Bool(paused));
            if let Some(why) = parked {
                fields.insert("parked".into(), serde_json::Value::String(why.to_string()));
            }
        }
        outln!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    let (done, total) = state.progress();
    let pause = if paused { " (paused: no new dispatches until resumed)" } else { "" };
    outln!(
        "{}: {}{pause} — {done}/{total} steps done, ${:.2} spent",
        state.task_id,
        state.status,
        state.counters.spend_usd
    );
    if let Some(why) = &state.failure {
        outln!("  reason: {why}");
    }
    if let Some(why) = parked {
        outln!("  parked: {why}");
    }
    if let Some(ceiling) = state.budget.ceiling_usd {
        outln!(
            "  budget: ${:.2} spent + ${:.2} reserved of the ${ceiling:.2} ceiling ({})",
            state.counters.spend_usd,
            state.budget.reserved_usd(),
            state.budget.source
        );
    }
    if let Some(s) = &state.budget.shortfall {
        outln!("  budget decision: {} (raise by at least ${:.2}, or stop)", s.reason, s.needed_usd);
    }
    for w in &state.budget.warnings {
        outln!("  warning: {w}");
    }
    goal::print_goal(state);
    for (i, phase) in state.plan.phases.iter().enumerate() {
        let marker = if i == state.current_phase { ">" } else { " " };
        outln!("{marker} phase {} {}", phase.phase_id, phase.name);
        for step in &phase.steps {
            let r = state.result(&step.step_id);
            let status = r.map_or("pending", |r| r.status.as_str());
            let attempt = r.map_or(0, |r| r.attempt);
            let spend = match (state.budget.forecasts.get(&step.step_id), r.map_or(0.0, |r| r.cost_usd)) {
                (Some(f), spent) => format!("  ${spent:.2} of ${:.2} forecast", f.mid_usd),
                (None, spent) if spent > 0.0 => format!("  ${spent:.2}"),
                (None, _) => String::new(),
            };
            outln!("    {:<10} {:<20} {:<12} attempt {attempt}{spend}", step.step_id, step.agent_name, status);
            for id in engine::team::unit_ids(step) {
                let r = state.result(&id);
                let agent = engine::team::work_step(state, &id).map(|w| w.agent_name.clone()).unwrap_or_default();
                let status = r.map_or("pending", |r| r.status.as_str());
                let attempt = r.map_or(0, |r| r.attempt);
                outln!("      {:<10} {:<18} {:<12} attempt {attempt}", id, agent, status);
            }
        }
        if let Some(gate) = &phase.gate {
            let runs = state.gate_runs(phase.phase_id);
            let verdict = if state.gate_passed(phase.phase_id) {
                ", passed".to_string()
            } else if let Some(reason) = state.gate_skipped(phase.phase_id) {
                format!(", skipped: {reason}")
            } else {
                String::new()
            };
            outln!("    gate {} ({} runs{verdict})", gate.gate_type, runs);
        }
    }
    Ok(())
}
