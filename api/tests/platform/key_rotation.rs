//! Key rotation end to end, in headless Chromium (Debian `chromium` driven by
//! `api/sdk/test/e2e.mjs`) against a running Kiln: a page rewritten before the online signing
//! key rotated still verifies the live manifest after its release was re-signed with the new
//! key (the loader learns the new key from the root-signed trust document), and a revoked key
//! is refused with `revoked_key`.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use kiln_common::signing::ManifestSignature;
use serde_json::{Value, json};

/// A classic-script three.js game: its page is rewritten to boot through the loader.
fn classic_game() -> Vec<u8> {
    let three = std::fs::read(sdk_dir().join("node_modules/three-150/build/three.min.js")).unwrap();
    zip_with(&[
        (
            "index.html",
            br#"<!doctype html><html><head><meta charset="utf-8"><title>classic</title>
<script src="lib/three.min.js"></script></head>
<body><script src="game.js"></script></body></html>"#,
        ),
        ("lib/three.min.js", &three),
        ("game.js", b"window.gameStarted = THREE.REVISION;\n"),
    ])
}

/// The kid that signed the live manifest of `game`.
async fn live_kid(kiln: &Kiln, game: &str) -> String {
    let response = kiln
        .http
        .get(format!("{}/v1/games/{game}/manifest", kiln.url))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    ManifestSignature::parse_header(response.headers()["kiln-signature"].to_str().unwrap())
        .unwrap()
        .kid
}

/// Polls until the live release of `game` is signed by `kid` (the workers re-sign it).
async fn wait_signed_by(kiln: &Kiln, game: &str, kid: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let live = live_kid(kiln, game).await;
        if live == kid {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the live release of {game} is still signed by {live}, not {kid}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The page's own loader and pinned keys verify the live manifest: `verified <sequence>` or
/// `rejected <reason>`.
const VERIFY_LIVE: &str = "kiln.preheat(__kilnBoot.cfg.manifest).then(r => 'verified ' + r.sequence, e => 'rejected ' + e.reason)";

fn manifest_events(line: &Value) -> Vec<String> {
    line["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "manifest")
        .map(|e| format!("{}/{}", e["outcome"], e["reason"]))
        .collect()
}

/// Problem 2 of issue 14: a page built before a rotation keeps verifying its live manifest
/// once the release was re-signed with the new online key.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_page_built_before_a_rotation_verifies_the_resigned_manifest() {
    let key_a = tempfile::NamedTempFile::new()
        .unwrap()
        .into_temp_path()
        .to_path_buf();
    let key_b = key_a.with_extension("b");
    let kiln = Kiln::start_with(Deployment::Embedded, |c| {
        c.signing_key_file = key_a.display().to_string();
        // Re-signed once less than half of it is left: every manifest served is valid for
        // 8 s more at least, time for a busy machine's browser to load the page and verify
        // it (at 6 s a loaded machine saw `expired`), and a new key signs within 10 s.
        c.library.manifest_ttl_secs = 20;
        c.library.resign_interval_secs = 1;
    })
    .await;
    let (_, token) = kiln.team("rotation").await;
    kiln.publish(&token, "rotated", "1.0.0", classic_game())
        .await;
    let old_kid = live_kid(&kiln, "rotated").await;
    let page = format!("{}/play/rotated/", kiln.url);
    let before = browse(json!([
        {"open": page, "wait_for": "window.gameStarted === '150'", "eval": VERIFY_LIVE},
    ]))
    .await;
    assert!(
        before[0]["result"]
            .as_str()
            .unwrap()
            .starts_with("verified"),
        "{}",
        before[0]
    );

    // Rotate the online key: the workers restart with a new one (same address, so the page's
    // absolute links still point here).
    let bind = kiln.url.trim_start_matches("http://").to_string();
    let content_bind = kiln.content.trim_start_matches("http://").to_string();
    let kiln = kiln
        .restart_with(|c| {
            c.signing_key_file = key_b.display().to_string();
            c.bind = bind;
            c.content_bind = content_bind;
        })
        .await;
    let new_kid = kiln_common::signing::ManifestSigner::load_or_generate(&key_b)
        .unwrap()
        .0
        .kid()
        .to_string();
    assert_ne!(old_kid, new_kid);
    wait_signed_by(&kiln, "rotated", &new_kid).await;

    // The OLD page (the live build's rewritten index.html), on a fresh device and on the one
    // that saw it before the rotation.
    let after = browse(json!([
        {"open": page, "wait_for": "window.gameStarted === '150'", "eval": VERIFY_LIVE},
        {"open": page, "wait_for": "window.gameStarted === '150'", "eval": VERIFY_LIVE,
         "new_context": true},
    ]))
    .await;
    for line in &after {
        assert_eq!(line["started"], true, "{line}");
        let result = line["result"].as_str().unwrap_or_default();
        assert!(result.starts_with("verified"), "{line}");
        assert_eq!(manifest_events(line), Vec::<String>::new(), "{line}");
        let fallbacks: Vec<&Value> = line["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["type"] == "preheat" && e["outcome"] == "fallback")
            .collect();
        assert!(fallbacks.is_empty(), "{line}");
    }
    kiln.stop().await;
    let _ = std::fs::remove_file(&key_a);
    let _ = std::fs::remove_file(&key_b);
}

/// The key commands against a running Kiln: `keys rotate` (workers restarted on the new key),
/// `keys rotate-root` (the old page pins only the old root, which co-signs), `keys revoke`
/// (a manifest signed by the revoked key is refused in the browser, and leaves the JWKS).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn key_commands_rotate_revoke_and_rotate_the_root() {
    use kiln_common::signing::ManifestSigner;
    use kiln_worker::keys;
    let kiln = Kiln::start_with(Deployment::Embedded, |c| {
        // Re-signed once less than half of it is left: every manifest served is valid for
        // 8 s more at least, time for a busy machine's browser to load the page and verify
        // it (at 6 s a loaded machine saw `expired`), and a new key signs within 10 s.
        c.library.manifest_ttl_secs = 20;
        c.library.resign_interval_secs = 1;
    })
    .await;
    let (_, token) = kiln.team("commands").await;
    kiln.publish(&token, "commands", "1.0.0", classic_game())
        .await;
    let (old, _) = ManifestSigner::load_or_generate(&kiln.config.signing_key_path()).unwrap();
    let db = kiln.running.as_ref().unwrap().state.db.clone();
    let rotated = keys::rotate(&kiln.config, &db).await.unwrap();
    let new_kid = rotated.active().unwrap().kid.clone();
    assert_ne!(new_kid, old.kid());
    let bind = kiln.url.trim_start_matches("http://").to_string();
    let content_bind = kiln.content.trim_start_matches("http://").to_string();
    let kiln = kiln
        .restart_with(|c| {
            c.bind = bind;
            c.content_bind = content_bind;
        })
        .await;
    let db = kiln.running.as_ref().unwrap().state.db.clone();
    wait_signed_by(&kiln, "commands", &new_kid).await;

    // Revoking the active key is refused; the old one (nothing live signed by it) is not.
    assert!(
        keys::revoke(&kiln.config, &db, &new_kid, false)
            .await
            .is_err()
    );
    let (root_rotated, root) = keys::rotate_root(&kiln.config, &db).await.unwrap();
    assert_eq!(root_rotated.roots.len(), 2);
    let (revoked, _) = keys::revoke(&kiln.config, &db, old.kid(), false)
        .await
        .unwrap();
    assert_eq!(revoked.revoked, [old.kid().to_string()]);
    let jwks = kiln.jwks().await;
    assert!(!jwks.to_string().contains(old.kid()), "{jwks}");

    // The live manifest's bytes signed again by the revoked key (a thief holding it), where
    // pages fetch it: the content origin.
    let manifest_url = format!("{}/v1/games/commands/manifest", kiln.content);
    let live = kiln.http.get(&manifest_url).send().await.unwrap();
    let bytes = live.bytes().await.unwrap();
    let forged = json!({
        "url": manifest_url,
        "status": 200,
        "headers": {"content-type": "application/json", "cache-control": "no-store",
                    "kiln-signature": old.sign(&bytes).header_value(),
                    "access-control-allow-origin": "*",
                    "access-control-expose-headers": "Kiln-Signature"},
        "body_base64": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &bytes),
    });
    let page = format!("{}/play/commands/", kiln.url);
    let pinned_new_root = format!(
        "kiln.preheat(__kilnBoot.cfg.manifest, {{keys: [{}]}}).then(r => 'verified ' + r.sequence, e => 'rejected ' + e.reason)",
        serde_json::to_string(&root).unwrap()
    );
    let lines = browse(json!([
        // Built before the root rotation: pins only the old root, which co-signs.
        {"open": page, "wait_for": "window.gameStarted === '150'", "eval": VERIFY_LIVE},
        // A host that pins only the new root.
        {"open": page, "wait_for": "window.gameStarted === '150'", "eval": pinned_new_root},
        {"open": page, "wait_for": "window.gameStarted === '150'", "eval": VERIFY_LIVE,
         "routes": [forged], "new_context": true},
    ]))
    .await;
    assert!(
        lines[0]["result"].as_str().unwrap().starts_with("verified"),
        "{}",
        lines[0]
    );
    assert!(
        lines[1]["result"].as_str().unwrap().starts_with("verified"),
        "{}",
        lines[1]
    );
    assert_eq!(lines[2]["result"], "rejected revoked_key", "{}", lines[2]);
    assert!(
        manifest_events(&lines[2]).contains(&"\"rejected\"/\"revoked_key\"".to_string()),
        "{}",
        lines[2]
    );
    kiln.stop().await;
}
