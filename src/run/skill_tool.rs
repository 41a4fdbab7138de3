//! Skills offered as a catalog (`skills: { mode: catalog }`): the run's
//! [`SkillCatalog`] (the skills its agent may load, resolved when the run
//! is prepared) and the tool `load_skill` that returns one of them when the
//! model asks. The tool joins the run's `ToolSet` like the memory and agent
//! tools, so the engine shows it to the model, validates its arguments,
//! emits its `tool_call` and `tool_result`, and gates it by `approve:` as
//! any tool. Each skill it loads is recorded as a `skills_activated` event
//! (`how: loaded`) sent on the run's event channel during the call, so it
//! comes between the call and its result.
//!
//! May depend on `config`, `engine` (its `ActiveSkills`), `skills`, `tools`
//! and `types`.

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::json;
use tokio::sync::mpsc::WeakUnboundedSender;

use crate::config::{Agent, SkillsMode};
use crate::engine::ActiveSkills;
use crate::skills::Skill;
use crate::skills::catalog::{catalog_message, catalog_skills, loaded_text};
use crate::tools::{Tool, ToolContext, ToolError};
use crate::types::{RunEvent, SkillActivation, ToolSpec};

pub use crate::skills::catalog::LOAD_SKILL;

/// The skills one run may load, and the message that lists them.
#[derive(Debug, Clone)]
pub struct SkillCatalog {
    /// Each skill's name and what loading it returns, in catalog order.
    skills: Arc<[(String, String)]>,
    /// The `[Skills]` system message listing them.
    message: String,
}

impl SkillCatalog {
    /// The catalog of a run of `agent` over the snapshot's skills `all`:
    /// `None` when the agent's skills are injected (`mode: inject`), or
    /// none is offered (`skills: none`, or no skill to list). An unknown
    /// skill name is an error listing the known ones.
    pub fn offered(all: &[Skill], agent: &Agent) -> Result<Option<SkillCatalog>, String> {
        if agent.skills_mode != SkillsMode::Catalog {
            return Ok(None);
        }
        let listed = catalog_skills(all, &agent.skills)?;
        if listed.is_empty() {
            return Ok(None);
        }
        Ok(Some(SkillCatalog {
            message: catalog_message(&listed),
            skills: listed
                .iter()
                .map(|s| (s.name.clone(), loaded_text(s)))
                .collect(),
        }))
    }

    /// Whether a run of `agent` gets a catalog (and `load_skill`), as
    /// [`SkillCatalog::offered`] says, without building it.
    pub fn offers(all: &[Skill], agent: &Agent) -> bool {
        agent.skills_mode == SkillsMode::Catalog
            && catalog_skills(all, &agent.skills).is_ok_and(|listed| !listed.is_empty())
    }

    /// The names it lists, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.skills.iter().map(|(name, _)| name.as_str())
    }

    /// The skills as the engine puts them in the context: the catalog
    /// message, announced as `how: catalog`.
    pub fn active(&self) -> ActiveSkills {
        ActiveSkills {
            names: self.names().map(str::to_string).collect(),
            how: SkillActivation::Catalog,
            message: self.message.clone(),
        }
    }

    /// The `load_skill` tool over this catalog. With `events` (the run's
    /// event channel, held weakly so the run's end still closes it), each
    /// load is announced there.
    pub fn tool(&self, events: Option<WeakUnboundedSender<RunEvent>>) -> Arc<dyn Tool> {
        Arc::new(LoadSkill {
            spec: ToolSpec {
                name: LOAD_SKILL.into(),
                description: "Loads the instructions of one skill listed under [Skills], by its name. Call it when the task fits that skill, before acting.".into(),
                parameters: json!({
                    "type": "object",
                    "properties": {
                        "name": {
                            "type": "string",
                            "description": "The skill's name, as listed under [Skills].",
                            "examples": [self.skills.first().map_or("", |(name, _)| name.as_str())]
                        }
                    },
                    "required": ["name"],
                    "additionalProperties": false
                }),
            },
            catalog: self.clone(),
            events,
        })
    }
}

struct LoadSkill {
    spec: ToolSpec,
    catalog: SkillCatalog,
    events: Option<WeakUnboundedSender<RunEvent>>,
}

impl Tool for LoadSkill {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call<'a>(
        &'a self,
        args: serde_json::Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            // The schema makes `name` a string.
            let asked = args["name"].as_str().unwrap_or_default().trim();
            let Some((name, text)) = self.catalog.skills.iter().find(|(n, _)| n == asked) else {
                let names: Vec<&str> = self.catalog.names().collect();
                return Err(ToolError::Failed(format!(
                    "`{asked}` is not a skill this agent may load; it may load: {}",
                    names.join(", ")
                )));
            };
            if let Some(events) = self.events.as_ref().and_then(|e| e.upgrade()) {
                let _ = events.send(RunEvent::SkillsActivated {
                    skills: vec![name.clone()],
                    how: SkillActivation::Loaded,
                });
            }
            Ok(text.clone())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(yaml: &str) -> Agent {
        let (agent, diags) = crate::config::agent::parse_agent(
            "a",
            std::path::Path::new("agents/a.yaml"),
            yaml,
            String::new(),
        );
        agent.unwrap_or_else(|| panic!("{diags:?}"))
    }

    fn ctx() -> ToolContext {
        ToolContext {
            root: std::env::temp_dir(),
            cancel: Default::default(),
            output_cap: 1024,
            sandbox: Default::default(),
        }
    }

    #[tokio::test]
    async fn loads_only_listed_skills_and_announces_each_load() {
        let mut hidden = Skill::new("h", "Hidden.", "hidden body");
        hidden.hidden = true;
        let all = [
            Skill::new("pdf", "PDF files.", "Use pypdf."),
            Skill::new("docx", "Word files.", "Use python-docx."),
            hidden,
        ];
        let catalog_agent = agent("model: test\nprompt: p\nskills: { mode: catalog }\n");
        let catalog = SkillCatalog::offered(&all, &catalog_agent)
            .unwrap()
            .unwrap();
        assert_eq!(catalog.names().collect::<Vec<_>>(), ["pdf", "docx"]);
        let active = catalog.active();
        assert_eq!(active.how, SkillActivation::Catalog);
        assert!(active.message.contains("- pdf: PDF files."));
        assert!(!active.message.contains("pypdf"));

        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let tool = catalog.tool(Some(tx.downgrade()));
        let got = tool.call(json!({"name": "pdf"}), &ctx()).await.unwrap();
        assert_eq!(got, "[Skill: pdf]\nUse pypdf.");
        assert_eq!(
            rx.try_recv().unwrap(),
            RunEvent::SkillsActivated {
                skills: vec!["pdf".into()],
                how: SkillActivation::Loaded
            }
        );
        let refused = tool.call(json!({"name": "h"}), &ctx()).await.unwrap_err();
        assert_eq!(
            refused.to_string(),
            "`h` is not a skill this agent may load; it may load: pdf, docx"
        );
        assert!(rx.try_recv().is_err(), "a refused load announces nothing");
        // The tool holds the channel weakly: the run's end closes it.
        drop(tx);
        assert!(rx.recv().await.is_none());
        assert!(tool.call(json!({"name": "docx"}), &ctx()).await.is_ok());

        let inject = agent("model: test\nprompt: p\nskills: { mode: inject }\n");
        assert!(SkillCatalog::offered(&all, &inject).unwrap().is_none());
        let none = agent("model: test\nprompt: p\nskills: { mode: catalog, use: none }\n");
        assert!(SkillCatalog::offered(&all, &none).unwrap().is_none());
        let pinned = agent("model: test\nprompt: p\nskills: { mode: catalog, use: [h] }\n");
        let pinned = SkillCatalog::offered(&all, &pinned).unwrap().unwrap();
        assert_eq!(pinned.names().collect::<Vec<_>>(), ["h"]);
    }
}
