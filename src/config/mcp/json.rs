//! A small JSON reader that keeps the byte offset of every value and key, so
//! `mcp.json` diagnostics can point at the right place, and that keeps
//! duplicate keys (which `serde_json::Value` silently merges). It runs only
//! after `serde_json` has accepted the text, so it reports no syntax errors
//! of its own: it returns `None` on anything unexpected.

/// One JSON value and the byte offset where it starts.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub offset: usize,
    pub value: Value,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Number(f64),
    String(String),
    Array(Vec<Node>),
    /// Members in file order, duplicates kept.
    Object(Vec<Member>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    pub key: String,
    /// Offset of the key's opening quote.
    pub key_offset: usize,
    pub value: Node,
}

impl Value {
    /// "a string", "an object", ... for "must be X, got Y" messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Number(_) => "a number",
            Value::String(_) => "a string",
            Value::Array(_) => "an array",
            Value::Object(_) => "an object",
        }
    }
}

/// Parses a document `serde_json` already accepted.
pub fn parse(text: &str) -> Option<Node> {
    let mut reader = Reader {
        text,
        bytes: text.as_bytes(),
        pos: 0,
    };
    let node = reader.value(0)?;
    reader.skip_ws();
    (reader.pos == reader.bytes.len()).then_some(node)
}

struct Reader<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
}

/// Deeper nesting than this is refused rather than risking the stack.
const MAX_DEPTH: usize = 128;

impl Reader<'_> {
    fn skip_ws(&mut self) {
        while self
            .bytes
            .get(self.pos)
            .is_some_and(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
        {
            self.pos += 1;
        }
    }

    fn value(&mut self, depth: usize) -> Option<Node> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.skip_ws();
        let offset = self.pos;
        let value = match *self.bytes.get(self.pos)? {
            b'{' => self.object(depth)?,
            b'[' => self.array(depth)?,
            b'"' => Value::String(self.string()?),
            b't' => self.literal("true", Value::Bool(true))?,
            b'f' => self.literal("false", Value::Bool(false))?,
            b'n' => self.literal("null", Value::Null)?,
            _ => self.number()?,
        };
        Some(Node { offset, value })
    }

    fn literal(&mut self, word: &str, value: Value) -> Option<Value> {
        self.text.get(self.pos..)?.starts_with(word).then(|| {
            self.pos += word.len();
            value
        })
    }

    fn number(&mut self) -> Option<Value> {
        let start = self.pos;
        while self
            .bytes
            .get(self.pos)
            .is_some_and(|b| matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
        {
            self.pos += 1;
        }
        self.text
            .get(start..self.pos)?
            .parse()
            .ok()
            .map(Value::Number)
    }

    fn string(&mut self) -> Option<String> {
        let start = self.pos;
        self.pos += 1;
        loop {
            match *self.bytes.get(self.pos)? {
                b'\\' => self.pos += 2,
                b'"' => break,
                _ => self.pos += 1,
            }
        }
        self.pos += 1;
        serde_json::from_str(self.text.get(start..self.pos)?).ok()
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        self.skip_ws();
        (self.bytes.get(self.pos) == Some(&byte)).then(|| self.pos += 1)
    }

    fn array(&mut self, depth: usize) -> Option<Value> {
        self.pos += 1;
        let mut items = Vec::new();
        self.skip_ws();
        if self.bytes.get(self.pos) == Some(&b']') {
            self.pos += 1;
            return Some(Value::Array(items));
        }
        loop {
            items.push(self.value(depth + 1)?);
            self.skip_ws();
            match *self.bytes.get(self.pos)? {
                b',' => self.pos += 1,
                b']' => {
                    self.pos += 1;
                    return Some(Value::Array(items));
                }
                _ => return None,
            }
        }
    }

    fn object(&mut self, depth: usize) -> Option<Value> {
        self.pos += 1;
        let mut members = Vec::new();
        self.skip_ws();
        if self.bytes.get(self.pos) == Some(&b'}') {
            self.pos += 1;
            return Some(Value::Object(members));
        }
        loop {
            self.skip_ws();
            let key_offset = self.pos;
            if self.bytes.get(self.pos) != Some(&b'"') {
                return None;
            }
            let key = self.string()?;
            self.expect(b':')?;
            let value = self.value(depth + 1)?;
            members.push(Member {
                key,
                key_offset,
                value,
            });
            self.skip_ws();
            match *self.bytes.get(self.pos)? {
                b',' => self.pos += 1,
                b'}' => {
                    self.pos += 1;
                    return Some(Value::Object(members));
                }
                _ => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_offsets_and_duplicates() {
        let text = "{ \"a\": [1, \"x\\\"y\"], \"a\": {\"b\": null}, \"c\": true }";
        let node = parse(text).unwrap();
        let Value::Object(members) = node.value else {
            panic!("not an object")
        };
        assert_eq!(members.len(), 3);
        assert_eq!(members[0].key_offset, 2);
        let Value::Array(items) = &members[0].value.value else {
            panic!("not an array")
        };
        assert_eq!(items[0].value, Value::Number(1.0));
        assert_eq!(items[1].value, Value::String("x\"y".into()));
        assert_eq!(&text[items[1].offset..items[1].offset + 1], "\"");
        assert_eq!(members[1].key, "a");
        assert_eq!(members[2].value.value, Value::Bool(true));
    }

    #[test]
    fn refuses_what_is_not_json() {
        assert!(parse("{\"a\": }").is_none());
        assert!(parse("[1, 2").is_none());
        assert!(parse("1 2").is_none());
        assert!(parse("\"unterminated").is_none());
    }
}
