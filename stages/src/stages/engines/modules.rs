//! A page's static ES module graph, as far as the build shows it: which of the build's files
//! the browser will import, so the rewrite can `modulepreload` all of them at once instead of
//! the browser discovering them one import at a time.
//!
//! Only static `import … from '…'`, `import '…'` and `export … from '…'` are followed;
//! dynamic `import()` is not (it runs later anyway). A specifier is resolved the way the
//! browser does: through the page's import map (exact keys, then the longest `…/` prefix; keys
//! that are URLs relative to the page match resolved URLs), else relative to the importing
//! module. Anything outside the build (`https://…`, root-relative) is left out. A hint that
//! turns out wrong costs a request, never correctness.

use std::collections::{BTreeSet, VecDeque};
use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Map, Value};

use crate::ir::resolve_uri;

/// At most this many modules are followed per page.
pub const MAX_MODULES: usize = 128;

static IMPORTS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"(?:^|[^.\w$])(?:import|export)\s*(?:[\w$*{}\s,]+?\s*from\s*)?["']([^"'\n]+)["']"#)
        .expect("static regex")
});

/// Where a specifier leads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A file of the build (its build path).
    File(String),
    /// An absolute URL (e.g. the library copy an import map now names).
    Url(String),
}

/// The merged import map of a page, with its entries resolved against the page.
pub struct ImportMap<'a> {
    page: &'a str,
    imports: &'a Map<String, Value>,
}

impl<'a> ImportMap<'a> {
    pub fn new(page: &'a str, map: &'a Value) -> Self {
        static EMPTY: LazyLock<Map<String, Value>> = LazyLock::new(Map::new);
        let imports = map
            .get("imports")
            .and_then(Value::as_object)
            .unwrap_or(&EMPTY);
        Self { page, imports }
    }

    fn target_of(&self, value: &str) -> Option<Target> {
        if value.contains("://") {
            return Some(Target::Url(value.to_string()));
        }
        resolve_uri(self.page, value).map(Target::File)
    }

    /// `spec` imported from the build file `from`.
    pub fn resolve(&self, spec: &str, from: &str) -> Option<Target> {
        let url_like = spec.starts_with("./") || spec.starts_with("../") || spec.starts_with('/');
        if url_like {
            if spec.starts_with('/') {
                return None;
            }
            let path = resolve_uri(from, spec)?;
            // URL keys of the map match the resolved URL.
            for (key, value) in self.imports {
                if !(key.starts_with("./") || key.starts_with("../")) {
                    continue;
                }
                let Some(key_path) = resolve_uri(self.page, key) else {
                    continue;
                };
                let value = value.as_str()?;
                if key_path == path {
                    return self.target_of(value);
                }
                if key.ends_with('/')
                    && let Some(rest) = path.strip_prefix(&format!("{key_path}/"))
                {
                    return self.target_of(&format!("{value}{rest}"));
                }
            }
            return Some(Target::File(path));
        }
        if spec.contains("://") {
            return Some(Target::Url(spec.to_string()));
        }
        if let Some(value) = self.imports.get(spec).and_then(Value::as_str) {
            return self.target_of(value);
        }
        let prefix = self
            .imports
            .iter()
            .filter(|(k, _)| k.ends_with('/') && spec.starts_with(k.as_str()))
            .max_by_key(|(k, _)| k.len())?;
        let value = prefix.1.as_str()?;
        self.target_of(&format!("{value}{}", &spec[prefix.0.len()..]))
    }
}

/// Static import specifiers of one module's source.
pub fn imports_of(source: &str) -> Vec<&str> {
    IMPORTS
        .captures_iter(source)
        .filter_map(|c| c.get(1).map(|m| m.as_str()))
        .collect()
}

/// The page's module graph: every build file reached from `entries` (build paths of module
/// scripts, and the inline modules' sources), breadth first, and every URL reached.
pub struct Graph {
    pub files: Vec<String>,
    pub urls: BTreeSet<String>,
    /// Sources read (build paths), for later scans.
    pub sources: Vec<(String, String)>,
}

pub fn graph(
    page: &str,
    map: &Value,
    entries: &[String],
    inline: &[String],
    read: &dyn Fn(&str) -> Option<String>,
) -> Graph {
    let map = ImportMap::new(page, map);
    let mut out = Graph {
        files: Vec::new(),
        urls: BTreeSet::new(),
        sources: Vec::new(),
    };
    let mut seen = BTreeSet::new();
    let mut queue: VecDeque<String> = VecDeque::new();
    fn push(
        target: Option<Target>,
        out: &mut Graph,
        queue: &mut VecDeque<String>,
        seen: &mut BTreeSet<String>,
    ) {
        match target {
            Some(Target::File(path)) if seen.insert(path.clone()) => queue.push_back(path),
            Some(Target::Url(url)) => {
                out.urls.insert(url);
            }
            _ => {}
        }
    }
    for path in entries {
        push(
            Some(Target::File(path.clone())),
            &mut out,
            &mut queue,
            &mut seen,
        );
    }
    for source in inline {
        for spec in imports_of(source) {
            push(map.resolve(spec, page), &mut out, &mut queue, &mut seen);
        }
    }
    while let Some(path) = queue.pop_front() {
        if out.files.len() >= MAX_MODULES {
            break;
        }
        let Some(source) = read(&path) else { continue };
        out.files.push(path.clone());
        for spec in imports_of(&source) {
            push(map.resolve(spec, &path), &mut out, &mut queue, &mut seen);
        }
        out.sources.push((path, source));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_imports_are_found() {
        let src = r#"import * as THREE from 'three';
import { GLTFLoader } from "three/addons/loaders/GLTFLoader.js";
import './side-effect.js';
export { a } from '../a.js';
export * from "./b.js";
const x = import('./lazy.js'); obj.import('nope.js');
import{c}from"./c.js";"#;
        assert_eq!(
            imports_of(src),
            [
                "three",
                "three/addons/loaders/GLTFLoader.js",
                "./side-effect.js",
                "../a.js",
                "./b.js",
                "./c.js"
            ]
        );
    }

    #[test]
    fn specifiers_resolve_like_the_browser() {
        let map = serde_json::json!({"imports": {
            "three": "https://kiln.test/cdn/library/ab/x.js",
            "three/addons/": "./vendor/addons/",
            "./vendor/three.module.js": "https://kiln.test/cdn/library/ab/x.js",
        }});
        let m = ImportMap::new("play/index.html", &map);
        assert_eq!(
            m.resolve("three", "play/game.js"),
            Some(Target::Url("https://kiln.test/cdn/library/ab/x.js".into()))
        );
        assert_eq!(
            m.resolve("three/addons/loaders/GLTFLoader.js", "play/game.js"),
            Some(Target::File(
                "play/vendor/addons/loaders/GLTFLoader.js".into()
            ))
        );
        assert_eq!(
            m.resolve("../utils/B.js", "play/vendor/addons/loaders/GLTFLoader.js"),
            Some(Target::File("play/vendor/addons/utils/B.js".into()))
        );
        assert_eq!(
            m.resolve("./vendor/three.module.js", "play/game.js"),
            Some(Target::Url("https://kiln.test/cdn/library/ab/x.js".into())),
            "URL keys match relative imports"
        );
        assert_eq!(m.resolve("/abs.js", "play/game.js"), None);
        assert_eq!(m.resolve("lodash", "play/game.js"), None);
    }

    #[test]
    fn graph_follows_imports_once() {
        let files = std::collections::HashMap::from([
            (
                "game.js",
                "import 'three'; import {a} from './a.js'; import './b.js';",
            ),
            ("a.js", "import './b.js'; import './a.js';"),
            ("b.js", "export const b = 1;"),
        ]);
        let map = serde_json::json!({"imports": {"three": "https://lib/x.js"}});
        let g = graph(
            "index.html",
            &map,
            &["game.js".into()],
            &["import './a.js'".into()],
            &|p| files.get(p).map(|s| s.to_string()),
        );
        assert_eq!(g.files, ["game.js", "a.js", "b.js"]);
        assert_eq!(g.urls.into_iter().collect::<Vec<_>>(), ["https://lib/x.js"]);
    }
}
