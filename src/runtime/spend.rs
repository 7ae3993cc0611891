//! Spend at the edge: what an attempt cost (reported, or estimated from tokens × the price
//! table), the usage an agent streams while it runs, the ledger's history for forecasts, and
//! the ceiling from the environment (issue 5 §1).
//!
//! The rules about the ceiling (reservations, parking) are the engine's (`engine::budget`);
//! this module only measures and reads. It never writes the journal.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::model::budget::TokenCounts;
use crate::pmo::enrich::{SpendHistory, HISTORY_SAMPLES};
use crate::pmo::pricing::PriceTable;
use crate::runtime::agent::output::{claude_usage, codex_usage, AgentOutput};
use crate::runtime::BadInput;
use crate::store::Store;

/// Environment variable of the default ceiling, USD.
pub const BUDGET_ENV: &str = "BATON_RUN_BUDGET_USD";
/// agent-baton's name for the same ceiling (it always meant USD, seed-spec §3.7).
pub const BUDGET_ENV_ALIAS: &str = "BATON_RUN_TOKEN_CEILING";

/// What an attempt cost, USD, and whether that is an estimate: the agent's reported cost when
/// it is a number (a report above the engine's per-step cap counts as the cap, never as 0: a
/// broken report must not slip under the ceiling); else its tokens priced by [`tokens_cost`]
/// (estimated); else 0. Never above [`MAX_STEP_COST_USD`](crate::engine::MAX_STEP_COST_USD).
pub fn attempt_cost(out: &AgentOutput, model: &str, prices: &PriceTable) -> (f64, bool) {
    let cap = crate::engine::MAX_STEP_COST_USD;
    match out.cost_usd {
        // `+ 0.0` turns a reported -0 into 0.
        Some(c) if c.is_finite() && c >= 0.0 => (c.min(cap) + 0.0, false),
        Some(c) if c == f64::INFINITY => (cap, false),
        _ if out.tokens().total() > 0 => match tokens_cost(out, model, prices) {
            Some(c) => (c.min(cap), true),
            None => (0.0, false),
        },
        _ => (0.0, false),
    }
}

/// What an output's tokens cost at the price table, USD, every kind at its own rate (cache
/// writes and reads are not input): per model when the agent reported them per model (gemini),
/// each at its own row; a model without a row, or one total, at the row of the model the agent
/// reported, else of `model` (the one asked for). `None` when no row prices some of them.
pub fn tokens_cost(out: &AgentOutput, model: &str, prices: &PriceTable) -> Option<f64> {
    let fallback = out.model.as_deref().filter(|m| prices.get(m).is_some()).unwrap_or(model);
    if out.model_tokens.is_empty() {
        return prices.cost_of(fallback, &out.tokens());
    }
    out.model_tokens
        .iter()
        .map(|(m, tokens)| prices.cost_of(m, tokens).or_else(|| prices.cost_of(fallback, tokens)))
        .sum()
}

/// Usage an agent has streamed so far: its tokens by kind and the model it reported.
///
/// Reads claude's stream-json (`assistant` events' `message.usage`, counted once per message
/// id, the last report of a message winning, cache writes and reads apart) and codex's
/// `turn.completed` usage (its cached input as cache reads). Lines that are not JSON (a
/// partial last line) are skipped.
pub fn streamed_usage(stdout: &str) -> (TokenCounts, Option<String>) {
    let mut stream = UsageStream::default();
    for line in stdout.lines() {
        stream.line(line);
    }
    stream.totals()
}

/// [`streamed_usage`] read incrementally: each call to [`UsageStream::read_new`] parses only
/// the complete lines appended to the file since the last one, so watching a long session
/// costs what it adds, not its whole output every time.
#[derive(Debug, Default)]
pub struct UsageStream {
    /// Bytes of the file consumed (up to the last complete line).
    offset: u64,
    by_message: BTreeMap<String, TokenCounts>,
    anonymous: TokenCounts,
    model: Option<String>,
}

impl UsageStream {
    /// Reads the complete lines appended to `path` since the last call; a missing file reads
    /// as nothing yet. Errors: reading the file.
    pub fn read_new(&mut self, path: &std::path::Path) -> std::io::Result<()> {
        use std::io::{Read as _, Seek as _};
        let mut file = match std::fs::File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        file.seek(std::io::SeekFrom::Start(self.offset))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let Some(end) = bytes.iter().rposition(|b| *b == b'\n') else { return Ok(()) };
        for line in String::from_utf8_lossy(&bytes[..end]).lines() {
            self.line(line);
        }
        self.offset += end as u64 + 1;
        Ok(())
    }

    fn line(&mut self, line: &str) {
        let Ok(v) = serde_json::from_str::<Value>(line.trim()) else { return };
        match v.get("type").and_then(Value::as_str) {
            Some("assistant") => {
                let message = v.get("message");
                if self.model.is_none() {
                    self.model = message.and_then(|m| m.get("model")).and_then(Value::as_str).map(str::to_owned);
                }
                let counted = claude_usage(message.and_then(|m| m.get("usage")));
                match message.and_then(|m| m.get("id")).and_then(Value::as_str) {
                    Some(id) => {
                        self.by_message.insert(id.to_owned(), counted);
                    }
                    None => self.anonymous = self.anonymous.plus(&counted),
                }
            }
            Some("turn.completed") => self.anonymous = self.anonymous.plus(&codex_usage(v.get("usage"))),
            _ => {}
        }
    }

    /// Tokens by kind and the model reported, so far.
    pub fn totals(&self) -> (TokenCounts, Option<String>) {
        let tokens = self.by_message.values().fold(self.anonymous, |sum, t| sum.plus(t));
        (tokens, self.model.clone())
    }
}

/// The ledger's recent history for forecasts: per (agent, model), the newest
/// [`HISTORY_SAMPLES`] attempt costs.
///
/// Errors: the database.
pub async fn history(store: &Store) -> anyhow::Result<SpendHistory> {
    let mut out = SpendHistory::new();
    for (agent, model, cost) in store.spend_history(HISTORY_SAMPLES).await? {
        out.entry((agent, model)).or_default().push(cost);
    }
    Ok(out)
}

/// The ceiling from the environment: `BATON_RUN_BUDGET_USD`, else its alias
/// `BATON_RUN_TOKEN_CEILING`, as (USD, variable name). Unset or empty → `None`.
///
/// Errors: a value that is not a USD amount above 0 ([`BadInput`] naming the variable).
pub fn ceiling_from_env(lookup: impl Fn(&str) -> Option<String>) -> Result<Option<(f64, &'static str)>, BadInput> {
    for name in [BUDGET_ENV, BUDGET_ENV_ALIAS] {
        let Some(raw) = lookup(name).filter(|v| !v.trim().is_empty()) else { continue };
        return match parse_usd(&raw) {
            Some(v) => Ok(Some((v, name))),
            None => Err(BadInput(format!("{name}={raw:?}: {USD_EXPECTED}"))),
        };
    }
    Ok(None)
}

/// What [`parse_usd`] accepts, for error messages.
pub const USD_EXPECTED: &str = "expected a USD amount from 0.01 to 1000000, such as 25 or 2.50";

/// Parses a USD amount from a cent to the engine's largest ceiling (`25`, `2.50`, `$3`).
pub fn parse_usd(raw: &str) -> Option<f64> {
    use crate::engine::budget::{MAX_CEILING_USD, MIN_CEILING_USD};
    let v: f64 = raw.trim().trim_start_matches('$').trim().parse().ok()?;
    (v.is_finite() && (MIN_CEILING_USD..=MAX_CEILING_USD).contains(&v)).then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_without_a_cost_are_priced_and_marked_estimated() {
        let prices = PriceTable::default();
        let out = AgentOutput { input_tokens: 1_000_000, output_tokens: 100_000, ..AgentOutput::default() };
        // codex reports no cost: 1M in at $1.25 + 0.1M out at $10.
        assert_eq!(attempt_cost(&out, "gpt-5-codex", &prices), (2.25, true));
        let reported = AgentOutput { cost_usd: Some(0.5), input_tokens: 10, ..AgentOutput::default() };
        assert_eq!(attempt_cost(&reported, "sonnet", &prices), (0.5, false));
        let unknown = AgentOutput { input_tokens: 10, ..AgentOutput::default() };
        assert_eq!(attempt_cost(&unknown, "llama", &prices), (0.0, false));
        let broken = AgentOutput { cost_usd: Some(f64::NAN), output_tokens: 1_000_000, ..AgentOutput::default() };
        assert_eq!(attempt_cost(&broken, "sonnet", &prices), (15.0, true));
        // A report above the cap counts as the cap, not as nothing (found by a tester: $5M → $0).
        let huge = AgentOutput { cost_usd: Some(5e6), ..AgentOutput::default() };
        assert_eq!(attempt_cost(&huge, "sonnet", &prices), (crate::engine::MAX_STEP_COST_USD, false));
    }

    fn exited() -> crate::runtime::agent::shim::ExitRecord {
        crate::runtime::agent::shim::ExitRecord {
            exit_code: Some(0),
            signal: None,
            timed_out: false,
            stopped_after_result: false,
            spawn_error: None,
            started_at: String::new(),
            finished_at: String::new(),
            duration_ms: 0,
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn cached_tokens_are_priced_as_cached_not_as_input() {
        let prices = PriceTable::default();
        // codex's recorded run: 18342 input of which 11776 cached, 187 output, on gpt-5
        // ($1.25 in, $0.125 cached, $10 out per Mtok).
        let codex = crate::runtime::agent::output::parse_codex_jsonl(
            &std::fs::read_to_string(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/fixtures/agent-cli/codex/exec-json.jsonl"
            ))
            .unwrap(),
            "",
            &exited(),
        );
        let (cost, estimated) = attempt_cost(&codex, "gpt-5-codex", &prices);
        assert!(estimated);
        assert!(close(cost, (6566.0 * 1.25 + 11776.0 * 0.125 + 187.0 * 10.0) / 1e6), "{cost}");
        // Priced as ordinary input it would have been $0.0248; priced by kind it is $0.0115.
        assert!(close(cost, 0.0115495), "{cost}");
        // claude without a reported cost: cache writes at 1.25 × input, reads at 0.1 ×.
        let claude = AgentOutput {
            input_tokens: 10,
            cache_creation_tokens: 6346,
            cache_read_tokens: 12640,
            output_tokens: 159,
            model: Some("claude-sonnet-4-5".into()),
            ..AgentOutput::default()
        };
        let (cost, estimated) = attempt_cost(&claude, "opus", &prices);
        assert!(estimated);
        assert!(close(cost, (10.0 * 3.0 + 6346.0 * 3.75 + 12640.0 * 0.3 + 159.0 * 15.0) / 1e6), "{cost}");
    }

    #[test]
    fn tokens_reported_per_model_are_priced_per_model() {
        let prices = PriceTable::default();
        let gemini = crate::runtime::agent::output::parse_gemini_json(
            &std::fs::read_to_string(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/fixtures/agent-cli/gemini/json-output.two-models.json"
            ))
            .unwrap(),
            "",
            &exited(),
        );
        let (cost, estimated) = attempt_cost(&gemini, "gemini-2.5-pro", &prices);
        assert!(estimated, "gemini reports no cost");
        // pro: 6110 in × $1.25 + 18200 cached × $0.125 + 1693 out × $10; flash: 1840 × $0.30 + 52 × $2.50.
        assert!(close(cost, 0.0268425 + 0.000682), "{cost}");
        // A model without a row is priced at the reported model's row.
        let mut odd = gemini.clone();
        odd.model_tokens[0].0 = "mystery".into();
        let pro_rate = prices.cost_of("gemini-2.5-pro", &odd.model_tokens[0].1).unwrap();
        assert!(close(tokens_cost(&odd, "x", &prices).unwrap(), 0.0268425 + pro_rate));
        // Nothing prices them: no cost, not estimated.
        let unknown = AgentOutput {
            model_tokens: vec![("m".into(), TokenCounts { input: 5, ..TokenCounts::default() })],
            input_tokens: 5,
            ..AgentOutput::default()
        };
        assert_eq!(attempt_cost(&unknown, "llama", &prices), (0.0, false));
    }

    fn io(input: u64, output: u64) -> TokenCounts {
        TokenCounts { input, output, ..TokenCounts::default() }
    }

    #[test]
    fn streamed_usage_counts_each_message_once() {
        let stdout = concat!(
            r#"{"type":"system","subtype":"init","model":"claude-sonnet-4-5"}"#,
            "\n",
            r#"{"type":"assistant","message":{"id":"m1","model":"claude-sonnet-4-5","usage":{"input_tokens":100,"output_tokens":5}}}"#,
            "\n",
            r#"{"type":"assistant","message":{"id":"m1","usage":{"input_tokens":100,"output_tokens":7}}}"#,
            "\n",
            r#"{"type":"assistant","message":{"id":"m2","usage":{"input_tokens":50,"output_tokens":3}}}"#,
            "\n",
            r#"{"type":"assistant","message":{"id":"m3","usage":{"input_tok"#,
        );
        assert_eq!(streamed_usage(stdout), (io(150, 10), Some("claude-sonnet-4-5".into())));
        let codex = "{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":7,\"cached_input_tokens\":4,\"output_tokens\":2}}\n\
                     {\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}\n";
        assert_eq!(streamed_usage(codex), (TokenCounts { input: 4, cache_write: 0, cache_read: 4, output: 3 }, None));
        // claude's cache writes and reads stream too, and count.
        let cached = r#"{"type":"assistant","message":{"id":"m1","usage":{"input_tokens":6,"cache_creation_input_tokens":226,"cache_read_input_tokens":9380,"output_tokens":41}}}"#;
        assert_eq!(streamed_usage(cached).0, TokenCounts { input: 6, cache_write: 226, cache_read: 9380, output: 41 });
    }

    #[test]
    fn the_usage_stream_reads_only_complete_new_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stdout");
        let mut stream = UsageStream::default();
        stream.read_new(&path).unwrap();
        assert_eq!(stream.totals(), (io(0, 0), None), "no file yet");
        let first = r#"{"type":"assistant","message":{"id":"m1","model":"opus","usage":{"input_tokens":10,"output_tokens":1}}}"#;
        std::fs::write(&path, format!("{first}\n{{\"type\":\"assistant\",\"mess")).unwrap();
        stream.read_new(&path).unwrap();
        assert_eq!(stream.totals(), (io(10, 1), Some("opus".into())));
        let rest = r#"age":{"id":"m2","usage":{"input_tokens":5,"output_tokens":2}}}"#;
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str(&format!("{rest}\n"));
        std::fs::write(&path, &text).unwrap();
        stream.read_new(&path).unwrap();
        assert_eq!(stream.totals(), (io(15, 3), Some("opus".into())), "the partial line is read once complete");
        assert_eq!(stream.totals(), streamed_usage(&text));
    }

    #[test]
    fn the_env_ceiling_accepts_the_alias_and_refuses_nonsense() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
        };
        assert_eq!(ceiling_from_env(env(&[])).unwrap(), None);
        assert_eq!(ceiling_from_env(env(&[(BUDGET_ENV_ALIAS, "2.5")])).unwrap(), Some((2.5, BUDGET_ENV_ALIAS)));
        assert_eq!(
            ceiling_from_env(env(&[(BUDGET_ENV, "$4"), (BUDGET_ENV_ALIAS, "9")])).unwrap(),
            Some((4.0, BUDGET_ENV))
        );
        for bad in ["0", "-1", "ten", "NaN", "inf"] {
            let pairs: &'static [(&'static str, &'static str)] = Box::leak(Box::new([(BUDGET_ENV, bad)]));
            let err = ceiling_from_env(env(pairs)).unwrap_err();
            assert!(err.0.contains(BUDGET_ENV), "{err}");
        }
    }
}
