//! The variables an MCP config may use inside a string value, in the union
//! of the editors' dialects: `${VAR}`, `${VAR:-default}`, `${VAR:?message}`
//! (Claude Code, aurad), `${env:VAR}` (VS Code, Cursor, Windsurf, Cline,
//! Roo), `${input:ID}` (VS Code's prompted inputs; aurad has no prompt and
//! reads them from `AURAD_INPUT_<ID>`), `${workspaceFolder}` and
//! `${workspaceFolderBasename}` (the project root), `${userHome}`,
//! `${pathSeparator}` and `${/}`. `$$` is a literal `$`; a `$` not followed
//! by `{` stays as it is. Expansion is per value, after the JSON is parsed,
//! so a value can never change the file's structure and an unset variable
//! only breaks the server that uses it. Environment variables are read
//! through the loader's lookup (which records them, for redaction).

use std::collections::BTreeMap;
use std::path::Path;

use crate::config::EnvLookup;

/// One entry of VS Code's top-level `inputs`.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Input {
    pub description: Option<String>,
    pub default: Option<String>,
}

/// Where expansion reads from.
pub(super) struct Vars<'a> {
    pub env: EnvLookup<'a>,
    pub root: &'a Path,
    /// VS Code `inputs`, by id.
    pub inputs: &'a BTreeMap<String, Input>,
}

/// The environment variable that answers VS Code's `${input:ID}`: the id
/// upper-cased, every character outside `[A-Z0-9]` written `_`
/// (`github-token` → `AURAD_INPUT_GITHUB_TOKEN`).
pub fn input_variable(id: &str) -> String {
    let tail: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    format!("AURAD_INPUT_{tail}")
}

impl Vars<'_> {
    /// `value` with every reference replaced, or the byte index in `value`
    /// of the reference that failed and why.
    pub fn expand(&self, value: &str) -> Result<String, (usize, String)> {
        let mut out = String::with_capacity(value.len());
        let mut rest = value;
        while let Some(pos) = rest.find('$') {
            let at = value.len() - rest.len() + pos;
            out.push_str(&rest[..pos]);
            let after = &rest[pos + 1..];
            if let Some(tail) = after.strip_prefix('$') {
                out.push('$');
                rest = tail;
            } else if let Some(body) = after.strip_prefix('{') {
                let Some(close) = body.find('}') else {
                    return Err((
                        at,
                        "unclosed `${`: write `${NAME}`, or `$$` for a literal `$`".into(),
                    ));
                };
                out.push_str(&self.reference(&body[..close]).map_err(|e| (at, e))?);
                rest = &body[close + 1..];
            } else {
                out.push('$');
                rest = after;
            }
        }
        out.push_str(rest);
        Ok(out)
    }

    /// The value of the reference `${expr}`.
    fn reference(&self, expr: &str) -> Result<String, String> {
        match expr {
            "workspaceFolder" => return Ok(self.root.to_string_lossy().into_owned()),
            "workspaceFolderBasename" => {
                return Ok(self
                    .root
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default());
            }
            "pathSeparator" | "/" => return Ok("/".into()),
            "userHome" => {
                return (self.env)("HOME")
                    .filter(|h| !h.is_empty())
                    .ok_or_else(|| "`${userHome}`: HOME is not set".to_string());
            }
            _ => {}
        }
        if let Some(id) = expr.strip_prefix("input:") {
            return self.input(id);
        }
        let (variable, shown) = match expr.strip_prefix("env:") {
            Some(name) => (name, expr),
            None => (expr, expr),
        };
        if let Some((scheme, _)) = variable.split_once(':')
            && !scheme.is_empty()
            && scheme.chars().all(|c| c.is_ascii_alphabetic())
            && !variable[scheme.len()..].starts_with(":-")
            && !variable[scheme.len()..].starts_with(":?")
        {
            return Err(format!(
                "`${{{expr}}}`: `{scheme}:` variables are not supported; use ${{VAR}}, ${{env:VAR}}, ${{input:ID}}, ${{workspaceFolder}} or ${{userHome}}"
            ));
        }
        self.variable(variable, shown)
    }

    /// `NAME`, `NAME:-default` or `NAME:?message`, read from the environment.
    fn variable(&self, expr: &str, shown: &str) -> Result<String, String> {
        crate::config::interp::expand_variable(expr, shown, "${NAME}, ${env:NAME}", self.env)
    }

    /// VS Code's `${input:ID}`, from `AURAD_INPUT_<ID>` or the input's
    /// `default`.
    fn input(&self, id: &str) -> Result<String, String> {
        let variable = input_variable(id);
        if let Some(value) = (self.env)(&variable).filter(|v| !v.is_empty()) {
            return Ok(value);
        }
        let declared = self.inputs.get(id);
        if let Some(default) = declared.and_then(|i| i.default.clone()) {
            return Ok(default);
        }
        let what = declared
            .and_then(|i| i.description.as_deref())
            .map(|d| format!(" ({d})"))
            .unwrap_or_default();
        let undeclared = if declared.is_none() {
            "; it is not declared in `inputs` either"
        } else {
            ""
        };
        Err(format!(
            "`${{input:{id}}}`{what} is a value VS Code would prompt for; aurad has no prompt: set the environment variable {variable}{undeclared}"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand(value: &str) -> Result<String, (usize, String)> {
        let env = |name: &str| match name {
            "TOKEN" => Some("t0k".to_string()),
            "HOME" => Some("/home/u".to_string()),
            "AURAD_INPUT_API_KEY" => Some("k3y".to_string()),
            _ => None,
        };
        let inputs = BTreeMap::from([
            (
                "region".to_string(),
                Input {
                    description: None,
                    default: Some("eu".into()),
                },
            ),
            (
                "secret".to_string(),
                Input {
                    description: Some("The secret".into()),
                    default: None,
                },
            ),
        ]);
        let vars = Vars {
            env: &env,
            root: Path::new("/work/proj"),
            inputs: &inputs,
        };
        vars.expand(value)
    }

    #[test]
    fn every_dialect_resolves() {
        assert_eq!(
            expand("Bearer ${TOKEN}|${env:TOKEN}|${NOPE:-d}|${env:NOPE:-e}"),
            Ok("Bearer t0k|t0k|d|e".into())
        );
        assert_eq!(
            expand("${workspaceFolder}${/}x|${workspaceFolderBasename}|${userHome}"),
            Ok("/work/proj/x|proj|/home/u".into())
        );
        assert_eq!(
            expand("${input:api-key}|${input:region}"),
            Ok("k3y|eu".into())
        );
        assert_eq!(expand("$$HOME $1 $"), Ok("$HOME $1 $".into()));
    }

    #[test]
    fn failures_say_what_to_set_and_where() {
        let (at, e) = expand("x ${input:secret}").unwrap_err();
        assert_eq!(at, 2);
        assert_eq!(
            e,
            "`${input:secret}` (The secret) is a value VS Code would prompt for; aurad has no prompt: set the environment variable AURAD_INPUT_SECRET"
        );
        let (_, e) = expand("${input:other}").unwrap_err();
        assert!(e.ends_with("AURAD_INPUT_OTHER; it is not declared in `inputs` either"));
        let (at, e) = expand("ab${env:NOPE}").unwrap_err();
        assert_eq!(at, 2);
        assert!(e.starts_with("environment variable NOPE is not set (`${env:NOPE}`)"));
        let (_, e) = expand("${config:x}").unwrap_err();
        assert!(e.contains("`config:` variables are not supported"), "{e}");
        let (_, e) = expand("${NOPE:?ask the admin}").unwrap_err();
        assert_eq!(e, "environment variable NOPE is not set: ask the admin");
        assert!(expand("${a b}").unwrap_err().1.contains("not a valid"));
        assert!(expand("${open").unwrap_err().1.starts_with("unclosed"));
    }
}
