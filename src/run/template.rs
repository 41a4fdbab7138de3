//! What a run's templates (`system`, `prompt`, a schedule's `input`) see and
//! how they are rendered (minijinja): `agent`, `now`, `input`, `vars`,
//! for webhook runs `payload`, `event` and `headers`, and for runs started
//! by another run's end or by a file, `trigger` ([`TriggerVars`]). A mapping or a list
//! prints as JSON (`{{ payload }}` gives `{"action":"opened",...}`), not in
//! minijinja's own Python-like form (`{"action": "opened", "x": none}`);
//! `headers` is looked up ignoring case. Also the JSON form of these
//! variables kept with a queued run, so a run taken over after a crash
//! renders as it would have.
//!
//! Depends on minijinja, serde and `types` only.

use std::collections::BTreeMap;
use std::sync::Arc;

use minijinja::value::{Enumerator, Object, ObjectRepr, Serde, ValueKind};
use minijinja::{Error, ErrorKind, Output, State, Value};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value as Json};

use crate::types::{Message, RunState};

/// `{{ trigger.* }}`: what started a run besides a person, a clock or a
/// webhook. `{{ trigger.kind }}` says which.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TriggerVars {
    /// `after:`: run `run_id` of `agent` ended in `state` with `output`
    /// (its final answer; empty when it had none).
    After {
        agent: String,
        run_id: String,
        state: RunState,
        output: String,
    },
    /// `watch:`: the file `path`, relative to the project root, whose
    /// content had SHA-256 `content_hash` (hex) when its run was started.
    Watch { path: String, content_hash: String },
}

/// The variables a request brings to the templates, besides `agent`, `now`
/// and `input`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RequestVars {
    /// `{{ vars.X }}`.
    pub vars: Map<String, Json>,
    /// `{{ payload }}`: a webhook's JSON body.
    pub payload: Option<Json>,
    /// `{{ event }}`: a webhook's event name.
    pub event: Option<String>,
    /// `{{ headers.X }}`: a webhook's request headers, names in lowercase.
    pub headers: BTreeMap<String, String>,
    /// `{{ trigger.X }}`: the run's end or file that started it.
    pub trigger: Option<TriggerVars>,
    /// Not a template variable: the earlier messages a caller sent with
    /// the request (`RunRequest::history`), kept with a queued run so a run
    /// taken over is the same conversation. Empty: none.
    pub history: Vec<Message>,
}

impl RequestVars {
    /// Whether there is anything to keep with a queued run.
    pub fn is_empty(&self) -> bool {
        self.vars.is_empty()
            && self.payload.is_none()
            && self.event.is_none()
            && self.headers.is_empty()
            && self.trigger.is_none()
            && self.history.is_empty()
    }

    /// The JSON kept with a queued run (`{"vars": ..., "payload": ...,
    /// "event": ..., "headers": ..., "trigger": ...}`, and `"history"` when
    /// there is one); read back by [`RequestVars::stored`].
    pub fn to_stored(&self) -> String {
        let mut stored = serde_json::json!({
            "vars": self.vars,
            "payload": self.payload,
            "event": self.event,
            "headers": self.headers,
            "trigger": self.trigger,
        });
        if !self.history.is_empty() {
            stored["history"] = serde_json::json!(self.history);
        }
        stored.to_string()
    }

    /// The variables of a queued run's stored context; empty when there is
    /// none or it does not parse. Parts missing from a context stored by an
    /// older version are empty.
    pub fn stored(context: Option<&str>) -> RequestVars {
        let Some(Json::Object(mut context)) =
            context.and_then(|text| serde_json::from_str(text).ok())
        else {
            return RequestVars::default();
        };
        let vars = match context.remove("vars") {
            Some(Json::Object(vars)) => vars,
            _ => Map::new(),
        };
        let headers = match context.remove("headers") {
            Some(Json::Object(headers)) => headers
                .into_iter()
                .filter_map(|(name, value)| Some((name, value.as_str()?.to_string())))
                .collect(),
            _ => BTreeMap::new(),
        };
        RequestVars {
            vars,
            payload: context.remove("payload").filter(|p| !p.is_null()),
            event: match context.remove("event") {
                Some(Json::String(event)) => Some(event),
                _ => None,
            },
            headers,
            trigger: context
                .remove("trigger")
                .and_then(|t| serde_json::from_value(t).ok()),
            history: context
                .remove("history")
                .and_then(|h| serde_json::from_value(h).ok())
                .unwrap_or_default(),
        }
    }
}

/// Renders `template` for agent `agent` at `now` with `input` and `request`.
pub fn render(
    template: &str,
    agent: &str,
    now: &str,
    input: &str,
    request: &RequestVars,
) -> Result<String, String> {
    // `payload` is `none` outside webhook runs, so `payload.x` is undefined
    // there rather than an error.
    environment()
        .render_str(template, base_context(agent, now, input, request))
        .map_err(|e| render_error(&e))
}

/// The environment every run template is rendered in: mappings and lists
/// print as JSON, and rendering stops after
/// [`TEMPLATE_FUEL`](crate::config::bounds::TEMPLATE_FUEL) steps.
pub fn environment() -> minijinja::Environment<'static> {
    let mut env = minijinja::Environment::new();
    env.set_formatter(json_formatter);
    env.set_fuel(Some(crate::config::bounds::TEMPLATE_FUEL));
    env
}

/// What a render error says: a template stopped for its length says so
/// and what to do.
pub fn render_error(e: &minijinja::Error) -> String {
    if e.kind() == minijinja::ErrorKind::OutOfFuel {
        format!(
            "it took more than {} steps to render and was stopped (a loop too large for its inputs?); make it smaller",
            crate::config::bounds::TEMPLATE_FUEL
        )
    } else {
        e.to_string()
    }
}

/// What every template of a run sees: `agent`, `now`, `input`, `vars`,
/// `payload`, `event`, `headers`, as a value other variables can be added
/// to (`context! { steps => ..., ..base }`).
pub fn base_context(agent: &str, now: &str, input: &str, request: &RequestVars) -> Value {
    minijinja::context! {
        agent => agent,
        now => now,
        input => input,
        vars => Serde(&request.vars),
        payload => request.payload.as_ref().map(Serde),
        event => request.event.as_deref(),
        headers => Value::from_object(Headers(request.headers.clone())),
        trigger => request.trigger.as_ref().map(Serde),
    }
}

/// Prints mappings and lists as compact JSON, everything else as minijinja
/// does. minijinja's own form follows Jinja2, which follows Python's
/// `repr` (`none`, `", "` and `": "` separators); a prompt that hands a
/// payload to a model wants the JSON it came as.
fn json_formatter(
    out: &mut Output<'_>,
    state: &mut State<'_, '_>,
    value: &Value,
) -> Result<(), Error> {
    if matches!(value.kind(), ValueKind::Map | ValueKind::Seq) {
        let json = serde_json::to_string(value)
            .map_err(|e| Error::new(ErrorKind::BadSerialization, e.to_string()))?;
        return out
            .write_str(&json)
            .map_err(|e| Error::new(ErrorKind::WriteFailure, e.to_string()));
    }
    minijinja::escape_formatter(out, state, value)
}

/// `headers`: a mapping whose keys match ignoring case, and with `_` for
/// `-` (`headers.x_github_event` is `X-GitHub-Event`), since `-` cannot
/// stand in a dotted name.
#[derive(Debug)]
struct Headers(BTreeMap<String, String>);

impl Object for Headers {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Map
    }

    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        let name = key.as_str()?.to_ascii_lowercase();
        self.0
            .get(&name)
            .or_else(|| self.0.get(&name.replace('_', "-")))
            .map(|value| Value::from(value.as_str()))
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        let names: Vec<Value> = self.0.keys().map(|k| Value::from(k.as_str())).collect();
        Enumerator::Iter(Box::new(names.into_iter()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_caller_s_history_is_kept_with_a_queued_run() {
        let vars = RequestVars {
            history: vec![Message::user("hi"), Message::assistant("hello", Vec::new())],
            ..RequestVars::default()
        };
        assert!(!vars.is_empty());
        assert_eq!(RequestVars::stored(Some(&vars.to_stored())), vars);
        // Without one, nothing is written for it.
        assert!(!RequestVars::default().to_stored().contains("history"));
    }

    fn webhook() -> RequestVars {
        RequestVars {
            payload: Some(json!({
                "action": "opened",
                "issue": { "title": "Broken \"build\"", "labels": ["bug", "ci"], "milestone": null },
                "draft": false,
            })),
            event: Some("issues".into()),
            headers: BTreeMap::from([
                ("x-github-event".to_string(), "issues".to_string()),
                ("user-agent".to_string(), "GitHub-Hookshot/abc".to_string()),
            ]),
            ..RequestVars::default()
        }
    }

    fn render_one(template: &str, request: &RequestVars) -> String {
        render(template, "triage", "2026-01-01T00:00:00Z", "in", request).unwrap()
    }

    #[test]
    fn mappings_and_lists_print_as_json() {
        let request = webhook();
        let text = render_one("{{ payload }}", &request);
        let parsed: Json = serde_json::from_str(&text).unwrap();
        assert_eq!(parsed, request.payload.clone().unwrap());
        assert!(!text.contains("none"), "{text}");
        assert_eq!(
            render_one("{{ payload.issue.labels }}", &request),
            r#"["bug","ci"]"#
        );
        // Nested scalars print as they always did (minijinja's `False`,
        // `none`).
        assert_eq!(
            render_one("{{ payload.issue.title }}|{{ payload.draft }}", &request),
            "Broken \"build\"|False"
        );
        let vars = RequestVars {
            vars: json!({ "who": "ops", "n": [1, 2] })
                .as_object()
                .unwrap()
                .clone(),
            ..RequestVars::default()
        };
        assert_eq!(
            render_one("{{ vars.n }} {{ vars.who }}", &vars),
            "[1,2] ops"
        );
    }

    #[test]
    fn event_and_headers_ignore_case() {
        let request = webhook();
        assert_eq!(
            render_one(
                "{{ event }} {{ headers['X-GitHub-Event'] }} {{ headers.x_github_event }} {{ headers['USER-AGENT'] }}",
                &request
            ),
            "issues issues issues GitHub-Hookshot/abc"
        );
        assert_eq!(render_one("[{{ headers.missing }}]", &request), "[]");
        assert_eq!(
            render_one("{% for h in headers %}{{ h }};{% endfor %}", &request),
            "user-agent;x-github-event;"
        );
        // Outside webhook runs: none, and what is inside is undefined, not
        // an error.
        let none = RequestVars::default();
        assert_eq!(
            render_one(
                "{% if event %}x{% endif %}[{{ payload.issue }}][{{ headers.a }}]",
                &none
            ),
            "[][]"
        );
    }

    #[test]
    fn trigger_variables_render_and_round_trip() {
        let after = RequestVars {
            trigger: Some(TriggerVars::After {
                agent: "triage".into(),
                run_id: "r1".into(),
                state: RunState::Succeeded,
                output: "3 issues".into(),
            }),
            ..RequestVars::default()
        };
        assert_eq!(
            render_one(
                "{{ trigger.kind }} {{ trigger.agent }} {{ trigger.run_id }} {{ trigger.state }}: {{ trigger.output }}",
                &after
            ),
            "after triage r1 succeeded: 3 issues"
        );
        assert_eq!(RequestVars::stored(Some(&after.to_stored())), after);
        let watch = RequestVars {
            trigger: Some(TriggerVars::Watch {
                path: "inbox/a.md".into(),
                content_hash: "ab12".into(),
            }),
            ..RequestVars::default()
        };
        assert_eq!(render_one("{{ trigger.path }}", &watch), "inbox/a.md");
        assert_eq!(RequestVars::stored(Some(&watch.to_stored())), watch);
        assert_eq!(
            render_one("[{{ trigger.path }}]", &RequestVars::default()),
            "[]"
        );
    }

    #[test]
    fn stored_context_round_trips() {
        let request = webhook();
        assert_eq!(RequestVars::stored(Some(&request.to_stored())), request);
        // Written before `event` and `headers` existed.
        let old = RequestVars::stored(Some(r#"{"vars":{"a":1},"payload":null}"#));
        assert_eq!(old.vars.get("a"), Some(&json!(1)));
        assert!(old.payload.is_none() && old.event.is_none() && old.headers.is_empty());
        assert_eq!(
            RequestVars::stored(Some("not json")),
            RequestVars::default()
        );
        assert_eq!(RequestVars::stored(None), RequestVars::default());
    }
}
