//! Small text rules every layer shares: the first line of a text, a text cut to a number of
//! characters with an ellipsis, and a word quoted for a POSIX shell. Pure functions of their
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
}
