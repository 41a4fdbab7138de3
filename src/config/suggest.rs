//! "Did you mean": the names closest to a mistyped one (an agent's name, a
//! field of a file), by edit distance (strsim's Damerau-Levenshtein, the
//! crate clap suggests commands with), and the unknown-field message of
//! serde rewritten to offer them. Depends on nothing of the crate.

/// The candidates close enough to `word` to be what was meant, closest
/// first (at most 3): at most a third of `word`'s characters away (at least
/// one), or `word` is the start of it. Case is ignored.
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let lower = word.to_lowercase();
    let limit = (lower.chars().count() / 3).max(1);
    let mut scored: Vec<(usize, &str)> = candidates
        .into_iter()
        .filter(|c| !c.is_empty() && *c != word)
        .filter_map(|c| {
            let candidate = c.to_lowercase();
            let distance = strsim::damerau_levenshtein(&lower, &candidate);
            let starts = lower.chars().count() >= 3 && candidate.starts_with(&lower);
            (distance <= limit || starts).then_some((distance, c))
        })
        .collect();
    scored.sort();
    scored.dedup();
    scored.into_iter().take(3).map(|(_, c)| c).collect()
}

/// `did you mean `a`?` (or `` `a` or `b` ``, `` `a`, `b` or `c` ``) for the
/// candidates close to `word`; `None` when none is.
pub fn did_you_mean<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<String> {
    let close = closest(word, candidates);
    let quoted: Vec<String> = close.iter().map(|c| format!("`{c}`")).collect();
    match quoted.as_slice() {
        [] => None,
        [one] => Some(format!("did you mean {one}?")),
        [init @ .., last] => Some(format!("did you mean {} or {last}?", init.join(", "))),
    }
}

/// serde's `unknown field `x`, expected one of `a`, `b`, ...` (or
/// `expected `a` or `b``) with a close field: `unknown field `x`: did you
/// mean `a`?`, the long list left out. Any other message, or one whose
/// field is near none, is returned as it is (the full list helps then).
pub fn unknown_field(message: &str) -> String {
    const MARK: &str = "unknown field `";
    let Some(start) = message.find(MARK) else {
        return message.to_string();
    };
    let after = &message[start + MARK.len()..];
    let Some(end) = after.find('`') else {
        return message.to_string();
    };
    let field = &after[..end];
    let rest = &after[end + 1..];
    let Some(expected) = rest.find("expected") else {
        return message.to_string();
    };
    // The backquoted names after `expected`.
    let names: Vec<&str> = rest[expected..].split('`').skip(1).step_by(2).collect();
    match did_you_mean(field, names) {
        Some(hint) => format!("{}{MARK}{field}`: {hint}", &message[..start]),
        None => message.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::{closest, did_you_mean, unknown_field};

    #[test]
    fn close_names_are_offered_far_ones_not() {
        let agents = ["hello", "helper", "digest"];
        assert_eq!(closest("helo", agents), vec!["hello"]);
        assert_eq!(closest("Hello", agents), vec!["hello"]);
        assert_eq!(closest("hel", agents), vec!["hello", "helper"]);
        assert_eq!(closest("zzz", agents), Vec::<&str>::new());
        assert_eq!(
            did_you_mean("helpr", agents).as_deref(),
            Some("did you mean `helper`?")
        );
        assert_eq!(did_you_mean("xyzzy", agents), None);
    }

    #[test]
    fn an_unknown_field_near_a_known_one_is_named_alone() {
        let serde = "unknown field `promt`, expected one of `model`, `prompt`, `system`, `tools`";
        assert_eq!(
            unknown_field(serde),
            "unknown field `promt`: did you mean `prompt`?"
        );
        let nested = "http: unknown field `verb`, expected `url` or `method`";
        assert_eq!(unknown_field(nested), nested);
        let two = "unknown field `toools`, expected `tool` or `tools`";
        assert_eq!(
            unknown_field(two),
            "unknown field `toools`: did you mean `tools` or `tool`?"
        );
        assert_eq!(
            unknown_field("missing field `model`"),
            "missing field `model`"
        );
    }
}
