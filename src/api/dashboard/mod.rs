//! The web dashboard at `/` (issue #17): one HTML shell, one script, one
//! style sheet and an icon, embedded in the binary (`include_str!`), no
//! CDN, no build step. The shell holds no data: the script reads
//! everything from the JSON API with `fetch`, sending the bearer token the
//! page asks for when the API answers 401 (kept in `sessionStorage`, never
//! in a cookie, so there is nothing for another site to ride on), and reads
//! a run's events from its SSE stream with a stream reader. The chat page
//! talks through the session routes (a message's turn is a run whose
//! events it streams); the lists (agents, runs, schedules) poll the API
//! every few seconds while shown, as there is no stream of list changes.
//!
//! These routes sit behind the same guard as the API (`guard`: Host,
//! Origin, `Sec-Fetch-Site`) but need no token. Every answer carries a
//! strict `Content-Security-Policy` (`default-src 'self'`, no inline
//! script or style, `frame-ancestors 'none'`) and `X-Frame-Options: DENY`,
//! so no other page can frame the dashboard and trick a click on Approve;
//! the script inserts run text as text nodes, never as HTML.
//!
//! Depends on nothing of ours but the API's router types.

use axum::Router;
use axum::http::{HeaderName, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// The policy of every dashboard answer: only this origin's script, style,
/// images and connections; no plugins, no `<base>`, no framing.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self'; img-src 'self'; connect-src 'self'; object-src 'none'; \
     base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// One embedded file: where it is served, its content type, its bytes.
struct Asset {
    path: &'static str,
    content_type: &'static str,
    body: &'static str,
}

const ASSETS: &[Asset] = &[
    Asset {
        path: "/",
        content_type: "text/html; charset=utf-8",
        body: include_str!("assets/index.html"),
    },
    Asset {
        path: "/dashboard/app.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("assets/app.js"),
    },
    Asset {
        path: "/dashboard/chat.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("assets/chat.js"),
    },
    Asset {
        path: "/dashboard/app.css",
        content_type: "text/css; charset=utf-8",
        body: include_str!("assets/app.css"),
    },
    Asset {
        path: "/dashboard/icon.svg",
        content_type: "image/svg+xml",
        body: include_str!("assets/icon.svg"),
    },
];

/// The dashboard's routes, for the guarded part of the API's router.
pub(super) fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    ASSETS.iter().fold(Router::new(), |router, asset| {
        router.route(asset.path, get(move || async move { serve(asset) }))
    })
}

fn serve(asset: &'static Asset) -> Response {
    let headers = [
        (
            header::CONTENT_TYPE,
            HeaderValue::from_static(asset.content_type),
        ),
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        ),
        (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
        (
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        ),
        // Revalidated each time, so a new build's assets are used at once.
        (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        (
            HeaderName::from_static("cross-origin-opener-policy"),
            HeaderValue::from_static("same-origin"),
        ),
        (
            HeaderName::from_static("cross-origin-resource-policy"),
            HeaderValue::from_static("same-origin"),
        ),
    ];
    (headers, asset.body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shell_loads_only_its_own_assets_and_no_inline_script() {
        let html = ASSETS[0].body;
        assert!(html.contains(r#"<script src="/dashboard/app.js" defer></script>"#));
        assert!(html.contains(r#"<link rel="stylesheet" href="/dashboard/app.css">"#));
        for inline in ["<script>", "onclick=", "onload=", "style=", "<style"] {
            assert!(!html.contains(inline), "inline `{inline}` in the shell");
        }
        assert!(!html.contains("http://") && !html.contains("https://"));
        assert_eq!(html.matches("<h1").count(), 1);
    }

    #[test]
    fn the_scripts_never_write_html() {
        for asset in ASSETS.iter().filter(|a| a.path.ends_with(".js")) {
            for sink in [
                "innerHTML",
                "outerHTML",
                "insertAdjacentHTML",
                "document.write",
                "eval(",
            ] {
                assert!(!asset.body.contains(sink), "{} uses `{sink}`", asset.path);
            }
        }
    }
}
