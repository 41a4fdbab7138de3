//! What starts an agent besides `aurad run`: its `schedule` entries with
//! `on_overlap`, `on_missed`, `catch_up`, `on_interrupt`, and its `webhook`
//! (docs/daemon-and-api.md, "Schedules"), its `after:` (`after.rs`) and `watch:` (`watch.rs`).
//! Parsed from the raw YAML values of an agent file
//! into a validated [`Triggers`], with every problem placed.
//!
//! Parses cron expressions with `types::CronSchedule` (pure time math, no
//! dependency on the scheduler), so an expression is checked where it is
//! written.

use std::path::Path;
use std::time::Duration;

use serde_yaml::Value;

use super::after::{AfterTrigger, parse_after};
use super::diag::{Diagnostic, MAX_LIST_ERRORS, item_places, locate};
use super::duration::duration_value;
use super::watch::{WatchTrigger, parse_watch};
use super::yaml_value::describe_value;
use crate::types::{CronSchedule, OnMissed, ScheduleId};

/// `on_overlap`: what a scheduled fire does while a run of the agent is in
/// flight.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OnOverlap {
    /// Record a `skipped` run (default).
    #[default]
    Skip,
    /// Hold one run until the current one ends; further fires are skipped.
    Queue,
    /// Cancel the running one and start the new one.
    Replace,
    /// Run both (still under `max_concurrent_runs`).
    Allow,
}

impl OnOverlap {
    pub fn as_str(self) -> &'static str {
        match self {
            OnOverlap::Skip => "skip",
            OnOverlap::Queue => "queue",
            OnOverlap::Replace => "replace",
            OnOverlap::Allow => "allow",
        }
    }
}

/// `on_interrupt`: what happens to a run cut off by a crash.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OnInterrupt {
    /// Record it as `interrupted` (default).
    #[default]
    Record,
    /// Also run it again once, if still within `catch_up`.
    Retry,
}

/// One `schedule` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleEntry {
    /// What the schedule is (agent, expression, zone, input), hashed: its
    /// fires and state are keyed by this, not by its place in the list.
    pub id: ScheduleId,
    pub cron: CronSchedule,
    /// minijinja template overriding the agent's `prompt` for these fires.
    pub input: Option<String>,
}

impl ScheduleEntry {
    /// The entry `cron` with `input` of `agent`, with its identity.
    pub fn new(agent: &str, cron: CronSchedule, input: Option<String>) -> ScheduleEntry {
        let id = ScheduleId::of(
            agent,
            cron.expression(),
            cron.timezone().name(),
            input.as_deref(),
        );
        ScheduleEntry { id, cron, input }
    }
}

/// `webhook`: enables `POST /hooks/NAME`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookConfig {
    /// The environment variable holding the HMAC-SHA256 secret. The secret
    /// itself is read when a delivery arrives and never stored.
    pub secret_env: String,
    /// How deliveries may be signed (`signature:`, one scheme or a list,
    /// default `github`): a request is checked by the scheme whose header
    /// it carries.
    pub signatures: Vec<WebhookSignature>,
}

/// `webhook.signature`: the signing scheme a sender uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum WebhookSignature {
    /// `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the raw body>`:
    /// GitHub's scheme, also used by Gitea, Forgejo and most generic senders.
    #[default]
    Github,
    /// `Stripe-Signature: t=<unix time>,v1=<hex HMAC-SHA256 of "t.body">`,
    /// refused when `t` is more than 5 minutes from now.
    Stripe,
    /// `X-Gitlab-Token: <the secret>`: GitLab sends the secret itself.
    Gitlab,
    /// `X-Slack-Signature: v0=<hex HMAC-SHA256 of "v0:<ts>:<body>">` with
    /// `X-Slack-Request-Timestamp: <ts>`, refused when `ts` is more than 5
    /// minutes from now.
    Slack,
}

impl WebhookSignature {
    pub const ALL: [WebhookSignature; 4] = [
        WebhookSignature::Github,
        WebhookSignature::Stripe,
        WebhookSignature::Gitlab,
        WebhookSignature::Slack,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            WebhookSignature::Github => "github",
            WebhookSignature::Stripe => "stripe",
            WebhookSignature::Gitlab => "gitlab",
            WebhookSignature::Slack => "slack",
        }
    }

    /// The header a request signed by this scheme carries.
    pub fn header(self) -> &'static str {
        match self {
            WebhookSignature::Github => "X-Hub-Signature-256",
            WebhookSignature::Stripe => "Stripe-Signature",
            WebhookSignature::Gitlab => "X-Gitlab-Token",
            WebhookSignature::Slack => "X-Slack-Signature",
        }
    }

    /// Who sends requests signed this way, for messages.
    pub fn sender(self) -> &'static str {
        match self {
            WebhookSignature::Github => "GitHub (or Gitea, Forgejo)",
            WebhookSignature::Stripe => "Stripe",
            WebhookSignature::Gitlab => "GitLab",
            WebhookSignature::Slack => "Slack",
        }
    }
}

/// Everything that can start the agent without a person at a terminal.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Triggers {
    pub schedules: Vec<ScheduleEntry>,
    pub on_overlap: OnOverlap,
    pub on_missed: OnMissed,
    /// How far back missed fires count; `None`: min(period, 1h).
    pub catch_up: Option<Duration>,
    pub on_interrupt: OnInterrupt,
    pub webhook: Option<WebhookConfig>,
    /// `after:`: the agents whose runs' ends start this one.
    pub after: Vec<AfterTrigger>,
    /// `watch:`: the files that start a run each.
    pub watch: Option<WatchTrigger>,
}

impl Triggers {
    /// The schedule whose identity is `id`, if the agent still has it.
    pub fn schedule(&self, id: &ScheduleId) -> Option<&ScheduleEntry> {
        self.schedules.iter().find(|s| s.id == *id)
    }

    /// The `catch_up` window of `schedule` (`None`: unknown, e.g. gone)
    /// near `at`: as written, or min(period, 1h).
    pub fn catch_up_for(
        &self,
        schedule: Option<&ScheduleEntry>,
        at: chrono::DateTime<chrono::Utc>,
    ) -> Duration {
        if let Some(d) = self.catch_up {
            return d;
        }
        let hour = Duration::from_secs(3600);
        schedule
            .and_then(|s| s.cron.period_near(at))
            .and_then(|p| p.to_std().ok())
            .map_or(hour, |p| p.min(hour))
    }
}

/// The raw values of the agent's trigger fields.
pub(super) struct RawTriggers<'a> {
    pub schedule: Option<&'a Value>,
    pub on_overlap: Option<&'a Value>,
    pub on_missed: Option<&'a Value>,
    pub catch_up: Option<&'a Value>,
    pub on_interrupt: Option<&'a Value>,
    pub webhook: Option<&'a Value>,
    pub after: Option<&'a Value>,
    pub watch: Option<&'a Value>,
}

/// Validates the trigger fields of agent `agent`'s file at `path`
/// (interpolated `text`, for places), adding every problem to `diags`.
pub(super) fn parse_triggers(
    agent: &str,
    raw: RawTriggers<'_>,
    path: &Path,
    text: &str,
    diags: &mut Vec<Diagnostic>,
) -> Triggers {
    let err = |keys: &[&str], msg: String| Diagnostic::error(path, locate(text, keys), msg);
    let mut triggers = Triggers::default();
    if let Some(value) = raw.schedule {
        let items: Vec<&Value> = match value {
            Value::Sequence(items) => items.iter().collect(),
            Value::Null => Vec::new(),
            other => vec![other],
        };
        // Found once, when first needed: locating each item anew would be
        // quadratic in a file of thousands of bad items.
        let mut places: Option<Vec<(usize, usize)>> = None;
        let start = diags.len();
        for (i, item) in items.into_iter().enumerate() {
            if diags.len() - start >= MAX_LIST_ERRORS {
                diags.push(err(
                    &["schedule"],
                    format!("more than {MAX_LIST_ERRORS} problems in `schedule`; fix these first"),
                ));
                break;
            }
            let mut place_of = |i: usize| {
                let places = places.get_or_insert_with(|| item_places(text, "schedule"));
                match places.get(i) {
                    Some(place) => *place,
                    None => locate(text, &["schedule"]),
                }
            };
            match parse_entry(agent, item) {
                Ok(entry) => {
                    // The same schedule twice is one schedule: it fires once.
                    if let Some(first) = triggers.schedules.iter().position(|s| s.id == entry.id) {
                        diags.push(Diagnostic::warning(
                            path,
                            place_of(i),
                            format!(
                                "schedule[{i}] is the same schedule as schedule[{first}] (expression, \
                                 timezone and input): it fires once; remove one of them"
                            ),
                        ));
                        continue;
                    }
                    triggers.schedules.push(entry)
                }
                Err(msg) => diags.push(Diagnostic::error(
                    path,
                    place_of(i),
                    format!("schedule[{i}]: {msg}"),
                )),
            }
        }
    }
    // A field holding one of `words`; anything else is an error naming them.
    let check_word = |field: &str, value: Option<&Value>, words: &[&str], diags: &mut Vec<_>| {
        let value = value?;
        match value.as_str() {
            Some(s) if words.contains(&s) => Some(s.to_string()),
            _ => {
                let expected: Vec<String> = words.iter().map(|w| format!("`{w}`")).collect();
                diags.push(err(
                    &[field],
                    format!(
                        "`{field}` is {}: expected one of {}",
                        describe_value(value),
                        expected.join(", ")
                    ),
                ));
                None
            }
        }
    };
    triggers.on_overlap = match check_word(
        "on_overlap",
        raw.on_overlap,
        &["skip", "queue", "replace", "allow"],
        diags,
    )
    .as_deref()
    {
        Some("queue") => OnOverlap::Queue,
        Some("replace") => OnOverlap::Replace,
        Some("allow") => OnOverlap::Allow,
        _ => OnOverlap::Skip,
    };
    triggers.on_missed = match check_word(
        "on_missed",
        raw.on_missed,
        &["latest", "all", "skip"],
        diags,
    )
    .as_deref()
    {
        Some("all") => OnMissed::All,
        Some("skip") => OnMissed::Skip,
        _ => OnMissed::Latest,
    };
    triggers.on_interrupt = match check_word(
        "on_interrupt",
        raw.on_interrupt,
        &["record", "retry"],
        diags,
    )
    .as_deref()
    {
        Some("retry") => OnInterrupt::Retry,
        _ => OnInterrupt::Record,
    };
    if let Some(v) = raw.catch_up {
        match duration_value(v) {
            Ok(d) => triggers.catch_up = Some(d),
            Err(msg) => diags.push(err(&["catch_up"], format!("catch_up: {msg}"))),
        }
    }
    if let Some(v) = raw.webhook {
        match parse_webhook(v) {
            Ok(w) => triggers.webhook = Some(w),
            Err(msg) => diags.push(err(&["webhook"], format!("webhook: {msg}"))),
        }
    }
    if let Some(v) = raw.after {
        triggers.after = parse_after(agent, v, path, text, diags);
    }
    if let Some(v) = raw.watch {
        triggers.watch = parse_watch(v, path, text, diags);
    }
    if triggers.schedules.is_empty() {
        for (field, present) in [
            ("on_overlap", raw.on_overlap.is_some()),
            ("on_missed", raw.on_missed.is_some()),
            ("catch_up", raw.catch_up.is_some()),
        ] {
            if present && raw.schedule.is_none() {
                diags.push(Diagnostic::warning(
                    path,
                    locate(text, &[field]),
                    format!("`{field}` has no effect: the agent has no `schedule`"),
                ));
            }
        }
    }
    triggers
}

/// One schedule item: `"CRON"` or `{ cron, timezone, input }`.
fn parse_entry(agent: &str, item: &Value) -> Result<ScheduleEntry, String> {
    let (cron, timezone, input) = match item {
        Value::String(expr) => (expr.clone(), None, None),
        Value::Mapping(map) => {
            let mut cron = None;
            let mut timezone = None;
            let mut input = None;
            for (k, v) in map {
                let key = k.as_str().unwrap_or_default();
                let text = || {
                    v.as_str().map(str::to_string).ok_or_else(|| {
                        format!("`{key}` must be a string, not {}", describe_value(v))
                    })
                };
                match key {
                    "cron" => cron = Some(text()?),
                    "timezone" => timezone = Some(text()?),
                    "input" => input = Some(text()?),
                    other => {
                        return Err(format!(
                            "unknown field `{other}`: a schedule has `cron`, `timezone` and `input`"
                        ));
                    }
                }
            }
            let cron =
                cron.ok_or("`cron` is required, e.g. `- cron: \"0 9 * * 1-5\"`".to_string())?;
            (cron, timezone, input)
        }
        other => {
            return Err(format!(
                "expected a cron expression or a mapping with `cron`, not {}",
                describe_value(other)
            ));
        }
    };
    if let Some(template) = &input
        && let Err(e) = minijinja::Environment::new().template_from_str(template)
    {
        return Err(format!(
            "template error in `input`: {}",
            e.detail().unwrap_or("syntax error")
        ));
    }
    let cron = CronSchedule::parse(&cron, timezone.as_deref())?;
    Ok(ScheduleEntry::new(agent, cron, input))
}

fn parse_webhook(value: &Value) -> Result<WebhookConfig, String> {
    let Value::Mapping(map) = value else {
        return Err(format!(
            "expected a mapping such as `{{ secret_env: MY_HOOK_SECRET }}`, not {}",
            describe_value(value)
        ));
    };
    let mut secret_env = None;
    let mut signatures = vec![WebhookSignature::default()];
    for (k, v) in map {
        match k.as_str().unwrap_or_default() {
            "secret_env" => match v.as_str() {
                Some(name) if valid_env_name(name) => secret_env = Some(name.to_string()),
                _ => {
                    return Err(format!(
                        "`secret_env` must name an environment variable (letters, digits, `_`), not {}",
                        describe_value(v)
                    ));
                }
            },
            "signature" => signatures = parse_signatures(v)?,
            other => {
                return Err(format!(
                    "unknown field `{other}`: a webhook has `secret_env` and `signature`"
                ));
            }
        }
    }
    let secret_env = secret_env.ok_or(
        "`secret_env` is required: name the environment variable holding the HMAC secret"
            .to_string(),
    )?;
    Ok(WebhookConfig {
        secret_env,
        signatures,
    })
}

/// `signature:`: one scheme's name, or a list of them (each once).
fn parse_signatures(value: &Value) -> Result<Vec<WebhookSignature>, String> {
    let expected = || {
        let names: Vec<String> = WebhookSignature::ALL
            .iter()
            .map(|s| format!("`{}` ({})", s.as_str(), s.header()))
            .collect();
        format!("expected one of {}, or a list of them", names.join(", "))
    };
    let one = |v: &Value| -> Result<WebhookSignature, String> {
        WebhookSignature::ALL
            .into_iter()
            .find(|s| v.as_str() == Some(s.as_str()))
            .ok_or_else(|| format!("`signature` is {}: {}", describe_value(v), expected()))
    };
    let list = match value {
        Value::Sequence(items) if items.is_empty() => {
            return Err(format!("`signature` is an empty list: {}", expected()));
        }
        Value::Sequence(items) => items.iter().map(one).collect::<Result<Vec<_>, _>>()?,
        v => vec![one(v)?],
    };
    for (i, s) in list.iter().enumerate() {
        if list[..i].contains(s) {
            return Err(format!("`signature` lists `{}` twice", s.as_str()));
        }
    }
    Ok(list)
}

fn valid_env_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn parse(yaml: &str) -> (Triggers, Vec<String>) {
        let map: std::collections::BTreeMap<String, Value> = serde_yaml::from_str(yaml).unwrap();
        let raw = RawTriggers {
            schedule: map.get("schedule"),
            on_overlap: map.get("on_overlap"),
            on_missed: map.get("on_missed"),
            catch_up: map.get("catch_up"),
            on_interrupt: map.get("on_interrupt"),
            webhook: map.get("webhook"),
            after: map.get("after"),
            watch: map.get("watch"),
        };
        let mut diags = Vec::new();
        let t = parse_triggers("a", raw, Path::new("agents/a.yaml"), yaml, &mut diags);
        (t, diags.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn full_form() {
        let (t, d) = parse(
            "schedule:\n  - cron: \"0 9 * * 1-5\"\n    timezone: Europe/Paris\n    input: hi\n  - \"*/5 * * * * *\"\non_overlap: queue\non_missed: all\ncatch_up: 2h\non_interrupt: retry\nwebhook: { secret_env: HOOK_SECRET }\n",
        );
        assert!(d.is_empty(), "{d:?}");
        assert_eq!(t.schedules.len(), 2);
        assert_eq!(t.schedules[0].cron.timezone().name(), "Europe/Paris");
        assert_eq!(t.schedules[0].input.as_deref(), Some("hi"));
        assert_eq!(t.on_overlap, OnOverlap::Queue);
        assert_eq!(t.on_missed, OnMissed::All);
        assert_eq!(t.catch_up, Some(Duration::from_secs(7200)));
        assert_eq!(t.on_interrupt, OnInterrupt::Retry);
        let webhook = t.webhook.unwrap();
        assert_eq!(webhook.secret_env, "HOOK_SECRET");
        assert_eq!(webhook.signatures, vec![WebhookSignature::Github]);
    }

    #[test]
    fn webhook_signature_schemes() {
        let (t, d) = parse("webhook: { secret_env: S, signature: stripe }\n");
        assert!(d.is_empty(), "{d:?}");
        assert_eq!(
            t.webhook.unwrap().signatures,
            vec![WebhookSignature::Stripe]
        );
        let (t, d) = parse("webhook: { secret_env: S, signature: [gitlab, slack] }\n");
        assert!(d.is_empty(), "{d:?}");
        assert_eq!(
            t.webhook.unwrap().signatures,
            vec![WebhookSignature::Gitlab, WebhookSignature::Slack]
        );
        let (t, d) = parse("webhook: { secret_env: S, signature: bitbucket }\n");
        assert!(t.webhook.is_none());
        let all = d.join("\n");
        assert!(
            all.contains("`signature` is \"bitbucket\": expected one of `github` (X-Hub-Signature-256), `stripe` (Stripe-Signature), `gitlab` (X-Gitlab-Token), `slack` (X-Slack-Signature)"),
            "{all}"
        );
        let (_, d) = parse("webhook: { secret_env: S, signature: [slack, slack] }\n");
        assert!(d.join("\n").contains("lists `slack` twice"), "{d:?}");
    }

    #[test]
    fn single_string_and_default_catch_up() {
        let (t, d) = parse("schedule: \"*/10 * * * *\"\n");
        assert!(d.is_empty(), "{d:?}");
        let at = chrono::DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .to_utc();
        assert_eq!(
            t.catch_up_for(t.schedules.first(), at),
            Duration::from_secs(600)
        );
        let (t, _) = parse("schedule: \"@daily\"\n");
        assert_eq!(
            t.catch_up_for(t.schedules.first(), at),
            Duration::from_secs(3600)
        );
        assert_eq!(t.catch_up_for(None, at), Duration::from_secs(3600));
    }

    #[test]
    fn errors_are_placed_and_say_what_to_do() {
        let (_, d) = parse(
            "schedule:\n  - cron: \"61 * * * *\"\n  - { cron: \"0 9 * * *\", timezone: Mars/Base }\n  - { crn: x }\non_overlap: wait\nwebhook: { secret_env: \"not a name\" }\n",
        );
        let all = d.join("\n");
        assert!(all.contains("agents/a.yaml:2:5: schedule[0]:"), "{all}");
        assert!(
            all.contains("schedule[1]:") && all.contains("Mars/Base"),
            "{all}"
        );
        assert!(all.contains("schedule[2]: unknown field `crn`"), "{all}");
        assert!(
            all.contains("agents/a.yaml:5:13: `on_overlap` is \"wait\": expected one of `skip`, `queue`, `replace`, `allow`"),
            "{all}"
        );
        assert!(all.contains("webhook: `secret_env` must name"), "{all}");
    }
}

#[cfg(test)]
mod identity_tests {
    use super::tests::parse;
    use super::*;

    #[test]
    fn each_entry_has_its_identity_and_a_repeat_is_one_schedule() {
        let (t, d) = parse(
            "schedule:\n  - \"0 9 * * *\"\n  - { cron: \"0  9 * * *\", timezone: UTC }\n  - { cron: \"0 9 * * *\", input: hi }\n",
        );
        assert_eq!(t.schedules.len(), 2, "{d:?}");
        assert_eq!(
            t.schedules[0].id,
            ScheduleId::of("a", "0 9 * * *", "UTC", None)
        );
        assert_eq!(
            t.schedules[1].id,
            ScheduleId::of("a", "0 9 * * *", "UTC", Some("hi"))
        );
        assert_eq!(t.schedule(&t.schedules[1].id), Some(&t.schedules[1]));
        assert_eq!(
            d,
            vec![
                "agents/a.yaml:3:5: warning: schedule[1] is the same schedule as schedule[0] \
                 (expression, timezone and input): it fires once; remove one of them"
                    .to_string()
            ]
        );
    }
}
