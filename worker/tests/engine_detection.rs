//! Engine detection on real published engine builds, installed from npm
//! (`tests/engines/package.json`: several versions of three.js, Phaser, PixiJS, Babylon.js and
//! PlayCanvas, plus libraries that are not engines), judged against `tests/engines/corpus.json`.
//! The page rewrite is checked on the sample game's real page.

mod support;

use std::path::{Path, PathBuf};

use kiln_stages::stages::engines::{EngineRules, rules::is_module};
use serde_json::Value;
use support::npm_installed;

fn corpus_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/engines");
    npm_installed(&dir, "node_modules/.package-lock.json", "ci");
    dir
}

#[test]
fn every_published_engine_build_is_named_and_nothing_else_is() {
    let dir = corpus_dir();
    let corpus: Vec<Value> =
        serde_json::from_slice(&std::fs::read(dir.join("corpus.json")).unwrap()).unwrap();
    let rules = EngineRules::load(None).unwrap();
    let mut failures = Vec::new();
    let (mut engines, mut others) = (0, 0);
    println!(
        "{:<62} {:>10}  {:<22} {:<22}",
        "file", "bytes", "expected", "detected"
    );
    for entry in &corpus {
        let file = entry["file"].as_str().unwrap();
        let bytes = std::fs::read(dir.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        let found = rules.detect(file, &bytes);
        let expected = entry["engine"]
            .as_str()
            .map(|name| format!("{name} {}", entry["version"].as_str().unwrap()));
        let detected: Vec<String> = found
            .iter()
            .map(|d| format!("{} {}", d.name, d.version))
            .collect();
        println!(
            "{file:<62} {:>10}  {:<22} {:<22}",
            bytes.len(),
            expected.as_deref().unwrap_or("-"),
            if detected.is_empty() {
                "-".into()
            } else {
                detected.join(", ")
            }
        );
        match &expected {
            Some(expected) => {
                engines += 1;
                if detected != [expected.clone()] {
                    failures.push(format!("{file}: expected {expected}, got {detected:?}"));
                } else if let Some(module) = entry["module"].as_bool()
                    && found[0].module != module
                {
                    failures.push(format!(
                        "{file}: module = {} (expected {module})",
                        found[0].module
                    ));
                }
            }
            None => {
                others += 1;
                if !detected.is_empty() {
                    failures.push(format!("{file}: not an engine, taken for {detected:?}"));
                }
            }
        }
    }
    println!("{engines} engine builds, {others} other files");
    assert!(
        engines >= 20 && others >= 5,
        "the corpus is too small to mean much"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn module_kind_matches_the_file() {
    let dir = corpus_dir();
    let three = dir.join("node_modules/three-160/build");
    let module = std::fs::read(three.join("three.module.min.js")).unwrap();
    let classic = std::fs::read(three.join("three.min.js")).unwrap();
    assert!(is_module("three.module.min.js", &module));
    assert!(!is_module("three.min.js", &classic));
}

/// The stage on the sample game's real page and its real three.js build (npm).
#[test]
fn the_sample_games_page_gets_the_loader() {
    use kiln_stages::stages::engines::{self, BootLinks, EngineOptions};
    use kiln_stages::stages::{FileTree, Files, Stage, TreeFile, inventory};

    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/sample-game");
    npm_installed(
        &sample,
        "vendor/addons/libs/meshopt_decoder.module.js",
        "install",
    );
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for path in ["game.js", "index.html", "vendor/three.module.min.js"] {
        let to = dir.path().join(path);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(sample.join(path), &to).unwrap();
        files.push(TreeFile {
            path: path.into(),
            size: std::fs::metadata(&to).unwrap().len(),
        });
    }
    let engine_bytes = std::fs::read(dir.path().join("vendor/three.module.min.js")).unwrap();
    let tree = FileTree {
        root: dir.path().to_owned(),
        files,
    };
    let (inventory, _) = inventory::Step::run(&tree, &(), &mut |_| {}).unwrap();
    let links = BootLinks {
        loader: "https://kiln.test/sdk/kiln-loader.js".into(),
        game: "sample".into(),
        manifest: "https://kiln.test/v1/games/sample/manifest".into(),
        telemetry: "https://kiln.test/v1/telemetry".into(),
        keys: vec![],
        build: "b1".into(),
        base: Some("https://kiln.test/play/sample/@b1/".into()),
    };
    let input = engines::EnginesInput {
        files: Files {
            tree: &tree,
            inventory: &inventory,
        },
        links: &links,
        library_url: &|k| format!("https://kiln.test/cdn/{k}"),
    };
    let (tree, report) = engines::Step::run(input, &EngineOptions::default(), &mut |_| {}).unwrap();
    let page_size = std::fs::metadata(dir.path().join("index.html"))
        .unwrap()
        .len();
    assert_eq!(
        tree.files
            .iter()
            .find(|f| f.path == "index.html")
            .unwrap()
            .size,
        page_size,
        "the tree knows the page's new size"
    );
    assert_eq!(report.engines.len(), 1, "{report:?}");
    let engine = &report.engines[0];
    assert_eq!(
        (
            engine.name.as_str(),
            engine.version.as_str(),
            engine.path.as_str(),
            engine.module
        ),
        ("three", "0.160", "vendor/three.module.min.js", true)
    );
    assert_eq!(engine.size, engine_bytes.len() as u64);
    assert!(engine.library_key.starts_with("library/"));
    assert!(
        (report.package_reduction - engine.size as f64 / report.build_bytes as f64).abs() < 1e-12
    );
    assert_eq!(report.pages.len(), 1);
    let page = std::fs::read_to_string(dir.path().join("index.html")).unwrap();
    assert!(
        page.contains(r#"<script async src="https://kiln.test/sdk/kiln-loader.js"></script>"#),
        "{page}"
    );
    assert!(
        page.contains(r#"<base href="https://kiln.test/play/sample/@b1/">"#),
        "{page}"
    );
    assert!(
        !page.contains(r#"type="importmap""#),
        "the boot script writes the map: {page}"
    );
    assert!(
        page.contains(r#"<script type="module" src="game.js"></script>"#),
        "the game's module runs as written: {page}"
    );
    assert_eq!(
        report.pages[0].rewrite.preloaded,
        ["game.js"],
        "the addons are not in this tree"
    );
    assert!(page.contains(&format!(
        r#"<link rel="modulepreload" href="https://kiln.test/cdn/{}" integrity="sha256-"#,
        engine.library_key
    )));
    assert!(
        page.contains(r#""path":"vendor/three.module.min.js""#),
        "{page}"
    );
    assert!(page.contains(&format!(r#""sha256":"{}""#, engine.sha256)));
    // The engine itself stays, byte for byte: it is the fallback.
    assert_eq!(
        std::fs::read(dir.path().join("vendor/three.module.min.js")).unwrap(),
        engine_bytes
    );
}
