//! Tokenisation shared by memory recall and skill matching: runs of
//! `[a-z0-9]` in the lowercased text, and each CJK ideograph on its own, so
//! Chinese, English and mixed text match each other without a dictionary
//! (the query `Python programming` finds `用户喜欢使用 Python 编程`).
//! And [`inert`]: text made safe to print on a terminal.
//! Pure functions; depends on nothing.

/// Is `c` a CJK ideograph (unified ideographs and their extensions, and the
/// compatibility block)?
pub fn is_cjk_ideograph(c: char) -> bool {
    matches!(c as u32,
        0x4E00..=0x9FFF | 0x3400..=0x4DBF | 0x20000..=0x2EBEF | 0x30000..=0x323AF | 0xF900..=0xFAFF)
}

/// Is `c` an East Asian wide character: a CJK ideograph, kana, hangul, a CJK
/// symbol or a full-width form? Such a character is about one model token,
/// and takes two terminal columns.
pub fn is_wide(c: char) -> bool {
    is_cjk_ideograph(c)
        || matches!(c as u32,
            0x3000..=0x303F | 0x3040..=0x30FF | 0xAC00..=0xD7AF | 0xFF00..=0xFF60 | 0xFFE0..=0xFFE6)
}

/// The tokens of `text`, in order, repeats kept.
pub fn tokenize(text: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut word = String::new();
    for c in text.chars() {
        let lower = c.to_ascii_lowercase();
        if lower.is_ascii_lowercase() || lower.is_ascii_digit() {
            word.push(lower);
            continue;
        }
        if !word.is_empty() {
            tokens.push(std::mem::take(&mut word));
        }
        if is_cjk_ideograph(c) {
            tokens.push(c.to_string());
        }
    }
    if !word.is_empty() {
        tokens.push(word);
    }
    tokens
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn english_chinese_and_mixed() {
        assert_eq!(tokenize("Hello, World 42!"), ["hello", "world", "42"]);
        assert_eq!(
            tokenize("用户喜欢使用 Python 编程"),
            ["用", "户", "喜", "欢", "使", "用", "python", "编", "程"]
        );
        assert_eq!(tokenize("GPT-4o用法"), ["gpt", "4o", "用", "法"]);
        assert!(tokenize("— ... ¿? ").is_empty());
        assert_eq!(tokenize("Ünïcode café"), ["n", "code", "caf"]);
    }
}

/// `text` safe to print on a person's terminal: every control character
/// but newline and tab (ESC, which starts the sequences that set a
/// window's title, write the clipboard or move the cursor; a carriage
/// return that overwrites a line; BEL), the C1 controls and the
/// bidirectional overrides that reorder what is shown are written as
/// visible escapes (`\x1b`, `\u{202e}`). Text from a model or a tool then
/// cannot drive the terminal of whoever reads it.
pub fn inert(text: &str) -> std::borrow::Cow<'_, str> {
    fn unsafe_char(c: char) -> bool {
        (c.is_control() && c != '\n' && c != '\t')
            || matches!(c as u32, 0x202A..=0x202E | 0x2066..=0x2069 | 0x200E | 0x200F | 0x061C)
    }
    if !text.chars().any(unsafe_char) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if !unsafe_char(c) {
            out.push(c);
        } else if (c as u32) < 0x80 {
            out.push_str(&format!("\\x{:02x}", c as u32));
        } else {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod inert_tests {
    use super::inert;

    #[test]
    fn terminal_sequences_become_visible_and_plain_text_stays() {
        assert_eq!(inert("a\tb\nc é 中"), "a\tb\nc é 中");
        assert_eq!(
            inert("\x1b]0;pwned\x07\x1b]52;c;ZXZpbA==\x07ok\r"),
            "\\x1b]0;pwned\\x07\\x1b]52;c;ZXZpbA==\\x07ok\\x0d"
        );
        assert_eq!(inert("\u{9b}31m \u{202e}txt"), "\\u{9b}31m \\u{202e}txt");
    }
}
