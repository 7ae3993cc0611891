//! The engine and the model do no IO: their source never names an IO crate or module.
//! Test-only files (`engine/tests.rs`, `engine/tests/`) are not scanned: they read fixtures.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.ends_with("engine/tests") || path.ends_with("engine/tests.rs") {
            continue;
        }
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn forbidden() -> Vec<String> {
    [
        "to|kio",
        "sq|lx",
        "ax|um",
        "ask|ama",
        "gi|t2",
        "req|west",
        "octo|crab",
        "trac|ing",
        "std::|fs",
        "std::|net",
        "std::|process",
        "std::|env",
        "System|Time",
        "Inst|ant",
        "Utc::|now",
        "chr|ono",
        "crate::|store",
        "crate::|runtime",
        "crate::|git",
        "crate::|cli",
        "crate::|clock",
    ]
    .iter()
    .map(|s| s.replace('|', ""))
    .collect()
}

#[test]
fn engine_and_model_do_no_io() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&root.join("engine"), &mut files);
    rust_files(&root.join("model"), &mut files);
    assert!(files.len() >= 9, "scanned too few files: {files:?}");
    assert!(files.iter().any(|f| f.ends_with("engine/mod.rs")) && files.iter().any(|f| f.ends_with("model/state.rs")));
    let words = forbidden();
    let mut hits = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in text.lines().enumerate() {
            for w in &words {
                if line.contains(w.as_str()) {
                    hits.push(format!("{}:{}: `{w}`", file.strip_prefix(&root).unwrap_or(file).display(), n + 1));
                }
            }
        }
    }
    assert!(hits.is_empty(), "engine/model must not do IO:\n{}", hits.join("\n"));
}

#[test]
fn the_forbidden_list_catches_io() {
    let words = forbidden();
    for sample in ["use tokio::fs;", "let t = SystemTime::now();", "use crate::store::Store;", "std::fs::read(p)"] {
        assert!(words.iter().any(|w| sample.contains(w.as_str())), "{sample}");
    }
    assert!(!words.iter().any(|w| "use crate::model::plan::PlanStep;".contains(w.as_str())));
}
