//! Layers point one way, exactly as ARCHITECTURE.md draws them. The table
//! of its "Layers" section (each top-level module and the modules it may
//! use) is read here and is the only copy: this test reads every `.rs` file
//! under `src/`, collects the top-level modules each top-level module names
//! (`crate::x`, `use crate::{x, y::z}` groups over several lines,
//! `pub(in crate::x)`, and `super::` chains that climb to the crate root),
//! and fails on any edge the table does not allow (printing the file and
//! line of each) and on any permission no file uses, so the document can
//! neither forbid less nor allow more than the code does. Comments and
//! string literals are skipped, so prose and messages that mention a module
//! are not imports.
//!
//! It also fails when an import circle spans more than two files: a file's
//! imports outside its `#[cfg(test)]` modules and re-exports, resolved to
//! the file that defines what they name (a module's use of its own
//! submodules is how it is made of them, not an import).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One named module: where, and which.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Reference {
    line: usize,
    module: String,
}

type Table = BTreeMap<String, BTreeSet<String>>;

/// The table of the "Layers" section of ARCHITECTURE.md: each row
/// `| `module` | its job | `a`, `b` |` (or `-` for nothing).
fn documented() -> Table {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("ARCHITECTURE.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let section = text
        .split("\n## ")
        .find(|s| s.starts_with("Layers"))
        .expect("ARCHITECTURE.md has a `## Layers` section");
    let mut table = Table::new();
    for line in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        let module = cells[0].trim_matches('`').to_string();
        let uses = cells
            .last()
            .unwrap()
            .split(',')
            .map(|c| c.trim().trim_matches('`').to_string())
            .filter(|c| !c.is_empty() && c != "-")
            .collect();
        assert!(
            table.insert(module.clone(), uses).is_none(),
            "ARCHITECTURE.md lists `{module}` twice"
        );
    }
    assert!(table.len() > 10, "expected the layers table in {path:?}");
    table
}

#[test]
fn layers_point_one_way() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = rust_files(&src);
    assert!(
        files.len() > 50,
        "expected the crate's sources under {src:?}"
    );
    let table = documented();
    let modules = module_paths(&src, &files);
    let mut graph = Table::new();
    let mut violations = Vec::new();
    for file in &files {
        let Some(path) = modules.get(file) else {
            continue;
        };
        let Some(top) = path.first() else {
            continue; // lib.rs, main.rs
        };
        let Some(may) = table.get(top) else {
            panic!(
                "module `{top}` is not in the layers table of ARCHITECTURE.md: add it with its job and what it may use"
            );
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
            if !may.contains(&r.module) {
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
    for (module, may) in &table {
        for unused in may.difference(graph.get(module).unwrap_or(&BTreeSet::new())) {
            violations.push(format!(
                "ARCHITECTURE.md: `{module}` may use `{unused}`, but nothing of it does: remove the permission"
            ));
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
        "the layers differ from ARCHITECTURE.md's table:\n{}\n\nthe graph:\n{}",
        violations.join("\n"),
        drawn.join("\n")
    );
}

#[test]
fn no_import_circle_spans_more_than_two_files() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = rust_files(&src);
    let modules = module_paths(&src, &files);
    let by_module: BTreeMap<Vec<String>, PathBuf> = modules
        .iter()
        .map(|(f, m)| (m.clone(), f.clone()))
        .collect();
    let mut edges: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
    for file in &files {
        let Some(here) = modules.get(file) else {
            continue;
        };
        let text = std::fs::read_to_string(file).unwrap();
        let out = edges.entry(file.clone()).or_default();
        for path in imported_paths(&strip_tests(&strip(&text)), here, &by_module) {
            // A module using its own submodules is how it is made of them,
            // not an import circle.
            if let Some(target) = defining_file(&path, &by_module)
                && !modules[&target].starts_with(here)
            {
                out.insert(target);
            }
        }
    }
    let circles: Vec<String> = strongly_connected(&edges)
        .into_iter()
        .filter(|c| c.len() > 2)
        .map(|c| {
            c.iter()
                .map(|f| f.strip_prefix(&src).unwrap().display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        })
        .collect();
    assert!(
        circles.is_empty(),
        "import circles across more than two files (break each by moving what they share to a file of its own, or by passing it in):\n{}",
        circles.join("\n")
    );
}

/// `code` (comments and strings already blanked) without its
/// `#[cfg(test)]` items, each a `mod x { ... }`, a `mod x;` or one item.
fn strip_tests(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        // The item ends at its `;` or at the brace closing its first `{`.
        let mut depth = 0usize;
        let mut end = after.len();
        for (i, c) in after.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i + 1;
                        break;
                    }
                }
                ';' if depth == 0 => {
                    end = i + 1;
                    break;
                }
                _ => {}
            }
        }
        let skipped = &after[..end];
        out.extend(skipped.chars().filter(|c| *c == '\n'));
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// The paths (from the crate root) of what `code`, the code of module
/// `here`, imports: `crate::`, `super::` and `self::` paths, and paths
/// through its own child modules; re-exports (`pub use`) are left out, as
/// they only pass a name on.
fn imported_paths(
    code: &str,
    here: &[String],
    modules: &BTreeMap<Vec<String>, PathBuf>,
) -> Vec<Vec<String>> {
    let bytes = code.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let starts_word = i == 0 || !is_ident(bytes[i - 1]) && bytes[i - 1] != b':';
        if !starts_word || !is_ident(bytes[i]) {
            i += 1;
            continue;
        }
        let word = ident_at(code, i);
        if word == "pub"
            && code[i..]
                .trim_start_matches("pub")
                .trim_start()
                .starts_with("use ")
        {
            // A re-export: skip to its end.
            i += code[i..].find(';').map_or(code.len() - i, |n| n + 1);
            continue;
        }
        let rest = &code[i + word.len()..];
        if !rest.starts_with("::") {
            i += word.len();
            continue;
        }
        let base: Option<Vec<String>> = match word {
            "crate" => Some(Vec::new()),
            "self" => Some(here.to_vec()),
            "super" => {
                let mut n = 1;
                let mut after = &rest[2..];
                while let Some(more) = after.strip_prefix("super::") {
                    n += 1;
                    after = more;
                }
                (n <= here.len()).then(|| here[..here.len() - n].to_vec())
            }
            child => {
                let mut path = here.to_vec();
                path.push(child.to_string());
                modules.contains_key(&path).then_some(here.to_vec())
            }
        };
        let Some(base) = base else {
            i += word.len();
            continue;
        };
        let start = if matches!(word, "crate" | "self" | "super") {
            let mut j = i + word.len() + 2;
            while code[j..].starts_with("super::") {
                j += "super::".len();
            }
            j
        } else {
            i
        };
        let (paths, end) = path_tails(code, start);
        for tail in paths {
            let mut path = base.clone();
            path.extend(tail);
            found.push(path);
        }
        i = end.max(i + word.len());
    }
    found
}

/// The paths written from `start`: `a::b::C`, or a group `a::{b, c::d}`
/// (nested groups included), each as its segments; and where they end.
fn path_tails(code: &str, start: usize) -> (Vec<Vec<String>>, usize) {
    let mut prefix: Vec<String> = Vec::new();
    let mut i = start;
    loop {
        let rest = &code[i..];
        let trimmed = rest.trim_start();
        i += rest.len() - trimmed.len();
        if let Some(group) = trimmed.strip_prefix('{') {
            let mut paths = Vec::new();
            let mut j = i + 1;
            loop {
                let inner = &code[j..];
                let t = inner.trim_start();
                j += inner.len() - t.len();
                if t.starts_with('}') {
                    return (paths, j + 1);
                }
                if t.starts_with(',') {
                    j += 1;
                    continue;
                }
                let (inner_paths, end) = path_tails(code, j);
                for p in inner_paths {
                    let mut full = prefix.clone();
                    full.extend(p.into_iter().filter(|s| s != "self"));
                    paths.push(full);
                }
                if end <= j {
                    return (paths, j + 1);
                }
                j = end;
                let _ = group;
            }
        }
        let name = ident_at(code, i);
        if name.is_empty() {
            return (vec![prefix], i);
        }
        prefix.push(name.to_string());
        i += name.len();
        if code[i..].starts_with("::") {
            i += 2;
        } else {
            return (vec![prefix], i);
        }
    }
}

/// The file defining `path`: that of its longest prefix that is a module.
fn defining_file(path: &[String], modules: &BTreeMap<Vec<String>, PathBuf>) -> Option<PathBuf> {
    (0..=path.len())
        .rev()
        .find_map(|n| modules.get(&path[..n]))
        .cloned()
}

/// The strongly connected components of `edges` (Tarjan's algorithm).
fn strongly_connected(edges: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Vec<Vec<PathBuf>> {
    struct Walk<'a> {
        edges: &'a BTreeMap<PathBuf, BTreeSet<PathBuf>>,
        index: BTreeMap<&'a PathBuf, usize>,
        low: BTreeMap<&'a PathBuf, usize>,
        stack: Vec<&'a PathBuf>,
        on_stack: BTreeSet<&'a PathBuf>,
        found: Vec<Vec<PathBuf>>,
    }
    fn visit<'a>(w: &mut Walk<'a>, v: &'a PathBuf) {
        let n = w.index.len();
        w.index.insert(v, n);
        w.low.insert(v, n);
        w.stack.push(v);
        w.on_stack.insert(v);
        for next in w.edges.get(v).into_iter().flatten() {
            if !w.index.contains_key(next) {
                visit(w, next);
                let low = w.low[v].min(w.low[next]);
                w.low.insert(v, low);
            } else if w.on_stack.contains(next) {
                let low = w.low[v].min(w.index[next]);
                w.low.insert(v, low);
            }
        }
        if w.low[v] == w.index[v] {
            let mut component = Vec::new();
            while let Some(top) = w.stack.pop() {
                w.on_stack.remove(top);
                component.push(top.clone());
                if top == v {
                    break;
                }
            }
            w.found.push(component);
        }
    }
    let mut walk = Walk {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in edges.keys() {
        if !walk.index.contains_key(v) {
            visit(&mut walk, v);
        }
    }
    walk.found
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
fn the_table_refuses_what_the_layers_forbid() {
    let table = documented();
    let may = |from: &str, to: &str| table[from].contains(to);
    assert!(may("memory", "store"));
    assert!(!may("store", "memory"));
    assert!(may("daemon", "api"));
    assert!(!may("api", "daemon"));
    assert!(!may("config", "scheduler"));
    assert!(!may("tools", "config"));
    assert!(!may("engine", "store"));
    assert!(!may("run", "daemon"));
    assert!(may("cli", "app"));
    assert!(table["cli"].len() <= 6, "cli reaches {:?}", table["cli"]);
    assert!(table["types"].is_empty());
}

#[test]
fn imports_are_resolved_to_their_paths() {
    let modules: BTreeMap<Vec<String>, PathBuf> = [
        vec!["run"],
        vec!["run", "step"],
        vec!["run", "job"],
        vec!["store"],
    ]
    .into_iter()
    .map(|m| {
        let m: Vec<String> = m.into_iter().map(String::from).collect();
        let file = PathBuf::from(m.join("/"));
        (m, file)
    })
    .collect();
    let code = strip_tests(&strip(
        "use super::job::{Job, self};\nuse crate::{store::Store, run::step::run_step};\n\
         pub use crate::store::Other;\nfn f() { step::go(); let x = a::b; }\n\
         #[cfg(test)]\nmod tests { use crate::store::Hidden; }\n",
    ));
    let here: Vec<String> = vec!["run".into()];
    let found = imported_paths(&code, &here, &modules);
    let want: Vec<Vec<&str>> = vec![
        vec!["job", "Job"],
        vec!["job"],
        vec!["store", "Store"],
        vec!["run", "step", "run_step"],
        vec!["run", "step", "go"],
    ];
    assert_eq!(
        found,
        want.into_iter()
            .map(|p| p.into_iter().map(String::from).collect::<Vec<_>>())
            .collect::<Vec<_>>()
    );
}

#[test]
fn a_circle_of_three_files_is_one_component() {
    let f = |name: &str| PathBuf::from(name);
    let mut edges: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
    edges.insert(f("a"), [f("b")].into());
    edges.insert(f("b"), [f("c")].into());
    edges.insert(f("c"), [f("a"), f("d")].into());
    edges.insert(f("d"), [f("e")].into());
    edges.insert(f("e"), [f("d")].into());
    let mut sizes: Vec<usize> = strongly_connected(&edges).iter().map(Vec::len).collect();
    sizes.sort();
    assert_eq!(sizes, [2, 3]);
}
