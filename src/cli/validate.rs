//! `aurad validate`: load everything, print every problem as
//! `path:line:column: message`, exit 2 on any error.

use std::path::Path;

use super::{EXIT_CONFIG, EXIT_OK, print_diagnostics};
use crate::config;
use crate::registry;

pub fn run(root: &Path) -> i32 {
    let loaded = config::load(root, &config::process_env);
    let (snapshot, diagnostics) = registry::build(loaded, &config::process_env);
    print_diagnostics(&diagnostics);
    let errors = diagnostics.iter().filter(|d| d.is_error()).count();
    let warnings = diagnostics.len() - errors;
    let agents = snapshot.project.agents.len();
    // What each schedule means, so a wrong expression shows before it fires.
    let now = chrono::Utc::now();
    for agent in snapshot.project.agents.values() {
        for (i, schedule) in agent.triggers.schedules.iter().enumerate() {
            let next = schedule
                .cron
                .next_after(now)
                .map(|t| {
                    t.with_timezone(&schedule.cron.timezone())
                        .format("%Y-%m-%d %H:%M:%S %Z")
                        .to_string()
                })
                .unwrap_or_else(|| "never".into());
            println!(
                "{} schedule[{i}] `{}`: {}; next fire {next}",
                agent.name,
                schedule.cron.expression(),
                schedule.cron.describe()
            );
        }
    }
    if errors > 0 {
        eprintln!("{errors} error(s), {warnings} warning(s); {agents} agent(s) valid");
        EXIT_CONFIG
    } else {
        eprintln!("ok: {agents} agent(s), {warnings} warning(s)");
        EXIT_OK
    }
}
