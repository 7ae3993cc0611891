//! The pages' HTML escaper (`askama.toml` names it for every `.html` template): askama's own
//! `Html` escaping of `<`, `>`, `&`, `"` and `'`, plus control characters shown as what they
//! are. A spec body, a reason or a plan field holding ESC, NUL or BEL reached the page's source
//! raw (found by a tester): invalid in an HTML document, and invisible or mangled on screen.
//! Each C0 control but tab, line feed and carriage return becomes its Unicode control picture
//! (ESC → `␛`, NUL → `␀`), DEL becomes `␡`, and a C1 control U+FFFD.
//!
//! Owns only that mapping; never decides what text is shown, and never unescapes.

use std::fmt::{self, Write};

use askama::filters::Escaper;

/// The escaper of every `.html` template (see the module doc).
#[derive(Debug, Clone, Copy, Default)]
pub struct Html;

/// What `c` is shown as, when it is a control character not kept as it is.
fn shown_as(c: char) -> Option<char> {
    match c {
        '\t' | '\n' | '\r' => None,
        '\u{0}'..='\u{1f}' => char::from_u32(0x2400 + u32::from(c)),
        '\u{7f}' => Some('\u{2421}'),
        '\u{80}'..='\u{9f}' => Some(char::REPLACEMENT_CHARACTER),
        _ => None,
    }
}

impl Escaper for Html {
    fn write_escaped_str<W: Write>(&self, mut dest: W, string: &str) -> fmt::Result {
        let mut rest = string;
        while let Some((at, picture)) = rest.char_indices().find_map(|(at, c)| shown_as(c).map(|p| (at, p))) {
            askama::filters::Html.write_escaped_str(&mut dest, &rest[..at])?;
            dest.write_char(picture)?;
            // Every control character mapped here is one byte in UTF-8 but the C1 ones (two).
            let len = rest[at..].chars().next().map_or(1, char::len_utf8);
            rest = &rest[at + len..];
        }
        askama::filters::Html.write_escaped_str(dest, rest)
    }

    fn write_escaped_char<W: Write>(&self, mut dest: W, c: char) -> fmt::Result {
        match shown_as(c) {
            Some(picture) => dest.write_char(picture),
            None => askama::filters::Html.write_escaped_char(dest, c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn escaped(text: &str) -> String {
        let mut out = String::new();
        Html.write_escaped_str(&mut out, text).unwrap();
        out
    }

    #[test]
    fn markup_is_escaped_and_control_characters_are_shown_as_pictures() {
        assert_eq!(escaped("<b>&\"'"), "&#60;b&#62;&#38;&#34;&#39;");
        assert_eq!(
            escaped("red\u{1b}[31m, nul\u{0}, bell\u{7}, del\u{7f}, c1\u{85}."),
            "red␛[31m, nul␀, bell␇, del␡, c1\u{fffd}."
        );
        assert_eq!(escaped("lines\r\n\tstay"), "lines\r\n\tstay");
        assert_eq!(escaped("é ☃ 漢"), "é ☃ 漢");
        let mut one = String::new();
        Html.write_escaped_char(&mut one, '\u{1b}').unwrap();
        Html.write_escaped_char(&mut one, '<').unwrap();
        assert_eq!(one, "␛&#60;");
    }
}
