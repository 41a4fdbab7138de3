//! Compaction of a session turn's history (`history: compact`): when the
//! conversation is over the context budget before the turn's first model
//! call, the oldest part of the history is replaced by a summary the model
//! writes (the request and the cut are `history`'s). A part of the loop
//! (`LoopState`), in a file of its own.

use crate::llm::ChatRequest;
use crate::llm::retry::{Gated, stream_gated_until};
use crate::types::{Message, RunEvent};

use super::emit::retry_events;
use super::history::{self, TurnHistory};
use super::{End, LoopState, context};

impl LoopState<'_> {
    /// Replaces the oldest part of a session's history by a summary the
    /// model writes, when the conversation is over `budget`: the newest
    /// messages that fit half of what the budget leaves stay, the rest and
    /// the earlier summary become the new summary. The summary call counts
    /// in the run's usage. When it fails, the run goes on and the history
    /// is trimmed as for any run; only a stop ends the run here.
    pub(super) async fn compact(
        &mut self,
        messages: &mut Vec<Message>,
        history: &TurnHistory,
        budget: usize,
    ) -> Result<(), End> {
        let total = context::estimate(messages);
        if total <= budget || history.messages.is_empty() {
            return Ok(());
        }
        let before = history::history_tokens(history.summary.as_deref(), &history.messages);
        let fixed = total.saturating_sub(before);
        // Room for the summary itself: a quarter of the budget, within
        // bounds a useful summary needs and a small budget allows.
        let reserve = (budget / 4).clamp(64, 2_000);
        let keep = budget.saturating_sub(fixed + reserve) / 2;
        let cut = history::compaction_cut(&history.messages, keep);
        if cut == 0 {
            return Ok(());
        }
        let instruction = Message::system(history::SUMMARY_INSTRUCTION);
        let room = budget.saturating_sub(reserve + context::estimate_message(&instruction) + 8);
        let text =
            history::summary_request(history.summary.as_deref(), &history.messages[..cut], room);
        // The summary is written by the model the run calls now, under its
        // provider's limits; it does not move down the chain (a failed
        // summary falls back to trimming).
        let route = &self.parts.models.routes[self.model_index];
        let request = ChatRequest {
            model: route.model_name.clone(),
            messages: vec![instruction, Message::user(text)],
            tools: Vec::new(),
            temperature: self.spec.temperature,
            max_tokens: Some(u32::try_from(reserve).unwrap_or(u32::MAX)),
            output_schema: None,
            cache_key: None,
        };
        let mut on_retry = retry_events(self.events.clone());
        let mut ignore_deltas = |_| {};
        let mut ignore_waits = |_| {};
        let gated = route.gate.as_ref().map(|gate| Gated {
            gate,
            on_wait: &mut ignore_waits,
        });
        let call = stream_gated_until(
            route.provider,
            gated,
            &request,
            &self.parts.retry,
            self.clock.deadline(),
            &mut ignore_deltas,
            &mut on_retry,
        );
        let answer = tokio::select! {
            biased;
            _ = self.token.cancelled() => return Err(End::Stopped),
            answer = call => answer,
        };
        let answer = match answer {
            Ok(answer) => answer,
            Err(e) => {
                tracing::warn!(run = %self.spec.run_id, "summarizing the session's history failed, trimming it instead: {e}");
                return Ok(());
            }
        };
        self.count_usage(&answer, self.model_index);
        let summary = self.parts.redactor.redact(answer.text.trim()).into_owned();
        if summary.is_empty() {
            tracing::warn!(run = %self.spec.run_id, "the model wrote an empty summary of the session's history; trimming it instead");
            return Ok(());
        }
        // The history sits just before the turn's message, after the
        // earlier summary if there was one.
        let history_start = self.turn_start - history.messages.len();
        let from = history_start - usize::from(history.summary.is_some());
        messages.splice(
            from..history_start + cut,
            [history::summary_message(&summary)],
        );
        self.turn_start = self.turn_start - (history_start + cut - from) + 1;
        let through = history.first_seq + cut as u64 - 1;
        let after = history::history_tokens(Some(&summary), &history.messages[cut..]);
        self.emit(RunEvent::HistoryCompacted {
            summarized_messages: cut,
            through_seq: through,
            summary: summary.clone(),
            estimated_tokens_before: before,
            estimated_tokens_after: after,
        });
        self.compacted = Some((summary, through));
        Ok(())
    }
}
