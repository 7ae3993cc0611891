//! [`LazyResult`]: a step result as [`ExecutionState::step_results`] holds it, which a state
//! decoded from a snapshot of this build decodes only when it is first read.
//!
//! Every CLI process that runs without a server decodes the whole newest snapshot of its
//! execution, and most of a large one is the results of steps that are long done (4,560 of
//! them at step 4,560 of a 5,000-step plan) which the call never reads (issue 14.8).
//! `model::snapshot::decode` reads a snapshot written by a build with this build's model
//! fingerprint without parsing its results at all: the snapshot lists each result's status
//! and the length of its text, so the decoder copies the results' texts once, into one shared
//! buffer, and builds each result with `LazyResult::deferred`: its status and where its
//! text lies in that buffer. Scanning each result's text to find where it ends, and one
//! allocation and copy of it per result, had been a sixth of a `dispatched` call at step
//! 2,500 of 5,000. The rest of a result is decoded on first read. Everywhere else, and always
//! for text from another build, a result is decoded in full as it is read, so a result that
//! does not decode is the decoder's error, as for any other field.
//!
//! Reading a deferred result cannot fail: its text was written by this build's serializer
//! from a [`StepResult`] (the snapshot's fingerprint says so) and has not changed since (its
//! checksum says so: `model::snapshot` decodes text edited after it was written in full, so a
//! result that no longer decodes is an error at load), and the engine's property test
//! (`engine::tests::props`) checks over random runs that every result of a snapshot reads
//! back as the value written. A result still undecoded is written into the next snapshot as
//! the text it was read from (`LazyResult::snapshot_text`), so writing a snapshot does not
//! decode every result either. Owns: the shared text, the statuses' letters, and the flag
//! that has results serialize as nothing while a snapshot writes them itself. Never: does IO.
//!
//! [`ExecutionState::step_results`]: crate::model::state::ExecutionState::step_results

use std::cell::Cell;
use std::fmt;
use std::ops::{Deref, DerefMut, Range};
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::model::step_result::{StepResult, StepStatus};

thread_local! {
    /// Set while [`without_results`] runs: results serialize as `null`, their caller writes
    /// them itself.
    static LEFT_OUT: Cell<bool> = const { Cell::new(false) };
}

/// Runs `serialize` with every [`LazyResult`] serialized as `null` (on this thread, restored
/// when it returns or unwinds): `model::snapshot::encode` serializes the rest of a state this
/// way, then writes each result itself, an undecoded one as its text.
pub(crate) fn without_results<T>(serialize: impl FnOnce() -> T) -> T {
    /// Puts the flag back as it was, on return or unwind.
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            LEFT_OUT.set(self.0);
        }
    }
    let _restore = Restore(LEFT_OUT.replace(true));
    serialize()
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

/// A deferred result's text: `range` of a buffer shared by every result of one snapshot.
#[derive(Clone)]
struct Text {
    /// The snapshot's results, as written (one copy per load).
    all: Arc<str>,
    /// Byte range of this result's JSON object in `all`.
    range: Range<usize>,
}

impl Text {
    fn get(&self) -> &str {
        self.all.get(self.range.clone()).unwrap_or("")
    }
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
    text: Option<Text>,
    /// The value, once decoded (at once for a result not deferred).
    value: OnceLock<Box<StepResult>>,
}

impl LazyResult {
    /// A result held decoded.
    pub fn new(result: StepResult) -> LazyResult {
        LazyResult { text_status: result.status, text: None, value: OnceLock::from(Box::new(result)) }
    }

    /// A result left undecoded until first read: the JSON object in `range` of `all` (what
    /// this build's `model::snapshot::encode` wrote for a result with `status`). Only for text
    /// that is known to decode (see the module doc).
    pub(crate) fn deferred(all: &Arc<str>, range: Range<usize>, status: StepStatus) -> LazyResult {
        LazyResult { text_status: status, text: Some(Text { all: Arc::clone(all), range }), value: OnceLock::new() }
    }

    /// The result's status, without decoding the rest of it.
    pub fn status(&self) -> StepStatus {
        self.value.get().map_or(self.text_status, |r| r.status)
    }

    /// The text this result was read from, until it is changed (read or not, the text still
    /// says what it holds): what a snapshot writes for it again, unparsed.
    pub(crate) fn snapshot_text(&self) -> Option<&str> {
        self.text.as_ref().map(Text::get)
    }

    /// The result, decoded on first read.
    ///
    /// # Panics
    /// Never for a result built by [`LazyResult::new`] or decoded with serde; a deferred one
    /// was written by this build's serializer and is unchanged since (see the module doc).
    pub fn get(&self) -> &StepResult {
        self.value.get_or_init(|| {
            let text = self.text.as_ref().map_or("", Text::get);
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
        if LEFT_OUT.get() {
            return serializer.serialize_unit();
        }
        self.get().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for LazyResult {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<LazyResult, D::Error> {
        StepResult::deserialize(deserializer).map(LazyResult::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(step_id: &str, status: StepStatus) -> StepResult {
        serde_json::from_value(serde_json::json!({
            "step_id": step_id, "agent_name": "worker", "status": status, "attempt": 1,
            "outcome": "done", "files_changed": ["a.rs"], "cost_usd": 0.25,
        }))
        .unwrap()
    }

    /// Two results' texts side by side in one buffer, as a snapshot's decoder holds them, and
    /// each one's range.
    fn shared(results: &[StepResult]) -> (Arc<str>, Vec<Range<usize>>) {
        let mut all = String::new();
        let mut ranges = Vec::new();
        for r in results {
            let start = all.len();
            all.push_str(&serde_json::to_string(r).unwrap());
            ranges.push(start..all.len());
            all.push(',');
        }
        (Arc::from(all), ranges)
    }

    #[test]
    fn a_deferred_result_keeps_its_status_and_reads_back_as_written() {
        let written = vec![result("1.1", StepStatus::Complete), result("1.2", StepStatus::Failed)];
        let (all, ranges) = shared(&written);
        let read: Vec<LazyResult> =
            written.iter().zip(ranges).map(|(r, range)| LazyResult::deferred(&all, range, r.status)).collect();
        assert!(read.iter().all(|r| !r.is_decoded()));
        assert_eq!(read[0].status(), StepStatus::Complete);
        assert_eq!(read[1].status(), StepStatus::Failed);
        assert!(read.iter().all(|r| !r.is_decoded()), "the status alone decodes nothing else");
        assert_eq!(*read[1], written[1]);
        assert!(read[1].is_decoded());
        assert_eq!(read[0].clone().into_inner(), written[0]);
    }

    #[test]
    fn a_result_decoded_with_serde_is_decoded_at_once_and_its_errors_are_the_decoders() {
        let text = serde_json::to_string(&result("1.1", StepStatus::Complete)).unwrap();
        let read: LazyResult = serde_json::from_str(&text).unwrap();
        assert!(read.is_decoded());
        assert!(read.snapshot_text().is_none());
        let err = serde_json::from_str::<LazyResult>(r#"{"step_id": "1.1"}"#).unwrap_err();
        assert!(err.to_string().contains("missing field"), "{err}");
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

    /// A result read but unchanged keeps its text for the next snapshot; a write drops it, and
    /// the result then serializes as its new value.
    #[test]
    fn a_write_drops_the_text_and_serializes_the_new_value() {
        let written = [result("1.1", StepStatus::Dispatched)];
        let (all, ranges) = shared(&written);
        let mut read = LazyResult::deferred(&all, ranges[0].clone(), StepStatus::Dispatched);
        let text = serde_json::to_string(&written[0]).unwrap();
        assert_eq!(read.snapshot_text(), Some(text.as_str()));
        assert_eq!(read.outcome, "done");
        assert_eq!(read.snapshot_text(), Some(text.as_str()), "a read leaves the text as it was");
        read.status = StepStatus::Complete;
        read.outcome = "changed".into();
        assert_eq!(read.snapshot_text(), None);
        assert_eq!(read.status(), StepStatus::Complete);
        let back: StepResult = serde_json::from_str(&serde_json::to_string(&read).unwrap()).unwrap();
        assert_eq!(back.outcome, "changed");
        assert_eq!(back.status, StepStatus::Complete);
    }

    #[test]
    fn results_serialize_as_null_only_inside_without_results_even_when_it_unwinds() {
        let read = LazyResult::new(result("1.1", StepStatus::Complete));
        assert_eq!(without_results(|| serde_json::to_string(&read).unwrap()), "null");
        assert!(serde_json::to_string(&read).unwrap().starts_with('{'));
        let unwound = std::panic::catch_unwind(|| without_results(|| panic!("inside")));
        assert!(unwound.is_err());
        assert!(!LEFT_OUT.get());
    }
}
