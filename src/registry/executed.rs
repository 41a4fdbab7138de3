//! The files the daemon runs or reads as configuration outside the control
//! trees: a `tools.d` command's program and the files its arguments name,
//! an MCP server's command, the files its arguments name and its `envFile`.
//! A tool that could rewrite one of them would have its code run by the
//! daemon later (at another agent's call, at the server's restart), outside
//! the sandbox of the run that wrote it; the file tools refuse to write
//! them by identity (`tools::builtin::ProtectedPaths::executing`), however
//! they are named. Programs found on `PATH` (`python3`, `npx`) are the
//! system's and are left to the sandbox's write rules.
//! May depend on `config`.

use std::path::{Path, PathBuf};

use crate::config::Project;
use crate::config::mcp::McpTransport;
use crate::config::plugins::{PLUGIN_DIR, PluginAction};

/// The files of `project`'s plugins and MCP servers, absolute; only those
/// that exist as files now.
pub fn executed_files(project: &Project) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let plugin_dir = absolute(&project.root.join(PLUGIN_DIR));
    for plugin in &project.plugins {
        if let PluginAction::Command { argv, .. } = &plugin.action {
            add_command(&mut files, &plugin_dir, argv);
        }
    }
    for server in &project.mcp_servers {
        if let McpTransport::Stdio {
            command,
            args,
            cwd,
            env_file,
            ..
        } = &server.transport
        {
            let cwd = absolute(cwd);
            let argv: Vec<String> = std::iter::once(command.clone())
                .chain(args.iter().cloned())
                .collect();
            add_command(&mut files, &cwd, &argv);
            files.extend(env_file.iter().map(|path| absolute(path)));
        }
    }
    files.retain(|path| path.is_file());
    files.sort();
    files.dedup();
    files
}

/// `argv`'s program when it is a path, and each argument (or the value of
/// a `--name=value` argument) that names a file, relative ones read in
/// `dir` as the child reads them.
fn add_command(files: &mut Vec<PathBuf>, dir: &Path, argv: &[String]) {
    let Some((program, args)) = argv.split_first() else {
        return;
    };
    if program.contains('/') {
        files.push(dir.join(program));
    }
    for arg in args {
        let value = arg.split_once('=').map(|(_, value)| value);
        for candidate in std::iter::once(arg.as_str()).chain(value) {
            if !candidate.is_empty() && !candidate.starts_with('-') {
                let path = dir.join(candidate);
                if path.is_file() {
                    files.push(path);
                }
            }
        }
    }
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_scripts_and_file_arguments_are_found_relative_to_where_they_run() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("scripts")).unwrap();
        std::fs::write(dir.path().join("scripts/x.py"), "").unwrap();
        std::fs::write(dir.path().join("conf.toml"), "").unwrap();
        let mut files = Vec::new();
        let argv = [
            "python3",
            "scripts/x.py",
            "--config=conf.toml",
            "-v",
            "missing.py",
        ]
        .map(String::from);
        add_command(&mut files, dir.path(), &argv);
        assert_eq!(
            files,
            vec![
                dir.path().join("scripts/x.py"),
                dir.path().join("conf.toml")
            ]
        );
        let mut files = Vec::new();
        add_command(&mut files, dir.path(), &["./scripts/x.py".to_string()]);
        assert_eq!(files, vec![dir.path().join("./scripts/x.py")]);
    }
}
