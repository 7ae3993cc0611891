//! The clap definitions of `baton`'s subcommands: the token, approval, audit, agent and
//! `execute` families and the flags a driver run shares with `baton goal` (the root `Cli` and
//! its `Command` tree live in the folder's `mod.rs`). Parsing and flag-shape checks only: this
//! file never runs a command, prints or opens the data directory.

use std::path::PathBuf;

use clap::builder::NonEmptyStringValueParser;
use clap::{Args, Subcommand};

use crate::runtime;
use crate::runtime::BadInput;

#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub(super) enum TokenCommand {
    /// Create a token for USER (created with ROLE if new) and print it once. The server stores
    /// only its hash. A role belongs to the user, not the token: giving an existing user
    /// another role needs --change-role (and changes every token of theirs).
    Create {
        /// User name (1-64 of A-Z a-z 0-9 . _ - @).
        #[arg(long, allow_negative_numbers = true)]
        user: String,
        /// viewer, reviewer, lead or admin.
        #[arg(long, allow_negative_numbers = true)]
        role: String,
        /// What the token is for.
        #[arg(long, default_value = "", allow_negative_numbers = true)]
        label: String,
        /// The user's GitHub login: their `/baton approve` and `/baton reject` issue comments
        /// decide approvals (webhooks).
        #[arg(long, allow_negative_numbers = true)]
        github_login: Option<String>,
        /// The user's Azure DevOps e-mail (unique name): their `/baton approve` and `/baton
        /// reject` work-item comments decide approvals (webhooks).
        #[arg(long, allow_negative_numbers = true)]
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
        #[arg(allow_negative_numbers = true)]
        id: i64,
    },
}

#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub(super) enum ApprovalCommand {
    /// Print a signed single-use link that decides the pending approval of an execution
    /// without signing in.
    Link {
        /// Execution id.
        #[arg(long, value_parser = NonEmptyStringValueParser::new(), allow_negative_numbers = true)]
        task_id: String,
        /// Who the link is for (recorded as the decider).
        #[arg(long, allow_negative_numbers = true)]
        reviewer: String,
        /// Hours until it expires (1 to 720: 30 days).
        // Any whole number: the range is `Ops::mint_link`'s rule, for every value alike (`-1`
        // had clap's "not in 0..=4294967295", found by a tester).
        #[arg(long, default_value_t = 24, allow_negative_numbers = true)]
        hours: i64,
        /// The server's address as reviewers reach it (an http or https URL).
        #[arg(long, default_value = "http://127.0.0.1:8741", value_parser = http_base_url, allow_negative_numbers = true)]
        base_url: String,
    },
}

#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub(super) enum AuditCommand {
    /// Check the hash chain of an execution's journal and the signatures of its decisions.
    Verify {
        /// Execution id (default: `--task-id`, BATON_TASK_ID, then the active execution, as for
        /// `execute`).
        #[arg(value_name = "TASK_ID", value_parser = NonEmptyStringValueParser::new())]
        id: Option<String>,
        /// `--task-id`, as the `execute` commands take it (the positional id wins).
        #[command(flatten)]
        task: Task,
    },
}

#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub(super) enum AgentCommand {
    /// The deterministic demo agent: prompt on stdin, claude-style stream-json on stdout.
    Demo,
}

#[derive(Debug, Args, Clone)]
pub(super) struct Task {
    /// Execution id (default: BATON_TASK_ID, then the active execution).
    #[arg(long, env = "BATON_TASK_ID", allow_negative_numbers = true)]
    pub(super) task_id: Option<String>,
}

#[derive(Debug, Args, Clone)]
pub(super) struct Key {
    /// Idempotency key (default: derived from the event): the same key twice has one effect.
    #[arg(long, allow_negative_numbers = true)]
    pub(super) idempotency_key: Option<String>,
}

#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub(super) enum ExecuteCommand {
    /// Start an execution of a plan and print the first action.
    Start {
        /// Plan file (default: the plan saved by `baton plan --from`).
        #[arg(long, allow_negative_numbers = true)]
        plan: Option<PathBuf>,
    },
    /// Print the next action (`--all`: every dispatchable step).
    Next {
        #[command(flatten)]
        task: Task,
        /// Every step that may be dispatched now; when none is, the one next action (a WAIT, an
        /// APPROVAL, COMPLETE, …), so the list is never empty.
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
        #[arg(long, allow_negative_numbers = true)]
        step_id: String,
        /// Agent name.
        #[arg(long, allow_negative_numbers = true)]
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
        #[arg(long, allow_negative_numbers = true)]
        step_id: String,
        /// A team member's id (agent-baton's `team-record --member-id`): recorded instead of
        /// --step-id, which then names its team step.
        #[arg(long, allow_negative_numbers = true)]
        member_id: Option<String>,
        /// Agent name.
        #[arg(long, allow_negative_numbers = true)]
        agent: String,
        /// complete | failed | interacting | budget_stopped (a dispatched attempt stopped at
        /// the budget ceiling).
        #[arg(long, default_value = "complete", allow_negative_numbers = true)]
        status: String,
        /// The agent's outcome text.
        #[arg(long, default_value = "", allow_negative_numbers = true)]
        outcome: String,
        /// Changed files, comma-separated.
        #[arg(long, value_delimiter = ',', allow_negative_numbers = true)]
        files: Vec<String>,
        /// Commit hash.
        #[arg(long, default_value = "", allow_negative_numbers = true)]
        commit: String,
        /// Tokens used.
        #[arg(long, default_value_t = 0, allow_negative_numbers = true, value_parser = whole_number::<u64>)]
        tokens: u64,
        /// Cost in USD, 0 to 1,000,000.
        #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
        cost: f64,
        /// The agent's wall time in seconds, 0 to 31,622,400 (366 days).
        #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
        duration: f64,
        /// Error text (failed).
        #[arg(long, default_value = "", allow_negative_numbers = true)]
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
        #[arg(long, allow_negative_numbers = true)]
        result: String,
        /// Gate output (for skip: the reason seen, optional).
        #[arg(long, default_value = "", allow_negative_numbers = true)]
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
        #[arg(long, allow_negative_numbers = true)]
        result: String,
        /// Feedback text.
        #[arg(long, default_value = "", allow_negative_numbers = true)]
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
        #[arg(long, allow_negative_numbers = true)]
        question_id: String,
        /// Chosen option (0-based).
        #[arg(long, allow_negative_numbers = true, value_parser = whole_number::<usize>)]
        chosen_index: usize,
    },
    /// Reply to an interactive step, or end it.
    Interact {
        #[command(flatten)]
        task: Task,
        #[command(flatten)]
        key: Key,
        /// Step id.
        #[arg(long, allow_negative_numbers = true)]
        step_id: String,
        /// Reply text.
        #[arg(long, conflicts_with = "complete", required_unless_present = "complete", allow_negative_numbers = true)]
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
        #[arg(long, allow_negative_numbers = true)]
        description: String,
        /// `NAME:AGENT`: a new phase with one step for AGENT (task = the description).
        #[arg(long, allow_negative_numbers = true)]
        add_phase: Vec<String>,
        /// Insert new phases after this phase id (default: after the current phase).
        #[arg(long, allow_negative_numbers = true)]
        after_phase: Option<i64>,
        /// `PHASE:AGENT:DESC`: a step appended to phase PHASE.
        #[arg(long, allow_negative_numbers = true)]
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
        #[arg(long, default_value = "", allow_negative_numbers = true)]
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
        // A negative amount reaches the parser, which says what an amount is, rather than
        // clap's "unexpected argument '-5' found".
        #[arg(long, value_name = "USD", allow_negative_numbers = true)]
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
        #[arg(long, allow_negative_numbers = true)]
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
        #[arg(long, allow_negative_numbers = true)]
        step_id: String,
        /// Why.
        #[arg(long, default_value = "", allow_negative_numbers = true)]
        reason: String,
    },
    /// List executions.
    List,
    /// Run a plan headlessly: real agents in worktrees, gates, consolidation on one branch.
    Run(RunArgs),
}

impl ExecuteCommand {
    /// The execution a command names, for the commands the CLI relay may run in `baton serve`
    /// (every one that names an execution and reads no file: not `start`, `run` or `list`).
    pub(super) fn relayed_task_mut(&mut self) -> Option<&mut Task> {
        use ExecuteCommand as C;
        match self {
            C::Next { task, .. }
            | C::Dispatched { task, .. }
            | C::Record { task, .. }
            | C::Gate { task, .. }
            | C::Approve { task, .. }
            | C::Feedback { task, .. }
            | C::Interact { task, .. }
            | C::Amend { task, .. }
            | C::Resume { task }
            | C::Pause { task }
            | C::Status { task }
            | C::Complete { task }
            | C::Cancel { task, .. }
            | C::Budget { task, .. }
            | C::RetryStep { task, .. }
            | C::RetryGate { task, .. }
            | C::Skip { task, .. } => Some(task),
            C::Start { .. } | C::List | C::Run(_) => None,
        }
    }
}

/// `baton execute run` flags.
#[derive(Debug, Args, Clone)]
// The variant's about again: the subcommands are deferred (see `cli::Command`), so the last
// about applied is the one of the flags' structs, this one's or else a flattened one's doc
// comment (`tests/it/book.rs` checks every command).
#[command(about = "Run a plan headlessly: real agents in worktrees, gates, consolidation on one branch")]
pub struct RunArgs {
    /// Plan file; its task id resumes a live execution.
    #[arg(long, allow_negative_numbers = true)]
    pub plan: Option<PathBuf>,
    /// Execution to resume (instead of --plan).
    #[arg(long, env = "BATON_TASK_ID", allow_negative_numbers = true)]
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
    #[arg(long, allow_negative_numbers = true)]
    pub repo: Option<PathBuf>,
    /// Agent profile for agents that baton.toml maps nowhere: demo | claude | codex | gemini | command.
    /// Default: `claude` for a new execution, the profile it started with when resuming.
    #[arg(long, allow_negative_numbers = true)]
    pub agent: Option<String>,
    /// Base of the feature branch (default: the repository's current branch tip).
    #[arg(long, allow_negative_numbers = true)]
    pub base: Option<String>,
    /// Concurrent agents, 1 or more (default: baton.toml, 3; the plan's resource limits may
    /// lower it).
    #[arg(long, allow_negative_numbers = true, value_parser = agent_count)]
    pub max_parallel: Option<usize>,
    /// USD ceiling of a new execution, evaluators included (default: BATON_RUN_BUDGET_USD).
    /// Dispatch stops before a step whose forecast would cross it; the run then exits 3 (BUDGET).
    #[arg(long, value_name = "USD", allow_negative_numbers = true)]
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

/// What a flag's text holds, read as a whole number.
enum Whole {
    /// A whole number.
    Number(i128),
    /// Digits past any count (`-` in front: negative).
    TooLarge { negative: bool },
    /// Not a whole number: no digits, or other characters (`abc`, `1.5`, `1e3`).
    NotANumber,
}

fn whole(text: &str) -> Whole {
    let t = text.trim();
    let digits = t.strip_prefix(['-', '+']).unwrap_or(t);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Whole::NotANumber;
    }
    t.parse::<i128>().map_or(Whole::TooLarge { negative: t.starts_with('-') }, Whole::Number)
}

/// A whole number, 0 or more (`--tokens`, `--chosen-index`, `gc --hours`, `daemon stop
/// --timeout`, `goal --max-amend-cycles`): `-1` or `abc` had answered Rust's "invalid digit
/// found in string" (found by a tester), and 40 digits now say they are too many, not that
/// they are no number.
pub(super) fn whole_number<T: TryFrom<i128>>(text: &str) -> Result<T, String> {
    let shown = text.trim();
    match whole(text) {
        Whole::Number(n) if n < 0 => Err(format!("{n}: expected a whole number, 0 or more")),
        Whole::TooLarge { negative: true } => Err(format!("{shown}: expected a whole number, 0 or more")),
        Whole::Number(n) => T::try_from(n).map_err(|_| format!("{n} is too large")),
        Whole::TooLarge { negative: false } => Err(format!("{shown} is too large")),
        Whole::NotANumber => Err(format!("{text:?} is not a whole number (0 or more)")),
    }
}

/// A number of agents (`--max-parallel`, `--max-agents`): a whole number, 1 or more. `0` had
/// been taken and run as 1, and `-1` answered Rust's "invalid digit found in string" (found by
/// a tester).
pub(super) fn agent_count(text: &str) -> Result<usize, String> {
    let shown = text.trim();
    match whole(text) {
        Whole::Number(n) if n >= 1 => usize::try_from(n).map_err(|_| format!("{n} agents are too many")),
        Whole::Number(_) | Whole::TooLarge { negative: true } => {
            Err(format!("{shown}: at least 1 agent must be able to run"))
        }
        Whole::TooLarge { negative: false } => Err(format!("{shown} agents are too many")),
        Whole::NotANumber => Err(format!("{text:?} is not a whole number of agents (1 or more)")),
    }
}

/// `--base-url`: an absolute http(s) URL (a link printed with another scheme, such as
/// `javascript:`, would be one a reviewer must never follow), without a query, a fragment or
/// credentials (`http://user:pass@host/` had been accepted and printed in every link); the
/// URL as parsed (`HTTP://H/ x` → `http://h/%20x`).
fn http_base_url(text: &str) -> Result<String, String> {
    match url::Url::parse(text) {
        Ok(u) if u.query().is_some() || u.fragment().is_some() => Err(format!(
            "expected the server's base address, without a query or a fragment (the link's path is \
             added after it): {}",
            &text[..text.find(['?', '#']).unwrap_or(text.len())]
        )),
        Ok(u) if !u.username().is_empty() || u.password().is_some() => {
            Err("expected the server's base address without a user name or password: the link is signed, and \
             credentials in it would reach every reviewer it is sent to"
                .to_string())
        }
        // As parsed: `http://h/ space` had printed links with a space in them.
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => Ok(u.as_str().to_string()),
        Ok(u) => Err(format!("expected an http or https URL with a host, not a {} URL", u.scheme())),
        Err(e) => Err(format!("not a URL ({e}); for example https://baton.example.com")),
    }
}
