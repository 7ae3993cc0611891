//! Rebuilds when a migration changes (they are embedded with `sqlx::migrate!`), and fingerprints
//! the state model: `BATON_MODEL_FINGERPRINT` is a hash of every file under `src/model`, of
//! `Cargo.lock` (the serde versions that decode it) and of the package version. A snapshot
//! carries the fingerprint of the build that wrote it, and only a build with the same one
//! decodes its step results lazily (`model::lazy_result`); any other decodes them in full at
//! load, so a result that does not decode is an error there, never later.
use std::hash::{DefaultHasher, Hash as _, Hasher as _};
use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-changed=migrations");
    println!("cargo:rerun-if-changed=src/model");
    println!("cargo:rerun-if-changed=Cargo.lock");
    let mut files = Vec::new();
    collect(Path::new("src/model"), &mut files);
    files.sort();
    files.push(PathBuf::from("Cargo.lock"));
    let mut hasher = DefaultHasher::new();
    env!("CARGO_PKG_VERSION").hash(&mut hasher);
    for file in &files {
        file.hash(&mut hasher);
        // A file that cannot be read hashes as empty: the fingerprint still changes with the
        // rest, and the build itself reports the missing source.
        std::fs::read(file).unwrap_or_default().hash(&mut hasher);
    }
    println!("cargo:rustc-env=BATON_MODEL_FINGERPRINT={:016x}", hasher.finish());
}

/// Every file under `dir`, recursively.
fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect(&path, out);
        } else {
            out.push(path);
        }
    }
}
