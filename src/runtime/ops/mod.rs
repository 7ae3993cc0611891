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
//! `comments`, remediation rounds in `remediation`; pause, resume, the next action a door is
//! told and the step events refused while a driver runs the execution in `driving`.
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
mod driving;
mod links;
mod remediation;

use budget::budget_check;
pub use budget::{BudgetDecision, STOPPED_AT_CEILING};
use checks::{already_decided, check_operator_values, standing_check};
pub use comments::CommentDecision;
pub use driving::{PauseState, Recovery, Resumed};
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
