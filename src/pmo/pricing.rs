//! The price table: USD per million tokens of each kind (input, cache write, cache read,
//! output) per model, and what a step of that model costs when nothing is known about it.
//!
//! Built-in rows follow the list prices the original used (seed-spec §3.7: haiku 1/5,
//! sonnet 3/15, opus 5/25 USD per Mtok in/out), with the providers' list prices for gpt-5 and
//! gemini; `[prices.<model>]` in `baton.toml` overrides or adds rows. Cache writes cost
//! [`CACHE_WRITE_FACTOR`] × input and cache reads [`CACHE_READ_FACTOR`] × input unless a row
//! states its own (the providers' rates: Anthropic's 5-minute cache write 1.25×, every
//! provider's cached input 0.1×). A model string matches the row with the same name, else the
//! longest row name it contains (`claude-sonnet-4-5` → `sonnet`). Pure: no IO.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::budget::TokenCounts;

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
    /// USD per million input tokens written to the prompt cache; absent:
    /// [`CACHE_WRITE_FACTOR`] × `input_per_mtok`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_per_mtok: Option<f64>,
    /// USD per million input tokens read from the prompt cache; absent:
    /// [`CACHE_READ_FACTOR`] × `input_per_mtok`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_per_mtok: Option<f64>,
}

/// A cache write's price as a multiple of the input price when a row states none (Anthropic's
/// 5-minute cache writes; gemini and codex report no cache writes).
pub const CACHE_WRITE_FACTOR: f64 = 1.25;
/// A cache read's price as a multiple of the input price when a row states none (Anthropic's
/// cache hits, OpenAI's cached input and Google's context-cache reads all cost 0.1× input).
pub const CACHE_READ_FACTOR: f64 = 0.1;

impl ModelPrice {
    /// A row with the default cache rates.
    pub const fn new(input_per_mtok: f64, output_per_mtok: f64, default_step_usd: f64) -> ModelPrice {
        ModelPrice {
            input_per_mtok,
            output_per_mtok,
            default_step_usd,
            cache_write_per_mtok: None,
            cache_read_per_mtok: None,
        }
    }

    /// USD for `tokens`, each kind at its own rate.
    pub fn cost(&self, tokens: &TokenCounts) -> f64 {
        let write = self.cache_write_per_mtok.unwrap_or(self.input_per_mtok * CACHE_WRITE_FACTOR);
        let read = self.cache_read_per_mtok.unwrap_or(self.input_per_mtok * CACHE_READ_FACTOR);
        (tokens.input as f64 * self.input_per_mtok
            + tokens.cache_write as f64 * write
            + tokens.cache_read as f64 * read
            + tokens.output as f64 * self.output_per_mtok)
            / 1e6
    }
}

/// Largest price (per Mtok) or default step cost a row may state, USD.
pub const MAX_PRICE_USD: f64 = 10_000.0;

/// Forecast of a step whose model has no row at all, USD.
pub const UNKNOWN_MODEL_STEP_USD: f64 = 0.25;

const BUILT_IN: &[(&str, ModelPrice)] = &[
    ("haiku", ModelPrice::new(1.0, 5.0, 0.05)),
    ("sonnet", ModelPrice::new(3.0, 15.0, 0.25)),
    ("opus", ModelPrice::new(5.0, 25.0, 0.50)),
    ("gpt-5", ModelPrice::new(1.25, 10.0, 0.15)),
    // gemini reports no cost at all: every gemini attempt is priced here (Google's list
    // prices for prompts up to 200k tokens; `gemini` alone is gemini 3 pro's).
    ("gemini", ModelPrice::new(2.0, 12.0, 0.25)),
    ("gemini-2.5-pro", ModelPrice::new(1.25, 10.0, 0.15)),
    ("gemini-2.5-flash", ModelPrice::new(0.30, 2.50, 0.05)),
    ("gemini-2.5-flash-lite", ModelPrice::new(0.10, 0.40, 0.02)),
    // The bundled demo agent reports its own cost (one cent unless told otherwise).
    ("baton-demo", ModelPrice::new(3.0, 15.0, 0.01)),
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
        self.cost_of(model, &TokenCounts { input, output, ..TokenCounts::default() })
    }

    /// USD for `tokens` of `model`, each kind at its own rate ([`ModelPrice::cost`]); `None`
    /// when no row matches.
    pub fn cost_of(&self, model: &str, tokens: &TokenCounts) -> Option<f64> {
        self.get(model).map(|p| p.cost(tokens))
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
                ("cache_write_per_mtok", p.cache_write_per_mtok.unwrap_or(0.0)),
                ("cache_read_per_mtok", p.cache_read_per_mtok.unwrap_or(0.0)),
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
        cfg.insert("Sonnet".to_string(), ModelPrice::new(1.0, 1.0, 2.0));
        cfg.insert("llama".to_string(), ModelPrice::new(0.1, 0.2, 0.0));
        let t = PriceTable::new(&cfg);
        assert_eq!(t.cost("sonnet", 1_000_000, 0), Some(1.0));
        assert_eq!(t.default_step_usd("claude-sonnet"), 2.0);
        assert!(t.get("llama-3").is_some());
        let bad = BTreeMap::from([("x".to_string(), ModelPrice::new(-1.0, 0.0, 0.0))]);
        assert!(PriceTable::check(&bad).unwrap_err().contains("[prices.x] input_per_mtok"));
        let bad = BTreeMap::from([(
            "x".to_string(),
            ModelPrice { cache_read_per_mtok: Some(f64::NAN), ..ModelPrice::new(1.0, 1.0, 0.0) },
        )]);
        assert!(PriceTable::check(&bad).unwrap_err().contains("[prices.x] cache_read_per_mtok"));
    }

    #[test]
    fn every_token_kind_is_priced_at_its_own_rate() {
        let t = PriceTable::default();
        let mtok = 1_000_000;
        let kinds = |input, cache_write, cache_read, output| TokenCounts { input, cache_write, cache_read, output };
        // sonnet: input $3, cache write 1.25 × 3 = $3.75, cache read 0.1 × 3 = $0.30, output $15.
        let cost = |tokens: TokenCounts| t.cost_of("claude-sonnet-4-5", &tokens).unwrap();
        assert!((cost(kinds(mtok, 0, 0, 0)) - 3.0).abs() < 1e-9);
        assert!((cost(kinds(0, mtok, 0, 0)) - 3.75).abs() < 1e-9);
        assert!((cost(kinds(0, 0, mtok, 0)) - 0.30).abs() < 1e-9);
        assert!((cost(kinds(0, 0, 0, mtok)) - 15.0).abs() < 1e-9);
        assert!((cost(kinds(mtok, mtok, mtok, mtok)) - 22.05).abs() < 1e-9);
        // A stated cache rate wins over the factor.
        let mut cfg = BTreeMap::new();
        cfg.insert(
            "sonnet".to_string(),
            ModelPrice {
                cache_write_per_mtok: Some(6.0),
                cache_read_per_mtok: Some(0.5),
                ..ModelPrice::new(3.0, 15.0, 0.25)
            },
        );
        let own = PriceTable::new(&cfg);
        assert!((own.cost_of("sonnet", &kinds(0, mtok, mtok, 0)).unwrap() - 6.5).abs() < 1e-9);
        // gemini rows: the longest name a model contains.
        assert_eq!(t.key_of("gemini-2.5-flash-lite"), Some("gemini-2.5-flash-lite"));
        assert_eq!(t.key_of("gemini-2.5-flash-preview-09-2025"), Some("gemini-2.5-flash"));
        assert_eq!(t.key_of("gemini-3-pro-preview"), Some("gemini"));
        assert!((t.cost_of("gemini-2.5-pro", &kinds(0, 0, mtok, 0)).unwrap() - 0.125).abs() < 1e-9);
    }
}
