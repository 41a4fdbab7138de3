//! The file tools `read_file`, `write_file` and `list_dir`, and
//! [`resolve_in_root`], which confines every path they touch to the project
//! root (after resolving `..` and symbolic links). Every resolved path is
//! then checked against the project's [`ProtectedPaths`] (control files,
//! database, secrets). Blocking file-system work runs on tokio's blocking
//! pool.

use std::fs;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::{Value, json};

use super::guard::{Access, ProtectedPaths, open_without_links};
use super::{optional_bool, optional_str, optional_u64, required_str};
use crate::tools::{Tool, ToolContext, ToolError, cap_output};
use crate::types::ToolSpec;

/// Resolves `path` (relative to `root`, or absolute inside it) to a real
/// path inside the canonical root, following symbolic links. With
/// `must_exist` the path must exist; without it, the deepest existing
/// ancestor is resolved and checked and the rest is appended. Blocking.
pub fn resolve_in_root(root: &Path, path: &str, must_exist: bool) -> Result<PathBuf, ToolError> {
    if path.is_empty() {
        return Err(ToolError::InvalidArguments(
            "`path` is empty; use \".\" for the project root".into(),
        ));
    }
    if path.contains('\0') {
        return Err(ToolError::InvalidArguments(
            "`path` contains a NUL character".into(),
        ));
    }
    let root = root.canonicalize().map_err(|e| {
        ToolError::Failed(format!(
            "the project root {} cannot be opened: {e}",
            root.display()
        ))
    })?;
    let given = Path::new(path);
    let mut candidate = if given.is_absolute() {
        given.to_path_buf()
    } else {
        root.join(given)
    };
    // At most twice: a second pass only when `..` followed a missing
    // directory, on a path that no longer has any `..`.
    for _ in 0..2 {
        let comps: Vec<Component> = candidate.components().collect();
        let mut k = comps.len();
        while k > 0 {
            let prefix: PathBuf = comps[..k].iter().collect();
            match fs::symlink_metadata(&prefix) {
                Ok(_) => break,
                Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => {
                    k -= 1
                }
                Err(e) => return Err(ToolError::Failed(format!("cannot access {path:?}: {e}"))),
            }
        }
        let prefix: PathBuf = comps[..k].iter().collect();
        let mut resolved = prefix.canonicalize().map_err(|e| {
            ToolError::Failed(format!(
                "cannot resolve {path:?} (a broken symbolic link?): {e}"
            ))
        })?;
        let rest = &comps[k..];
        if !rest.is_empty() && must_exist {
            return Err(ToolError::Failed(format!(
                "{path:?} does not exist; use list_dir to see what is there"
            )));
        }
        let climbs = rest.iter().any(|c| matches!(c, Component::ParentDir));
        for c in rest {
            match c {
                Component::Normal(name) => resolved.push(name),
                Component::CurDir => {}
                Component::ParentDir => {
                    resolved.pop();
                }
                Component::RootDir | Component::Prefix(_) => return Err(outside(path)),
            }
        }
        if !climbs {
            return if resolved.starts_with(&root) {
                Ok(resolved)
            } else {
                Err(outside(path))
            };
        }
        candidate = resolved;
    }
    Err(outside(path))
}

fn outside(path: &str) -> ToolError {
    ToolError::Failed(format!(
        "path {path:?} is outside the project root; use a path relative to the project root"
    ))
}

/// [`resolve_in_root`], then refuses what `protected` forbids for `access`.
/// Blocking.
fn resolve_checked(
    root: &Path,
    path: &str,
    must_exist: bool,
    protected: &ProtectedPaths,
    access: Access,
) -> Result<PathBuf, ToolError> {
    let real = resolve_in_root(root, path, must_exist)?;
    let root = root
        .canonicalize()
        .map_err(|e| ToolError::Failed(format!("the project root cannot be opened: {e}")))?;
    protected.check(&root, &real, access, path)?;
    Ok(real)
}

/// Runs blocking file-system work off the async threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ToolError> + Send + 'static,
) -> Result<T, ToolError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ToolError::Failed(format!("file task failed: {e}")))?
}

fn io_err(what: &str, path: &str, e: std::io::Error) -> ToolError {
    ToolError::Failed(format!("could not {what} {path:?}: {e}"))
}

fn prop(ty: &str, description: &str, example: Value) -> Value {
    json!({"type": ty, "description": description, "examples": [example]})
}

fn schema(properties: Value, required: &[&str]) -> Value {
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false
    })
}

fn binary(shown: &str, size: u64) -> ToolError {
    ToolError::Failed(format!(
        "{shown:?} is a binary file ({size} bytes), not UTF-8 text; read_file reads text only"
    ))
}

/// Lines `offset..offset+limit` (1-based) of `file`, at most about `cap` bytes.
fn read_lines(
    file: &Path,
    shown: &str,
    offset: u64,
    limit: Option<u64>,
    cap: usize,
    check: &dyn Fn(&fs::File) -> Result<(), ToolError>,
) -> Result<String, ToolError> {
    let meta = fs::metadata(file).map_err(|e| io_err("read", shown, e))?;
    if meta.is_dir() {
        return Err(ToolError::Failed(format!(
            "{shown:?} is a directory; use list_dir to see its entries"
        )));
    }
    if !meta.is_file() {
        // A FIFO or device could block the read forever.
        return Err(ToolError::Failed(format!(
            "{shown:?} is not a regular file (a pipe, socket or device); it cannot be read"
        )));
    }
    let size = meta.len();
    let opened = open_without_links(file, libc::O_RDONLY).map_err(|e| io_err("open", shown, e))?;
    check(&opened)?;
    let mut reader = BufReader::new(opened);
    let mut sample = Vec::new();
    (&mut reader)
        .take(8192)
        .read_to_end(&mut sample)
        .map_err(|e| io_err("read", shown, e))?;
    let bad_utf8 = std::str::from_utf8(&sample).is_err_and(|e| e.error_len().is_some());
    if bad_utf8 || sample.contains(&0) {
        return Err(binary(shown, size));
    }
    let mut reader = BufReader::new(sample.as_slice().chain(reader));
    let read_err = |e| io_err("read", shown, e);
    // Skip to the first wanted line without keeping the skipped ones.
    let mut line = 1;
    while line < offset {
        let buf = reader.fill_buf().map_err(read_err)?;
        if buf.is_empty() {
            break;
        }
        match buf.iter().position(|&b| b == b'\n') {
            Some(i) => {
                reader.consume(i + 1);
                line += 1;
            }
            None => {
                let n = buf.len();
                reader.consume(n);
                if reader.fill_buf().map_err(read_err)?.is_empty() {
                    line += 1; // a last line without a newline
                }
            }
        }
    }
    let mut out = String::new();
    let mut taken = 0u64;
    let mut buf = Vec::new();
    while out.len() <= cap && limit.is_none_or(|l| taken < l) {
        buf.clear();
        let budget = (cap + 1 - out.len()) as u64;
        let n = (&mut reader)
            .take(budget)
            .read_until(b'\n', &mut buf)
            .map_err(read_err)?;
        if n == 0 {
            break;
        }
        match std::str::from_utf8(&buf) {
            Ok(s) => out.push_str(s),
            // The budget cut a character; U+FFFD is no shorter than the
            // bytes it replaces, so `out` is over `cap` and the loop ends.
            Err(e) if e.error_len().is_none() => out.push_str(&String::from_utf8_lossy(&buf)),
            Err(_) => return Err(binary(shown, size)),
        }
        taken += 1;
    }
    if out.is_empty() {
        return if offset > 1 {
            Err(ToolError::Failed(format!(
                "offset {offset} is past the end of {shown:?}, which has {} lines",
                line - 1
            )))
        } else {
            Ok("(empty file)".into())
        };
    }
    if out.len() > cap {
        let mut end = cap;
        while !out.is_char_boundary(end) {
            end -= 1;
        }
        let next = offset + out[..end].matches('\n').count() as u64;
        let text = cap_output(out, cap);
        return Ok(format!(
            "{text}\n[call read_file with offset {next} to read on from line {next}]"
        ));
    }
    let more = !reader.fill_buf().map_err(read_err)?.is_empty();
    if more {
        let last = offset + taken - 1;
        out.push_str(&format!(
            "\n[showing lines {offset}-{last}; call read_file with offset {} for more]",
            last + 1
        ));
    }
    Ok(out)
}

/// The `read_file` tool.
#[derive(Debug, Clone)]
pub struct ReadFileTool {
    spec: ToolSpec,
    protected: Arc<ProtectedPaths>,
}

impl ReadFileTool {
    pub fn new(protected: Arc<ProtectedPaths>) -> Self {
        let properties = json!({
            "path": prop("string", "File path relative to the project root.", json!("README.md")),
            "offset": prop("integer", "First line to return, 1-based (default 1).", json!(1)),
            "limit": prop("integer", "Most lines to return (default: all that fit).", json!(200)),
        });
        let mut parameters = schema(properties, &["path"]);
        parameters["properties"]["offset"]["minimum"] = json!(1);
        parameters["properties"]["limit"]["minimum"] = json!(1);
        ReadFileTool {
            spec: ToolSpec {
                name: "read_file".into(),
                description: "Reads a UTF-8 text file inside the project. Long files are cut; \
                    use offset and limit (in lines) to read them piece by piece."
                    .into(),
                parameters,
            },
            protected,
        }
    }
}

/// The `write_file` tool.
#[derive(Debug, Clone)]
pub struct WriteFileTool {
    spec: ToolSpec,
    protected: Arc<ProtectedPaths>,
}

impl WriteFileTool {
    pub fn new(protected: Arc<ProtectedPaths>) -> Self {
        let properties = json!({
            "path": prop("string", "File path relative to the project root; missing directories are created.", json!("aurad-test-output.txt")),
            "content": prop("string", "The text to write.", json!("written by aurad")),
            "append": prop("boolean", "Add to the end of the file instead of replacing it (default false).", json!(false)),
        });
        WriteFileTool {
            spec: ToolSpec {
                name: "write_file".into(),
                description:
                    "Writes text to a file inside the project, replacing it (or appending \
                    with append: true) and creating missing directories."
                        .into(),
                parameters: schema(properties, &["path", "content"]),
            },
            protected,
        }
    }
}

/// The `list_dir` tool.
#[derive(Debug, Clone)]
pub struct ListDirTool {
    spec: ToolSpec,
    protected: Arc<ProtectedPaths>,
}

impl ListDirTool {
    pub fn new(protected: Arc<ProtectedPaths>) -> Self {
        let properties = json!({
            "path": prop("string", "Directory relative to the project root (default \".\").", json!(".")),
        });
        ListDirTool {
            spec: ToolSpec {
                name: "list_dir".into(),
                description:
                    "Lists a directory inside the project, sorted by name: directories end \
                    with '/', files show their size in bytes, symbolic links their target."
                        .into(),
                parameters: schema(properties, &[]),
            },
            protected,
        }
    }
}

fn check_cancel(ctx: &ToolContext) -> Result<(), ToolError> {
    if ctx.cancel.is_cancelled() {
        return Err(ToolError::Cancelled);
    }
    Ok(())
}

impl Tool for ReadFileTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call<'a>(
        &'a self,
        args: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            check_cancel(ctx)?;
            let path = required_str(&args, "path")?.to_string();
            let offset = optional_u64(&args, "offset")?.unwrap_or(1);
            let limit = optional_u64(&args, "limit")?;
            if offset == 0 {
                return Err(ToolError::InvalidArguments(
                    "`offset` is 1-based: the first line is 1".into(),
                ));
            }
            if limit == Some(0) {
                return Err(ToolError::InvalidArguments(
                    "`limit` must be at least 1".into(),
                ));
            }
            let (root, cap) = (ctx.root.clone(), ctx.output_cap);
            let protected = self.protected.clone();
            blocking(move || {
                let file = resolve_checked(&root, &path, true, &protected, Access::Read)?;
                let check =
                    |opened: &fs::File| protected.check_open(&root, opened, Access::Read, &path);
                read_lines(&file, &path, offset, limit, cap, &check)
            })
            .await
        })
    }
}

impl Tool for WriteFileTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call<'a>(
        &'a self,
        args: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            check_cancel(ctx)?;
            let path = required_str(&args, "path")?.to_string();
            let content = required_str(&args, "content")?.to_string();
            let append = optional_bool(&args, "append")?.unwrap_or(false);
            let root = ctx.root.clone();
            let protected = self.protected.clone();
            blocking(move || {
                let target = resolve_checked(&root, &path, false, &protected, Access::Write)?;
                if target.is_dir() {
                    return Err(ToolError::Failed(format!(
                        "{path:?} is a directory; give the path of a file inside it"
                    )));
                }
                if let Some(parent) = target.parent() {
                    fs::create_dir_all(parent)
                        .map_err(|e| io_err("create the directories of", &path, e))?;
                }
                // Opened without truncating: the file is looked at first
                // (its names, what it is), then emptied.
                let mode = if append { libc::O_APPEND } else { 0 };
                let mut file = open_without_links(&target, libc::O_WRONLY | libc::O_CREAT | mode)
                    .map_err(|e| io_err("open", &path, e))?;
                protected.check_open(&root, &file, Access::Write, &path)?;
                if !append {
                    file.set_len(0).map_err(|e| io_err("empty", &path, e))?;
                }
                file.write_all(content.as_bytes())
                    .map_err(|e| io_err("write", &path, e))?;
                let verb = if append { "appended" } else { "wrote" };
                Ok(format!("{verb} {} bytes to {path}", content.len()))
            })
            .await
        })
    }
}

impl Tool for ListDirTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call<'a>(
        &'a self,
        args: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            check_cancel(ctx)?;
            let path = optional_str(&args, "path")?.unwrap_or(".").to_string();
            let (root, cap) = (ctx.root.clone(), ctx.output_cap);
            let protected = self.protected.clone();
            blocking(move || {
                let dir = resolve_checked(&root, &path, true, &protected, Access::Read)?;
                if !dir.is_dir() {
                    return Err(ToolError::Failed(format!(
                        "{path:?} is a file, not a directory; use read_file to read it"
                    )));
                }
                let mut lines = Vec::new();
                for entry in fs::read_dir(&dir).map_err(|e| io_err("list", &path, e))? {
                    let entry = entry.map_err(|e| io_err("list", &path, e))?;
                    let name = entry.file_name().to_string_lossy().into_owned();
                    let line = match entry.file_type() {
                        Ok(t) if t.is_dir() => format!("{name}/"),
                        Ok(t) if t.is_symlink() => match fs::read_link(entry.path()) {
                            Ok(target) => format!("{name} -> {}", target.display()),
                            Err(_) => format!("{name} -> ?"),
                        },
                        _ => match entry.metadata() {
                            Ok(m) => format!("{name}  {} bytes", m.len()),
                            Err(_) => name,
                        },
                    };
                    lines.push((entry.file_name(), line));
                }
                if lines.is_empty() {
                    return Ok("(empty directory)".into());
                }
                lines.sort();
                let lines: Vec<String> = lines.into_iter().map(|(_, line)| line).collect();
                Ok(cap_output(lines.join("\n"), cap))
            })
            .await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;
    use tempfile::TempDir;

    /// Protection of a project elsewhere: these tests are about paths.
    fn unguarded() -> Arc<ProtectedPaths> {
        Arc::new(ProtectedPaths::defaults(Path::new("/nonexistent-project")))
    }

    fn setup() -> (TempDir, ToolContext) {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ToolContext {
            root: dir.path().to_path_buf(),
            cancel: Default::default(),
            output_cap: 1000,
            sandbox: Default::default(),
        };
        (dir, ctx)
    }

    async fn call(tool: &dyn Tool, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        tool.call(args, ctx).await
    }

    fn is_outside(r: Result<impl std::fmt::Debug, ToolError>) -> bool {
        matches!(r, Err(ToolError::Failed(m)) if m.contains("outside the project root"))
    }

    #[test]
    fn resolves_inside_and_refuses_outside() {
        let (dir, _) = setup();
        let root = dir.path().canonicalize().unwrap();
        fs::create_dir(root.join("a")).unwrap();
        fs::write(root.join("a/f.txt"), "x").unwrap();
        assert_eq!(
            resolve_in_root(&root, "a/f.txt", true).unwrap(),
            root.join("a/f.txt")
        );
        assert_eq!(
            resolve_in_root(&root, "./a/../a/f.txt", true).unwrap(),
            root.join("a/f.txt")
        );
        let abs = root.join("a/f.txt");
        assert_eq!(
            resolve_in_root(dir.path(), abs.to_str().unwrap(), true).unwrap(),
            abs
        );
        assert_eq!(
            resolve_in_root(&root, "new/dir/x.txt", false).unwrap(),
            root.join("new/dir/x.txt")
        );
        assert_eq!(
            resolve_in_root(&root, "new/../y.txt", false).unwrap(),
            root.join("y.txt")
        );
        assert_eq!(resolve_in_root(&root, ".", true).unwrap(), root);

        let e = resolve_in_root(&root, "../etc/passwd", false)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(r#"path "../etc/passwd" is outside the project root"#),
            "{e}"
        );
        assert!(is_outside(resolve_in_root(&root, "..", true)));
        assert!(is_outside(resolve_in_root(&root, "a/../../x", false)));
        assert!(is_outside(resolve_in_root(&root, "missing/../../x", false)));
        assert!(is_outside(resolve_in_root(&root, "/etc/passwd", true)));
        assert!(is_outside(resolve_in_root(
            &root,
            "/tmp/elsewhere/new.txt",
            false
        )));
        assert!(
            resolve_in_root(&root, "a/nope.txt", true)
                .unwrap_err()
                .to_string()
                .contains("does not exist")
        );
        assert!(matches!(
            resolve_in_root(&root, "", true),
            Err(ToolError::InvalidArguments(_))
        ));
    }

    #[test]
    fn refuses_symlinks_that_lead_out() {
        let (dir, _) = setup();
        let other = tempfile::tempdir().unwrap();
        fs::write(other.path().join("secret.txt"), "s").unwrap();
        let root = dir.path();
        symlink(other.path(), root.join("out")).unwrap();
        symlink(other.path().join("secret.txt"), root.join("secret-link")).unwrap();
        symlink(other.path().join("missing.txt"), root.join("dangling")).unwrap();
        fs::write(root.join("inside.txt"), "i").unwrap();
        symlink(root.join("inside.txt"), root.join("inside-link")).unwrap();

        assert!(is_outside(resolve_in_root(root, "out/secret.txt", true)));
        assert!(is_outside(resolve_in_root(root, "out/new.txt", false)));
        assert!(is_outside(resolve_in_root(root, "secret-link", true)));
        assert!(resolve_in_root(root, "dangling", false).is_err());
        let inside = resolve_in_root(root, "inside-link", true).unwrap();
        assert_eq!(inside, root.canonicalize().unwrap().join("inside.txt"));
    }

    #[tokio::test]
    async fn write_creates_dirs_appends_and_reads_back() {
        let (dir, ctx) = setup();
        let w = WriteFileTool::new(unguarded());
        let out = call(
            &w,
            json!({"path": "notes/deep/x.txt", "content": "one\n"}),
            &ctx,
        )
        .await;
        assert_eq!(out.unwrap(), "wrote 4 bytes to notes/deep/x.txt");
        let out = call(
            &w,
            json!({"path": "notes/deep/x.txt", "content": "two\n", "append": true}),
            &ctx,
        )
        .await;
        assert_eq!(out.unwrap(), "appended 4 bytes to notes/deep/x.txt");
        assert_eq!(
            fs::read_to_string(dir.path().join("notes/deep/x.txt")).unwrap(),
            "one\ntwo\n"
        );
        let r = call(
            &ReadFileTool::new(unguarded()),
            json!({"path": "notes/deep/x.txt"}),
            &ctx,
        )
        .await;
        assert_eq!(r.unwrap(), "one\ntwo\n");
        assert!(is_outside(
            call(&w, json!({"path": "../x.txt", "content": "no"}), &ctx).await
        ));
        let on_dir = call(&w, json!({"path": "notes", "content": "no"}), &ctx).await;
        assert!(on_dir.unwrap_err().to_string().contains("is a directory"));
    }

    #[tokio::test]
    async fn read_with_offset_limit_and_errors() {
        let (dir, ctx) = setup();
        let text: String = (1..=10).map(|i| format!("line {i}\n")).collect();
        fs::write(dir.path().join("ten.txt"), &text).unwrap();
        let r = ReadFileTool::new(unguarded());
        let out = call(
            &r,
            json!({"path": "ten.txt", "offset": 3, "limit": 2}),
            &ctx,
        )
        .await
        .unwrap();
        assert!(
            out.starts_with("line 3\nline 4\n\n[showing lines 3-4;"),
            "{out}"
        );
        assert!(out.contains("offset 5"), "{out}");
        let out = call(&r, json!({"path": "ten.txt", "offset": 9}), &ctx)
            .await
            .unwrap();
        assert_eq!(out, "line 9\nline 10\n");
        let past = call(&r, json!({"path": "ten.txt", "offset": 11}), &ctx)
            .await
            .unwrap_err();
        assert!(past.to_string().contains("which has 10 lines"), "{past}");

        fs::write(dir.path().join("bin.dat"), [0u8, 159, 146, 150, 7]).unwrap();
        let bin = call(&r, json!({"path": "bin.dat"}), &ctx)
            .await
            .unwrap_err()
            .to_string();
        assert!(bin.contains("binary") && bin.contains("5 bytes"), "{bin}");
        let d = call(&r, json!({"path": "."}), &ctx)
            .await
            .unwrap_err()
            .to_string();
        assert!(d.contains("list_dir"), "{d}");
        fs::write(dir.path().join("empty.txt"), "").unwrap();
        assert_eq!(
            call(&r, json!({"path": "empty.txt"}), &ctx).await.unwrap(),
            "(empty file)"
        );
    }

    #[tokio::test]
    async fn long_files_are_cut_with_a_way_on() {
        let (dir, ctx) = setup();
        let text: String = (1..=500).map(|i| format!("line {i:04} é\n")).collect();
        fs::write(dir.path().join("long.txt"), &text).unwrap();
        let out = call(
            &ReadFileTool::new(unguarded()),
            json!({"path": "long.txt"}),
            &ctx,
        )
        .await
        .unwrap();
        assert!(out.contains("[output cut:"), "{out}");
        // 1000 bytes hold 76 lines of 13 bytes; line 77 is partly shown.
        assert!(out.contains("call read_file with offset 77"), "{out}");
        let one_line = "x".repeat(5000);
        fs::write(dir.path().join("wide.txt"), &one_line).unwrap();
        let out = call(
            &ReadFileTool::new(unguarded()),
            json!({"path": "wide.txt"}),
            &ctx,
        )
        .await
        .unwrap();
        assert!(out.len() < 1200 && out.contains("offset 1"), "{out}");
    }

    #[tokio::test]
    async fn list_dir_sorted_with_kinds() {
        let (dir, ctx) = setup();
        fs::create_dir(dir.path().join("src")).unwrap();
        fs::write(dir.path().join("b.txt"), "hello").unwrap();
        fs::write(dir.path().join("a.txt"), "").unwrap();
        symlink("b.txt", dir.path().join("c-link")).unwrap();
        let l = ListDirTool::new(unguarded());
        let out = call(&l, json!({}), &ctx).await.unwrap();
        assert_eq!(out, "a.txt  0 bytes\nb.txt  5 bytes\nc-link -> b.txt\nsrc/");
        assert_eq!(
            call(&l, json!({"path": "src"}), &ctx).await.unwrap(),
            "(empty directory)"
        );
        assert!(
            call(&l, json!({"path": "b.txt"}), &ctx)
                .await
                .unwrap_err()
                .to_string()
                .contains("read_file")
        );
        assert!(is_outside(call(&l, json!({"path": ".."}), &ctx).await));
    }
}
