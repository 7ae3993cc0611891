//! Parsers that turn an agent's captured stdout/stderr and exit record into an [`AgentOutput`].
//!
//! Pure functions over strings (no IO). Success is decided by what the agent says (claude's
//! `is_error`, codex's event stream, gemini's `error` object), not by the process exit code or
//! claude's `subtype`; only the plain command profile falls back to the exit code. Malformed
//! lines are skipped, never fatal. Tokens are read by kind (input, cache write, cache read,
//! output) so each is priced at its own rate; pricing itself is `runtime::spend`'s.

use serde_json::Value;

use crate::model::budget::TokenCounts;

use super::shim::ExitRecord;

/// Number of characters of stdout kept as the outcome of a plain command.
pub const STDOUT_TAIL_CHARS: usize = 4000;
/// Number of characters of stderr quoted in an error message.
pub const STDERR_TAIL_CHARS: usize = 2000;

/// What an agent run produced, independent of the agent CLI.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AgentOutput {
    /// Whether the agent reports success.
    pub success: bool,
    /// The agent's final text (claude `result`, codex last `agent_message`, command stdout tail);
    /// empty when there is none.
    pub outcome: String,
    /// Why the run failed; `None` on success.
    pub error: Option<String>,
    /// Cost in USD if the CLI reports it (claude only).
    pub cost_usd: Option<f64>,
    /// Input tokens neither written to nor read from the prompt cache (claude `input_tokens`,
    /// codex `input_tokens − cached_input_tokens`, gemini `prompt − cached + tool`).
    pub input_tokens: u64,
    /// Output tokens, thinking included (claude and codex `output_tokens`, gemini
    /// `candidates + thoughts`).
    pub output_tokens: u64,
    /// Input tokens written to the prompt cache (claude `cache_creation_input_tokens`).
    pub cache_creation_tokens: u64,
    /// Input tokens read from the prompt cache (claude `cache_read_input_tokens`, codex
    /// `cached_input_tokens`, gemini `cached`).
    pub cache_read_tokens: u64,
    /// The same tokens per model, when the CLI reports them per model (claude's `modelUsage`,
    /// gemini's `stats.models`), in the CLI's order: a run that used two models is priced at
    /// each one's rate. Empty when the CLI gives one total.
    pub model_tokens: Vec<(String, TokenCounts)>,
    /// The CLI's session / thread id, for resuming or correlating logs.
    pub session_id: Option<String>,
    /// The model the CLI reports (claude's `system` init event), for the spend ledger.
    pub model: Option<String>,
}

impl AgentOutput {
    /// Its tokens by kind.
    pub fn tokens(&self) -> TokenCounts {
        TokenCounts {
            input: self.input_tokens,
            cache_write: self.cache_creation_tokens,
            cache_read: self.cache_read_tokens,
            output: self.output_tokens,
        }
    }

    /// Sets its tokens by kind.
    fn set_tokens(&mut self, tokens: TokenCounts) {
        self.input_tokens = tokens.input;
        self.cache_creation_tokens = tokens.cache_write;
        self.cache_read_tokens = tokens.cache_read;
        self.output_tokens = tokens.output;
    }

    /// Sets `model_tokens` and the totals, which are their sum.
    fn set_model_tokens(&mut self, per_model: Vec<(String, TokenCounts)>) {
        self.set_tokens(per_model.iter().fold(TokenCounts::default(), |sum, (_, t)| sum.plus(t)));
        self.model_tokens = per_model;
    }
}

/// Returns the last `max_chars` characters of `text` (on a char boundary).
pub fn tail(text: &str, max_chars: usize) -> &str {
    let count = text.chars().count();
    if count <= max_chars {
        return text;
    }
    let skip = count - max_chars;
    match text.char_indices().nth(skip) {
        Some((idx, _)) => &text[idx..],
        None => "",
    }
}

/// Explains a run that produced no usable final event: `what`, how the process ended, stderr tail.
fn missing_result_error(what: &str, stderr: &str, exit: &ExitRecord) -> String {
    let mut msg = what.to_owned();
    if exit.spawn_error.is_some() || exit.timed_out || !exit.exited_cleanly() {
        msg.push_str(&format!(" ({})", exit.describe()));
    }
    let stderr = tail(stderr.trim(), STDERR_TAIL_CHARS);
    if !stderr.is_empty() {
        msg.push_str(": ");
        msg.push_str(stderr);
    }
    msg
}

fn json_lines(stdout: &str) -> impl Iterator<Item = Value> + '_ {
    stdout.lines().filter_map(|line| serde_json::from_str::<Value>(line.trim()).ok()).filter(Value::is_object)
}

fn str_field(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_owned)
}

fn u64_field(v: Option<&Value>, key: &str) -> u64 {
    v.and_then(|u| u.get(key)).and_then(Value::as_u64).unwrap_or(0)
}

/// claude's `usage` object (a result's or an assistant message's) by kind.
pub fn claude_usage(usage: Option<&Value>) -> TokenCounts {
    TokenCounts {
        input: u64_field(usage, "input_tokens"),
        cache_write: u64_field(usage, "cache_creation_input_tokens"),
        cache_read: u64_field(usage, "cache_read_input_tokens"),
        output: u64_field(usage, "output_tokens"),
    }
}

/// codex's `turn.completed` `usage` by kind: its `input_tokens` counts the cached ones too.
pub fn codex_usage(usage: Option<&Value>) -> TokenCounts {
    let cached = u64_field(usage, "cached_input_tokens");
    TokenCounts {
        input: u64_field(usage, "input_tokens").saturating_sub(cached),
        cache_write: 0,
        cache_read: cached,
        output: u64_field(usage, "output_tokens"),
    }
}

/// claude's result `modelUsage` (`{"<model>": {inputTokens, outputTokens, cacheReadInputTokens,
/// cacheCreationInputTokens, …}}`) per model; empty when absent.
fn claude_model_usage(result: &Value) -> Vec<(String, TokenCounts)> {
    let Some(models) = result.get("modelUsage").and_then(Value::as_object) else { return Vec::new() };
    models
        .iter()
        .map(|(name, u)| {
            let u = Some(u);
            let tokens = TokenCounts {
                input: u64_field(u, "inputTokens"),
                cache_write: u64_field(u, "cacheCreationInputTokens"),
                cache_read: u64_field(u, "cacheReadInputTokens"),
                output: u64_field(u, "outputTokens"),
            };
            (name.clone(), tokens)
        })
        .collect()
}

fn is_result(v: &Value) -> bool {
    v.get("type").and_then(Value::as_str) == Some("result")
}

/// Parses claude's `--output-format stream-json` (one JSON object a line) or `--output-format
/// json` (one object, possibly pretty-printed, or an array of messages) output.
///
/// Uses the last `{"type":"result"}` event: `success = !is_error` (when `is_error` is absent,
/// `subtype == "success"`); `outcome = result` (absent for e.g. `error_max_turns`); on failure
/// `error` is the result text, else `"<subtype>: <errors joined by '; '>"`. Cost is
/// `total_cost_usd`, or `cost_usd` from older versions. Tokens, by kind: the sum of
/// `modelUsage` over its models when the result has it (`usage` counts the main model only,
/// not e.g. the haiku calls claude makes on the side), else `usage`; cache writes and reads
/// are counted apart from input (see [`AgentOutput`]). Without a result event the run failed with
/// `"agent produced no result event"` plus how the process ended and the stderr tail.
pub fn parse_claude_stream_json(stdout: &str, stderr: &str, exit: &ExitRecord) -> AgentOutput {
    let mut result = json_lines(stdout).filter(is_result).last();
    let init = json_lines(stdout).find(|v| v.get("type").and_then(Value::as_str) == Some("system"));
    let model = init.as_ref().and_then(|v| str_field(v, "model"));
    let mut init_session = init.and_then(|v| str_field(&v, "session_id"));
    if result.is_none() {
        match serde_json::from_str::<Value>(stdout.trim()) {
            Ok(v @ Value::Object(_)) if is_result(&v) => result = Some(v),
            Ok(Value::Array(items)) => {
                init_session = init_session.or_else(|| items.iter().find_map(|v| str_field(v, "session_id")));
                result = items.into_iter().rfind(is_result);
            }
            _ => {}
        }
    }
    let Some(result) = result else {
        return AgentOutput {
            success: false,
            error: Some(missing_result_error("agent produced no result event", stderr, exit)),
            session_id: init_session,
            model,
            ..AgentOutput::default()
        };
    };

    let subtype = str_field(&result, "subtype");
    let is_error = match result.get("is_error").and_then(Value::as_bool) {
        Some(flag) => flag,
        None => subtype.as_deref() != Some("success"),
    };
    let outcome = str_field(&result, "result").unwrap_or_default();
    let error = is_error.then(|| {
        if !outcome.trim().is_empty() {
            return outcome.clone();
        }
        let errors: Vec<String> = result
            .get("errors")
            .and_then(Value::as_array)
            .map(|errs| {
                errs.iter()
                    .map(|e| match e.as_str() {
                        Some(s) => s.to_owned(),
                        None => e.to_string(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        match (subtype.as_deref(), errors.is_empty()) {
            (Some(sub), false) => format!("{sub}: {}", errors.join("; ")),
            (None, false) => errors.join("; "),
            (Some(sub), true) => sub.to_owned(),
            (None, true) => "agent reported an error".to_owned(),
        }
    });
    let mut out = AgentOutput {
        success: !is_error,
        outcome,
        error,
        cost_usd: result.get("total_cost_usd").or_else(|| result.get("cost_usd")).and_then(Value::as_f64),
        session_id: str_field(&result, "session_id").or(init_session),
        model,
        ..AgentOutput::default()
    };
    match claude_model_usage(&result) {
        per_model if !per_model.is_empty() => out.set_model_tokens(per_model),
        _ => out.set_tokens(claude_usage(result.get("usage"))),
    }
    out
}

/// Parses `codex exec --json` event lines.
///
/// `outcome` is the text of the last `item.completed` whose item is an `agent_message`; tokens
/// are summed over `turn.completed.usage`, its `cached_input_tokens` counted as cache reads
/// and the rest of its `input_tokens` (which include them) as input;
/// `session_id` is `thread.started.thread_id`; there is no cost. The run failed if any
/// `turn.failed` or top-level `error` event occurs (its message is the error), or if no
/// `turn.completed` event occurs at all.
pub fn parse_codex_jsonl(stdout: &str, stderr: &str, exit: &ExitRecord) -> AgentOutput {
    let mut out = AgentOutput::default();
    let mut completed = false;
    let mut errors: Vec<String> = Vec::new();
    for event in json_lines(stdout) {
        match event.get("type").and_then(Value::as_str) {
            Some("thread.started") => out.session_id = str_field(&event, "thread_id"),
            Some("item.completed") => {
                let item = event.get("item");
                if item.and_then(|i| i.get("type")).and_then(Value::as_str) == Some("agent_message") {
                    if let Some(text) = item.and_then(|i| str_field(i, "text")) {
                        out.outcome = text;
                    }
                }
            }
            Some("turn.completed") => {
                completed = true;
                out.set_tokens(out.tokens().plus(&codex_usage(event.get("usage"))));
            }
            Some("turn.failed") => errors.push(
                event.get("error").and_then(|e| str_field(e, "message")).unwrap_or_else(|| "turn failed".to_owned()),
            ),
            Some("error") => errors.push(str_field(&event, "message").unwrap_or_else(|| "error".to_owned())),
            _ => {}
        }
    }
    if !errors.is_empty() {
        out.error = Some(errors.join("; "));
    } else if !completed {
        out.error = Some(missing_result_error("agent produced no turn.completed event", stderr, exit));
    } else {
        out.success = true;
    }
    out
}

/// The JSON object gemini printed: the whole of stdout, else from the first line that opens
/// an object to the end (anything gemini printed before it, such as a notice, is skipped).
fn gemini_object(stdout: &str) -> Option<Value> {
    let parse = |text: &str| serde_json::from_str::<Value>(text.trim()).ok().filter(Value::is_object);
    parse(stdout).or_else(|| {
        let start = stdout.match_indices('\n').map(|(i, _)| i + 1).find(|i| stdout[*i..].starts_with('{'))?;
        parse(&stdout[start..])
    })
}

/// Parses `gemini --output-format json`: one object, `{"response": …, "stats": {"models":
/// {"<model>": {"tokens": {prompt, candidates, cached, thoughts, tool, total}}}, …}}`, or
/// `{"error": {"type", "message", "code"}}` when the run failed.
///
/// Success ⇔ there is no `error` object; `outcome` is `response`; tokens are per model (see
/// [`AgentOutput::model_tokens`]): `prompt` includes `cached`, so input = `prompt − cached +
/// tool` (tool-use prompts are billed as input), cache reads = `cached`, output = `candidates +
/// thoughts` (thinking is billed as output). `model` is the model with the most tokens.
/// gemini reports no cost: it is priced from the price table (`runtime::spend`). Without a
/// JSON object the run failed with `"agent produced no JSON result"`, how the process ended
/// and the stderr tail.
pub fn parse_gemini_json(stdout: &str, stderr: &str, exit: &ExitRecord) -> AgentOutput {
    let Some(object) = gemini_object(stdout) else {
        return AgentOutput {
            error: Some(missing_result_error("agent produced no JSON result", stderr, exit)),
            ..AgentOutput::default()
        };
    };
    let mut out = AgentOutput {
        outcome: str_field(&object, "response").unwrap_or_default(),
        session_id: str_field(&object, "session_id"),
        ..AgentOutput::default()
    };
    let per_model: Vec<(String, TokenCounts)> = object
        .pointer("/stats/models")
        .and_then(Value::as_object)
        .map(|models| {
            models
                .iter()
                .map(|(name, m)| {
                    let t = m.get("tokens");
                    let cached = u64_field(t, "cached");
                    let tokens = TokenCounts {
                        input: u64_field(t, "prompt").saturating_sub(cached).saturating_add(u64_field(t, "tool")),
                        cache_write: 0,
                        cache_read: cached,
                        output: u64_field(t, "candidates").saturating_add(u64_field(t, "thoughts")),
                    };
                    (name.clone(), tokens)
                })
                .collect()
        })
        .unwrap_or_default();
    out.model = per_model.iter().max_by_key(|(_, t)| t.total()).map(|(name, _)| name.clone());
    out.set_model_tokens(per_model);
    match object.get("error").filter(|e| !e.is_null()) {
        Some(error) => {
            let message = match error {
                Value::String(s) => s.clone(),
                e => str_field(e, "message").unwrap_or_else(|| e.to_string()),
            };
            out.error = Some(match error.get("type").and_then(Value::as_str) {
                Some(kind) => format!("{kind}: {message}"),
                None => message,
            });
        }
        None => out.success = true,
    }
    out
}

/// Interprets a plain command: success ⇔ the process exited with code 0 (not timed out).
///
/// `outcome` is the last [`STDOUT_TAIL_CHARS`] characters of stdout; on failure `error` says how
/// the process ended followed by the last [`STDERR_TAIL_CHARS`] characters of stderr. No cost,
/// no tokens, no session.
pub fn parse_command_output(stdout: &str, stderr: &str, exit: &ExitRecord) -> AgentOutput {
    let success = exit.exited_cleanly();
    let error = (!success).then(|| {
        let stderr = tail(stderr.trim_end(), STDERR_TAIL_CHARS);
        if stderr.is_empty() {
            exit.describe()
        } else {
            format!("{}: {stderr}", exit.describe())
        }
    });
    AgentOutput { success, outcome: tail(stdout, STDOUT_TAIL_CHARS).to_owned(), error, ..AgentOutput::default() }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::fixture;
    use super::*;

    fn exit(code: i32) -> ExitRecord {
        ExitRecord {
            exit_code: Some(code),
            signal: None,
            timed_out: false,
            stopped_after_result: false,
            spawn_error: None,
            started_at: "a".into(),
            finished_at: "b".into(),
            duration_ms: 1,
        }
    }

    /// serde_json (without `float_roundtrip`) may be one ulp off the decimal in the file.
    fn assert_cost(cost: Option<f64>, expected: f64) {
        let cost = cost.unwrap();
        assert!((cost - expected).abs() < 1e-12, "{cost} != {expected}");
    }

    #[test]
    fn claude_stream_json_fixture() {
        let stdout = fixture("agent-cli/claude/stream-json.write-file-run.ndjson");
        let out = parse_claude_stream_json(&stdout, "", &exit(0));
        assert!(out.success);
        assert_eq!(
            out.outcome,
            "Added `RELEASING.md` with the three release steps: bump the version, tag it, push the tag."
        );
        assert_eq!(out.error, None);
        assert_cost(out.cost_usd, 0.0871235);
        // Every kind, summed over `modelUsage` (sonnet's own and the haiku calls beside it).
        let sonnet = TokenCounts { input: 10, cache_write: 6346, cache_read: 12640, output: 159 };
        let haiku = TokenCounts { input: 2811, output: 220, ..TokenCounts::default() };
        assert_eq!(
            out.model_tokens,
            [("claude-haiku-4-5-20251001".to_owned(), haiku), ("claude-sonnet-4-5-20250929".to_owned(), sonnet)]
        );
        assert_eq!(out.tokens(), TokenCounts { input: 2821, cache_write: 6346, cache_read: 12640, output: 379 });
        assert_eq!(out.session_id.as_deref(), Some("5f0c7d2e-9a41-4b8e-b3d6-2c8e71a40f19"));
        assert_eq!(out.model.as_deref(), Some("claude-sonnet-4-5-20250929"));
        // success is decided on is_error, not the exit code
        assert!(parse_claude_stream_json(&stdout, "", &exit(1)).success);
        // nor on how the process ended: stopped by the shim after its result, it stands
        let stopped = ExitRecord { exit_code: None, signal: Some(15), stopped_after_result: true, ..exit(0) };
        assert_eq!(parse_claude_stream_json(&stdout, "", &stopped), out);
    }

    #[test]
    fn claude_error_max_turns_fixture_has_no_result_key() {
        let stdout = fixture("agent-cli/claude/result.error_max_turns.json");
        let out = parse_claude_stream_json(&stdout, "", &exit(0));
        assert!(!out.success);
        assert_eq!(out.outcome, "");
        assert_eq!(out.error.as_deref(), Some("error_max_turns: Reached maximum number of turns (2)"));
        assert_cost(out.cost_usd, 0.1290475);
        assert_eq!((out.input_tokens, out.output_tokens), (14, 502));
        assert_eq!(out.session_id.as_deref(), Some("6a7b8c9d-0e1f-4a2b-8c3d-4e5f6a7b8c9d"));
        // the same object pretty-printed (`--output-format json`) parses the same
        let value: Value = serde_json::from_str(&stdout).unwrap();
        let pretty = serde_json::to_string_pretty(&value).unwrap();
        assert_eq!(parse_claude_stream_json(&pretty, "", &exit(0)), out);
        // and so does an array of messages
        let array = format!("[{{\"type\":\"system\",\"session_id\":\"s\"}},{stdout}]");
        assert_eq!(parse_claude_stream_json(&array, "", &exit(0)), out);
    }

    #[test]
    fn claude_usage_without_model_usage_counts_cache_tokens_apart() {
        let stdout = r#"{"type":"result","subtype":"success","is_error":false,"result":"ok","usage":{"input_tokens":3,"cache_creation_input_tokens":2000,"cache_read_input_tokens":40000,"output_tokens":120}}"#;
        let out = parse_claude_stream_json(stdout, "", &exit(0));
        assert_eq!(out.tokens(), TokenCounts { input: 3, cache_write: 2000, cache_read: 40000, output: 120 });
        assert!(out.model_tokens.is_empty());
        assert_eq!(out.tokens().total(), 42123);
    }

    #[test]
    fn claude_older_cost_field_and_error_result_text() {
        let stdout = r#"{"type":"result","subtype":"success","is_error":true,"result":"API Error: 500","cost_usd":0.5,"session_id":"s"}"#;
        let out = parse_claude_stream_json(stdout, "", &exit(0));
        assert!(!out.success);
        assert_eq!(out.error.as_deref(), Some("API Error: 500"));
        assert_eq!(out.cost_usd, Some(0.5));
    }

    #[test]
    fn claude_without_result_event_fails_with_stderr_tail() {
        let stdout = "{\"type\":\"system\",\"subtype\":\"init\",\"session_id\":\"s1\"}\nnot json\n";
        let mut record = exit(1);
        let out = parse_claude_stream_json(stdout, "boom: invalid api key\n", &record);
        assert!(!out.success);
        assert_eq!(out.error.as_deref(), Some("agent produced no result event (exit code 1): boom: invalid api key"));
        assert_eq!(out.session_id.as_deref(), Some("s1"));
        record.exit_code = None;
        record.spawn_error = Some("agent binary `claude` not found".into());
        let out = parse_claude_stream_json("", "", &record);
        assert_eq!(out.error.as_deref(), Some("agent produced no result event (agent binary `claude` not found)"));
    }

    #[test]
    fn codex_fixture() {
        let stdout = fixture("agent-cli/codex/exec-json.jsonl");
        let out = parse_codex_jsonl(&stdout, "", &exit(0));
        assert!(out.success);
        assert_eq!(out.outcome, "Yes: `CHANGELOG.md` sits in the repository root, next to `Cargo.toml`.");
        // `input_tokens` 18342 includes the 11776 `cached_input_tokens`: those are cache reads.
        assert_eq!(out.tokens(), TokenCounts { input: 6566, cache_write: 0, cache_read: 11776, output: 187 });
        assert_eq!(out.cost_usd, None);
        assert_eq!(out.session_id.as_deref(), Some("01980c4e-7a2b-7c3d-9e4f-5a6b7c8d9e0f"));
    }

    #[test]
    fn codex_failures() {
        let failed = r#"{"type":"thread.started","thread_id":"t"}
{"type":"turn.started"}
{"type":"turn.failed","error":{"message":"model overloaded"}}"#;
        let out = parse_codex_jsonl(failed, "", &exit(1));
        assert!(!out.success);
        assert_eq!(out.error.as_deref(), Some("model overloaded"));

        let errored = "{\"type\":\"error\",\"message\":\"stream disconnected\"}\n";
        assert_eq!(parse_codex_jsonl(errored, "", &exit(1)).error.as_deref(), Some("stream disconnected"));

        let out = parse_codex_jsonl("", "Error: not logged in\n", &exit(1));
        assert!(!out.success);
        assert_eq!(
            out.error.as_deref(),
            Some("agent produced no turn.completed event (exit code 1): Error: not logged in")
        );
    }

    #[test]
    fn gemini_fixture_is_not_mistaken_for_claude() {
        let stdout = fixture("agent-cli/gemini/json-output.json");
        let out = parse_claude_stream_json(&stdout, "", &exit(0));
        assert!(!out.success);
        assert_eq!(out.outcome, "");
        assert!(out.error.unwrap().starts_with("agent produced no result event"));
    }

    #[test]
    fn codex_usage_is_summed_over_turns_by_kind() {
        let two = "{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":100,\"cached_input_tokens\":60,\"output_tokens\":5}}\n\
                   {\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":50,\"output_tokens\":2}}\n";
        let out = parse_codex_jsonl(two, "", &exit(0));
        assert_eq!(out.tokens(), TokenCounts { input: 90, cache_write: 0, cache_read: 60, output: 7 });
        // A report with more cached than input (a broken report) is no underflow.
        let odd = "{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":1,\"cached_input_tokens\":9}}\n";
        assert_eq!(parse_codex_jsonl(odd, "", &exit(0)).tokens().input, 0);
    }

    #[test]
    fn gemini_fixture_tokens_by_kind_without_a_cost() {
        let stdout = fixture("agent-cli/gemini/json-output.json");
        let out = parse_gemini_json(&stdout, "", &exit(0));
        assert!(out.success);
        assert_eq!(out.error, None);
        assert_eq!(
            out.outcome,
            "The status page polls every check once a minute and turns a tile red after two misses."
        );
        assert_eq!(out.cost_usd, None, "gemini reports no cost");
        assert_eq!(out.model.as_deref(), Some("gemini-2.5-pro"));
        // prompt 9120 of which 4410 cached; candidates 164 + thoughts 607 are output.
        let tokens = TokenCounts { input: 4710, cache_write: 0, cache_read: 4410, output: 771 };
        assert_eq!(out.tokens(), tokens);
        assert_eq!(out.tokens().total(), 9891, "the `total` gemini reports");
        assert_eq!(out.model_tokens, [("gemini-2.5-pro".to_owned(), tokens)]);
        // Whatever gemini prints before its object is skipped.
        let noisy = format!("Loaded cached credentials.\n{stdout}");
        assert_eq!(parse_gemini_json(&noisy, "", &exit(0)), out);
    }

    #[test]
    fn gemini_two_models_are_kept_apart() {
        let out = parse_gemini_json(&fixture("agent-cli/gemini/json-output.two-models.json"), "", &exit(0));
        assert!(out.success);
        assert!(out.outcome.starts_with("Added `docs/STATUS.md`"), "{}", out.outcome);
        assert_eq!(out.model.as_deref(), Some("gemini-2.5-pro"), "the model with the most tokens");
        assert_eq!(
            out.model_tokens,
            [
                ("gemini-2.5-flash".to_owned(), TokenCounts { input: 1840, output: 52, ..TokenCounts::default() }),
                (
                    "gemini-2.5-pro".to_owned(),
                    TokenCounts { input: 6110, cache_write: 0, cache_read: 18200, output: 1693 }
                ),
            ]
        );
        assert_eq!(out.tokens(), TokenCounts { input: 7950, cache_write: 0, cache_read: 18200, output: 1745 });
    }

    #[test]
    fn gemini_errors_and_missing_output() {
        let out = parse_gemini_json(&fixture("agent-cli/gemini/json-output.error.json"), "", &exit(53));
        assert!(!out.success);
        assert_eq!(
            out.error.as_deref(),
            Some("FatalTurnLimitedError: Reached max session turns for this session. Increase the number of turns by specifying maxSessionTurns in settings.json.")
        );
        // What it used before failing still counts.
        assert_eq!(out.tokens(), TokenCounts { input: 8200, cache_write: 0, cache_read: 0, output: 410 });

        let out = parse_gemini_json("", "Error: GEMINI_API_KEY is not set\n", &exit(1));
        assert!(!out.success);
        assert_eq!(
            out.error.as_deref(),
            Some("agent produced no JSON result (exit code 1): Error: GEMINI_API_KEY is not set")
        );
        // claude's stream is no gemini result either.
        let claude = fixture("agent-cli/claude/stream-json.write-file-run.ndjson");
        assert!(!parse_gemini_json(&claude, "", &exit(0)).success);
    }

    #[test]
    fn command_output() {
        let ok = parse_command_output("done\n", "warn\n", &exit(0));
        assert!(ok.success);
        assert_eq!(ok.outcome, "done\n");
        assert_eq!(ok.error, None);

        let long = "é".repeat(STDOUT_TAIL_CHARS + 10);
        let failed = parse_command_output(&long, "bad thing\n", &exit(2));
        assert!(!failed.success);
        assert_eq!(failed.outcome.chars().count(), STDOUT_TAIL_CHARS);
        assert_eq!(failed.error.as_deref(), Some("exit code 2: bad thing"));

        let mut timed = exit(0);
        timed.exit_code = None;
        timed.signal = Some(15);
        timed.timed_out = true;
        assert_eq!(
            parse_command_output("", "", &timed).error.as_deref(),
            Some("killed by signal 15 after the timeout")
        );
    }

    #[test]
    fn tail_respects_char_boundaries() {
        assert_eq!(tail("héllo", 3), "llo");
        assert_eq!(tail("héllo", 4), "éllo");
        assert_eq!(tail("hi", 10), "hi");
        assert_eq!(tail("hi", 0), "");
    }
}
