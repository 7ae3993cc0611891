//! Decoding a `BTreeMap` in one bulk build instead of one insertion per entry.
//!
//! serde decodes a `BTreeMap` by inserting each entry: a search from the root, a few key
//! comparisons at every level. The budget's per-step maps (`attempts_usd` and `forecasts`;
//! the step results are a sorted `Vec`, `model::state::StepResults`) hold one entry a step,
//! and every CLI process that loads an
//! execution without a server decodes them (issue 14.8): at step 4,700 of a 5,000-step plan
//! the searches were 15% of a `baton execute next`'s instructions. A `BTreeMap` is serialized
//! in key order, so [`decode`] collects the entries and builds the map from them in one pass
//! (`BTreeMap::from_iter`: a stable sort, linear on sorted input, then a bulk build).
//!
//! Never: changes what a map decodes to. Any input gives the map serde's own decoding gives —
//! entries out of order are sorted, and of a repeated key the last value stands, as with
//! insertion. This module never does IO.

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};

/// Entries reserved up front at most, whatever size the input claims.
const MAX_RESERVED: usize = 4096;

/// A `BTreeMap<K, V>` decoded from a map of any serde format, for
/// `#[serde(deserialize_with = "crate::model::sorted_map::decode")]`: the same map serde's
/// own decoding gives (see the module doc), built in bulk.
///
/// # Errors
/// What decoding a key or a value fails with, and a non-map input (serde's "invalid type").
pub fn decode<'de, D, K, V>(deserializer: D) -> Result<BTreeMap<K, V>, D::Error>
where
    D: Deserializer<'de>,
    K: Deserialize<'de> + Ord,
    V: Deserialize<'de>,
{
    deserializer.deserialize_map(Entries(PhantomData))
}

/// The visitor of [`decode`].
struct Entries<K, V>(PhantomData<(K, V)>);

impl<'de, K, V> Visitor<'de> for Entries<K, V>
where
    K: Deserialize<'de> + Ord,
    V: Deserialize<'de>,
{
    type Value = BTreeMap<K, V>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(0).min(MAX_RESERVED));
        while let Some(entry) = map.next_entry::<K, V>()? {
            entries.push(entry);
        }
        // Stable sort, then a bulk build that keeps the last of equal keys: insertion's result.
        Ok(entries.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq)]
    struct Bulk {
        #[serde(default, deserialize_with = "decode")]
        map: BTreeMap<String, u32>,
    }

    /// `entries` as a JSON object, in their order, repeats included.
    fn object(entries: &[(String, u32)]) -> String {
        let fields: Vec<String> =
            entries.iter().map(|(k, v)| format!("{}:{v}", serde_json::to_string(k).unwrap())).collect();
        format!("{{\"map\":{{{}}}}}", fields.join(","))
    }

    proptest! {
        /// Any object, sorted or not, keys repeated or not: the map serde's insertion builds.
        #[test]
        fn decodes_what_insertion_decodes(entries in proptest::collection::vec(("[a-c]{0,3}", any::<u32>()), 0..40)) {
            let text = object(&entries);
            #[derive(Deserialize)]
            struct Inserted {
                map: BTreeMap<String, u32>,
            }
            let inserted: Inserted = serde_json::from_str(&text).unwrap();
            let bulk: Bulk = serde_json::from_str(&text).unwrap();
            prop_assert_eq!(bulk.map, inserted.map);
        }
    }

    #[test]
    fn the_last_of_a_repeated_key_stands_and_errors_name_the_value() {
        let bulk: Bulk = serde_json::from_str(r#"{"map": {"b": 1, "a": 2, "b": 3}}"#).unwrap();
        assert_eq!(bulk.map, BTreeMap::from([("a".to_string(), 2), ("b".to_string(), 3)]));
        assert_eq!(serde_json::from_str::<Bulk>("{}").unwrap().map, BTreeMap::new());
        let err = serde_json::from_str::<Bulk>(r#"{"map": {"a": "x"}}"#).unwrap_err();
        assert!(err.to_string().contains("invalid type: string \"x\", expected u32"), "{err}");
        let err = serde_json::from_str::<Bulk>(r#"{"map": [1]}"#).unwrap_err();
        assert!(err.to_string().contains("expected a map"), "{err}");
    }
}
