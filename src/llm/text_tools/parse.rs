//! Finding tool calls written as text in a model's answer, as it streams:
//! `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, or a fenced
//! ```` ```json ```` block holding such an object. The text outside the
//! calls is passed on as it arrives, except a tail that could be the start
//! of a marker, held back until the next piece says what it is. Pure: no
//! I/O, so the parsing is tested piece by piece. May depend on `types`
//! only.

use serde_json::Value;

const OPEN_TAG: &str = "<tool_call>";
const CLOSE_TAG: &str = "</tool_call>";
const OPEN_FENCE: &str = "```json";
const CLOSE_FENCE: &str = "```";

/// A call as written, not yet checked against the tools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawCall {
    /// What stood between the markers.
    pub body: String,
}

/// What a whole answer held.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Parsed {
    /// The text outside the calls, as it was passed on.
    pub text: String,
    /// The calls in the order they were written.
    pub calls: Vec<RawCall>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Outside,
    InTag,
    InFence,
}

/// Splits an answer's stream into text and calls.
#[derive(Debug)]
pub struct Scanner {
    mode: Mode,
    /// Received but not yet passed on nor taken as a call.
    pending: String,
    parsed: Parsed,
}

impl Default for Scanner {
    fn default() -> Self {
        Scanner {
            mode: Mode::Outside,
            pending: String::new(),
            parsed: Parsed::default(),
        }
    }
}

impl Scanner {
    /// Takes the next piece of the answer; returns the text that can be
    /// passed on now (possibly empty).
    pub fn push(&mut self, piece: &str) -> String {
        self.pending.push_str(piece);
        let mut out = String::new();
        loop {
            match self.mode {
                Mode::Outside => {
                    let tag = self.pending.find(OPEN_TAG);
                    let fence = self.pending.find(OPEN_FENCE);
                    let next = match (tag, fence) {
                        (Some(t), Some(f)) if f < t => Some((f, Mode::InFence, OPEN_FENCE)),
                        (Some(t), _) => Some((t, Mode::InTag, OPEN_TAG)),
                        (None, Some(f)) => Some((f, Mode::InFence, OPEN_FENCE)),
                        (None, None) => None,
                    };
                    if let Some((at, mode, marker)) = next {
                        out.push_str(&self.pending[..at]);
                        self.pending.drain(..at + marker.len());
                        self.mode = mode;
                        continue;
                    }
                    // Keep back what could grow into a marker.
                    let keep = [OPEN_TAG, OPEN_FENCE]
                        .iter()
                        .map(|m| partial_marker_len(&self.pending, m))
                        .max()
                        .unwrap_or(0);
                    let cut = self.pending.len() - keep;
                    out.push_str(&self.pending[..cut]);
                    self.pending.drain(..cut);
                    break;
                }
                Mode::InTag => {
                    let Some(at) = self.pending.find(CLOSE_TAG) else {
                        break;
                    };
                    let body = self.pending[..at].to_string();
                    self.pending.drain(..at + CLOSE_TAG.len());
                    self.parsed.calls.push(RawCall { body });
                    self.mode = Mode::Outside;
                }
                Mode::InFence => {
                    let Some(at) = self.pending.find(CLOSE_FENCE) else {
                        break;
                    };
                    let body = self.pending[..at].to_string();
                    self.pending.drain(..at + CLOSE_FENCE.len());
                    self.mode = Mode::Outside;
                    if call_shaped(&body) {
                        self.parsed.calls.push(RawCall { body });
                    } else {
                        // A fenced JSON block that is not a call is text
                        // (an answer may well be JSON).
                        out.push_str(OPEN_FENCE);
                        out.push_str(&body);
                        out.push_str(CLOSE_FENCE);
                    }
                }
            }
        }
        self.parsed.text.push_str(&out);
        out
    }

    /// Ends the answer: returns the text still held back, and everything
    /// found. An unclosed `<tool_call>` is a call (models often stop before
    /// the closing tag); an unclosed fence is a call only when it holds one.
    pub fn finish(mut self) -> (String, Parsed) {
        let rest = std::mem::take(&mut self.pending);
        let mut out = String::new();
        match self.mode {
            Mode::Outside => out = rest,
            Mode::InTag => self.parsed.calls.push(RawCall { body: rest }),
            Mode::InFence if call_shaped(&rest) => self.parsed.calls.push(RawCall { body: rest }),
            Mode::InFence => {
                out.push_str(OPEN_FENCE);
                out.push_str(&rest);
            }
        }
        self.parsed.text.push_str(&out);
        (out, self.parsed)
    }
}

/// The whole of `answer` parsed at once.
pub fn parse(answer: &str) -> Parsed {
    let mut scanner = Scanner::default();
    scanner.push(answer);
    scanner.finish().1
}

/// The length of the longest end of `text` that is a proper start of
/// `marker` (0 when none).
fn partial_marker_len(text: &str, marker: &str) -> usize {
    (1..marker.len())
        .rev()
        .find(|&n| text.ends_with(&marker[..n]))
        .unwrap_or(0)
}

/// Whether a fenced block is meant as a call: a JSON object with a string
/// `name` and an `arguments` member.
fn call_shaped(body: &str) -> bool {
    matches!(
        serde_json::from_str::<Value>(body.trim()),
        Ok(Value::Object(o)) if o.get("name").is_some_and(Value::is_string) && o.contains_key("arguments")
    )
}

/// A call's body read as `(name, arguments object)`, or what is wrong with
/// it. `arguments` may also be a string holding the JSON object (some
/// models write it so).
pub fn read_call(body: &str) -> Result<(String, serde_json::Map<String, Value>), String> {
    let value: Value = serde_json::from_str(body.trim())
        .map_err(|e| format!("its text is not valid JSON ({e}): {}", excerpt(body)))?;
    let Value::Object(mut object) = value else {
        return Err(format!("it is not a JSON object: {}", excerpt(body)));
    };
    let Some(Value::String(name)) = object.remove("name") else {
        return Err("it has no \"name\" string".into());
    };
    let arguments = match object.remove("arguments") {
        None | Some(Value::Null) => serde_json::Map::new(),
        Some(Value::Object(a)) => a,
        Some(Value::String(s)) => match serde_json::from_str::<Value>(&s) {
            Ok(Value::Object(a)) => a,
            _ => {
                return Err(format!(
                    "the \"arguments\" of `{name}` are not a JSON object: {}",
                    excerpt(&s)
                ));
            }
        },
        Some(other) => {
            return Err(format!(
                "the \"arguments\" of `{name}` are not a JSON object: {}",
                excerpt(&other.to_string())
            ));
        }
    };
    Ok((name, arguments))
}

/// At most 200 characters of `text`, for error messages.
fn excerpt(text: &str) -> String {
    let text = text.trim();
    match text.char_indices().nth(200) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a test: a panic is its failure report")]

    use super::*;

    fn bodies(parsed: &Parsed) -> Vec<&str> {
        parsed.calls.iter().map(|c| c.body.as_str()).collect()
    }

    #[test]
    fn a_tag_is_a_call_and_the_text_around_it_stays() {
        let p = parse(
            "Let me look.\n<tool_call>{\"name\": \"read\", \"arguments\": {\"p\": 1}}</tool_call>\nDone?",
        );
        assert_eq!(p.text, "Let me look.\n\nDone?");
        assert_eq!(
            bodies(&p),
            ["{\"name\": \"read\", \"arguments\": {\"p\": 1}}"]
        );
        let (name, args) = read_call(&p.calls[0].body).unwrap();
        assert_eq!(name, "read");
        assert_eq!(Value::Object(args), serde_json::json!({"p": 1}));
    }

    #[test]
    fn a_fenced_json_call_is_a_call_and_other_fenced_json_is_text() {
        let p = parse("```json\n{\"name\": \"now\", \"arguments\": {}}\n```");
        assert_eq!(p.text, "");
        assert_eq!(bodies(&p), ["\n{\"name\": \"now\", \"arguments\": {}}\n"]);
        let answer = "Here:\n```json\n{\"name\": \"Bob\", \"age\": 3}\n```";
        let p = parse(answer);
        assert_eq!(p.text, answer);
        assert!(p.calls.is_empty());
    }

    #[test]
    fn two_calls_keep_their_order() {
        let p = parse(
            "<tool_call>{\"name\":\"a\",\"arguments\":{}}</tool_call><tool_call>{\"name\":\"b\",\"arguments\":{}}</tool_call>",
        );
        let names: Vec<String> = p
            .calls
            .iter()
            .map(|c| read_call(&c.body).unwrap().0)
            .collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(p.text, "");
    }

    #[test]
    fn a_call_split_across_pieces_is_found_and_no_markup_is_passed_on() {
        let answer = "Reading <b>now</b>.<tool_call>{\"name\":\"read\",\"arguments\":{\"p\":\"x\"}}</tool_call> ok <3";
        // Every split into pieces of n characters.
        for n in 1..answer.len() {
            let mut scanner = Scanner::default();
            let mut passed = String::new();
            let chars: Vec<char> = answer.chars().collect();
            for piece in chars.chunks(n) {
                let piece: String = piece.iter().collect();
                let out = scanner.push(&piece);
                assert!(
                    !out.contains("<tool_call") && !out.contains("name"),
                    "{n}: {out:?}"
                );
                passed.push_str(&out);
            }
            let (rest, parsed) = scanner.finish();
            passed.push_str(&rest);
            assert_eq!(passed, "Reading <b>now</b>. ok <3", "pieces of {n}");
            assert_eq!(parsed.text, passed);
            assert_eq!(parsed.calls.len(), 1, "pieces of {n}");
        }
    }

    #[test]
    fn text_that_only_looks_like_a_marker_start_is_passed_on_when_it_is_not() {
        let mut scanner = Scanner::default();
        assert_eq!(scanner.push("a <tool"), "a ");
        assert_eq!(scanner.push("box> and ``"), "<toolbox> and ");
        assert_eq!(scanner.push("`rust"), "```rust");
        let (rest, parsed) = scanner.finish();
        assert_eq!(rest, "");
        assert_eq!(parsed.text, "a <toolbox> and ```rust");
    }

    #[test]
    fn an_unclosed_tag_is_a_call_and_junk_inside_tags_is_reported() {
        let p = parse("<tool_call>{\"name\":\"a\",\"arguments\":{}}");
        assert_eq!(read_call(&p.calls[0].body).unwrap().0, "a");
        let p = parse("<tool_call>call a please</tool_call>");
        let err = read_call(&p.calls[0].body).unwrap_err();
        assert!(
            err.contains("not valid JSON") && err.contains("call a please"),
            "{err}"
        );
        let err = read_call("[1]").unwrap_err();
        assert!(err.contains("not a JSON object"), "{err}");
        let err = read_call("{\"arguments\": {}}").unwrap_err();
        assert!(err.contains("no \"name\""), "{err}");
        let err = read_call("{\"name\": \"a\", \"arguments\": 3}").unwrap_err();
        assert!(err.contains("\"arguments\" of `a`"), "{err}");
    }

    #[test]
    fn arguments_as_a_json_string_or_missing_are_read() {
        let (_, args) = read_call("{\"name\":\"a\",\"arguments\":\"{\\\"x\\\":1}\"}").unwrap();
        assert_eq!(Value::Object(args), serde_json::json!({"x": 1}));
        let (_, args) = read_call("{\"name\":\"a\"}").unwrap();
        assert!(args.is_empty());
    }
}
