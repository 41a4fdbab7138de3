//! Markdown, as models write it, turned into a platform's formatting:
//! Telegram's HTML subset (`parse_mode: HTML`) and Slack's mrkdwn. Discord
//! renders Markdown itself, and email is sent as the Markdown text, which
//! reads as plain text. Parsed with `pulldown-cmark`, so a stray `*` or
//! `<` never breaks a message: everything that is not markup is escaped.

use pulldown_cmark::{CodeBlockKind, Event, HeadingLevel, Parser, Tag, TagEnd};

/// How a platform writes each kind of markup.
struct Style {
    bold: (&'static str, &'static str),
    italic: (&'static str, &'static str),
    strike: (&'static str, &'static str),
    code: (&'static str, &'static str),
    escape: fn(&str, &mut String),
    pre: fn(Option<&str>, &str, &mut String),
    link: fn(&str, &str, &mut String),
}

const TELEGRAM: Style = Style {
    bold: ("<b>", "</b>"),
    italic: ("<i>", "</i>"),
    strike: ("<s>", "</s>"),
    code: ("<code>", "</code>"),
    escape: escape_html,
    pre: |lang, code, out| match lang {
        Some(lang) if !lang.is_empty() => {
            out.push_str("<pre><code class=\"language-");
            escape_html(lang, out);
            out.push_str("\">");
            escape_html(code, out);
            out.push_str("</code></pre>");
        }
        _ => {
            out.push_str("<pre>");
            escape_html(code, out);
            out.push_str("</pre>");
        }
    },
    link: |text, url, out| {
        out.push_str("<a href=\"");
        escape_html(url, out);
        out.push_str("\">");
        out.push_str(text);
        out.push_str("</a>");
    },
};

const SLACK: Style = Style {
    bold: ("*", "*"),
    italic: ("_", "_"),
    strike: ("~", "~"),
    code: ("`", "`"),
    escape: escape_slack,
    pre: |_, code, out| {
        out.push_str("```\n");
        escape_slack(code, out);
        out.push_str("```");
    },
    link: |text, url, out| {
        out.push('<');
        escape_slack(url, out);
        out.push('|');
        out.push_str(text);
        out.push('>');
    },
};

/// Markdown as Telegram HTML (`parse_mode: "HTML"`).
pub fn telegram_html(markdown: &str) -> String {
    render(markdown, &TELEGRAM)
}

/// Markdown as Slack mrkdwn.
pub fn slack_mrkdwn(markdown: &str) -> String {
    render(markdown, &SLACK)
}

/// `text` with Telegram HTML's special characters escaped.
pub fn html_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    escape_html(text, &mut out);
    out
}

fn escape_html(text: &str, out: &mut String) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
}

/// Slack's three control characters; everything else is text.
fn escape_slack(text: &str, out: &mut String) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
}

fn render(markdown: &str, style: &Style) -> String {
    let mut out = String::with_capacity(markdown.len() + 32);
    // Text of the innermost link or code block being gathered.
    let mut link: Option<(String, String)> = None;
    let mut code_block: Option<(Option<String>, String)> = None;
    let mut lists: Vec<Option<u64>> = Vec::new();
    for event in Parser::new(markdown) {
        let sink: &mut String = match &mut link {
            Some((_, text)) => text,
            None => &mut out,
        };
        match event {
            Event::Start(Tag::CodeBlock(kind)) => {
                let lang = match kind {
                    CodeBlockKind::Fenced(l) => {
                        Some(l.split_whitespace().next().unwrap_or("").to_string())
                    }
                    CodeBlockKind::Indented => None,
                };
                code_block = Some((lang, String::new()));
            }
            Event::End(TagEnd::CodeBlock) => {
                if let Some((lang, code)) = code_block.take() {
                    (style.pre)(lang.as_deref(), &code, sink);
                    sink.push_str("\n\n");
                }
            }
            Event::Text(t) if code_block.is_some() => {
                if let Some((_, code)) = &mut code_block {
                    code.push_str(&t);
                }
            }
            Event::Text(t) => (style.escape)(&t, sink),
            Event::Code(t) => {
                sink.push_str(style.code.0);
                (style.escape)(&t, sink);
                sink.push_str(style.code.1);
            }
            Event::Start(Tag::Strong) | Event::Start(Tag::Heading { .. }) => {
                sink.push_str(style.bold.0)
            }
            Event::End(TagEnd::Strong) => sink.push_str(style.bold.1),
            Event::End(TagEnd::Heading(level)) => {
                sink.push_str(style.bold.1);
                sink.push_str(if level == HeadingLevel::H1 {
                    "\n\n"
                } else {
                    "\n"
                });
            }
            Event::Start(Tag::Emphasis) => sink.push_str(style.italic.0),
            Event::End(TagEnd::Emphasis) => sink.push_str(style.italic.1),
            Event::Start(Tag::Strikethrough) => sink.push_str(style.strike.0),
            Event::End(TagEnd::Strikethrough) => sink.push_str(style.strike.1),
            Event::Start(Tag::Link { dest_url, .. })
            | Event::Start(Tag::Image { dest_url, .. }) => {
                link = Some((dest_url.to_string(), String::new()));
            }
            Event::End(TagEnd::Link) | Event::End(TagEnd::Image) => {
                if let Some((url, text)) = link.take() {
                    let text = if text.is_empty() { url.clone() } else { text };
                    (style.link)(&text, &url, &mut out);
                }
            }
            Event::Start(Tag::List(first)) => lists.push(first),
            Event::End(TagEnd::List(_)) => {
                lists.pop();
                if lists.is_empty() {
                    sink.push('\n');
                }
            }
            Event::Start(Tag::Item) => {
                sink.push_str(&"  ".repeat(lists.len().saturating_sub(1)));
                match lists.last_mut() {
                    Some(Some(n)) => {
                        sink.push_str(&format!("{n}. "));
                        *n += 1;
                    }
                    _ => sink.push_str("• "),
                }
            }
            Event::End(TagEnd::Item) => sink.push('\n'),
            Event::End(TagEnd::Paragraph) => {
                if lists.is_empty() {
                    sink.push_str("\n\n");
                } else {
                    sink.push('\n');
                }
            }
            Event::Start(Tag::BlockQuote(_)) => sink.push_str("> "),
            Event::SoftBreak | Event::HardBreak => sink.push('\n'),
            Event::Rule => sink.push_str("──────\n\n"),
            Event::Html(t) | Event::InlineHtml(t) => (style.escape)(&t, sink),
            _ => {}
        }
    }
    let trimmed = out.trim_end().len();
    out.truncate(trimmed);
    // Items end with a line break and lists with another.
    out.replace("\n\n\n", "\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn telegram_gets_html_with_everything_else_escaped() {
        let md = "**Total**: 3 < 4 & `a<b>`\n\n```rust\nfn main() {}\n```\n\nSee [docs](https://x.test/?a=1&b=2).";
        assert_eq!(
            telegram_html(md),
            "<b>Total</b>: 3 &lt; 4 &amp; <code>a&lt;b&gt;</code>\n\n<pre><code class=\"language-rust\">fn main() {}\n</code></pre>\n\nSee <a href=\"https://x.test/?a=1&amp;b=2\">docs</a>."
        );
    }

    #[test]
    fn slack_gets_mrkdwn() {
        let md = "# Report\n\n- **one** _two_\n- [link](https://x.test)\n\n1 < 2";
        assert_eq!(
            slack_mrkdwn(md),
            "*Report*\n\n• *one* _two_\n• <https://x.test|link>\n\n1 &lt; 2"
        );
    }

    #[test]
    fn a_stray_star_is_text() {
        assert_eq!(telegram_html("5 * 3 = 15"), "5 * 3 = 15");
    }
}
