//! Decoding a long `Vec` of large records without regrowing it.
//!
//! serde decodes a sequence by pushing each element into a `Vec` that doubles as it fills (a
//! JSON array does not say its length up front), so every doubling copies every element again.
//! A plan's steps are 500-byte records, and every CLI process that loads an execution without
//! a server decodes all of them (issue 14.8): at 5,000 steps the regrowth copied 4 MB and
//! touched 8 MB of fresh memory, a third of the plan's decoding. [`decode`] collects the
//! elements into chunks of [`CHUNK`] and moves each once into a `Vec` of the exact length.
//!
//! Never: changes what a sequence decodes to, or how an error names where it is (the element's
//! index, for `serde_path_to_error`). This module never does IO.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{Deserialize, Deserializer, SeqAccess, Visitor};

/// Elements per chunk. A sequence this long or shorter is decoded as serde does, growing one
/// `Vec` (nothing to save); a longer one is collected in chunks of this many.
pub const CHUNK: usize = 256;

/// A `Vec<T>` decoded from a sequence of any serde format, for
/// `#[serde(deserialize_with = "crate::model::long_vec::decode")]`: the same elements in the
/// same order as serde's own decoding, collected in chunks (see the module doc).
///
/// # Errors
/// What decoding an element fails with, and a non-sequence input (serde's "invalid type").
pub fn decode<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    deserializer.deserialize_seq(Chunks(PhantomData))
}

/// The visitor of [`decode`].
struct Chunks<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for Chunks<T> {
    type Value = Vec<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a sequence")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut chunk = Vec::new();
        let mut full: Vec<Vec<T>> = Vec::new();
        while let Some(element) = seq.next_element()? {
            if chunk.len() == CHUNK {
                full.push(std::mem::replace(&mut chunk, Vec::with_capacity(CHUNK)));
            }
            chunk.push(element);
        }
        if full.is_empty() {
            return Ok(chunk);
        }
        let mut all = Vec::with_capacity(full.len() * CHUNK + chunk.len());
        for done in full {
            all.extend(done);
        }
        all.extend(chunk);
        Ok(all)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq)]
    struct Chunked {
        #[serde(default, deserialize_with = "decode")]
        items: Vec<u32>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Grown {
        #[serde(default)]
        items: Vec<u32>,
    }

    proptest! {
        /// Any length, below, at and across chunk boundaries: the elements serde's own
        /// decoding gives, in order, and a `Vec` no longer than needed.
        #[test]
        fn decodes_what_serde_decodes(items in proptest::collection::vec(any::<u32>(), 0..(3 * CHUNK + 7))) {
            let text = serde_json::json!({ "items": items }).to_string();
            let chunked: Chunked = serde_json::from_str(&text).unwrap();
            let grown: Grown = serde_json::from_str(&text).unwrap();
            prop_assert_eq!(&chunked.items, &grown.items);
            if items.len() > CHUNK {
                prop_assert_eq!(chunked.items.capacity(), items.len());
            }
        }
    }

    #[test]
    fn errors_name_the_element_and_a_non_sequence_is_refused() {
        let mut items: Vec<serde_json::Value> = (0..CHUNK + 3).map(|i| serde_json::json!(i)).collect();
        items[CHUNK + 1] = serde_json::json!("x");
        let text = serde_json::json!({ "items": items }).to_string();
        let de = &mut serde_json::Deserializer::from_str(&text);
        let err = serde_path_to_error::deserialize::<_, Chunked>(de).unwrap_err();
        assert_eq!(err.path().to_string(), format!("items[{}]", CHUNK + 1));
        assert!(err.inner().to_string().contains("invalid type: string \"x\", expected u32"), "{err}");
        let err = serde_json::from_str::<Chunked>(r#"{"items": {"a": 1}}"#).unwrap_err();
        assert!(err.to_string().contains("expected a sequence"), "{err}");
        assert_eq!(serde_json::from_str::<Chunked>("{}").unwrap().items, Vec::<u32>::new());
    }
}
