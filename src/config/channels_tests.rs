use std::path::Path;

use super::*;

fn parse(raw: &str, env: &[(&str, &str)]) -> (Option<ChannelConfig>, Vec<Diagnostic>) {
    let lookup = |name: &str| {
        env.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_string())
    };
    let text = interp::interpolate_with(raw, &lookup, interp::Escape::Yaml).unwrap();
    parse_channel(
        "support",
        Path::new("channels/support.yaml"),
        raw,
        &text,
        &["helper".to_string()],
    )
}

fn messages(diags: &[Diagnostic]) -> String {
    diags
        .iter()
        .map(|d| format!("{}:{}: {}", d.line, d.column, d.message))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn a_telegram_channel_loads() {
    let (channel, diags) = parse(
        "agent: helper\nallow: { users: [\"42\", 7] }\ntelegram:\n  token: ${TG_TOKEN}\n  api_url: http://127.0.0.1:9/\n",
        &[("TG_TOKEN", "123:abc")],
    );
    assert!(diags.is_empty(), "{}", messages(&diags));
    let channel = channel.unwrap();
    assert_eq!(channel.agent, "helper");
    assert_eq!(channel.allow.users, vec!["42", "7"]);
    assert!(channel.allow.admits("7", None));
    assert!(!channel.allow.admits("8", Some("-100")));
    assert_eq!(
        (channel.approve_word.as_str(), channel.deny_word.as_str()),
        ("approve", "deny")
    );
    let PlatformConfig::Telegram(t) = channel.platform else {
        panic!("a telegram channel")
    };
    assert_eq!(t.token, "123:abc");
    assert_eq!(t.api_url, "http://127.0.0.1:9");
    assert_eq!(t.mode, telegram::TelegramMode::Polling);
}

#[test]
fn a_literal_token_is_refused_where_it_is_written() {
    let (channel, diags) = parse(
        "agent: helper\nallow: { anyone: true }\ntelegram:\n  token: 123:abc\n",
        &[],
    );
    assert!(channel.is_none());
    let m = messages(&diags);
    assert!(
        m.starts_with("4:10: `telegram.token` is a secret: write it as `${VAR}`"),
        "{m}"
    );
}

#[test]
fn every_problem_is_located() {
    let (channel, diags) = parse(
        "agent: nobody\nallow: {}\napprove_word: yes please\ntelegram:\n  token: ${T}\n  mode: hook\n",
        &[("T", "x")],
    );
    assert!(channel.is_none());
    let m = messages(&diags);
    assert!(m.contains("1:8: `agent`: there is no agent `nobody` (no agents/nobody.yaml); the agents are: helper"), "{m}");
    assert!(m.contains("2:8: `allow` lets nobody in"), "{m}");
    assert!(m.contains("3:15: `approve_word` must be one word"), "{m}");
    assert!(m.contains("6:9: `telegram.mode` is \"hook\""), "{m}");
}

#[test]
fn a_channel_needs_exactly_one_platform_and_known_fields() {
    let (_, diags) = parse("agent: helper\nallow: { anyone: true }\n", &[]);
    assert!(messages(&diags).contains("a channel needs one platform section"));
    let (_, diags) = parse("agent: helper\nalow: {}\n", &[]);
    assert!(
        messages(&diags).contains("unknown field `alow`"),
        "{}",
        messages(&diags)
    );
}

#[test]
fn webhook_mode_needs_a_secret_of_telegrams_alphabet() {
    let (_, diags) = parse(
        "agent: helper\nallow: { anyone: true }\ntelegram:\n  token: ${T}\n  mode: webhook\n",
        &[("T", "x")],
    );
    assert!(messages(&diags).contains("`telegram.webhook_secret` is required"));
    let (_, diags) = parse(
        "agent: helper\nallow: { anyone: true }\ntelegram:\n  token: ${T}\n  mode: webhook\n  webhook_secret: ${S}\n",
        &[("T", "x"), ("S", "no spaces allowed")],
    );
    assert!(
        messages(&diags).contains("may hold only A-Z"),
        "{}",
        messages(&diags)
    );
}
