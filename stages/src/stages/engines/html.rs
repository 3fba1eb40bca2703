//! The HTML rewrite: a page gets its engine from the shared library **without waiting for a
//! script of ours**, so the browser fetches the engine, the game's own modules and its models
//! at once, as it would from a plain server (measurements: `docs/load-time.md`).
//!
//! At the top of `<head>` the rewrite puts:
//! - `<base href>` naming the build's immutable folder (`/play/{game}/@{build}/…`), so every
//!   file the page loads is cached for good and a repeat visit revalidates the page only;
//! - the inline boot script (`api/sdk/kiln-boot.js`, with the page's config);
//! - `<link rel="modulepreload" integrity>` for the library copy of each module engine and
//!   `modulepreload` for every module of the page's static import graph ([`modules`]);
//!   `<link rel="preload" as="fetch">` for the models the page's code names (unless it loads
//!   them through `kiln.model`, which picks the device's variant);
//! - the loader, `async` (telemetry, `kiln.model`, `kiln.preheat`; not on the critical path).
//!
//! A module engine: the page's import map is taken into the boot config, its engine entries
//! pointed at the library URL with import-map `integrity`, and the boot script writes it. A
//! classic engine: its `<script>` becomes the library copy under SRI, followed by
//! `kiln_boot.classic(sha)`, which writes the build's own copy in its place if that failed.
//! The browser checks the hash before running a byte of the engine, in both cases.
//!
//! The engine file itself stays in the build: the boot script falls back to it, at the same
//! page-relative path the page always used.

use std::cell::RefCell;
use std::sync::OnceLock;

use base64::Engine as _;
use lol_html::html_content::ContentType;
use lol_html::{RewriteStrSettings, element, rewrite_str, text};
use serde::Serialize;
use serde_json::{Map, Value};

use super::modules;
use crate::ir::{resolve_uri, variant_path};

/// Where the loader and the game's live manifest are, and the keys manifests verify with.
#[derive(Debug, Clone, Serialize)]
pub struct BootLinks {
    pub loader: String,
    pub game: String,
    pub manifest: String,
    pub telemetry: String,
    pub keys: Vec<serde_json::Value>,
    /// The build id (the loader reuses a manifest it verified for the same build).
    pub build: String,
    /// The build's immutable folder, ending in `/` (`{api}/play/{game}/@{build}/`); a page's
    /// `<base>` is this plus the page's own folder. `None`: no `<base>` is written.
    #[serde(skip)]
    pub base: Option<String>,
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

impl BootEngine {
    /// The Subresource Integrity form of its hash.
    pub fn integrity(&self) -> String {
        let bytes = hex::decode(&self.sha256).unwrap_or_default();
        format!(
            "sha256-{}",
            base64::engine::general_purpose::STANDARD.encode(bytes)
        )
    }
}

/// What the rewrite did to one page.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PageRewrite {
    /// Engines the page now gets from the library (build paths).
    pub engines: Vec<String>,
    /// The page's own modules preloaded at once (build paths, import order).
    pub preloaded: Vec<String>,
    /// Models the page's code names: preloaded, or prefetched by the loader for `kiln.model`.
    pub models: Vec<String>,
    /// The page loads its models through `kiln.model`.
    pub kiln_model: bool,
    /// Other files the page's code names by path (images, atlases, JSON): a host's
    /// pre-warm fetches them too (the manifest's `warm`).
    pub assets: Vec<String>,
    /// Files the page's HTML loads itself, besides its modules and engines: stylesheets,
    /// classic scripts, images, icons (build paths of files the build has). Warmed too.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub loads: Vec<String>,
    /// The immutable folder the page's `<base>` names, if it got one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
}

/// What the rewrite needs from the rest of the build.
pub struct PageInputs<'a> {
    pub engines: &'a [BootEngine],
    pub links: &'a BootLinks,
    /// A text file of the build by its path (module sources).
    pub read: &'a dyn Fn(&str) -> Option<String>,
    /// Build paths of the build's glTF models.
    pub models: &'a [String],
    /// Build paths of the build's other data files (images, JSON, audio, …).
    pub assets: &'a [String],
}

/// The first pass: what the page holds.
#[derive(Default)]
struct Survey {
    head: bool,
    /// `<meta charset>` inside `<head>`, before any script: our block goes after it, so the
    /// charset stays within the first 1024 bytes.
    charset: bool,
    base: bool,
    /// Inline import maps, in order.
    maps: Vec<String>,
    /// Module scripts by build path, and inline modules' sources.
    module_srcs: Vec<String>,
    inline_modules: Vec<String>,
    /// Classic scripts' inline sources and the build paths of their files.
    classic_srcs: Vec<String>,
    inline_classic: Vec<String>,
    /// Classic engine scripts (build paths).
    classic_engines: Vec<String>,
    /// What `<link>` (stylesheets, icons, preloads) and `<img>` load (build paths).
    linked: Vec<String>,
    /// The kind of the script whose text is being read.
    reading: Option<Kind>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Map,
    Module,
    Classic,
}

fn kind_of(el: &lol_html::html_content::Element) -> Option<Kind> {
    let kind = el.get_attribute("type").unwrap_or_default();
    let kind = kind.trim().to_ascii_lowercase();
    if kind == "importmap" {
        Some(Kind::Map)
    } else if kind == "module" {
        Some(Kind::Module)
    } else if kind.is_empty() || kind.contains("javascript") || kind.contains("ecmascript") {
        Some(Kind::Classic)
    } else {
        None // JSON, templates: data
    }
}

/// Rewrites one page. `None` when the page loads none of the engines (left unchanged).
pub fn rewrite_page(
    page_path: &str,
    html: &str,
    inputs: &PageInputs,
) -> Result<Option<(String, PageRewrite)>, String> {
    let engines = inputs.engines;
    let survey = RefCell::new(Survey::default());
    rewrite_str(
        html,
        RewriteStrSettings {
            element_content_handlers: vec![
                element!("head", |_| {
                    survey.borrow_mut().head = true;
                    Ok(())
                }),
                element!("base[href]", |_| {
                    survey.borrow_mut().base = true;
                    Ok(())
                }),
                element!("head meta[charset]", |_| {
                    let mut s = survey.borrow_mut();
                    if s.maps.is_empty()
                        && s.module_srcs.is_empty()
                        && s.classic_srcs.is_empty()
                        && s.classic_engines.is_empty()
                        && s.inline_classic.is_empty()
                        && s.inline_modules.is_empty()
                    {
                        s.charset = true;
                    }
                    Ok(())
                }),
                element!("script", |el| {
                    let mut s = survey.borrow_mut();
                    let kind = kind_of(el);
                    let src = el
                        .get_attribute("src")
                        .and_then(|src| resolve_uri(page_path, src.trim()));
                    s.reading = if src.is_none() { kind } else { None };
                    match (kind, src) {
                        (Some(Kind::Module), Some(path)) => s.module_srcs.push(path),
                        (Some(Kind::Classic), Some(path)) => {
                            if engines.iter().any(|e| e.build_path == path && !e.module) {
                                s.classic_engines.push(path);
                            } else {
                                s.classic_srcs.push(path);
                            }
                        }
                        (Some(Kind::Map), None) => s.maps.push(String::new()),
                        (Some(Kind::Module), None) => s.inline_modules.push(String::new()),
                        (Some(Kind::Classic), None) => s.inline_classic.push(String::new()),
                        _ => {}
                    }
                    Ok(())
                }),
                element!("link[href]", |el| {
                    let rel = el
                        .get_attribute("rel")
                        .unwrap_or_default()
                        .to_ascii_lowercase();
                    let loads = rel.split_ascii_whitespace().any(|r| {
                        matches!(r, "stylesheet" | "icon" | "preload" | "apple-touch-icon")
                    });
                    if loads
                        && let Some(path) = el
                            .get_attribute("href")
                            .and_then(|h| resolve_uri(page_path, h.trim()))
                    {
                        survey.borrow_mut().linked.push(path);
                    }
                    Ok(())
                }),
                element!("img[src]", |el| {
                    if let Some(path) = el
                        .get_attribute("src")
                        .and_then(|h| resolve_uri(page_path, h.trim()))
                    {
                        survey.borrow_mut().linked.push(path);
                    }
                    Ok(())
                }),
                text!("script", |t| {
                    let mut s = survey.borrow_mut();
                    let target = match s.reading {
                        Some(Kind::Map) => s.maps.last_mut(),
                        Some(Kind::Module) => s.inline_modules.last_mut(),
                        Some(Kind::Classic) => s.inline_classic.last_mut(),
                        None => None,
                    };
                    if let Some(buf) = target {
                        buf.push_str(t.as_str());
                    }
                    if t.last_in_text_node() {
                        s.reading = None;
                    }
                    Ok(())
                }),
            ],
            ..RewriteStrSettings::new()
        },
    )
    .map_err(|e| format!("{page_path}: {e}"))?;
    let survey = survey.into_inner();
    let plan = plan(page_path, &survey, inputs)?;
    let Some(plan) = plan else { return Ok(None) };

    let head_html = plan.head_html(inputs.links);
    let inserted = RefCell::new(false);
    let insert_before = |el: &mut lol_html::html_content::Element| {
        if !*inserted.borrow() {
            *inserted.borrow_mut() = true;
            el.before(&head_html, ContentType::Html);
        }
    };
    let classic: Vec<&BootEngine> = plan.engines.iter().filter(|e| !e.module).collect();
    let take_maps = !plan.config["boot"]["map"].is_null();
    let after_charset = survey.charset;
    let output = rewrite_str(
        html,
        RewriteStrSettings {
            element_content_handlers: vec![
                element!("head", |el| {
                    if !after_charset {
                        *inserted.borrow_mut() = true;
                        el.prepend(&head_html, ContentType::Html);
                    }
                    Ok(())
                }),
                element!("head meta[charset]", |el| {
                    if after_charset && !*inserted.borrow() {
                        *inserted.borrow_mut() = true;
                        el.after(&head_html, ContentType::Html);
                    }
                    Ok(())
                }),
                element!("script", |el| {
                    let kind = kind_of(el);
                    if kind.is_none() {
                        return Ok(());
                    }
                    insert_before(el);
                    if kind == Some(Kind::Map) && take_maps && el.get_attribute("src").is_none() {
                        // Now written by the boot script, engine entries pointed at the library.
                        el.remove();
                        return Ok(());
                    }
                    if kind != Some(Kind::Classic) {
                        return Ok(());
                    }
                    let Some(path) = el
                        .get_attribute("src")
                        .and_then(|src| resolve_uri(page_path, src.trim()))
                    else {
                        return Ok(());
                    };
                    let Some(engine) = classic.iter().find(|e| e.build_path == path) else {
                        return Ok(());
                    };
                    let ordered = !el.has_attribute("async") && !el.has_attribute("defer");
                    let mut tag = format!(
                        "<script src=\"{}\" integrity=\"{}\" crossorigin=\"anonymous\" data-kiln-engine=\"{}\"",
                        html_attr(&engine.url),
                        engine.integrity(),
                        engine.sha256
                    );
                    for attr in ["async", "defer", "nonce"] {
                        if let Some(v) = el.get_attribute(attr) {
                            tag.push_str(&format!(" {attr}=\"{}\"", html_attr(&v)));
                        }
                    }
                    tag.push_str("></script>");
                    if ordered {
                        tag.push_str(&format!(
                            "<script>__kilnBoot.classic(\"{}\")</script>",
                            engine.sha256
                        ));
                    }
                    el.replace(&tag, ContentType::Html);
                    Ok(())
                }),
            ],
            ..RewriteStrSettings::new()
        },
    )
    .map_err(|e| format!("{page_path}: {e}"))?;
    Ok(Some((output, plan.report)))
}

/// What goes into one page.
struct Plan {
    engines: Vec<BootEngine>,
    /// Page-relative.
    preload: Vec<String>,
    model_preloads: Vec<String>,
    /// `{"base": …, "boot": …}`.
    config: Value,
    report: PageRewrite,
}

fn plan(page: &str, survey: &Survey, inputs: &PageInputs) -> Result<Option<Plan>, String> {
    // The page's import maps, merged (an earlier entry wins, as in browsers with one map).
    let mut merged = serde_json::json!({});
    for text in &survey.maps {
        let Ok(Value::Object(map)) = serde_json::from_str::<Value>(text) else {
            continue;
        };
        for (section, entries) in map {
            let Value::Object(entries) = entries else {
                continue;
            };
            let into = merged
                .as_object_mut()
                .expect("object")
                .entry(section)
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(into) = into {
                for (k, v) in entries {
                    into.entry(k).or_insert(v);
                }
            }
        }
    }
    let module_engines: Vec<&BootEngine> = inputs.engines.iter().filter(|e| e.module).collect();
    // Engine entries of the map, and the engine's own path as a URL key, name the library.
    let mut used_modules: Vec<&BootEngine> = Vec::new();
    if !module_engines.is_empty() {
        let imports = merged
            .as_object_mut()
            .expect("object")
            .entry("imports")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(imports) = imports {
            for (_, v) in imports.iter_mut() {
                let Some(target) = v.as_str().and_then(|v| resolve_uri(page, v)) else {
                    continue;
                };
                if let Some(e) = module_engines.iter().find(|e| e.build_path == target) {
                    *v = Value::String(e.url.clone());
                    if !used_modules.iter().any(|u| u.sha256 == e.sha256) {
                        used_modules.push(e);
                    }
                }
            }
            for e in &module_engines {
                let key = if e.path.starts_with('.') {
                    e.path.clone()
                } else {
                    format!("./{}", e.path)
                };
                imports
                    .entry(key)
                    .or_insert_with(|| Value::String(e.url.clone()));
            }
        }
    }
    let read = inputs.read;
    let graph = modules::graph(
        page,
        &merged,
        &survey.module_srcs,
        &survey.inline_modules,
        &|p| {
            if module_engines.iter().any(|e| e.build_path == p) {
                None
            } else {
                read(p)
            }
        },
    );
    for e in &module_engines {
        let reached = graph.urls.contains(&e.url) || graph.files.contains(&e.build_path);
        if reached && !used_modules.iter().any(|u| u.sha256 == e.sha256) {
            used_modules.push(e);
        }
    }
    let classic: Vec<&BootEngine> = inputs
        .engines
        .iter()
        .filter(|e| !e.module && survey.classic_engines.contains(&e.build_path))
        .collect();
    if used_modules.is_empty() && classic.is_empty() {
        return Ok(None);
    }
    let engines: Vec<BootEngine> = classic
        .iter()
        .chain(used_modules.iter())
        .map(|e| (*e).clone())
        .collect();
    let map = if used_modules.is_empty() {
        None
    } else {
        let integrity: Map<String, Value> = used_modules
            .iter()
            .map(|e| (e.url.clone(), Value::String(e.integrity())))
            .collect();
        merged
            .as_object_mut()
            .expect("object")
            .insert("integrity".into(), Value::Object(integrity));
        Some(merged)
    };
    let preload: Vec<String> = graph
        .files
        .iter()
        .filter(|f| !inputs.engines.iter().any(|e| &e.build_path == *f))
        .cloned()
        .collect();

    // Models the page's code names, as a page-relative string literal.
    let mut sources: Vec<&str> = graph.sources.iter().map(|(_, s)| s.as_str()).collect();
    sources.extend(survey.inline_modules.iter().map(String::as_str));
    sources.extend(survey.inline_classic.iter().map(String::as_str));
    let classic_sources: Vec<(&String, String)> = survey
        .classic_srcs
        .iter()
        .filter_map(|p| read(p).map(|src| (p, src)))
        .collect();
    sources.extend(classic_sources.iter().map(|(_, src)| src.as_str()));
    let kiln_model = sources.iter().any(|s| s.contains("kiln.model("));
    let named = |path: &&String| {
        let rel = relative_to(page, path);
        let quoted = |q: char| {
            [format!("{q}{rel}{q}"), format!("{q}./{rel}{q}")]
                .iter()
                .any(|needle| sources.iter().any(|s| s.contains(needle.as_str())))
        };
        quoted('\'') || quoted('"') || quoted('`')
    };
    let models: Vec<String> = inputs.models.iter().filter(named).cloned().collect();
    let assets: Vec<String> = inputs.assets.iter().filter(named).cloned().collect();
    // What the HTML itself loads, of the files the build has (text files are readable, the
    // others are listed in `inputs.assets`; the classic scripts were read above); the modules
    // are preloaded already.
    let mut loads: Vec<String> = survey
        .linked
        .iter()
        .filter(|p| inputs.assets.contains(p) || read(p).is_some())
        .chain(classic_sources.iter().map(|(p, _)| *p))
        .filter(|p| !preload.contains(p) && !models.contains(p))
        .cloned()
        .collect();
    loads.sort();
    loads.dedup();
    // Fetched from the start, beside the engine, instead of once the engine has run and the
    // game asks: the models the code loads itself. (The other files it names go to a host's
    // pre-warm only: an engine's own image loader need not match a `preload`.)
    let model_preloads: Vec<String> = if kiln_model {
        Vec::new()
    } else {
        models.iter().map(|m| relative_to(page, m)).collect()
    };
    let base = if survey.head && !survey.base {
        inputs.links.base.as_ref().map(|b| {
            let dir = page.rsplit_once('/').map_or("", |(d, _)| d);
            if dir.is_empty() {
                b.clone()
            } else {
                format!("{b}{dir}/")
            }
        })
    } else {
        None
    };
    let boot_engines: Vec<Value> = engines
        .iter()
        .map(|e| {
            let mut v = serde_json::to_value(e).expect("engine serialises");
            v["integrity"] = Value::String(e.integrity());
            v
        })
        .collect();
    let links = inputs.links;
    let config = serde_json::json!({
        "game": links.game,
        "build": links.build,
        "manifest": links.manifest,
        "telemetry": links.telemetry,
        "keys": links.keys,
        "engines": boot_engines,
        "map": map,
        // Each model the code names, with its variants' paths (beside it, as the geometry stage
        // names them): a `kiln.model` page fetches the device's variant from the first byte.
        "models": models.iter().map(|m| serde_json::json!({
            "path": relative_to(page, m),
            "variants": {
                "meshopt": relative_to(page, &variant_path(m, "meshopt")),
                "quantized": relative_to(page, &variant_path(m, "quantized")),
                "original": relative_to(page, m),
            },
        })).collect::<Vec<_>>(),
        "kiln_model": kiln_model,
    });
    Ok(Some(Plan {
        report: PageRewrite {
            engines: engines.iter().map(|e| e.build_path.clone()).collect(),
            preloaded: preload.clone(),
            models,
            kiln_model,
            assets,
            loads,
            base: base.clone(),
        },
        engines,
        preload: preload.iter().map(|p| relative_to(page, p)).collect(),
        model_preloads,
        config: serde_json::json!({ "base": base, "boot": config }),
    }))
}

impl Plan {
    fn head_html(&self, links: &BootLinks) -> String {
        let mut out = String::new();
        if let Some(base) = self.config["base"].as_str() {
            out.push_str(&format!("<base href=\"{}\">\n", html_attr(base)));
        }
        // `<` never appears in JSON outside strings, and `\u003c` inside one means the same:
        // no string in the config can close the script element.
        let config = self.config["boot"].to_string().replace('<', "\\u003c");
        out.push_str(&format!(
            "<script>{}</script>\n",
            boot_script().replace("KILN_CONFIG", &config)
        ));
        for e in self.engines.iter().filter(|e| e.module) {
            out.push_str(&format!(
                "<link rel=\"modulepreload\" href=\"{}\" integrity=\"{}\" crossorigin=\"anonymous\" data-kiln-engine=\"{}\">\n",
                html_attr(&e.url),
                e.integrity(),
                e.sha256
            ));
        }
        for path in &self.preload {
            out.push_str(&format!(
                "<link rel=\"modulepreload\" href=\"{}\">\n",
                html_attr(path)
            ));
        }
        for path in &self.model_preloads {
            out.push_str(&format!(
                "<link rel=\"preload\" as=\"fetch\" crossorigin=\"anonymous\" href=\"{}\">\n",
                html_attr(path)
            ));
        }
        out.push_str(&format!(
            "<script async src=\"{}\"></script>\n",
            html_attr(&links.loader)
        ));
        out
    }
}

/// `api/sdk/kiln-boot.js` without its comments and indentation, with `KILN_CONFIG` to replace.
pub fn boot_script() -> &'static str {
    static SCRIPT: OnceLock<String> = OnceLock::new();
    SCRIPT.get_or_init(|| {
        let source = include_str!("../../../../api/sdk/kiln-boot.js");
        let body = source
            .split_once("*/")
            .map_or(source, |(_, rest)| rest)
            .trim();
        body.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n")
    })
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
    use std::collections::HashMap;

    fn links() -> BootLinks {
        BootLinks {
            loader: "https://kiln.test/sdk/kiln-loader.js".into(),
            game: "g".into(),
            manifest: "https://kiln.test/v1/games/g/manifest".into(),
            telemetry: "https://kiln.test/v1/telemetry".into(),
            keys: vec![serde_json::json!({"kid": "k"})],
            build: "b1".into(),
            base: Some("https://kiln.test/play/g/@b1/".into()),
        }
    }

    fn engine(page: &str, path: &str, module: bool) -> BootEngine {
        BootEngine {
            name: "three".into(),
            version: "0.160".into(),
            sha256: "ab".repeat(32),
            size: 1,
            url: "https://kiln.test/cdn/library/ab/x.js".into(),
            path: relative_to(page, path),
            global: "THREE".into(),
            module,
            build_path: path.into(),
        }
    }

    fn rewrite(
        page: &str,
        html: &str,
        engines: &[BootEngine],
        files: &[(&str, &str)],
        models: &[&str],
    ) -> Option<(String, PageRewrite)> {
        let files: HashMap<String, String> = files
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let models: Vec<String> = models.iter().map(|m| m.to_string()).collect();
        let links = links();
        rewrite_page(
            page,
            html,
            &PageInputs {
                engines,
                links: &links,
                read: &|p| files.get(p).cloned(),
                models: &models,
                assets: &["assets/x.png".to_string()],
            },
        )
        .unwrap()
    }

    fn boot_config(out: &str) -> Value {
        let start = out.find("})(window, ").expect("boot script") + "})(window, ".len();
        let end = out[start..]
            .find(");\n</script>")
            .or_else(|| out[start..].find(");</script>"))
            .unwrap();
        serde_json::from_str(&out[start..start + end]).unwrap()
    }

    const SAMPLE: &str = r#"<!doctype html><html><head><meta charset="utf-8">
<link rel="stylesheet" href="style.css">
<script type="importmap">{"imports":{"three":"./vendor/three.module.min.js","three/addons/":"./vendor/addons/"}}</script>
</head><body><script type="module" src="game.js"></script></body></html>"#;

    fn sample_files() -> Vec<(&'static str, &'static str)> {
        vec![
            (
                "game.js",
                "import * as THREE from 'three';\nimport { GLTFLoader } from 'three/addons/loaders/GLTFLoader.js';\nnew GLTFLoader().load('assets/Fox.glb');",
            ),
            (
                "vendor/addons/loaders/GLTFLoader.js",
                "import { Mesh } from 'three';\nimport { toTrianglesDrawMode } from '../utils/BufferGeometryUtils.js';",
            ),
            (
                "vendor/addons/utils/BufferGeometryUtils.js",
                "import {X} from 'three';",
            ),
        ]
    }

    #[test]
    fn module_engines_load_from_the_library_in_parallel() {
        let e = engine("index.html", "vendor/three.module.min.js", true);
        let (out, page) = rewrite(
            "index.html",
            SAMPLE,
            std::slice::from_ref(&e),
            &sample_files(),
            &["assets/Fox.glb", "assets/Other.glb"],
        )
        .expect("rewritten");
        assert_eq!(page.engines, ["vendor/three.module.min.js"]);
        assert_eq!(
            page.preloaded,
            [
                "game.js",
                "vendor/addons/loaders/GLTFLoader.js",
                "vendor/addons/utils/BufferGeometryUtils.js"
            ]
        );
        assert_eq!(
            page.models,
            ["assets/Fox.glb"],
            "only the model the code names"
        );
        assert!(!page.kiln_model);
        // <base> first (after the charset), then the boot script, then the hints.
        let at = |needle: &str| {
            out.find(needle)
                .unwrap_or_else(|| panic!("{needle} in {out}"))
        };
        assert!(at(r#"<meta charset="utf-8">"#) < at("<base"));
        assert!(at(r#"<base href="https://kiln.test/play/g/@b1/">"#) < at("__kilnBoot"));
        assert!(
            at("__kilnBoot")
                < at(r#"rel="modulepreload" href="https://kiln.test/cdn/library/ab/x.js""#)
        );
        assert!(out.contains(&format!(r#"integrity="{}""#, e.integrity())));
        assert!(out.contains(
            r#"<link rel="modulepreload" href="vendor/addons/utils/BufferGeometryUtils.js">"#
        ));
        assert!(out.contains(
            r#"<link rel="preload" as="fetch" crossorigin="anonymous" href="assets/Fox.glb">"#
        ));
        assert!(
            out.contains(r#"<script async src="https://kiln.test/sdk/kiln-loader.js"></script>"#)
        );
        assert!(at("<base") < at(r#"rel="stylesheet""#));
        // The page's import map is now the boot script's, pointed at the library.
        assert!(!out.contains(r#"type="importmap""#), "{out}");
        assert!(
            out.contains(r#"<script type="module" src="game.js"></script>"#),
            "modules untouched"
        );
        let config = boot_config(&out);
        assert_eq!(config["map"]["imports"]["three"], e.url);
        assert_eq!(
            config["map"]["imports"]["three/addons/"],
            "./vendor/addons/"
        );
        assert_eq!(
            config["map"]["imports"]["./vendor/three.module.min.js"],
            e.url
        );
        assert_eq!(config["map"]["integrity"][&e.url], e.integrity());
        assert_eq!(config["engines"][0]["path"], "vendor/three.module.min.js");
        assert_eq!(config["engines"][0]["integrity"], e.integrity());
        assert_eq!(config["manifest"], "https://kiln.test/v1/games/g/manifest");
        assert!(config["engines"][0].get("build_path").is_none());
        assert_eq!(
            e.integrity(),
            format!("sha256-{}", "q6urq6urq6urq6urq6urq6urq6urq6urq6urq6urq6s=")
        );
    }

    #[test]
    fn kiln_model_pages_leave_model_choice_to_the_loader() {
        let e = engine("index.html", "vendor/three.module.min.js", true);
        let mut files = sample_files();
        files[0].1 = "import 'three'; kiln.model('assets/Fox.glb', {})";
        let (out, page) = rewrite("index.html", SAMPLE, &[e], &files, &["assets/Fox.glb"]).unwrap();
        assert!(page.kiln_model);
        assert_eq!(page.models, ["assets/Fox.glb"]);
        assert!(!out.contains(r#"rel="preload""#), "{out}");
        let config = boot_config(&out);
        assert_eq!(config["kiln_model"], true);
        assert_eq!(config["models"][0]["path"], "assets/Fox.glb");
        assert_eq!(
            config["models"][0]["variants"]["meshopt"],
            "assets/Fox.meshopt.glb"
        );
        assert_eq!(
            config["models"][0]["variants"]["quantized"],
            "assets/Fox.quantized.glb"
        );
    }

    #[test]
    fn relative_imports_of_the_engine_are_mapped_too() {
        let html = r#"<head></head><script type="module" src="src/main.js"></script>"#;
        let e = engine("play/index.html", "libs/three.module.js", true);
        let (out, page) = rewrite(
            "play/index.html",
            html,
            std::slice::from_ref(&e),
            &[(
                "play/src/main.js",
                "import * as T from '../../libs/three.module.js';",
            )],
            &[],
        )
        .unwrap();
        assert_eq!(page.engines, ["libs/three.module.js"]);
        assert_eq!(page.preloaded, ["play/src/main.js"]);
        assert_eq!(
            page.base.as_deref(),
            Some("https://kiln.test/play/g/@b1/play/")
        );
        let config = boot_config(&out);
        assert_eq!(config["map"]["imports"]["../libs/three.module.js"], e.url);
        assert!(
            out.contains(r#"<link rel="modulepreload" href="src/main.js">"#),
            "{out}"
        );
    }

    #[test]
    fn what_the_html_loads_itself_is_listed_for_the_pre_warm() {
        let html = r#"<html><head><link rel="stylesheet" href="style.css">
<link rel="icon" href="assets/x.png"><link rel="stylesheet" href="https://fonts.example/f.css">
<link rel="stylesheet" href="missing.css"><link rel="canonical" href="game.js">
<script src="./libs/phaser.min.js"></script><script src="game.js"></script></head>
<body><img src="./assets/x.png"></body></html>"#;
        let mut e = engine("index.html", "libs/phaser.min.js", false);
        e.name = "phaser".into();
        let (_, page) = rewrite(
            "index.html",
            html,
            std::slice::from_ref(&e),
            &[("game.js", "start()"), ("style.css", "body{}")],
            &[],
        )
        .unwrap();
        // Files of the build only (not another origin's, not one the build lacks), once each;
        // the engine comes from the library; `canonical` loads nothing.
        assert_eq!(page.loads, ["assets/x.png", "game.js", "style.css"]);
    }

    #[test]
    fn classic_engine_script_becomes_the_verified_library_copy() {
        let html = r#"<html><head><script>window.before = 1</script>
<script src="./libs/phaser.min.js"></script>
<script src="game.js"></script><script type="importmap">{}</script>
<script>start()</script></head></html>"#;
        let mut e = engine("index.html", "libs/phaser.min.js", false);
        e.name = "phaser".into();
        let (out, page) = rewrite(
            "index.html",
            html,
            std::slice::from_ref(&e),
            &[("game.js", "this.load.image('x', 'assets/x.png')")],
            &[],
        )
        .unwrap();
        assert_eq!(page.engines, ["libs/phaser.min.js"]);
        assert!(page.preloaded.is_empty());
        assert_eq!(page.assets, ["assets/x.png"], "named by the game's code");
        assert!(
            !out.contains(r#"rel="preload""#),
            "warmed by a host, not preloaded: {out}"
        );
        assert!(out.contains(&format!(
            r#"<script src="https://kiln.test/cdn/library/ab/x.js" integrity="{}" crossorigin="anonymous" data-kiln-engine="{}"></script><script>__kilnBoot.classic("{}")</script>"#,
            e.integrity(), e.sha256, e.sha256
        )), "{out}");
        assert!(!out.contains("phaser.min.js\"></script>"), "{out}");
        assert!(
            out.contains("<script>window.before = 1</script>"),
            "scripts before run as before"
        );
        assert!(
            out.contains(r#"<script src="game.js"></script>"#),
            "later scripts are untouched: {out}"
        );
        assert!(
            out.contains(r#"<script type="importmap">{}</script>"#),
            "no module engine: map kept"
        );
        assert!(boot_config(&out)["map"].is_null());
    }

    #[test]
    fn several_classic_engines_each_get_their_library_copy() {
        let html = r#"<head></head><script src="a.js"></script><script defer src="b.js"></script>"#;
        let mut a = engine("index.html", "a.js", false);
        let mut b = engine("index.html", "b.js", false);
        a.sha256 = "aa".repeat(32);
        b.sha256 = "bb".repeat(32);
        b.url = "https://kiln.test/cdn/library/bb/y.js".into();
        let (out, page) = rewrite("index.html", html, &[a, b], &[], &[]).unwrap();
        assert_eq!(page.engines, ["a.js", "b.js"]);
        assert!(out.contains(&format!("__kilnBoot.classic(\"{}\")", "aa".repeat(32))));
        assert!(
            !out.contains(&format!("__kilnBoot.classic(\"{}\")", "bb".repeat(32))),
            "a deferred engine can't be replaced in order"
        );
        assert!(
            out.contains(" defer=\"\"></script>") || out.contains(" defer=\"\">"),
            "{out}"
        );
    }

    #[test]
    fn pages_without_the_engine_stay_as_they_are() {
        let e = engine("index.html", "libs/three.min.js", false);
        assert_eq!(
            rewrite(
                "index.html",
                r#"<script src="other.js"></script>"#,
                std::slice::from_ref(&e),
                &[],
                &[]
            ),
            None
        );
        let m = engine("index.html", "vendor/three.module.js", true);
        assert_eq!(
            rewrite(
                "index.html",
                r#"<script type="module" src="ui.js"></script>"#,
                &[m],
                &[("ui.js", "import './x.js'")],
                &[]
            ),
            None,
            "a module page that never imports the engine"
        );
    }

    #[test]
    fn a_page_with_its_own_base_keeps_it() {
        let html = r#"<head><base href="/static/"></head><script src="three.min.js"></script>"#;
        let e = engine("index.html", "three.min.js", false);
        let (out, page) = rewrite("index.html", html, &[e], &[], &[]).unwrap();
        assert_eq!(page.base, None);
        assert_eq!(out.matches("<base").count(), 1);
    }

    #[test]
    fn config_strings_cannot_close_the_script() {
        let mut l = links();
        l.game = "</script><script>alert(1)</script>".into();
        let e = engine("index.html", "libs/three.min.js", false);
        let (out, _) = rewrite_page(
            "index.html",
            r#"<script src="libs/three.min.js"></script>"#,
            &PageInputs {
                engines: &[e],
                links: &l,
                read: &|_| None,
                models: &[],
                assets: &[],
            },
        )
        .unwrap()
        .unwrap();
        assert_eq!(out.matches("</script>").count(), 4, "{out}");
    }

    #[test]
    fn the_boot_script_is_stripped_of_comments() {
        let s = boot_script();
        assert!(s.starts_with("(function (G, c) {"), "{s}");
        assert!(s.contains("KILN_CONFIG"));
        assert!(!s.contains("\n//") && !s.contains("</script"));
        assert!(s.len() < 5000, "{} bytes", s.len());
    }

    #[test]
    fn relative_paths() {
        assert_eq!(relative_to("index.html", "libs/a.js"), "libs/a.js");
        assert_eq!(relative_to("play/index.html", "libs/a.js"), "../libs/a.js");
        assert_eq!(relative_to("play/x/index.html", "play/a.js"), "../a.js");
    }
}
