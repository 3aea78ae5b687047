//! Text on its way to a terminal: names given by anyone and strings a node
//! supplies (owners, error messages, server fields) may carry escape
//! sequences that rewrite the screen or the window title, or be a megabyte
//! long. Every line the command prints goes through here: control and
//! other non-printing characters are escaped (`\u{1b}`), bytes that are not
//! UTF-8 shown as `\xNN`, and long text cut with its length said.

/// The most characters of one name or value shown in a table cell or a
/// message (JSON output keeps the whole text).
pub const MAX_SHOWN: usize = 200;

/// The most characters of one printed line.
const MAX_LINE: usize = 4096;

/// `text` with every non-printing character escaped, and the backslash
/// doubled so that an escape shown cannot be forged.
pub fn escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            // Printable, but Debug would escape them: keep them readable.
            '"' | '\'' => out.push(c),
            _ => out.extend(c.escape_debug()),
        }
    }
    out
}

/// Bytes from a node, escaped as [`escaped`], with each byte that is not
/// part of valid UTF-8 as `\xNN`.
pub fn bytes(raw: &[u8]) -> String {
    let mut out = String::with_capacity(raw.len());
    for chunk in raw.utf8_chunks() {
        out.push_str(&escaped(chunk.valid()));
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// `text` escaped and cut to `max` characters, saying how long it was.
pub fn short(text: &str, max: usize) -> String {
    cut(escaped(text), text.len(), max)
}

/// A name for a message or a table: escaped, at most [`MAX_SHOWN`]
/// characters.
pub fn name(text: &str) -> String {
    short(text, MAX_SHOWN)
}

/// A whole line for a terminal: escaped, at most 4,096 characters.
pub fn line(text: &str) -> String {
    cut(escaped(text), text.len(), MAX_LINE)
}

/// JSON for a terminal: serde_json escapes the C0 controls in strings, not
/// DEL, the C1 controls (U+0080–U+009F, where a terminal may read a CSI)
/// or the bidirectional overrides; this escapes those as `\uXXXX` too. The
/// JSON means the same: they only occur inside strings.
pub fn json(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        let bidi = matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
        if c.is_control() && c != '\n' || bidi {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

fn cut(escaped: String, original_bytes: usize, max: usize) -> String {
    if escaped.chars().count() <= max {
        return escaped;
    }
    let kept: String = escaped.chars().take(max).collect();
    format!("{kept}… ({original_bytes} bytes)")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn escape_sequences_are_shown_not_sent() {
        assert_eq!(escaped("a\x1b[31mb"), "a\\u{1b}[31mb");
        assert_eq!(escaped("x\ny\t"), "x\\ny\\t");
        assert_eq!(escaped("\u{9b}2J"), "\\u{9b}2J", "the C1 CSI");
        assert_eq!(escaped("\u{202e}abc"), "\\u{202e}abc", "a bidi override");
        assert_eq!(escaped("back\\slash \"q\""), "back\\\\slash \"q\"");
        assert_eq!(escaped("plain-name:7 ÄÖ 日本"), "plain-name:7 ÄÖ 日本");
        assert_eq!(bytes(b"ok\xff\xfe!"), "ok\\xff\\xfe!");
    }

    #[test]
    fn long_text_is_cut_with_its_length() {
        let long = "x".repeat(100_000);
        let shown = name(&long);
        assert!(shown.ends_with("… (100000 bytes)"), "{}", &shown[190..]);
        assert!(shown.chars().count() < MAX_SHOWN + 20);
    }

    proptest! {
        #[test]
        fn nothing_shown_can_reach_a_terminal_as_a_control(raw in proptest::collection::vec(any::<u8>(), 0..300)) {
            let shown = bytes(&raw);
            prop_assert!(!shown.chars().any(char::is_control), "{shown:?}");
            let text = String::from_utf8_lossy(&raw);
            prop_assert!(!line(&text).chars().any(char::is_control));
        }

        #[test]
        fn json_stays_json_and_shows_no_control(text in "\\PC*|[\u{0}-\u{a0}\u{202e}]*") {
            let raw = serde_json::to_string_pretty(&serde_json::json!({ "name": text })).expect("JSON");
            let safe = json(&raw);
            prop_assert!(!safe.chars().any(|c| c.is_control() && c != '\n'), "{safe:?}");
            let back: serde_json::Value = serde_json::from_str(&safe).expect("still JSON");
            prop_assert_eq!(back["name"].as_str(), Some(text.as_str()));
        }
    }
}
