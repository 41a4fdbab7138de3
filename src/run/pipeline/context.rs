//! [`StepContext`]: what every step task of one pipeline run shares (the
//! store, the job, the channel to the run's sink, the approvals), how a
//! step's event is stored and published, and the templates' variables.

use minijinja::value::Serde;
use serde_json::{Map, Value as Json};
use tokio::sync::{mpsc, oneshot};

use super::approval::StepApprovals;
use super::job::PipelineJob;
use crate::run::template::base_context;
use crate::store::{Store, StoreError};
use crate::types::RunEvent;

/// What every step task of one pipeline run shares.
pub(crate) struct StepContext {
    pub store: Store,
    pub run_id: String,
    pub job: PipelineJob,
    /// Stored events, with their seqs, for the run's sink; the sender
    /// told once the sink has it, if any.
    pub events: mpsc::UnboundedSender<Published>,
    /// Steps with `approve: true` wait here.
    pub approvals: StepApprovals,
}

/// A stored event on its way to the run's sink: its seq, the event, and
/// who waits until the sink has it.
pub(crate) type Published = (i64, RunEvent, Option<oneshot::Sender<()>>);

impl StepContext {
    pub(crate) fn publish(&self, seq: i64, event: RunEvent) {
        // The run's loop outlives its steps; a closed channel means it ended.
        let _ = self.events.send((seq, event, None));
    }

    /// Stores `event` of the run and hands it to the run's sink.
    pub(crate) async fn record(&self, event: RunEvent) -> Result<(), StoreError> {
        let seq = self
            .store
            .append_events(&self.run_id, vec![event.clone()])
            .await?;
        self.publish(seq, event);
        Ok(())
    }

    fn now(&self) -> String {
        chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    }

    /// The templates' variables: the run's, `steps`, and for a `for_each`
    /// item `item` and `index`.
    pub(crate) fn context(
        &self,
        steps: &Map<String, Json>,
        item: Option<(usize, &str)>,
    ) -> minijinja::Value {
        let job = &self.job;
        let base = base_context(&job.agent, &self.now(), &job.input, &job.request);
        // A pipeline started by `after:` or `watch:` sees what started it,
        // any other `{kind}` alone.
        let trigger = match &job.request.trigger {
            Some(origin) => serde_json::to_value(origin).unwrap_or_default(),
            None => serde_json::json!({ "kind": job.trigger }),
        };
        let steps = Serde(steps);
        let trigger = Serde(&trigger);
        match item {
            Some((index, item)) => minijinja::context! {
                steps => steps, trigger => trigger, item => item, index => index, ..base
            },
            None => minijinja::context! { steps => steps, trigger => trigger, ..base },
        }
    }

    pub(crate) fn redact(&self, text: Option<String>) -> Option<String> {
        text.map(|t| self.job.redactor.redact(&t).into_owned())
    }
}

/// `value` with every string in it rendered.
pub(crate) fn render_strings(
    value: &Json,
    render: &dyn Fn(&str) -> Result<String, String>,
) -> Result<Json, String> {
    Ok(match value {
        Json::String(s) => Json::String(render(s)?),
        Json::Array(items) => Json::Array(
            items
                .iter()
                .map(|v| render_strings(v, render))
                .collect::<Result<_, _>>()?,
        ),
        Json::Object(map) => Json::Object(
            map.iter()
                .map(|(k, v)| Ok((k.clone(), render_strings(v, render)?)))
                .collect::<Result<_, String>>()?,
        ),
        other => other.clone(),
    })
}
