//! The book under `docs/` (issue 16.7): its CLI and REST API chapters are generated here from
//! clap's command tree and the generated OpenAPI document, and the test fails when a command,
//! a flag or an API route is missing from them (or they are stale). `BATON_BLESS=1` rewrites
//! them. mdbook itself is not needed: the test reads the Markdown files.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;

fn book() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/src")
}

/// Table cell text: one line, pipes escaped.
fn cell(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ").replace('|', "\\|")
}

/// `--long <VALUE>` / `-s` / `<POS>` of an argument.
fn arg_name(arg: &clap::Arg) -> String {
    let value = arg
        .get_value_names()
        .map(|v| v.iter().map(|n| format!("<{n}>")).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| format!("<{}>", arg.get_id().as_str().to_uppercase()));
    let takes_value = arg.get_num_args().is_some_and(|n| n.takes_values())
        && !matches!(
            arg.get_action(),
            clap::ArgAction::SetTrue
                | clap::ArgAction::SetFalse
                | clap::ArgAction::Count
                | clap::ArgAction::Help
                | clap::ArgAction::Version
        );
    match (arg.get_long(), arg.get_short()) {
        (Some(l), Some(s)) if takes_value => format!("`-{s}, --{l} {value}`"),
        (Some(l), Some(s)) => format!("`-{s}, --{l}`"),
        (Some(l), None) if takes_value => format!("`--{l} {value}`"),
        (Some(l), None) => format!("`--{l}`"),
        (None, Some(s)) => format!("`-{s}`"),
        (None, None) => format!("`{value}`"),
    }
}

fn arg_help(arg: &clap::Arg) -> String {
    let mut help = arg.get_long_help().or(arg.get_help()).map(|h| h.to_string()).unwrap_or_default();
    if let Some(env) = arg.get_env() {
        let _ = write!(help, " (env `{}`)", env.to_string_lossy());
    }
    let defaults: Vec<String> = arg.get_default_values().iter().map(|d| d.to_string_lossy().to_string()).collect();
    if !defaults.is_empty() && !matches!(arg.get_action(), clap::ArgAction::SetTrue) {
        let _ = write!(help, " (default `{}`)", defaults.join(" "));
    }
    cell(&help)
}

/// The visible, non-help arguments of `cmd`, without the globals inherited from the root.
fn own_args(cmd: &clap::Command, root: bool) -> Vec<&clap::Arg> {
    cmd.get_arguments()
        .filter(|a| !a.is_hide_set())
        .filter(|a| !matches!(a.get_action(), clap::ArgAction::Help | clap::ArgAction::Version))
        .filter(|a| root || !a.is_global_set())
        .collect()
}

/// The CLI chapter.
fn cli_markdown() -> String {
    let mut root = baton::cli::command();
    root.build();
    let mut out = String::from(
        "# CLI reference\n\nGenerated from the command line's own definition (clap) by `tests/it/book.rs`; \
         `baton <command> --help` prints the same. Exit codes: 0 done/ok · 1 internal error · 2 usage or \
         bad input · 3 waiting for a human (approval, feedback, interact) · 4 execution failed.\n",
    );
    fn walk(cmd: &clap::Command, path: &str, root: bool, out: &mut String) {
        let depth = path.split(' ').count().min(4);
        let _ = writeln!(out, "\n{} `{path}`\n", "#".repeat(depth + 1));
        if let Some(about) = cmd.get_long_about().or(cmd.get_about()) {
            let _ = writeln!(out, "{}\n", about.to_string().trim());
        }
        let usage = cmd.clone().bin_name(path).render_usage().to_string();
        let _ = writeln!(out, "```text\n{}\n```\n", usage.trim_start_matches("Usage: ").trim());
        let args = own_args(cmd, root);
        if !args.is_empty() {
            let _ = writeln!(out, "| Argument | Meaning |\n|---|---|");
            for a in args {
                let _ = writeln!(out, "| {} | {} |", arg_name(a), arg_help(a));
            }
        }
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set() && s.get_name() != "help") {
            walk(sub, &format!("{path} {}", sub.get_name()), false, out);
        }
    }
    walk(&root, "baton", true, &mut out);
    out
}

/// Resolves a local `$ref`.
fn resolved<'a>(doc: &'a Value, value: &'a Value) -> &'a Value {
    match value.get("$ref").and_then(Value::as_str) {
        Some(r) => doc.pointer(r.trim_start_matches('#')).unwrap_or_else(|| panic!("dangling {r}")),
        None => value,
    }
}

/// A schema's name or kind, for a table.
fn schema_name(schema: &Value) -> String {
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        let name = r.rsplit('/').next().unwrap_or(r);
        return format!("[`{name}`](#{})", name.to_lowercase());
    }
    if schema["type"] == "array" {
        return format!("array of {}", schema_name(&schema["items"]));
    }
    if let Some(all) = schema["oneOf"].as_array() {
        return all.iter().map(schema_name).collect::<Vec<_>>().join(" or ");
    }
    match &schema["type"] {
        Value::String(t) => format!("`{t}`"),
        Value::Array(ts) => format!("`{}`", ts.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(" | ")),
        _ => "any".into(),
    }
}

/// The REST API chapter.
fn api_markdown(doc: &Value) -> String {
    let mut out = String::from("# REST API reference\n\n");
    let _ = writeln!(
        out,
        "Generated by `tests/it/book.rs` from the OpenAPI document `baton serve` serves at \
         `/api/v1/openapi.json` (itself generated from the handlers; a copy is [openapi.json](openapi.json)).\n\n{}\n",
        doc["info"]["description"].as_str().unwrap_or_default()
    );
    let mut routes: Vec<(String, String, &Value)> = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            routes.push((method.to_uppercase(), path.clone(), op));
        }
    }
    let _ = writeln!(out, "| Route | What |\n|---|---|");
    for (method, path, op) in &routes {
        let summary = op["summary"].as_str().unwrap_or_default();
        let _ = writeln!(out, "| `{method} {path}` | {} |", cell(summary));
    }
    for (method, path, op) in &routes {
        let _ = writeln!(out, "\n## `{method} {path}`\n");
        for key in ["summary", "description"] {
            if let Some(text) = op[key].as_str() {
                let _ = writeln!(out, "{}\n", text.trim());
            }
        }
        if let Some(params) = op["parameters"].as_array() {
            let _ = writeln!(out, "| Parameter | In | Schema | Meaning |\n|---|---|---|---|");
            for p in params.iter().map(|p| resolved(doc, p)) {
                let schema = &p["schema"];
                let mut bounds = schema_name(schema);
                if let Some(min) = schema["minimum"].as_i64() {
                    let _ = write!(bounds, ", ≥ {min}");
                }
                if let Some(max) = schema["maximum"].as_i64() {
                    let _ = write!(bounds, ", ≤ {max}");
                }
                let required = if p["required"] == true { " (required)" } else { "" };
                let _ = writeln!(
                    out,
                    "| `{}`{required} | {} | {bounds} | {} |",
                    p["name"].as_str().unwrap_or_default(),
                    p["in"].as_str().unwrap_or_default(),
                    cell(p["description"].as_str().unwrap_or_default())
                );
            }
            out.push('\n');
        }
        if let Some(body) = op.get("requestBody") {
            let schema = &body["content"]["application/json"]["schema"];
            let _ = writeln!(out, "Body (`application/json`): {}\n", schema_name(schema));
        }
        let _ = writeln!(out, "| Status | Meaning |\n|---|---|");
        for (status, response) in op["responses"].as_object().unwrap() {
            let r = resolved(doc, response);
            let body = r["content"].as_object().and_then(|c| c.values().next()).map(|c| schema_name(&c["schema"]));
            let body = body.map(|b| format!(" — {b}")).unwrap_or_default();
            let _ = writeln!(out, "| {status} | {}{body} |", cell(r["description"].as_str().unwrap_or_default()));
        }
    }
    let _ = writeln!(out, "\n# Schemas\n");
    for (name, schema) in doc["components"]["schemas"].as_object().unwrap() {
        let _ = writeln!(out, "\n## `{name}`\n");
        if let Some(d) = schema["description"].as_str() {
            let _ = writeln!(out, "{}\n", d.trim());
        }
        if let Some(props) = schema["properties"].as_object() {
            let required: Vec<&str> =
                schema["required"].as_array().map(|r| r.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
            let _ = writeln!(out, "| Field | Schema | Meaning |\n|---|---|---|");
            for (field, p) in props {
                let req = if required.contains(&field.as_str()) { " (required)" } else { "" };
                let mut kind = schema_name(p);
                if let Some(values) = p["enum"].as_array() {
                    kind = values
                        .iter()
                        .map(|v| format!("`{}`", v.as_str().unwrap_or_default()))
                        .collect::<Vec<_>>()
                        .join(", ");
                }
                let _ = writeln!(
                    out,
                    "| `{field}`{req} | {kind} | {} |",
                    cell(p["description"].as_str().unwrap_or_default())
                );
            }
        } else if let Some(values) = schema["enum"].as_array() {
            let list: Vec<String> = values.iter().map(|v| format!("`{}`", v.as_str().unwrap_or_default())).collect();
            let _ = writeln!(out, "One of {}.", list.join(", "));
        } else {
            let _ = writeln!(out, "```json\n{}\n```", serde_json::to_string_pretty(schema).unwrap());
        }
    }
    out
}

/// Compares `path` with `generated`, or rewrites it under `BATON_BLESS=1`.
fn check_or_bless(path: &Path, generated: &str) {
    if std::env::var_os("BATON_BLESS").is_some() {
        std::fs::write(path, generated).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        committed == generated,
        "{} is stale: regenerate it with BATON_BLESS=1 cargo nextest run -E 'test(book)'",
        path.display()
    );
}

#[test]
fn the_book_has_every_cli_command_and_flag() {
    let path = book().join("cli.md");
    check_or_bless(&path, &cli_markdown());
    let text = std::fs::read_to_string(&path).unwrap();
    let mut root = baton::cli::command();
    root.build();
    let mut missing = Vec::new();
    fn walk(cmd: &clap::Command, path: String, root: bool, text: &str, missing: &mut Vec<String>) {
        let heading = format!(" `{path}`\n");
        let Some(at) = text.find(&heading) else {
            missing.push(path);
            return;
        };
        // The command's own section: up to the next heading of a command.
        let section = &text[at..];
        let end = section[heading.len()..].find("\n#").map_or(section.len(), |e| e + heading.len());
        let section = &section[..end];
        for arg in own_args(cmd, root) {
            let name = arg.get_long().map(|l| format!("--{l}")).unwrap_or_else(|| arg.get_id().as_str().to_uppercase());
            if !section.contains(&name) {
                missing.push(format!("{path} {name}"));
            }
        }
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set() && s.get_name() != "help") {
            walk(sub, format!("{path} {}", sub.get_name()), false, text, missing);
        }
    }
    walk(&root, "baton".into(), true, &text, &mut missing);
    assert!(missing.is_empty(), "missing from docs/src/cli.md: {missing:?}");
}

#[test]
fn the_book_has_every_api_route() {
    let doc: Value = serde_json::from_str(baton::web::api::openapi::openapi_json()).unwrap();
    check_or_bless(&book().join("api.md"), &api_markdown(&doc));
    check_or_bless(&book().join("openapi.json"), &format!("{}\n", baton::web::api::openapi::openapi_json()));
    let text = std::fs::read_to_string(book().join("api.md")).unwrap();
    let mut missing = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            let heading = format!("## `{} {path}`", method.to_uppercase());
            if !text.contains(&heading) {
                missing.push(heading);
            }
        }
    }
    assert!(missing.is_empty(), "missing from docs/src/api.md: {missing:?}");
    let summary = std::fs::read_to_string(book().join("SUMMARY.md")).unwrap();
    for chapter in ["cli.md", "api.md", "configuration.md", "engine.md", "operations.md"] {
        assert!(summary.contains(&format!("({chapter})")), "SUMMARY.md lacks {chapter}");
        assert!(book().join(chapter).exists(), "docs/src/{chapter} is missing");
    }
}

/// mdBook's anchor for a heading: lowercase, spaces to `-`, punctuation other than `-` and `_`
/// dropped.
fn heading_anchor(text: &str) -> String {
    text.trim()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

/// `(links, anchors)` of one Markdown file: every link destination, and the anchors of its
/// headings.
fn links_and_anchors(markdown: &str) -> (Vec<String>, Vec<String>) {
    use pulldown_cmark::{Event, Parser, Tag, TagEnd};
    let (mut links, mut anchors) = (Vec::new(), Vec::new());
    let mut heading: Option<String> = None;
    for event in Parser::new(markdown) {
        match event {
            Event::Start(Tag::Link { dest_url, .. }) | Event::Start(Tag::Image { dest_url, .. }) => {
                links.push(dest_url.to_string())
            }
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::Text(text) | Event::Code(text) => {
                if let Some(h) = heading.as_mut() {
                    h.push_str(&text)
                }
            }
            Event::End(TagEnd::Heading(_)) => anchors.extend(heading.take().map(|h| heading_anchor(&h))),
            _ => {}
        }
    }
    (links, anchors)
}

/// Every relative link in the book lands on a file of the book (mdBook publishes `docs/src`
/// only, so `../../README.md` is dead on the published site) and every `#anchor` on a heading of
/// its target.
#[test]
fn every_link_in_the_book_lands() {
    let root = book();
    let mut pages = std::collections::BTreeMap::new();
    for entry in std::fs::read_dir(&root).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            pages.insert(name, links_and_anchors(&std::fs::read_to_string(&path).unwrap()));
        }
    }
    let mut dead = Vec::new();
    for (page, (links, _)) in &pages {
        for link in links {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = link.split_once('#').unwrap_or((link, ""));
            let target = if file.is_empty() { page.as_str() } else { file };
            if target.contains('/') || !root.join(target).is_file() {
                dead.push(format!("{page}: {link} (no such page in docs/src)"));
                continue;
            }
            if !anchor.is_empty() {
                let Some((_, anchors)) = pages.get(target) else {
                    continue;
                };
                if !anchors.iter().any(|a| a == anchor) {
                    dead.push(format!("{page}: {link} (no heading with that anchor)"));
                }
            }
        }
    }
    assert!(dead.is_empty(), "dead links in the book:\n{}", dead.join("\n"));
}

#[test]
fn the_link_check_reads_links_and_anchors_as_mdbook_does() {
    let (links, anchors) = links_and_anchors("# How a run `stays` safe!\n\nSee [x](a.md#b) and ![p](p.png).\n");
    assert_eq!(links, ["a.md#b", "p.png"]);
    assert_eq!(anchors, ["how-a-run-stays-safe"]);
}

/// The README's relative links and pictures name files of the repository.
#[test]
fn every_link_in_the_readme_lands() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (links, anchors) = links_and_anchors(&std::fs::read_to_string(repo.join("README.md")).unwrap());
    let dead: Vec<_> = links
        .iter()
        .filter(|l| !l.contains("://") && !l.starts_with("mailto:"))
        .filter(|l| match l.split_once('#') {
            Some(("", anchor)) => !anchors.iter().any(|a| a == anchor),
            Some((file, _)) => !repo.join(file).exists(),
            None => !repo.join(l.as_str()).exists(),
        })
        .collect();
    assert!(dead.is_empty(), "dead links in README.md: {dead:?}");
}

/// Every subcommand is deferred (`cli::Command`): its arguments, and any about its flags' structs
/// carry, are applied only when it is built, after the about its parent's listing shows. The
/// two must agree at every level: a flags struct's doc comment had replaced `execute run`'s,
/// `goal`'s and `daemon start`'s about once built.
#[test]
fn a_deferred_command_has_the_about_its_listing_shows() {
    fn walk(parent: &clap::Command, path: &str, differ: &mut Vec<String>) {
        for sub in parent.get_subcommands() {
            let listed = sub.get_about().map(ToString::to_string);
            let mut built = sub.clone();
            // Builds this command only (its deferred definition), as `baton … --help` does.
            let _ = built.render_help();
            let shown = built.get_about().map(ToString::to_string);
            let path = format!("{path} {}", sub.get_name());
            if listed != shown {
                differ.push(format!("{path}: listed {listed:?}, shown {shown:?}"));
            }
            walk(&built, &path, differ);
        }
    }
    let mut root = baton::cli::command();
    let _ = root.render_help();
    let mut differ = Vec::new();
    walk(&root, "baton", &mut differ);
    assert!(differ.is_empty(), "{differ:#?}");
    assert!(
        root.find_subcommand("execute").is_some_and(|e| e.get_subcommands().next().is_none()),
        "execute is not deferred"
    );
}
