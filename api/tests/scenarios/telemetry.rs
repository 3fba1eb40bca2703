//! Device telemetry: decode beacons → rollups, metrics, the dashboard's data and the
//! per-device-class manifests' variant choices; retention; the bounded ingest backlog.

use kiln_common::signing::{Jwk, ManifestSignature};
use serde_json::{Value, json};

use super::beacons::{beacon_from, beacon_token};
use crate::common::*;

/// GETs a manifest and checks its signature against /v1/keys; returns it with its class header.
async fn verified_manifest(kiln: &Kiln, path: &str) -> (Value, Option<String>) {
    let response = kiln
        .http
        .get(format!("{}{path}", kiln.url))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{path}");
    let class = response
        .headers()
        .get("kiln-device-class")
        .map(|v| v.to_str().unwrap().to_string());
    let signature =
        ManifestSignature::parse_header(response.headers()["kiln-signature"].to_str().unwrap())
            .unwrap();
    let bytes = response.bytes().await.unwrap();
    let keys: Vec<Jwk> = serde_json::from_value(kiln.jwks().await["keys"].clone()).unwrap();
    let key = keys.iter().find(|k| k.kid == signature.kid).unwrap();
    assert!(key.verify(&bytes, &signature), "{path}: signature verifies");
    (serde_json::from_slice(&bytes).unwrap(), class)
}

fn decode_event(game: &str, variant: &str, ms: f64, device: &Value) -> Value {
    json!({"type": "decode", "game": game, "asset": "assets/Fox.glb", "variant": variant,
           "decoder": if variant == "meshopt" { "wasm-simd" } else { "none" },
           "bytes": 60000, "ms": ms, "device": device})
}

/// A synthetic stream of decode beacons from two device classes turns into rollups with the
/// right percentiles, metrics, dashboard rows, and per-class manifests whose variant choice
/// follows the measurements (and says why); every per-class manifest is signed.
pub async fn decode_beacons_choose_variants_per_device_class(deployment: Deployment) {
    let kiln = Kiln::start_with(deployment, |c| {
        c.variants.refresh_secs = 1;
        c.telemetry.client_ip_header = "x-real-ip".into();
    })
    .await;
    let (_, token) = kiln.team("decode").await;
    let game = "decode-game";
    kiln.publish(&token, game, "1.0.0", sample_package()).await;

    // Before any measurement: the policy (android-low is a slow class).
    let (base, class) = verified_manifest(&kiln, &format!("/v1/games/{game}/manifest")).await;
    assert_eq!(class, None);
    assert!(
        base["models"][0].get("choice").is_none(),
        "{}",
        base["models"]
    );
    let model_path = base["models"][0]["path"].as_str().unwrap().to_string();
    assert_eq!(model_path, "assets/Fox.glb");
    let by_class = |class: &'static str| {
        let kiln = &kiln;
        async move {
            eventually(&format!("the {class} manifest"), || async {
                let response = kiln
                    .http
                    .get(format!(
                        "{}/v1/games/{game}/manifest?device={class}",
                        kiln.url
                    ))
                    .send()
                    .await
                    .unwrap();
                response
                    .headers()
                    .get("kiln-variant-choice")
                    .is_none()
                    .then_some(())
            })
            .await;
            verified_manifest(kiln, &format!("/v1/games/{game}/manifest?device={class}")).await
        }
    };
    let (low, class) = by_class("android-low").await;
    assert_eq!(class.as_deref(), Some("android-low"));
    assert_eq!(low["device_class"], "android-low");
    assert_eq!(
        low["sequence"], base["sequence"],
        "same release, same sequence"
    );
    assert_eq!(low["files"], base["files"]);
    let choice = &low["models"][0]["choice"];
    assert_eq!(
        (choice["variant"].as_str(), choice["reason"].as_str()),
        (Some("quantized"), Some("slow_class")),
        "{choice}"
    );
    let (desktop, _) = by_class("desktop").await;
    assert_eq!(desktop["models"][0]["choice"]["reason"], "default");
    assert_eq!(desktop["models"][0]["choice"]["variant"], "meshopt");

    // A descriptor instead of a class: the rule table classifies it.
    let (_, class) = verified_manifest(
        &kiln,
        &format!(
            "/v1/games/{game}/manifest?os=Android&os_version=13&model=SM-A135F&memory=3&cores=8"
        ),
    )
    .await;
    assert_eq!(class.as_deref(), Some("android-low"));
    let bad = kiln
        .http
        .get(format!(
            "{}/v1/games/{game}/manifest?device=toaster",
            kiln.url
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    assert!(bad.text().await.unwrap().contains("android-low"));

    // The stream: on a low-end Android, meshopt decodes slowly (300…445 ms) and quantized
    // fast; on desktops both are fast and meshopt's smaller bytes win. 30 of each, from 10
    // players (decode i from player i % 10), with the manifest's beacon token.
    let beacon = beacon_token(&kiln, game).await;
    assert!(beacon["token"].is_string(), "{beacon}");
    let metrics_before = kiln.metrics().await;
    let low_end = json!({"os": "android", "os_version": "13", "model": "SM-A135F", "memory": 3, "cores": 8, "runtime": "chrome"});
    let desktop_device = json!({"os": "windows", "os_version": "10.0", "memory": 8, "cores": 16, "runtime": "chrome"});
    let mut events = Vec::new();
    for i in 0..30 {
        events.push(decode_event(
            game,
            "meshopt",
            300.0 + 5.0 * i as f64,
            &low_end,
        ));
        events.push(decode_event(
            game,
            "quantized",
            10.0 + i as f64 / 3.0,
            &low_end,
        ));
        events.push(decode_event(game, "meshopt", 2.0, &desktop_device));
        events.push(decode_event(game, "quantized", 9.0, &desktop_device));
    }
    // A wasm crash on a low-end phone: the loader fell back and says so.
    events.push(json!({"type": "decode", "game": game, "asset": "assets/Fox.glb", "variant": "quantized",
        "decoder": "none", "bytes": 90000, "ms": 12.0, "fallback": true, "reason": "decoder_init_failed", "device": low_end}));
    let mut players: Vec<Vec<Value>> = vec![Vec::new(); 10];
    for (n, mut event) in events.into_iter().enumerate() {
        event["beacon"] = beacon.clone();
        // Four events per i: player i % 10.
        players[(n / 4) % 10].push(event);
    }
    for (player, events) in players.iter().enumerate() {
        let response = beacon_from(&kiln, &format!("192.0.2.{player}"), events).await;
        assert_eq!(response.status(), 202);
        let counts: Value = response.json().await.unwrap();
        assert_eq!(counts["rejected"], 0, "{counts}");
        assert_eq!(counts["untrusted"], 0, "{counts}");
    }

    // Metrics: exact counts by variant, decoder and class; the fallback by reason.
    let metrics = kiln.metrics().await;
    let delta = |name: &str, labels: &[(&str, &str)]| {
        metric_sum(&metrics, name, labels) - metric_sum(&metrics_before, name, labels)
    };
    assert_eq!(
        delta(
            "kiln_decode_duration_seconds_count",
            &[
                ("decoder", "wasm-simd"),
                ("device_class", "android-low"),
                ("variant", "meshopt")
            ]
        ),
        30.0
    );
    assert_eq!(
        delta(
            "kiln_decode_duration_seconds_count",
            &[
                ("decoder", "none"),
                ("device_class", "android-low"),
                ("variant", "quantized")
            ]
        ),
        31.0
    );
    assert_eq!(
        delta(
            "kiln_decode_duration_seconds_count",
            &[
                ("decoder", "wasm-simd"),
                ("device_class", "desktop"),
                ("variant", "meshopt")
            ]
        ),
        30.0
    );
    assert_eq!(
        delta(
            "kiln_decode_fallbacks_total",
            &[
                ("device_class", "android-low"),
                ("reason", "decoder_init_failed")
            ]
        ),
        1.0
    );
    // meshopt on android-low: every decode above 0.25 s, none above 0.5 s.
    assert_eq!(
        delta(
            "kiln_decode_duration_seconds_bucket",
            &[
                ("decoder", "wasm-simd"),
                ("device_class", "android-low"),
                ("variant", "meshopt"),
                ("le", "0.25")
            ]
        ),
        0.0
    );
    assert_eq!(
        delta(
            "kiln_decode_duration_seconds_bucket",
            &[
                ("decoder", "wasm-simd"),
                ("device_class", "android-low"),
                ("variant", "meshopt"),
                ("le", "0.5")
            ]
        ),
        30.0
    );

    // Rollups, through the dashboard's data: counts and percentiles within the sketch's 2 %.
    let data = eventually("the decode rollups", || async {
        let (code, data) = kiln
            .get_json(&token, &format!("/v1/dashboard/data?game={game}"))
            .await;
        assert_eq!(code, 200, "{data}");
        let rows = data["decode"]["rows"].as_array().unwrap();
        (rows
            .iter()
            .map(|r| r["count"].as_i64().unwrap())
            .sum::<i64>()
            == 121)
            .then_some(data)
    })
    .await;
    let row = |class: &str, variant: &str| {
        data["decode"]["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["device_class"] == class && r["variant"] == variant)
            .unwrap_or_else(|| panic!("no {class} {variant} row"))
            .clone()
    };
    let meshopt_low = row("android-low", "meshopt");
    assert_eq!(meshopt_low["count"], 30);
    // Exact p50/p90/p99 of 300, 305, …, 445 (lower rank): 370, 430, 440.
    for (field, exact) in [("p50_ms", 370.0), ("p90_ms", 430.0), ("p99_ms", 440.0)] {
        let got = meshopt_low[field].as_f64().unwrap();
        assert!(
            (got - exact).abs() <= exact * 0.02,
            "{field}: {got} vs {exact}"
        );
    }
    let quantized_low = row("android-low", "quantized");
    assert_eq!(
        (
            quantized_low["count"].as_i64(),
            quantized_low["fallbacks"].as_i64()
        ),
        (Some(31), Some(1))
    );
    assert!((quantized_low["fallback_rate"].as_f64().unwrap() - 1.0 / 31.0).abs() < 1e-9);

    // Choices follow the measurements; reasons are auditable in the signed manifests.
    let (low, _) = eventually("a measured choice for android-low", || async {
        let (m, c) = verified_manifest(
            &kiln,
            &format!("/v1/games/{game}/manifest?device=android-low"),
        )
        .await;
        (m["models"][0]["choice"]["reason"] == "measured").then_some((m, c))
    })
    .await;
    let choice = &low["models"][0]["choice"];
    assert_eq!(choice["variant"], "quantized", "{choice}");
    let estimates = choice["estimates"].as_array().unwrap();
    let meshopt = estimates
        .iter()
        .find(|e| e["variant"] == "meshopt")
        .unwrap();
    assert_eq!(meshopt["samples"], 30);
    assert_eq!(meshopt["clients"], 10);
    // One vote per player: player p decoded 300+5p, 350+5p, 400+5p ms, its p90 (lower rank)
    // 350+5p; the lower median of the ten: 370 (the sketch is within 2 %).
    assert!(
        (meshopt["decode_p90_ms"].as_f64().unwrap() - 370.0).abs() <= 8.0,
        "{meshopt}"
    );
    assert!(
        choice["detail"]
            .as_str()
            .unwrap()
            .contains("quantized ready in"),
        "{choice}"
    );
    let (desktop, _) = eventually("a measured choice for desktop", || async {
        let (m, c) =
            verified_manifest(&kiln, &format!("/v1/games/{game}/manifest?device=desktop")).await;
        (m["models"][0]["choice"]["reason"] == "measured").then_some((m, c))
    })
    .await;
    assert_eq!(desktop["models"][0]["choice"]["variant"], "meshopt");
    assert!(
        desktop["models"][0]["choice"].get("explore").is_none(),
        "both measured: nothing to explore"
    );
    // android-mid has no data: still the default.
    let (mid, _) = verified_manifest(
        &kiln,
        &format!("/v1/games/{game}/manifest?device=android-mid"),
    )
    .await;
    assert_eq!(mid["models"][0]["choice"]["reason"], "default");
    // …and a few of its loads try quantized, so that gets measured there too.
    assert_eq!(
        mid["models"][0]["choice"]["explore"],
        json!({"variant": "quantized", "per_mille": 50})
    );
    // The dashboard lists the live choices.
    let (_, data) = kiln
        .get_json(&token, &format!("/v1/dashboard/data?game={game}"))
        .await;
    let listed = data["decode"]["choices"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| {
            c["device_class"] == "android-low"
                && c["variant"] == "quantized"
                && c["reason"] == "measured"
        });
    assert!(listed, "{}", data["decode"]["choices"]);

    // Another team's token can't read this game; a bad range is refused.
    let (_, other) = kiln.team("other-team").await;
    let (code, _) = kiln
        .get_json(&other, &format!("/v1/dashboard/data?game={game}"))
        .await;
    assert_eq!(code, 403);
    let (code, _) = kiln
        .get_json(&token, "/v1/dashboard/data?from=yesterday")
        .await;
    assert_eq!(code, 400);
    let (code, _) = kiln.get_json("nope", "/v1/dashboard/data").await;
    assert_eq!(code, 401);

    // Retention: pruning raw events keeps the rollups (and so the dashboards and choices).
    let db = &kiln.running.as_ref().unwrap().state.db;
    let (pruned, rollups_pruned) = db.prune_telemetry("9999", "2000").await.unwrap();
    assert!(pruned >= 121, "{pruned}");
    assert_eq!(rollups_pruned, 0);
    assert!(db.telemetry_for_game(game).await.unwrap().is_empty());
    let (_, data) = kiln
        .get_json(&token, &format!("/v1/dashboard/data?game={game}"))
        .await;
    assert_eq!(
        data["decode"]["rows"].as_array().unwrap().len(),
        4,
        "{}",
        data["decode"]
    );
    kiln.stop().await;
}

/// A beacon is answered 202 only once its events are committed (bench/faults found beacons
/// answered 202 and lost when their API process was killed: they had only been queued). While
/// the database stalls, beacons wait for it; past `backlog_max` waiting events a beacon gets
/// 503 at once, and one that waited `commit_timeout_ms` gets 503 too: each counts as dropped
/// and is not stored.
pub async fn telemetry_is_committed_before_it_is_acknowledged(deployment: Deployment) {
    let kiln = Kiln::start_with(deployment, |c| {
        c.telemetry.backlog_max = 5;
        c.telemetry.commit_timeout_ms = 3_000;
    })
    .await;
    let db = kiln.running.as_ref().unwrap().state.db.clone();
    let beacon = |n: usize| {
        let events: Vec<Value> = (0..n)
            .map(|i| json!({"type": "preheat", "game": "backlog", "engine": "phaser", "version": "3.80.1", "outcome": "hit", "ms": i as f64}))
            .collect();
        kiln.http
            .post(format!("{}/v1/telemetry", kiln.url))
            .body(json!({ "events": events }).to_string())
            .send()
    };
    let stored = || async { db.telemetry_for_game("backlog").await.unwrap().len() };
    assert_eq!(beacon(4).await.unwrap().status(), 202);
    assert_eq!(stored().await, 4, "stored when answered, not a flush later");

    // Another connection holds the write lock: the writer's transaction waits behind it.
    let mut stall = stall_telemetry_writes(&kiln.config.database_url()).await;
    let waiting = tokio::spawn(beacon(2));
    // Its events take room in the backlog until the writer gives up on them.
    let ingest = kiln.running.as_ref().unwrap().state.ingest.clone();
    eventually("the stalled beacon to wait", || async {
        (ingest.waiting() == 2).then_some(())
    })
    .await;
    let full = beacon(4).await.unwrap();
    assert_eq!(full.status(), 503);
    assert_eq!(full.headers()["retry-after"], "1");
    assert!(full.text().await.unwrap().contains("backlog is full"));
    let timed_out = waiting.await.unwrap().unwrap();
    assert_eq!(timed_out.status(), 503, "the stalled beacon was not stored");
    assert_eq!(timed_out.headers()["retry-after"], "1");
    let body = timed_out.text().await.unwrap();
    assert!(body.contains("could not be stored"), "{body}");
    sqlx::query("ROLLBACK").execute(&mut stall).await.unwrap();
    drop(stall);

    assert_eq!(beacon(1).await.unwrap().status(), 202);
    assert_eq!(
        stored().await,
        5,
        "4 + 1 answered 202; the 503s left nothing"
    );
    let kiln = kiln.restart_with(|_| {}).await;
    let db = &kiln.running.as_ref().unwrap().state.db;
    assert_eq!(db.telemetry_for_game("backlog").await.unwrap().len(), 5);
    kiln.stop().await;
}

/// `KILN_TELEMETRY_ACK=queued`: a beacon is answered 202 as soon as it is queued, even while
/// the database stalls, and written once it takes writes again.
pub async fn queued_ack_answers_before_the_write(deployment: Deployment) {
    let kiln = Kiln::start_with(deployment, |c| {
        c.telemetry.ack = kiln_common::config::TelemetryAck::Queued;
    })
    .await;
    let db = kiln.running.as_ref().unwrap().state.db.clone();
    let mut stall = stall_telemetry_writes(&kiln.config.database_url()).await;
    let events: Vec<Value> = (0..3)
        .map(|i| json!({"type": "preheat", "game": "queued", "engine": "phaser", "version": "3.80.1", "outcome": "hit", "ms": i as f64}))
        .collect();
    let answer = kiln
        .http
        .post(format!("{}/v1/telemetry", kiln.url))
        .body(json!({ "events": events }).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 202, "answered while the database stalls");
    sqlx::query("ROLLBACK").execute(&mut stall).await.unwrap();
    drop(stall);
    eventually("the queued beacon to be written", || async {
        (db.telemetry_for_game("queued").await.unwrap().len() == 3).then_some(())
    })
    .await;
    kiln.stop().await;
}

/// A connection holding the lock every telemetry write needs, until it rolls back.
async fn stall_telemetry_writes(url: &str) -> sqlx::AnyConnection {
    use sqlx::Connection;
    sqlx::any::install_default_drivers();
    let mut conn = sqlx::AnyConnection::connect(url).await.unwrap();
    if url.starts_with("sqlite:") {
        sqlx::query("BEGIN IMMEDIATE")
            .execute(&mut conn)
            .await
            .unwrap();
    } else {
        sqlx::query("BEGIN").execute(&mut conn).await.unwrap();
        sqlx::query("LOCK TABLE telemetry_events IN EXCLUSIVE MODE")
            .execute(&mut conn)
            .await
            .unwrap();
    }
    conn
}
