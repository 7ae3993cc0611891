//! Who carries an execution's work out, and what every door is told about it: pause and
//! resume ([`Ops::set_paused`], [`Ops::resume`]); the next action a door answers, held back
//! as a WAIT while the execution is paused or a driver runs it ([`Ops::next_action`],
//! [`Ops::next_actions`], [`Ops::peek_next_action`]); and the step events (dispatch, result,
//! requeue, quota wait) refused from outside while a driver runs the execution or an attempt
//! it launched is in flight. It dispatches and launches nothing: drivers do
//! (`runtime::driver`, the server's pool).

use super::*;

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

impl Ops {
    /// Refuses an event sent through a door (not by a driver) about the attempt in flight of a
    /// step whose attempt Baton's driver runs or launched: a `quota_wait`, a `step_recorded`,
    /// a `step_requeued` (`what` names it). The driver reports its own agents. A quota wait
    /// taken from outside made the driver dispatch the step again when the wait ended, beside
    /// the attempt still running, whose result (commit, cost) was then dropped; a requeue from
    /// outside started a second attempt beside the first, and a failed record ended the step
    /// while its agent ran on (found by testers). Refused while the step's current attempt
    /// still runs under this data directory (paused, the driver stops but its agent runs on),
    /// and whenever a driver journaled that attempt's dispatch, which the journal tells every
    /// replica (the attempt may run on another one, under its own data directory and lease).
    /// A driver running the execution is refused before ([`Ops::check_step_event_from_outside`]).
    ///
    /// Errors: [`OpsError::Conflict`] (`lease_held`); store failures.
    async fn check_attempt_from_outside(&self, task_id: &str, step_id: &str, what: &str) -> Result<(), OpsError> {
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
    /// beside its own, past the plan's concurrency limit. Without a driver, what
    /// [`Ops::check_attempt_from_outside`] refuses.
    ///
    /// Errors: [`OpsError::Conflict`] (`lease_held`); store failures.
    pub(super) async fn check_step_event_from_outside(&self, task_id: &str, kind: &EventKind) -> Result<(), OpsError> {
        let (what, step_id) = match kind {
            EventKind::StepDispatched { step_id, .. } => ("dispatch", step_id),
            EventKind::StepRecorded { step_id, .. } => ("result", step_id),
            EventKind::StepRequeued { step_id } => ("requeue", step_id),
            EventKind::QuotaWait { step_id, .. } => ("quota wait", step_id),
            _ => return Ok(()),
        };
        if let Some(driver) = self.driver_of(task_id).await {
            return Err(OpsError::Conflict {
                message: format!(
                    "execution {task_id} is driven by {driver}, which dispatches and records its own steps: a \
                     {what} for step {step_id} is not taken from outside"
                ),
                reason: "lease_held",
            });
        }
        // No driver runs it: an orchestrator dispatches, but an attempt a driver launched is
        // still that driver's.
        if matches!(kind, EventKind::StepDispatched { .. }) {
            return Ok(());
        }
        self.check_attempt_from_outside(task_id, step_id, what).await
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
                Err(_) if (driven || unpaused) && lease::driver_lease(self.execs.store(), task_id).await.is_some() => {
                    None
                }
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
    /// [`Ops::next_action`], so the list is never empty. It was empty while paused, and a
    /// loop over it could not tell paused from waiting or done (found by a tester).
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
    pub(super) async fn held(&self, task_id: &str, action: Action) -> Result<Action, OpsError> {
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
    /// decision), or the driver (`execute run`, another server's) whose live lease holds it
    /// ([`lease::driver_lease`]); `None` when no driver does (an external orchestrator's
    /// execution, or a driver that stopped).
    async fn driver_of(&self, task_id: &str) -> Option<String> {
        // Any state: a driver parked for a decision goes on once it is recorded.
        if self.pool.as_ref().is_some_and(|p| p.driver_state(task_id).is_some()) {
            return Some("this server's driver".to_string());
        }
        if !crate::runtime::runs::meta_path(self.execs.data(), task_id).exists() {
            return None;
        }
        let lease = lease::driver_lease(self.execs.store(), task_id).await?;
        Some(format!("the driver {} (pid {} on {})", lease.holder, lease.pid, lease.host))
    }
}
