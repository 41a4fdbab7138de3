//! Any bytes as a streamed (OpenAI Responses wire format) and as a whole JSON answer. The
//! first byte says where the network cuts the stream; the answer must not
//! depend on the cut, and nothing may panic.
#![no_main]

use aurad::llm::decode::{Wire, replay_events, replay_whole};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&cut, body)) = data.split_first() else {
        return;
    };
    let whole = replay_events(Wire::OpenAiResponses, &[body]);
    let (a, b) = body.split_at((cut as usize).min(body.len()));
    let split = replay_events(Wire::OpenAiResponses, &[a, b]);
    assert_eq!(
        whole.as_ref().ok(),
        split.as_ref().ok(),
        "the answer changed with the cut at {cut}: {whole:?} vs {split:?}"
    );
    let _ = replay_whole(Wire::OpenAiResponses, body);
});
