//! Forge items as specs: what an issue or a work item imports as ([`ForgeItem`]), what an
//! import did ([`ImportOutcome`]), and the text helpers imports need (fitting a title and a
//! body into the spec limits, Azure DevOps HTML as readable text).
//!
//! The imports themselves are [`Specs::import`](crate::runtime::specs::Specs::import) and
//! friends. This module never authenticates a delivery, never touches HTTP and never does IO.

use crate::runtime::specs::{MAX_BODY_BYTES, MAX_TITLE_CHARS};
use crate::store::SpecRow;

/// A forge item as a spec: where it lives and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForgeItem {
    /// `github` or `ado`.
    pub source: String,
    /// Its web address (the spec's `source_url`; one spec per address).
    pub url: String,
    /// Its title.
    pub title: String,
    /// Its description, as markdown or plain text.
    pub body: String,
}

impl ForgeItem {
    /// The item with its title made one line of at most [`MAX_TITLE_CHARS`] characters
    /// (`(untitled)` when empty) and its body cut to [`MAX_BODY_BYTES`] bytes at a character
    /// boundary, with a note pointing at the item.
    pub fn fitted(mut self) -> ForgeItem {
        let one_line: String = self.title.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
        let mut title = one_line.trim().to_string();
        if title.is_empty() {
            title = "(untitled)".into();
        }
        if title.chars().count() > MAX_TITLE_CHARS {
            title = title.chars().take(MAX_TITLE_CHARS - 1).collect::<String>() + "…";
        }
        self.title = title;
        if self.body.len() > MAX_BODY_BYTES {
            let note = format!("\n\n… (cut to fit; the whole text is at {})", self.url);
            let mut end = MAX_BODY_BYTES.saturating_sub(note.len());
            while !self.body.is_char_boundary(end) {
                end -= 1;
            }
            self.body.truncate(end);
            self.body.push_str(&note);
        }
        self
    }
}

/// What an import did.
#[derive(Debug, Clone, PartialEq)]
pub enum ImportOutcome {
    /// A new spec (status `imported`).
    Created(SpecRow),
    /// The item's spec got the new title and body, and is `imported` again (its plan dropped).
    Updated(SpecRow),
    /// The item's spec already has this title and body.
    Unchanged(SpecRow),
    /// The item's spec is approved, fired or final: its plan stays, the update is noted as a
    /// spec event `import_update_ignored`.
    Ignored {
        /// The spec, unchanged.
        spec: SpecRow,
        /// Why.
        reason: String,
    },
}

impl ImportOutcome {
    /// The spec concerned.
    pub fn spec(&self) -> &SpecRow {
        match self {
            ImportOutcome::Created(s) | ImportOutcome::Updated(s) | ImportOutcome::Unchanged(s) => s,
            ImportOutcome::Ignored { spec, .. } => spec,
        }
    }

    /// `created`, `updated`, `unchanged` or `ignored`.
    pub fn as_str(&self) -> &'static str {
        match self {
            ImportOutcome::Created(_) => "created",
            ImportOutcome::Updated(_) => "updated",
            ImportOutcome::Unchanged(_) => "unchanged",
            ImportOutcome::Ignored { .. } => "ignored",
        }
    }
}

/// Readable text of an HTML fragment (Azure DevOps descriptions): paragraphs, `div`s and
/// headings become blank-line separated blocks, `br` a line break, `li` a `- ` item; other
/// tags are dropped (the contents of `script` and `style` too); entities are decoded
/// (named: amp, lt, gt, quot, apos, nbsp; numeric: decimal and hex); runs of spaces collapse.
pub fn html_to_text(html: &str) -> String {
    let mut out = String::new();
    let mut rest = html;
    let mut skip_until: Option<&'static str> = None;
    while let Some(lt) = rest.find('<') {
        if skip_until.is_none() {
            push_text(&mut out, &rest[..lt]);
        }
        let after = &rest[lt + 1..];
        let Some(gt) = after.find('>') else {
            if skip_until.is_none() {
                push_text(&mut out, &rest[lt..]);
            }
            rest = "";
            break;
        };
        let tag = after[..gt].trim();
        rest = &after[gt + 1..];
        let closing = tag.starts_with('/');
        let name: String = tag
            .trim_start_matches('/')
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect::<String>()
            .to_ascii_lowercase();
        if let Some(end) = skip_until {
            if closing && name == end {
                skip_until = None;
            }
            continue;
        }
        match name.as_str() {
            "script" if !closing => skip_until = Some("script"),
            "style" if !closing => skip_until = Some("style"),
            "br" => newline(&mut out, 1),
            "li" if !closing => {
                newline(&mut out, 1);
                out.push_str("- ");
            }
            "p" | "div" | "ul" | "ol" | "h1" | "h2" | "h3" | "h4" | "h5" | "h6" | "table" | "tr" | "blockquote"
            | "pre" => newline(&mut out, 2),
            "li" => newline(&mut out, 1),
            _ => {}
        }
    }
    if skip_until.is_none() {
        push_text(&mut out, rest);
    }
    let lines: Vec<&str> = out.lines().map(str::trim_end).collect();
    let mut text = String::new();
    let mut blank = 0;
    for line in lines {
        if line.trim().is_empty() {
            blank += 1;
            continue;
        }
        if !text.is_empty() {
            text.push_str(if blank > 0 { "\n\n" } else { "\n" });
        }
        blank = 0;
        text.push_str(line.trim_start());
    }
    text
}

/// Ends the current line, leaving at most `lines - 1` blank lines before the next text.
fn newline(out: &mut String, lines: usize) {
    while out.ends_with(' ') {
        out.pop();
    }
    let have = out.chars().rev().take_while(|c| *c == '\n').count();
    for _ in have..lines {
        out.push('\n');
    }
}

/// Appends decoded text, collapsing whitespace runs to one space.
fn push_text(out: &mut String, raw: &str) {
    let decoded = decode_entities(raw);
    for c in decoded.chars() {
        if c.is_whitespace() && c != '\u{a0}' {
            if !(out.is_empty() || out.ends_with(' ') || out.ends_with('\n')) {
                out.push(' ');
            }
        } else if c == '\u{a0}' {
            out.push(' ');
        } else {
            out.push(c);
        }
    }
}

/// Decodes `&name;` and `&#n;` / `&#xh;` entities; anything else is kept as written.
fn decode_entities(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        let after = &rest[amp + 1..];
        let semi = after.find(';').filter(|i| *i <= 10);
        let decoded = semi.and_then(|i| {
            let ent = &after[..i];
            let c = match ent {
                "amp" => Some('&'),
                "lt" => Some('<'),
                "gt" => Some('>'),
                "quot" => Some('"'),
                "apos" | "#39" => Some('\''),
                "nbsp" => Some('\u{a0}'),
                _ => ent.strip_prefix('#').and_then(|n| {
                    let code = match n.strip_prefix(['x', 'X']) {
                        Some(hex) => u32::from_str_radix(hex, 16).ok(),
                        None => n.parse::<u32>().ok(),
                    };
                    code.and_then(char::from_u32)
                }),
            };
            c.map(|c| (c, i))
        });
        match decoded {
            Some((c, i)) => {
                out.push(c);
                rest = &after[i + 1..];
            }
            None => {
                out.push('&');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_becomes_readable_text() {
        let html = "<div>Fix the <b>login</b> page&nbsp;now.</div><p>Steps:</p><ul><li>open &lt;app&gt;</li>\
                    <li>click &quot;Sign in&quot; &amp; wait</li></ul>line one<br>line two<br/>&#233;&#x1F600;\
                    <script>alert(1)</script> end";
        assert_eq!(
            html_to_text(html),
            "Fix the login page now.\n\nSteps:\n\n- open <app>\n- click \"Sign in\" & wait\n\nline one\nline two\né😀 end"
        );
        assert_eq!(html_to_text("plain &unknown; & text"), "plain &unknown; & text");
        assert_eq!(html_to_text(""), "");
        assert_eq!(html_to_text("a < b"), "a < b");
    }

    #[test]
    fn titles_and_bodies_are_fitted_to_the_spec_limits() {
        let item = ForgeItem {
            source: "github".into(),
            url: "https://example.invalid/1".into(),
            title: format!("  {}\n", "é".repeat(300)),
            body: "ü".repeat(MAX_BODY_BYTES),
        }
        .fitted();
        assert_eq!(item.title.chars().count(), MAX_TITLE_CHARS);
        assert!(item.title.ends_with('…'));
        assert!(item.body.len() <= MAX_BODY_BYTES);
        assert!(item.body.ends_with("https://example.invalid/1)"));
        let empty = ForgeItem { source: "ado".into(), url: String::new(), title: " ".into(), body: String::new() };
        assert_eq!(empty.fitted().title, "(untitled)");
    }
}
