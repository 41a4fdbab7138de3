//! The nesting pre-scan against the real parsers: whatever it lets through
//! with a limit nests at most one level more in what serde_yaml reads (a
//! flow collection used as a key is seen before its mapping), and exactly
//! no more in what serde_json reads. A crash here is text that hides real
//! depth from the scan.
#![no_main]

use aurad::config::bounds::{json_too_deep, yaml_too_deep};
use libfuzzer_sys::fuzz_target;

const LIMIT: usize = 6;

fn yaml_depth(value: &serde_yaml::Value) -> usize {
    match value {
        serde_yaml::Value::Sequence(items) => 1 + items.iter().map(yaml_depth).max().unwrap_or(0),
        serde_yaml::Value::Mapping(map) => {
            1 + map
                .iter()
                .map(|(k, v)| yaml_depth(k).max(yaml_depth(v)))
                .max()
                .unwrap_or(0)
        }
        serde_yaml::Value::Tagged(tagged) => yaml_depth(&tagged.value),
        _ => 0,
    }
}

fn json_depth(value: &serde_json::Value) -> usize {
    match value {
        serde_json::Value::Array(items) => 1 + items.iter().map(json_depth).max().unwrap_or(0),
        serde_json::Value::Object(map) => 1 + map.values().map(json_depth).max().unwrap_or(0),
        _ => 0,
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if yaml_too_deep(text, LIMIT).is_none()
        && let Ok(value) = serde_yaml::from_str::<serde_yaml::Value>(text)
    {
        let depth = yaml_depth(&value);
        assert!(depth <= LIMIT + 1, "YAML of depth {depth} passed the scan with limit {LIMIT}: {text:?}");
    }
    if json_too_deep(text, LIMIT).is_none()
        && let Ok(value) = serde_json::from_str::<serde_json::Value>(text)
    {
        let depth = json_depth(&value);
        assert!(depth <= LIMIT, "JSON of depth {depth} passed the scan with limit {LIMIT}: {text:?}");
    }
});
