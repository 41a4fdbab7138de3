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
        panic!("not telegram: {:?}", channel.platform)
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

#[test]
fn a_discord_channel_loads_with_its_public_key_checked() {
    let key = "ab".repeat(32);
    let (channel, diags) = parse(
        &format!(
            "agent: helper\nallow: {{ users: [\"42\"] }}\ndiscord:\n  token: ${{DC}}\n  api_url: http://127.0.0.1:9/api/v10\n  public_key: {key}\n"
        ),
        &[("DC", "bot-token")],
    );
    assert!(diags.is_empty(), "{}", messages(&diags));
    let PlatformConfig::Discord(d) = channel.unwrap().platform else {
        panic!("a discord channel")
    };
    assert_eq!(d.token, "bot-token");
    assert_eq!(d.api_url, "http://127.0.0.1:9/api/v10");
    assert_eq!(d.public_key, Some([0xab; 32]));
    let (channel, diags) = parse(
        "agent: helper\nallow: { anyone: true }\ndiscord:\n  token: ${DC}\n  public_key: xyz\n",
        &[("DC", "t")],
    );
    assert!(channel.is_none());
    assert!(
        messages(&diags).contains("5:15: `discord.public_key` \"xyz\" is not 64 hex digits"),
        "{}",
        messages(&diags)
    );
    let (_, diags) = parse(
        "agent: helper\nallow: { anyone: true }\ndiscord:\n  token: literal\n",
        &[],
    );
    assert!(messages(&diags).contains("`discord.token` is a secret"));
}

const EMAIL: &str = "agent: helper\nallow: { users: [\"Alice@Example.com\"] }\nemail:\n  address: agent@example.com\n  imap:\n    host: imap.example.com\n    password: ${IMAP_PW}\n  smtp:\n    host: smtp.example.com\n    tls: starttls\n    username: agent\n    password: ${SMTP_PW}\n";

#[test]
fn an_email_channel_loads_with_defaults() {
    let (channel, diags) = parse(EMAIL, &[("IMAP_PW", "i"), ("SMTP_PW", "s")]);
    assert!(diags.is_empty(), "{}", messages(&diags));
    let channel = channel.unwrap();
    assert!(channel.allow.admits("alice@example.com", None));
    let PlatformConfig::Email(e) = channel.platform else {
        panic!("an email channel")
    };
    assert_eq!(e.address, "agent@example.com");
    assert_eq!(e.imap.mailbox, "INBOX");
    assert_eq!(e.imap.poll, email::DEFAULT_POLL);
    let imap = &e.imap.server;
    assert_eq!(
        (
            imap.host.as_str(),
            imap.port,
            imap.tls,
            imap.username.as_str(),
            imap.password.as_str()
        ),
        (
            "imap.example.com",
            993,
            email::Tls::Tls,
            "agent@example.com",
            "i"
        )
    );
    let smtp = &e.smtp;
    assert_eq!(
        (
            smtp.port,
            smtp.tls,
            smtp.username.as_str(),
            smtp.password.as_str()
        ),
        (587, email::Tls::StartTls, "agent", "s")
    );
}

#[test]
fn email_passwords_are_secrets_where_they_are_written() {
    let raw = EMAIL.replace("${SMTP_PW}", "hunter2");
    let (channel, diags) = parse(&raw, &[("IMAP_PW", "i")]);
    assert!(channel.is_none());
    let m = messages(&diags);
    assert!(
        m.starts_with("12:15: `email.smtp.password` is a secret: write it as `${VAR}`"),
        "{m}"
    );
    let raw = EMAIL.replace("    password: ${IMAP_PW}\n", "");
    let (_, diags) = parse(&raw, &[("SMTP_PW", "s")]);
    let m = messages(&diags);
    assert!(
        m.contains("`email.imap.password` is required; write it as `password: ${VAR}`"),
        "{m}"
    );
}

#[test]
fn email_without_tls_only_to_this_machine() {
    let raw = EMAIL.replace("    tls: starttls\n", "    tls: none\n");
    let (channel, diags) = parse(&raw, &[("IMAP_PW", "i"), ("SMTP_PW", "s")]);
    assert!(channel.is_none());
    let m = messages(&diags);
    assert!(
        m.contains("10:10: `email.smtp.tls: none` is allowed only to 127.0.0.1 or localhost: to smtp.example.com"),
        "{m}"
    );
    let raw = raw.replace("smtp.example.com", "127.0.0.1");
    let (channel, diags) = parse(&raw, &[("IMAP_PW", "i"), ("SMTP_PW", "s")]);
    assert!(diags.is_empty(), "{}", messages(&diags));
    let PlatformConfig::Email(e) = channel.unwrap().platform else {
        panic!("an email channel")
    };
    assert_eq!((e.smtp.tls, e.smtp.port), (email::Tls::None, 587));
}

#[test]
fn email_problems_are_located() {
    let raw = "agent: helper\nallow: { anyone: true }\nemail:\n  address: not-an-address\n  imap:\n    host: imap.example.com\n    tls: ssl\n    poll: soon\n    password: ${P}\n";
    let (channel, diags) = parse(raw, &[("P", "p")]);
    assert!(channel.is_none());
    let m = messages(&diags);
    assert!(
        m.contains("4:12: `email.address`: \"not-an-address\" is not an email address"),
        "{m}"
    );
    assert!(m.contains("7:10: `email.imap.tls` is \"ssl\""), "{m}");
    assert!(
        m.contains("8:11: `email.imap.poll`: invalid duration"),
        "{m}"
    );
    assert!(m.contains("`email.smtp` is required"), "{m}");
}
