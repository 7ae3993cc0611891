//! The dependency rule of the architecture (arrows point down only), checked on the source:
//! `store` never imports `engine`, `runtime` or `cli`; `git` never imports `store`, `runtime`
//! or `cli`; `runtime` never imports `cli` or `web`; `web` never calls git (nor `cli`); `pmo`
//! (pure spec-queue rules) imports nothing with IO. (The
//! engine's purity has its own test.)

use std::path::Path;

fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn lower_layers_never_import_higher_ones() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let rules: &[(&str, &[&str])] = &[
        ("store", &["engine", "runtime", "cli", "git", "web"]),
        ("git", &["store", "runtime", "cli", "engine", "web"]),
        ("runtime", &["cli", "web"]),
        ("web", &["git", "cli"]),
        ("pmo", &["store", "runtime", "cli", "git", "web"]),
    ];
    let mut violations = Vec::new();
    for (module, forbidden) in rules {
        let mut files = Vec::new();
        sources(&src.join(module), &mut files);
        assert!(!files.is_empty(), "no sources under src/{module}");
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            for name in *forbidden {
                let needle = format!("crate::{name}");
                if text.contains(&needle) {
                    violations.push(format!("{} uses {needle}", file.display()));
                }
            }
        }
    }
    assert!(violations.is_empty(), "layering violations:\n{}", violations.join("\n"));
}
