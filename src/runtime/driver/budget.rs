//! The budget as the driver keeps it: the ceiling and the per-step forecast journaled before
//! anything runs, and the watch that sums what the running attempts stream and stops them,
//! newest first, once spend + that sum crosses the ceiling (marking each run dir so the harvest
//! records `budget_stopped`). The rules themselves are the engine's (`engine::budget`).

use std::time::Duration;

use crate::model::event::EventKind;
use crate::model::state::ExecutionState;
use crate::runtime::agent::shim;
use crate::runtime::write_atomic;

use super::Driver;

/// Marker a driver writes in an attempt's run dir before stopping it at the budget ceiling:
/// the harvest (even after a crash) records the attempt as `budget_stopped`, not failed.
pub(super) const BUDGET_STOP_FILE: &str = "budget-stopped";

/// How often a driver reads the usage its running agents stream, when there is a ceiling.
pub(super) const BUDGET_POLL: Duration = Duration::from_millis(200);

impl Driver {
    /// Journals what the budget needs before anything runs: the forecast per step (once, from
    /// the spend ledger's history and the price table, with each agent's model as it will run)
    /// and the ceiling (`budget` when it differs from the execution's; else, for an execution
    /// that never had one, `BATON_RUN_BUDGET_USD`).
    pub(super) async fn settle_budget(
        &mut self,
        mut state: ExecutionState,
        budget: Option<(f64, String)>,
        env_ceiling: Option<(f64, &'static str)>,
    ) -> anyhow::Result<ExecutionState> {
        if state.status.is_terminal() {
            return Ok(state);
        }
        // The ceiling first: it is kept even when forecasting fails.
        let wanted = match (budget, state.budget.ceiling_usd) {
            (Some(b), None) => Some(b),
            (Some((flag, _)), Some(current)) => {
                if (flag - current).abs() > 1e-9 {
                    errln!(
                        "note: keeping execution {}'s ceiling of ${current:.2} ({}); --max-spend-usd applies to a new \
                         execution, `baton execute budget --raise` changes this one",
                        state.task_id,
                        state.budget.source
                    );
                }
                None
            }
            (None, None) if state.budget.changes == 0 => env_ceiling.map(|(v, name)| (v, name.to_string())),
            (None, _) => None,
        };
        if let Some((ceiling, source)) = wanted {
            errln!("budget ceiling: ${ceiling:.2} ({source})");
            let kind = EventKind::BudgetSet { ceiling_usd: Some(ceiling), source };
            let key = format!("budget-set:{}:{}", state.task_id, state.budget.changes + 1);
            self.record(&mut state, kind, key).await?;
        }
        if !state.budget.forecast_recorded && state.plan.steps().any(|(_, s)| !s.is_automation()) {
            let mut plan = state.plan.clone();
            for phase in &mut plan.phases {
                for step in phase.steps.iter_mut().filter(|s| !s.is_automation()) {
                    if let Ok((_, parts, _)) = self.resolve_agent(&step.agent_name, &step.model) {
                        if let Some(m) = parts.model {
                            step.model = m;
                        }
                    }
                    self.resolve_member_models(&mut step.team);
                }
            }
            let history = crate::runtime::spend::history(self.execs.store()).await?;
            let forecast = crate::pmo::enrich::forecast(&plan, &history, &self.prices);
            let default_usd = forecast.steps.iter().map(|s| s.mid_usd).fold(0.0, f64::max);
            let default_usd = if default_usd > 0.0 { default_usd } else { self.prices.default_step_usd("sonnet") };
            let default_usd = default_usd.min(crate::engine::budget::MAX_CEILING_USD);
            errln!(
                "forecast: ${:.2} (${:.2}–${:.2}); {}",
                forecast.mid_usd,
                forecast.low_usd,
                forecast.high_usd,
                forecast.rule
            );
            let kind = EventKind::Forecasted { steps: forecast.by_step(), default_usd };
            let key = format!("forecast:{}", state.task_id);
            self.record(&mut state, kind, key).await?;
        }
        Ok(state)
    }

    /// Each team member's model as it will run (`baton.toml`, the roster, else the plan's),
    /// sub-teams included: the forecast prices members at what they use.
    pub(super) fn resolve_member_models(&self, members: &mut [crate::model::plan::TeamMember]) {
        for m in members {
            if let Ok((_, parts, _)) = self.resolve_agent(&m.agent_name, &m.model) {
                if let Some(model) = parts.model {
                    m.model = model;
                }
            }
            self.resolve_member_models(&mut m.sub_team);
        }
    }

    /// Reads what every running attempt has streamed (tokens × its model's price) and, once
    /// spend + their sum crosses the ceiling, stops them all, newest first
    /// ([`engine::budget::attempts_to_stop`](crate::engine::budget::attempts_to_stop)). The
    /// marker file makes each one's harvest record `budget_stopped`; an attempt already stopped
    /// still counts (its usage is spent) until it is harvested.
    pub(super) fn watch_budget(&mut self, state: &ExecutionState) {
        let Some(ceiling) = state.budget.ceiling_usd else { return };
        let mut streamed = Vec::with_capacity(self.live.len());
        for live in &mut self.live {
            // A read that fails keeps what was read before.
            let _ = live.usage.read_new(&live.run_dir.join(shim::STDOUT_FILE));
            let (tokens, reported) = live.usage.totals();
            let priced = reported.filter(|m| self.prices.get(m).is_some()).unwrap_or_else(|| live.model.clone());
            let used = self.prices.cost_of(&priced, &tokens).unwrap_or_else(|| {
                if !live.unpriced && tokens.total() > 0 {
                    live.unpriced = true;
                    tracing::warn!(
                        task.id = %state.task_id,
                        step.id = %live.step_id,
                        "{}: model {priced} has no row in the price table ([prices.{priced}] in baton.toml): \
                         its streamed usage cannot be held to the ceiling",
                        live.step_id
                    );
                }
                0.0
            });
            streamed.push(used);
        }
        let stop = crate::engine::budget::attempts_to_stop(ceiling, state.counters.spend_usd, &streamed);
        let total: f64 = streamed.iter().sum();
        let remaining = ceiling - state.counters.spend_usd;
        for i in stop {
            let live = &self.live[i];
            if live.run_dir.join(BUDGET_STOP_FILE).exists() {
                continue;
            }
            errln!(
                "{}: stopping it (${:.2} so far): the running agents' usage (${total:.2}) crossed the remaining budget \
                 (${remaining:.2} of the ${ceiling:.2} ceiling)",
                live.step_id,
                streamed[i]
            );
            let _ = write_atomic(&live.run_dir.join(BUDGET_STOP_FILE), format!("{}\n", streamed[i]).as_bytes());
            let _ = shim::kill_attempt(&live.run_dir);
        }
    }
}
