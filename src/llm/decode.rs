//! Decodes a recorded answer body through a wire format's assembler the way
//! a live answer is read (SSE framing by `eventsource-stream`, then the
//! format's events; or one JSON document), with no network. For the fuzz
//! targets of `fuzz/` and the property tests of `tests/fuzz_props.rs`: the
//! parsers of a provider's untrusted bytes must give an answer or an error,
//! never panic. Depends on `llm` only.

use std::convert::Infallible;

use eventsource_stream::Eventsource;
use futures::StreamExt;

use super::http::{Assemble, Flow};
use super::{Delta, ModelTurn, ProviderError, anthropic, gemini, openai, openai_responses};

/// A provider wire format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    OpenAi,
    OpenAiResponses,
    Anthropic,
    Gemini,
}

/// Reads `chunks` (the body of a `text/event-stream` answer, as the network
/// delivered it) into a turn.
pub fn replay_events(wire: Wire, chunks: &[&[u8]]) -> Result<ModelTurn, ProviderError> {
    match wire {
        Wire::OpenAi => replay::<openai::stream::Assembler>(chunks),
        Wire::OpenAiResponses => replay::<openai_responses::stream::Assembler>(chunks),
        Wire::Anthropic => replay::<anthropic::stream::Assembler>(chunks),
        Wire::Gemini => replay::<gemini::stream::Assembler>(chunks),
    }
}

/// Reads a whole `application/json` answer body into a turn.
pub fn replay_whole(wire: Wire, body: &[u8]) -> Result<ModelTurn, ProviderError> {
    let value = serde_json::from_slice(body)
        .map_err(|e| ProviderError::Stream(format!("invalid JSON response: {e}")))?;
    let mut on_delta = |_: Delta| {};
    match wire {
        Wire::OpenAi => openai::stream::Assembler::parse_full(&value, &mut on_delta),
        Wire::OpenAiResponses => {
            openai_responses::stream::Assembler::parse_full(&value, &mut on_delta)
        }
        Wire::Anthropic => anthropic::stream::Assembler::parse_full(&value, &mut on_delta),
        Wire::Gemini => gemini::stream::Assembler::parse_full(&value, &mut on_delta),
    }
}

fn replay<A: Assemble>(chunks: &[&[u8]]) -> Result<ModelTurn, ProviderError> {
    let body: Vec<Result<Vec<u8>, Infallible>> = chunks.iter().map(|c| Ok(c.to_vec())).collect();
    let mut events = futures::stream::iter(body).eventsource();
    let mut assembler = A::default();
    let mut on_delta = |_: Delta| {};
    futures::executor::block_on(async move {
        while let Some(event) = events.next().await {
            let event = event.map_err(|e| ProviderError::Stream(e.to_string()))?;
            if assembler.feed(&event.event, &event.data, &mut on_delta)? == Flow::Done {
                break;
            }
        }
        assembler.finish()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_openai_stream_replays_into_its_turn() {
        let body = b"data: {\"choices\":[{\"delta\":{\"content\":\"hel\"}}]}\n\n\
                     data: {\"choices\":[{\"delta\":{\"content\":\"lo\"},\"finish_reason\":\"stop\"}]}\n\n\
                     data: [DONE]\n\n";
        let (a, b) = body.split_at(30);
        let turn = replay_events(Wire::OpenAi, &[a, b]).unwrap();
        assert_eq!(turn.text, "hello");
        assert!(replay_events(Wire::Anthropic, &[b"data: {\n\n"]).is_err());
        assert!(replay_whole(Wire::Gemini, b"[").is_err());
    }
}
