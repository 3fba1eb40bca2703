//! The engine split, the shared library, releases (sequence, expiry, rollback) and the
//! loader's telemetry, over real HTTP.

use std::time::{Duration, Instant};

use kiln_common::signing::{Jwk, ManifestSignature};
use serde_json::{Value, json};

use crate::common::*;

/// The live manifest, checked against `/v1/keys`, parsed.
pub(crate) async fn live_manifest(kiln: &Kiln, game: &str) -> Value {
    let response = kiln
        .http
        .get(format!("{}/v1/games/{game}/manifest", kiln.url))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["access-control-allow-origin"], "*");
    assert!(
        response.headers()["access-control-expose-headers"]
            .to_str()
            .unwrap()
            .contains("Kiln-Signature")
    );
    let signature =
        ManifestSignature::parse_header(response.headers()["kiln-signature"].to_str().unwrap())
            .unwrap();
    let bytes = response.bytes().await.unwrap();
    let keys: Vec<Jwk> = serde_json::from_value(kiln.jwks().await["keys"].clone()).unwrap();
    let key = keys.iter().find(|k| k.kid == signature.kid).unwrap();
    assert!(key.verify(&bytes, &signature), "the release verifies");
    serde_json::from_slice(&bytes).unwrap()
}

fn expires_in(manifest: &Value) -> chrono::TimeDelta {
    let expires = chrono::DateTime::parse_from_rfc3339(manifest["expires"].as_str().unwrap())
        .expect("expires is RFC 3339");
    expires.with_timezone(&chrono::Utc) - chrono::Utc::now()
}

/// Two teams upload games with the same three.js build: the engine is split out, stored
/// once, indexed with both games, served from the library and still in each build.
pub async fn engines_split_into_the_shared_library(deployment: Deployment) {
    let kiln = Kiln::start(deployment).await;
    let (_, token_a) = kiln.team("lib-a").await;
    let (_, token_b) = kiln.team("lib-b").await;
    let build_a = kiln
        .publish(&token_a, "fox-a", "1.0.0", sample_package())
        .await;
    kiln.publish(&token_b, "fox-b", "1.0.0", sample_package())
        .await;

    let manifest_a = live_manifest(&kiln, "fox-a").await;
    let manifest_b = live_manifest(&kiln, "fox-b").await;
    let engines = manifest_a["engines"].as_array().expect("engines listed");
    assert_eq!(engines.len(), 1, "{engines:?}");
    let engine = &engines[0];
    assert_eq!(engine["name"], "three");
    assert_eq!(engine["version"], "0.160");
    assert_eq!(engine["path"], "vendor/three.module.min.js");
    assert_eq!(engine["module"], true);
    assert_eq!(
        engine["url"], manifest_b["engines"][0]["url"],
        "one library object"
    );
    assert!(engine["url"].as_str().unwrap().contains("/cdn/library/"));
    let sha = engine["sha256"].as_str().unwrap();
    let size = engine["size"].as_u64().unwrap();
    // The fallback is the build's own file, still listed in `files`.
    let own = manifest_a["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == "vendor/three.module.min.js")
        .expect("the engine stays in the build");
    assert_eq!(engine["fallback_url"], own["url"]);
    for url in [&engine["url"], &engine["fallback_url"]] {
        let response = kiln.http.get(url.as_str().unwrap()).send().await.unwrap();
        assert_eq!(response.status(), 200);
        assert!(
            response.headers()["cache-control"]
                .to_str()
                .unwrap()
                .contains("immutable")
        );
        assert_eq!(response.headers()["access-control-allow-origin"], "*");
        assert_eq!(sha256_hex(&response.bytes().await.unwrap()), sha);
    }
    // Releases carry a sequence and an expiry (default 7 days).
    assert_eq!(manifest_a["sequence"], 1);
    let left = expires_in(&manifest_a);
    assert!(
        left > chrono::TimeDelta::days(7) - chrono::TimeDelta::minutes(5)
            && left <= chrono::TimeDelta::days(7),
        "{left}"
    );

    // The report says what moved and what the main package lost.
    let (_, report) = kiln
        .get_json(&token_a, &format!("/v1/builds/{build_a}/report"))
        .await;
    let split = &report["stages"]["engines"];
    assert_eq!(split["bytes_moved"], size);
    let reduction = split["package_reduction"].as_f64().unwrap();
    let build_bytes = split["build_bytes"].as_f64().unwrap();
    assert!(
        (reduction - size as f64 / build_bytes).abs() < 1e-9,
        "{split}"
    );
    assert!(reduction > 0.1 && reduction < 1.0, "{split}");
    assert_eq!(split["pages"][0]["path"], "index.html");

    // The page gets its engine from the library, verified by the browser (integrity), while
    // its own modules load beside it; the loader comes async, off the critical path.
    let page = kiln
        .http
        .get(format!("{}/play/fox-a/", kiln.content))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    // The loader by its content-addressed (immutable) name, async.
    assert!(
        page.contains(&format!(
            r#"<script async src="{}{}"></script>"#,
            kiln.content,
            kiln_common::loader::versioned_path()
        )),
        "{page}"
    );
    assert!(page.contains("__kilnBoot"), "{page}");
    assert!(
        page.contains(&format!(
            r#"<link rel="modulepreload" href="{}/cdn/library/"#,
            kiln.content
        )),
        "{page}"
    );
    assert!(
        page.contains(&format!(
            r#"<base href="{}/play/fox-a/@{build_a}/">"#,
            kiln.content
        )),
        "{page}"
    );
    assert!(!page.contains("text/kiln-deferred"), "{page}");
    let loader = kiln
        .http
        .get(format!("{}/sdk/kiln-loader.js", kiln.content))
        .send()
        .await
        .unwrap();
    assert_eq!(loader.status(), 200);
    assert!(
        loader.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/javascript")
    );
    assert!(loader.text().await.unwrap().contains("preheat"));

    // A team sees only what its own games use: one entry, its one game.
    let (code, own) = kiln.get_json(&token_a, "/v1/library").await;
    assert_eq!(code, 200, "{own}");
    assert_eq!(own["entries"].as_array().map(Vec::len), Some(1), "{own}");
    assert_eq!(
        (
            own["entries"][0]["games"].as_i64(),
            own["entries"][0]["builds"].as_i64()
        ),
        (Some(1), Some(1))
    );
    // The admin sees the library: one entry, two games, nothing saved yet.
    let (code, library) = kiln.get_json(ADMIN, "/v1/library").await;
    assert_eq!(code, 200, "{library}");
    let entries = library["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{library}");
    let entry = &entries[0];
    assert_eq!(entry["id"], sha);
    assert_eq!(
        (entry["games"].as_i64(), entry["builds"].as_i64()),
        (Some(2), Some(2))
    );
    assert_eq!(entry["size"], size);
    assert_eq!(entry["hits"], 0);
    assert_eq!(entry["low_roi"], true);
    assert_eq!(library["bytes_stored"], size);
    let (code, _) = kiln.get_json("not-a-token", "/v1/library").await;
    assert_eq!(code, 401);

    // Two hits reported, neither `shared` (each game's own visit had cached it): they are
    // counted, but saved nothing the HTTP cache would not have (bad events are counted,
    // not stored).
    let (token_fox_a, token_fox_b) = (
        super::beacons::beacon_token(&kiln, "fox-a").await,
        super::beacons::beacon_token(&kiln, "fox-b").await,
    );
    let beacon = json!({"events": [
        {"type": "preheat", "game": "fox-a", "engine": "three", "version": "0.160", "outcome": "hit", "ms": 3.5, "device": {"class": "desktop"}, "beacon": token_fox_a},
        {"type": "preheat", "game": "fox-b", "engine": "three", "version": "0.160", "outcome": "hit", "ms": 2.0, "beacon": token_fox_b},
        {"type": "preheat", "game": "fox-b", "engine": "three", "version": "0.160", "outcome": "miss"}
    ]});
    let response = kiln
        .http
        .post(format!("{}/v1/telemetry", kiln.url))
        .header("content-type", "text/plain;charset=UTF-8")
        .body(beacon.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let counts: Value = response.json().await.unwrap();
    assert_eq!(
        (counts["accepted"].as_u64(), counts["rejected"].as_u64()),
        (Some(2), Some(1))
    );
    // Written by the ingest batcher within its flush interval.
    let library = eventually("the hits in the library", || async {
        let (_, library) = kiln.get_json(ADMIN, "/v1/library").await;
        (library["entries"][0]["hits"] == 2).then_some(library)
    })
    .await;
    let entry = &library["entries"][0];
    assert_eq!(entry["shared_hits"], 0);
    assert_eq!(entry["bytes_saved"], 0);
    assert_eq!(entry["roi"], 0.0);
    assert_eq!(entry["hit_rate"], 1.0);

    // An entry a live release carries cannot be deleted; only the admin may try.
    let delete = |token: &'static str| {
        kiln.http
            .delete(format!("{}/v1/library/{sha}", kiln.url))
            .bearer_auth(token)
            .send()
    };
    assert_eq!(delete(ADMIN).await.unwrap().status(), 409);
    assert_eq!(delete("team-token").await.unwrap().status(), 401);
    let unknown = kiln
        .http
        .delete(format!("{}/v1/library/{}", kiln.url, "0".repeat(64)))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 404);
    kiln.stop().await;
}

/// What the library saved counts only the hits another game's visit brought (`shared`), at
/// the size the CDN sends (the brotli form): a game's own repeat visits saved nothing the
/// HTTP cache would not have.
pub async fn library_saves_only_what_another_game_brought(deployment: Deployment) {
    let kiln = Kiln::start(deployment).await;
    let (_, token) = kiln.team("shared").await;
    kiln.publish(&token, "shared-a", "1.0.0", sample_package())
        .await;
    kiln.publish(&token, "shared-b", "1.0.0", sample_package())
        .await;
    let (_, library) = kiln.get_json(&token, "/v1/library").await;
    let entry = library["entries"][0].clone();
    let size = entry["size"].as_i64().unwrap();
    let br_size = entry["br_size"].as_i64().unwrap();
    // The brotli form's size, as the CDN sends it.
    let sent = kiln
        .http
        .get(entry["url"].as_str().unwrap())
        .header("accept-encoding", "br")
        .send()
        .await
        .unwrap();
    assert_eq!(sent.headers()["content-encoding"], "br");
    assert_eq!(sent.bytes().await.unwrap().len() as i64, br_size);
    assert!(br_size > 0 && br_size < size / 2, "{entry}");
    let saved_metric = || async {
        metric_sum(
            &kiln.metrics().await,
            "kiln_library_bytes_saved_total",
            &[("engine", "three")],
        )
    };
    let metric_before = saved_metric().await;

    // Game A twice on its own cache: hits, nothing saved.
    let tokens = [
        super::beacons::beacon_token(&kiln, "shared-a").await,
        super::beacons::beacon_token(&kiln, "shared-b").await,
    ];
    let hit = |game: &str, shared: bool| {
        let beacon = &tokens[usize::from(game == "shared-b")];
        json!({"type": "preheat", "game": game, "engine": "three", "version": "0.160",
               "outcome": "hit", "ms": 2.0, "shared": shared, "beacon": beacon})
    };
    let response = kiln
        .send_beacon(&[hit("shared-a", false), hit("shared-a", false)])
        .await;
    assert_eq!(response.status(), 202);
    let library = eventually("game A's hits in the library", || async {
        let (_, library) = kiln.get_json(&token, "/v1/library").await;
        (library["entries"][0]["hits"] == 2).then_some(library)
    })
    .await;
    let entry = &library["entries"][0];
    assert_eq!(entry["shared_hits"], 0, "{entry}");
    assert_eq!(entry["bytes_saved"], 0);
    assert_eq!(entry["roi"], 0.0);
    assert_eq!(library["bytes_saved"], 0);
    assert_eq!(saved_metric().await, metric_before);

    // Game B finds the engine game A's visit put on the device: one download saved.
    let response = kiln.send_beacon(&[hit("shared-b", true)]).await;
    assert_eq!(response.status(), 202);
    let library = eventually("game B's shared hit in the library", || async {
        let (_, library) = kiln.get_json(&token, "/v1/library").await;
        (library["entries"][0]["hits"] == 3).then_some(library)
    })
    .await;
    let entry = &library["entries"][0];
    assert_eq!(entry["shared_hits"], 1, "{entry}");
    assert_eq!(entry["bytes_saved"], br_size);
    assert_eq!(library["bytes_saved"], br_size);
    assert!((entry["roi"].as_f64().unwrap() - br_size as f64 / size as f64).abs() < 1e-9);
    assert_eq!(saved_metric().await, metric_before + br_size as f64);
    // The raw event keeps the flag; the dashboard counts the same.
    let db = &kiln.running.as_ref().unwrap().state.db;
    let events = db.telemetry_for_game("shared-b").await.unwrap();
    assert_eq!(events.last().unwrap().shared, Some(1));
    let (code, dashboard) = kiln
        .get_json(&token, "/v1/dashboard/data?game=shared-b")
        .await;
    assert_eq!(code, 200, "{dashboard}");
    assert_eq!(dashboard["library"]["totals"]["bytes_saved"], br_size);
    assert_eq!(dashboard["library"]["entries"][0]["shared_hits"], 1);
    kiln.stop().await;
}

/// A rollback is a release of an older build with a new, higher sequence.
pub async fn releases_roll_back_with_a_higher_sequence(deployment: Deployment) {
    let kiln = Kiln::start(deployment).await;
    let (_, token) = kiln.team("rel").await;
    let (_, other) = kiln.team("rel-other").await;
    let v1 = kiln
        .publish(&token, "rel-game", "1.0.0", sample_package())
        .await;
    let v2 = kiln
        .publish(&token, "rel-game", "2.0.0", sample_package())
        .await;
    let live = live_manifest(&kiln, "rel-game").await;
    assert_eq!(
        (live["sequence"].as_i64(), live["build_id"].as_str()),
        (Some(2), Some(v2.as_str()))
    );

    let release = |token: String, build: String| {
        kiln.http
            .post(format!("{}/v1/games/rel-game/releases", kiln.url))
            .bearer_auth(token)
            .json(&json!({ "build_id": build }))
            .send()
    };
    let response = release(token.clone(), v1.clone()).await.unwrap();
    assert_eq!(response.status(), 201);
    let made: Value = response.json().await.unwrap();
    assert_eq!(made["sequence"], 3);
    assert_eq!(made["build_id"], v1);
    assert_eq!(made["reason"], "release");
    let live = live_manifest(&kiln, "rel-game").await;
    assert_eq!(
        (live["sequence"].as_i64(), live["build_id"].as_str()),
        (Some(3), Some(v1.as_str()))
    );
    assert_eq!(live["version"], "1.0.0");

    // Another team's token, an unknown build: not found; nothing released.
    assert_eq!(release(other, v1.clone()).await.unwrap().status(), 404);
    assert_eq!(
        release(token.clone(), "nope".into())
            .await
            .unwrap()
            .status(),
        404
    );
    let (code, history) = kiln.get_json(&token, "/v1/games/rel-game/releases").await;
    assert_eq!(code, 200);
    let sequences: Vec<i64> = history
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["sequence"].as_i64().unwrap())
        .collect();
    assert_eq!(sequences, [3, 2, 1]);
    let reasons: Vec<&str> = history
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["reason"].as_str().unwrap())
        .collect();
    assert_eq!(reasons, ["release", "publish", "publish"]);
    kiln.stop().await;
}

/// A live release past half its lifetime is signed again, with the next sequence.
pub async fn live_releases_are_resigned_before_expiry(deployment: Deployment) {
    let kiln = Kiln::start_with(deployment, |c| {
        c.library.manifest_ttl_secs = 6;
        c.library.resign_interval_secs = 1;
    })
    .await;
    let (_, token) = kiln.team("resign").await;
    let build = kiln
        .publish(&token, "resign-game", "1.0.0", sample_package())
        .await;
    let first = live_manifest(&kiln, "resign-game").await;
    assert!(expires_in(&first) <= chrono::TimeDelta::seconds(6));
    let deadline = Instant::now() + Duration::from_secs(30);
    let resigned = loop {
        let live = live_manifest(&kiln, "resign-game").await;
        if live["sequence"].as_i64() > first["sequence"].as_i64() {
            break live;
        }
        assert!(Instant::now() < deadline, "never re-signed: {live}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(resigned["build_id"], build.as_str());
    assert!(expires_in(&resigned) > expires_in(&first));
    let (_, history) = kiln
        .get_json(&token, "/v1/games/resign-game/releases")
        .await;
    assert_eq!(history[0]["reason"], "resign");
    kiln.stop().await;
}

/// Beacons: per-event validation, body and rate limits, CORS; what is stored is what came.
pub async fn telemetry_is_validated_and_limited(deployment: Deployment) {
    let kiln = Kiln::start_with(deployment, |c| {
        c.telemetry.rate_per_minute = 6;
        c.telemetry.max_body_bytes = 4096;
        c.telemetry.client_ip_header = "x-real-ip".into();
    })
    .await;
    let post = |content_type: &'static str, body: String| {
        kiln.http
            .post(format!("{}/v1/telemetry", kiln.url))
            .header("content-type", content_type)
            .body(body)
            .send()
    };
    let batch = json!({"events": [
        {"type": "preheat", "game": "tele", "engine": "three", "version": "0.150", "outcome": "miss", "reason": "version_mismatch", "ms": 88.0, "prewarmed": false, "device": {"class": "android-low", "model": "SM-A105F"}, "future_field": 1},
        {"type": "preheat", "game": "tele", "engine": "three", "version": "0.150", "outcome": "fallback", "reason": "integrity_failed", "ms": 140.0},
        {"type": "preheat", "game": "tele", "engine": "three", "outcome": "hit", "ms": 1e9},
        {"type": "preheat", "game": "tele", "engine": 7, "outcome": "hit"}
    ]});
    let response = post("text/plain;charset=UTF-8", batch.to_string())
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    assert_eq!(response.headers()["access-control-allow-origin"], "*");
    let counts: Value = response.json().await.unwrap();
    assert_eq!(counts["accepted"], 2, "{counts}");
    assert_eq!(counts["rejected"], 2, "{counts}");
    assert!(
        counts["errors"][0].as_str().unwrap().contains("event 2"),
        "{counts}"
    );

    let db = &kiln.running.as_ref().unwrap().state.db;
    let stored = eventually("two stored events", || async {
        let stored = db.telemetry_for_game("tele").await.unwrap();
        (stored.len() == 2).then_some(stored)
    })
    .await;
    let got: Vec<(Option<&str>, Option<&str>, Option<&str>)> = stored
        .iter()
        .map(|e| {
            (
                e.outcome.as_deref(),
                e.reason.as_deref(),
                e.device_class.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (Some("miss"), Some("version_mismatch"), Some("android-low")),
            (Some("fallback"), Some("integrity_failed"), Some("unknown"))
        ]
    );

    // Whole-body errors: not JSON, too big, wrong type.
    assert_eq!(post("text/plain", "{".into()).await.unwrap().status(), 400);
    assert_eq!(
        post("text/plain", "x".repeat(5000)).await.unwrap().status(),
        413
    );
    assert_eq!(
        post("application/xml", "{}".into()).await.unwrap().status(),
        415
    );
    // The preflight a JSON post needs.
    let preflight = kiln
        .http
        .request(
            reqwest::Method::OPTIONS,
            format!("{}/v1/telemetry", kiln.url),
        )
        .header("origin", "https://games.example")
        .header("access-control-request-method", "POST")
        .send()
        .await
        .unwrap();
    assert_eq!(preflight.status(), 204);
    assert_eq!(preflight.headers()["access-control-allow-origin"], "*");
    // Six requests a minute from one client (four used above): the rest are refused. A token
    // comes back every 10 s, so a slow machine may see one more get through.
    let mut codes = Vec::new();
    for _ in 0..8 {
        codes.push(
            post("application/json", r#"{"events":[]}"#.into())
                .await
                .unwrap()
                .status()
                .as_u16(),
        );
    }
    // Another client (named by the proxy's header) has its own allowance.
    let other = kiln
        .http
        .post(format!("{}/v1/telemetry", kiln.url))
        .header("x-real-ip", "203.0.113.7")
        .body(r#"{"events":[]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 202);
    let passed = codes.iter().filter(|c| **c == 202).count();
    assert!(
        (2..=3).contains(&passed),
        "the limit counts every request: {codes:?}"
    );
    assert_eq!(codes[..2], [202, 202], "{codes:?}");
    assert_eq!(codes[7], 429, "{codes:?}");
    assert!(codes.iter().all(|c| *c == 202 || *c == 429), "{codes:?}");
    kiln.stop().await;
}

/// An engine a team describes in its own rules file (no code), split like any other; its
/// library entry can be removed once no game's live release carries it, not before.
pub async fn library_entries_retire_when_no_live_release_needs_them(deployment: Deployment) {
    let rules_dir = tempfile::tempdir().unwrap();
    let rules = rules_dir.path().join("engines.toml");
    std::fs::write(
        &rules,
        r#"
[[engine]]
name = "toy-engine"
global = "TOY"
min_bytes = 64
all = ["toy-engine: no WebGL context"]
[[engine.version]]
pattern = 'TOY_VERSION\s*=\s*"([0-9.]+)"'
"#,
    )
    .unwrap();
    let kiln = Kiln::start_with(deployment, |c| {
        c.library.rules_file = rules.display().to_string();
    })
    .await;
    let (_, token) = kiln.team("retire").await;
    let toy = br#"var TOY_VERSION = "2.4.1";
window.TOY = { v: TOY_VERSION, start: function () { if (!window.WebGLRenderingContext) throw new Error("toy-engine: no WebGL context"); } };
"#;
    let with_engine = zip_with(&[
        (
            "index.html",
            br#"<!doctype html><script src="toy.js"></script><script src="game.js"></script>"#,
        ),
        ("toy.js", toy),
        ("game.js", b"window.started = TOY.v;"),
    ]);
    let without_engine = zip_with(&[
        (
            "index.html",
            br#"<!doctype html><script src="game.js"></script>"#,
        ),
        ("game.js", b"window.started = 1;"),
    ]);
    kiln.publish(&token, "retire-game", "1.0.0", with_engine)
        .await;
    let manifest = live_manifest(&kiln, "retire-game").await;
    let engine = &manifest["engines"][0];
    assert_eq!(
        (engine["name"].as_str(), engine["version"].as_str()),
        (Some("toy-engine"), Some("2.4.1")),
        "{manifest}"
    );
    assert_eq!(engine["global"], "TOY");
    let id = engine["sha256"].as_str().unwrap().to_string();
    let library_url = engine["url"].as_str().unwrap().to_string();
    let delete = || {
        kiln.http
            .delete(format!("{}/v1/library/{id}", kiln.url))
            .bearer_auth(ADMIN)
            .send()
    };
    let refused = delete().await.unwrap();
    assert_eq!(refused.status(), 409);
    let body: Value = refused.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("retire-game"),
        "{body}"
    );

    // The game's live release no longer carries it: the entry and its objects can go.
    kiln.publish(&token, "retire-game", "2.0.0", without_engine)
        .await;
    let live = live_manifest(&kiln, "retire-game").await;
    assert!(live.get("engines").is_none(), "{live}");
    assert_eq!(delete().await.unwrap().status(), 204);
    let (_, library) = kiln.get_json(&token, "/v1/library").await;
    assert_eq!(library["entries"], json!([]), "{library}");
    let gone = kiln.http.get(&library_url).send().await.unwrap();
    assert_eq!(gone.status(), 404);
    assert_eq!(delete().await.unwrap().status(), 404);
    kiln.stop().await;
}
