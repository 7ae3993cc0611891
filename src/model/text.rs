//! Small text rules every layer shares: the first line of a text, a text cut to a number of
//! characters with an ellipsis, a word quoted for a POSIX shell, and where a NUL hides in a
//! JSON value. Pure functions of their
//! arguments: this module never does IO.

/// The first line of `text`, trimmed (empty for an empty text).
pub fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or("").trim()
}

/// `text` when it has at most `max_chars` characters; else its first `max_chars` characters
/// followed by `…`.
pub fn cut(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        None => text.to_string(),
        Some((end, _)) => format!("{}…", &text[..end]),
    }
}

/// `word` as one word of a POSIX shell command line: unchanged when it is made of ASCII
/// letters, digits and `/ . _ - + : @` only, else single-quoted (a `'` inside becomes `'\''`),
/// so nothing in it is expanded or split (file names, branch names and ids can come from
/// agents and users, and are never trusted).
pub fn shell_quote(word: &str) -> String {
    if !word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || "/._-+:@".contains(c)) {
        return word.to_string();
    }
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// Where the first NUL character of `value` is, as a path into it (`phases[0].steps[1].task_description`,
/// `feedback`; the key itself for a key that holds one), or `None` when it holds none. No commit
/// message, file name, command or environment variable can carry a NUL, so a text that holds
/// one is refused where it comes in: a plan, an operator's event, a spec (found by a tester:
/// a step whose description held one failed at consolidation on every attempt).
pub fn nul_path(value: &serde_json::Value) -> Option<String> {
    use serde_json::Value;
    match value {
        Value::String(s) => s.contains('\0').then(String::new),
        Value::Array(items) => {
            items.iter().enumerate().find_map(|(i, v)| nul_path(v).map(|p| join(&format!("[{i}]"), &p)))
        }
        Value::Object(map) => map.iter().find_map(|(k, v)| {
            if k.contains('\0') {
                return Some(k.escape_default().to_string());
            }
            nul_path(v).map(|p| join(k, &p))
        }),
        _ => None,
    }
}

/// `head` followed by the rest of a path (`[0]` or `.key`).
fn join(head: &str, rest: &str) -> String {
    if rest.is_empty() || rest.starts_with('[') {
        format!("{head}{rest}")
    } else {
        format!("{head}.{rest}")
    }
}

/// Whether `text` can be shown as one line that reads as it is: no control character, no
/// line or paragraph separator (U+2028, U+2029), and no bidirectional override, embedding or
/// isolate (U+202A–U+202E, U+2066–U+2069), which make a title or a name display as other text
/// than it holds ("Trojan Source"; found by a tester in spec titles). For titles, names and
/// other one-line fields.
pub fn is_one_line(text: &str) -> bool {
    !text.chars().any(|c| {
        c.is_control() || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_keeps_short_texts_and_marks_a_cut_one() {
        assert_eq!(cut("héllo", 5), "héllo");
        assert_eq!(cut("héllo", 2), "hé…");
        assert_eq!(cut("", 0), "");
        assert_eq!(cut("a", 0), "…");
    }

    #[test]
    fn first_line_is_the_trimmed_first_line() {
        assert_eq!(first_line("  do it  \nthen more"), "do it");
        assert_eq!(first_line(""), "");
    }

    #[test]
    fn shell_quote_quotes_what_a_shell_would_split_or_expand() {
        assert_eq!(shell_quote("src/a_b-1.rs"), "src/a_b-1.rs");
        assert_eq!(shell_quote("agent@host:x+y"), "agent@host:x+y");
        assert_eq!(shell_quote("it's a file;rm"), "'it'\\''s a file;rm'");
        assert_eq!(shell_quote(""), "''");
        for risky in ["a{b,c}", "$HOME", "*.rs", "é", "x=1", "~/x", "a\nb"] {
            assert!(shell_quote(risky).starts_with('\''), "{risky}");
        }
    }

    #[test]
    fn nul_path_names_where_a_nul_is() {
        let plan = serde_json::json!({"task_id": "t", "phases": [{"name": "ok", "steps": [
            {"step_id": "1.1"}, {"step_id": "1.2", "task_description": "a\0b"}]}]});
        assert_eq!(nul_path(&plan).as_deref(), Some("phases[0].steps[1].task_description"));
        assert_eq!(nul_path(&serde_json::json!({"feedback": "x\0"})).as_deref(), Some("feedback"));
        assert_eq!(nul_path(&serde_json::json!(["a", "\0"])).as_deref(), Some("[1]"));
        assert_eq!(nul_path(&serde_json::json!({"ok": ["é", 1, null, {"deep": "fine\n\t"}]})), None);
    }

    #[test]
    fn one_line_refuses_controls_separators_and_bidi_overrides() {
        assert!(is_one_line("Add a farewell — é ☃ 漢"));
        for bad in ["a\nb", "a\u{1b}b", "a\u{2028}b", "a\u{2029}b", "abc\u{202e}fed", "x\u{2066}y", "\u{85}"] {
            assert!(!is_one_line(bad), "{bad:?}");
        }
    }
}
