//! Quota waits (issue 18.1): an attempt that stopped on its account's usage limit is no failed
//! attempt. The account (the agent's profile) is marked exhausted in the store until the reset
//! the agent gave, or for a backoff (a minute, doubling to an hour) when it gave none; the
//! step waits (`quota_wait` in the journal) and is resumed (`quota_resumed`) when that time
//! comes, or at once when its agent names a `fallback` agent whose account is free — the
//! fallback is then the agent its `step_dispatched` names. A step about to be dispatched to an
//! exhausted account waits the same way without launching. Everything is in the journal and
//! the store, so a restart mid-wait still waits and then resumes. It never decides anything
//! else about an attempt: `harvest` asks it only after a run that failed.

use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};

use crate::model::action::DispatchAction;
use crate::model::event::{Event, EventKind};
use crate::model::state::ExecutionState;
use crate::runtime::agent::profile::AgentProfile;
use crate::runtime::agent::quota::{self, QuotaHit};

use super::agents::profile_of;
use super::Driver;

/// The account behind a profile: its name (`claude`, `codex`, `gemini`, `command`, `demo`).
pub(super) fn account_of(profile: &AgentProfile) -> &'static str {
    match profile {
        AgentProfile::Claude => "claude",
        AgentProfile::Codex => "codex",
        AgentProfile::Gemini => "gemini",
        AgentProfile::Command { .. } => "command",
        AgentProfile::Demo => "demo",
    }
}

/// `t` as the journal writes it: RFC 3339, UTC, whole seconds.
fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, false)
}

/// Where a dispatch goes.
pub(super) enum Route {
    /// To this agent (the step's own, or its fallback).
    Agent(String),
    /// Nowhere: every account it may use is exhausted; it waits until then.
    Wait {
        /// The exhausted account of the step's own agent.
        account: String,
        /// The earliest time one of them is back.
        until: DateTime<Utc>,
        /// What its agent said when it stopped.
        reason: String,
    },
}

impl Driver {
    /// The account of agent `agent` (its profile's name), `None` when it cannot be resolved
    /// (the dispatch then reports the misconfiguration itself).
    fn account(&self, agent: &str) -> Option<&'static str> {
        profile_of(&self.config, &self.default_profile, agent).ok().map(|p| account_of(&p))
    }

    /// Until when `account` is exhausted, with what its agent said, if it is now.
    async fn exhausted(&self, account: &str) -> anyhow::Result<Option<(DateTime<Utc>, String)>> {
        let now = self.clock.now();
        Ok(self.execs.store().quota_account(account).await?.filter(|a| a.until > now).map(|a| (a.until, a.reason)))
    }

    /// The fallback of `agent` (`[agents.<agent>] fallback`) when its account is free now.
    async fn free_fallback(&self, agent: &str) -> anyhow::Result<Option<String>> {
        let Some(fallback) = self.config.agents.get(agent).and_then(|c| c.fallback.clone()) else {
            return Ok(None);
        };
        let Some(account) = self.account(&fallback) else { return Ok(None) };
        Ok(self.exhausted(account).await?.is_none().then_some(fallback))
    }

    /// Where dispatch `d` goes: its own agent while its account is free, else its fallback
    /// while the fallback's is, else it waits.
    pub(super) async fn route(&self, d: &DispatchAction) -> anyhow::Result<Route> {
        if !d.command.is_empty() {
            return Ok(Route::Agent(d.agent_name.clone()));
        }
        let Some(account) = self.account(&d.agent_name) else { return Ok(Route::Agent(d.agent_name.clone())) };
        let Some((until, reason)) = self.exhausted(account).await? else {
            return Ok(Route::Agent(d.agent_name.clone()));
        };
        if let Some(fallback) = self.free_fallback(&d.agent_name).await? {
            return Ok(Route::Agent(fallback));
        }
        // Both exhausted: back when the first of them is.
        let fallback_until = match self.config.agents.get(&d.agent_name).and_then(|c| c.fallback.as_deref()) {
            Some(f) => match self.account(f) {
                Some(a) => self.exhausted(a).await?.map(|(u, _)| u),
                None => None,
            },
            None => None,
        };
        let until = fallback_until.map_or(until, |f| f.min(until));
        Ok(Route::Wait { account: account.to_string(), until, reason })
    }

    /// Journals that step `d` waits for its account without launching (see [`Route::Wait`]).
    pub(super) async fn wait_before_dispatch(
        &self,
        state: &mut ExecutionState,
        d: &DispatchAction,
        account: String,
        until: DateTime<Utc>,
        reason: String,
    ) -> anyhow::Result<()> {
        let until = rfc3339(until);
        let key = format!("quota-wait:{}:{}:{until}", state.task_id, d.step_id);
        let kind = EventKind::QuotaWait {
            step_id: d.step_id.clone(),
            agent_name: d.agent_name.clone(),
            account,
            until,
            reason,
            cost_usd: 0.0,
            tokens: 0,
        };
        self.record(state, kind, key).await?;
        if let Some(w) = state.quota_waits.iter().find(|w| w.step_id == d.step_id) {
            errln!("{}: {}; it resumes by itself then", d.step_id, w.note());
        }
        Ok(())
    }

    /// An attempt stopped on its account's limit: marks the account exhausted (until the reset
    /// it gave, else a backoff doubling from the last one) and journals the wait with what the
    /// attempt cost. The step is pending again; no failed attempt is recorded.
    #[expect(clippy::too_many_arguments, reason = "the attempt's measures, as harvest has them")]
    pub(super) async fn record_quota_stop(
        &self,
        state: &mut ExecutionState,
        step_id: &str,
        attempt: u32,
        agent_name: &str,
        profile: &AgentProfile,
        hit: QuotaHit,
        cost_usd: f64,
        tokens: u64,
    ) -> anyhow::Result<()> {
        let account = account_of(profile);
        let now = self.clock.now();
        let (until, backoff_secs) = match hit.resets_at {
            // A reset already past (a clock skew, a stale event) still waits a moment.
            Some(at) => (at.max(now + chrono::Duration::seconds(1)), 0),
            None => {
                let previous = self
                    .execs
                    .store()
                    .quota_account(account)
                    .await?
                    .and_then(|a| u64::try_from(a.backoff_secs).ok())
                    .filter(|s| *s > 0)
                    .map(Duration::from_secs);
                let wait = quota::backoff(previous);
                (now + chrono::Duration::from_std(wait)?, i64::try_from(wait.as_secs())?)
            }
        };
        self.execs.store().set_quota_account(account, until, backoff_secs, &hit.message).await?;
        let kind = EventKind::QuotaWait {
            step_id: step_id.to_string(),
            agent_name: agent_name.to_string(),
            account: account.to_string(),
            until: rfc3339(until),
            reason: hit.message.clone(),
            cost_usd,
            tokens,
        };
        let key = format!("quota:{}:{step_id}:{attempt}", state.task_id);
        self.record(state, kind, key).await?;
        let note = state.quota_waits.iter().find(|w| w.step_id == step_id).map(|w| w.note()).unwrap_or_default();
        let how =
            if backoff_secs > 0 { format!(" (no reset given: backing off {backoff_secs} s)") } else { String::new() };
        errln!("{step_id}: {agent_name} stopped on its {account} quota: {}; not a failure, {note}{how}", hit.message);
        Ok(())
    }

    /// Resumes every quota wait whose time has come, or whose agent's fallback is free now;
    /// returns how many it resumed.
    pub(super) async fn resume_due_waits(&self, state: &mut ExecutionState) -> anyhow::Result<usize> {
        let now = self.clock.now();
        let mut resumed = 0;
        for w in state.quota_waits.clone() {
            let due = quota::wait_is_due(&w, now);
            let fallback = if due { None } else { self.free_fallback(&w.agent_name).await? };
            if !due && fallback.is_none() {
                continue;
            }
            let event = Event::quota_resumed(&state.task_id, &w);
            self.journal(state, event).await?;
            match fallback {
                Some(f) => errln!("{}: {} quota exhausted; running it on the fallback agent {f}", w.step_id, w.account),
                None => errln!("{}: the {} quota wait is over; dispatching it again", w.step_id, w.account),
            }
            resumed += 1;
        }
        Ok(resumed)
    }

    /// Forgets the exhaustion of the account behind `profile` after one of its attempts
    /// succeeded (the next stop's backoff starts from a minute again).
    pub(super) async fn quota_recovered(&self, profile: &AgentProfile) -> anyhow::Result<()> {
        let account = account_of(profile);
        let known = self.execs.store().quota_account(account).await?;
        if known.is_some_and(|a| a.until <= self.clock.now()) {
            self.execs.store().clear_quota_account(account).await?;
        }
        Ok(())
    }
}
