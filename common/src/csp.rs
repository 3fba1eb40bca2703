//! The Content-Security-Policy of a build's pages on the content origin.
//!
//! Every page gets [`policy`]: its own origin for everything, inline and `eval` code allowed
//! (games need both), no plugins, `<base>` and forms only on the content origin, and framing
//! only by the content origin unless the team names its hosts. A team extends it in its
//! build's `kiln.toml`:
//!
//! ```toml
//! [csp]
//! connect-src = ["https://api.studio.example", "wss://rt.studio.example"]
//! frame-ancestors = ["https://portal.example"]
//! ```
//!
//! [`check_extension`] checks an extension at build time (directive names, source
//! syntax) and refuses any source that could reach the API origin: its origin itself,
//! wildcards and bare schemes that cover it. The checked extension travels in the signed
//! manifest (`csp`), where serving reads it.

use std::collections::BTreeMap;

/// Directives a team may extend. `base-uri`, `form-action`, `object-src`, `sandbox` and
/// reporting stay Kiln's.
pub const EXTENSIBLE: &[&str] = &[
    "connect-src",
    "script-src",
    "style-src",
    "img-src",
    "font-src",
    "media-src",
    "worker-src",
    "frame-src",
    "manifest-src",
    "frame-ancestors",
];

/// Keyword sources a team may add (quoted as CSP writes them).
const KEYWORDS: &[&str] = &[
    "'self'",
    "'unsafe-inline'",
    "'unsafe-eval'",
    "'wasm-unsafe-eval'",
];

/// The most sources one directive may list, and the longest source.
const MAX_SOURCES: usize = 32;
const MAX_SOURCE_LEN: usize = 256;

/// A build's checked `[csp]` table: directive → extra sources.
pub type Extension = BTreeMap<String, Vec<String>>;

/// The `[csp]` table of a build's `kiln.toml` (as the build's one parse of it read it),
/// checked against `api_origin` (`scheme://host[:port]`). `Ok(empty)` without one.
pub fn check_extension(
    table: Option<&BTreeMap<String, Vec<String>>>,
    api_origin: &str,
) -> Result<Extension, String> {
    let mut out = Extension::new();
    for (directive, sources) in table.cloned().unwrap_or_default() {
        if !EXTENSIBLE.contains(&directive.as_str()) {
            return Err(format!(
                "kiln.toml [csp] {directive:?}: not a directive a build may extend (one of {})",
                EXTENSIBLE.join(", ")
            ));
        }
        if sources.len() > MAX_SOURCES {
            return Err(format!(
                "kiln.toml [csp] {directive}: {} sources, at most {MAX_SOURCES}",
                sources.len()
            ));
        }
        let mut checked = Vec::new();
        for source in sources {
            check_source(&directive, &source, api_origin)?;
            if !checked.contains(&source) {
                checked.push(source);
            }
        }
        if !checked.is_empty() {
            out.insert(directive, checked);
        }
    }
    Ok(out)
}

fn check_source(directive: &str, source: &str, api_origin: &str) -> Result<(), String> {
    let refuse = |why: &str| Err(format!("kiln.toml [csp] {directive} = {source:?}: {why}"));
    if source.is_empty() || source.len() > MAX_SOURCE_LEN {
        return refuse("a source is 1 to 256 characters");
    }
    if source.starts_with('\'') {
        return if KEYWORDS.contains(&source) && directive != "frame-ancestors" {
            Ok(())
        } else {
            refuse(
                "not an allowed keyword ('self', 'unsafe-inline', 'unsafe-eval', 'wasm-unsafe-eval')",
            )
        };
    }
    if matches!(source, "data:" | "blob:") {
        return if directive == "frame-ancestors" {
            refuse("frame-ancestors takes host sources only")
        } else {
            Ok(())
        };
    }
    if !source
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "-._~:/*%?=&".contains(c))
    {
        return refuse("only a host source like https://api.example.com[:port][/path]");
    }
    if source == "*" || source.ends_with(':') {
        return refuse("a wildcard or a bare scheme would include the API origin");
    }
    let Some((scheme, rest)) = source.split_once("://") else {
        return refuse("name the scheme: https://host or wss://host");
    };
    if !matches!(scheme, "https" | "wss" | "http" | "ws") {
        return refuse("scheme must be https, wss, http or ws");
    }
    let authority = rest.split('/').next().unwrap_or("");
    let host = authority
        .rsplit_once(':')
        .filter(|(_, port)| port.chars().all(|c| c.is_ascii_digit() || c == '*'))
        .map_or(authority, |(h, _)| h)
        .to_ascii_lowercase();
    if host.is_empty() || host == "*" {
        return refuse("a host source needs a host");
    }
    if host[1..].contains('*') || (host.starts_with('*') && !host.starts_with("*.")) {
        return refuse("a wildcard may only be the first label (*.example.com)");
    }
    let api = api_origin.split_once("://").map_or(api_origin, |(_, r)| r);
    let api_host = api
        .rsplit_once(':')
        .filter(|(_, port)| port.chars().all(|c| c.is_ascii_digit()))
        .map_or(api, |(h, _)| h)
        .to_ascii_lowercase();
    let covers_api = match host.strip_prefix("*.") {
        Some(suffix) => api_host.ends_with(&format!(".{suffix}")),
        None => host == api_host,
    };
    if covers_api {
        return refuse(&format!(
            "names the Kiln API's host ({api_host}); build pages may not reach the API origin"
        ));
    }
    Ok(())
}

/// The policy of a build's page served from `content_origin`, with a team's `extension`.
pub fn policy(content_origin: &str, extension: &Extension) -> String {
    let base: [(&str, &str); 7] = [
        (
            "default-src",
            "'self' 'unsafe-inline' 'unsafe-eval' data: blob:",
        ),
        ("connect-src", "'self' data: blob:"),
        ("img-src", "'self' data: blob:"),
        ("media-src", "'self' data: blob:"),
        ("worker-src", "'self' blob:"),
        ("frame-ancestors", "'self'"),
        ("object-src", "'none'"),
    ];
    let mut directives: BTreeMap<&str, String> =
        base.iter().map(|(d, v)| (*d, v.to_string())).collect();
    for (directive, sources) in extension {
        if !EXTENSIBLE.contains(&directive.as_str()) {
            continue;
        }
        let current = directives
            .get(directive.as_str())
            .cloned()
            .unwrap_or_else(|| directives["default-src"].clone());
        let extra = sources.join(" ");
        directives.insert(
            EXTENSIBLE
                .iter()
                .find(|d| **d == directive.as_str())
                .expect("checked above"),
            format!("{current} {extra}"),
        );
    }
    let mut out: Vec<String> = directives.iter().map(|(d, v)| format!("{d} {v}")).collect();
    out.push(format!("base-uri {content_origin}"));
    out.push("form-action 'self'".into());
    out.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const API: &str = "https://kiln.example";

    /// A `kiln.toml`'s `[csp]` table checked (the pipeline reads the table with the rest of
    /// the file, `kiln_stages::build_config`).
    fn from_build_config(kiln_toml: Option<&str>, api_origin: &str) -> Result<Extension, String> {
        #[derive(serde::Deserialize, Default)]
        #[serde(default)]
        struct Csp {
            csp: Option<BTreeMap<String, Vec<String>>>,
        }
        let csp: Csp = match kiln_toml {
            Some(text) => {
                toml::from_str(text).map_err(|e| format!("kiln.toml: {}", e.message()))?
            }
            None => Csp::default(),
        };
        check_extension(csp.csp.as_ref(), api_origin)
    }

    #[test]
    fn a_team_extends_connect_src_and_framing() {
        let ext = from_build_config(
            Some("[csp]\nconnect-src = [\"https://api.studio.example\", \"wss://rt.studio.example:8443\"]\nframe-ancestors = [\"https://portal.example\"]\n"),
            API,
        )
        .unwrap();
        let p = policy("https://games.example", &ext);
        assert!(
            p.contains("connect-src 'self' data: blob: https://api.studio.example wss://rt.studio.example:8443"),
            "{p}"
        );
        assert!(
            p.contains("frame-ancestors 'self' https://portal.example"),
            "{p}"
        );
        assert!(p.contains("base-uri https://games.example"), "{p}");
        assert!(p.contains("object-src 'none'"), "{p}");
    }

    #[test]
    fn nothing_that_reaches_the_api_origin() {
        for bad in [
            "https://kiln.example",
            "https://KILN.example:443/v1/",
            "*.example",
            "https:",
            "*",
            "http://kiln.example",
        ] {
            let text = format!("[csp]\nconnect-src = [{bad:?}]\n");
            let err = from_build_config(Some(&text), API).unwrap_err();
            assert!(err.contains("connect-src"), "{bad}: {err}");
        }
    }

    #[test]
    fn bad_extensions_get_clear_errors() {
        for (text, needle) in [
            (
                "[csp]\nbase-uri = [\"https://x.example\"]\n",
                "not a directive",
            ),
            ("[csp]\nscript-src = [\"'unsafe-hashes'\"]\n", "keyword"),
            (
                "[csp]\nscript-src = [\"https://x.example; script-src *\"]\n",
                "host source",
            ),
            ("[csp]\nscript-src = [\"x.example\"]\n", "scheme"),
            ("[csp]\nscript-src = \"https://x.example\"\n", "kiln.toml"),
            (
                "[csp]\nframe-ancestors = [\"'unsafe-inline'\"]\n",
                "keyword",
            ),
        ] {
            let err = from_build_config(Some(text), API).unwrap_err();
            assert!(err.contains(needle), "{text}: {err}");
        }
        assert!(from_build_config(None, API).unwrap().is_empty());
        assert!(
            from_build_config(Some("[models]\nserve = \"quantized\"\n"), API)
                .unwrap()
                .is_empty()
        );
    }
}
