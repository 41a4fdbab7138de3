//! The step tree of a pipeline run for `aurad logs`: each step (and its
//! `for_each` items, indented under it) with its state, attempts, time,
//! tokens, cost and child run.

use crate::app::StepRecord;

/// The tree as lines, steps in the order they started.
pub fn step_tree(steps: &[StepRecord]) -> Vec<String> {
    let mut lines = vec!["steps:".to_string()];
    let own = steps.iter().filter(|s| s.item.is_none());
    for step in own {
        lines.push(format!("  {}", step_line(&step.step, step)));
        let mut items: Vec<&StepRecord> = steps
            .iter()
            .filter(|s| s.step == step.step && s.item.is_some())
            .collect();
        items.sort_by_key(|s| s.item);
        for item in items {
            let name = super::render::step_name(&item.step, item.item);
            lines.push(format!("    {}", step_line(&name, item)));
        }
    }
    lines
}

fn step_line(name: &str, step: &StepRecord) -> String {
    let mut line = format!("{name} {}", step.state);
    if step.attempts > 1 {
        line.push_str(&format!(" · {} attempts", step.attempts));
    }
    if let (Some(start), Some(end)) = (step.started_at, step.finished_at) {
        let ms = (end - start).num_milliseconds().max(0);
        line.push_str(&format!(" · {:.3}s", ms as f64 / 1000.0));
    }
    if let (Some(input), Some(output)) = (step.usage.input_tokens, step.usage.output_tokens) {
        line.push_str(&format!(" · {input}+{output} tokens"));
    }
    if let Some(cost) = step.cost_usd {
        line.push_str(&format!(" · ${cost:.4}"));
    }
    if let Some(child) = &step.child_run_id {
        line.push_str(&format!(" · run {child}"));
    }
    if let Some(error) = &step.error {
        line.push_str(&format!(" · {}", super::render::one_line(error, 120)));
    }
    line
}
