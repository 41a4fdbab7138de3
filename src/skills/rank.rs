//! Ranks skills against a run's input with BM25F: each skill is a document
//! of three fields (name, description, body), each field's term frequency
//! normalised by the field's length against its average over the skills
//! (b = 0.75) and weighted (name 3, description 2, body 0.5) before the usual
//! saturation (k1 = 1.2) and inverse document frequency. Words come from the
//! shared tokenizer ([`crate::text::tokenize`]: ASCII words, and each CJK
//! ideograph on its own, so Chinese matches without spaces), lose English
//! stop words ([`is_stop_word`]) and are reduced to their Snowball stem
//! (`failing` and `fails` both match `fail`), except words Snowball would
//! turn into another word (`accessibility` is not `access`: [`stem`]).
//!
//! Two rules keep unrelated input from injecting anything: a skill counts
//! only when an input word is in its name or description (words found only
//! in a body are supporting evidence, never enough alone), and only with a
//! score of at least [`MIN_SCORE`]. The inverse document frequency is
//! computed as if there were at least [`MIN_DOCUMENTS`] skills, so that in a
//! project of a few skills a word found in one of them still counts as
//! distinctive; with more skills it is plain BM25.
//!
//! Pure functions; depends on `text`, `stop-words` (NLTK's English list) and
//! `rust-stemmers`.

use std::collections::{HashMap, HashSet};

use rust_stemmers::{Algorithm, Stemmer};

use super::Skill;
use crate::text::tokenize;

/// BM25 term-frequency saturation.
pub const K1: f64 = 1.2;
/// BM25 length normalisation (0: none, 1: full).
pub const B: f64 = 0.75;
/// How much a word in the skill's name counts, relative to the body's.
pub const NAME_WEIGHT: f64 = 3.0;
/// How much a word in the description counts.
pub const DESCRIPTION_WEIGHT: f64 = 2.0;
/// How much a word in the body counts.
pub const BODY_WEIGHT: f64 = 0.5;
/// The lowest score that activates a skill.
pub const MIN_SCORE: f64 = 1.5;
/// The inverse document frequency treats a project as having at least this
/// many skills.
pub const MIN_DOCUMENTS: usize = 16;

/// Words of a request that say nothing about which skill fits, beyond NLTK's
/// English list: greetings and politeness.
const EXTRA_ENGLISH_STOP_WORDS: &[&str] = &[
    "please", "hi", "hello", "hey", "thanks", "thank", "ok", "okay", "yes", "yeah", "could",
    "would", "might", "must", "shall", "may", "let", "lets", "also",
];

/// The commonest Chinese particles and pronouns (single ideographs, as the
/// tokenizer yields them), which would otherwise match every Chinese skill.
const CHINESE_STOP_WORDS: &[&str] = &["的", "了", "是", "我", "你", "吗", "呢", "吧", "请"];

/// Is `token` (lowercase, as the tokenizer yields it) a stop word? NLTK's
/// English list is written with apostrophes (`don't`); the tokenizer splits
/// there, and the parts (`don`, `t`) are in the list too.
pub fn is_stop_word(token: &str) -> bool {
    english_stop_words().contains(token)
        || EXTRA_ENGLISH_STOP_WORDS.contains(&token)
        || CHINESE_STOP_WORDS.contains(&token)
}

fn english_stop_words() -> &'static HashSet<&'static str> {
    static WORDS: std::sync::OnceLock<HashSet<&'static str>> = std::sync::OnceLock::new();
    WORDS.get_or_init(|| stop_words::get("en").iter().copied().collect())
}

/// The terms of `text`: tokens without stop words, stemmed, repeats kept.
pub fn terms(text: &str) -> Vec<String> {
    let stemmer = Stemmer::create(Algorithm::English);
    tokenize(text)
        .into_iter()
        .filter(|t| !is_stop_word(t))
        .map(|t| stem(&stemmer, &t))
        .collect()
}

/// Endings of words that Snowball cuts back to another word:
/// `accessibility` to `access`, `organization` to `organ`,
/// `availability` to `avail`. A request for accessibility would then match
/// every skill that mentions access.
const DERIVED_ENDINGS: [&str; 6] = [
    "ibility", "ability", "ization", "isation", "ational", "ality",
];

/// `word`'s term: its Snowball stem, except that a word with one of the
/// [`DERIVED_ENDINGS`] keeps its whole form, less a plural ending
/// (`accessibilities` and `accessibility` are one term, and not `access`).
fn stem(stemmer: &Stemmer, word: &str) -> String {
    let singular = word
        .strip_suffix("ies")
        .map(|base| format!("{base}y"))
        .or_else(|| word.strip_suffix('s').map(str::to_string))
        .filter(|base| DERIVED_ENDINGS.iter().any(|e| base.ends_with(e)));
    if let Some(singular) = singular {
        return singular;
    }
    if DERIVED_ENDINGS.iter().any(|e| word.ends_with(e)) {
        return word.to_string();
    }
    stemmer.stem(word).into_owned()
}

/// The input's distinct terms, in order of first appearance.
pub fn keywords(input: &str) -> Vec<String> {
    let mut seen = HashSet::new();
    terms(input)
        .into_iter()
        .filter(|t| seen.insert(t.clone()))
        .collect()
}

/// One field of one skill: term counts and length in terms.
#[derive(Debug, Default)]
struct Field {
    counts: HashMap<String, usize>,
    len: usize,
}

impl Field {
    fn new(text: &str) -> Field {
        let mut field = Field::default();
        for term in terms(text) {
            *field.counts.entry(term).or_default() += 1;
            field.len += 1;
        }
        field
    }
}

/// The terms of a skill's name (hyphens split words), description and body.
#[derive(Debug)]
pub struct Document {
    fields: [Field; 3],
}

impl Document {
    fn of(skill: &Skill) -> Document {
        Document {
            fields: [
                Field::new(&skill.name),
                Field::new(&skill.description),
                Field::new(&skill.body),
            ],
        }
    }
}

/// A skill's [`Document`], computed on first use and kept with the skill
/// (a snapshot's skills are matched once per run). Not part of a skill's
/// identity: any two caches compare equal.
#[derive(Debug, Clone, Default)]
pub struct TermCache(std::sync::OnceLock<std::sync::Arc<Document>>);

impl PartialEq for TermCache {
    fn eq(&self, _: &TermCache) -> bool {
        true
    }
}

impl TermCache {
    fn get(&self, skill: &Skill) -> std::sync::Arc<Document> {
        self.0
            .get_or_init(|| std::sync::Arc::new(Document::of(skill)))
            .clone()
    }
}

const WEIGHTS: [f64; 3] = [NAME_WEIGHT, DESCRIPTION_WEIGHT, BODY_WEIGHT];

/// Scores every skill of `skills` for `input`, keeping those that qualify
/// (an input word in the name or description, score >= [`MIN_SCORE`]),
/// best first, ties by name.
pub fn rank<'a>(skills: &[&'a Skill], input: &str) -> Vec<(&'a Skill, f64)> {
    let query = keywords(input);
    if query.is_empty() || skills.is_empty() {
        return Vec::new();
    }
    let docs: Vec<std::sync::Arc<Document>> = skills.iter().map(|s| s.terms.get(s)).collect();
    let n = docs.len() as f64;
    let mut average = [0.0f64; 3];
    for doc in &docs {
        for (avg, field) in average.iter_mut().zip(&doc.fields) {
            *avg += field.len as f64 / n;
        }
    }
    let documents = docs.len().max(MIN_DOCUMENTS) as f64;
    let idf: Vec<f64> = query
        .iter()
        .map(|term| {
            let df = docs
                .iter()
                .filter(|d| d.fields.iter().any(|f| f.counts.contains_key(term)))
                .count() as f64;
            (1.0 + (documents - df + 0.5) / (df + 0.5)).ln()
        })
        .collect();
    let mut scored: Vec<(&Skill, f64)> = skills
        .iter()
        .zip(&docs)
        .filter_map(|(skill, doc)| {
            let mut score = 0.0;
            let mut in_title = false;
            for (term, idf) in query.iter().zip(&idf) {
                let mut tf = 0.0;
                for (i, field) in doc.fields.iter().enumerate() {
                    let count = field.counts.get(term).copied().unwrap_or(0);
                    if count == 0 {
                        continue;
                    }
                    in_title |= i < 2;
                    let norm = if average[i] > 0.0 {
                        1.0 - B + B * field.len as f64 / average[i]
                    } else {
                        1.0
                    };
                    tf += WEIGHTS[i] * count as f64 / norm;
                }
                score += idf * tf / (K1 + tf);
            }
            (in_title && score >= MIN_SCORE).then_some((*skill, score))
        })
        .collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.name.cmp(&b.0.name)));
    scored
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skill(name: &str, description: &str, body: &str) -> Skill {
        Skill::new(name, description, body)
    }

    #[test]
    fn stop_words_and_stems() {
        assert_eq!(
            keywords("How to search the web, searching!"),
            ["search", "web"]
        );
        assert_eq!(keywords("What's 17 times 23?"), ["17", "time", "23"]);
        assert_eq!(keywords("帮我搜索的"), ["帮", "搜", "索"]);
        assert!(keywords("hi there, how are you doing?").is_empty());
    }

    #[test]
    fn a_derived_word_is_not_cut_back_to_another_word() {
        assert_eq!(keywords("accessibility audits"), ["accessibility", "audit"]);
        assert_eq!(keywords("Accessibilities"), ["accessibility"]);
        assert_eq!(keywords("organization"), ["organization"]);
        let access = skill("tokens", "Manage access tokens and access control.", "");
        let a11y = skill("a11y", "Check accessibility of web pages.", "");
        let skills = [&access, &a11y];
        let ranked: Vec<&str> = rank(&skills, "review the accessibility of this page")
            .into_iter()
            .map(|(s, _)| s.name.as_str())
            .collect();
        assert_eq!(ranked, ["a11y"]);
        let ranked: Vec<&str> = rank(&skills, "rotate the access tokens")
            .into_iter()
            .map(|(s, _)| s.name.as_str())
            .collect();
        assert_eq!(ranked, ["tokens"]);
    }

    #[test]
    fn body_only_words_are_never_enough() {
        let a = skill(
            "alpha",
            "Unrelated things.",
            "pancakes pancakes pancakes recipe",
        );
        assert!(rank(&[&a], "a recipe for pancakes").is_empty());
        let b = skill("pancakes", "Recipes for pancakes.", "");
        let got = rank(&[&a, &b], "a recipe for pancakes");
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0.name, "pancakes");
    }

    #[test]
    fn the_name_and_description_outweigh_a_long_body() {
        let body = "pdf ".repeat(50) + &"filler words here ".repeat(200);
        let long = skill("office", "Office documents.", &body);
        let pdf = skill("pdf", "Work with PDF files.", "Short.");
        let got = rank(&[&long, &pdf], "merge two PDF files");
        assert_eq!(
            got[0].0.name,
            "pdf",
            "{:?}",
            got.iter().map(|(s, v)| (&s.name, v)).collect::<Vec<_>>()
        );
    }

    #[test]
    fn one_common_word_is_not_enough() {
        // `use` is in every description: it scores far below MIN_SCORE.
        let skills: Vec<Skill> = (0..20)
            .map(|i| {
                skill(
                    &format!("s{i}"),
                    &format!("Use when topic{i} comes up."),
                    "",
                )
            })
            .collect();
        let refs: Vec<&Skill> = skills.iter().collect();
        assert!(rank(&refs, "how do I use this").is_empty());
        assert_eq!(rank(&refs, "topic7 help")[0].0.name, "s7");
    }

    #[test]
    fn ties_go_by_name() {
        let b = skill("bravo", "alpha beta", "");
        let a = skill("alpha-two", "gamma delta beta", "");
        let c = skill("charlie", "gamma delta beta", "");
        let got = rank(&[&b, &c, &a], "gamma delta");
        let names: Vec<&str> = got.iter().map(|(s, _)| s.name.as_str()).collect();
        assert_eq!(names, ["alpha-two", "charlie"]);
        assert_eq!(got[0].1, got[1].1);
    }
}
