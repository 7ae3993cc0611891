//! The price table: USD per million input and output tokens per model, and what a step of
//! that model costs when nothing is known about it.
//!
//! Built-in rows follow the list prices the original used (seed-spec §3.7: haiku 1/5,
//! sonnet 3/15, opus 5/25 USD per Mtok in/out); `[prices.<model>]` in `baton.toml` overrides or
//! adds rows. A model string matches the row with the same name, else the longest row name it
//! contains (`claude-sonnet-4-5` → `sonnet`). Pure: no IO.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One row of the price table.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelPrice {
    /// USD per million input tokens.
    pub input_per_mtok: f64,
    /// USD per million output tokens.
    pub output_per_mtok: f64,
    /// Forecast of one step on this model when the ledger has no history for it, USD.
    pub default_step_usd: f64,
}

/// Largest price (per Mtok) or default step cost a row may state, USD.
pub const MAX_PRICE_USD: f64 = 10_000.0;

/// Forecast of a step whose model has no row at all, USD.
pub const UNKNOWN_MODEL_STEP_USD: f64 = 0.25;

const BUILT_IN: &[(&str, ModelPrice)] = &[
    ("haiku", ModelPrice { input_per_mtok: 1.0, output_per_mtok: 5.0, default_step_usd: 0.05 }),
    ("sonnet", ModelPrice { input_per_mtok: 3.0, output_per_mtok: 15.0, default_step_usd: 0.25 }),
    ("opus", ModelPrice { input_per_mtok: 5.0, output_per_mtok: 25.0, default_step_usd: 0.50 }),
    ("gpt-5", ModelPrice { input_per_mtok: 1.25, output_per_mtok: 10.0, default_step_usd: 0.15 }),
    // The bundled demo agent reports its own cost (one cent unless told otherwise).
    ("baton-demo", ModelPrice { input_per_mtok: 3.0, output_per_mtok: 15.0, default_step_usd: 0.01 }),
];

/// The price table: built-in rows with `baton.toml`'s on top.
#[derive(Debug, Clone, PartialEq)]
pub struct PriceTable {
    rows: BTreeMap<String, ModelPrice>,
}

impl Default for PriceTable {
    fn default() -> Self {
        PriceTable::new(&BTreeMap::new())
    }
}

impl PriceTable {
    /// The built-in rows, overridden and extended by `configured` (keys are model names,
    /// matched case-insensitively).
    pub fn new(configured: &BTreeMap<String, ModelPrice>) -> PriceTable {
        let mut rows: BTreeMap<String, ModelPrice> = BUILT_IN.iter().map(|(k, v)| ((*k).to_string(), *v)).collect();
        for (k, v) in configured {
            rows.insert(k.to_ascii_lowercase(), *v);
        }
        PriceTable { rows }
    }

    /// The row name `model` matches: the same name, else the longest row name it contains.
    pub fn key_of(&self, model: &str) -> Option<&str> {
        let model = model.to_ascii_lowercase();
        if let Some((k, _)) = self.rows.get_key_value(&model) {
            return Some(k.as_str());
        }
        self.rows.keys().filter(|k| model.contains(k.as_str())).max_by_key(|k| k.len()).map(String::as_str)
    }

    /// The price of `model`, if a row matches.
    pub fn get(&self, model: &str) -> Option<&ModelPrice> {
        self.key_of(model).and_then(|k| self.rows.get(k))
    }

    /// USD for `input` and `output` tokens of `model`; `None` when no row matches.
    pub fn cost(&self, model: &str, input: u64, output: u64) -> Option<f64> {
        self.get(model).map(|p| (input as f64 * p.input_per_mtok + output as f64 * p.output_per_mtok) / 1e6)
    }

    /// Forecast of one step on `model` without history, USD.
    pub fn default_step_usd(&self, model: &str) -> f64 {
        self.get(model).map_or(UNKNOWN_MODEL_STEP_USD, |p| p.default_step_usd)
    }

    /// Checks configured rows: every number finite, from 0 to [`MAX_PRICE_USD`]. `Err` names
    /// the row and the field.
    pub fn check(configured: &BTreeMap<String, ModelPrice>) -> Result<(), String> {
        for (k, p) in configured {
            for (name, v) in [
                ("input_per_mtok", p.input_per_mtok),
                ("output_per_mtok", p.output_per_mtok),
                ("default_step_usd", p.default_step_usd),
            ] {
                if !v.is_finite() || !(0.0..=MAX_PRICE_USD).contains(&v) {
                    return Err(format!(
                        "[prices.{k}] {name} = {v}: expected a number of USD from 0 to {MAX_PRICE_USD}"
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_matches_its_row_or_the_longest_contained_name() {
        let t = PriceTable::default();
        assert_eq!(t.key_of("sonnet"), Some("sonnet"));
        assert_eq!(t.key_of("claude-Sonnet-4-5-20250929"), Some("sonnet"));
        assert_eq!(t.key_of("gpt-5-codex"), Some("gpt-5"));
        assert_eq!(t.key_of("llama"), None);
        // 1M input at $3 + 1M output at $15.
        assert_eq!(t.cost("sonnet", 1_000_000, 1_000_000), Some(18.0));
        assert_eq!(t.cost("llama", 10, 10), None);
        assert_eq!(t.default_step_usd("llama"), UNKNOWN_MODEL_STEP_USD);
    }

    #[test]
    fn configured_rows_override_and_extend() {
        let mut cfg = BTreeMap::new();
        cfg.insert(
            "Sonnet".to_string(),
            ModelPrice { input_per_mtok: 1.0, output_per_mtok: 1.0, default_step_usd: 2.0 },
        );
        cfg.insert(
            "llama".to_string(),
            ModelPrice { input_per_mtok: 0.1, output_per_mtok: 0.2, default_step_usd: 0.0 },
        );
        let t = PriceTable::new(&cfg);
        assert_eq!(t.cost("sonnet", 1_000_000, 0), Some(1.0));
        assert_eq!(t.default_step_usd("claude-sonnet"), 2.0);
        assert!(t.get("llama-3").is_some());
        let bad = BTreeMap::from([(
            "x".to_string(),
            ModelPrice { input_per_mtok: -1.0, output_per_mtok: 0.0, default_step_usd: 0.0 },
        )]);
        assert!(PriceTable::check(&bad).unwrap_err().contains("[prices.x] input_per_mtok"));
    }
}
