#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test: a panic is its failure report"
)]

use std::sync::Mutex;

use serde_json::json;

use super::*;
use crate::types::Usage;

/// A provider answering from a script, each answer streamed in pieces of
/// 5 characters; it records the requests it got.
struct Scripted {
    answers: Mutex<Vec<String>>,
    requests: Mutex<Vec<ChatRequest>>,
}

impl Scripted {
    fn new(answers: &[&str]) -> Arc<Scripted> {
        Arc::new(Scripted {
            answers: Mutex::new(answers.iter().rev().map(|a| a.to_string()).collect()),
            requests: Mutex::new(vec![]),
        })
    }
}

impl Provider for Scripted {
    fn stream<'a>(
        &'a self,
        request: &'a ChatRequest,
        on_delta: &'a mut (dyn FnMut(Delta) + Send),
    ) -> BoxFuture<'a, Result<ModelTurn, ProviderError>> {
        self.requests.lock().unwrap().push(request.clone());
        let answer = self
            .answers
            .lock()
            .unwrap()
            .pop()
            .expect("a scripted answer");
        Box::pin(async move {
            let chars: Vec<char> = answer.chars().collect();
            for piece in chars.chunks(5) {
                on_delta(Delta::Text(piece.iter().collect()));
            }
            Ok(ModelTurn {
                text: answer,
                usage: Usage {
                    input_tokens: Some(10),
                    output_tokens: Some(3),
                    cached_input_tokens: None,
                },
                finish_reason: Some("stop".into()),
                ..ModelTurn::default()
            })
        })
    }
}

fn tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: "calculator".into(),
            description: "Evaluates an expression.".into(),
            parameters: json!({
                "type": "object",
                "properties": { "expression": { "type": "string" } },
                "required": ["expression"],
                "additionalProperties": false,
            }),
        },
        ToolSpec {
            name: "now".into(),
            description: "The time.".into(),
            parameters: json!({ "type": "object" }),
        },
    ]
}

fn request(messages: Vec<Message>) -> ChatRequest {
    ChatRequest {
        model: "m".into(),
        messages,
        tools: tools(),
        temperature: None,
        max_tokens: None,
        output_schema: None,
        cache_key: Some("a".into()),
    }
}

/// One call through `TextTools` over `answers`: the result, the text
/// deltas passed on, and the requests the inner provider got.
async fn run(
    answers: &[&str],
    req: &ChatRequest,
) -> (Result<ModelTurn, ProviderError>, String, Vec<ChatRequest>) {
    let inner = Scripted::new(answers);
    let wrapper = TextTools::new(inner.clone());
    let mut text = String::new();
    let result = wrapper
        .stream(req, &mut |d| {
            if let Delta::Text(t) = d {
                text.push_str(&t);
            }
        })
        .await;
    let requests = inner.requests.lock().unwrap().clone();
    (result, text, requests)
}

const CALC: &str =
    r#"<tool_call>{"name": "calculator", "arguments": {"expression": "6*7"}}</tool_call>"#;

#[test]
fn the_request_describes_the_tools_and_renders_the_history_as_text() {
    let req = request(vec![
        Message::system("be brief"),
        Message::user("what is 6*7 and the time?"),
        Message::Assistant {
            provider_items: None,
            content: "Computing.".into(),
            tool_calls: vec![
                ToolCall {
                    id: "c1".into(),
                    name: "calculator".into(),
                    arguments: r#"{"expression":"6*7"}"#.into(),
                },
                ToolCall {
                    id: "c2".into(),
                    name: "now".into(),
                    arguments: "not json".into(),
                },
            ],
        },
        Message::Tool {
            tool_call_id: "c1".into(),
            name: "calculator".into(),
            content: "42".into(),
            is_error: false,
        },
        Message::Tool {
            tool_call_id: "c2".into(),
            name: "now".into(),
            content: "bad arguments".into(),
            is_error: true,
        },
    ]);
    let out = rewrite_request(&req);
    assert!(out.tools.is_empty());
    assert_eq!(out.cache_key.as_deref(), Some("a"));
    assert_eq!(out.messages.len(), 5, "{:#?}", out.messages);
    assert_eq!(out.messages[0], Message::system("be brief"));
    let Message::System { content: described } = &out.messages[1] else {
        panic!("{:?}", out.messages[1]);
    };
    for part in [
        "## calculator",
        "Evaluates an expression.",
        r#""required":["expression"]"#,
        "## now",
        "<tool_call>{\"name\": \"TOOL_NAME\", \"arguments\": {...}}</tool_call>",
    ] {
        assert!(described.contains(part), "{part:?} missing in {described}");
    }
    assert_eq!(out.messages[2], Message::user("what is 6*7 and the time?"));
    assert_eq!(
        out.messages[3],
        Message::Assistant {
            provider_items: None,
            content: "Computing.\n<tool_call>{\"name\": \"calculator\", \"arguments\": {\"expression\":\"6*7\"}}</tool_call>\n<tool_call>{\"name\": \"now\", \"arguments\": {}}</tool_call>".into(),
            tool_calls: vec![],
        }
    );
    assert_eq!(
        out.messages[4],
        Message::user(
            "<tool_result name=\"calculator\" id=\"c1\">\n42\n</tool_result>\n<tool_result name=\"now\" id=\"c2\" error=\"true\">\nbad arguments\n</tool_result>"
        )
    );
    // The rendered calls read back as the calls they were.
    let Message::Assistant { content, .. } = &out.messages[3] else {
        unreachable!()
    };
    let parsed = parse(content);
    assert_eq!(
        check_calls(&parsed, &req.tools).unwrap(),
        [
            (
                "calculator".to_string(),
                r#"{"expression":"6*7"}"#.to_string()
            ),
            ("now".to_string(), "{}".to_string())
        ]
    );
    // The answer's schema is not imposed while a call may be due.
    let schema = json!({ "type": "object" });
    let mut with_schema = req.clone();
    with_schema.output_schema = Some(schema.clone());
    assert_eq!(rewrite_request(&with_schema).output_schema, None);
    with_schema.tools.clear();
    assert_eq!(rewrite_request(&with_schema).output_schema, Some(schema));
    // Without a system message, the description comes first.
    let out = rewrite_request(&request(vec![Message::user("hi")]));
    assert!(matches!(&out.messages[0], Message::System { content } if content.contains("## now")));
    assert_eq!(out.messages[1], Message::user("hi"));
}

#[tokio::test]
async fn a_call_in_the_text_becomes_a_tool_call_and_its_markup_is_not_streamed() {
    let answer = format!("Let me compute.\n{CALC}\n");
    let (turn, streamed, requests) = run(&[&answer], &request(vec![Message::user("6*7?")])).await;
    let turn = turn.unwrap();
    assert_eq!(streamed, "Let me compute.\n\n");
    assert_eq!(turn.text, "Let me compute.");
    assert_eq!(turn.tool_calls.len(), 1);
    assert!(turn.tool_calls[0].id.starts_with("text_call_"));
    assert_eq!(turn.tool_calls[0].name, "calculator");
    assert_eq!(turn.tool_calls[0].arguments, r#"{"expression":"6*7"}"#);
    assert_eq!(requests.len(), 1);
    assert!(requests[0].tools.is_empty());
}

#[tokio::test]
async fn two_calls_keep_their_order_and_get_distinct_ids() {
    let answer = format!("{CALC}\n```json\n{{\"name\": \"now\", \"arguments\": {{}}}}\n```");
    let (turn, streamed, _) = run(&[&answer], &request(vec![Message::user("go")])).await;
    let turn = turn.unwrap();
    assert_eq!(streamed.trim(), "");
    let names: Vec<&str> = turn.tool_calls.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["calculator", "now"]);
    assert_ne!(turn.tool_calls[0].id, turn.tool_calls[1].id);
}

#[tokio::test]
async fn an_unknown_tool_gets_one_repair_and_the_usage_of_both_calls() {
    let bad = r#"<tool_call>{"name": "calc", "arguments": {"expression": "6*7"}}</tool_call>"#;
    let (turn, _, requests) = run(&[bad, CALC], &request(vec![Message::user("go")])).await;
    let turn = turn.unwrap();
    assert_eq!(turn.tool_calls[0].name, "calculator");
    assert_eq!(turn.usage.input_tokens, Some(20));
    assert_eq!(turn.usage.output_tokens, Some(6));
    assert_eq!(requests.len(), 2);
    let repair = &requests[1].messages;
    assert_eq!(
        repair[repair.len() - 2],
        Message::Assistant {
            provider_items: None,
            content: bad.into(),
            tool_calls: vec![]
        }
    );
    let told = repair.last().unwrap().content();
    assert!(
        told.contains("tool call 1: there is no tool `calc`; the tools are: calculator, now"),
        "{told}"
    );
    assert!(
        told.contains("<tool_call>{\"name\": \"TOOL_NAME\""),
        "{told}"
    );
}

#[tokio::test]
async fn arguments_off_schema_twice_fail_saying_what_was_wrong() {
    let bad = r#"<tool_call>{"name": "calculator", "arguments": {"expr": 1}}</tool_call>"#;
    let (result, _, requests) = run(&[bad, bad], &request(vec![Message::user("go")])).await;
    assert_eq!(requests.len(), 2);
    let err = result.unwrap_err();
    assert!(matches!(err, ProviderError::Stream(_)), "{err:?}");
    let m = err.to_string();
    assert!(
        m.contains("the arguments of `calculator` do not match its schema")
            && m.contains("expression")
            && m.contains("again after being told"),
        "{m}"
    );
    assert!(
        requests[1]
            .messages
            .last()
            .unwrap()
            .content()
            .contains("do not match its schema")
    );
}

#[tokio::test]
async fn junk_inside_the_tags_is_repaired() {
    let bad = "<tool_call>calculator(6*7)</tool_call>";
    let (turn, _, requests) = run(&[bad, CALC], &request(vec![Message::user("go")])).await;
    assert_eq!(turn.unwrap().tool_calls.len(), 1);
    let told = requests[1].messages.last().unwrap().content().to_string();
    assert!(
        told.contains("not valid JSON") && told.contains("calculator(6*7)"),
        "{told}"
    );
}

#[tokio::test]
async fn an_answer_without_calls_and_a_request_without_tools_are_text() {
    let (turn, streamed, _) = run(&["It is 42."], &request(vec![Message::user("go")])).await;
    let turn = turn.unwrap();
    assert_eq!(
        (turn.text.as_str(), streamed.as_str()),
        ("It is 42.", "It is 42.")
    );
    assert!(turn.tool_calls.is_empty());
    let mut bare = request(vec![Message::user("go")]);
    bare.tools.clear();
    let (turn, _, requests) = run(&[CALC], &bare).await;
    let turn = turn.unwrap();
    assert!(turn.tool_calls.is_empty() && turn.text == CALC);
    assert_eq!(requests[0].messages, [Message::user("go")]);
}
