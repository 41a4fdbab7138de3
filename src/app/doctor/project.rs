//! The doctor's checks of the project's files: that they load (as `aurad
//! validate` loads them), the keys the agents' providers need, the
//! commands of the stdio MCP servers, and the time zones and clock the
//! schedules run on. Depends on `config`, `registry`, `tools` and
//! `app::inspect`.

use std::collections::BTreeMap;
use std::path::Path;

use chrono::{DateTime, Utc};

use super::{Check, CheckName};
use crate::app::inspect;
use crate::config::mcp::McpTransport;
use crate::config::{Diagnostic, EnvLookup, Project};

/// How many diagnostics the project check's finding names.
const SHOWN: usize = 5;

/// The project's files load: the errors at their file:line:column, and
/// what the project holds.
pub fn files(root: &Path) -> Check {
    if !root.join("agents").is_dir() && !root.join("aurad.yaml").is_file() {
        return Check::warn(
            CheckName::Project,
            format!(
                "{} holds no aurad project (no agents/, no aurad.yaml)",
                root.display()
            ),
            "aurad init . (or `aurad init DIR` and `cd DIR`)",
        );
    }
    let found = inspect::validate(root);
    let mut diagnostics: Vec<&Diagnostic> = found.diagnostics.iter().collect();
    diagnostics.sort_by(|a, b| (&a.path, a.line, a.column).cmp(&(&b.path, b.line, b.column)));
    let errors: Vec<&Diagnostic> = diagnostics
        .iter()
        .copied()
        .filter(|d| d.is_error())
        .collect();
    let warnings: Vec<&Diagnostic> = diagnostics
        .iter()
        .copied()
        .filter(|d| !d.is_error())
        .collect();
    let counts = format!(
        "{} agent(s), {} skill(s), {} tool(s) in tools.d, {} MCP server(s), {} channel(s)",
        found.agents, found.skills, found.plugins, found.mcp_servers, found.channels
    );
    let listed = |list: &[&Diagnostic]| {
        let mut text = list
            .iter()
            .take(SHOWN)
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join("; ");
        if list.len() > SHOWN {
            text.push_str(&format!("; and {} more", list.len() - SHOWN));
        }
        text
    };
    if !errors.is_empty() {
        return Check::error(
            CheckName::Project,
            format!("{} error(s): {}", errors.len(), listed(&errors)),
            "fix each place named, then check with `aurad validate`",
        );
    }
    if found.agents == 0 {
        return Check::warn(
            CheckName::Project,
            format!("no agents: {counts}"),
            "aurad init . writes a first agent (agents/hello.yaml), or add agents/NAME.yaml",
        );
    }
    if !warnings.is_empty() {
        return Check::warn(
            CheckName::Project,
            format!(
                "{counts}; {} warning(s): {}",
                warnings.len(),
                listed(&warnings)
            ),
            "see each place named (`aurad validate` lists them all)",
        );
    }
    Check::ok(CheckName::Project, counts)
}

/// For each key variable the agents' models (and their fallbacks) need,
/// whether it is set. Only names are shown, never a value.
pub fn keys(project: &Project, env: EnvLookup) -> Check {
    if project.agents.is_empty() {
        return Check::skip(CheckName::Keys, "no agents");
    }
    // variable -> (providers, agents)
    let mut needed: BTreeMap<&str, (Vec<&str>, Vec<&str>)> = BTreeMap::new();
    for agent in project.agents.values().filter(|a| a.steps.is_none()) {
        let chain =
            std::iter::once(&agent.model).chain(agent.fallback.iter().flat_map(|f| &f.models));
        for model in chain {
            let Some(var) = crate::registry::key_variable(model, &project.settings, env) else {
                continue;
            };
            let (providers, agents) = needed.entry(var).or_default();
            if let Some((provider, _)) = model.split_once('/')
                && !providers.contains(&provider)
            {
                providers.push(provider);
            }
            if !agents.contains(&agent.name.as_str()) {
                agents.push(&agent.name);
            }
        }
    }
    if needed.is_empty() {
        return Check::ok(
            CheckName::Keys,
            "no agent needs an API key (models `test` or keyless providers)",
        );
    }
    let (set, missing): (Vec<_>, Vec<_>) = needed
        .iter()
        .partition(|(var, _)| env(var).is_some_and(|v| !v.is_empty()));
    if missing.is_empty() {
        let names: Vec<&str> = set.iter().map(|(var, _)| **var).collect();
        return Check::ok(CheckName::Keys, format!("set: {}", names.join(", ")));
    }
    let finding = missing
        .iter()
        .map(|(var, (providers, agents))| {
            format!(
                "{var} is not set: needed by {} (provider {})",
                agents.join(", "),
                providers.join(", ")
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    let exports = missing
        .iter()
        .map(|(var, _)| format!("export {var}=<your key>"))
        .collect::<Vec<_>>()
        .join("; ");
    let first_agent = missing
        .first()
        .and_then(|(_, (_, agents))| agents.first())
        .copied()
        .unwrap_or("NAME");
    Check::warn(
        CheckName::Keys,
        finding,
        format!("{exports} (or try offline: aurad run {first_agent} --model test)"),
    )
}

/// Each stdio MCP server's command is found: on `PATH` for a bare name,
/// as a file for a path.
pub fn mcp(project: &Project, env: EnvLookup) -> Check {
    let stdio: Vec<_> = project
        .mcp_servers
        .iter()
        .filter_map(|s| match &s.transport {
            McpTransport::Stdio { command, .. } => Some((s, command)),
            McpTransport::Http { .. } => None,
        })
        .collect();
    let http = project.mcp_servers.len() - stdio.len();
    if project.mcp_servers.is_empty() {
        return Check::ok(CheckName::Mcp, "no MCP servers");
    }
    let search_path = env("PATH").unwrap_or_default();
    let missing: Vec<String> = stdio
        .iter()
        .filter(|(_, command)| !command_found(command, &search_path))
        .map(|(server, command)| {
            format!(
                "server `{}` ({}:{}:{}): command `{command}` not found{}",
                server.name,
                server.source.display(),
                server.line,
                server.column,
                if command.contains('/') {
                    ""
                } else {
                    " on PATH"
                }
            )
        })
        .collect();
    if missing.is_empty() {
        return Check::ok(
            CheckName::Mcp,
            format!(
                "{} stdio server command(s) found, {http} HTTP server(s)",
                stdio.len()
            ),
        );
    }
    Check::warn(
        CheckName::Mcp,
        missing.join("; "),
        "install the command, put its folder on PATH, or write its full path in `command`",
    )
}

/// Whether `command` names an executable: a path (already resolved
/// against the project root) that exists, or a bare name found in a
/// directory of `search_path`.
fn command_found(command: &str, search_path: &str) -> bool {
    use crate::tools::program_path::is_executable_file;
    if command.contains('/') {
        return is_executable_file(Path::new(command));
    }
    !command.is_empty()
        && std::env::split_paths(search_path).any(|dir| is_executable_file(&dir.join(command)))
}

/// The schedules' time zones, `TZ`, and a clock not behind the newest
/// stored run.
pub fn clock(
    project: &Project,
    diagnostics: &[Diagnostic],
    env: EnvLookup,
    newest_run: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Check {
    let unknown: Vec<String> = diagnostics
        .iter()
        .filter(|d| d.message.contains("unknown time zone"))
        .map(Diagnostic::to_string)
        .collect();
    if !unknown.is_empty() {
        return Check::error(
            CheckName::Clock,
            unknown.join("; "),
            "write an IANA zone name (e.g. Europe/Paris) in the schedule's `timezone`",
        );
    }
    let tz = env("TZ").filter(|v| !v.is_empty());
    let mut findings = Vec::new();
    let mut fixes = Vec::new();
    if let Some(tz) = &tz
        && !tz_valid(tz)
    {
        findings.push(format!(
            "TZ={tz:?} is not a known zone: local times (logs, `aurad runs`) fall back to UTC"
        ));
        fixes.push("export TZ=Europe/Paris (an IANA name), or unset TZ");
    }
    if let Some(newest) = newest_run
        && newest > now + chrono::Duration::minutes(1)
    {
        findings.push(format!(
            "the clock ({}) is behind the newest stored run ({}): it went back; schedules may fire again",
            now.format("%Y-%m-%d %H:%M:%S UTC"),
            newest.format("%Y-%m-%d %H:%M:%S UTC")
        ));
        fixes.push("set the clock right and keep it synchronised: timedatectl set-ntp true");
    }
    if !findings.is_empty() {
        return Check::warn(CheckName::Clock, findings.join("; "), fixes.join("; "));
    }
    let mut zones: Vec<&str> = project
        .agents
        .values()
        .flat_map(|a| &a.triggers.schedules)
        .map(|s| s.cron.timezone().name())
        .collect();
    zones.sort_unstable();
    zones.dedup();
    let schedules = match zones.len() {
        0 => "no schedules".to_string(),
        _ => format!("schedules in {} (zone data built in)", zones.join(", ")),
    };
    let tz_text = tz.map_or_else(|| "TZ unset".to_string(), |tz| format!("TZ={tz}"));
    Check::ok(
        CheckName::Clock,
        format!(
            "{schedules}; {tz_text}; clock {}",
            now.format("%Y-%m-%d %H:%M:%S UTC")
        ),
    )
}

/// Whether `TZ` names a zone: an IANA name (`:` first allowed), a
/// zoneinfo file, or a POSIX rule such as `UTC0` or `CET-1CEST`.
fn tz_valid(tz: &str) -> bool {
    let name = tz.strip_prefix(':').unwrap_or(tz);
    if name.starts_with('/') {
        return Path::new(name).is_file();
    }
    if name.parse::<chrono_tz::Tz>().is_ok()
        || Path::new("/usr/share/zoneinfo").join(name).is_file()
    {
        return true;
    }
    // A POSIX rule: a name of three or more letters, then an offset.
    let letters = name.chars().take_while(char::is_ascii_alphabetic).count();
    letters >= 3
        && name[letters..].starts_with(|c: char| c.is_ascii_digit() || c == '-' || c == '+')
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a test")]

    use chrono::{Duration, Utc};

    use super::{clock, command_found, tz_valid};
    use crate::app::doctor::Status;

    #[test]
    fn a_clock_behind_the_newest_run_and_a_bad_tz_are_both_warned() {
        let root = tempfile::tempdir().unwrap();
        let project = crate::config::load(root.path(), &|_| None).project;
        let now = Utc::now();
        let fine = clock(
            &project,
            &[],
            &|_| None,
            Some(now - Duration::hours(1)),
            now,
        );
        assert_eq!(fine.status, Status::Ok, "{fine:?}");
        let env = |name: &str| (name == "TZ").then(|| "Nowhere/Land".to_string());
        let both = clock(&project, &[], &env, Some(now + Duration::hours(2)), now);
        assert_eq!(both.status, Status::Warn, "{both:?}");
        assert!(
            both.finding
                .contains("TZ=\"Nowhere/Land\" is not a known zone"),
            "{both:?}"
        );
        assert!(both.finding.contains("it went back"), "{both:?}");
        assert!(both.fix.unwrap().contains("timedatectl set-ntp true"));
    }

    #[test]
    fn commands_are_found_on_the_path_or_as_files() {
        assert!(command_found("sh", "/nonexistent:/bin:/usr/bin"));
        assert!(!command_found("sh", "/nonexistent"));
        assert!(!command_found("no-such-command-4d1f", "/bin:/usr/bin"));
        assert!(command_found("/bin/sh", ""));
        assert!(!command_found("/no/such/file", ""));
    }

    #[test]
    fn time_zones_by_name_file_or_rule() {
        for good in ["Europe/Paris", ":UTC", "UTC0", "CET-1CEST", "/bin/sh"] {
            assert!(tz_valid(good), "{good}");
        }
        for bad in ["Mars/Olympus", "x", "Europe/Pariss"] {
            assert!(!tz_valid(bad), "{bad}");
        }
    }
}
