//! [`LazyResult`]: a step result as [`ExecutionState::step_results`] holds it, which a state
//! decoded from a snapshot of this build decodes only when it is first read.
//!
//! Every CLI process that runs without a server decodes the whole newest snapshot of its
//! execution, and most of a large one is the results of steps that are long done (4,560 of
//! them at step 4,560 of a 5,000-step plan) which the call never reads: their allocation and
//! first touch were a third of the call (issue 14.8). Inside `deferred` (what
//! `model::snapshot::decode` uses for a snapshot written by a build with this build's model
//! fingerprint) a result keeps its JSON text and its status, the one field read for every
//! step (the phase tally, dependencies); the rest is decoded on first read. The status comes
//! from the list of statuses the snapshot opens with (one letter per result, in the order of
//! their texts, `status_code`), so a result's text is scanned once, to find where it ends,
//! and not parsed a second time for its status (that second parse was a quarter of loading a
//! 5,000-step execution's results). Everywhere else,
//! and always for text from another build, a result is decoded in full as it is read, so a
//! result that does not decode is the decoder's error, as for any other field.
//!
//! Reading a deferred result cannot fail: its text was written by this build's serializer
//! from a [`StepResult`] (the snapshot's fingerprint says so) and has not changed since (its
//! checksum says so: `model::snapshot` decodes text edited after it was written in full, so a
//! result that no longer decodes is an error at load), and the engine's property test
//! (`engine::tests::props`) checks over random runs that every result of a snapshot reads
//! back as the value written. Owns: the deferral flag and the listed statuses (per thread,
//! set only for the duration of one decode), and the statuses' letters. Never: does IO, or
//! hands out its text.
//!
//! [`ExecutionState::step_results`]: crate::model::state::ExecutionState::step_results

use std::cell::RefCell;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::OnceLock;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

use crate::model::step_result::{StepResult, StepStatus};

thread_local! {
    /// Set while `deferred` runs: results decoded on this thread keep their text, and take
    /// their statuses from this list, in the order their texts come.
    static DEFER: RefCell<Option<Listed>> = const { RefCell::new(None) };
}

/// The statuses `deferred` was given, and how many results have taken theirs.
struct Listed {
    statuses: Vec<StepStatus>,
    taken: usize,
}

/// Runs `decode` with results left undecoded until read: what a snapshot written by this
/// build is decoded with (see the module doc). `statuses` are the results' statuses in the
/// order their texts come in what `decode` reads (a snapshot lists them, `$statuses`, so a
/// result's text is scanned once, not parsed a second time for its status). `decode` must
/// read `serde_json` text; the previous state of the flag is restored when it returns or
/// unwinds.
///
/// # Errors
/// `decode`'s error, or (what a snapshot of this build never holds) a count of statuses that
/// is not the count of results decoded: "the snapshot lists 3 result statuses for 2 results".
pub(crate) fn deferred<T>(
    statuses: Vec<StepStatus>,
    decode: impl FnOnce() -> serde_json::Result<T>,
) -> serde_json::Result<T> {
    /// Puts the flag back as it was, on return or unwind.
    struct Restore(Option<Listed>);
    impl Drop for Restore {
        fn drop(&mut self) {
            DEFER.set(self.0.take());
        }
    }
    let _restore = Restore(DEFER.replace(Some(Listed { statuses, taken: 0 })));
    let decoded = decode()?;
    let (listed, taken) = DEFER.with_borrow(|l| l.as_ref().map_or((0, 0), |l| (l.statuses.len(), l.taken)));
    if listed != taken {
        return Err(serde_json::Error::custom(format!(
            "the snapshot lists {listed} result statuses for {taken} results"
        )));
    }
    Ok(decoded)
}

/// The one-letter code of `status` in a snapshot's list of result statuses (`$statuses`).
pub(crate) fn status_code(status: StepStatus) -> char {
    match status {
        StepStatus::Pending => 'p',
        StepStatus::Dispatched => 'd',
        StepStatus::Complete => 'c',
        StepStatus::Failed => 'f',
        StepStatus::Skipped => 's',
        StepStatus::Interacting => 'i',
        StepStatus::InteractDispatched => 'r',
        StepStatus::Cancelled => 'n',
    }
}

/// The statuses a list of [`status_code`]s names; `None` when a letter is not one of them.
pub(crate) fn statuses_of(codes: &str) -> Option<Vec<StepStatus>> {
    codes
        .bytes()
        .map(|code| match code {
            b'p' => Some(StepStatus::Pending),
            b'd' => Some(StepStatus::Dispatched),
            b'c' => Some(StepStatus::Complete),
            b'f' => Some(StepStatus::Failed),
            b's' => Some(StepStatus::Skipped),
            b'i' => Some(StepStatus::Interacting),
            b'r' => Some(StepStatus::InteractDispatched),
            b'n' => Some(StepStatus::Cancelled),
            _ => None,
        })
        .collect()
}

/// One step's latest result: decoded, or (decoded from a snapshot of this build) its JSON
/// text and status until first read. Reads through [`Deref`] (`&StepResult`) and writes
/// through [`DerefMut`] (which decodes it first); serializes as the [`StepResult`] it holds;
/// equal when the results are.
#[derive(Clone)]
pub struct LazyResult {
    /// The status the text holds, read at decode time (the decoded value's counts once there
    /// is one). Not named `status`: inside this module that would hide the result's field.
    text_status: StepStatus,
    /// The text, until the value is decoded and then changed (`DerefMut` drops it).
    text: Option<Box<RawValue>>,
    /// The value, once decoded (at once for a result not deferred).
    value: OnceLock<Box<StepResult>>,
}

impl LazyResult {
    /// A result held decoded.
    pub fn new(result: StepResult) -> LazyResult {
        LazyResult { text_status: result.status, text: None, value: OnceLock::from(Box::new(result)) }
    }

    /// The result's status, without decoding the rest of it.
    pub fn status(&self) -> StepStatus {
        self.value.get().map_or(self.text_status, |r| r.status)
    }

    /// The result, decoded on first read.
    ///
    /// # Panics
    /// Never for a result built by [`LazyResult::new`] or decoded outside `deferred`; a
    /// deferred one was written by this build's serializer and is unchanged since (see the
    /// module doc).
    pub fn get(&self) -> &StepResult {
        self.value.get_or_init(|| {
            let text = self.text.as_deref().map_or("", RawValue::get);
            Box::new(serde_json::from_str(text).expect("a snapshot of this build's model decodes with it"))
        })
    }

    /// Whether the result is held decoded (false until a deferred one is first read).
    pub fn is_decoded(&self) -> bool {
        self.value.get().is_some()
    }

    /// The result by value.
    pub fn into_inner(self) -> StepResult {
        self.get();
        match self.value.into_inner() {
            Some(result) => *result,
            None => unreachable!("`get` has just set the value"),
        }
    }
}

impl Deref for LazyResult {
    type Target = StepResult;

    fn deref(&self) -> &StepResult {
        self.get()
    }
}

impl DerefMut for LazyResult {
    fn deref_mut(&mut self) -> &mut StepResult {
        self.get();
        // The value may change from here on: the text no longer says what it is.
        self.text = None;
        match self.value.get_mut() {
            Some(result) => result,
            None => unreachable!("`get` has just set the value"),
        }
    }
}

impl From<StepResult> for LazyResult {
    fn from(result: StepResult) -> LazyResult {
        LazyResult::new(result)
    }
}

impl PartialEq for LazyResult {
    fn eq(&self, other: &LazyResult) -> bool {
        self.get() == other.get()
    }
}

impl fmt::Debug for LazyResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.get().fmt(f)
    }
}

impl Serialize for LazyResult {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.get().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for LazyResult {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<LazyResult, D::Error> {
        let listed = DEFER.with_borrow_mut(|l| {
            l.as_mut().map(|l| {
                l.taken += 1;
                l.statuses.get(l.taken - 1).copied()
            })
        });
        let Some(listed) = listed else {
            return StepResult::deserialize(deserializer).map(LazyResult::new);
        };
        let text = Box::<RawValue>::deserialize(deserializer)?;
        let status =
            listed.ok_or_else(|| D::Error::custom("the snapshot lists fewer result statuses than it holds results"))?;
        Ok(LazyResult { text_status: status, text: Some(text), value: OnceLock::new() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn result(step_id: &str, status: StepStatus) -> StepResult {
        serde_json::from_value(serde_json::json!({
            "step_id": step_id, "agent_name": "worker", "status": status, "attempt": 1,
            "outcome": "done", "files_changed": ["a.rs"], "cost_usd": 0.25,
        }))
        .unwrap()
    }

    fn text_of(results: &[StepResult]) -> String {
        let map: BTreeMap<&str, &StepResult> = results.iter().map(|r| (r.step_id.as_str(), r)).collect();
        serde_json::to_string(&map).unwrap()
    }

    #[test]
    fn a_deferred_result_keeps_its_status_and_reads_back_as_written() {
        let written = vec![result("1.1", StepStatus::Complete), result("1.2", StepStatus::Failed)];
        let text = text_of(&written);
        let listed = vec![StepStatus::Complete, StepStatus::Failed];
        let read: BTreeMap<String, LazyResult> = deferred(listed, || serde_json::from_str(&text)).unwrap();
        assert!(read.values().all(|r| !r.is_decoded()));
        assert_eq!(read["1.1"].status(), StepStatus::Complete);
        assert_eq!(read["1.2"].status(), StepStatus::Failed);
        assert!(read.values().all(|r| !r.is_decoded()), "the status alone decodes nothing else");
        assert_eq!(*read["1.2"], written[1]);
        assert!(read["1.2"].is_decoded());
        assert_eq!(read["1.1"].clone().into_inner(), written[0]);
    }

    #[test]
    fn outside_deferred_a_result_is_decoded_at_once_and_its_errors_are_the_decoders() {
        let text = text_of(&[result("1.1", StepStatus::Complete)]);
        let read: BTreeMap<String, LazyResult> = serde_json::from_str(&text).unwrap();
        assert!(read["1.1"].is_decoded());
        let err = serde_json::from_str::<BTreeMap<String, LazyResult>>(r#"{"1.1": {"step_id": "1.1"}}"#).unwrap_err();
        assert!(err.to_string().contains("missing field"), "{err}");
    }

    /// A count of listed statuses that is not the count of results (what a snapshot of this
    /// build never holds: `model::snapshot` then decodes it in full) is an error, never a
    /// result with another's status or none.
    #[test]
    fn deferred_results_take_the_listed_statuses_in_order_and_a_miscount_is_an_error() {
        let text = text_of(&[result("1.1", StepStatus::Complete), result("1.2", StepStatus::Complete)]);
        let listed = vec![StepStatus::Dispatched, StepStatus::Complete];
        let read: BTreeMap<String, LazyResult> = deferred(listed, || serde_json::from_str(&text)).unwrap();
        assert_eq!(read["1.1"].status(), StepStatus::Dispatched, "the list, not the text, gives the status");
        assert_eq!(read["1.2"].status(), StepStatus::Complete);
        let fewer = "the snapshot lists fewer result statuses than it holds results";
        let more = "the snapshot lists 3 result statuses for 2 results";
        for (listed, said) in [(1, fewer), (0, fewer), (3, more)] {
            let listed = vec![StepStatus::Complete; listed];
            let err = deferred(listed, || serde_json::from_str::<BTreeMap<String, LazyResult>>(&text)).unwrap_err();
            assert!(err.to_string().starts_with(said), "{err}");
        }
    }

    #[test]
    fn every_status_has_its_own_letter_and_reads_back() {
        let all = [
            StepStatus::Pending,
            StepStatus::Dispatched,
            StepStatus::Complete,
            StepStatus::Failed,
            StepStatus::Skipped,
            StepStatus::Interacting,
            StepStatus::InteractDispatched,
            StepStatus::Cancelled,
        ];
        let codes: String = all.iter().map(|&s| status_code(s)).collect();
        assert_eq!(statuses_of(&codes), Some(all.to_vec()));
        assert_eq!(codes.chars().collect::<std::collections::BTreeSet<_>>().len(), all.len());
        assert_eq!(statuses_of("cx"), None);
        assert_eq!(statuses_of(""), Some(Vec::new()));
    }

    #[test]
    fn a_write_drops_the_text_and_serializes_the_new_value() {
        let text = text_of(&[result("1.1", StepStatus::Dispatched)]);
        let listed = vec![StepStatus::Dispatched];
        let mut read: BTreeMap<String, LazyResult> = deferred(listed, || serde_json::from_str(&text)).unwrap();
        let r = read.get_mut("1.1").unwrap();
        r.status = StepStatus::Complete;
        r.outcome = "changed".into();
        assert_eq!(r.status(), StepStatus::Complete);
        let back: BTreeMap<String, StepResult> = serde_json::from_str(&serde_json::to_string(&read).unwrap()).unwrap();
        assert_eq!(back["1.1"].outcome, "changed");
        assert_eq!(back["1.1"].status, StepStatus::Complete);
    }

    #[test]
    fn the_flag_is_only_set_inside_deferred_even_when_it_unwinds() {
        let set = || DEFER.with_borrow(Option::is_some);
        assert!(!set());
        assert!(deferred(Vec::new(), || Ok(set())).unwrap());
        let unwound =
            std::panic::catch_unwind(|| deferred(Vec::new(), || -> serde_json::Result<()> { panic!("inside") }));
        assert!(unwound.is_err());
        assert!(!set());
    }
}
