//! Spend records of one execution: the cost forecast per step, the USD ceiling, the
//! reservations of in-flight attempts and the pending budget decision (issue 5 §1).
//!
//! The original kept three unrelated "budget" mechanisms, none of which stopped agent dispatch
//! in USD (seed-spec §3.7, §5 #14). Here one ceiling in USD is checked by the engine before
//! every dispatch, with the step's forecast reserved so parallel dispatches cannot overshoot
//! together. This module is plain data: the rules live in `engine::budget`. It never does IO.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// An attempt's tokens by kind, each priced at its own rate (`pmo::pricing`): agent CLIs
/// report cache writes and cache reads beside plain input, and those cost 1.25× and 0.1× of it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TokenCounts {
    /// Input tokens read neither from nor into the prompt cache (claude `input_tokens`, codex
    /// `input_tokens − cached_input_tokens`, gemini `prompt − cached + tool`).
    #[serde(default)]
    pub input: u64,
    /// Input tokens written to the prompt cache (claude `cache_creation_input_tokens`).
    #[serde(default)]
    pub cache_write: u64,
    /// Input tokens read from the prompt cache (claude `cache_read_input_tokens`, codex
    /// `cached_input_tokens`, gemini `cached`).
    #[serde(default)]
    pub cache_read: u64,
    /// Output tokens, thinking included (gemini `candidates + thoughts`): billed as output.
    #[serde(default)]
    pub output: u64,
}

impl TokenCounts {
    /// No token of any kind.
    pub fn is_zero(&self) -> bool {
        self.total() == 0
    }

    /// Every token of every kind.
    pub fn total(&self) -> u64 {
        self.input.saturating_add(self.cache_write).saturating_add(self.cache_read).saturating_add(self.output)
    }

    /// Cache writes and reads together, as the board shows them.
    pub fn cache(&self) -> u64 {
        self.cache_write.saturating_add(self.cache_read)
    }

    /// The kind-by-kind sum of `self` and `other` (saturating).
    pub fn plus(&self, other: &TokenCounts) -> TokenCounts {
        TokenCounts {
            input: self.input.saturating_add(other.input),
            cache_write: self.cache_write.saturating_add(other.cache_write),
            cache_read: self.cache_read.saturating_add(other.cache_read),
            output: self.output.saturating_add(other.output),
        }
    }
}

/// The cost forecast of one step, USD (low ≤ mid ≤ high).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct StepForecast {
    /// Optimistic cost, USD.
    pub low_usd: f64,
    /// Expected cost, USD: what a dispatch reserves.
    pub mid_usd: f64,
    /// Pessimistic cost, USD.
    pub high_usd: f64,
    /// Recorded attempts of the same agent and model the forecast is the median of; 0 when it
    /// is the model's stated default.
    #[serde(default)]
    pub samples: u32,
    /// How it was made, for people: `median of 7 recorded attempts of architect on opus`, …
    #[serde(default)]
    pub basis: String,
}

/// Why dispatch stopped at the ceiling: shown with the decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BudgetShortfall {
    /// The step that could not run (or was stopped while running).
    pub step_id: String,
    /// USD the ceiling lacks for it: spend + its forecast − ceiling (≥ 0).
    pub needed_usd: f64,
    /// What happened, for people.
    pub reason: String,
}

/// One raise of the ceiling.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BudgetRaise {
    /// By how much, USD.
    pub by_usd: f64,
    /// Who raised it.
    #[serde(default)]
    pub actor: String,
    /// When (RFC 3339).
    pub at: String,
}

/// The spend side of an execution, changed only by `engine::apply`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Budget {
    /// The ceiling, USD; `None` = no ceiling (dispatch is never held back).
    #[serde(default)]
    pub ceiling_usd: Option<f64>,
    /// Where the ceiling came from: `spec`, `project`, `BATON_RUN_BUDGET_USD`,
    /// `--max-spend-usd`, … (raises are listed in `raises`).
    #[serde(default)]
    pub source: String,
    /// Forecast per step id, recorded when the execution started.
    #[serde(default, deserialize_with = "crate::model::sorted_map::decode")]
    pub forecasts: BTreeMap<String, StepForecast>,
    /// Forecast of a step that has none (added by an amendment), USD.
    #[serde(default)]
    pub default_forecast_usd: f64,
    /// USD reserved by each in-flight attempt (step id → its forecast's mid), released when its
    /// result is recorded.
    #[serde(default)]
    pub reserved: BTreeMap<String, f64>,
    /// Dispatch is held back: set when a ready step's forecast does not fit or an attempt was
    /// stopped at the ceiling; the execution parks in `budget_exceeded` once nothing is in flight.
    #[serde(default)]
    pub shortfall: Option<BudgetShortfall>,
    /// Every raise, in order.
    #[serde(default)]
    pub raises: Vec<BudgetRaise>,
    /// Ceiling changes so far (sets and raises): the round of the next one's idempotency key.
    #[serde(default)]
    pub changes: u32,
    /// Token-tier warnings (the plan's `budget_tier` caps are advice, not a stop) and
    /// overshoots (a result that brought spend above the ceiling).
    #[serde(default)]
    pub warnings: Vec<String>,
    /// The forecast was recorded (it is recorded once, when the execution starts).
    #[serde(default)]
    pub forecast_recorded: bool,
    /// What each recorded attempt of a step cost, USD (step or member id → one entry per
    /// attempt, attempt 1 first), in executions started before each step result kept its own
    /// (`step_results.<id>.attempts_usd`); empty in newer ones. An entry is still read by a
    /// retry's forecast, and moves to its step's result at the step's next record.
    // Moved to the results so that a snapshot has no per-step map here to decode in every
    // CLI process (issue 14.8).
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "crate::model::sorted_map::decode"
    )]
    pub attempts_usd: BTreeMap<String, Vec<f64>>,
}

impl Budget {
    /// USD reserved by in-flight attempts.
    pub fn reserved_usd(&self) -> f64 {
        // `Sum` for f64 starts at -0.0: `+ 0.0` makes an empty sum print as 0.
        self.reserved.values().sum::<f64>() + 0.0
    }

    /// The forecast of `step_id`'s cost, USD (its own, else the default).
    pub fn forecast_usd(&self, step_id: &str) -> f64 {
        self.forecasts.get(step_id).map_or(self.default_forecast_usd, |f| f.mid_usd)
    }
}
