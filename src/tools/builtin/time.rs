//! The `current_time` tool: the current date and time in RFC 3339 with the
//! weekday, in UTC or in the daemon's local time zone. (No IANA zone
//! database is linked, so other zones are refused with a clear message.)

use chrono::{DateTime, Local, SecondsFormat, Utc};
use futures::future::BoxFuture;
use serde_json::json;

use super::optional_str;
use crate::tools::{Tool, ToolContext, ToolError};
use crate::types::ToolSpec;

/// Which clock to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Zone {
    Utc,
    Local,
}

fn parse_zone(tz: Option<&str>) -> Result<Zone, ToolError> {
    match tz.map(str::trim) {
        None | Some("") => Ok(Zone::Utc),
        Some(s) if s.eq_ignore_ascii_case("utc") || s == "Z" => Ok(Zone::Utc),
        Some(s) if s.eq_ignore_ascii_case("local") => Ok(Zone::Local),
        Some(other) => Err(ToolError::InvalidArguments(format!(
            "timezone {other:?} is not supported: use \"UTC\" or \"local\" (the machine's zone), \
             then convert to other zones yourself"
        ))),
    }
}

/// `now` rendered for `zone`, e.g. `2025-03-07T09:30:00Z (Friday, UTC)`.
fn render(now: DateTime<Utc>, zone: Zone) -> String {
    match zone {
        Zone::Utc => format!(
            "{} ({}, UTC)",
            now.to_rfc3339_opts(SecondsFormat::Secs, true),
            now.format("%A")
        ),
        Zone::Local => {
            let local = now.with_timezone(&Local);
            format!(
                "{} ({}, local time, UTC{})",
                local.to_rfc3339_opts(SecondsFormat::Secs, false),
                local.format("%A"),
                local.format("%:z")
            )
        }
    }
}

/// The `current_time` tool.
#[derive(Debug, Clone)]
pub struct CurrentTimeTool {
    spec: ToolSpec,
}

impl CurrentTimeTool {
    pub fn new() -> Self {
        let spec = ToolSpec {
            name: "current_time".into(),
            description: "Returns the current date and time (RFC 3339, with the weekday). \
                Use it whenever you need today's date or the time; do not guess."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "timezone": {
                        "type": "string",
                        "enum": ["UTC", "local"],
                        "description": "\"UTC\" (the default) or \"local\" for the machine's time zone.",
                        "examples": ["UTC"]
                    }
                },
                "required": [],
                "additionalProperties": false
            }),
        };
        CurrentTimeTool { spec }
    }
}

impl Default for CurrentTimeTool {
    fn default() -> Self {
        Self::new()
    }
}

impl Tool for CurrentTimeTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call<'a>(
        &'a self,
        args: serde_json::Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            let zone = parse_zone(optional_str(&args, "timezone")?)?;
            Ok(render(Utc::now(), zone))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn ctx() -> ToolContext {
        ToolContext {
            root: std::env::temp_dir(),
            cancel: Default::default(),
            output_cap: 1024,
            sandbox: Default::default(),
        }
    }

    #[test]
    fn renders_utc_with_weekday() {
        let t = Utc.with_ymd_and_hms(2025, 3, 7, 9, 30, 0).unwrap();
        assert_eq!(render(t, Zone::Utc), "2025-03-07T09:30:00Z (Friday, UTC)");
        let local = render(t, Zone::Local);
        assert!(local.contains("local time"), "{local}");
    }

    #[test]
    fn zones() {
        assert_eq!(parse_zone(None).unwrap(), Zone::Utc);
        assert_eq!(parse_zone(Some("utc")).unwrap(), Zone::Utc);
        assert_eq!(parse_zone(Some("Local")).unwrap(), Zone::Local);
        let e = parse_zone(Some("Europe/Paris")).unwrap_err().to_string();
        assert!(e.contains("Europe/Paris") && e.contains("\"UTC\""), "{e}");
    }

    #[tokio::test]
    async fn the_tool_returns_a_parseable_time() {
        let tool = CurrentTimeTool::new();
        let out = tool.call(json!({}), &ctx()).await.unwrap();
        let stamp = out.split(' ').next().unwrap();
        let parsed = DateTime::parse_from_rfc3339(stamp).unwrap();
        assert!(
            (Utc::now() - parsed.with_timezone(&Utc))
                .num_seconds()
                .abs()
                < 60
        );
        let out = tool
            .call(json!({"timezone": "local"}), &ctx())
            .await
            .unwrap();
        assert!(DateTime::parse_from_rfc3339(out.split(' ').next().unwrap()).is_ok());
        let bad = tool.call(json!({"timezone": "PST"}), &ctx()).await;
        assert!(matches!(bad, Err(ToolError::InvalidArguments(_))));
    }
}
