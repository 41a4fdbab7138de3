//! Any bytes as `mcp.json`: decode, interpolation inside strings, bounds,
//! parse. Must return diagnostics, never panic or hang.
#![no_main]

use std::path::Path;

use aurad::config::bounds::decode;
use aurad::config::interp::{Escape, interpolate_with};
use aurad::config::mcp::parse_mcp;
use libfuzzer_sys::fuzz_target;

fn env(name: &str) -> Option<String> {
    (name == "V").then(|| "value \"quoted\" \\ [x]".to_string())
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = decode(data.to_vec(), Path::new("mcp.json")) else {
        return;
    };
    let _ = parse_mcp(Path::new("/p"), &text);
    if let Ok(text) = interpolate_with(&text, &env, Escape::JsonString) {
        let _ = parse_mcp(Path::new("/p"), &text);
    }
});
