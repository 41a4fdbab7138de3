//! Where a model call goes, as its spans name it: the model, and the
//! provider by the wire format it speaks (a file of its own: the run span
//! and the model call spans both read it).

use crate::config::ProviderKind;

/// What a model call's span says about where it goes.
pub struct ModelTarget<'a> {
    /// `provider/model` as the agent names it.
    pub model: &'a str,
    /// The wire format it is asked in and the provider's base URL; `None`
    /// for the `test` model.
    pub endpoint: Option<(ProviderKind, &'a str)>,
}

impl ModelTarget<'_> {
    /// `gen_ai.provider.name`: the well-known value of the wire format,
    /// which is what the attribute discriminates (the telemetry flavour),
    /// not the alias aurad.yaml gives the provider; the alias for `test`.
    pub fn provider_name(&self) -> String {
        match self.endpoint {
            Some((kind, _)) => wire_name(kind).to_string(),
            None => self
                .model
                .split_once('/')
                .map_or(self.model, |(p, _)| p)
                .to_string(),
        }
    }
}

/// The GenAI semantic conventions' well-known `gen_ai.provider.name` of
/// each wire format.
pub(super) fn wire_name(kind: ProviderKind) -> &'static str {
    match kind {
        ProviderKind::OpenAi | ProviderKind::OpenAiResponses => "openai",
        ProviderKind::Anthropic => "anthropic",
        ProviderKind::Gemini => "gcp.gemini",
    }
}
