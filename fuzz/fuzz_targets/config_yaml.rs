//! Any bytes as each YAML config file kind, through the loader's steps:
//! decode (BOM, CRLF, UTF-8), `${VAR}` interpolation, bounds, parse. Must
//! return diagnostics, never panic or hang.
#![no_main]

use std::path::Path;

use aurad::config::bounds::decode;
use aurad::config::interp::{Escape, interpolate_with};
use aurad::config::{agent, plugins, settings};
use aurad::skills::parse::parse_skill;
use libfuzzer_sys::fuzz_target;

fn env(name: &str) -> Option<String> {
    (name == "V").then(|| "value [with] {brackets} 'and' \"quotes\"".to_string())
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = decode(data.to_vec(), Path::new("f")) else {
        return;
    };
    let _ = parse_skill("s", Path::new("skills/s/SKILL.md"), &text);
    let Ok(text) = interpolate_with(&text, &env, Escape::Yaml) else {
        return;
    };
    let _ = agent::parse_agent("a", Path::new("agents/a.yaml"), &text, String::new());
    let _ = settings::parse_settings(Path::new("/p"), Path::new("aurad.yaml"), &text);
    let _ = plugins::parse_plugin("t", Path::new("tools.d/t.yaml"), &text);
});
