//! The engine library end to end, in headless Chromium (Debian `chromium` driven by
//! `api/sdk/test/e2e.mjs`) against a running Kiln: two games with the same three.js build and a
//! third with another version; a cold miss, a hit from the shared cache, a version mismatch; a
//! tampered library object caught, never run, and the game started from its own copy; manifests
//! with a bad signature, an unknown key, an older sequence or past their expiry rejected; and
//! the telemetry the server stored equal to what the pages reported.
//!
//! Also runs the loader's own browser tests (`node --test api/sdk/test/`).

mod common;

use std::io::Write;
use std::process::Command;
use std::time::{Duration, Instant};

use base64::Engine;
use common::*;
use kiln_common::signing::{ManifestSignature, ManifestSigner};
use serde_json::{Value, json};

#[test]
fn loader_browser_tests_pass() {
    let dir = sdk_dir();
    let output = Command::new("node")
        .args(["--test", "test/"])
        .current_dir(&dir)
        .output()
        .expect("node runs the loader tests");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let summary: Vec<&str> = stdout.lines().filter(|l| l.starts_with("# ")).collect();
    println!("{}", summary.join("\n"));
    assert!(
        output.status.success(),
        "loader tests failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("# fail 0"), "{stdout}");
    // node's runner prints `# pass N`: zero tests found passes `# fail 0` too.
    let passed: u32 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("# pass "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    assert!(passed >= 40, "only {passed} loader tests ran:\n{stdout}");
}

/// `outcome/reason` of each engine event a page reported.
fn outcomes(line: &Value) -> Vec<String> {
    line["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "preheat")
        .map(|e| {
            format!(
                "{}/{}",
                e["outcome"].as_str().unwrap(),
                e["reason"].as_str().unwrap_or("-")
            )
        })
        .collect()
}

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
        (
            "game.js",
            b"const scene = new THREE.Scene();\nscene.add(new THREE.Object3D());\nwindow.gameStarted = THREE.REVISION;\n",
        ),
    ])
}

/// A host page ("the container"): only the loader, no engine of its own.
fn host_page() -> Vec<u8> {
    zip_with(&[(
        "index.html",
        br#"<!doctype html><html><head><meta charset="utf-8"><script src="/sdk/kiln-loader.js"></script></head><body>host</body></html>"#,
    )])
}

fn route(url: &str, body: &[u8], signature: &str) -> Value {
    json!({
        "url": url,
        "status": 200,
        "headers": {"content-type": "application/json", "kiln-signature": signature, "cache-control": "no-store"},
        "body_base64": base64::engine::general_purpose::STANDARD.encode(body),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn engine_library_in_a_real_browser() {
    // Workers re-decide per-class variants every second here (60 s by default).
    let kiln = Kiln::start_with(Deployment::Embedded, |c| {
        c.variants.refresh_secs = 1;
        // No load explores another variant: decode-e2e checks that a page loads the variant
        // its class manifest chose (by default 50 ‰ of loads would try the other one).
        c.variants.explore_per_mille = 0;
        c.telemetry.client_ip_header = "x-real-ip".into();
    })
    .await;
    let (_, token) = kiln.team("e2e").await;
    let mut builds = Vec::new();
    for (game, package) in [
        ("shared-a", sample_package()),
        ("shared-b", sample_package()),
        ("classic-150", classic_game()),
        ("host", host_page()),
    ] {
        builds.push((game, kiln.publish(&token, game, "1.0.0", package).await));
    }
    let url = kiln.url.clone();
    // Where players' browsers load games from.
    let content = kiln.content.clone();
    let sample_started = "window.kiln && kiln.events.some(e => e.type === 'preheat') \
        && document.getElementById('message').textContent === ''";

    // One device: cold, then the shared cache, then another version.
    let first = browse(json!([
        {"open": format!("{content}/play/shared-a/"), "wait_for": sample_started},
        {"open": format!("{content}/play/shared-b/"), "wait_for": sample_started},
        {"open": format!("{content}/play/classic-150/"), "wait_for": "window.gameStarted === '150'"},
    ]))
    .await;
    for line in &first {
        assert_eq!(line["started"], true, "{line}");
    }
    assert_eq!(outcomes(&first[0]), ["miss/cold"], "{}", first[0]);
    assert_eq!(outcomes(&first[1]), ["hit/-"], "{}", first[1]);
    assert_eq!(
        outcomes(&first[2]),
        ["miss/version_mismatch"],
        "{}",
        first[2]
    );

    // A host's pre-warm fetches what the game's page loads, at the URLs it loads them from:
    // opened right after, the page gets every file of its own (its folder under
    // /play/{game}/@{build}/, the versioned loader) from the HTTP cache. A new device.
    let keys = kiln.jwks().await["keys"].clone();
    let manifest_b = format!("{content}/v1/games/shared-b/manifest");
    let resources = "performance.getEntriesByType('resource').map(e => ({url: e.name, transfer: e.transferSize, body: e.decodedBodySize}))";
    let warmed = browse(json!([
        {"open": format!("{content}/play/host/"), "wait_for": "window.kiln",
         "eval": format!("kiln.preheat({manifest_b:?}, {{keys: {keys}}}).then(r => kiln.engine('three').then(() => r.warmed), e => ({{rejected: e.reason}}))")},
        {"open": format!("{content}/play/shared-b/"), "wait_for": sample_started, "eval": resources},
    ]))
    .await;
    assert!(
        warmed[0]["result"].as_u64().unwrap_or(0) > 0,
        "nothing warmed: {}",
        warmed[0]
    );
    let own: Vec<&Value> = warmed[1]["result"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| {
            let u = r["url"].as_str().unwrap_or("");
            u.contains("/play/shared-b/@") || u.contains("/sdk/kiln-loader.")
        })
        .collect();
    let fetched_again: Vec<&&Value> = own
        .iter()
        .filter(|r| r["transfer"].as_u64() != Some(0))
        .collect();
    assert!(own.len() >= 3, "the page's own files: {own:?}");
    assert!(
        fetched_again.is_empty(),
        "fetched again after the host's pre-warm: {fetched_again:?} (of {} own files)",
        own.len()
    );
    eprintln!(
        "pre-warm: the page's {} own files all came from the HTTP cache: {:?}",
        own.len(),
        own.iter().map(|r| &r["url"]).collect::<Vec<_>>()
    );

    // Bytes changed in storage: the library copies of three 0.150 (a classic script) and of
    // three 0.160 (an ES module), in every encoding. The revision constant is the first thing
    // each build defines: a change a hash must catch.
    let storage = &kiln.running.as_ref().unwrap().state.storage;
    for (game, from, to) in [
        ("classic-150", r#"const e="150""#, r#"const e="666""#),
        ("shared-a", r#"const t="160""#, r#"const t="666""#),
    ] {
        let (_, manifest) = kiln
            .get_json(&token, &format!("/v1/games/{game}/manifest"))
            .await;
        let library_url = manifest["engines"][0]["url"].as_str().unwrap();
        tamper(
            storage,
            library_url.split("/cdn/").nth(1).unwrap(),
            from,
            to,
        )
        .await;
    }

    // A re-release: the device will have seen sequence 2, so the signed sequence-1 release is a
    // rollback.
    let response = kiln
        .http
        .post(format!("{url}/v1/games/shared-a/releases"))
        .bearer_auth(&token)
        .json(&json!({"build_id": builds[0].1}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let db = &kiln.running.as_ref().unwrap().state.db;
    let releases = db.releases("shared-a", 10).await.unwrap();
    assert_eq!(releases.len(), 2);
    let (live, old) = (&releases[0], &releases[1]);
    let header = |row: &kiln_common::db::ReleaseRow| {
        ManifestSignature {
            kid: row.kid.clone(),
            signature: base64::engine::general_purpose::STANDARD
                .decode(&row.signature)
                .unwrap(),
        }
        .header_value()
    };
    let live_bytes = storage.get_bytes(&live.manifest_key).await.unwrap();
    let old_bytes = storage.get_bytes(&old.manifest_key).await.unwrap();
    let mut bad_signature = ManifestSignature::parse_header(&header(live)).unwrap();
    bad_signature.signature[0] ^= 1;
    // Signed with Kiln's own key, but expired.
    let (signer, _) = ManifestSigner::load_or_generate(&kiln.config.signing_key_path()).unwrap();
    let mut expired: Value = serde_json::from_slice(&live_bytes).unwrap();
    expired["sequence"] = json!(99);
    expired["expires"] = json!("2020-01-01T00:00:00Z");
    let expired = serde_json::to_vec_pretty(&expired).unwrap();
    let expired_signature = signer.sign(&expired).header_value();

    let keys = kiln.jwks().await["keys"].clone();
    let foreign = ManifestSigner::from_seed([9; 32]).public_jwk();
    let manifest_a = format!("{content}/v1/games/shared-a/manifest");
    let preheat = |keys: &Value| {
        format!(
            "kiln.preheat({manifest_a:?}, {{keys: {keys}}}).then(r => kiln.engine('three').then(() => ({{sequence: r.sequence, engines: r.engines.map(e => e.name + ' ' + e.version)}})), e => ({{rejected: e.reason}}))"
        )
    };
    let host = format!("{content}/play/host/");
    // A new device (fresh browser profile).
    let second = browse(json!([
        {"open": format!("{content}/play/classic-150/"), "wait_for": "window.gameStarted === '150'"},
        {"open": format!("{content}/play/shared-b/"), "wait_for": sample_started},
        {"open": host, "wait_for": "window.kiln", "eval": preheat(&keys)},
        {"open": host, "wait_for": "window.kiln", "eval": preheat(&keys),
         "routes": [route(&manifest_a, &old_bytes, &header(old))]},
        {"open": host, "wait_for": "window.kiln", "eval": preheat(&keys),
         "routes": [route(&manifest_a, &live_bytes, &bad_signature.header_value())]},
        {"open": host, "wait_for": "window.kiln", "eval": preheat(&json!([foreign]))},
        {"open": host, "wait_for": "window.kiln", "eval": preheat(&keys),
         "routes": [route(&manifest_a, &expired, &expired_signature)]},
    ]))
    .await;
    // The tampered copies never ran: the classic game started on the build's own three.js
    // (r150, written in place of the library copy), the module game on its own r160 (the page
    // loaded once more with the import map pointed at the build's copy).
    assert_eq!(second[0]["started"], true, "{}", second[0]);
    assert_eq!(
        outcomes(&second[0]),
        ["fallback/integrity_failed"],
        "{}",
        second[0]
    );
    assert_eq!(second[1]["started"], true, "{}", second[1]);
    assert_eq!(
        outcomes(&second[1]),
        ["fallback/integrity_failed"],
        "{}",
        second[1]
    );
    assert_eq!(
        second[2]["result"],
        json!({"sequence": 2, "engines": ["three 0.160"]}),
        "{}",
        second[2]
    );
    let rejected: Vec<&Value> = second[3..]
        .iter()
        .map(|l| &l["result"]["rejected"])
        .collect();
    assert_eq!(
        rejected,
        [
            &json!("rollback"),
            &json!("bad_signature"),
            &json!("unknown_key"),
            &json!("expired")
        ],
        "{second:?}"
    );

    // What the server stored is what the pages reported.
    let mut reported: Vec<(String, String, String, String)> = Vec::new();
    for line in first.iter().chain(&warmed).chain(&second) {
        for e in line["events"].as_array().unwrap() {
            reported.push((
                e["game"].as_str().unwrap().to_string(),
                e["type"].as_str().unwrap().to_string(),
                // Decode events (the sample game loads its fox through kiln.model) have none.
                e["outcome"].as_str().unwrap_or("").to_string(),
                e["reason"].as_str().unwrap_or("-").to_string(),
            ));
        }
    }
    reported.sort();
    let games = ["shared-a", "shared-b", "classic-150"];
    let deadline = Instant::now() + Duration::from_secs(20);
    let stored = loop {
        let mut stored = Vec::new();
        for game in games {
            for e in db.telemetry_for_game(game).await.unwrap() {
                stored.push((
                    e.game,
                    e.kind,
                    e.outcome.unwrap_or_default(),
                    e.reason.unwrap_or_else(|| "-".into()),
                ));
            }
        }
        stored.sort();
        if stored.len() >= reported.len() || Instant::now() > deadline {
            break stored;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(
        stored, reported,
        "stored telemetry = what the pages reported"
    );

    println!("\nstored telemetry, per game (hit / miss / fallback / manifest rejected):");
    for game in games {
        let count = |kind: &str, outcome: &str| {
            stored
                .iter()
                .filter(|e| e.0 == game && e.1 == kind && e.2 == outcome)
                .count()
        };
        let reasons: Vec<String> = stored
            .iter()
            .filter(|e| e.0 == game && e.3 != "-")
            .map(|e| format!("{}/{}", e.2, e.3))
            .collect();
        println!(
            "  {game:<12} {} / {} / {} / {}   {}",
            count("preheat", "hit"),
            count("preheat", "miss"),
            count("preheat", "fallback"),
            count("manifest", "rejected"),
            reasons.join(", ")
        );
    }
    println!("package reduction per build (engine bytes moved to the library / build bytes):");
    for (game, build) in &builds {
        let (_, report) = kiln
            .get_json(&token, &format!("/v1/builds/{build}/report"))
            .await;
        let split = &report["stages"]["engines"];
        println!(
            "  {game:<12} {:>9} of {:>9} bytes  −{:.2} %",
            split["bytes_moved"],
            split["build_bytes"],
            split["package_reduction"].as_f64().unwrap() * 100.0
        );
    }
    let (_, library) = kiln.get_json(&token, "/v1/library").await;
    for entry in library["entries"].as_array().unwrap() {
        println!(
            "  library {} {}: {} games, hits {} misses {} fallbacks {}, roi {:.2}",
            entry["engine"],
            entry["version"],
            entry["games"],
            entry["hits"],
            entry["misses"],
            entry["fallbacks"],
            entry["roi"].as_f64().unwrap()
        );
    }
    let page_decodes = reported.iter().filter(|e| e.1 == "decode").count() as i64;
    assert!(
        page_decodes >= 3,
        "the sample pages load their fox through kiln.model"
    );
    device_telemetry_is_consistent_everywhere(&kiln, &token, page_decodes).await;
    kiln.stop().await;
}

/// Replaces `from` by `to` (same length) in a stored object and its br/gzip forms.
async fn tamper(storage: &kiln_common::storage::Storage, key: &str, from: &str, to: &str) {
    let original = storage.get_bytes(key).await.unwrap();
    let text = String::from_utf8(original.to_vec()).unwrap();
    assert!(text.contains(from), "{key} holds {from}");
    let tampered = text.replacen(from, to, 1).into_bytes();
    assert_eq!(tampered.len(), original.len());
    let mut br = Vec::new();
    {
        let mut w = brotli::CompressorWriter::new(&mut br, 4096, 5, 22);
        w.write_all(&tampered).unwrap();
    }
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&tampered).unwrap();
    storage.put_bytes(key, tampered.into()).await.unwrap();
    storage
        .put_bytes(&format!("{key}.br"), br.into())
        .await
        .unwrap();
    storage
        .put_bytes(&format!("{key}.gz"), gz.finish().unwrap().into())
        .await
        .unwrap();
}

/// Runs a CLI from `api/sdk/test/` and returns its one JSON line.
async fn sdk_cli(script: &str, args: Vec<String>) -> Value {
    let dir = sdk_dir();
    let script = dir.join("test").join(script);
    let output = tokio::task::spawn_blocking(move || {
        Command::new("node")
            .arg(&script)
            .args(&args)
            .output()
            .expect("node runs the sdk CLI")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().last().unwrap_or("");
    assert!(
        output.status.success(),
        "{line}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(line).unwrap_or_else(|_| panic!("not JSON: {stdout}"))
}

/// `x.toFixed(1)` as JavaScript writes it: exact ties round up (Rust's `{:.1}` rounds them to
/// even, e.g. 81.25).
fn js_to_fixed_1(x: f64) -> String {
    let tenths = x * 10.0;
    if tenths.fract().abs() == 0.5 {
        format!("{:.1}", (tenths + 0.5 * tenths.signum()).trunc() / 10.0)
    } else {
        format!("{x:.1}")
    }
}

/// After the engine-library browser run: real decode beacons from three.js (the chosen
/// variant with meshoptimizer's decoder, and a decoder that fails to start), plus a synthetic
/// stream of decode beacons, show up consistently in `/metrics`, the rollups, the manifest's
/// per-class variant choices and `/dashboard` rendered in Chromium.
async fn device_telemetry_is_consistent_everywhere(kiln: &Kiln, token: &str, page_decodes: i64) {
    let url = &kiln.url;
    let manifest = format!("{}/v1/games/shared-a/manifest", kiln.content);
    let real = sdk_cli(
        "decode-e2e.mjs",
        vec![
            "--manifest".into(),
            manifest.clone(),
            "--model".into(),
            "assets/Fox.glb".into(),
            "--device-class".into(),
            "desktop".into(),
        ],
    )
    .await;
    assert_eq!(real["ok"], true, "{real}");
    assert_eq!(real["chosen"]["variant"], "meshopt", "{real}");
    assert!(real["chosen"]["ms"].as_f64().unwrap() > 0.0, "{real}");
    assert_eq!(real["fallback"]["variant"], "quantized", "{real}");
    assert_eq!(real["fallback"]["reason"], "decoder_init_failed", "{real}");
    println!(
        "\nreal decodes in Chromium (desktop): meshopt {} ms with {}, fallback quantized {} ms",
        real["chosen"]["ms"], real["chosen"]["decoder"], real["fallback"]["ms"]
    );

    // The synthetic stream: low-end Androids decode meshopt slowly, quantized fast.
    let low_end = json!({"os": "android", "os_version": "12", "model": "SM-A125F", "memory": 3, "cores": 8, "runtime": "chrome"});
    let mut events = Vec::new();
    for i in 0..40 {
        for (variant, decoder, ms) in [
            ("meshopt", "wasm", 250.0 + 4.0 * i as f64),
            ("quantized", "none", 8.0 + i as f64 / 4.0),
        ] {
            events.push(json!({"type": "decode", "game": "shared-a", "asset": "assets/Fox.glb",
                "variant": variant, "decoder": decoder, "bytes": 50000, "ms": ms, "device": low_end}));
        }
    }
    // With the manifest's beacon token, from 20 players (only trusted beacons from enough
    // distinct clients decide).
    let live: Value = kiln
        .http
        .get(&manifest)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let beacon = json!({"token": live["beacon"]["token"], "sequence": live["sequence"],
                        "expires": live["beacon"]["expires"]});
    for event in &mut events {
        event["beacon"] = beacon.clone();
    }
    for (player, chunk) in events.chunks(4).enumerate() {
        let response = kiln
            .http
            .post(format!("{url}/v1/telemetry"))
            .header("content-type", "text/plain")
            .header("x-real-ip", format!("192.0.2.{player}"))
            .body(json!({ "events": chunk }).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 202);
    }
    let decodes_sent = events.len() as i64 + 2 + page_decodes;

    // Rollups (through the dashboard's data, admin token: every game) once everything landed.
    let data = eventually("every decode in the rollups", || async {
        let (code, data) = kiln.get_json(ADMIN, "/v1/dashboard/data").await;
        assert_eq!(code, 200, "{data}");
        let rows = data["decode"]["rows"].as_array().unwrap();
        (rows
            .iter()
            .map(|r| r["count"].as_i64().unwrap())
            .sum::<i64>()
            == decodes_sent)
            .then_some(data)
    })
    .await;
    let metrics = kiln.metrics().await;
    let db = &kiln.running.as_ref().unwrap().state.db;
    // Pre-warm: raw events = rollups = metrics, per outcome.
    let mut stored = Vec::new();
    for game in ["shared-a", "shared-b", "classic-150"] {
        stored.extend(db.telemetry_for_game(game).await.unwrap());
    }
    let totals = &data["prewarm"]["totals"];
    for (outcome, field) in [
        ("hit", "hits"),
        ("miss", "misses"),
        ("fallback", "fallbacks"),
    ] {
        let raw = stored
            .iter()
            .filter(|e| {
                e.kind == "preheat" && e.outcome.as_deref() == Some(outcome) && e.trusted == Some(1)
            })
            .count() as f64;
        let rolled = totals[field].as_f64().unwrap();
        let counted = metric_sum(
            &metrics,
            "kiln_preheat_outcomes_total",
            &[("outcome", outcome)],
        );
        assert_eq!(
            (raw, rolled),
            (counted, counted),
            "{outcome}: raw, rollups, metrics"
        );
    }
    let hit_rate = totals["hit_rate"].as_f64().unwrap();
    println!(
        "pre-warm: {} events, {} hits, hit rate {:.1} % (raw events = rollups = /metrics)",
        totals["events"],
        totals["hits"],
        hit_rate * 100.0
    );
    // Decode: rollup counts per class × variant = histogram counts.
    println!("decode per class × variant (rollups; /metrics agrees):");
    for row in data["decode"]["rows"].as_array().unwrap() {
        let (class, variant) = (
            row["device_class"].as_str().unwrap(),
            row["variant"].as_str().unwrap(),
        );
        let counted = metric_sum(
            &metrics,
            "kiln_decode_duration_seconds_count",
            &[("device_class", class), ("variant", variant)],
        );
        assert_eq!(row["count"].as_f64().unwrap(), counted, "{row}");
        println!(
            "  {class:<12} {variant:<10} n={:<3} p50 {:>7.1} ms  p90 {:>7.1} ms  fallbacks {}",
            row["count"],
            row["p50_ms"].as_f64().unwrap_or(f64::NAN),
            row["p90_ms"].as_f64().unwrap_or(f64::NAN),
            row["fallbacks"]
        );
    }
    let low = data["decode"]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["device_class"] == "android-low" && r["variant"] == "meshopt")
        .unwrap();
    // Exact p90 of 250, 254, …, 406 (lower rank): 390; the sketch is within 2 %.
    assert!(
        (low["p90_ms"].as_f64().unwrap() - 390.0).abs() <= 390.0 * 0.02,
        "{low}"
    );

    // The manifest's choices follow: quantized for android-low, measured; meshopt on desktop.
    let choice = eventually("a measured choice for android-low", || async {
        let (_, m) = kiln
            .get_json(token, "/v1/games/shared-a/manifest?device=android-low")
            .await;
        let choice = m["models"][0]["choice"].clone();
        (choice["reason"] == "measured").then_some(choice)
    })
    .await;
    assert_eq!(choice["variant"], "quantized", "{choice}");
    println!("android-low choice: {}", choice["detail"].as_str().unwrap());
    let (_, desktop) = kiln
        .get_json(token, "/v1/games/shared-a/manifest?device=desktop")
        .await;
    assert_eq!(desktop["models"][0]["choice"]["variant"], "meshopt");
    let (_, data) = kiln.get_json(ADMIN, "/v1/dashboard/data").await;
    assert!(
        data["decode"]["choices"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["game"] == "shared-a"
                && c["device_class"] == "android-low"
                && c["variant"] == "quantized"),
        "{}",
        data["decode"]["choices"]
    );
    // The pipeline view sums the images stage of the published builds' reports (their Fox
    // textures re-encoded in the model variants).
    let images = &data["pipeline"]["images"];
    let (before, after) = (
        images["bytes_before"].as_u64().unwrap(),
        images["bytes_after"].as_u64().unwrap(),
    );
    assert!(images["builds"].as_u64().unwrap() >= 1, "{images}");
    assert!(after < before, "{images}");
    assert_eq!(
        images["bytes_saved"].as_u64().unwrap(),
        before - after,
        "{images}"
    );

    // The built-in dashboard, rendered: it shows the hit rate the run produced.
    let screenshot = repo_root().join("target/kiln-dashboard.png");
    let page = sdk_cli(
        "dashboard.mjs",
        vec![
            "--url".into(),
            format!("{url}/dashboard"),
            "--token".into(),
            ADMIN.into(),
            "--expect-hit-rate".into(),
            format!("{} %", js_to_fixed_1(hit_rate * 100.0)),
            "--screenshot".into(),
            screenshot.display().to_string(),
        ],
    )
    .await;
    assert_eq!(page["ok"], true, "{page}");
    assert!(
        page["image_bytes_saved_text"]
            .as_str()
            .is_some_and(|t| t.ends_with('B') && !t.starts_with('0')),
        "{page}"
    );
    println!(
        "/dashboard in Chromium: hit rate {} and image bytes saved {} shown; screenshot {}",
        page["hit_rate_text"],
        page["image_bytes_saved_text"],
        screenshot.display()
    );
}
