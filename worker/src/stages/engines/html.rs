//! The HTML rewrite: a page's engine `<script>` becomes the Kiln loader, and every script
//! after it waits for the engine (`text/kiln-deferred`; the loader replays them in order).
//! For an ES module engine the loader goes before the page's import map or first module
//! script; the import map waits too, and the loader points its engine entry at the
//! verified copy before any module runs.
//!
//! The engine file itself stays in the build: the loader falls back to it, at the same
//! page-relative path the page always used.

use std::cell::RefCell;

use lol_html::html_content::ContentType;
use lol_html::{RewriteStrSettings, element, rewrite_str};
use serde::Serialize;

use crate::stages::inventory::resolve_uri;

/// Where the loader and the game's live manifest are, and the keys manifests verify with.
#[derive(Debug, Clone, Serialize)]
pub struct BootLinks {
    pub loader: String,
    pub game: String,
    pub manifest: String,
    pub telemetry: String,
    pub keys: Vec<serde_json::Value>,
}

/// One engine as the page's boot configuration names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BootEngine {
    pub name: String,
    pub version: String,
    pub sha256: String,
    pub size: u64,
    /// The library copy.
    pub url: String,
    /// The build's own copy, relative to the page (the fallback).
    pub path: String,
    pub global: String,
    pub module: bool,
    /// The engine's path in the build (not part of the boot config).
    #[serde(skip)]
    pub build_path: String,
}

/// What the rewrite did to one page.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PageRewrite {
    /// Engines the page now gets through the loader (build paths).
    pub engines: Vec<String>,
    /// Scripts that now wait for the engine.
    pub deferred: usize,
}

/// Rewrites one page. `None` when the page loads none of the engines (left unchanged).
pub fn rewrite_page(
    page_path: &str,
    html: &str,
    engines: &[BootEngine],
    links: &BootLinks,
) -> Result<Option<(String, PageRewrite)>, String> {
    let module_engines: Vec<&BootEngine> = engines.iter().filter(|e| e.module).collect();
    let state = RefCell::new(State::default());
    let output = rewrite_str(
        html,
        RewriteStrSettings {
            element_content_handlers: vec![element!("script", |el| {
                let mut state = state.borrow_mut();
                let kind = el.get_attribute("type").unwrap_or_default();
                let kind = kind.trim().to_ascii_lowercase();
                let is_module = kind == "module";
                let is_import_map = kind == "importmap";
                let runs_code = kind.is_empty()
                    || is_module
                    || kind.contains("javascript")
                    || kind.contains("ecmascript");
                if !(runs_code || is_import_map && !module_engines.is_empty()) {
                    // JSON, templates: data, left alone.
                    return Ok(());
                }
                let engine = el.get_attribute("src").and_then(|src| {
                    let target = resolve_uri(page_path, src.trim())?;
                    engines.iter().find(|e| e.build_path == target && !e.module)
                });
                if let Some(engine) = engine {
                    if state.used.is_empty() {
                        let used: Vec<&BootEngine> = std::iter::once(engine)
                            .chain(module_engines.iter().copied())
                            .collect();
                        el.before(&state.start(&used, links), ContentType::Html);
                    } else {
                        // A second classic engine on the page: refused below.
                        state.late_engines.push(engine.build_path.clone());
                    }
                    el.remove();
                    return Ok(());
                }
                // A module engine is imported, through the page's import map or by path: the
                // loader takes over the import map (pointing the engine's entry at the
                // verified copy) and every module script waits for it.
                if (is_module || is_import_map)
                    && !module_engines.is_empty()
                    && state.used.is_empty()
                {
                    el.before(&state.start(&module_engines, links), ContentType::Html);
                }
                if !state.used.is_empty() {
                    if !kind.is_empty() {
                        el.set_attribute("data-kiln-type", &kind)?;
                    }
                    el.set_attribute("type", "text/kiln-deferred")?;
                    state.deferred += 1;
                }
                Ok(())
            })],
            ..RewriteStrSettings::new()
        },
    )
    .map_err(|e| format!("{page_path}: {e}"))?;
    let state = state.into_inner();
    if state.used.is_empty() {
        return Ok(None);
    }
    if !state.late_engines.is_empty() {
        return Err(format!(
            "{page_path}: loads several engine scripts ({}); only the first can be split",
            state.late_engines.join(", ")
        ));
    }
    Ok(Some((
        output,
        PageRewrite {
            engines: state.used,
            deferred: state.deferred,
        },
    )))
}

#[derive(Default)]
struct State {
    /// Engines the loader boots (build paths); empty until the loader is inserted.
    used: Vec<String>,
    late_engines: Vec<String>,
    deferred: usize,
}

impl State {
    /// Records the engines the page boots; returns the loader and boot call to insert.
    fn start(&mut self, used: &[&BootEngine], links: &BootLinks) -> String {
        self.used = used.iter().map(|e| e.build_path.clone()).collect();
        boot_html(links, used)
    }
}

fn boot_html(links: &BootLinks, engines: &[&BootEngine]) -> String {
    let config = serde_json::json!({
        "game": links.game,
        "manifest": links.manifest,
        "telemetry": links.telemetry,
        "keys": links.keys,
        "engines": engines,
    });
    // `<` never appears in JSON outside strings, and `\u003c` inside one means the same: no
    // string in the config can close the script element.
    let config = config.to_string().replace('<', "\\u003c");
    format!(
        "<script src=\"{}\"></script>\n<script>kiln.boot({config});</script>\n",
        html_attr(&links.loader)
    )
}

fn html_attr(value: &str) -> String {
    value
        .replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
}

/// `to` relative to the folder of `from` (both build paths), as a page would write it.
pub fn relative_to(from: &str, to: &str) -> String {
    let from_dir: Vec<&str> = from.split('/').collect();
    let from_dir = &from_dir[..from_dir.len() - 1];
    let to_parts: Vec<&str> = to.split('/').collect();
    let common = from_dir
        .iter()
        .zip(&to_parts)
        .take_while(|(a, b)| a == b)
        .count();
    let mut parts: Vec<&str> = vec![".."; from_dir.len() - common];
    parts.extend(&to_parts[common..]);
    parts.join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn links() -> BootLinks {
        BootLinks {
            loader: "https://kiln.test/sdk/kiln-loader.js".into(),
            game: "g".into(),
            manifest: "https://kiln.test/v1/games/g/manifest".into(),
            telemetry: "https://kiln.test/v1/telemetry".into(),
            keys: vec![serde_json::json!({"kid": "k"})],
        }
    }

    fn engine(path: &str, module: bool) -> BootEngine {
        BootEngine {
            name: "three".into(),
            version: "0.160".into(),
            sha256: "ab".repeat(32),
            size: 1,
            url: "https://kiln.test/cdn/library/ab/x.js".into(),
            path: relative_to("index.html", path),
            global: "THREE".into(),
            module,
            build_path: path.into(),
        }
    }

    #[test]
    fn classic_engine_script_becomes_the_loader() {
        let html = r#"<html><head><script>window.before = 1</script>
<script src="./libs/three.min.js"></script>
<script src="game.js"></script><script type="importmap">{}</script>
<script type="module" src="main.js"></script><script>start()</script></head></html>"#;
        let (out, page) = rewrite_page(
            "index.html",
            html,
            &[engine("libs/three.min.js", false)],
            &links(),
        )
        .unwrap()
        .expect("rewritten");
        assert_eq!(page.engines, ["libs/three.min.js"]);
        assert_eq!(page.deferred, 3);
        assert!(!out.contains("three.min.js\"></script>"), "{out}");
        assert!(
            out.contains(r#"<script>window.before = 1</script>"#),
            "scripts before the engine run as before"
        );
        assert!(out.contains(r#"<script src="https://kiln.test/sdk/kiln-loader.js"></script>"#));
        assert!(
            out.contains(r#"<script src="game.js" type="text/kiln-deferred"></script>"#),
            "{out}"
        );
        assert!(
            out.contains(r#"<script type="importmap">{}</script>"#),
            "data scripts untouched"
        );
        assert!(
            out.contains(r#"type="text/kiln-deferred" src="main.js" data-kiln-type="module""#)
                || out.contains(r#"data-kiln-type="module""#),
            "{out}"
        );
        let boot = out
            .split("kiln.boot(")
            .nth(1)
            .unwrap()
            .split(");</script>")
            .next()
            .unwrap();
        let boot: serde_json::Value = serde_json::from_str(boot).unwrap();
        assert_eq!(boot["engines"][0]["path"], "libs/three.min.js");
        assert_eq!(boot["engines"][0]["global"], "THREE");
        assert_eq!(boot["manifest"], "https://kiln.test/v1/games/g/manifest");
        assert!(boot["engines"][0].get("build_path").is_none());
    }

    #[test]
    fn import_maps_wait_for_the_loader() {
        let html = r#"<head><script type="importmap">{"imports":{"three":"./vendor/three.module.min.js"}}</script></head>
<body><script type="module" src="game.js"></script><script type="application/json">{}</script></body>"#;
        let (out, page) = rewrite_page(
            "index.html",
            html,
            &[engine("vendor/three.module.min.js", true)],
            &links(),
        )
        .unwrap()
        .unwrap();
        assert_eq!(page.deferred, 2);
        let loader = out.find("kiln-loader.js").unwrap();
        let map = out
            .find("data-kiln-type=\"importmap\"")
            .expect("import map deferred");
        assert!(loader < map, "{out}");
        assert!(out.contains(r#"<script type="application/json">{}</script>"#));
    }

    #[test]
    fn module_engines_defer_the_modules() {
        let html = r#"<script type="module" src="src/main.js"></script>"#;
        let (out, page) = rewrite_page(
            "play/index.html",
            html,
            &[engine("libs/three.module.js", true)],
            &links(),
        )
        .unwrap()
        .unwrap();
        assert_eq!(page.engines, ["libs/three.module.js"]);
        assert!(out.contains("data-kiln-type=\"module\""), "{out}");
        assert!(out.contains("\"module\":true"));
    }

    #[test]
    fn pages_without_the_engine_stay_as_they_are() {
        let html = r#"<script src="other.js"></script>"#;
        assert_eq!(
            rewrite_page(
                "index.html",
                html,
                &[engine("libs/three.min.js", false)],
                &links()
            )
            .unwrap(),
            None
        );
    }

    #[test]
    fn config_strings_cannot_close_the_script() {
        let mut l = links();
        l.game = "</script><script>alert(1)</script>".into();
        let (out, _) = rewrite_page(
            "index.html",
            r#"<script src="libs/three.min.js"></script>"#,
            &[engine("libs/three.min.js", false)],
            &l,
        )
        .unwrap()
        .unwrap();
        assert_eq!(out.matches("</script>").count(), 2, "{out}");
    }

    #[test]
    fn relative_paths() {
        assert_eq!(relative_to("index.html", "libs/a.js"), "libs/a.js");
        assert_eq!(relative_to("play/index.html", "libs/a.js"), "../libs/a.js");
        assert_eq!(relative_to("play/x/index.html", "play/a.js"), "../a.js");
    }
}
