//! Budget decisions (part of the operator service, see `ops`; issue 5 §1): raising the
//! ceiling of an execution parked at it, or stopping it there. One decision ends a park: the
//! "parked?" look is repeated under the lease, and a decision someone else made meanwhile is
//! [`OpsError::AlreadyDecided`] naming it; only its decider's resend is a duplicate. It never
//! parses HTTP or command lines and never prints.

use super::*;

/// A budget decision on an execution parked at its ceiling.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BudgetDecision {
    /// Raise the ceiling by this many USD.
    Raise(f64),
    /// Stop: cancel the execution at its ceiling.
    Stop,
}

/// The reason a budget stop cancels with.
pub const STOPPED_AT_CEILING: &str = "stopped at the budget ceiling";

impl Ops {
    /// The event of a budget decision: `raise` (by `by_usd`, in the engine's range) or `stop`
    /// (a cancel with [`STOPPED_AT_CEILING`]).
    ///
    /// Errors: an unknown decision or a missing or out-of-range amount ([`OpsError::Invalid`]).
    pub fn budget_decision(decision: &str, by_usd: Option<f64>) -> Result<BudgetDecision, OpsError> {
        use crate::engine::budget::{MAX_CEILING_USD, MIN_CEILING_USD};
        let invalid = |message: String| OpsError::Invalid { field: "by_usd".into(), message };
        match decision {
            "raise" => match by_usd {
                Some(v) if v.is_finite() && (MIN_CEILING_USD..=MAX_CEILING_USD).contains(&v) => {
                    Ok(BudgetDecision::Raise(v))
                }
                Some(v) => Err(invalid(format!("{v}: {}", crate::runtime::spend::USD_EXPECTED))),
                None => Err(invalid("a raise needs the amount in USD".into())),
            },
            "stop" if by_usd.is_some() => Err(invalid("only a raise takes an amount".into())),
            "stop" => Ok(BudgetDecision::Stop),
            other => Err(OpsError::Invalid {
                field: "decision".into(),
                message: format!("{other:?} is not a budget decision (raise or stop)"),
            }),
        }
    }

    /// Decides on an execution parked at its USD ceiling: raise it, or stop (cancel) it.
    ///
    /// Errors: the execution is not parked at its ceiling ([`OpsError::Conflict`], saying how
    /// to cancel it instead); as [`Ops::record`].
    pub async fn budget(
        &self,
        task_id: &str,
        decision: BudgetDecision,
        key: Option<String>,
        op: &Operator,
    ) -> Result<Decided, OpsError> {
        let state = self.get(task_id).await?;
        if state.status != ExecutionStatus::BudgetExceeded {
            // Decided already: someone else's decision stands; the decider's own resend goes
            // on to the record, which answers the first outcome (or names it, if it differs).
            match self.budget_standing(&state).await? {
                Some(standing) if standing.by != op.name => return Err(budget_decided(task_id, standing)),
                Some(_) => {}
                None => return Err(not_parked(&state, decision)),
            }
        }
        let kind = match decision {
            BudgetDecision::Raise(by_usd) => EventKind::BudgetRaised { by_usd },
            BudgetDecision::Stop => EventKind::Cancelled { reason: STOPPED_AT_CEILING.into() },
        };
        let decided = match self.record_as(task_id, keyed(kind, key), op, true).await {
            Err(OpsError::Conflict { reason: BUDGET_DECIDED_MEANWHILE, .. }) => {
                let state = self.get(task_id).await?;
                return Err(match self.budget_standing(&state).await? {
                    Some(standing) => budget_decided(task_id, standing),
                    None => not_parked(&state, decision),
                });
            }
            other => other?,
        };
        if !decided.recorded {
            // A stop's derived key has no decider: another person's stop is a "duplicate" of
            // the first (found by a tester: ten people stopping at once all got 200). Only the
            // decider's own resend is one.
            if let Some(standing) = self.budget_standing(&decided.state).await? {
                if standing.by != op.name {
                    return Err(budget_decided(task_id, standing));
                }
            }
        }
        Ok(decided)
    }

    /// The budget decision that stands on an execution no longer parked at its ceiling: its
    /// stop (who and when, from the journal), or while it still runs its latest raise; `None`
    /// when neither applies (never parked, cancelled otherwise, complete or failed since).
    async fn budget_standing(&self, state: &ExecutionState) -> Result<Option<Standing>, OpsError> {
        if state.status == ExecutionStatus::Cancelled {
            let stop = Event::new(EventKind::Cancelled { reason: STOPPED_AT_CEILING.into() });
            let key = engine::idempotency_key(state, &stop);
            let Some(stored) = self.execs.store().event_by_key(&state.task_id, &key).await? else {
                return Ok(None);
            };
            let by = serde_json::from_str::<Event>(&stored.payload).map(|e| e.actor).unwrap_or_default();
            return Ok(Some(Standing { by, at: stored.at, what: "stopped".into() }));
        }
        if state.status.is_terminal() {
            // Ended otherwise since (complete, failed): no budget decision is pending.
            return Ok(None);
        }
        Ok(state.budget.raises.last().map(|raise| Standing {
            by: raise.actor.clone(),
            at: raise.at.clone(),
            what: format!("raised by ${}", raise.by_usd),
        }))
    }
}

/// [`Ops::budget`]'s refusal, under the lease, of a decision on a ceiling someone decided on
/// meanwhile; answered as [`OpsError::AlreadyDecided`] once the standing decision is read.
const BUDGET_DECIDED_MEANWHILE: &str = "budget_decided";

/// A budget decision is taken only while the execution is parked at its ceiling, checked on
/// the state loaded under the lease: between `Ops::budget`'s first look and its record,
/// someone else's raise would otherwise add to the first. A resend (its key applied) passes:
/// the engine answers the first outcome.
pub(super) fn budget_check(state: &ExecutionState, event: &Event) -> Result<(), OpsError> {
    if state.status == ExecutionStatus::BudgetExceeded
        || state.applied_keys.contains_key(&engine::idempotency_key(state, event))
    {
        return Ok(());
    }
    Err(OpsError::Conflict {
        message: format!("the budget of {} was decided meanwhile", state.task_id),
        reason: BUDGET_DECIDED_MEANWHILE,
    })
}

/// The refusal of a budget decision on `task_id` naming the one that stands.
fn budget_decided(task_id: &str, standing: Standing) -> OpsError {
    OpsError::AlreadyDecided {
        message: format!(
            "the budget ceiling of {task_id} was already decided: {} by {} at {}",
            standing.what, standing.by, standing.at
        ),
        standing,
    }
}

/// The refusal of a budget decision on an execution that is not parked at its ceiling.
fn not_parked(state: &ExecutionState, decision: BudgetDecision) -> OpsError {
    let what = match decision {
        BudgetDecision::Raise(_) => "raise",
        BudgetDecision::Stop => "stop",
    };
    let hint = if state.status.is_terminal() { "" } else { " (cancel it to stop it)" };
    OpsError::Conflict {
        message: format!(
            "execution {} is {}, not parked at its budget ceiling: nothing to {what}{hint}",
            state.task_id, state.status
        ),
        reason: "wrong_status",
    }
}
