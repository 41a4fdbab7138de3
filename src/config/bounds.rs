//! Bounds every config file must fit before a parser sees it, so a hostile
//! or broken file fails in milliseconds with a located error instead of
//! stalling the loader: a size cap ([`MAX_FILE_BYTES`], checked before the
//! file is read, and the read itself bounded) and a nesting cap
//! ([`MAX_NESTING`], checked by a cheap pre-scan of the text). Also the
//! text normalisation every file gets: a UTF-8 byte-order mark is dropped
//! and CRLF line ends become LF (neither changes a line or column).
//!
//! Why a pre-scan: libyaml's scanner keeps one "possible simple key" per
//! open flow collection and walks them all at each token, so a file of
//! nested `[` costs time quadratic in its depth (200 KB took over a
//! minute), and `serde_yaml`'s own recursion limit only applies after the
//! whole file was scanned. [`yaml_too_deep`] follows libyaml's tokenizer
//! closely enough to count real nesting only: brackets inside quoted
//! scalars, plain scalars, block scalars (`|`, `>`) and comments do not
//! count, so prompts may contain any text. Depends on `diag` only.

use std::io::Read;
use std::path::Path;

use super::diag::{Diagnostic, offset_to_place};

/// The largest config file accepted, in bytes (1 MiB): any agent, skill,
/// tool or settings file is far smaller; a bigger one is a mistake or an
/// attack.
pub const MAX_FILE_BYTES: usize = 1024 * 1024;

/// The deepest nesting accepted (block indentation levels plus flow `[`/`{`
/// in YAML; `[`/`{` in JSON). Real files nest a few levels.
pub const MAX_NESTING: usize = 64;

/// The most steps (minijinja's fuel: about one per instruction) any
/// template of a run may take to render: a loop a model or a file could
/// make a billion times long stops here, with an error, in well under a
/// second, instead of holding a thread of the daemon for hours. Real
/// prompts take a few thousand.
pub const TEMPLATE_FUEL: u64 = 1_000_000;

/// Whether `template` (which parses) renders within [`TEMPLATE_FUEL`] with
/// nothing given to it: a loop over a literal range that would stop every
/// run shows here, where it is written.
pub fn template_renders_within_fuel(template: &str) -> bool {
    let mut env = minijinja::Environment::new();
    env.set_fuel(Some(TEMPLATE_FUEL));
    !matches!(
        env.render_str(template, ()),
        Err(e) if e.kind() == minijinja::ErrorKind::OutOfFuel
    )
}

/// Which syntax a text is in, for [`check_text`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Syntax {
    Yaml,
    Json,
}

/// Reads a config file, refusing before reading it whole anything that is
/// not a regular file (a FIFO would block the loader, `/dev/zero` never
/// ends) or is larger than [`MAX_FILE_BYTES`]. `Ok(None)`: there is no file.
pub fn read_bounded(file: &Path, rel: &Path) -> Result<Option<Vec<u8>>, Diagnostic> {
    let cannot =
        |e: std::io::Error| Diagnostic::error(rel, (0, 0), format!("cannot read the file: {e}"));
    let meta = match std::fs::metadata(file) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(cannot(e)),
    };
    if !meta.is_file() {
        return Err(Diagnostic::error(
            rel,
            (0, 0),
            "not a regular file (a directory, device or pipe): replace it with a plain text file",
        ));
    }
    if meta.len() > MAX_FILE_BYTES as u64 {
        return Err(too_big(rel, meta.len()));
    }
    let opened = match std::fs::File::open(file) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(cannot(e)),
    };
    // The file may grow between the check and the read: read one byte past
    // the cap at most.
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    opened
        .take(MAX_FILE_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(cannot)?;
    if bytes.len() > MAX_FILE_BYTES {
        return Err(too_big(rel, bytes.len() as u64));
    }
    Ok(Some(bytes))
}

fn too_big(rel: &Path, len: u64) -> Diagnostic {
    Diagnostic::error(
        rel,
        (0, 0),
        format!(
            "the file is {len} bytes, the limit is {MAX_FILE_BYTES} bytes (1 MiB): \
             config files are short; move long text elsewhere or split the file"
        ),
    )
}

/// A file's bytes as text: refused with the place of the first byte that
/// is not UTF-8; then [`normalize`]d.
pub fn decode(bytes: Vec<u8>, rel: &Path) -> Result<String, Diagnostic> {
    match String::from_utf8(bytes) {
        Ok(text) => Ok(normalize(&text).into_owned()),
        Err(e) => {
            let valid = String::from_utf8_lossy(&e.as_bytes()[..e.utf8_error().valid_up_to()]);
            let place = offset_to_place(&normalize(&valid), usize::MAX);
            Err(Diagnostic::error(
                rel,
                place,
                "the file is not valid UTF-8 text here: save it as UTF-8",
            ))
        }
    }
}

/// Drops a leading UTF-8 byte-order mark and turns CRLF line ends into LF.
/// Lines and columns stay those of the file as written (a BOM is not a
/// column; `\r` only ever stands at the end of a line).
pub fn normalize(text: &str) -> std::borrow::Cow<'_, str> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if text.contains("\r\n") {
        std::borrow::Cow::Owned(text.replace("\r\n", "\n"))
    } else {
        std::borrow::Cow::Borrowed(text)
    }
}

/// Checks a text's size and nesting before it is parsed; the error is
/// located at the token that went one level too deep. `first_line` is the
/// file line of the text's first line (2 for a SKILL.md front matter).
pub fn check_text(
    path: &Path,
    text: &str,
    syntax: Syntax,
    first_line: usize,
) -> Result<(), Diagnostic> {
    check_size(path, text)?;
    let deep = match syntax {
        Syntax::Yaml => yaml_too_deep(text, MAX_NESTING),
        Syntax::Json => json_too_deep(text, MAX_NESTING),
    };
    match deep {
        None => Ok(()),
        Some((line, column)) => Err(Diagnostic::error(
            path,
            (line + first_line - 1, column),
            format!(
                "nested more than {MAX_NESTING} levels deep here: \
                 flatten the structure (config files need only a few levels)"
            ),
        )),
    }
}

/// Checks a text's size alone (a SKILL.md body is Markdown, not YAML).
pub fn check_size(path: &Path, text: &str) -> Result<(), Diagnostic> {
    if text.len() > MAX_FILE_BYTES {
        return Err(too_big(path, text.len() as u64));
    }
    Ok(())
}

/// The place (1-based line, column in characters) of the first `[` or `{`
/// of a JSON text that opens level `limit + 1`, outside strings.
pub fn json_too_deep(text: &str, limit: usize) -> Option<(usize, usize)> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let (mut line, mut column) = (1usize, 0usize);
    for &b in text.as_bytes() {
        if b == b'\n' {
            line += 1;
            column = 0;
        } else if b & 0xC0 != 0x80 {
            column += 1;
        }
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > limit {
                    return Some((line, column));
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

/// What opened a block level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    Sequence,
    Mapping,
    /// A `- ` sequence at the same column as its mapping key (`key:\n- a`).
    IndentlessSequence,
}

/// An open block scalar (`|` or `>`): its lines are text, not structure.
struct BlockScalar {
    /// The column of the block collection it is in (-1 at the top).
    parent: isize,
    /// The content's indentation, once known.
    content: Option<usize>,
    /// The most spaces of the blank lines before the first content line.
    leading: usize,
}

/// The place (1-based line, column in characters) of the first token of a
/// YAML text that opens nesting level `limit + 1`, counting block levels
/// (indentation, `- `, `key:`) and flow collections (`[`, `{`). Follows
/// libyaml's tokenizer: a quote, bracket or `|` is only structure where a
/// token starts, never inside a plain scalar (`it's [x`), a quoted scalar,
/// a block scalar or a comment.
pub fn yaml_too_deep(text: &str, limit: usize) -> Option<(usize, usize)> {
    let mut scan = YamlScan {
        blocks: Vec::new(),
        flow: 0,
        quote: None,
        plain: false,
        block_scalar: None,
        limit,
    };
    for (index, raw) in text.split('\n').enumerate() {
        let line = raw.strip_suffix('\r').unwrap_or(raw).as_bytes();
        if let Some(column) = scan.line(line) {
            return Some((index + 1, column));
        }
    }
    None
}

struct YamlScan {
    /// Open block collections: their column and kind, columns increasing
    /// (equal only for an indentless sequence in its mapping).
    blocks: Vec<(usize, Block)>,
    /// Open flow collections.
    flow: usize,
    /// The quote character of a quoted scalar left open at a line end.
    quote: Option<u8>,
    /// Inside a plain scalar (which may go on at the next line).
    plain: bool,
    block_scalar: Option<BlockScalar>,
    limit: usize,
}

fn is_blank(b: Option<&u8>) -> bool {
    matches!(b, None | Some(b' ' | b'\t'))
}

fn is_flow_indicator(b: Option<&u8>) -> bool {
    matches!(b, Some(b',' | b'[' | b']' | b'{' | b'}'))
}

impl YamlScan {
    fn top(&self) -> isize {
        self.blocks.last().map_or(-1, |(c, _)| *c as isize)
    }

    fn depth(&self) -> usize {
        self.blocks.len() + self.flow
    }

    /// Opens a block level at `column` as libyaml's `roll_indent` does.
    /// Returns whether the depth limit is exceeded.
    fn open_block(&mut self, column: usize, kind: Block) -> bool {
        let top = self.top();
        if (column as isize) > top {
            self.blocks.push((column, kind));
        } else if column as isize == top
            && kind == Block::Sequence
            && self
                .blocks
                .last()
                .is_some_and(|(_, k)| *k == Block::Mapping)
        {
            self.blocks.push((column, Block::IndentlessSequence));
        }
        self.depth() > self.limit
    }

    /// Scans one line (without its line end). Returns the 1-based column of
    /// the token that went too deep.
    fn line(&mut self, line: &[u8]) -> Option<usize> {
        let indent = line.iter().take_while(|b| **b == b' ').count();
        let blank = line[indent..].iter().all(|b| *b == b' ' || *b == b'\t');
        if let Some(scalar) = &mut self.block_scalar {
            if scalar.content.is_none() {
                if blank {
                    scalar.leading = scalar.leading.max(indent);
                    return None;
                }
                let floor = (scalar.parent + 1).max(1) as usize;
                scalar.content = Some(scalar.leading.max(indent).max(floor));
            }
            if blank || scalar.content.is_some_and(|c| indent >= c) {
                return None;
            }
            self.block_scalar = None;
        }
        let mut start = 0;
        if self.quote.is_none() && self.flow == 0 {
            if blank {
                return None;
            }
            let doc_marker =
                (line.starts_with(b"---") || line.starts_with(b"...")) && is_blank(line.get(3));
            let continues =
                self.plain && !doc_marker && line[indent] != b'#' && indent as isize > self.top();
            if !continues {
                self.plain = false;
                while self.blocks.last().is_some_and(|(c, _)| *c > indent) {
                    self.blocks.pop();
                }
                let entry = line[indent] == b'-' && is_blank(line.get(indent + 1));
                if self
                    .blocks
                    .last()
                    .is_some_and(|(c, k)| *c == indent && *k == Block::IndentlessSequence)
                    && !entry
                {
                    self.blocks.pop();
                }
                if doc_marker {
                    self.blocks.clear();
                    start = 3;
                } else {
                    start = indent;
                }
            }
        }
        self.tokens(line, start)
    }

    /// Scans the tokens of `line` from byte `i`.
    fn tokens(&mut self, line: &[u8], mut i: usize) -> Option<usize> {
        // Column (1-based, in characters) of byte `i`.
        let column_of = |i: usize| String::from_utf8_lossy(&line[..i]).chars().count() + 1;
        // Where the last token that could be a key started on this line.
        let mut key: Option<usize> = None;
        while i < line.len() {
            let b = line[i];
            if let Some(q) = self.quote {
                if q == b'"' && b == b'\\' {
                    i += 2;
                    continue;
                }
                if b == q {
                    if q == b'\'' && line.get(i + 1) == Some(&b'\'') {
                        i += 2;
                        continue;
                    }
                    self.quote = None;
                }
                i += 1;
                continue;
            }
            let next = line.get(i + 1);
            if self.plain {
                let ends_at_colon =
                    b == b':' && (is_blank(next) || (self.flow > 0 && is_flow_indicator(next)));
                let ends_in_flow = self.flow > 0 && is_flow_indicator(Some(&b));
                if b == b'#' && i > 0 && is_blank(Some(&line[i - 1])) {
                    self.plain = false;
                    return None;
                }
                if !(ends_at_colon || ends_in_flow) {
                    i += 1;
                    continue;
                }
                self.plain = false;
            }
            match b {
                b' ' | b'\t' => i += 1,
                b'#' => return None,
                b'[' | b'{' => {
                    if self.flow == 0 {
                        key = Some(i);
                    }
                    self.flow += 1;
                    if self.depth() > self.limit {
                        return Some(column_of(i));
                    }
                    i += 1;
                }
                b']' | b'}' => {
                    self.flow = self.flow.saturating_sub(1);
                    i += 1;
                }
                b',' => i += 1,
                b'-' if self.flow == 0 && is_blank(next) => {
                    if self.open_block(column_of(i) - 1, Block::Sequence) {
                        return Some(column_of(i));
                    }
                    key = None;
                    i += 1;
                }
                b'?' | b':' if self.flow > 0 || is_blank(next) => {
                    if self.flow == 0 {
                        let at = if b == b':' { key.unwrap_or(i) } else { i };
                        if self.open_block(column_of(at) - 1, Block::Mapping) {
                            return Some(column_of(at));
                        }
                    }
                    key = None;
                    i += 1;
                }
                b'*' | b'&' | b'!' => {
                    if b == b'*' {
                        key = Some(i);
                    }
                    i += 1;
                    while i < line.len()
                        && !is_blank(Some(&line[i]))
                        && !(self.flow > 0 && is_flow_indicator(Some(&line[i])))
                    {
                        i += 1;
                    }
                }
                b'|' | b'>' if self.flow == 0 => {
                    let parent = self.top();
                    let explicit = line[i + 1..]
                        .iter()
                        .take_while(|c| !is_blank(Some(c)))
                        .find(|c| c.is_ascii_digit())
                        .map(|c| (c - b'0') as isize);
                    let content = explicit.map(|n| {
                        let base = if parent >= 0 { parent } else { 0 };
                        (base + n) as usize
                    });
                    self.block_scalar = Some(BlockScalar {
                        parent,
                        content,
                        leading: 0,
                    });
                    return None;
                }
                b'\'' | b'"' => {
                    key = Some(i);
                    self.quote = Some(b);
                    i += 1;
                }
                _ => {
                    key = Some(i);
                    self.plain = true;
                    i += 1;
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deep(text: &str) -> Option<(usize, usize)> {
        yaml_too_deep(text, 3)
    }

    #[test]
    fn flow_nesting_is_counted_and_located() {
        assert_eq!(deep("a: [[x]]\n"), None);
        assert_eq!(deep("a: [[[x]]]\n"), Some((1, 6)));
        assert_eq!(deep("a: [\n [\n  {b: [x]}]]\n"), Some((3, 3)));
        assert_eq!(json_too_deep("{\"a\": [[1]]}", 3), None);
        assert_eq!(json_too_deep("{\"a\":\n [[[1]]]}", 3), Some((2, 4)));
        assert_eq!(json_too_deep("{\"[[[[\": \"\\\"[[[[\"}", 3), None);
    }

    #[test]
    fn block_nesting_is_counted() {
        assert_eq!(deep("a:\n  b:\n    c: 1\n"), None);
        assert_eq!(deep("a:\n  b:\n    c:\n      d: 1\n"), Some((4, 7)));
        assert_eq!(deep("- - - x\n"), None);
        assert_eq!(deep("- - - - x\n"), Some((1, 7)));
        // An indentless sequence is a level of its own.
        assert_eq!(deep("a:\n- b:\n  - c: 1\n"), Some((3, 3)));
        // Siblings do not add up.
        assert_eq!(deep("a:\n  b: 1\nc:\n  d: [x]\ne: [[y]]\n"), None);
    }

    #[test]
    fn brackets_in_text_do_not_count() {
        let text = "a: it's [[[[ not [[[[ nested\n\
                    b: \"[[[[ \\\" [[[[\"\n\
                    c: '[[[[ '' [[[['\n\
                    d: |\n  [[[[\n  {{{{ text\n\n  [[[[\n\
                    e: > \n    [[[[\n\
                    f: x # [[[[\n\
                    # [[[[\n\
                    g: [a b 'c, \"d\": [e]]\n";
        assert_eq!(deep(text), None);
    }

    #[test]
    fn text_cannot_hide_structure() {
        // A quote inside a plain scalar opens nothing, even on a
        // continuation line: the brackets after it are real.
        let nested = "[[[[x]]]]";
        assert!(deep(&format!("a: b\n  'x\nc: {nested}\nd: '\n")).is_some());
        assert!(deep(&format!("a: [b 'x, {nested}, 'y]\n")).is_some());
        assert!(deep(&format!("a: [b\n'x, {nested}, 'y]\n")).is_some());
        // A block scalar ends at its first less indented line.
        assert!(deep(&format!("a: |\n      text\n  b: {nested}\n")).is_some());
        assert!(deep(&format!("- k: |\n    t\n  o: {nested}\n")).is_some());
    }

    #[test]
    fn bom_and_crlf_are_normalised() {
        assert_eq!(normalize("\u{feff}a: 1\r\nb: 2\r\n"), "a: 1\nb: 2\n");
        assert_eq!(normalize("a\rb"), "a\rb");
        assert_eq!(deep("a: [[x]]\r\nb:\r\n  - [y]\r\n"), None);
    }
}
