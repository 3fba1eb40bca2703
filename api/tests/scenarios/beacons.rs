//! Bounded, honest telemetry: metric labels from closed sets, beacon tokens from the signed
//! manifest, per-game limits, and variant choices that forged or extreme beacons can't steer.

use serde_json::{Value, json};

use super::library::live_manifest;
use crate::common::*;

/// Posts `events` as one beacon from the client `ip` (named by the `x-real-ip` header the
/// test configures as the proxy's).
pub(crate) async fn beacon_from(kiln: &Kiln, ip: &str, events: &[Value]) -> reqwest::Response {
    kiln.http
        .post(format!("{}/v1/telemetry", kiln.url))
        .header("content-type", "text/plain")
        .header("x-real-ip", ip)
        .body(json!({ "events": events }).to_string())
        .send()
        .await
        .unwrap()
}

/// What the loader sends with a game's beacons: the live manifest's `beacon` token with its
/// sequence and expiry (null where the manifest has none).
pub(crate) async fn beacon_token(kiln: &Kiln, game: &str) -> Value {
    let manifest = live_manifest(kiln, game).await;
    if manifest["beacon"].is_null() {
        return Value::Null;
    }
    json!({"token": manifest["beacon"]["token"], "sequence": manifest["sequence"],
           "expires": manifest["beacon"]["expires"]})
}

pub(crate) fn with_token(mut event: Value, token: &Value) -> Value {
    event["beacon"] = token.clone();
    event
}

fn decode(game: &str, variant: &str, ms: f64, device: &Value) -> Value {
    json!({"type": "decode", "game": game, "asset": "assets/Fox.glb", "variant": variant,
           "decoder": if variant == "meshopt" { "wasm-simd" } else { "none" },
           "bytes": 60000, "ms": ms, "device": device})
}

fn low_end() -> Value {
    json!({"os": "android", "os_version": "13", "model": "SM-A135F", "memory": 3, "cores": 8})
}

fn desktop() -> Value {
    json!({"os": "windows", "os_version": "10.0", "memory": 8, "cores": 16})
}

/// No descriptor: the `unknown` class, the last one a worker decides per pass.
fn no_device() -> Value {
    Value::Null
}

/// The class manifest's choice for the game's first model, once it is signed.
async fn choice(kiln: &Kiln, game: &str, class: &str) -> Value {
    eventually(&format!("the {class} manifest of {game}"), || async {
        let response = kiln
            .http
            .get(format!(
                "{}/v1/games/{game}/manifest?device={class}",
                kiln.url
            ))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        if response.headers().get("kiln-variant-choice").is_some() {
            return None;
        }
        let manifest: Value = response.json().await.unwrap();
        Some(manifest["models"][0]["choice"].clone())
    })
    .await
}

/// Metric series (lines of the `/metrics` text) that name `needle`.
fn series_naming(metrics: &str, needle: &str) -> usize {
    metrics
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains(needle))
        .count()
}

/// Problem 5: 500 made-up engines, versions and games add no metric series; the real engine
/// and game still appear under their names, and the rest as `other`.
pub async fn beacon_metric_labels_stay_bounded(deployment: Deployment) {
    let kiln = Kiln::start_with(deployment, |c| {
        c.telemetry.client_ip_header = "x-real-ip".into();
    })
    .await;
    let (_, team) = kiln.team("labels").await;
    let game = "labels-game";
    kiln.publish(&team, game, "1.0.0", sample_package()).await;
    let (_, library) = kiln.get_json(&team, "/v1/library").await;
    let three = library["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["engine"] == "three")
        .unwrap_or_else(|| panic!("three in the library: {library}"))
        .clone();
    let token = beacon_token(&kiln, game).await;
    let before = kiln.metrics().await;
    let preheat = |game: &str, engine: &str, version: &str| {
        json!({"type": "preheat", "game": game, "engine": engine, "version": version,
               "outcome": "miss", "reason": "cold", "ms": 20.0, "device": {"class": "desktop"}})
    };
    for chunk in 0..5 {
        // Made-up engines and versions on the real game, with its real token…
        let forged_engines: Vec<Value> = (0..100)
            .map(|i| {
                let n = chunk * 100 + i;
                with_token(
                    preheat(game, &format!("eng-forged-{n}"), &format!("9.{n}")),
                    &token,
                )
            })
            .collect();
        let response = beacon_from(&kiln, &format!("198.51.100.{chunk}"), &forged_engines).await;
        assert_eq!(response.status(), 202);
        // …and made-up games.
        let forged_games: Vec<Value> = (0..100)
            .map(|i| {
                preheat(
                    &format!("game-forged-{}", chunk * 100 + i),
                    "three",
                    "0.160",
                )
            })
            .collect();
        let response =
            beacon_from(&kiln, &format!("198.51.100.{}", 10 + chunk), &forged_games).await;
        assert_eq!(response.status(), 202);
    }
    let real = with_token(
        preheat(game, "three", three["version"].as_str().unwrap()),
        &token,
    );
    assert_eq!(
        beacon_from(&kiln, "198.51.100.99", &[real]).await.status(),
        202
    );
    let after = kiln.metrics().await;
    for needle in ["eng-forged-", "game-forged-"] {
        assert_eq!(
            series_naming(&after, needle),
            0,
            "series naming {needle:?}: {}",
            after
                .lines()
                .filter(|l| l.contains(needle))
                .take(5)
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    // The real engine and game still appear under their names; the made-up engines as other.
    let real_before = metric_sum(
        &before,
        "kiln_preheat_outcomes_total",
        &[("game", game), ("engine", "three")],
    );
    let real_after = metric_sum(
        &after,
        "kiln_preheat_outcomes_total",
        &[("game", game), ("engine", "three")],
    );
    assert_eq!(real_after - real_before, 1.0, "{after}");
    let other = metric_sum(
        &after,
        "kiln_preheat_outcomes_total",
        &[("game", game), ("engine", "other")],
    ) - metric_sum(
        &before,
        "kiln_preheat_outcomes_total",
        &[("game", game), ("engine", "other")],
    );
    assert_eq!(other, 500.0, "the made-up engines count as other");
    kiln.stop().await;
}

/// Problem 6 (a, b, c): forged decode beacons (no token, or many from one client) don't flip
/// a signed per-class choice; legitimate ones from enough distinct clients do; a few clients
/// reporting extreme values can't move it.
pub async fn forged_decode_beacons_do_not_steer_variant_choices(deployment: Deployment) {
    let kiln = Kiln::start_with(deployment, |c| {
        c.variants.refresh_secs = 1;
        c.telemetry.client_ip_header = "x-real-ip".into();
    })
    .await;
    let (_, team) = kiln.team("forge").await;
    let game = "forge-game";
    kiln.publish(&team, game, "1.0.0", sample_package()).await;
    let low = choice(&kiln, game, "android-low").await;
    assert_eq!(
        (low["variant"].as_str(), low["reason"].as_str()),
        (Some("quantized"), Some("slow_class"))
    );
    assert_eq!(choice(&kiln, game, "desktop").await["variant"], "meshopt");
    let token = beacon_token(&kiln, game).await;

    // android-low, forged to pick meshopt: 20 per variant from 20 clients without a token,
    // and 20 per variant from one client with the token. desktop, at the same time: 12
    // real clients with the token, 2 decodes per variant each, meshopt slow there.
    let mut forged_clients = Vec::new();
    for c in 0..20 {
        let events = vec![
            decode(game, "meshopt", 1.0, &low_end()),
            decode(game, "quantized", 500.0, &low_end()),
        ];
        forged_clients.push((format!("203.0.113.{c}"), events));
    }
    let one_client: Vec<Value> = (0..20)
        .flat_map(|_| {
            [
                with_token(decode(game, "meshopt", 1.0, &low_end()), &token),
                with_token(decode(game, "quantized", 500.0, &low_end()), &token),
            ]
        })
        .collect();
    forged_clients.push(("203.0.113.200".into(), one_client));
    for (ip, events) in &forged_clients {
        let response = beacon_from(&kiln, ip, events).await;
        assert_eq!(response.status(), 202);
    }
    let legit = |class_device: &Value, meshopt_ms: f64, quantized_ms: f64| -> Vec<Value> {
        (0..2)
            .flat_map(|_| {
                [
                    with_token(decode(game, "meshopt", meshopt_ms, class_device), &token),
                    with_token(
                        decode(game, "quantized", quantized_ms, class_device),
                        &token,
                    ),
                ]
            })
            .collect()
    };
    for c in 0..12 {
        let response = beacon_from(
            &kiln,
            &format!("192.0.2.{c}"),
            &legit(&desktop(), 200.0 + c as f64, 2.0),
        )
        .await;
        assert_eq!(response.status(), 202);
        let counts: Value = response.json().await.unwrap();
        assert_eq!(counts["rejected"], 0, "{counts}");
    }
    // (b) The real clients flip desktop (in the same pass that read the forged ones).
    let desktop_choice = eventually("desktop measured", || async {
        let c = choice(&kiln, game, "desktop").await;
        (c["reason"] == "measured").then_some(c)
    })
    .await;
    assert_eq!(desktop_choice["variant"], "quantized", "{desktop_choice}");
    // (a) The forged ones did not flip android-low.
    let low = choice(&kiln, game, "android-low").await;
    assert_eq!(
        (low["variant"].as_str(), low["reason"].as_str()),
        (Some("quantized"), Some("slow_class")),
        "forged beacons flipped android-low: {low}"
    );

    // (c) Three clients (of 15) with the token report quantized as extremely slow and
    // meshopt as instant on desktop. After them, 12 real clients of the `unknown` class
    // (decided after desktop in every pass), so we know when a pass has read both.
    for c in 0..3 {
        let extreme: Vec<Value> = (0..5)
            .flat_map(|_| {
                [
                    with_token(decode(game, "quantized", 599_000.0, &desktop()), &token),
                    with_token(decode(game, "meshopt", 0.5, &desktop()), &token),
                ]
            })
            .collect();
        let response = beacon_from(&kiln, &format!("192.0.2.{}", 100 + c), &extreme).await;
        assert_eq!(response.status(), 202);
    }
    for c in 0..12 {
        let response = beacon_from(
            &kiln,
            &format!("192.0.2.{}", 50 + c),
            &legit(&no_device(), 300.0, 3.0),
        )
        .await;
        assert_eq!(response.status(), 202);
    }
    let unknown = eventually("the unknown class measured", || async {
        let c = choice(&kiln, game, "unknown").await;
        (c["reason"] == "measured").then_some(c)
    })
    .await;
    assert_eq!(unknown["variant"], "quantized", "{unknown}");
    let desktop_choice = choice(&kiln, game, "desktop").await;
    assert_eq!(
        (
            desktop_choice["variant"].as_str(),
            desktop_choice["reason"].as_str()
        ),
        (Some("quantized"), Some("measured")),
        "a few extreme clients moved desktop: {desktop_choice}"
    );
    kiln.stop().await;
}

/// Problem 6 (d): forged shared pre-warm hits (no token, another game's token, a made-up
/// token) don't move the library's bytes saved or ROI; one with the game's token does.
pub async fn forged_preheat_beacons_do_not_move_library_roi(deployment: Deployment) {
    let kiln = Kiln::start_with(deployment, |c| {
        c.telemetry.client_ip_header = "x-real-ip".into();
    })
    .await;
    let (_, team) = kiln.team("roi").await;
    kiln.publish(&team, "roi-a", "1.0.0", sample_package())
        .await;
    kiln.publish(&team, "roi-b", "1.0.0", sample_package())
        .await;
    let (_, library) = kiln.get_json(&team, "/v1/library").await;
    let entry = library["entries"][0].clone();
    let version = entry["version"].as_str().unwrap().to_string();
    let br_size = entry["br_size"].as_i64().unwrap();
    let saved = || async {
        metric_sum(
            &kiln.metrics().await,
            "kiln_library_bytes_saved_total",
            &[("engine", "three")],
        )
    };
    let saved_before = saved().await;
    let hit = |game: &str| {
        json!({"type": "preheat", "game": game, "engine": "three", "version": version,
               "outcome": "hit", "ms": 2.0, "shared": true})
    };
    let token_a = beacon_token(&kiln, "roi-a").await;
    let mut made_up = beacon_token(&kiln, "roi-b").await;
    if !made_up.is_null() {
        made_up["token"] = json!("00".repeat(32));
    }
    let mut forged = Vec::new();
    for c in 0..30 {
        forged.push((
            format!("203.0.113.{c}"),
            vec![
                hit("roi-b"),
                with_token(hit("roi-b"), &token_a),
                with_token(hit("roi-b"), &made_up),
            ],
        ));
    }
    let mut answers = Vec::new();
    for (ip, events) in &forged {
        let response = beacon_from(&kiln, ip, events).await;
        assert_eq!(response.status(), 202);
        answers.push(response.json::<Value>().await.unwrap());
    }
    // The forged ones are stored (raw, flagged) …
    let db = &kiln.running.as_ref().unwrap().state.db;
    eventually("the forged events stored", || async {
        (db.telemetry_for_game("roi-b").await.unwrap().len() >= 90).then_some(())
    })
    .await;
    // … then one real shared hit.
    let token_b = beacon_token(&kiln, "roi-b").await;
    let response = beacon_from(&kiln, "192.0.2.1", &[with_token(hit("roi-b"), &token_b)]).await;
    let real: Value = response.json().await.unwrap();
    let library = eventually("the real shared hit in the library", || async {
        let (_, library) = kiln.get_json(&team, "/v1/library").await;
        (library["entries"][0]["shared_hits"].as_i64() >= Some(1)).then_some(library)
    })
    .await;
    let entry = &library["entries"][0];
    assert_eq!(entry["shared_hits"], 1, "forged hits counted: {entry}");
    assert_eq!(entry["bytes_saved"], br_size, "{entry}");
    assert_eq!(saved().await - saved_before, br_size as f64);
    // The 202 answers say which were not trusted.
    for counts in &answers {
        assert_eq!(
            (counts["accepted"].as_i64(), counts["untrusted"].as_i64()),
            (Some(3), Some(3)),
            "{counts}"
        );
    }
    assert_eq!(real["untrusted"], 0, "{real}");
    kiln.stop().await;
}

/// Problem 6 (e): beacons are limited per game (all clients together) as well as per
/// client; 429 says when to retry.
pub async fn beacons_are_rate_limited_per_game(deployment: Deployment) {
    let kiln = Kiln::start_with(deployment, |c| {
        c.telemetry.client_ip_header = "x-real-ip".into();
        c.telemetry.game_rate_per_minute = 5;
    })
    .await;
    let (_, team) = kiln.team("limit").await;
    kiln.publish(&team, "limit-a", "1.0.0", sample_package())
        .await;
    kiln.publish(&team, "limit-b", "1.0.0", sample_package())
        .await;
    let event = |game: &str| {
        json!({"type": "preheat", "game": game, "engine": "three", "version": "0.160",
               "outcome": "hit", "ms": 2.0})
    };
    let mut codes = Vec::new();
    let mut retry_after = None;
    for c in 0..8 {
        // Each from its own client: only the game's allowance runs out.
        let response = beacon_from(&kiln, &format!("198.51.100.{c}"), &[event("limit-a")]).await;
        codes.push(response.status().as_u16());
        if response.status() == 429 {
            retry_after = response
                .headers()
                .get("retry-after")
                .map(|v| v.to_str().unwrap().parse::<u64>().unwrap());
            let body: Value = response.json().await.unwrap();
            assert!(body.to_string().contains("for this game"), "{body}");
        }
    }
    // Five a minute, a token back every 12 s: a slow machine may see one more through.
    let passed = codes.iter().filter(|c| **c == 202).count();
    assert!((5..=6).contains(&passed), "{codes:?}");
    assert_eq!(codes[7], 429, "{codes:?}");
    let wait = retry_after.expect("Retry-After on 429");
    assert!((1..=12).contains(&wait), "{wait}");
    // Another game has its own allowance.
    assert_eq!(
        beacon_from(&kiln, "198.51.100.50", &[event("limit-b")])
            .await
            .status(),
        202
    );
    // Made-up game names share one allowance: they can't be used to get around the limit.
    let mut unregistered = Vec::new();
    for c in 0..8 {
        let response = beacon_from(
            &kiln,
            &format!("198.51.100.{}", 60 + c),
            &[event(&format!("nobody-{c}"))],
        )
        .await;
        unregistered.push(response.status().as_u16());
    }
    assert_eq!(unregistered[7], 429, "{unregistered:?}");
    kiln.stop().await;
}
