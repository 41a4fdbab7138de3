//! `envFile` (VS Code, Cursor): a dotenv file of `KEY=value` lines for a
//! stdio server, read relative to the project root. Lines are `KEY=value`,
//! optionally after `export `; `#` starts a comment line; a value in double
//! quotes takes `\n`, `\t`, `\"` and `\\` escapes, one in single quotes is
//! literal, an unquoted one ends at ` #`. Values are taken as written: no
//! `$VAR` expansion, so nothing is read from the daemon's environment
//! behind the loader's back. Hand-written because `dotenvy`, the usual
//! crate, expands `$VAR` from the process environment.

use std::collections::BTreeMap;
use std::path::Path;

use crate::config::bounds;

/// The variables of the dotenv file `file` (shown as `shown`), or what is
/// wrong, with the 1-based line where it applies.
pub(super) fn read_env_file(file: &Path, shown: &str) -> Result<BTreeMap<String, String>, String> {
    let bytes = match bounds::read_bounded(file, Path::new(shown)) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => {
            return Err(format!(
                "envFile `{shown}` does not exist ({}); it is read relative to the project root",
                file.display()
            ));
        }
        Err(d) => return Err(format!("envFile `{shown}`: {}", d.message)),
    };
    let text = bounds::decode(bytes, Path::new(shown))
        .map_err(|d| format!("envFile `{shown}`: {}", d.message))?;
    parse_env(&text).map_err(|(line, e)| format!("envFile `{shown}` line {line}: {e}"))
}

/// Parses dotenv text; the error carries its 1-based line.
pub(super) fn parse_env(text: &str) -> Result<BTreeMap<String, String>, (usize, String)> {
    let mut vars = BTreeMap::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line).trim_start();
        let Some((key, value)) = line.split_once('=') else {
            return Err((index + 1, "expected KEY=value".into()));
        };
        let key = key.trim();
        let valid = !key.is_empty()
            && !key.starts_with(|c: char| c.is_ascii_digit())
            && key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
        if !valid {
            return Err((index + 1, format!("{key:?} is not a variable name")));
        }
        let value = unquote(value.trim()).map_err(|e| (index + 1, e))?;
        vars.insert(key.to_string(), value);
    }
    Ok(vars)
}

fn unquote(value: &str) -> Result<String, String> {
    if let Some(inner) = value.strip_prefix('\'') {
        let end = inner
            .find('\'')
            .ok_or("unclosed single quote (values span one line)")?;
        return Ok(inner[..end].to_string());
    }
    if let Some(inner) = value.strip_prefix('"') {
        let mut out = String::new();
        let mut chars = inner.chars();
        while let Some(c) = chars.next() {
            match c {
                '"' => return Ok(out),
                '\\' => match chars.next() {
                    Some('n') => out.push('\n'),
                    Some('t') => out.push('\t'),
                    Some(other) => out.push(other),
                    None => break,
                },
                c => out.push(c),
            }
        }
        return Err("unclosed double quote (values span one line)".into());
    }
    let end = value.find(" #").unwrap_or(value.len());
    Ok(value[..end].trim_end().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_common_forms() {
        let text = "# comment\nA=1\nexport B = two words \nC=\"x\\ny \\\"q\\\"\" # c\nD='$LIT #'\nE=v # note\nF=\n";
        let vars = parse_env(text).unwrap();
        assert_eq!(vars["A"], "1");
        assert_eq!(vars["B"], "two words");
        assert_eq!(vars["C"], "x\ny \"q\"");
        assert_eq!(vars["D"], "$LIT #");
        assert_eq!(vars["E"], "v");
        assert_eq!(vars["F"], "");
    }

    #[test]
    fn errors_carry_the_line() {
        assert_eq!(
            parse_env("A=1\nnot a pair\n"),
            Err((2, "expected KEY=value".into()))
        );
        assert_eq!(parse_env("A=\"open\n").unwrap_err().0, 1);
        assert_eq!(parse_env("1X=3").unwrap_err().0, 1);
    }
}
