//! An answer split into messages a platform takes: each piece at most
//! `max` UTF-16 code units (Telegram counts those; the others count no
//! more), cut at a paragraph break, else a line break, else a space, else
//! anywhere between two characters. A code block cut in two is closed at
//! the end of one piece and opened again at the start of the next, so each
//! piece renders on its own.

/// `text` in pieces of at most `max` UTF-16 units (`max` >= 16), in order.
/// Joining them gives `text` back, but for the whitespace at the cuts and
/// the code fences added around a cut.
pub fn split_message(text: &str, max: usize) -> Vec<String> {
    let max = max.max(16);
    let mut pieces = Vec::new();
    let mut rest = text.trim();
    let mut reopen: Option<String> = None;
    while !rest.is_empty() {
        let prefix = reopen.take().map(|f| format!("{f}\n")).unwrap_or_default();
        // Room for the fence that may have to close this piece.
        let room = max.saturating_sub(units(&prefix) + 4);
        if units(rest) <= max.saturating_sub(units(&prefix)) {
            pieces.push(format!("{prefix}{rest}"));
            break;
        }
        let cut = cut_at(rest, room);
        let (head, tail) = rest.split_at(cut);
        let mut piece = format!("{prefix}{}", head.trim_end());
        if let Some(fence) = open_fence(&piece) {
            piece.push_str("\n```");
            reopen = Some(fence);
        }
        pieces.push(piece);
        rest = tail.trim_start();
    }
    pieces
}

fn units(s: &str) -> usize {
    s.encode_utf16().count()
}

/// The byte index to cut `text` at: the last paragraph break, line break
/// or space within the first `room` units (not in its first quarter),
/// else the last character boundary within them.
fn cut_at(text: &str, room: usize) -> usize {
    let mut end = 0;
    let mut used = 0;
    for (i, c) in text.char_indices() {
        used += c.len_utf16();
        if used > room {
            break;
        }
        end = i + c.len_utf8();
    }
    let window = &text[..end];
    let floor = end / 4;
    for sep in ["\n\n", "\n", " "] {
        if let Some(i) = window.rfind(sep)
            && i > floor
        {
            return i;
        }
    }
    end.max(text.chars().next().map_or(0, char::len_utf8))
}

/// The opening line of a code fence left open in `piece` (```` ``` ```` and
/// its language), if its fences do not pair up.
fn open_fence(piece: &str) -> Option<String> {
    let mut open = None;
    for line in piece.lines() {
        let t = line.trim_start();
        if t.starts_with("```") {
            open = match open {
                None => Some(t.to_string()),
                Some(_) => None,
            };
        }
    }
    open
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_one_piece() {
        assert_eq!(split_message("hello", 100), vec!["hello"]);
    }

    #[test]
    fn every_piece_fits_and_nothing_is_lost() {
        let text: String = (0..500).map(|i| format!("word{i} ")).collect();
        let pieces = split_message(&text, 100);
        assert!(pieces.len() > 30);
        assert!(pieces.iter().all(|p| units(p) <= 100));
        let joined: Vec<&str> = pieces.iter().flat_map(|p| p.split(' ')).collect();
        let words: Vec<&str> = text.split_whitespace().collect();
        assert_eq!(joined, words);
    }

    #[test]
    fn cuts_at_paragraphs_before_lines_and_spaces() {
        let text = format!("{}\n\n{}", "a ".repeat(30).trim(), "b ".repeat(30).trim());
        let pieces = split_message(&text, 80);
        assert_eq!(pieces[0], "a ".repeat(30).trim());
        assert_eq!(pieces[1], "b ".repeat(30).trim());
    }

    #[test]
    fn counts_utf16_units_and_never_cuts_a_character() {
        let text = "😀".repeat(100); // 2 units each, no spaces
        let pieces = split_message(&text, 50);
        assert!(pieces.iter().all(|p| units(p) <= 50));
        assert_eq!(pieces.concat(), text);
    }

    #[test]
    fn a_cut_code_block_is_closed_and_reopened() {
        let code: String = (0..40).map(|i| format!("let x{i} = {i};\n")).collect();
        let text = format!("Here:\n```rust\n{code}```\nDone.");
        let pieces = split_message(&text, 200);
        assert!(pieces.len() > 1);
        for p in &pieces {
            assert!(units(p) <= 200, "{p}");
            assert_eq!(p.matches("```").count() % 2, 0, "unbalanced: {p}");
        }
        assert!(pieces[1].starts_with("```rust\n"));
    }
}
