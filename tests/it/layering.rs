//! The dependency rule of the architecture (arrows point down only), checked on the source:
//! `store` never imports `engine`, `runtime` or `cli`; `git` never imports `store`, `runtime`
//! or `cli`; `runtime` never imports `cli` or `web`; `web` never calls git (nor `cli`); `pmo`
//! (pure spec-queue rules) imports nothing with IO. (The
//! engine's purity has its own test.) And no module's children import each other in a loop:
//! a test builds the file-level `use` graph of `src` (see "The file-level `use` graph" below).

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

// ---------------------------------------------------------------------------------------------
// The file-level `use` graph: no loop among sibling modules.
//
// Every `.rs` file of `src` is a module (`a/b.rs` and `a/b/mod.rs` are `crate::a::b`; `main.rs`
// is the binary, not the library, and is left out). Every path that names something of the
// crate is resolved to the file that defines it: `use` trees (grouped, nested, aliased, globbed)
// and paths written in code (`crate::runtime::driver::run(..)`, `super::x`, `self::y`), relative
// to the inline `mod` they stand in; a name a module imports or re-exports (`pub use`, and the
// names a child reaches through `super::` that its parent imported) is followed to the file that
// defines it. Comments and string literals are skipped, so a doc link is no import.
//
// An edge between two files is an edge between the two sibling modules that contain them (the
// children of their deepest common module): `runtime/agent/shim.rs` using `runtime/driver.rs`
// is `runtime::agent -> runtime::driver`. A child using its ancestor (a `mod.rs`) and a module
// using its own descendants are no sibling edges. A loop among the children of one module is
// the violation.

/// A token, as far as paths need one: an identifier, `::`, one punctuation character, or
/// anything else (a literal, a lifetime).
#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    PathSep,
    Punct(char),
    Other,
}

/// Splits Rust source into tokens with their line numbers, skipping comments and literals.
fn lex(text: &str) -> Vec<(Tok, usize)> {
    let c: Vec<char> = text.chars().collect();
    let at = |j: usize| c.get(j).copied().unwrap_or('\0');
    let ident_start = |ch: char| ch.is_alphabetic() || ch == '_';
    let ident_char = |ch: char| ch.is_alphanumeric() || ch == '_';
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    // Scans a quoted literal whose opening quote is at `j`; returns the index after it.
    let quoted = |mut j: usize, quote: char, line: &mut usize| {
        j += 1;
        while j < c.len() && c[j] != quote {
            if c[j] == '\\' {
                j += 1;
            }
            if at(j) == '\n' {
                *line += 1;
            }
            j += 1;
        }
        j + 1
    };
    while i < c.len() {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if c[i] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
        } else if ch == 'r' && at(i + 1) == '#' && ident_start(at(i + 2)) {
            // A raw identifier: `r#type`.
            let start = i + 2;
            i = start;
            while i < c.len() && ident_char(c[i]) {
                i += 1;
            }
            out.push((Tok::Ident(c[start..i].iter().collect()), line));
        } else if let Some(mut j) = match (ch, at(i + 1), at(i + 2)) {
            ('r', '"' | '#', _) => Some(i + 1),
            ('b' | 'c', 'r', '"' | '#') => Some(i + 2),
            _ => None,
        } {
            // A raw string: `r"…"`, `r#"…"#`, `br"…"`, `cr#"…"#`.
            let mut hashes = 0;
            while at(j) == '#' {
                hashes += 1;
                j += 1;
            }
            j += 1;
            while j < c.len() && !(c[j] == '"' && (1..=hashes).all(|k| at(j + k) == '#')) {
                if c[j] == '\n' {
                    line += 1;
                }
                j += 1;
            }
            i = j + 1 + hashes;
            out.push((Tok::Other, line));
        } else if matches!((ch, at(i + 1)), ('b' | 'c', '"')) {
            i = quoted(i + 1, '"', &mut line);
            out.push((Tok::Other, line));
        } else if ch == '"' {
            i = quoted(i, '"', &mut line);
            out.push((Tok::Other, line));
        } else if ch == '\'' || (ch == 'b' && at(i + 1) == '\'') {
            // A character literal (`'x'`, `'\n'`, `b'x'`) or a lifetime (`'a`).
            let q = if ch == 'b' { i + 1 } else { i };
            if at(q + 1) == '\\' || at(q + 2) == '\'' {
                i = quoted(q, '\'', &mut line);
            } else {
                i = q + 1;
                while i < c.len() && ident_char(c[i]) {
                    i += 1;
                }
            }
            out.push((Tok::Other, line));
        } else if ident_start(ch) {
            let start = i;
            while i < c.len() && ident_char(c[i]) {
                i += 1;
            }
            out.push((Tok::Ident(c[start..i].iter().collect()), line));
        } else if ch.is_ascii_digit() {
            while i < c.len() && ident_char(c[i]) {
                i += 1;
            }
            out.push((Tok::Other, line));
        } else if ch == ':' && at(i + 1) == ':' {
            out.push((Tok::PathSep, line));
            i += 2;
        } else {
            out.push((Tok::Punct(ch), line));
            i += 1;
        }
    }
    out
}

/// A module path from the crate root (`["runtime", "driver"]`).
type ModPath = Vec<String>;

/// A path written in one file, before resolution: the module it stands in and its segments.
#[derive(Debug, Clone)]
struct Written {
    scope: ModPath,
    segments: Vec<String>,
    line: usize,
}

/// What one file says about paths.
#[derive(Debug, Default)]
struct Parsed {
    /// Every path that may name the crate: `use` leaves and `crate::`/`super::`/`self::` in code.
    refs: Vec<Written>,
    /// Names a `use` binds in a module: (the name, the path it names).
    bindings: Vec<(String, Written)>,
    /// Glob imports (`use a::b::*`): the path whose items the module sees.
    globs: Vec<Written>,
    /// Inline modules (`mod tests { … }`).
    inline_mods: Vec<ModPath>,
    /// Items defined at a module's top level: (module, name).
    items: Vec<(ModPath, String)>,
}

/// One leaf of a `use` tree: the full path, and the name it binds (`None` for a glob).
#[derive(Debug)]
struct UseLeaf {
    segments: Vec<String>,
    name: Option<String>,
}

/// Reads one `use` tree from `toks[*i]` on, under `prefix`, into `out`.
fn use_tree(toks: &[(Tok, usize)], i: &mut usize, mut prefix: Vec<String>, out: &mut Vec<UseLeaf>) {
    let tok = |j: usize| toks.get(j).map(|t| &t.0);
    if tok(*i) == Some(&Tok::PathSep) {
        *i += 1;
    }
    loop {
        match tok(*i) {
            Some(Tok::Ident(segment)) => {
                prefix.push(segment.clone());
                *i += 1;
                if tok(*i) == Some(&Tok::PathSep) {
                    *i += 1;
                    continue;
                }
                let mut name = segment.clone();
                if tok(*i) == Some(&Tok::Ident("as".into())) {
                    if let Some(Tok::Ident(alias)) = tok(*i + 1) {
                        name = alias.clone();
                    }
                    *i += 2;
                }
                if segment == "self" {
                    // `a::b::{self}` names `a::b`.
                    prefix.pop();
                    if name == "self" {
                        name = prefix.last().cloned().unwrap_or_default();
                    }
                }
                out.push(UseLeaf { segments: prefix, name: Some(name) });
                return;
            }
            Some(Tok::Punct('*')) => {
                *i += 1;
                out.push(UseLeaf { segments: prefix, name: None });
                return;
            }
            Some(Tok::Punct('{')) => {
                *i += 1;
                loop {
                    match tok(*i) {
                        Some(Tok::Punct('}')) | None => {
                            *i += 1;
                            return;
                        }
                        Some(Tok::Punct(',')) => *i += 1,
                        _ => {
                            let before = *i;
                            use_tree(toks, i, prefix.clone(), out);
                            if *i == before {
                                *i += 1;
                            }
                        }
                    }
                }
            }
            _ => return,
        }
    }
}

/// Reads the paths of one file whose module is `module`.
fn parse(module: &ModPath, text: &str) -> Parsed {
    let toks = lex(text);
    let tok = |j: usize| toks.get(j).map(|t| &t.0);
    let is = |j: usize, word: &str| matches!(tok(j), Some(Tok::Ident(w)) if w == word);
    let mut parsed = Parsed::default();
    // Inline modules we are in: (name, the brace depth inside them).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let mut i = 0;
    while i < toks.len() {
        let scope: ModPath = module.iter().cloned().chain(inline.iter().map(|(n, _)| n.clone())).collect();
        let top = inline.last().map_or(0, |(_, d)| *d);
        let after_sep = i > 0 && matches!(tok(i - 1), Some(Tok::PathSep));
        match &toks[i].0 {
            Tok::Punct('{') => depth += 1,
            Tok::Punct('}') => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth -= 1;
            }
            Tok::Ident(word) if word == "mod" && tok(i + 2) == Some(&Tok::Punct('{')) => {
                if let Some(Tok::Ident(name)) = tok(i + 1) {
                    depth += 1;
                    inline.push((name.clone(), depth));
                    parsed.inline_mods.push(scope.iter().cloned().chain([name.clone()]).collect());
                    parsed.items.push((scope.clone(), name.clone()));
                    i += 3;
                    continue;
                }
            }
            Tok::Ident(word) if word == "use" && !after_sep => {
                let line = toks[i].1;
                i += 1;
                let mut leaves = Vec::new();
                use_tree(&toks, &mut i, Vec::new(), &mut leaves);
                while i < toks.len() && toks[i].0 != Tok::Punct(';') {
                    i += 1;
                }
                for leaf in leaves {
                    let written = Written { scope: scope.clone(), segments: leaf.segments, line };
                    match leaf.name {
                        Some(name) => parsed.bindings.push((name, written.clone())),
                        None => parsed.globs.push(written.clone()),
                    }
                    parsed.refs.push(written);
                }
            }
            Tok::Ident(word)
                if matches!(word.as_str(), "crate" | "super" | "self")
                    && tok(i + 1) == Some(&Tok::PathSep)
                    && !after_sep
                    && !(i > 0 && tok(i - 1) == Some(&Tok::Punct('$')))
                    && !(i > 2 && is(i - 1, "in") && tok(i - 2) == Some(&Tok::Punct('(')) && is(i - 3, "pub")) =>
            {
                let line = toks[i].1;
                let mut segments = vec![word.clone()];
                i += 1;
                while tok(i) == Some(&Tok::PathSep) {
                    let Some(Tok::Ident(segment)) = tok(i + 1) else { break };
                    segments.push(segment.clone());
                    i += 2;
                }
                parsed.refs.push(Written { scope, segments, line });
                continue;
            }
            Tok::Ident(word)
                if depth == top
                    && matches!(
                        word.as_str(),
                        "fn" | "struct" | "enum" | "trait" | "type" | "const" | "static" | "union"
                    ) =>
            {
                if let Some(Tok::Ident(name)) = tok(i + 1) {
                    parsed.items.push((scope, name.clone()));
                }
            }
            _ => {}
        }
        i += 1;
    }
    parsed
}

/// The module a file of `src` is, from its path: `runtime/driver.rs` and `runtime/driver/mod.rs`
/// are `runtime::driver`, `lib.rs` is the crate root.
fn module_of(rel: &str) -> ModPath {
    let rel = rel.strip_suffix(".rs").unwrap_or(rel);
    let mut parts: ModPath = rel.split('/').map(str::to_string).collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts
}

/// The resolved graph of a set of files.
struct UseGraph {
    files: Vec<String>,
    modules: Vec<ModPath>,
    parsed: Vec<Parsed>,
    /// Every module (file or inline) and the file that holds it.
    holder: std::collections::HashMap<ModPath, usize>,
}

impl UseGraph {
    fn new(files: &[(String, String)]) -> Self {
        let modules: Vec<ModPath> = files.iter().map(|(rel, _)| module_of(rel)).collect();
        let parsed: Vec<Parsed> = files.iter().zip(&modules).map(|((_, text), m)| parse(m, text)).collect();
        let mut holder = std::collections::HashMap::new();
        for (f, p) in parsed.iter().enumerate() {
            for m in &p.inline_mods {
                holder.insert(m.clone(), f);
            }
        }
        for (f, m) in modules.iter().enumerate() {
            holder.insert(m.clone(), f);
        }
        UseGraph { files: files.iter().map(|(rel, _)| rel.clone()).collect(), modules, parsed, holder }
    }

    /// The name `name` as the module `module` binds it with a `use`, if it does.
    fn binding(&self, module: &ModPath, name: &str) -> Option<&Written> {
        let file = *self.holder.get(module)?;
        self.parsed[file].bindings.iter().find(|(n, w)| n == name && &w.scope == module).map(|(_, w)| w)
    }

    /// A written path as a path from the crate root; `None` when it names another crate.
    fn absolute(&self, w: &Written, hops: usize) -> Option<ModPath> {
        let (first, rest) = w.segments.split_first()?;
        match first.as_str() {
            "crate" => Some(rest.to_vec()),
            "self" => Some(w.scope.iter().chain(rest).cloned().collect()),
            "super" => {
                let mut base = w.scope.clone();
                let mut rest = &w.segments[..];
                while rest.first().is_some_and(|s| s == "super") {
                    base.pop()?;
                    rest = &rest[1..];
                }
                Some(base.into_iter().chain(rest.iter().cloned()).collect())
            }
            _ => {
                let child: ModPath = w.scope.iter().chain([first]).cloned().collect();
                if self.holder.contains_key(&child) {
                    return Some(w.scope.iter().chain(&w.segments).cloned().collect());
                }
                // A name the module imported: `use super::driver; use driver::run;`.
                let bound = self.binding(&w.scope, first).filter(|b| b.segments != w.segments)?;
                if hops > 8 {
                    return None;
                }
                let base = self.absolute(bound, hops + 1)?;
                Some(base.into_iter().chain(rest.iter().cloned()).collect())
            }
        }
    }

    /// The file that defines what an absolute path names.
    fn file_of(&self, path: &[String], hops: usize) -> Option<usize> {
        let (len, &file) = (0..=path.len()).rev().find_map(|n| self.holder.get(&path[..n]).map(|f| (n, f)))?;
        if len == path.len() || hops > 8 {
            return Some(file);
        }
        let module = path[..len].to_vec();
        let name = &path[len];
        if let Some(bound) = self.binding(&module, name) {
            return match self.absolute(bound, hops + 1) {
                Some(target) if target != path => {
                    let target: ModPath = target.into_iter().chain(path[len + 1..].iter().cloned()).collect();
                    self.file_of(&target, hops + 1).or(Some(file))
                }
                _ => Some(file),
            };
        }
        let defined_here = self.parsed[file].items.iter().any(|(m, n)| m == &module && n == name);
        if !defined_here {
            for glob in self.parsed[file].globs.iter().filter(|g| g.scope == module) {
                let Some(base) = self.absolute(glob, hops + 1) else { continue };
                let Some(&from) = self.holder.get(&base) else { continue };
                let hit = self.parsed[from].items.iter().any(|(m, n)| m == &base && n == name)
                    || self.binding(&base, name).is_some();
                if hit {
                    let target: ModPath = base.into_iter().chain(path[len..].iter().cloned()).collect();
                    return self.file_of(&target, hops + 1).or(Some(file));
                }
            }
        }
        Some(file)
    }

    /// Every sibling edge: (parent module, from child, to child, evidence "file:line: path").
    fn sibling_edges(&self) -> Vec<(String, String, String, String)> {
        let mut edges = Vec::new();
        for (f, parsed) in self.parsed.iter().enumerate() {
            for w in &parsed.refs {
                let Some(abs) = self.absolute(w, 0) else { continue };
                let Some(to) = self.file_of(&abs, 0) else { continue };
                let (a, b) = (&self.modules[f], &self.modules[to]);
                let common = a.iter().zip(b).take_while(|(x, y)| x == y).count();
                if common == a.len() || common == b.len() {
                    continue; // the same file, an ancestor or a descendant
                }
                let parent = if common == 0 { "crate".to_string() } else { a[..common].join("::") };
                let evidence = format!("src/{}:{}: {}", self.files[f], w.line, w.segments.join("::"));
                edges.push((parent, a[common].clone(), b[common].clone(), evidence));
            }
        }
        edges
    }
}

/// The loops among sibling modules: for each, the parent, the members and the edges with
/// evidence. Edges in `allowed` ("parent: from -> to") are left out before looking.
fn sibling_loops(files: &[(String, String)], allowed: &[&str]) -> Vec<String> {
    use std::collections::{BTreeMap, BTreeSet};
    let graph = UseGraph::new(files);
    // parent -> from -> to -> first evidence
    let mut by_parent: BTreeMap<String, BTreeMap<String, BTreeMap<String, String>>> = BTreeMap::new();
    for (parent, from, to, evidence) in graph.sibling_edges() {
        if allowed.contains(&format!("{parent}: {from} -> {to}").as_str()) {
            continue;
        }
        by_parent.entry(parent).or_default().entry(from).or_default().entry(to).or_insert(evidence);
    }
    let mut loops = Vec::new();
    for (parent, edges) in &by_parent {
        // The strongly connected components, by reachability (the graphs are small).
        let nodes: BTreeSet<&String> = edges.keys().chain(edges.values().flat_map(|t| t.keys())).collect();
        let reach = |start: &String| {
            let mut seen = BTreeSet::new();
            let mut stack = vec![start.clone()];
            while let Some(n) = stack.pop() {
                for next in edges.get(&n).into_iter().flat_map(|t| t.keys()) {
                    if seen.insert(next.clone()) {
                        stack.push(next.clone());
                    }
                }
            }
            seen
        };
        let reaches: BTreeMap<&String, BTreeSet<String>> = nodes.iter().map(|n| (*n, reach(n))).collect();
        let mut done = BTreeSet::new();
        for n in &nodes {
            if done.contains(*n) || !reaches[n].contains(*n) {
                continue;
            }
            let members: BTreeSet<&String> =
                nodes.iter().copied().filter(|m| reaches[n].contains(*m) && reaches[m].contains(*n)).collect();
            done.extend(members.iter().map(|m| (*m).clone()));
            let mut text = format!(
                "loop among the children of `{parent}`: {}",
                members.iter().map(|m| m.as_str()).collect::<Vec<_>>().join(", ")
            );
            for from in &members {
                for (to, evidence) in &edges[*from] {
                    if members.contains(to) {
                        text.push_str(&format!("\n    {parent}: {from} -> {to}   ({evidence})"));
                    }
                }
            }
            loops.push(text);
        }
    }
    loops
}

/// The library's files, as (path from `src`, text); `main.rs` is the binary and is left out.
fn library_files() -> Vec<(String, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    sources(&src, &mut paths);
    let mut files: Vec<(String, String)> = paths
        .into_iter()
        .map(|p| {
            let rel = p.strip_prefix(&src).unwrap().to_string_lossy().replace('\\', "/");
            (rel, std::fs::read_to_string(&p).unwrap())
        })
        .filter(|(rel, _)| rel != "main.rs")
        .collect();
    files.sort();
    files
}

#[test]
fn sibling_modules_never_import_each_other_in_a_loop() {
    let files = library_files();
    assert!(files.len() > 50 && files.iter().any(|(rel, _)| rel == "runtime/mod.rs"), "scanned too few files");
    let loops = sibling_loops(&files, &[]);
    assert!(loops.is_empty(), "sibling modules import each other in a loop:\n{}", loops.join("\n"));
}

#[test]
fn the_use_graph_reads_grouped_imports_inline_paths_and_reexports() {
    let file = |rel: &str, text: &str| (rel.to_string(), text.to_string());
    // One loop through each kind of path; each pair below is a loop on its own.
    let files = vec![
        file("lib.rs", "pub mod a; pub mod b; pub mod c; pub mod d; pub mod e; pub mod f; pub mod g;"),
        // a grouped, nested import against an inline path in code
        file("a.rs", "use crate::{model, b::{x, y::z as w}};\npub fn a() {}"),
        file("b/mod.rs", "pub mod y;\npub fn x() {}"),
        file("b/y.rs", "pub fn z() { for _ in crate::a::a() {} }"),
        // `super::` from an inline module, and a name re-exported by a folder's `mod.rs`
        file("c.rs", "#[cfg(test)]\nmod tests {\n    use super::super::d::helper;\n}"),
        file("d/mod.rs", "mod inner;\npub use inner::helper;"),
        file("d/inner.rs", "pub fn helper() { super::super::c::thing(); }"),
        // comments, strings and doc links are no imports; a child may use its parent
        file("e.rs", "//! See [`crate::f::x`].\npub(in crate::f) fn s() { let _ = (\"crate::f::x\", '\"', r#\"crate::f\"#); /* crate::f */ }"),
        file("f.rs", "use crate::e;\nuse super::*;"),
        // a name a parent has through a glob import, followed to the file that defines it
        file("g/mod.rs", "mod i;\nmod j;\nuse self::i::*;"),
        file("g/i.rs", "use super::j;\npub fn item() {}"),
        file("g/j.rs", "fn t() { super::item(); }"),
    ];
    let loops = sibling_loops(&files, &[]);
    let text = loops.join("\n");
    assert_eq!(loops.len(), 3, "{text}");
    assert!(text.contains("crate: a -> b") && text.contains("crate: b -> a"), "{text}");
    assert!(text.contains("crate: c -> d") && text.contains("crate: d -> c"), "{text}");
    assert!(text.contains("src/b/y.rs:1: crate::a::a"), "{text}");
    assert!(text.contains("g: i -> j") && text.contains("g: j -> i"), "{text}");
    assert!(!text.contains("crate: e") && !text.contains("crate: f"), "{text}");
    // the allow-list removes an edge, and with it the loop
    assert_eq!(sibling_loops(&files, &["crate: a -> b"]).len(), 2);
}
