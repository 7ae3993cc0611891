//! The operator service: every operator decision, whichever door it comes through.
//!
//! The doors are the CLI, the REST API, the board's forms, signed approval links, forge
//! comments (`/baton approve`) arriving by webhook, and the driver. Each parses its input into
//! an [`Operator`] (who, with which role, through which door) and a request, calls one method
//! here, and formats the typed answer ([`Decided`], or an [`OpsError`] that the web maps once
//! to a status and the CLI once to an exit code).
//!
//! What is decided here, and nowhere else:
//! - **who may do it**: the role each event needs ([`role_needed`]); the separate-reviewer
//!   rule (the requester of an execution, whoever fired it, and with
//!   `require_separate_reviewer` the spec's author too, may not approve it); which users an
//!   approval link may be minted for and redeemed by (checked at both moments);
//! - **idempotency**: a resend (the same explicit key, or no key from the same operator: a
//!   decision's derived key includes its decider) answers the first outcome; a decision by
//!   someone else, or under another key, on an approval already decided is
//!   [`OpsError::AlreadyDecided`], naming the decision that stands (who, when, what); so is
//!   a budget decision (raise, stop) on a ceiling someone else decided on meanwhile, checked
//!   again under the lease;
//! - **the record lock** (one record at a time per execution in this process), the lease,
//!   stopping and restarting this process's driver around an operator event, waking it after;
//! - **journaling and signing** decisions with the server key;
//! - **what a cancel does to the spec** (it is cancelled with its execution).
//!
//! Budget decisions live in `budget`, the checks an event meets before the engine (values,
//! decisions that stand) in `checks`, approval links in `links`, forge comments in
//! `comments`, remediation rounds in `remediation`.
//!
//! This module never parses HTTP or command lines and never prints.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::clock::Clock;
use crate::engine::{self, EngineError};
use crate::model::action::{Action, ApprovalAction};
use crate::model::event::{Event, EventKind};
use crate::model::state::{ApprovalDecision, ExecutionState, ExecutionStatus, StepStatus};
use crate::runtime::auth::{LinkClaims, LinkError, Role, ServerKey};
use crate::runtime::executions::Executions;
use crate::runtime::pool::{DriverState, Pool};
use crate::runtime::{lease, BadInput};
use crate::store::{ForgeIdentity, StoreError, UserRow};

mod budget;
mod checks;
mod comments;
mod links;
mod remediation;

use budget::budget_check;
pub use budget::{BudgetDecision, STOPPED_AT_CEILING};
use checks::{already_decided, check_operator_values, standing_check};
pub use comments::CommentDecision;
pub use links::MAX_LINK_SECS;
pub use remediation::{ReviewRequest, RoundOutcome, RoundRequest};

/// Which door a decision came through (journaled in the actor's name only for links).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Door {
    /// `baton execute …`, `baton approval link`.
    Cli,
    /// `/api/v1/…`.
    Api,
    /// A board form.
    Form,
    /// A signed single-use approval link.
    Link,
    /// A `/baton approve` comment on a forge item, delivered by webhook.
    Webhook,
    /// `execute run`'s driver or the server's pool.
    Driver,
}

/// Who decides: a name (journaled as the event's actor), the role that name holds, and the
/// door.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operator {
    /// Journaled as the actor (a Baton user, or in open mode whatever name the door gives).
    pub name: String,
    /// What the operator may do ([`Role::Admin`] for the local operator of open mode).
    pub role: Role,
    /// The door.
    pub door: Door,
}

impl Operator {
    /// An operator.
    pub fn new(name: impl Into<String>, role: Role, door: Door) -> Operator {
        Operator { name: name.into(), role, door }
    }

    /// Baton itself (the driver acknowledging a checkpoint, a fire's bookkeeping).
    pub fn baton() -> Operator {
        Operator::new("baton", Role::Admin, Door::Driver)
    }
}

/// Suffix of the actor of a decision made through an approval link.
pub const LINK_ACTOR_SUFFIX: &str = " (approval link)";

/// The decision that stands, named by an [`OpsError::AlreadyDecided`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct Standing {
    /// Who decided.
    pub by: String,
    /// When (RFC 3339).
    pub at: String,
    /// What (`approve`, `reject`, `approve-with-feedback`, `budget_raised`, …).
    pub what: String,
}

/// Why an operator request was refused. The web maps each variant to one status
/// (`web::error`), the CLI to one exit code (`cli`): every variant but `Internal` is the
/// client's mistake.
#[derive(Debug, thiserror::Error)]
pub enum OpsError {
    /// 404 / exit 2: no such execution (or link target).
    #[error("{0}")]
    NotFound(String),
    /// 422 / exit 2: a field is wrong; names it.
    #[error("{field}: {message}")]
    Invalid {
        /// The field (`by_usd`, `reviewer`, `decision`, `phases[0].name`, …).
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// 403 / exit 2: the operator may not do this (role, separate reviewer, a tampered link).
    #[error("{0}")]
    Forbidden(String),
    /// 401 / exit 2: the operator is not a Baton user (`--as` naming nobody).
    #[error("{0}")]
    Unknown(String),
    /// 409 / exit 2: the execution's state refuses it; `reason` is a stable code.
    #[error("{message}")]
    Conflict {
        /// What was refused and why.
        message: String,
        /// `wrong_status`, `final`, `used`, `not_pending`, `lease_held`, …
        reason: &'static str,
    },
    /// 409 / exit 2: someone else (or another submission) already decided this.
    #[error("{message}")]
    AlreadyDecided {
        /// What was refused, naming the standing decision.
        message: String,
        /// The decision that stands.
        standing: Standing,
    },
    /// 410 / exit 2: an expired approval link.
    #[error("{0}")]
    Gone(String),
    /// 409 or 422 / exit 2: the engine refused the event (state and journal unchanged).
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// 500 / exit 1: not the client's fault (database, disk).
    #[error(transparent)]
    Internal(anyhow::Error),
}

impl From<anyhow::Error> for OpsError {
    /// Recognises the engine's refusals, a held lease and [`BadInput`] in the chain; anything
    /// else is internal.
    fn from(e: anyhow::Error) -> Self {
        for cause in e.chain() {
            if let Some(engine) = cause.downcast_ref::<EngineError>() {
                return OpsError::Engine(engine.clone());
            }
            if let Some(store) = cause.downcast_ref::<StoreError>() {
                match store {
                    StoreError::NotFound { .. } => return OpsError::NotFound(store.to_string()),
                    StoreError::LeaseHeld { .. } => {
                        return OpsError::Conflict { message: store.to_string(), reason: "lease_held" }
                    }
                    _ => {}
                }
            }
            if let Some(bad) = cause.downcast_ref::<BadInput>() {
                return OpsError::Conflict { message: bad.to_string(), reason: "refused" };
            }
        }
        OpsError::Internal(e)
    }
}

impl From<StoreError> for OpsError {
    fn from(e: StoreError) -> Self {
        OpsError::from(anyhow::Error::from(e))
    }
}

/// What a recorded decision answers.
#[derive(Debug, Clone)]
pub struct Decided {
    /// The execution after it (shared with the state cache; see [`Executions::load_shared`]).
    pub state: std::sync::Arc<ExecutionState>,
    /// False for a resend (nothing changed; the first outcome stands).
    pub recorded: bool,
    /// The event's idempotency key (explicit or derived).
    pub idempotency_key: String,
    /// What the engine asks for next.
    pub next_action: Action,
    /// Agent attempts a cancel stopped.
    pub stopped_attempts: usize,
    /// Steps `resume` offered again (their attempt was lost with the external driver).
    pub requeued: Vec<String>,
}

/// What [`Ops::resume`] did.
#[derive(Debug, Clone)]
pub struct Resumed {
    /// The decision: the state after it, the next action, the steps offered again, the
    /// checkpoint's acknowledgement key (empty when none was due).
    pub decided: Decided,
    /// Whether the execution was paused and the resume lifted the pause.
    pub unpaused: bool,
    /// Who recovers the attempts of a live execution a driver ran (`None`: no driver ran it,
    /// or it ended).
    pub recovery: Option<Recovery>,
}

/// Who recovers a driven execution's attempts after a resume: running ones are re-adopted,
/// finished ones harvested, dead ones run again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recovery {
    /// This process's driver (the resume ran in `baton serve`, itself or relayed): it has
    /// started again.
    ThisServer,
    /// A driver that is not running now: `baton execute run` run again, or a `baton serve` on
    /// the data dir, which starts its driver again when it sees the pause lifted.
    Driver,
    /// The driver that holds the execution's lease (another process): it goes on, the pause
    /// lifted if there was one.
    Running,
}

/// What pause and resume answer.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct PauseState {
    /// The execution.
    pub task_id: String,
    /// Whether it is paused now.
    pub paused: bool,
    /// Whether this call changed it: false when it already was so (a second pause, or a
    /// resume of what was not paused).
    // A second pause had answered as if it paused (found by a tester).
    pub changed: bool,
}

/// The role an operator needs to record `kind`: deciding (approvals, feedback answers,
/// interactive replies) needs a reviewer; everything else that changes an execution (record,
/// retry, skip, amend, cancel, pause, budget) a lead. The web's route table
/// (`web::auth::required_role`) asks the same question of a route before it parses the body.
pub fn role_needed(kind: &EventKind) -> Role {
    match kind {
        EventKind::ApprovalRecorded { .. }
        | EventKind::FeedbackRecorded { .. }
        | EventKind::InteractInput { .. }
        | EventKind::InteractCompleted { .. } => Role::Reviewer,
        _ => Role::Lead,
    }
}

/// The operator service over one data dir's executions (and, in `baton serve`, its pool).
#[derive(Debug, Clone)]
pub struct Ops {
    execs: Executions,
    pool: Option<Pool>,
    key: ServerKey,
    clock: Clock,
    /// One lock per execution: the lease is re-entrant for its holder (this process), so two
    /// records of this process on one execution must not interleave.
    locks: Arc<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>,
}

impl Ops {
    /// The service over `execs`, with the data dir's server key; `pool` is `baton serve`'s
    /// worker pool (its drivers are stopped, restarted and woken around a record), `None` for
    /// one-shot processes (the CLI).
    pub fn new(execs: Executions, pool: Option<Pool>, key: ServerKey, clock: Clock) -> Ops {
        Ops { execs, pool, key, clock, locks: Arc::default() }
    }

    /// The executions.
    pub fn execs(&self) -> &Executions {
        &self.execs
    }

    /// Ends the service of a one-shot process that is about to exit: closes the store's writer
    /// ([`Executions::close_for_exit`]: later writes fail) and leaks the rest — freeing the
    /// loaded executions (a 5,000-step plan and every step's result: ~10% of a CLI call's
    /// instructions) would only delay the exit, and nothing is flushed on drop. Every write the
    /// service made is committed by then.
    pub async fn close_for_exit(self) {
        self.execs.close_for_exit().await;
        std::mem::forget(self);
    }

    /// The server key.
    pub fn key(&self) -> &ServerKey {
        &self.key
    }

    /// The clock.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    fn lock(&self, task_id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(PoisonError::into_inner);
        locks.entry(task_id.to_string()).or_default().clone()
    }

    // ------------------------------------------------------------------------------------
    // Who
    // ------------------------------------------------------------------------------------

    /// The CLI's operator: `--as NAME` (or `BATON_USER`), which must be a Baton user when
    /// users exist (their role applies); with no users, the local operator (`$USER@host`, or
    /// the name given) with every right, as before users existed.
    ///
    /// Errors: [`OpsError::Unknown`] when users exist and `name` is none of them, or is
    /// missing (naming `--as`); [`OpsError::Invalid`] for a malformed name, an empty one
    /// included (what `auth::check_actor_name` refuses; the CLI turns an empty `BATON_USER`
    /// into no name before it gets here).
    pub async fn cli_operator(&self, name: Option<&str>) -> Result<Operator, OpsError> {
        if let Some(given) = name {
            crate::runtime::auth::check_actor_name(given).map_err(|e| OpsError::Invalid {
                field: "--as".into(),
                message: format!("{:?}: {}", crate::model::text::cut(given, 60), e.0),
            })?;
        }
        let name = name.map(str::trim).filter(|n| !n.is_empty());
        let store = self.execs.store();
        if !store.has_users().await? {
            let name = match name {
                Some(n) => n.to_string(),
                None => {
                    format!("{}@{}", std::env::var("USER").unwrap_or_else(|_| "operator".into()), lease::host_name())
                }
            };
            return Ok(Operator::new(name, Role::Admin, Door::Cli));
        }
        let Some(name) = name else {
            return Err(OpsError::Unknown("Baton has users: say who you are with --as USER (or BATON_USER)".into()));
        };
        crate::runtime::auth::check_user_name(name)
            .map_err(|e| OpsError::Invalid { field: "--as".into(), message: e.0 })?;
        let user = store.user(name).await?.ok_or_else(|| {
            OpsError::Unknown(format!("--as {name}: no Baton user of that name (`baton token list` shows them)"))
        })?;
        let role = role_of(&user);
        Ok(Operator::new(user.name, role, Door::Cli))
    }

    /// The operator a forge identity (a GitHub login, an Azure DevOps e-mail) maps to, if any.
    ///
    /// Errors: the database.
    pub async fn forge_operator(&self, kind: ForgeIdentity, value: &str) -> Result<Option<Operator>, OpsError> {
        let user = self.execs.store().user_by_identity(kind, value).await?;
        Ok(user.map(|u| Operator::new(u.name.clone(), role_of(&u), Door::Webhook)))
    }

    fn authorize(op: &Operator, kind: &EventKind) -> Result<(), OpsError> {
        let needed = role_needed(kind);
        if op.role < needed {
            return Err(OpsError::Forbidden(format!(
                "{} is a {}; {} needs the {} role",
                op.name,
                op.role.as_str(),
                kind.name(),
                needed.as_str()
            )));
        }
        Ok(())
    }

    /// Refuses an approval by a requester of the execution when its project requires a
    /// separate reviewer: whoever fired it, and the spec's author. A decision through an
    /// approval link counts as its reviewer's.
    ///
    /// Errors: [`OpsError::Forbidden`] naming the rule; the database.
    pub async fn check_separate_reviewer(&self, task_id: &str, reviewer: &str) -> Result<(), OpsError> {
        let reviewer = reviewer.strip_suffix(LINK_ACTOR_SUFFIX).unwrap_or(reviewer);
        let store = self.execs.store();
        let Some(spec) = store.spec_of_execution(task_id).await? else { return Ok(()) };
        let project = store.project(&spec.project).await?;
        if !project.is_some_and(|p| p.require_separate_reviewer) {
            return Ok(());
        }
        let events = store.spec_events(spec.spec_id).await?;
        let fired_by = events.iter().rev().find(|e| e.action == "fire").map(|e| e.actor.clone());
        let role = if fired_by.as_deref() == Some(reviewer) {
            "fired this execution"
        } else if self.authors_of(&spec).await?.iter().any(|a| a == reviewer) {
            "wrote its spec"
        } else {
            return Ok(());
        };
        Err(OpsError::Forbidden(format!(
            "{reviewer} {role}, and project {} requires a separate reviewer for its approvals",
            spec.project
        )))
    }

    /// The Baton users who wrote `spec`: its creator as recorded, and for an imported spec the
    /// Baton users its forge identities map to (the importer recorded as `github:<login>` /
    /// `ado:<email>`, and the GitHub issue's author), so the separate-reviewer rule knows an
    /// issue's author under their Baton name.
    ///
    /// Errors: the database.
    async fn authors_of(&self, spec: &crate::store::SpecRow) -> Result<Vec<String>, OpsError> {
        let mut identities = Vec::new();
        if let Some(login) = spec.created_by.strip_prefix("github:") {
            identities.push((ForgeIdentity::GitHubLogin, login.to_string()));
        } else if let Some(email) = spec.created_by.strip_prefix("ado:") {
            identities.push((ForgeIdentity::AdoEmail, email.to_string()));
        }
        if spec.source == "github" {
            let meta: crate::forge::ItemMeta = serde_json::from_str(&spec.source_meta).unwrap_or_default();
            if !meta.author.is_empty() {
                identities.push((ForgeIdentity::GitHubLogin, meta.author));
            }
        }
        let mut authors = vec![spec.created_by.clone()];
        for (kind, value) in identities {
            if let Some(user) = self.execs.store().user_by_identity(kind, &value).await? {
                authors.push(user.name);
            }
        }
        Ok(authors)
    }

    // ------------------------------------------------------------------------------------
    // Recording
    // ------------------------------------------------------------------------------------

    /// Refuses an event sent through a door (not by a driver) about the attempt in flight of a
    /// step whose attempt Baton's driver runs or launched: a `quota_wait`, a `step_recorded`,
    /// a `step_requeued` (`what` names it). The driver reports its own agents. A quota wait
    /// taken from outside made the driver dispatch the step again when the wait ended, beside
    /// the attempt still running, whose result (commit, cost) was then dropped; a requeue from
    /// outside started a second attempt beside the first, and a failed record ended the step
    /// while its agent ran on (found by testers). Refused while the step's current attempt
    /// still runs under this data directory (paused, the driver stops but its agent runs on),
    /// and whenever a driver journaled that attempt's dispatch, which the journal tells every
    /// replica (the attempt may run on another one, under its own data directory and lease);
    /// with `while_driving`, also whenever this process's driver runs the execution.
    ///
    /// Errors: [`OpsError::Conflict`] (`lease_held`); store failures.
    async fn check_attempt_from_outside(
        &self,
        task_id: &str,
        step_id: &str,
        what: &str,
        while_driving: bool,
    ) -> Result<(), OpsError> {
        // Who drives it, as the lease's own refusal says (the same record is refused by one
        // check or the other depending on whether the step was dispatched yet).
        let holder = match self.execs.store().lease(task_id).await? {
            Some(l) => format!("; driven by {} (pid {} on {}) since {}", l.holder, l.pid, l.host, l.acquired_at),
            None => String::new(),
        };
        let refuse = |why: &str| OpsError::Conflict {
            message: format!(
                "execution {task_id} is driven by Baton, whose driver reports its own agents: \
                 a {what} for step {step_id} is not taken from outside ({why}{holder})"
            ),
            reason: "lease_held",
        };
        if while_driving && self.pool.as_ref().is_some_and(|p| p.driver_state(task_id) == Some(DriverState::Running)) {
            return Err(refuse("its driver runs in this process"));
        }
        let state = self.get_shared(task_id).await?;
        let Some(attempt) = state.result(step_id).filter(|r| r.status == StepStatus::Dispatched).map(|r| r.attempt)
        else {
            return Ok(());
        };
        if crate::runtime::runs::attempt_running(self.execs.data(), task_id, step_id, attempt) {
            return Err(refuse(&format!("its attempt {attempt} runs")));
        }
        let key = crate::runtime::runs::dispatch_key(task_id, step_id, attempt);
        let dispatched = self.execs.store().event_by_key(task_id, &key).await?;
        let by_driver = dispatched
            .and_then(|stored| serde_json::from_str::<Event>(&stored.payload).ok())
            .is_some_and(|e| e.actor == Operator::baton().name);
        if by_driver {
            return Err(refuse(&format!("its driver dispatched attempt {attempt}")));
        }
        Ok(())
    }

    /// Refuses a step's dispatch, result, requeue or quota wait from outside (any door but the
    /// driver's) while a driver runs the execution ([`Ops::driver_of`]: this server's, running
    /// or parked until a decision, or a live `execute run`): the driver dispatches and records
    /// its own steps. Through the server (REST, the relayed CLI) a result of a step the driver
    /// had not dispatched yet was taken, and the execution completed with work that never ran
    /// (found by a tester); a dispatch from outside made the driver launch a second agent
    /// beside its own, past the plan's concurrency limit.
    ///
    /// Errors: [`OpsError::Conflict`] (`lease_held`).
    async fn check_step_event_from_outside(&self, task_id: &str, kind: &EventKind) -> Result<(), OpsError> {
        let (what, step_id) = match kind {
            EventKind::StepDispatched { step_id, .. } => ("dispatch", step_id),
            EventKind::StepRecorded { step_id, .. } => ("result", step_id),
            EventKind::StepRequeued { step_id } => ("requeue", step_id),
            EventKind::QuotaWait { step_id, .. } => ("quota wait", step_id),
            _ => return Ok(()),
        };
        match self.driver_of(task_id).await {
            Some(driver) => Err(OpsError::Conflict {
                message: format!(
                    "execution {task_id} is driven by {driver}, which dispatches and records its own steps: a \
                     {what} for step {step_id} is not taken from outside"
                ),
                reason: "lease_held",
            }),
            None => Ok(()),
        }
    }

    /// Records `event` on `task_id` for `op` (the event's actor becomes `op.name`): checks the
    /// role, the separate-reviewer rule for approvals and whether the decision is already
    /// taken; takes the record lock and the lease (a cancel first stops the driver that holds
    /// it, with its agents); journals; signs a decision; cancels the spec with its execution;
    /// wakes this process's driver.
    ///
    /// Errors: every [`OpsError`]; on an error nothing was journaled.
    pub async fn record(&self, task_id: &str, event: Event, op: &Operator) -> Result<Decided, OpsError> {
        self.record_as(task_id, event, op, false).await
    }

    /// [`Ops::record`]; with `budget_decision`, the event is a decision on the execution's
    /// ceiling ([`Ops::budget`]), taken only while it is parked there (`budget_check`, under
    /// the lease).
    async fn record_as(
        &self,
        task_id: &str,
        mut event: Event,
        op: &Operator,
        budget_decision: bool,
    ) -> Result<Decided, OpsError> {
        event.actor = match op.door {
            Door::Link if !op.name.ends_with(LINK_ACTOR_SUFFIX) => format!("{}{LINK_ACTOR_SUFFIX}", op.name),
            _ => op.name.clone(),
        };
        if self.execs.store().summary(task_id).await?.is_none() {
            return Err(no_such(task_id));
        }
        Self::authorize(op, &event.kind)?;
        check_operator_values(&event.kind)?;
        if op.door != Door::Driver {
            self.check_step_event_from_outside(task_id, &event.kind).await?;
            match &event.kind {
                EventKind::QuotaWait { step_id, .. } => {
                    self.check_attempt_from_outside(task_id, step_id, "quota wait", true).await?;
                }
                EventKind::StepRecorded { step_id, .. } => {
                    self.check_attempt_from_outside(task_id, step_id, "result", false).await?;
                }
                EventKind::StepRequeued { step_id } => {
                    self.check_attempt_from_outside(task_id, step_id, "requeue", false).await?;
                }
                _ => {}
            }
        }
        // A result of a step never dispatched dispatches it (as attempt 1): a new dispatch,
        // which a pause holds back like any other. A result of an attempt in flight is taken
        // (its agent ran before the pause, or finished during it).
        let dispatching = match &event.kind {
            EventKind::StepDispatched { .. } => Some(None),
            EventKind::StepRecorded { step_id, .. } => Some(Some(step_id.as_str())),
            _ => None,
        };
        if let Some(recorded) = dispatching {
            if self.execs.store().is_paused(task_id).await? {
                let what = match recorded {
                    None => Some(String::new()),
                    Some(id) if self.get_shared(task_id).await?.step_status(id) == StepStatus::Pending => {
                        Some(format!("step {id} was never dispatched, and recording it would dispatch it: "))
                    }
                    Some(_) => None,
                };
                if let Some(what) = what {
                    return Err(OpsError::Conflict {
                        message: format!(
                            "execution {task_id} is paused: {what}no new dispatches until `baton execute resume`"
                        ),
                        reason: "paused",
                    });
                }
            }
        }
        let lock = self.lock(task_id);
        let _serialised = lock.lock().await;
        if matches!(event.kind, EventKind::ApprovalRecorded { .. }) {
            self.check_separate_reviewer(task_id, &event.actor).await?;
        }
        let cancel = matches!(event.kind, EventKind::Cancelled { .. });
        // Only decisions are signed: any other event skips reading itself back from the
        // journal (one statement of every `execute dispatched` and `record`, issue 14.8).
        let signed = crate::runtime::auth::decision_fields(&event.kind).is_some();
        // This process's own driver holds the lease while it runs: a cancel stops it for good;
        // any other operator event stops it for the record and starts it again after (its
        // running agents are re-adopted), as a pause and resume would.
        let running = self.pool.as_ref().is_some_and(|p| matches!(p.driver_state(task_id), Some(DriverState::Running)));
        if let Some(pool) = &self.pool {
            if cancel || running {
                pool.halt(task_id).await;
            }
        }
        if cancel {
            // Agents that finished while the execution was paused (or its driver stopped):
            // their work and what it cost are journaled before the execution ends.
            let harvested = crate::runtime::driver::harvest_finished(&self.execs, task_id).await?;
            if harvested > 0 {
                tracing::info!(task.id = %task_id, "recorded {harvested} finished attempts before cancelling");
            }
        }
        let done = self
            .execs
            .record_once_checked(task_id, event, |state, event| {
                standing_check(state, event)?;
                if budget_decision {
                    budget_check(state, event)?;
                }
                Ok(())
            })
            .await;
        if running && !cancel {
            self.drive(task_id).await?;
        }
        let done = done.map_err(|e| match e.downcast::<OpsError>() {
            Ok(refused) => refused,
            Err(e) => OpsError::from(e),
        })?;
        let recorded = !done.applied.duplicate;
        if recorded {
            if let Some(pool) = &self.pool {
                if !cancel {
                    pool.wake(task_id);
                }
            }
            if signed {
                self.sign(task_id, &done.applied.key).await?;
            }
            if cancel {
                self.cancel_spec(task_id, &done.state).await?;
                // A pause holds back dispatches of a live execution; a cancelled one has none
                // to hold, and it read "paused" for ever on the page, the card and the API
                // (found by a tester).
                self.execs.store().set_paused(task_id, false).await?;
            }
        }
        if done.stopped_attempts > 0 {
            tracing::info!(task.id = %task_id, "stopped {} running agent attempts", done.stopped_attempts);
        }
        let next_action = self.held(task_id, engine::next_action(&done.state)).await?;
        Ok(Decided {
            state: done.state,
            recorded,
            idempotency_key: done.applied.key,
            next_action,
            stopped_attempts: done.stopped_attempts,
            requeued: Vec::new(),
        })
    }

    async fn drive(&self, task_id: &str) -> Result<(), OpsError> {
        if let Some(pool) = &self.pool {
            let project = crate::runtime::specs::project_of(&self.execs, task_id).await?;
            pool.drive(task_id, project.as_deref());
        }
        Ok(())
    }

    /// Signs the decision journaled under `key` (who and when as journaled); other events
    /// are not signed.
    async fn sign(&self, task_id: &str, key: &str) -> Result<(), OpsError> {
        let store = self.execs.store();
        let Some(entry) = store.event_by_key(task_id, key).await? else {
            return Err(OpsError::Internal(anyhow::anyhow!("event {key} of {task_id} is not in the journal")));
        };
        let event: Event = serde_json::from_str(&entry.payload).map_err(|e| OpsError::Internal(e.into()))?;
        let Some((phase_id, decision, comment)) = crate::runtime::auth::decision_fields(&event.kind) else {
            return Ok(());
        };
        let d = crate::runtime::auth::Decision {
            task_id,
            phase_id,
            decision: &decision,
            comment: &comment,
            who: &event.actor,
            at: &entry.at,
        };
        store.put_decision_signature(task_id, entry.seq, &self.key.sign_decision(&d)).await?;
        Ok(())
    }

    /// A cancelled execution's spec is cancelled with it, so the spec, its board card and
    /// the execution say the same.
    async fn cancel_spec(&self, task_id: &str, state: &ExecutionState) -> Result<(), OpsError> {
        if state.status != ExecutionStatus::Cancelled {
            return Ok(());
        }
        let reason = state.failure.clone().unwrap_or_else(|| "execution cancelled".into());
        crate::runtime::specs::execution_cancelled(&self.execs, task_id, &reason)
            .await
            .map_err(|e| OpsError::Internal(anyhow::anyhow!("cancelling the spec of {task_id}: {e}")))?;
        Ok(())
    }

    /// Records an approval decision on `phase_id`.
    ///
    /// Errors: as [`Ops::record`].
    pub async fn approve(
        &self,
        task_id: &str,
        phase_id: i64,
        result: ApprovalDecision,
        feedback: String,
        key: Option<String>,
        op: &Operator,
    ) -> Result<Decided, OpsError> {
        let kind = EventKind::ApprovalRecorded { phase_id, result, feedback };
        self.record(task_id, keyed(kind, key), op).await
    }

    /// Starts an execution of `plan` (`execute start`): the one place that decides who may.
    /// Starting is a lead's, as firing a spec is (docs/src/serving.md, roles).
    ///
    /// Errors: a role below lead ([`OpsError::Forbidden`]); what
    /// [`Executions::create`] refuses (a plan the engine does not start, a task id taken).
    pub async fn start(
        &self,
        plan: crate::model::plan::MachinePlan,
        op: &Operator,
    ) -> Result<ExecutionState, OpsError> {
        Self::may_start(op)?;
        Ok(self.execs.create(plan).await?)
    }

    /// Whether `op` may start an execution: the rule of [`Ops::start`], asked on its own by
    /// `execute run --plan`, whose driver creates the execution itself.
    ///
    /// Errors: a role below lead ([`OpsError::Forbidden`]).
    pub fn may_start(op: &Operator) -> Result<(), OpsError> {
        if op.role < Role::Lead {
            return Err(OpsError::Forbidden(format!(
                "{} is a {}; starting an execution needs the lead role",
                op.name,
                op.role.as_str()
            )));
        }
        Ok(())
    }

    /// Pauses (no new dispatches; this process's driver stops; running agents finish and
    /// their results are recorded at resume) or resumes an execution; idempotent.
    ///
    /// Errors: unknown execution, a final one ([`OpsError::Conflict`]), a role below lead.
    pub async fn set_paused(&self, task_id: &str, paused: bool, op: &Operator) -> Result<PauseState, OpsError> {
        if op.role < Role::Lead {
            return Err(OpsError::Forbidden(format!(
                "{} is a {}; pausing and resuming need the lead role",
                op.name,
                op.role.as_str()
            )));
        }
        let state = self.get(task_id).await?;
        if state.status.is_final() {
            return Err(OpsError::Conflict {
                message: format!("execution {task_id} is {}", state.status),
                reason: "final",
            });
        }
        let changed = self.execs.store().set_paused(task_id, paused).await?;
        if paused {
            if let Some(pool) = &self.pool {
                pool.halt(task_id).await;
            }
        } else if crate::runtime::runs::meta_path(self.execs.data(), task_id).exists() {
            self.drive(task_id).await?;
        }
        Ok(PauseState { task_id: task_id.to_string(), paused, changed })
    }

    /// `execute resume`: lifts a pause, and for an execution an external orchestrator drives
    /// offers again every step that was dispatched when the orchestrator stopped (its attempt
    /// is lost); a due CHECKPOINT is acknowledged (seed-spec §2.17 (b): resume is what the
    /// checkpoint's handoff names). An execution a driver (`execute run`, `baton serve`) drives
    /// recovers its attempts itself: [`Resumed::recovery`] says who.
    ///
    /// Errors: as [`Ops::record`]; [`OpsError::Conflict`] for a final execution (`final`), and
    /// when another process holds the lease of an execution that no driver runs and that was
    /// not paused.
    pub async fn resume(&self, task_id: &str, op: &Operator) -> Result<Resumed, OpsError> {
        if op.role < Role::Lead {
            return Err(OpsError::Forbidden(format!(
                "{} is a {}; resuming needs the lead role",
                op.name,
                op.role.as_str()
            )));
        }
        let driven = crate::runtime::runs::meta_path(self.execs.data(), task_id).exists();
        let lock = self.lock(task_id);
        let _serialised = lock.lock().await;
        // The pause is a setting, not a journal event: lifting it needs no lease. A driver that
        // holds the lease (an `execute run` waiting the pause out, a server's driver that saw it
        // lifted) then goes on by itself, and that is the whole resume: a pause lifted and then
        // "driven by another process" (exit 2) had said the resume failed (found by a tester).
        let before = self.get(task_id).await?;
        // As a pause of one is, and as the API's resume answers: a final execution has nothing
        // to resume (the CLI's had printed its COMPLETE or FAILED and exited 0 or 4 while its
        // pause exited 2, found by a tester).
        if before.status.is_final() {
            return Err(OpsError::Conflict {
                message: format!("execution {task_id} is {}: there is nothing to resume", before.status),
                reason: "final",
            });
        }
        let unpaused = self.execs.store().is_paused(task_id).await?;
        if unpaused {
            self.execs.store().set_paused(task_id, false).await?;
        }
        // A driver that runs it (this server's, or another process's holding the lease) goes
        // on: there is nothing else to resume (a relayed resume of a running server-driven
        // execution had failed with "driven by another process", naming the server itself).
        let own_driver =
            self.pool.as_ref().is_some_and(|p| matches!(p.driver_state(task_id), Some(DriverState::Running)));
        let lease = if own_driver {
            None
        } else {
            match lease::acquire_briefly(self.execs.store(), task_id).await {
                Ok(lease) => Some(lease),
                Err(_) if (driven || unpaused) && lease::driver_holds(self.execs.store(), task_id).await => None,
                Err(e) => return Err(OpsError::from(e)),
            }
        };
        let Some(lease) = lease else {
            let next_action = self.held(task_id, engine::next_action(&before)).await?;
            let decided = Decided {
                state: std::sync::Arc::new(before),
                recorded: false,
                idempotency_key: String::new(),
                next_action,
                stopped_attempts: 0,
                requeued: Vec::new(),
            };
            let recovery = if own_driver { Recovery::ThisServer } else { Recovery::Running };
            return Ok(Resumed { decided, unpaused, recovery: Some(recovery) });
        };
        let result = async {
            let mut state = self.get(task_id).await?;
            let mut requeued = Vec::new();
            if !driven {
                let dispatched: Vec<String> = state
                    .current()
                    .map(engine::team::dispatch_ids)
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|id| state.step_status(id) == StepStatus::Dispatched)
                    .collect();
                for step_id in dispatched {
                    let event = Event::new(EventKind::StepRequeued { step_id: step_id.clone() }).by(&op.name);
                    self.execs.record(&mut state, event).await.map_err(OpsError::from)?;
                    requeued.push(step_id);
                }
            }
            let mut key = None;
            if state.checkpoint.due {
                // Its key is the engine's, one per checkpoint (`checkpoint:<task>:<n>`), the same
                // whichever door acknowledges it.
                let ack = Event::new(EventKind::CheckpointAcknowledged).by(&op.name);
                let applied = self.execs.record(&mut state, ack).await?;
                key = Some(applied.key);
            }
            Ok::<_, OpsError>((state, requeued, key))
        }
        .await;
        lease.release().await.map_err(OpsError::from)?;
        let (state, requeued, key) = result?;
        // A driver of this process starts again once the lease is free (as `set_paused` does).
        if unpaused && driven {
            self.drive(task_id).await?;
        }
        let recovery = (driven && !state.status.is_terminal()).then(|| {
            if self.pool.is_some() {
                Recovery::ThisServer
            } else {
                Recovery::Driver
            }
        });
        let next_action = self.held(task_id, engine::next_action(&state)).await?;
        let decided = Decided {
            recorded: key.is_some() || !requeued.is_empty(),
            idempotency_key: key.unwrap_or_default(),
            state: std::sync::Arc::new(state),
            next_action,
            stopped_attempts: 0,
            requeued,
        };
        Ok(Resumed { decided, unpaused, recovery })
    }

    /// What `execute next` and `GET …/next` answer: the engine's next action, except that a
    /// paused execution dispatches nothing (its DISPATCH becomes a WAIT naming the pause).
    ///
    /// Errors: [`OpsError::NotFound`]; the database.
    pub async fn next_action(&self, task_id: &str) -> Result<Action, OpsError> {
        let state = self.with_due_quota_resumed(self.get_shared(task_id).await?).await;
        self.held(task_id, engine::next_action(&state)).await
    }

    /// `state` after journaling `quota_resumed` for each quota wait whose time has come by the
    /// service's clock (issue 18.1), so an external orchestrator's loop gets the step again
    /// after the WAIT that named the time. A driver holding the execution resumes its waits
    /// itself: when the lease cannot be had at once, `state` is returned as it is.
    async fn with_due_quota_resumed(&self, state: std::sync::Arc<ExecutionState>) -> std::sync::Arc<ExecutionState> {
        if self.due_quota_waits(&state).is_empty() {
            return state;
        }
        let task_id = state.task_id.clone();
        let lock = self.lock(&task_id);
        let _serialised = lock.lock().await;
        let Ok(lease) = lease::acquire_briefly(self.execs.store(), &task_id).await else { return state };
        let resumed = async {
            let mut fresh = self.get(&task_id).await?;
            for w in self.due_quota_waits(&fresh) {
                self.execs.record(&mut fresh, Event::quota_resumed(&task_id, &w)).await?;
            }
            Ok::<_, OpsError>(std::sync::Arc::new(fresh))
        }
        .await;
        let _ = lease.release().await;
        resumed.unwrap_or(state)
    }

    /// Every dispatchable action (`execute next --all`, `GET …/next?all=true`); when none is
    /// (paused, driven by a driver, waiting for a human or a quota, done), the one
    /// [`Ops::next_action`], so the
    /// list is never empty. It was empty while paused, and a loop over it could not tell
    /// paused from waiting or done (found by a tester).
    ///
    /// Errors: as [`Ops::next_action`].
    pub async fn next_actions(&self, task_id: &str) -> Result<Vec<Action>, OpsError> {
        let state = self.with_due_quota_resumed(self.get_shared(task_id).await?).await;
        if !self.execs.store().is_paused(task_id).await? && self.driver_of(task_id).await.is_none() {
            let ready = engine::next_actions(&state);
            if !ready.is_empty() {
                return Ok(ready);
            }
        }
        Ok(vec![self.next_action(task_id).await?])
    }

    /// What [`Ops::next_action`] answers for `state`, read only: the engine's next action,
    /// held back as it is while the execution is paused; journals nothing. A quota wait that
    /// is due shows as what follows it (the step again), as `next_action` would answer after
    /// journaling its resumption. For `execute status`.
    ///
    /// Errors: the database.
    pub async fn peek_next_action(&self, state: &ExecutionState) -> Result<Action, OpsError> {
        let due = self.due_quota_waits(state);
        if due.is_empty() {
            return self.held(&state.task_id, engine::next_action(state)).await;
        }
        // What `next_action` would answer once it resumed the due waits: the same events
        // applied to a copy, journaled nowhere.
        let mut preview = state.clone();
        let now = self.clock.now().to_rfc3339();
        for w in due {
            if engine::apply(&mut preview, &Event::quota_resumed(&state.task_id, &w), &now).is_err() {
                return self.held(&state.task_id, engine::next_action(state)).await;
            }
        }
        self.held(&state.task_id, engine::next_action(&preview)).await
    }

    /// `state`'s quota waits whose reset time has passed on the service's clock (a wait whose
    /// time does not parse counts as due: nothing else would ever end it).
    fn due_quota_waits(&self, state: &ExecutionState) -> Vec<crate::model::state::QuotaWait> {
        let now = self.clock.now();
        state.quota_waits.iter().filter(|w| crate::runtime::agent::quota::wait_is_due(w, now)).cloned().collect()
    }

    /// `action`, held back as a WAIT when it is not the caller's to carry out: a pause means no
    /// new dispatches through any door (the pool's driver stops; an external orchestrator is
    /// told to wait), and the DISPATCH, GATE or CHECKPOINT of an execution a driver runs is
    /// that driver's (an `execute approve` of a server-driven execution had answered "Mark
    /// dispatched with: baton execute dispatched …", found by a tester).
    async fn held(&self, task_id: &str, action: Action) -> Result<Action, OpsError> {
        // What a driver does by itself: run steps and gates, pass checkpoints.
        if !matches!(action, Action::Dispatch(_) | Action::Gate(_) | Action::Checkpoint(_)) {
            return Ok(action);
        }
        if matches!(action, Action::Dispatch(_)) && self.execs.store().is_paused(task_id).await? {
            let why = match self.execs.store().park_reason(task_id).await? {
                Some(reason) => format!("parked: {reason}"),
                None => "paused by an operator".to_string(),
            };
            return Ok(Action::Wait {
                message: format!("execution {task_id} is {why}: no new dispatches until `baton execute resume`"),
                until: None,
            });
        }
        if let Some(driver) = self.driver_of(task_id).await {
            return Ok(Action::Wait {
                message: format!(
                    "execution {task_id} is driven by {driver}, which runs its steps and gates itself: follow it \
                     with `baton execute status`"
                ),
                until: None,
            });
        }
        Ok(action)
    }

    /// The driver running `task_id` now, in words: this server's (running, or parked until a
    /// decision), or the driver (`execute run`, another server's) whose unexpired lease holds it; `None` when no driver does (an
    /// external orchestrator's execution, or a driver that stopped).
    async fn driver_of(&self, task_id: &str) -> Option<String> {
        // Any state: a driver parked for a decision goes on once it is recorded.
        if self.pool.as_ref().is_some_and(|p| p.driver_state(task_id).is_some()) {
            return Some("this server's driver".to_string());
        }
        if !crate::runtime::runs::meta_path(self.execs.data(), task_id).exists() {
            return None;
        }
        let lease = self.execs.store().lease(task_id).await.ok().flatten()?;
        let live = parse_time(&lease.expires_at).is_some_and(|until| until > self.clock.now());
        (live && lease::is_driver(&lease.holder))
            .then(|| format!("the driver {} (pid {} on {})", lease.holder, lease.pid, lease.host))
    }

    /// The execution `task_id`.
    ///
    /// Errors: [`OpsError::NotFound`]; an unreadable journal.
    pub async fn get(&self, task_id: &str) -> Result<ExecutionState, OpsError> {
        self.execs.load(task_id).await?.ok_or_else(|| no_such(task_id))
    }

    /// [`Ops::get`] without a copy: the state this process's cache holds
    /// ([`Executions::load_shared`]).
    ///
    /// Errors: as [`Ops::get`].
    pub async fn get_shared(&self, task_id: &str) -> Result<std::sync::Arc<ExecutionState>, OpsError> {
        self.execs.load_shared(task_id).await?.ok_or_else(|| no_such(task_id))
    }
}

/// An RFC 3339 time (a forge's `created_at`, an event's `at`); `None` when it is not one.
fn parse_time(text: &str) -> Option<chrono::DateTime<chrono::FixedOffset>> {
    chrono::DateTime::parse_from_rfc3339(text.trim()).ok()
}

fn role_of(user: &UserRow) -> Role {
    Role::parse(&user.role).unwrap_or(Role::Viewer)
}

fn no_such(task_id: &str) -> OpsError {
    OpsError::NotFound(format!("no execution with task id {task_id}"))
}

/// `kind` with an explicit idempotency key when the door sent one.
pub fn keyed(kind: EventKind, key: Option<String>) -> Event {
    let mut event = Event::new(kind);
    event.idempotency_key = key;
    event
}
