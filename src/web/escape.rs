//! The pages' HTML escaper (`askama.toml` names it for every `.html` template): askama's own
//! `Html` escaping of `<`, `>`, `&`, `"` and `'`, after control characters are written as the
//! CLI writes them (`runtime::console::printable`: ESC as `\u{1b}`, NUL as `\u{0}`; a line
//! break, a carriage return and a tab are kept). A spec body, a reason or a plan field holding
//! ESC, NUL or BEL reached the page's source raw (found by a tester): invalid in an HTML
//! document, and invisible or mangled on screen. Written out, they read the same on every
//! machine (a control picture such as `␛` needs a font that has it).
//!
//! Owns only that composition; never decides what text is shown, and never unescapes.

use std::fmt::{self, Write};

use askama::filters::Escaper;

use crate::runtime::console::printable;

/// The escaper of every `.html` template (see the module doc).
#[derive(Debug, Clone, Copy, Default)]
pub struct Html;

impl Escaper for Html {
    fn write_escaped_str<W: Write>(&self, dest: W, string: &str) -> fmt::Result {
        askama::filters::Html.write_escaped_str(dest, &printable(string))
    }

    fn write_escaped_char<W: Write>(&self, dest: W, c: char) -> fmt::Result {
        let mut buf = [0; 4];
        self.write_escaped_str(dest, c.encode_utf8(&mut buf))
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
    fn markup_is_escaped_and_control_characters_are_written_out() {
        assert_eq!(escaped("<b>&\"'"), "&#60;b&#62;&#38;&#34;&#39;");
        assert_eq!(
            escaped("red\u{1b}[31m, nul\u{0}, bell\u{7}, c1\u{85}."),
            r"red\u{1b}[31m, nul\u{0}, bell\u{7}, c1\u{85}."
        );
        assert_eq!(escaped("lines\r\n\tstay"), "lines\r\n\tstay");
        assert_eq!(escaped("é ☃ 漢"), "é ☃ 漢");
        let mut one = String::new();
        Html.write_escaped_char(&mut one, '\u{1b}').unwrap();
        Html.write_escaped_char(&mut one, '<').unwrap();
        assert_eq!(one, r"\u{1b}&#60;");
    }
}
