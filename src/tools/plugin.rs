//! The `tools.d` plugin adapter: a [`PluginTool`] turns one validated
//! [`PluginConfig`] into a [`Tool`]. The command form runs the user's program
//! in `tools.d/` (through `tools::process`, in its own process group) with
//! the arguments as JSON on stdin and returns its stdout; the HTTP form sends
//! the arguments as a JSON body or as query parameters and returns the
//! response body. Every failure becomes a [`ToolError`] whose text tells the
//! model (and the user reading the run) what went wrong. Header values and
//! URLs beyond their origin are never logged or shown: they may hold
//! secrets. May depend on `types` (the plugin shape, `types::plugin`), tokio
//! and reqwest.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::Value;

use super::process::{self, Captured, Ended, Keep, ProcessError, ProcessSpec, signal_name};
use super::{Tool, ToolContext, ToolError};
use crate::types::ToolSpec;
use crate::types::plugin::{ArgsIn, PLUGIN_DIR, PluginAction, PluginConfig};

/// How much of stderr (its end) a failure shows.
const STDERR_TAIL: usize = 2048;
/// How much of an HTTP error response's body a failure shows.
const ERROR_BODY_CAP: usize = 4096;
/// The longest an HTTP plugin may take to connect (less if its timeout is).
const MAX_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A tool defined by a `tools.d/NAME.yaml` file.
pub struct PluginTool {
    spec: ToolSpec,
    config: PluginConfig,
    /// `<root>/tools.d`, absolute: commands run here and relative program
    /// paths resolve against it.
    dir: PathBuf,
    /// Built on the first HTTP call, then reused.
    client: OnceLock<Result<reqwest::Client, String>>,
}

impl PluginTool {
    pub fn new(config: PluginConfig, root: &Path) -> PluginTool {
        let dir = root.join(PLUGIN_DIR);
        let dir = std::path::absolute(&dir).unwrap_or(dir);
        let spec = ToolSpec {
            name: config.name.clone(),
            description: config.description.clone(),
            parameters: config.parameters.clone(),
        };
        PluginTool {
            spec,
            config,
            dir,
            client: OnceLock::new(),
        }
    }

    pub fn config(&self) -> &PluginConfig {
        &self.config
    }

    async fn run_command(
        &self,
        argv: &[String],
        env: &std::collections::BTreeMap<String, String>,
        args: &Value,
        ctx: &ToolContext,
    ) -> Result<String, ToolError> {
        let name = &self.config.name;
        let program = &argv[0];
        let resolved: OsString = if program.contains('/') {
            self.dir.join(program).into()
        } else {
            program.into()
        };
        let mut vars: Vec<(OsString, OsString)> =
            env.iter().map(|(k, v)| (k.into(), v.into())).collect();
        vars.push(("AURAD_TOOL".into(), name.into()));
        let stdin = serde_json::to_vec(args)
            .map_err(|e| ToolError::Failed(format!("cannot encode the arguments: {e}")))?;
        let spec = ProcessSpec {
            args: argv[1..].iter().map(OsString::from).collect(),
            env: vars,
            stdin: Some(stdin),
            keep_stdout: Keep::Head(ctx.output_cap.saturating_add(1)),
            keep_stderr: Keep::Tail(STDERR_TAIL),
            timeout: self.config.timeout,
            cancel: ctx.cancel.clone(),
            sandbox: ctx.sandbox.clone(),
            ..ProcessSpec::new(resolved, &self.dir)
        };
        let output = process::run(spec).await.map_err(|e| match e {
            ProcessError::Spawn(e) => ToolError::Failed(self.spawn_failure(program, &e)),
            ProcessError::Wait(e) => ToolError::Failed(format!("tool `{name}`: {e}")),
            ProcessError::Sandbox(_) => ToolError::Failed(format!("tool `{name}`: {e}")),
        })?;
        let status = match output.ended {
            Ended::Exited(status) => status,
            Ended::TimedOut => return Err(ToolError::TimedOut(self.config.timeout)),
            Ended::Cancelled => return Err(ToolError::Cancelled),
        };
        if status.success() {
            let text = cut(
                &output.stdout.kept,
                Some(output.stdout.total),
                ctx.output_cap,
            );
            let text = text.trim_end_matches(['\n', '\r']);
            return Ok(if text.is_empty() {
                "(no output)".into()
            } else {
                text.to_string()
            });
        }
        let why = match (output.code(), output.signal()) {
            (Some(code), _) => format!("exited with code {code}"),
            (None, Some(sig)) => format!("was killed by {}", signal_name(sig)),
            _ => format!("failed ({status})"),
        };
        let mut msg = format!("tool `{name}` {why}");
        if !output.stderr.kept.is_empty() {
            msg.push_str(&format!(". {}", stderr_tail(&output.stderr)));
        } else if !output.stdout.kept.is_empty() {
            let out = cut(&output.stdout.kept, Some(output.stdout.total), STDERR_TAIL);
            msg.push_str(&format!(
                ". It wrote nothing to stderr; stdout:\n{}",
                out.trim_end()
            ));
        } else {
            msg.push_str(" and printed nothing");
        }
        Err(ToolError::Failed(msg))
    }

    fn spawn_failure(&self, program: &str, e: &std::io::Error) -> String {
        let file = self.config.path.display();
        let in_dir = Path::new(PLUGIN_DIR).join(program.trim_start_matches("./"));
        let hint = match e.kind() {
            std::io::ErrorKind::NotFound if program.contains('/') => {
                format!("check that {} exists", in_dir.display())
            }
            std::io::ErrorKind::NotFound => format!(
                "check that `{program}` is installed and in PATH (for a file in {PLUGIN_DIR}/, write ./{program})"
            ),
            std::io::ErrorKind::PermissionDenied => {
                format!("make it executable: chmod +x {}", in_dir.display())
            }
            _ => format!("check the `command` of {file}"),
        };
        format!("could not start `{program}` (the command of {file}): {e}; {hint}")
    }

    async fn run_http(
        &self,
        method: &str,
        url: &str,
        headers: &std::collections::BTreeMap<String, String>,
        send_as: ArgsIn,
        args: &Value,
        ctx: &ToolContext,
    ) -> Result<String, ToolError> {
        let name = &self.config.name;
        let file = self.config.path.display();
        let client = self
            .client
            .get_or_init(|| {
                reqwest::Client::builder()
                    .connect_timeout(self.config.timeout.min(MAX_CONNECT_TIMEOUT))
                    .build()
                    .map_err(|e| describe(&e))
            })
            .as_ref()
            .map_err(|e| {
                ToolError::Failed(format!("tool `{name}`: cannot make an HTTP client: {e}"))
            })?;
        let mut url = reqwest::Url::parse(url).map_err(|e| {
            ToolError::Failed(format!(
                "tool `{name}`: the url of {file} is invalid ({e}); fix it"
            ))
        })?;
        let origin = url.origin().ascii_serialization();
        let method = reqwest::Method::from_bytes(method.as_bytes()).map_err(|_| {
            ToolError::Failed(format!(
                "tool `{name}`: invalid method {method:?} in {file}"
            ))
        })?;
        let object = args.as_object().filter(|o| !o.is_empty());
        if let (ArgsIn::Query, Some(object)) = (send_as, object) {
            let mut query = url.query_pairs_mut();
            for (key, value) in object {
                match value {
                    Value::Null => {}
                    Value::String(s) => {
                        query.append_pair(key, s);
                    }
                    other => {
                        query.append_pair(key, &other.to_string());
                    }
                }
            }
        }
        let mut request = client.request(method.clone(), url);
        for (key, value) in headers {
            let header = reqwest::header::HeaderName::from_bytes(key.as_bytes()).ok();
            let value = reqwest::header::HeaderValue::from_str(value).ok();
            let (Some(header), Some(mut value)) = (header, value) else {
                // Never show the value: it may be a secret.
                return Err(ToolError::Failed(format!(
                    "tool `{name}`: header `{key}` in {file} is not a valid HTTP header; fix it"
                )));
            };
            value.set_sensitive(true);
            request = request.header(header, value);
        }
        if send_as == ArgsIn::Body {
            request = request.json(args);
        }
        tracing::debug!(tool = %name, %method, %origin, "calling an http tool");
        let exchange = async {
            let mut response = request.send().await.map_err(|e| {
                ToolError::Failed(format!(
                    "tool `{name}`: the request to {origin} failed: {}",
                    describe(&e)
                ))
            })?;
            let status = response.status();
            let limit = if status.is_success() {
                ctx.output_cap
            } else {
                ctx.output_cap.min(ERROR_BODY_CAP)
            };
            let mut total = response.content_length().map(|n| n as usize);
            let mut body = Vec::new();
            while body.len() <= limit {
                match response.chunk().await {
                    Ok(Some(chunk)) => body.extend_from_slice(&chunk),
                    Ok(None) => {
                        total = Some(body.len());
                        break;
                    }
                    Err(e) => {
                        return Err(ToolError::Failed(format!(
                            "tool `{name}`: reading the answer of {origin} failed: {}",
                            describe(&e)
                        )));
                    }
                }
            }
            let text = cut(&body, total, limit);
            if status.is_success() {
                Ok(if text.is_empty() {
                    "(empty response)".into()
                } else {
                    text
                })
            } else {
                let body = if text.trim().is_empty() {
                    "(empty body)".to_string()
                } else {
                    text
                };
                Err(ToolError::Failed(format!(
                    "tool `{name}`: {origin} answered HTTP {status}; body:\n{body}"
                )))
            }
        };
        tokio::select! {
            r = tokio::time::timeout(self.config.timeout, exchange) => {
                r.unwrap_or(Err(ToolError::TimedOut(self.config.timeout)))
            }
            _ = ctx.cancel.cancelled() => Err(ToolError::Cancelled),
        }
    }
}

impl Tool for PluginTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn source(&self) -> String {
        format!("plugin {}", self.config.path.display())
    }

    fn call<'a>(
        &'a self,
        args: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            if ctx.cancel.is_cancelled() {
                return Err(ToolError::Cancelled);
            }
            match &self.config.action {
                PluginAction::Command { argv, env } => {
                    self.run_command(argv, env, &args, ctx).await
                }
                PluginAction::Http {
                    method,
                    url,
                    headers,
                    send_as,
                } => {
                    self.run_http(method, url, headers, *send_as, &args, ctx)
                        .await
                }
            }
        })
    }
}

/// `bytes` as text of at most `cap` bytes (on a char boundary), with a note
/// when it was cut; `total` is how many bytes there were in all, if known.
fn cut(bytes: &[u8], total: Option<usize>, cap: usize) -> String {
    let mut text = String::from_utf8_lossy(bytes).into_owned();
    if bytes.len() <= cap && text.len() <= cap && total.is_none_or(|t| t <= cap) {
        return text;
    }
    let mut end = cap.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    let total = match total {
        Some(t) => format!("{} bytes", t.max(bytes.len())),
        None => format!("more than {} bytes", bytes.len()),
    };
    text.push_str(&format!("\n[output cut: {total}, showing the first {end}]"));
    text
}

/// "stderr:" and the end of stderr, starting on a character boundary.
fn stderr_tail(err: &Captured) -> String {
    let start = err
        .kept
        .iter()
        .take(3)
        .take_while(|b| (**b & 0b1100_0000) == 0b1000_0000)
        .count();
    let text = String::from_utf8_lossy(&err.kept[start..]);
    let text = text.trim_end();
    if err.was_cut() {
        format!(
            "stderr (the last {} of {} bytes):\n…{text}",
            err.kept.len() - start,
            err.total
        )
    } else {
        format!("stderr:\n{text}")
    }
}

/// A reqwest error and its causes, without the URL (it may hold secrets).
fn describe(e: &reqwest::Error) -> String {
    use std::error::Error as _;
    let mut msg = e.to_string();
    if let Some(url) = e.url() {
        msg = msg.replace(&format!(" for url ({url})"), "");
        msg = msg.replace(url.as_str(), "<url>");
    }
    let mut source = e.source();
    while let Some(s) = source {
        let part = s.to_string();
        if !msg.contains(&part) {
            msg.push_str(": ");
            msg.push_str(&part);
        }
        source = s.source();
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_keeps_small_text_and_notes_the_total() {
        assert_eq!(cut(b"hello", Some(5), 10), "hello");
        let text = cut(b"hello world", Some(5000), 5);
        assert_eq!(text, "hello\n[output cut: 5000 bytes, showing the first 5]");
        let text = cut("héllo".as_bytes(), Some(6), 2);
        assert_eq!(text, "h\n[output cut: 6 bytes, showing the first 1]");
        let text = cut(b"abcdef", None, 4);
        assert_eq!(
            text,
            "abcd\n[output cut: more than 6 bytes, showing the first 4]"
        );
    }

    #[test]
    fn stderr_tail_starts_on_a_char_and_says_it_was_cut() {
        let mut kept = "é".as_bytes()[1..].to_vec();
        kept.extend_from_slice(b"the end\n");
        let err = Captured { kept, total: 5000 };
        assert_eq!(
            stderr_tail(&err),
            "stderr (the last 8 of 5000 bytes):\n…the end"
        );
        let err = Captured {
            kept: b"boom\n".to_vec(),
            total: 5,
        };
        assert_eq!(stderr_tail(&err), "stderr:\nboom");
    }
}
