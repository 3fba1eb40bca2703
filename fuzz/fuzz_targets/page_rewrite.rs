//! Stage `engines`' page rewrite (`engines/html.rs`): a page that loads a library engine,
//! its modules read from the input. Input: the page, then after a NUL byte the source of
//! `main.js` (which the page may import).
#![no_main]

use kiln_worker::stages::engines::html::{BootEngine, BootLinks, PageInputs, rewrite_page};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (page, module) = match data.iter().position(|&b| b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &b""[..]),
    };
    let (Ok(page), Ok(module)) = (std::str::from_utf8(page), std::str::from_utf8(module)) else {
        return;
    };
    let engines = [BootEngine {
        name: "three".into(),
        version: "0.170.0".into(),
        sha256: "00".repeat(32),
        size: 1000,
        url: "https://cdn.example/library/three.js".into(),
        path: "lib/three.module.js".into(),
        global: "THREE".into(),
        module: true,
        build_path: "lib/three.module.js".into(),
    }];
    let links = BootLinks {
        loader: "https://api.example/sdk/kiln-loader.js".into(),
        game: "game".into(),
        manifest: "https://api.example/v1/games/game/manifest".into(),
        telemetry: "https://api.example/v1/telemetry".into(),
        keys: vec![],
        build: "build".into(),
        base: Some("https://api.example/play/game/@build/".into()),
    };
    let read = |path: &str| match path {
        "main.js" | "js/main.js" => Some(module.to_string()),
        "lib/three.module.js" => Some("export const REVISION = '170';".to_string()),
        _ => None,
    };
    let models = ["models/fox.glb".to_string()];
    let assets = ["img/atlas.png".to_string()];
    let inputs = PageInputs {
        engines: &engines,
        links: &links,
        read: &read,
        models: &models,
        assets: &assets,
    };
    let _ = rewrite_page("index.html", page, &inputs);
});
