//! The snapshot encoding of an [`ExecutionState`]: its JSON, less every field of a plan step
//! or a step result that holds the value its decoder would fill in anyway, with the step
//! results last and listed in a header so that a load need not parse them.
//!
//! A snapshot is the whole state, and every CLI process that loads an execution without a
//! server decodes one (issue 14.8). Most of it is the plan's steps and the steps' results,
//! and most of their fields are at their defaults (`"depends_on": []`, `"commit_hash": ""`,
//! `"cost_usd": 0.0`, …): leaving those out makes a snapshot of a 5,000-step plan about 40%
//! shorter, and quicker to read and to decode. The state's own JSON (the API's, agent-baton's
//! `execution_state.json` shape) keeps every field; only the snapshot leaves them out. (The
//! applied idempotency keys are in neither: the journal holds them, see
//! `ExecutionState::applied_keys`.)
//!
//! `serde_json::from_str::<ExecutionState>` reads both forms, because a field is left out
//! only when serde's default for it, learned by decoding a record that names only the
//! required fields, is exactly the value it holds. [`decode`] reads a snapshot quicker. The
//! text opens with the model fingerprint of the build that wrote it, a CRC-32 of the rest of
//! the text, the step results' statuses (one letter each), the length of each result's text
//! and the length of the whole `step_results` object, which is the text's last key:
//!
//! ```text
//! {"$model":"…","$crc32":"…","$statuses":"cc…d","$sizes":"171,171,…","$results":N,…,"step_results":{…}}
//! ```
//!
//! (keys the state's decoder ignores). For a snapshot of this build's model whose text still
//! matches its checksum, [`decode`] parses the text before `step_results` only, copies the
//! results' texts once into one shared buffer, and cuts it at the listed lengths: each result
//! is left undecoded until it is read (`model::lazy_result`), its status taken from the list.
//! Scanning every result's text, and allocating and copying each, had been a sixth of a
//! `dispatched` call at step 2,500 of 5,000. Text changed since it was written (edited by
//! hand, damaged on disk), or whose lists do not fit its results, is decoded in full, so what
//! no longer decodes is an error at load, never a panic at the first read. [`encode`] writes
//! a result still undecoded as the text it was read from. This module never does IO.

use std::fmt::Write as _;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::model::lazy_result::{self, LazyResult};
use crate::model::plan::PlanStep;
use crate::model::state::{ExecutionState, StepResult, StepResults};
use crate::model::step_result::StepStatus;

/// How a snapshot written by this build opens: its model fingerprint (a hash of the model's
/// sources, `Cargo.lock` and the version, made by `build.rs`) as the first key.
const OPENING: &str = concat!("{\"$model\":\"", env!("BATON_MODEL_FINGERPRINT"), "\"");

/// The key that follows [`OPENING`]: the CRC-32 (8 lowercase hex digits) of every byte after
/// its closing quote.
const CHECKSUM_KEY: &str = ",\"$crc32\":\"";

/// The key that opens the text after the checksum: the step results' statuses, one letter
/// each (`model::lazy_result::status_code`) in the order the results' texts come, then a
/// closing quote.
const STATUSES_KEY: &str = ",\"$statuses\":\"";

/// The key after the statuses: each result's text length in bytes (decimal, comma-separated,
/// in the same order), then a closing quote.
const SIZES_KEY: &str = ",\"$sizes\":\"";

/// The key after the sizes: the length in bytes of the `step_results` object's text, which
/// ends the snapshot (before its closing brace).
const RESULTS_KEY: &str = ",\"$results\":";

/// The state's last key in a snapshot of this build.
const RESULTS_FIELD: &str = ",\"step_results\":";

/// The smallest plan step a decoder accepts: only its required fields.
const MINIMAL_STEP: &str = r#"{"step_id": "", "agent_name": "", "task_description": ""}"#;

/// The smallest step result a decoder accepts: only its required fields.
const MINIMAL_RESULT: &str = r#"{"step_id": "", "agent_name": "", "status": "pending", "attempt": 0}"#;

/// `state` as snapshot text: its JSON with each plan step's and each step result's defaulted
/// fields left out, opened by this build's model fingerprint, the text's checksum and the
/// results' statuses and lengths, and closed by the results (see the module doc); what
/// [`decode`] (or `serde_json::from_str::<ExecutionState>`) reads back as a state equal to
/// `state`. A result still undecoded is written as the text it was read from, which is what
/// this build writes for it.
///
/// # Errors
/// What serializing the state to JSON can fail with (a map key that is not a string; none of
/// the state's are).
pub fn encode(state: &ExecutionState) -> serde_json::Result<String> {
    let mut value = lazy_result::without_results(|| serde_json::to_value(state))?;
    let step_defaults = defaults::<PlanStep>(MINIMAL_STEP)?;
    let result_defaults = defaults::<StepResult>(MINIMAL_RESULT)?;
    if let Some(phases) = value.pointer_mut("/plan/phases").and_then(Value::as_array_mut) {
        let steps = phases.iter_mut().filter_map(|p| p.get_mut("steps").and_then(Value::as_array_mut));
        for step in steps.flatten() {
            leave_out_defaults(step, &step_defaults);
        }
    }
    if let Some(fields) = value.as_object_mut() {
        fields.remove("step_results");
    }
    let count = state.step_results.len();
    let (mut results, mut statuses, mut sizes) = (String::from("{"), String::with_capacity(count), String::new());
    for (i, (id, result)) in state.step_results.iter().enumerate() {
        if i > 0 {
            results.push(',');
            sizes.push(',');
        }
        results.push_str(&serde_json::to_string(id)?);
        results.push(':');
        let start = results.len();
        match result.snapshot_text() {
            Some(text) => results.push_str(text),
            None => {
                let mut record = serde_json::to_value(result.get())?;
                leave_out_defaults(&mut record, &result_defaults);
                results.push_str(&serde_json::to_string(&record)?);
            }
        }
        // Writing to a `String` cannot fail.
        let _ = write!(sizes, "{}", results.len() - start);
        statuses.push(lazy_result::status_code(result.status()));
    }
    results.push('}');
    let body = serde_json::to_string(&value)?;
    // The state serializes as an object: its keys lie between the braces.
    let inner = body.strip_prefix('{').and_then(|b| b.strip_suffix('}')).unwrap_or(&body);
    let mut tail = String::with_capacity(inner.len() + results.len() + statuses.len() + sizes.len() + 64);
    for (key, list) in [(STATUSES_KEY, &statuses), (SIZES_KEY, &sizes)] {
        tail.push_str(key);
        tail.push_str(list);
        tail.push('"');
    }
    let _ = write!(tail, "{RESULTS_KEY}{}", results.len());
    if !inner.is_empty() {
        tail.push(',');
        tail.push_str(inner);
    }
    tail.push_str(RESULTS_FIELD);
    tail.push_str(&results);
    tail.push('}');
    Ok(format!("{OPENING}{CHECKSUM_KEY}{:08x}\"{tail}", crc32fast::hash(tail.as_bytes())))
}

/// The state a snapshot's text holds. A snapshot written by a build with this build's model
/// fingerprint, whose text matches its checksum and whose lists fit its results, keeps its
/// step results undecoded until each is read; any other text (an older build's snapshot, one
/// without a fingerprint, one changed since it was written) is decoded in full, so what does
/// not decode is this error.
///
/// # Errors
/// The text is not an [`ExecutionState`]'s JSON (serde's error names the line and column).
pub fn decode(text: &str) -> serde_json::Result<ExecutionState> {
    // `None` cannot happen for text this build wrote and that still matches its checksum; if
    // it does, the full decode below says what is wrong, or reads it.
    if let Some(state) = this_builds_body(text).and_then(|body| decode_deferred(text, body)) {
        return Ok(state);
    }
    serde_json::from_str(text)
}

/// A snapshot of this build (`body`: its text after the checksum) with its results deferred:
/// the text before `step_results` parsed, the results cut at their listed lengths. `None`
/// when a list is missing or does not fit the text.
fn decode_deferred(text: &str, body: &str) -> Option<ExecutionState> {
    let (statuses, rest) = quoted(body, STATUSES_KEY)?;
    let statuses = lazy_result::statuses_of(statuses)?;
    let (sizes, rest) = quoted(rest, SIZES_KEY)?;
    let rest = rest.strip_prefix(RESULTS_KEY)?;
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let results_len: usize = rest.get(..digits)?.parse().ok()?;
    let open = text.strip_suffix('}')?;
    let results_at = open.len().checked_sub(results_len)?;
    let head = open.get(..results_at)?.strip_suffix(RESULTS_FIELD)?;
    let mut before_results = String::with_capacity(head.len() + 1);
    before_results.push_str(head);
    before_results.push('}');
    let mut state: ExecutionState = serde_json::from_str(&before_results).ok()?;
    state.step_results = cut_results(open.get(results_at..)?, &statuses, sizes)?;
    Some(state)
}

/// The value of the string key `key` that opens `text`, and the text after its closing quote.
fn quoted<'t>(text: &'t str, key: &str) -> Option<(&'t str, &'t str)> {
    let rest = text.strip_prefix(key)?;
    let end = rest.find('"')?;
    Some((rest.get(..end)?, rest.get(end + 1..)?))
}

/// The results of the `step_results` object `results` (as [`encode`] writes it: entries in
/// key order, no white space), each deferred with its listed status and its text's listed
/// size. `None` when the lists do not fit the object: another count, a size that does not end
/// at an object's closing brace followed by a separator, keys out of order or escaped.
fn cut_results(results: &str, statuses: &[StepStatus], sizes: &str) -> Option<StepResults> {
    if statuses.is_empty() {
        return (results == "{}" && sizes.is_empty()).then(StepResults::new);
    }
    let all: Arc<str> = Arc::from(results);
    let bytes = all.as_bytes();
    let mut map = StepResults::with_capacity(statuses.len());
    let mut sizes = sizes.split(',');
    let mut at = 1; // after the opening brace
    if bytes.first() != Some(&b'{') {
        return None;
    }
    for &status in statuses {
        let size: usize = sizes.next()?.parse().ok()?;
        if bytes.get(at) != Some(&b'"') {
            return None;
        }
        let key_end = at + 1 + all.get(at + 1..)?.find('"')?;
        let key = all.get(at + 1..key_end)?;
        if key.contains('\\') || bytes.get(key_end + 1) != Some(&b':') {
            return None;
        }
        let start = key_end + 2;
        let end = start.checked_add(size)?;
        let value = all.get(start..end)?;
        let separator = bytes.get(end).copied();
        if !value.starts_with('{') || !value.ends_with('}') || !matches!(separator, Some(b',' | b'}')) {
            return None;
        }
        if map.try_append(key.to_owned(), LazyResult::deferred(&all, start..end, status)).is_some() {
            return None;
        }
        at = end + 1;
    }
    (sizes.next().is_none() && at == all.len() && bytes.last() == Some(&b'}')).then_some(map)
}

/// Whether `text` is a snapshot written by a build with this build's model fingerprint and
/// unchanged since: the rest of it matches the checksum it opens with.
#[cfg(test)]
fn is_this_builds(text: &str) -> bool {
    this_builds_body(text).is_some()
}

/// The text after the checksum (what it is the checksum of) when `text` is a snapshot written
/// by a build with this build's model fingerprint and unchanged since.
fn this_builds_body(text: &str) -> Option<&str> {
    let rest = text.strip_prefix(OPENING)?.strip_prefix(CHECKSUM_KEY)?;
    let (sum, body) = (rest.get(..8)?, rest.get(8..)?.strip_prefix('"')?);
    let written = sum.bytes().all(|b| b.is_ascii_hexdigit()).then(|| u32::from_str_radix(sum, 16).ok()).flatten();
    (body.starts_with([',', '}']) && written == Some(crc32fast::hash(body.as_bytes()))).then_some(body)
}

/// The fields serde fills in when a `T` is decoded from `minimal` (a record of only its
/// required fields), with the values it fills in.
fn defaults<T: DeserializeOwned + Serialize>(minimal: &str) -> serde_json::Result<Map<String, Value>> {
    let required: Map<String, Value> = serde_json::from_str(minimal)?;
    let Value::Object(mut all) = serde_json::to_value(serde_json::from_str::<T>(minimal)?)? else {
        return Ok(Map::new());
    };
    all.retain(|key, _| !required.contains_key(key));
    Ok(all)
}

/// Removes from the object `record` every field equal to its default in `defaults`. A
/// negative zero stays: it is equal to the default `0.0` but does not decode as it.
fn leave_out_defaults(record: &mut Value, defaults: &Map<String, Value>) {
    if let Value::Object(fields) = record {
        fields.retain(|key, value| {
            let negative_zero = value.as_f64().is_some_and(|f| f == 0.0 && f.is_sign_negative());
            negative_zero || defaults.get(key) != Some(value)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::plan::{MachinePlan, PlanPhase};

    fn state() -> ExecutionState {
        let mut plan = MachinePlan::from_json(r#"{"task_id":"t","task_summary":"s"}"#).unwrap();
        let mut phase = PlanPhase::new(1, "P");
        phase.steps.push(Box::new(PlanStep::new("1.1", "dev", "plain")));
        let mut custom = PlanStep::new("1.2", "dev", "custom");
        custom.model = "opus".into();
        custom.depends_on = vec!["1.1".into()];
        custom.step_type = "testing".into();
        custom.extra.insert("model_hint".into(), Value::from(""));
        phase.steps.push(Box::new(custom));
        plan.phases.push(phase);
        let mut state = ExecutionState::fresh(plan, "2026-12-03T00:00:00+00:00");
        let result = |id: &str, cost: f64| -> StepResult {
            serde_json::from_value(serde_json::json!({
                "step_id": id, "agent_name": "dev", "status": "complete", "attempt": 1,
                "cost_usd": cost, "dispatched_at": "2026-12-03T00:00:01+00:00"
            }))
            .unwrap()
        };
        state.step_results.insert("1.1".into(), result("1.1", 0.0).into());
        state.step_results.insert("1.2".into(), result("1.2", -0.0).into());
        state
    }

    #[test]
    fn a_snapshot_leaves_out_defaulted_fields_and_decodes_to_the_same_state() {
        let state = state();
        let snapshot = encode(&state).unwrap();
        let back: ExecutionState = serde_json::from_str(&snapshot).unwrap();
        assert_eq!(back, state);
        assert_eq!(decode(&snapshot).unwrap(), state);
        let value: Value = serde_json::from_str(&snapshot).unwrap();
        let plain = &value["plan"]["phases"][0]["steps"][0];
        let keys: Vec<&str> = plain.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            ["agent_name", "step_id", "task_description"],
            "a step at its defaults keeps its required fields"
        );
        let custom = &value["plan"]["phases"][0]["steps"][1];
        assert_eq!((&custom["model"], &custom["step_type"]), (&Value::from("opus"), &Value::from("testing")));
        assert_eq!(custom["depends_on"], serde_json::json!(["1.1"]));
        assert!(custom.get("deliverables").is_none(), "{custom}");
        assert_eq!(custom["model_hint"], Value::from(""), "an unknown key is kept verbatim, even empty");
        let result = &value["step_results"]["1.1"];
        assert!(result.get("commit_hash").is_none() && result.get("cost_usd").is_none(), "{result}");
        assert_eq!(result["dispatched_at"], Value::from("2026-12-03T00:00:01+00:00"));
        assert!(snapshot.len() < serde_json::to_string(&state).unwrap().len(), "{snapshot}");
    }

    #[test]
    fn a_negative_zero_cost_keeps_its_sign() {
        let state = state();
        let back = decode(&encode(&state).unwrap()).unwrap();
        assert!(back.step_results.get("1.2").unwrap().cost_usd.is_sign_negative());
        assert!(!back.step_results.get("1.1").unwrap().cost_usd.is_sign_negative());
    }

    #[test]
    fn a_snapshot_of_this_build_defers_its_results_and_any_other_text_does_not() {
        let state = state();
        let snapshot = encode(&state).unwrap();
        assert!(snapshot.starts_with(r#"{"$model":""#), "{}", &snapshot[..40]);
        let lazy = decode(&snapshot).unwrap();
        assert!(lazy.step_results.values().all(|r| !r.is_decoded()));
        assert_eq!(lazy.step_status("1.2"), crate::model::state::StepStatus::Complete);
        assert_eq!(lazy, state);

        // Another build's snapshot (another fingerprint), and a state's plain JSON: decoded in full.
        let other = snapshot.replacen(env!("BATON_MODEL_FINGERPRINT"), "0000000000000000", 1);
        let plain = serde_json::to_string(&state).unwrap();
        for text in [&other, &plain] {
            let eager = decode(text).unwrap();
            assert!(eager.step_results.values().all(|r| r.is_decoded()), "{}", &text[..40]);
            assert_eq!(eager, state);
        }
        // ... so a result that does not decode is an error at once, naming what is wrong.
        let broken = other.replacen(r#""attempt":1"#, r#""attempt":"one""#, 1);
        let err = decode(&broken).unwrap_err();
        assert!(err.to_string().contains("invalid type: string \"one\""), "{err}");
    }

    /// The flaw a fresh-clone tester found: a snapshot of this build edited by hand so that a
    /// result no longer decoded loaded fine (its status still read), and `execute status` or
    /// `replay` then panicked at the result's first read. Text that no longer matches its
    /// checksum is decoded in full: an edit that still decodes is read as edited, one that
    /// does not is an error at load.
    #[test]
    fn a_snapshot_of_this_build_changed_since_it_was_written_is_decoded_in_full() {
        let state = state();
        let snapshot = encode(&state).unwrap();
        let broken = snapshot.replacen(r#""attempt":1"#, r#""attempt":"one""#, 1);
        assert!(broken.starts_with(OPENING) && !is_this_builds(&broken));
        let err = decode(&broken).unwrap_err();
        assert!(err.to_string().contains("invalid type: string \"one\""), "{err}");

        let edited = snapshot.replacen(r#""attempt":1"#, r#""attempt":2"#, 1);
        let read = decode(&edited).unwrap();
        assert!(read.step_results.values().all(|r| r.is_decoded()));
        assert_eq!(read.step_results.values().map(|r| r.attempt).max(), Some(2));

        // The checksum itself must be whole, hex and the text's.
        let sum_at = OPENING.len() + CHECKSUM_KEY.len();
        let sum = &snapshot[sum_at..sum_at + 8];
        for bad in ["zzzzzzzz", "+0000000", "0000000", &format!("{sum}0")] {
            let text = format!("{}{bad}{}", &snapshot[..sum_at], &snapshot[sum_at + 8..]);
            assert!(!is_this_builds(&text), "{bad}");
            assert_eq!(decode(&text).unwrap(), state, "{bad}");
        }
    }

    /// A snapshot lists its results' statuses so a load does not parse each result's text a
    /// second time for it; each deferred result's status is then its decoded status. A list
    /// that does not fit the results (never written by this build; made here with a checksum
    /// to match) is decoded in full, never read with another result's status.
    #[test]
    fn a_snapshot_lists_its_results_statuses_and_a_list_that_does_not_fit_is_decoded_in_full() {
        let mut state = state();
        state.step_results.get_mut("1.1").unwrap().status = StepStatus::Failed;
        let snapshot = encode(&state).unwrap();
        let body = this_builds_body(&snapshot).unwrap();
        assert!(body.starts_with(r#","$statuses":"fc","#), "{}", &body[..30]);
        let lazy = decode(&snapshot).unwrap();
        for (id, result) in lazy.step_results.iter() {
            assert!(!result.is_decoded(), "{id}");
            assert_eq!(result.status(), result.get().status, "{id}");
        }
        assert_eq!(lazy, state);

        let with_sum = |body: &str| format!("{OPENING}{CHECKSUM_KEY}{:08x}\"{body}", crc32fast::hash(body.as_bytes()));
        for list in ["f", "fcc", "fx", ""] {
            let text = with_sum(&body.replacen("fc", list, 1));
            assert!(is_this_builds(&text), "{list}");
            let read = decode(&text).unwrap();
            assert!(read.step_results.values().all(|r| r.is_decoded()), "{list}");
            assert_eq!(read, state, "{list}");
        }
    }

    /// The results' listed sizes and the results object's length must fit the text exactly:
    /// any that does not (never written by this build; made here with a checksum to match) has
    /// the text decoded in full, never a result cut at the wrong place.
    #[test]
    fn sizes_or_a_results_length_that_do_not_fit_are_decoded_in_full() {
        let state = state();
        let snapshot = encode(&state).unwrap();
        let body = this_builds_body(&snapshot).unwrap();
        let (_, rest) = quoted(body, STATUSES_KEY).unwrap();
        let (sizes, rest) = quoted(rest, SIZES_KEY).unwrap();
        let listed: Vec<usize> = sizes.split(',').map(|s| s.parse().unwrap()).collect();
        assert_eq!(listed.len(), 2);
        let first = state.step_results.get("1.1").unwrap();
        let mut written = serde_json::to_value(first.get()).unwrap();
        leave_out_defaults(&mut written, &defaults::<StepResult>(MINIMAL_RESULT).unwrap());
        assert_eq!(listed[0], serde_json::to_string(&written).unwrap().len(), "a size is its result's text length");
        let length = rest.strip_prefix(RESULTS_KEY).unwrap();
        let length = &length[..length.find(',').unwrap()];

        let with_sum = |body: &str| format!("{OPENING}{CHECKSUM_KEY}{:08x}\"{body}", crc32fast::hash(body.as_bytes()));
        let (a, b) = (listed[0], listed[1]);
        let bad_sizes = [
            format!("{},{b}", a - 1),
            format!("{},{b}", a + 1),
            format!("{a},{}", b + 1),
            format!("{a}"),
            format!("{a},{b},{b}"),
            format!("{a},x"),
            String::new(),
        ];
        let bad_lengths = [(length.parse::<usize>().unwrap() + 1).to_string(), "0".into(), "99999999".into()];
        let texts = bad_sizes.iter().map(|s| body.replacen(sizes, s, 1)).chain(
            bad_lengths
                .iter()
                .map(|l| body.replacen(&format!("{RESULTS_KEY}{length}"), &format!("{RESULTS_KEY}{l}"), 1)),
        );
        for changed in texts {
            let text = with_sum(&changed);
            assert!(is_this_builds(&text));
            let read = decode(&text).unwrap();
            assert!(read.step_results.values().all(|r| r.is_decoded()), "{}", &changed[..80]);
            assert_eq!(read, state);
        }
    }

    /// A step id that JSON must escape is a key the cutter does not read: that snapshot is
    /// decoded in full, and reads back the same.
    #[test]
    fn a_result_key_with_an_escape_is_decoded_in_full() {
        let mut state = state();
        let mut odd = state.step_results.get("1.1").unwrap().get().clone();
        odd.step_id = "1.\"3\\".into();
        state.step_results.insert(odd.step_id.clone(), odd.into());
        let snapshot = encode(&state).unwrap();
        assert!(is_this_builds(&snapshot));
        let read = decode(&snapshot).unwrap();
        assert!(read.step_results.values().all(|r| r.is_decoded()));
        assert_eq!(read, state);
    }

    /// A state with no results, and one whose results are all decoded, round-trip too.
    #[test]
    fn a_state_without_results_round_trips() {
        let mut state = state();
        state.step_results = StepResults::new();
        let snapshot = encode(&state).unwrap();
        assert!(snapshot.ends_with(r#","step_results":{}}"#), "{snapshot}");
        assert_eq!(decode(&snapshot).unwrap(), state);
    }

    /// Writing a snapshot of a state loaded from one does not decode its results: each is
    /// written as the text it was read from, and the new snapshot is the old one's text.
    #[test]
    fn a_snapshot_of_a_loaded_state_writes_undecoded_results_as_read() {
        let state = state();
        let snapshot = encode(&state).unwrap();
        let mut loaded = decode(&snapshot).unwrap();
        let again = encode(&loaded).unwrap();
        assert!(loaded.step_results.values().all(|r| !r.is_decoded()), "encoding decoded a result");
        assert_eq!(again, snapshot);
        // A result read is still written as read; one changed is written as changed.
        assert_eq!(loaded.step_results.get("1.1").unwrap().attempt, 1);
        assert_eq!(encode(&loaded).unwrap(), snapshot);
        loaded.step_results.get_mut("1.2").unwrap().attempt = 7;
        let changed = decode(&encode(&loaded).unwrap()).unwrap();
        assert_eq!(changed.step_results.get("1.2").unwrap().attempt, 7);
        assert_eq!(changed, loaded);
    }

    /// `StepResults` is a sorted `Vec`, not a `BTreeMap`: whatever order the input has, and
    /// whatever key it repeats, it decodes to the map a `BTreeMap` would hold (the last value
    /// of a repeated key stands), and serializes in the same order.
    #[test]
    fn step_results_decode_any_order_as_a_btreemap_would() {
        let result = |id: &str, attempt: u32| serde_json::json!({"step_id": id, "agent_name": "dev", "status": "complete", "attempt": attempt});
        let text = serde_json::json!({}).to_string();
        assert!(serde_json::from_str::<crate::model::state::StepResults>(&text).unwrap().is_empty());
        // Out of order, and `1.2` twice: built by hand, as `json!` would sort and merge them.
        let text = format!(
            r#"{{"1.2": {}, "1.10": {}, "1.1": {}, "1.2": {}}}"#,
            result("1.2", 1),
            result("1.10", 1),
            result("1.1", 1),
            result("1.2", 3)
        );
        let lite: crate::model::state::StepResults = serde_json::from_str(&text).unwrap();
        let tree: std::collections::BTreeMap<String, StepResult> = serde_json::from_str(&text).unwrap();
        let keys: Vec<&str> = lite.keys().map(String::as_str).collect();
        assert_eq!(keys, ["1.1", "1.10", "1.2"]);
        assert_eq!(lite.get("1.2").map(|r| r.attempt), Some(3), "the last value of a repeated key stands");
        assert_eq!(serde_json::to_value(&lite).unwrap(), serde_json::to_value(&tree).unwrap());
        let in_order = serde_json::to_string(&lite).unwrap();
        assert!(in_order.find("\"1.10\"") < in_order.find("\"1.2\""), "{in_order}");
    }

    #[test]
    fn the_fingerprint_must_be_a_whole_key() {
        let state = state();
        let snapshot = encode(&state).unwrap();
        // A longer fingerprint that starts with this build's is another build's.
        let longer =
            snapshot.replacen(env!("BATON_MODEL_FINGERPRINT"), concat!(env!("BATON_MODEL_FINGERPRINT"), "0"), 1);
        assert!(!is_this_builds(&longer));
        assert!(is_this_builds(&snapshot));
    }
}
