//! Layers point one way (DESIGN.md section 1): reads every `.rs` file under
//! `src/`, collects the top-level modules each top-level module names
//! (`crate::x`, `use crate::{x, y::z}` groups over several lines,
//! `pub(in crate::x)`, and `super::` chains that climb to the crate root),
//! and fails on any edge missing from [`ALLOWED`], printing the file and
//! line of each. Comments and string literals are skipped, so prose and
//! messages that mention a module are not imports.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Modules every module may use: plain data, the tokenizer and the secret
/// masking, none of which depends on anything of ours.
const LEAVES: &[&str] = &["types", "text", "redact"];

/// Module -> the modules (besides [`LEAVES`]) it may name.
const ALLOWED: &[(&str, &[&str])] = &[
    ("types", &[]),
    ("text", &[]),
    ("redact", &[]),
    ("config", &[]),
    ("llm", &[]),
    ("scheduler", &[]),
    ("tools", &[]),
    ("store", &[]),
    ("memory", &["store", "tools"]),
    ("mcp", &["config", "tools"]),
    ("skills", &["config"]),
    ("engine", &["config", "llm", "tools", "skills", "memory"]),
    ("registry", &["config", "llm", "tools", "mcp", "skills"]),
    ("api", &["config", "store"]),
    ("telemetry", &["config", "llm", "tools"]),
    ("replay", &["config", "engine", "llm", "tools"]),
    (
        "run",
        &[
            "config",
            "engine",
            "llm",
            "memory",
            "registry",
            "skills",
            "store",
            "telemetry",
            "tools",
        ],
    ),
    (
        "daemon",
        &[
            "api",
            "config",
            "engine",
            "llm",
            "mcp",
            "memory",
            "registry",
            "run",
            "scheduler",
            "skills",
            "store",
            "telemetry",
            "tools",
        ],
    ),
    (
        "cli",
        &[
            "api",
            "config",
            "daemon",
            "engine",
            "llm",
            "mcp",
            "memory",
            "registry",
            "replay",
            "run",
            "scheduler",
            "skills",
            "store",
            "telemetry",
            "tools",
        ],
    ),
];

/// One named module: where, and which.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Reference {
    line: usize,
    module: String,
}

#[test]
fn layers_point_one_way() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = rust_files(&src);
    assert!(
        files.len() > 50,
        "expected the crate's sources under {src:?}"
    );
    let modules = module_paths(&src, &files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut violations = Vec::new();
    for file in &files {
        let Some(path) = modules.get(file) else {
            continue;
        };
        let Some(top) = path.first() else {
            continue; // lib.rs, main.rs
        };
        let text = std::fs::read_to_string(file).unwrap();
        for r in references(&text, path) {
            if &r.module == top {
                continue;
            }
            graph
                .entry(top.clone())
                .or_default()
                .insert(r.module.clone());
            if !allowed(top, &r.module) {
                let shown = file.strip_prefix(src.parent().unwrap()).unwrap();
                violations.push(format!(
                    "{}:{}: `{top}` names `{}`",
                    shown.display(),
                    r.line,
                    r.module
                ));
            }
        }
    }
    let drawn: Vec<String> = graph
        .iter()
        .map(|(m, to)| {
            format!(
                "{m} -> {}",
                to.iter().cloned().collect::<Vec<_>>().join(" ")
            )
        })
        .collect();
    assert!(
        violations.is_empty(),
        "layering breaks (allowed: ALLOWED in tests/layers.rs, DESIGN.md section 1):\n{}\n\nthe graph:\n{}",
        violations.join("\n"),
        drawn.join("\n")
    );
}

fn allowed(from: &str, to: &str) -> bool {
    if LEAVES.contains(&to) {
        // The leaves themselves may use `types`, which uses nothing.
        return !LEAVES.contains(&from) || from != "types" && to == "types";
    }
    let Some((_, may)) = ALLOWED.iter().find(|(m, _)| *m == from) else {
        panic!("module `{from}` is not in ALLOWED of tests/layers.rs: add it with what it may use");
    };
    may.contains(&to)
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// Each file's module path (`src/store/memory/write.rs` ->
/// `[store, memory, write]`), following `#[path = "..."] mod x;`.
fn module_paths(src: &Path, files: &[PathBuf]) -> BTreeMap<PathBuf, Vec<String>> {
    let mut paths = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(src).unwrap();
        let mut parts: Vec<String> = rel
            .iter()
            .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
            .collect();
        if matches!(
            parts.last().map(String::as_str),
            Some("mod" | "lib" | "main")
        ) {
            parts.pop();
        }
        paths.insert(file.clone(), parts);
    }
    // `#[path = "x.rs"] mod name;` makes x.rs (beside the declaring file)
    // the child `name` of the declaring file's module.
    let mut renamed = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(file).unwrap();
        for (at, _) in text.match_indices("#[path = \"") {
            let rest = &text[at + "#[path = \"".len()..];
            let target = rest.split('"').next().unwrap();
            let name = rest
                .split_whitespace()
                .skip_while(|w| *w != "mod")
                .nth(1)
                .expect("a #[path] attribute is followed by `mod name;`")
                .trim_end_matches(';');
            let mut module = paths[file].clone();
            module.push(name.to_string());
            renamed.push((file.parent().unwrap().join(target), module));
        }
    }
    for (target, module) in renamed {
        paths.insert(target, module);
    }
    paths
}

/// Every module of ours `text` names, for a file whose module path is
/// `file_module`.
fn references(text: &str, file_module: &[String]) -> Vec<Reference> {
    let code = strip(text);
    let bytes = code.as_bytes();
    let mut found = Vec::new();
    // Inline `mod x {` blocks: the brace depth each opened at.
    let mut inline: Vec<usize> = Vec::new();
    let mut depth = 0usize;
    let mut line = 1usize;
    let mut i = 0usize;
    while i < bytes.len() {
        let c = bytes[i];
        match c {
            b'\n' => line += 1,
            b'{' => depth += 1,
            b'}' => {
                depth = depth.saturating_sub(1);
                if inline.last() == Some(&depth) {
                    inline.pop();
                }
            }
            _ => {}
        }
        let starts_word = i == 0 || !is_ident(bytes[i - 1]) && bytes[i - 1] != b'$';
        if !starts_word || !is_ident(c) {
            i += 1;
            continue;
        }
        let word = ident_at(&code, i);
        if word == "mod" {
            // `mod x {` opens an inline module.
            let after = code[i + 3..].trim_start();
            let name = ident_at(after, 0);
            if !name.is_empty() && after[name.len()..].trim_start().starts_with('{') {
                inline.push(depth);
            }
        } else if word == "crate" && code[i + 5..].starts_with("::") {
            let mut refs = Vec::new();
            path_heads(&code[i + 7..], &mut refs);
            for (offset, module) in refs {
                let at = line + code[i..i + 7 + offset].matches('\n').count();
                found.push(Reference { line: at, module });
            }
        } else if word == "super" && (i < 2 || &bytes[i - 2..i] != b"::") {
            // A chain `super::super::...::x`.
            let mut n = 0;
            let mut j = i;
            while code[j..].starts_with("super::") {
                n += 1;
                j += "super::".len();
            }
            let here = file_module.len() + inline.len();
            if n >= here {
                let mut refs = Vec::new();
                path_heads(&code[j..], &mut refs);
                for (offset, module) in refs {
                    let at = line + code[i..j + offset].matches('\n').count();
                    found.push(Reference { line: at, module });
                }
            }
            i = j.max(i + 1);
            continue;
        }
        i += word.len();
    }
    found
}

/// The first segments of the path(s) starting at `rest` (just after
/// `crate::`): `x::y` gives `x`; `{x, y::z, self}` gives `x` and `y`. Each
/// with its byte offset in `rest`.
fn path_heads(rest: &str, out: &mut Vec<(usize, String)>) {
    let trimmed = rest.trim_start();
    let skip = rest.len() - trimmed.len();
    if let Some(group) = trimmed.strip_prefix('{') {
        let mut level = 0usize;
        let mut expect = true;
        for (k, ch) in group.char_indices() {
            match ch {
                '{' => level += 1,
                '}' if level == 0 => return,
                '}' => level -= 1,
                ',' if level == 0 => expect = true,
                c if expect && level == 0 && (c.is_alphabetic() || c == '_') => {
                    let name = ident_at(group, k);
                    if name != "self" {
                        out.push((skip + 1 + k, name.to_string()));
                    }
                    expect = false;
                }
                _ => {}
            }
        }
    } else {
        let name = ident_at(trimmed, 0);
        if !name.is_empty() {
            out.push((skip, name.to_string()));
        }
    }
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

fn ident_at(text: &str, at: usize) -> &str {
    let end = text[at..]
        .bytes()
        .position(|b| !is_ident(b))
        .map_or(text.len(), |n| at + n);
    &text[at..end]
}

/// `text` with comments and the insides of string and char literals
/// replaced by spaces (line breaks kept, so lines still count).
fn strip(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut level = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    level += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    level -= 1;
                    out.push_str("  ");
                    i += 2;
                    if level == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if c == 'r'
            && matches!(next, Some('"' | '#'))
            && (i == 0
                || chars[i - 1] == 'b'
                || !chars[i - 1].is_alphanumeric() && chars[i - 1] != '_')
        {
            // A raw string r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let close: String = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            out.push_str(&" ".repeat(j + 1 - i));
            i = j + 1;
            while i < chars.len() && !chars[i..].starts_with(&close.chars().collect::<Vec<_>>()) {
                out.push(blank(chars[i]));
                i += 1;
            }
            out.push_str(&" ".repeat(close.len()));
            i += close.len();
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < chars.len() {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' && is_char_literal(&chars[i..]) {
            out.push(' ');
            i += 1;
            while i < chars.len() && chars[i] != '\'' {
                if chars[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                out.push(' ');
                i += 1;
            }
            out.push(' ');
            i += 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// Does `rest` (starting at a `'`) start a char literal rather than a
/// lifetime?
fn is_char_literal(rest: &[char]) -> bool {
    match rest.get(1) {
        Some('\\') => true,
        Some(_) => rest.get(2) == Some(&'\''),
        None => false,
    }
}

#[test]
fn references_are_found_in_every_form() {
    let text = "use crate::store::Store;\n\
                use crate::{\n    config::Agent,\n    self,\n    tools::{Tool, ToolError},\n};\n\
                // crate::daemon in a comment\n\
                let s = \"crate::cli in a string\";\n\
                let c = '\"'; fn f<'a>(x: &'a str) { crate::llm::f(x) }\n\
                pub(in crate::engine) fn g() {}\n\
                mod tests { use super::super::super::scheduler::x; use super::super::y; }\n";
    let found: Vec<(usize, String)> = references(text, &["memory".into(), "tools".into()])
        .into_iter()
        .map(|r| (r.line, r.module))
        .collect();
    let want: Vec<(usize, String)> = [
        (1, "store"),
        (3, "config"),
        (5, "tools"),
        (9, "llm"),
        (10, "engine"),
        (11, "scheduler"),
    ]
    .into_iter()
    .map(|(l, m)| (l, m.to_string()))
    .collect();
    assert_eq!(found, want);
}

#[test]
fn the_table_refuses_what_design_forbids() {
    assert!(allowed("memory", "store"));
    assert!(!allowed("store", "memory"));
    assert!(allowed("daemon", "api"));
    assert!(!allowed("api", "daemon"));
    assert!(!allowed("config", "scheduler"));
    assert!(!allowed("tools", "config"));
    assert!(allowed("engine", "types"));
    assert!(!allowed("types", "text"));
}
