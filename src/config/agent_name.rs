//! An agent's name: the stem of its file in agents/, `[a-z0-9][a-z0-9_-]*`.
//! A leaf: every part of the config that names agents checks names here.

/// Is `name` a valid agent name (`[a-z0-9][a-z0-9_-]*`)?
pub fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(valid_name("hello"));
        assert!(valid_name("a1_b-c"));
        assert!(!valid_name("Hello"));
        assert!(!valid_name("-x"));
        assert!(!valid_name(""));
    }
}
