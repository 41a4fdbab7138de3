//! `${VAR}`, `${VAR:-default}` and `${VAR:?message}` interpolation of a file's
//! raw text, before it is parsed. `$$` is a literal `$`; full-line `#`
//! comments are left alone. Substituted values may not contain a newline, so
//! a variable can never add YAML structure, and line numbers stay true.
//! Variables are read through a lookup function, never from global state.

/// One interpolation problem, at a 1-based (line, column).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterpError {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

pub fn interpolate(
    text: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<String, Vec<InterpError>> {
    interpolate_with(text, lookup, Escape::None)
}

/// How substituted values are written into the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Escape {
    /// As they are (YAML: values may not contain newlines).
    None,
    /// As the inside of a JSON string (`"` and `\` escaped), for `mcp.json`,
    /// where `${VAR}` only stands inside strings.
    JsonString,
}

pub fn interpolate_with(
    text: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
    escape: Escape,
) -> Result<String, Vec<InterpError>> {
    let mut out = String::with_capacity(text.len());
    let mut errors = Vec::new();
    for (index, line) in text.split_inclusive('\n').enumerate() {
        if line.trim_start().starts_with('#') || !line.contains('$') {
            out.push_str(line);
            continue;
        }
        interpolate_line(line, index + 1, lookup, escape, &mut out, &mut errors);
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

fn interpolate_line(
    line: &str,
    line_no: usize,
    lookup: &dyn Fn(&str) -> Option<String>,
    escape: Escape,
    out: &mut String,
    errors: &mut Vec<InterpError>,
) {
    let mut rest = line;
    let mut consumed_chars = 0usize;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let column = consumed_chars + rest[..pos].chars().count() + 1;
        let after = &rest[pos + 1..];
        let mut error = |message: String| {
            errors.push(InterpError {
                line: line_no,
                column,
                message,
            })
        };
        let advance = if after.starts_with('$') {
            out.push('$');
            2
        } else if let Some(body) = after.strip_prefix('{') {
            match body.find('}') {
                None => {
                    error("unclosed `${`: write `${NAME}`, or `$$` for a literal `$`".into());
                    out.push('$');
                    1
                }
                Some(close) => {
                    match expand(&body[..close], lookup) {
                        Ok(value) if value.contains('\n') && escape == Escape::None => {
                            error(format!(
                                "the value of `${{{}}}` contains a newline, which could change the file's structure; use a single-line value",
                                &body[..close]
                            ))
                        }
                        Ok(value) if escape == Escape::JsonString => {
                            let quoted = serde_json::to_string(&value).unwrap_or_default();
                            out.push_str(&quoted[1..quoted.len() - 1]);
                        }
                        Ok(value) => out.push_str(&value),
                        Err(message) => error(message),
                    }
                    close + 3
                }
            }
        } else {
            out.push('$');
            1
        };
        consumed_chars += rest[..pos + advance].chars().count();
        rest = &rest[pos + advance..];
    }
    out.push_str(rest);
}

fn expand(expr: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let (name, op, arg) = match expr.find(":-").or_else(|| expr.find(":?")) {
        Some(i) => (&expr[..i], &expr[i..i + 2], &expr[i + 2..]),
        None => (expr, "", ""),
    };
    let valid = !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        return Err(format!(
            "`${{{expr}}}` is not a valid variable reference: use ${{NAME}}, ${{NAME:-default}} or ${{NAME:?message}}"
        ));
    }
    let value = lookup(name).filter(|v| !v.is_empty());
    match (value, op) {
        (Some(v), _) => Ok(v),
        (None, ":-") => Ok(arg.to_string()),
        (None, ":?") if !arg.is_empty() => {
            Err(format!("environment variable {name} is not set: {arg}"))
        }
        (None, _) => Err(format!(
            "environment variable {name} is not set; set it, or write ${{{name}:-default}}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "HOME_DIR" => Some("/home/x".into()),
            "EMPTY" => Some(String::new()),
            "MULTI" => Some("a\nb".into()),
            _ => None,
        }
    }

    #[test]
    fn substitutes_and_defaults() {
        let text = "a: ${HOME_DIR}/x\nb: ${NOPE:-fallback}\nc: $$5 and ${EMPTY:-d}\n";
        assert_eq!(
            interpolate(text, &env).unwrap(),
            "a: /home/x/x\nb: fallback\nc: $5 and d\n"
        );
    }

    #[test]
    fn reports_every_missing_variable_with_its_place() {
        let text = "a: ${ONE}\n# ${IGNORED}\nb: x ${TWO:?set TWO to your key}\n";
        let errors = interpolate(text, &env).unwrap_err();
        assert_eq!(errors.len(), 2);
        assert_eq!((errors[0].line, errors[0].column), (1, 4));
        assert!(errors[0].message.contains("ONE is not set"));
        assert_eq!((errors[1].line, errors[1].column), (3, 6));
        assert!(errors[1].message.ends_with("set TWO to your key"));
    }

    #[test]
    fn rejects_newlines_bad_names_and_unclosed() {
        let errors = interpolate("a: ${MULTI}\nb: ${1X}\nc: ${OPEN\n", &env).unwrap_err();
        let messages: Vec<_> = errors.iter().map(|e| e.message.as_str()).collect();
        assert!(messages[0].contains("newline"));
        assert!(messages[1].contains("not a valid variable reference"));
        assert!(messages[2].contains("unclosed"));
    }

    #[test]
    fn json_escaping_keeps_the_document_valid() {
        let env = |_: &str| Some("a \"quoted\" \\ value".to_string());
        let text = interpolate_with("{\"k\": \"${X}\"}", &env, Escape::JsonString).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["k"], "a \"quoted\" \\ value");
    }

    #[test]
    fn columns_count_characters_after_substitution() {
        let errors = interpolate("é: ${HOME_DIR} ${MISSING}\n", &env).unwrap_err();
        assert_eq!((errors[0].line, errors[0].column), (1, 16));
    }
}
