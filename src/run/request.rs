//! [`RunRequest`]: what asks for a run, whatever started it (a person, a
//! schedule, the API, a webhook, another run's end, a file, a calling
//! agent or a pipeline step), before it is resolved against a snapshot.

use crate::registry::ceiling::Ceiling;
use crate::store::{Fire, RunParent, RunRecord, TriggerClaim};
use crate::types::{ScheduleId, Trigger};

use super::template::{RequestVars, TriggerVars};

/// A request to run an agent.
#[derive(Debug, Clone)]
pub struct RunRequest {
    pub agent: String,
    /// The input; `None` renders the schedule's `input` for a scheduled
    /// fire, else the agent's `prompt`.
    pub input: Option<String>,
    /// Overrides the agent's model (`--model`).
    pub model: Option<String>,
    /// What started the run.
    pub trigger: Trigger,
    /// `{{ vars.X }}` in the templates.
    pub vars: serde_json::Map<String, serde_json::Value>,
    /// `{{ payload }}` in the templates: a webhook's JSON body.
    pub payload: Option<serde_json::Value>,
    /// `{{ event }}` in the templates: a webhook's event name.
    pub event: Option<String>,
    /// `{{ headers.X }}` in the templates: a webhook's headers, names in
    /// lowercase.
    pub headers: std::collections::BTreeMap<String, String>,
    /// The scheduled fire this run is for (its `schedule_id` is
    /// [`RunRequest::schedule_id`]).
    pub fire: Option<Fire>,
    /// The schedule that started the run (scheduled fires only): its
    /// `input` is rendered when `input` is `None`. What tells runs of one
    /// schedule from those of another (`on_overlap: replace`).
    pub schedule_id: Option<ScheduleId>,
    /// The webhook delivery id that started it: remembered in the
    /// transaction that claims the run, so a delivery runs at most once and
    /// one whose run could not be claimed can be delivered again.
    pub delivery: Option<String>,
    /// The id of a run already claimed (`queued`) that this request takes
    /// over after a crash; `None`: a new run with a new id.
    pub run_id: Option<String>,
    /// The run's end or the file that started it (`after:`, `watch:`):
    /// `{{ trigger }}` in the templates, and the entry whose `input`
    /// renders when `input` is `None`.
    pub origin: Option<TriggerVars>,
    /// What the run is for, remembered in the transaction that claims it,
    /// so it happens at most once (a follow-up, a file version).
    pub claim: Option<TriggerClaim>,
    /// The run that starts this one (an agent called as a tool, a pipeline
    /// step) and the new run's depth; `None` for a run started by a trigger.
    pub parent: Option<RunParent>,
    /// The limits of the runs above this one (its caller's, and theirs):
    /// it runs under the strictest of these and its own. `None` for a run
    /// started by a trigger.
    pub ceiling: Option<Ceiling>,
    /// The session this run is a turn of: its input is the person's new
    /// message, and the session's earlier messages are its history.
    pub session: Option<String>,
    /// The earlier messages of a conversation the caller holds itself (the
    /// OpenAI-compatible endpoint's `messages`, all but the last): put
    /// before the input as a session's history is, and kept with the run
    /// while it is queued. Ignored for a turn of a session, whose history
    /// is the session's. `None` or empty: a run on its own.
    pub history: Option<Vec<crate::types::Message>>,
}

impl RunRequest {
    /// A request to run `agent` for `trigger`, with nothing else said: its
    /// input is the agent's `prompt` (or its schedule's `input`).
    pub fn new(agent: &str, trigger: Trigger) -> RunRequest {
        RunRequest {
            agent: agent.to_string(),
            input: None,
            model: None,
            trigger,
            vars: serde_json::Map::new(),
            payload: None,
            event: None,
            headers: std::collections::BTreeMap::new(),
            fire: None,
            schedule_id: None,
            delivery: None,
            run_id: None,
            origin: None,
            claim: None,
            parent: None,
            ceiling: None,
            session: None,
            history: None,
        }
    }

    /// The request that runs `run`, a run accepted `queued`, again (taken
    /// over after a crash or from a busy node, or a pipeline resumed): its
    /// id, input, model and trigger, and the template variables it was
    /// accepted with (`context`, [`RequestVars::to_stored`]).
    pub fn again(run: &RunRecord, context: Option<&str>) -> RunRequest {
        let stored = RequestVars::stored(context);
        RunRequest {
            input: Some(run.input.clone()),
            model: Some(run.model.clone()).filter(|m| !m.is_empty()),
            vars: stored.vars,
            payload: stored.payload,
            event: stored.event,
            headers: stored.headers,
            origin: stored.trigger,
            run_id: Some(run.id.clone()),
            session: run.session_id.clone(),
            history: Some(stored.history).filter(|h| !h.is_empty()),
            ..RunRequest::new(&run.agent, run.trigger)
        }
    }
}
