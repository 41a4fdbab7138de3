//! The `bash` tool: runs `bash -c COMMAND` in the project root, in a process
//! group of its own, capturing stdout and stderr with bounded buffers. When
//! the command ends, times out or the run is cancelled, the whole group is
//! killed, so background processes (`sleep 100 &`) can neither outlive the
//! call nor keep it waiting on their open pipes. The process handling lives
//! in `tools::process`; this file holds the tool's schema and how its output
//! is rendered for the model.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::{Value, json};

use super::{optional_u64, required_str};
use crate::tools::process::{self, Captured, Ended, Keep, ProcessError, ProcessSpec};
use crate::tools::sandbox::{Sandbox, SandboxMode};
use crate::tools::{Tool, ToolContext, ToolError, cap_output};
use crate::types::ToolSpec;

const DEFAULT_TIMEOUT_SECS: u64 = 60;
const MAX_TIMEOUT_SECS: u64 = 600;

/// stdout, then stderr under a `[stderr]` line, within about `cap` bytes;
/// when both do not fit, stderr keeps up to half.
fn render(out: &Captured, err: &Captured, cap: usize) -> String {
    let out_text = String::from_utf8_lossy(&out.kept).into_owned();
    let err_text = if err.kept.is_empty() {
        String::new()
    } else {
        format!("[stderr]\n{}", String::from_utf8_lossy(&err.kept))
    };
    let sep = if out_text.is_empty() || err_text.is_empty() || out_text.ends_with('\n') {
        ""
    } else {
        "\n"
    };
    let mut text = if out_text.len() + sep.len() + err_text.len() <= cap {
        format!("{out_text}{sep}{err_text}")
    } else if err_text.is_empty() {
        cap_output(out_text, cap)
    } else {
        let err_budget = err_text
            .len()
            .min(cap / 2)
            .max(cap.saturating_sub(out_text.len()));
        let out_part = cap_output(out_text, cap.saturating_sub(err_budget));
        let sep = if out_part.is_empty() { "" } else { "\n" };
        format!("{out_part}{sep}{}", cap_output(err_text, err_budget))
    };
    if out.total > out.kept.len() || err.total > err.kept.len() {
        text.push_str(&format!(
            "\n[the command wrote {} bytes to stdout and {} bytes to stderr in all]",
            out.total, err.total
        ));
    }
    if text.is_empty() {
        text.push_str("(no output)");
    }
    text
}

fn describe_failure(status: ExitStatus) -> Option<String> {
    if status.success() {
        None
    } else if let Some(code) = status.code() {
        Some(format!("the command exited with code {code}"))
    } else if let Some(sig) = status.signal() {
        Some(format!("the command was killed by signal {sig}"))
    } else {
        Some(format!("the command failed: {status}"))
    }
}

async fn run(command: &str, timeout: Duration, ctx: &ToolContext) -> Result<String, ToolError> {
    // One byte over the cap tells `render` the output was cut.
    let keep = Keep::Head(ctx.output_cap.saturating_add(1));
    let spec = ProcessSpec {
        args: vec!["-c".into(), command.into()],
        env: vec![
            ("PAGER".into(), "cat".into()),
            ("GIT_PAGER".into(), "cat".into()),
            ("GIT_TERMINAL_PROMPT".into(), "0".into()),
        ],
        keep_stdout: keep,
        keep_stderr: keep,
        timeout,
        cancel: ctx.cancel.clone(),
        sandbox: ctx.sandbox.clone(),
        ..ProcessSpec::new("bash", &ctx.root)
    };
    let output = process::run(spec).await.map_err(|e| match e {
        ProcessError::Spawn(e) => ToolError::Failed(format!(
            "could not start bash in {}: {e}",
            ctx.root.display()
        )),
        ProcessError::Wait(e) => ToolError::Failed(format!("could not wait for bash: {e}")),
        ProcessError::Sandbox(why) => ToolError::Failed(format!("bash was not run: {why}")),
    })?;
    let status = match output.ended {
        Ended::Exited(status) => status,
        Ended::TimedOut => return Err(ToolError::TimedOut(timeout)),
        Ended::Cancelled => return Err(ToolError::Cancelled),
    };
    let text = render(&output.stdout, &output.stderr, ctx.output_cap);
    match describe_failure(status) {
        None => Ok(text),
        Some(why) => {
            let note = sandbox_note(&ctx.sandbox, &text);
            Err(ToolError::Failed(format!("{why}. Output:\n{text}{note}")))
        }
    }
}

/// When a sandboxed command was refused a write, what the model may write
/// instead (empty otherwise).
fn sandbox_note(sandbox: &Sandbox, output: &str) -> String {
    if !output.contains("Permission denied") && !output.contains("Read-only file system") {
        return String::new();
    }
    match (sandbox.mode(), sandbox.scratch()) {
        (SandboxMode::ReadOnlyProject, _) => "\n[sandbox read-only-project: nothing under the \
            project root can be written; paths outside it can]"
            .to_string(),
        (SandboxMode::Workdir, Some(dir)) => format!(
            "\n[sandbox workdir: only {} ($AURAD_WORKDIR) can be written]",
            dir.display()
        ),
        _ => String::new(),
    }
}

/// The `bash` tool.
#[derive(Debug, Clone)]
pub struct BashTool {
    spec: ToolSpec,
}

impl BashTool {
    pub fn new() -> Self {
        let spec = ToolSpec {
            name: "bash".into(),
            description: "Runs a bash command in the project root and returns its stdout and stderr. \
                A non-zero exit code is an error; background processes are killed when the command ends."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "command": {
                        "type": "string",
                        "description": "The bash command line to run (stdin is empty).",
                        "examples": ["echo hello from aurad"]
                    },
                    "timeout_secs": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": MAX_TIMEOUT_SECS,
                        "description": "Seconds before the command is killed (default 60, at most 600).",
                        "examples": [DEFAULT_TIMEOUT_SECS]
                    }
                },
                "required": ["command"],
                "additionalProperties": false
            }),
        };
        BashTool { spec }
    }
}

impl Default for BashTool {
    fn default() -> Self {
        Self::new()
    }
}

impl Tool for BashTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call<'a>(
        &'a self,
        args: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            let command = required_str(&args, "command")?;
            let secs = optional_u64(&args, "timeout_secs")?.unwrap_or(DEFAULT_TIMEOUT_SECS);
            if !(1..=MAX_TIMEOUT_SECS).contains(&secs) {
                return Err(ToolError::InvalidArguments(format!(
                    "`timeout_secs` must be between 1 and {MAX_TIMEOUT_SECS}, got {secs}"
                )));
            }
            run(command, Duration::from_secs(secs), ctx).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tempfile::TempDir;
    use tokio_util::sync::CancellationToken;

    fn setup(cap: usize) -> (TempDir, ToolContext) {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ToolContext {
            root: dir.path().to_path_buf(),
            cancel: CancellationToken::new(),
            output_cap: cap,
            sandbox: Default::default(),
        };
        (dir, ctx)
    }

    /// Runs `args` through the tool, failing the test if it hangs.
    async fn bash(args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let tool = BashTool::new();
        tokio::time::timeout(Duration::from_secs(10), tool.call(args, ctx))
            .await
            .expect("the bash tool call hung")
    }

    #[tokio::test]
    async fn captures_stdout_stderr_and_runs_in_root() {
        let (dir, ctx) = setup(1000);
        std::fs::write(dir.path().join("marker.txt"), "here").unwrap();
        let out = bash(json!({"command": "echo hello from aurad"}), &ctx).await;
        assert_eq!(out.unwrap(), "hello from aurad\n");
        let out = bash(json!({"command": "cat marker.txt; echo oops >&2"}), &ctx).await;
        assert_eq!(out.unwrap(), "here\n[stderr]\noops\n");
        assert_eq!(
            bash(json!({"command": "true"}), &ctx).await.unwrap(),
            "(no output)"
        );
    }

    #[tokio::test]
    async fn non_zero_exit_is_an_error_with_code_and_output() {
        let (_dir, ctx) = setup(1000);
        let err = bash(
            json!({"command": "echo partial; echo bad >&2; exit 3"}),
            &ctx,
        )
        .await;
        let Err(ToolError::Failed(msg)) = err else {
            panic!("expected a failure, got {err:?}");
        };
        assert!(msg.contains("exited with code 3"), "{msg}");
        assert!(
            msg.contains("partial") && msg.contains("[stderr]\nbad"),
            "{msg}"
        );
    }

    #[tokio::test]
    async fn timeout_kills_the_whole_group() {
        let (_dir, ctx) = setup(1000);
        let r = bash(
            json!({"command": "sleep 30 & sleep 30", "timeout_secs": 1}),
            &ctx,
        )
        .await;
        assert_eq!(r, Err(ToolError::TimedOut(Duration::from_secs(1))));
    }

    #[tokio::test]
    async fn background_processes_do_not_keep_the_call_waiting() {
        let (_dir, ctx) = setup(1000);
        let r = bash(json!({"command": "sleep 30 & echo started"}), &ctx).await;
        assert_eq!(r.unwrap(), "started\n");
    }

    #[tokio::test]
    async fn cancel_stops_the_command() {
        let (_dir, ctx) = setup(1000);
        let tool = BashTool::new();
        // The call spawns bash on its first poll, then the token is cancelled.
        let call = tool.call(json!({"command": "sleep 30 & sleep 30"}), &ctx);
        let (r, ()) = tokio::time::timeout(Duration::from_secs(10), async {
            tokio::join!(call, async { ctx.cancel.cancel() })
        })
        .await
        .expect("cancel did not stop the call");
        assert_eq!(r, Err(ToolError::Cancelled));
    }

    #[tokio::test]
    async fn big_output_is_drained_and_capped() {
        let (_dir, ctx) = setup(1000);
        let cmd = "head -c 5000000 /dev/zero | tr '\\0' a; echo done >&2";
        let out = bash(json!({"command": cmd}), &ctx).await.unwrap();
        assert!(out.contains("[output cut:"), "{out}");
        assert!(out.contains("[stderr]\ndone"), "{out}");
        assert!(out.contains("5000000 bytes to stdout"), "{out}");
        assert!(out.len() < 1300, "{} bytes", out.len());
    }

    #[tokio::test]
    async fn bad_timeouts_are_refused() {
        let (_dir, ctx) = setup(1000);
        for secs in [0, 601] {
            let r = bash(json!({"command": "true", "timeout_secs": secs}), &ctx).await;
            assert!(
                matches!(r, Err(ToolError::InvalidArguments(_))),
                "{secs}: {r:?}"
            );
        }
    }

    #[test]
    fn render_splits_room_between_streams() {
        let out = Captured {
            kept: vec![b'o'; 2000],
            total: 2000,
        };
        let err = Captured {
            kept: vec![b'e'; 2000],
            total: 2000,
        };
        let text = render(&out, &err, 1000);
        assert!(text.contains("[stderr]\neee"), "{text}");
        assert!(text.len() < 1200, "{}", text.len());
    }
}
