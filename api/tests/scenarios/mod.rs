//! Scenarios every deployment must pass; `embedded.rs` and `distributed.rs` run them.
#![allow(dead_code)]

use std::io::Read;
use std::time::Duration;

use kiln_common::signing::{Jwk, ManifestSignature};
use serde_json::Value;

use crate::common::*;

mod beacons;
mod library;
mod serving;
mod telemetry;
pub use beacons::*;
pub use library::*;
pub use serving::*;
pub use telemetry::*;

/// Upload → published → manifest verifies against /v1/keys → every file fetches with its hash.
pub async fn upload_publishes_a_verified_manifest(deployment: Deployment) {
    let kiln = Kiln::start(deployment).await;
    let (_, token) = kiln.team("publish").await;
    let package = sample_package();
    let (code, accepted) = kiln
        .upload(
            &token,
            "sample-game",
            "1.0.0",
            "application/zip",
            package.clone(),
        )
        .await;
    assert_eq!(code, 202, "{accepted}");
    for field in ["build_id", "status", "status_url", "events_url"] {
        assert!(accepted[field].is_string(), "{field} missing in {accepted}");
    }
    assert_eq!(accepted["status"], "queued");
    let id = accepted["build_id"].as_str().unwrap().to_string();

    // The event stream reports progress and ends with the published status.
    let events = kiln
        .http
        .get(accepted["events_url"].as_str().unwrap())
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(events.headers()["content-type"], "text/event-stream");
    let text = tokio::time::timeout(Duration::from_secs(120), events.text())
        .await
        .expect("event stream ends when the build does")
        .unwrap();
    let statuses: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect();
    let last = statuses.last().expect("at least one status event");
    assert_eq!(last["status"], "published", "{text}");
    assert_eq!(last["progress"], 1.0);

    let status = kiln.wait_for_build(&token, &id).await;
    assert_eq!(status["status"], "published", "{status}");
    let stages: Vec<&str> = status["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        stages,
        [
            "unpack",
            "inventory",
            "engines",
            "vat",
            "geometry",
            "images",
            "encode",
            "sign",
            "publish"
        ]
    );
    for stage in status["stages"].as_array().unwrap() {
        assert_eq!(stage["status"], "succeeded", "{stage}");
        assert!(stage["started_at"].is_string() && stage["finished_at"].is_string());
    }
    assert_eq!(status["package"]["sha256"], sha256_hex(&package));

    // The manifest's exact bytes verify against a key from /v1/keys.
    let manifest = kiln
        .http
        .get(format!("{}/v1/games/sample-game/manifest", kiln.url))
        .send()
        .await
        .unwrap();
    assert_eq!(manifest.status(), 200);
    let cache = manifest.headers()["cache-control"]
        .to_str()
        .unwrap()
        .to_string();
    let max_age: u64 = cache
        .split(',')
        .find_map(|p| p.trim().strip_prefix("max-age="))
        .unwrap()
        .parse()
        .unwrap();
    assert!(max_age <= 60, "{cache}");
    let signature =
        ManifestSignature::parse_header(manifest.headers()["kiln-signature"].to_str().unwrap())
            .expect("Kiln-Signature: keyid=…, sig=…");
    let bytes = manifest.bytes().await.unwrap();
    let jwks = kiln.jwks().await;
    let keys: Vec<Jwk> = serde_json::from_value(jwks["keys"].clone()).unwrap();
    let key = keys
        .iter()
        .find(|k| k.kid == signature.kid)
        .expect("signing key listed");
    assert_eq!((key.kty.as_str(), key.crv.as_str()), ("OKP", "Ed25519"));
    assert!(key.verify(&bytes, &signature), "signature verifies");
    let mut tampered = bytes.to_vec();
    tampered[10] ^= 1;
    assert!(
        !key.verify(&tampered, &signature),
        "a changed byte fails verification"
    );
    // No private material anywhere in the JWKS.
    assert!(
        jwks["keys"]
            .as_array()
            .unwrap()
            .iter()
            .all(|k| k.get("d").is_none())
    );

    let manifest: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(manifest["game"], "sample-game");
    assert_eq!(manifest["version"], "1.0.0");
    assert_eq!(manifest["build_id"], id.as_str());
    let files = manifest["files"].as_array().unwrap();
    let paths: Vec<&str> = files.iter().map(|f| f["path"].as_str().unwrap()).collect();
    for expected in [
        "index.html",
        "game.js",
        "assets/Fox.glb",
        "vendor/three.module.min.js",
    ] {
        assert!(paths.contains(&expected), "{expected} in {paths:?}");
    }
    // The model has its variants, each a file of the manifest, the preferred one the
    // smallest after brotli.
    let model = manifest["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["path"] == "assets/Fox.glb")
        .expect("Fox.glb has variants");
    let variants = model["variants"].as_array().unwrap();
    let names: Vec<&str> = variants
        .iter()
        .map(|v| v["variant"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["meshopt", "quantized", "original"]);
    for variant in variants {
        assert!(
            paths.contains(&variant["path"].as_str().unwrap()),
            "{variant}"
        );
    }
    let smallest = variants
        .iter()
        .filter(|v| v["variant"] != "original")
        .min_by_key(|v| v["brotli_size"].as_u64().unwrap())
        .unwrap();
    assert_eq!(model["preferred"], smallest["variant"]);
    assert!(
        variants[0]["size"].as_u64().unwrap() < variants[2]["size"].as_u64().unwrap(),
        "meshopt is smaller than the original: {model}"
    );
    let mut saw_brotli = false;
    for file in files {
        let url = file["url"].as_str().unwrap();
        let body = kiln.http.get(url).send().await.unwrap();
        assert_eq!(body.status(), 200, "{url}");
        assert_eq!(
            body.headers()["content-type"].to_str().unwrap(),
            file["content_type"].as_str().unwrap()
        );
        let body = body.bytes().await.unwrap();
        assert_eq!(sha256_hex(&body), file["sha256"].as_str().unwrap(), "{url}");
        assert_eq!(body.len() as u64, file["size"].as_u64().unwrap());
        for form in file["encodings"].as_array().unwrap() {
            let encoding = form["encoding"].as_str().unwrap();
            let response = kiln
                .http
                .get(url)
                .header(
                    "accept-encoding",
                    if encoding == "br" { "br" } else { "gzip" },
                )
                .send()
                .await
                .unwrap();
            assert_eq!(response.headers()["content-encoding"], encoding);
            let compressed = response.bytes().await.unwrap();
            assert!((compressed.len() as u64) < file["size"].as_u64().unwrap());
            let mut decoded = Vec::new();
            if encoding == "br" {
                saw_brotli = true;
                brotli::Decompressor::new(&compressed[..], 4096)
                    .read_to_end(&mut decoded)
                    .unwrap();
            } else {
                flate2::read::GzDecoder::new(&compressed[..])
                    .read_to_end(&mut decoded)
                    .unwrap();
            }
            assert_eq!(sha256_hex(&decoded), file["sha256"].as_str().unwrap());
        }
    }
    assert!(saw_brotli, "text files get a brotli form");

    // The report lists every file with bytes before and after.
    let (code, report) = kiln
        .get_json(&token, &format!("/v1/builds/{id}/report"))
        .await;
    assert_eq!(code, 200);
    let reported = report["files"].as_array().unwrap();
    assert_eq!(reported.len(), files.len());
    let fox = reported
        .iter()
        .find(|f| f["path"] == "assets/Fox.glb")
        .unwrap();
    assert_eq!(fox["kind"], "glb");
    assert!(fox["bytes_before"].as_u64().unwrap() > 100_000);
    assert!(fox["bytes_after"].is_u64());
    assert!(
        kiln.package_kept(&id, "zip").await,
        "the original upload is kept"
    );

    // The game runs from the live build under its own paths.
    let page = kiln
        .http
        .get(format!("{}/play/sample-game/", kiln.content))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("game.js"));
    kiln.stop().await;
}

/// Identical bytes for the same game and version are one build; so is a reused key.
pub async fn reupload_returns_the_existing_build(deployment: Deployment) {
    let kiln = Kiln::start(deployment).await;
    let (_, token) = kiln.team("idem").await;
    let package = zip_with(&[("index.html", b"<html>idempotent</html>")]);
    let (code, first) = kiln
        .upload(
            &token,
            "idem-game",
            "2.0",
            "application/zip",
            package.clone(),
        )
        .await;
    assert_eq!(code, 202, "{first}");
    let (code, second) = kiln
        .upload(
            &token,
            "idem-game",
            "2.0",
            "application/zip",
            package.clone(),
        )
        .await;
    assert_eq!(code, 200, "{second}");
    assert_eq!(second["build_id"], first["build_id"]);
    assert_eq!(second["existing"], true);
    // Another version of the same bytes is a new build.
    let (code, third) = kiln
        .upload(
            &token,
            "idem-game",
            "2.1",
            "application/zip",
            package.clone(),
        )
        .await;
    assert_eq!(code, 202, "{third}");
    assert_ne!(third["build_id"], first["build_id"]);

    // Idempotency-Key: a CI retry of the same request gets the same build, even if the
    // body differs (the key wins, as in Stripe's convention).
    let send = |body: Vec<u8>| {
        kiln.http
            .post(format!(
                "{}/v1/games/idem-game/builds?version=3.0",
                kiln.url
            ))
            .bearer_auth(&token)
            .header("content-type", "application/zip")
            .header("idempotency-key", "ci-run-42")
            .body(body)
            .send()
    };
    let a: Value = send(zip_with(&[("a.html", b"a")]))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let retry = send(zip_with(&[("b.html", b"b")])).await.unwrap();
    assert_eq!(retry.status(), 200);
    let b: Value = retry.json().await.unwrap();
    assert_eq!(a["build_id"], b["build_id"]);

    let first_id = first["build_id"].as_str().unwrap();
    let done = kiln.wait_for_build(&token, first_id).await;
    assert_eq!(done["status"], "published", "{done}");
    // Published once: uploading the bytes again still does not process them again.
    let (code, again) = kiln
        .upload(&token, "idem-game", "2.0", "application/zip", package)
        .await;
    assert_eq!(code, 200);
    assert_eq!(again["status"], "published");
    kiln.stop().await;
}

/// A team sees only its own builds and games.
pub async fn teams_are_isolated(deployment: Deployment) {
    let kiln = Kiln::start(deployment).await;
    let (_, alice) = kiln.team("alice").await;
    let (_, bob) = kiln.team("bob").await;
    let package = zip_with(&[("index.html", b"<html>alice</html>")]);
    let (code, build) = kiln
        .upload(
            &alice,
            "alice-game",
            "1",
            "application/zip",
            package.clone(),
        )
        .await;
    assert_eq!(code, 202);
    let id = build["build_id"].as_str().unwrap();
    for path in [
        format!("/v1/builds/{id}"),
        format!("/v1/builds/{id}/report"),
        format!("/v1/builds/{id}/events"),
    ] {
        let (code, body) = kiln.get_json(&bob, &path).await;
        assert_eq!(code, 404, "bob reads {path}: {body}");
    }
    let (code, body) = kiln
        .upload(&bob, "alice-game", "1", "application/zip", package.clone())
        .await;
    assert_eq!(code, 403, "bob uploads to alice's game: {body}");
    let (code, _) = kiln
        .get_json("kiln_not_a_token", &format!("/v1/builds/{id}"))
        .await;
    assert_eq!(code, 401);
    let anonymous = kiln
        .http
        .post(format!("{}/v1/games/x/builds?version=1", kiln.url))
        .header("content-type", "application/zip")
        .body(package)
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
    // Teams and tokens need the admin token.
    let forged = kiln
        .http
        .post(format!("{}/v1/teams", kiln.url))
        .bearer_auth(&alice)
        .json(&serde_json::json!({"name": "mallory"}))
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 401);
    kiln.wait_for_build(&alice, id).await;
    kiln.stop().await;
}

/// What each bad package gets: an HTTP error at upload, or a failed build naming the entry.
pub async fn bad_packages_get_clear_errors(deployment: Deployment) {
    let kiln = Kiln::start_with(deployment, |c| {
        c.unpack.max_entries = 50;
        c.unpack.max_total_bytes = 64 * 1024 * 1024;
        c.upload.max_bytes = 8 * 1024 * 1024;
    })
    .await;
    let (_, token) = kiln.team("bad").await;

    // Refused at upload, before anything is stored.
    let (code, body) = kiln
        .upload(&token, "bad", "1", "text/plain", b"hello".to_vec())
        .await;
    assert_eq!(code, 415, "{body}");
    let (code, body) = kiln
        .upload(
            &token,
            "bad",
            "1",
            "application/zip",
            b"this is not a zip".to_vec(),
        )
        .await;
    assert_eq!(code, 400, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not a zip"),
        "{body}"
    );
    let (code, body) = kiln
        .upload(
            &token,
            "bad",
            "1",
            "application/gzip",
            zip_with(&[("a", b"a")]),
        )
        .await;
    assert_eq!(code, 400, "zip declared as gzip: {body}");
    let code = kiln
        .status_for_head(
            &token,
            "/v1/games/bad/builds?version=1",
            &[
                ("Content-Type", "application/zip"),
                ("Content-Length", "9437184"),
                ("Expect", "100-continue"),
            ],
        )
        .await;
    assert_eq!(code, 413, "declared length over the limit");
    // A chunked body (no length up front) is cut off at the limit, and nothing is kept.
    let chunks = futures::stream::iter((0..12).map(|i| {
        let mut chunk = vec![0u8; 1024 * 1024];
        if i == 0 {
            chunk[..4].copy_from_slice(b"PK\x03\x04");
        }
        Ok::<_, std::io::Error>(chunk)
    }));
    let response = kiln
        .http
        .post(format!("{}/v1/games/bad/builds?version=chunked", kiln.url))
        .bearer_auth(&token)
        .header("content-type", "application/zip")
        .body(reqwest::Body::wrap_stream(chunks))
        .send()
        .await;
    if let Ok(response) = response {
        assert_eq!(response.status(), 413);
    }
    let (code, body) = kiln
        .upload(
            &token,
            "Bad Name",
            "1",
            "application/zip",
            zip_with(&[("a", b"a")]),
        )
        .await;
    assert_eq!(code, 400, "{body}");

    // Accepted (the API can't tell), then failed with the entry and the reason.
    let sentinel = kiln.dir.path().join("escaped.txt");
    let many: Vec<(String, Vec<u8>)> = (0..60).map(|i| (format!("f{i}.txt"), vec![b'x'])).collect();
    let many_refs: Vec<(&str, &[u8])> = many
        .iter()
        .map(|(n, d)| (n.as_str(), d.as_slice()))
        .collect();
    let zeros = vec![0u8; 40 * 1024 * 1024];
    // Compresses about 25:1: big, but not a bomb.
    let mut seed = 7u32;
    let sparse: Vec<u8> = (0..40 * 1024 * 1024)
        .map(|i| {
            seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
            if i % 64 == 0 { (seed >> 16) as u8 } else { 0 }
        })
        .collect();
    let valid = zip_with(&[("index.html", b"<html>ok</html>"), ("game.js", b"1")]);
    let truncated = valid[..valid.len() - 30].to_vec();
    let mut corrupt = valid.clone();
    let mid = corrupt.len() / 3;
    corrupt[mid..mid + 8].copy_from_slice(b"GARBAGE!");
    let traversal_path = format!("../../../../../../../{}", sentinel.display());
    let cases: Vec<(&str, &str, Vec<u8>, &str)> = vec![
        (
            "traversal",
            "application/zip",
            zip_with(&[("ok.html", b"1"), (traversal_path.as_str(), b"pwned")]),
            "parent directory",
        ),
        (
            "absolute",
            "application/zip",
            zip_with(&[(sentinel.to_str().unwrap(), b"pwned")]),
            "absolute path",
        ),
        (
            "drive letter",
            "application/zip",
            zip_with(&[("C:/windows/evil.dll", b"x")]),
            "drive letter",
        ),
        (
            "backslash",
            "application/zip",
            zip_with(&[("..\\..\\evil.js", b"x")]),
            "backslash",
        ),
        (
            "zip symlink",
            "application/zip",
            zip_with_symlink(),
            "links are not allowed",
        ),
        (
            "duplicate",
            "application/zip",
            zip_renamed(&[("a.js", b"1"), ("b.js", b"2")], "b.js", "a.js"),
            "duplicate",
        ),
        (
            "alias duplicate",
            "application/zip",
            zip_with(&[("js/a.js", b"1"), ("js//a.js", b"2")]),
            "duplicate",
        ),
        (
            "too many entries",
            "application/zip",
            zip_with(&many_refs),
            "more than 50 entries",
        ),
        (
            "too many bytes",
            "application/zip",
            zip_with(&[("a.bin", &sparse), ("b.bin", &sparse)]),
            "expands beyond",
        ),
        (
            "bomb ratio",
            "application/zip",
            zip_with(&[("zeros.bin", &zeros)]),
            "decompression bomb",
        ),
        (
            "truncated zip",
            "application/zip",
            truncated,
            "corrupt or truncated zip",
        ),
        (
            "corrupt zip",
            "application/zip",
            corrupt,
            "corrupt or truncated zip",
        ),
        (
            "tar symlink",
            "application/gzip",
            tar_gz_with(&[
                TarEntry::File("index.html", b"1"),
                TarEntry::Symlink("evil", "/etc/passwd"),
            ]),
            "links are not allowed",
        ),
        (
            "tar hard link",
            "application/gzip",
            tar_gz_with(&[
                TarEntry::File("index.html", b"1"),
                TarEntry::HardLink("evil", "/etc/passwd"),
            ]),
            "links are not allowed",
        ),
        (
            "tar fifo",
            "application/gzip",
            tar_gz_with(&[TarEntry::Fifo("pipe")]),
            "unsupported entry type",
        ),
        (
            "tar traversal",
            "application/gzip",
            tar_gz_with(&[TarEntry::RawFile(b"../../escaped.txt", b"pwned")]),
            "parent directory",
        ),
        (
            "tar truncated",
            "application/gzip",
            {
                let t = tar_gz_with(&[TarEntry::File("index.html", &[7u8; 100_000])]);
                t[..t.len() / 2].to_vec()
            },
            "corrupt or truncated tar.gz",
        ),
        (
            "empty",
            "application/zip",
            zip_with(&[]),
            "package is empty",
        ),
    ];
    let mut builds = Vec::new();
    for (n, (name, content_type, body, _)) in cases.iter().enumerate() {
        let (code, accepted) = kiln
            .upload(
                &token,
                "bad",
                &format!("case-{n}"),
                content_type,
                body.clone(),
            )
            .await;
        assert_eq!(code, 202, "{name}: {accepted}");
        builds.push(accepted["build_id"].as_str().unwrap().to_string());
    }
    for ((name, content_type, _, reason), id) in cases.iter().zip(&builds) {
        let status = kiln.wait_for_build(&token, id).await;
        assert_eq!(status["status"], "failed", "{name}: {status}");
        let error = status["error"].as_str().unwrap_or("");
        assert!(
            error.contains(reason),
            "{name}: expected {reason:?} in {error:?}"
        );
        let unpack = &status["stages"][0];
        assert_eq!(unpack["name"], "unpack");
        assert_eq!(unpack["status"], "failed", "{name}: {unpack}");
        let (code, report) = kiln
            .get_json(&token, &format!("/v1/builds/{id}/report"))
            .await;
        assert_eq!(code, 200, "{name}");
        assert_eq!(report["error"]["stage"], "unpack", "{name}: {report}");
        let ext = if *content_type == "application/zip" {
            "zip"
        } else {
            "tar.gz"
        };
        assert!(
            kiln.package_kept(id, ext).await,
            "{name}: the original upload is kept"
        );
    }
    assert!(
        !sentinel.exists(),
        "nothing is written outside the work directory"
    );
    assert!(!kiln.dir.path().join("escaped.txt").exists());
    // A bad package never leaves a manifest behind.
    let manifest = kiln
        .http
        .get(format!("{}/v1/games/bad/manifest", kiln.url))
        .send()
        .await
        .unwrap();
    assert_eq!(manifest.status(), 404);
    // And the server is still healthy.
    let health = kiln
        .http
        .get(format!("{}/healthz", kiln.url))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    kiln.stop().await;
}

/// The CDN origin's headers: immutable caching, strong ETags, 304, ranges, encodings.
pub async fn cdn_serves_with_cache_headers(deployment: Deployment) {
    let kiln = Kiln::start(deployment).await;
    let (_, token) = kiln.team("cdn").await;
    let script = "export function tick(t) { return Math.sin(t) * 42; }\n".repeat(400);
    let package = zip_with(&[
        ("index.html", b"<html>cdn</html>"),
        ("main.js", script.as_bytes()),
    ]);
    let (_, accepted) = kiln
        .upload(&token, "cdn-game", "1", "application/zip", package)
        .await;
    let status = kiln
        .wait_for_build(&token, accepted["build_id"].as_str().unwrap())
        .await;
    assert_eq!(status["status"], "published", "{status}");
    let manifest: Value = kiln
        .http
        .get(format!("{}/v1/games/cdn-game/manifest", kiln.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let file = manifest["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == "main.js")
        .unwrap()
        .clone();
    let url = file["url"].as_str().unwrap().to_string();
    let size = file["size"].as_u64().unwrap();

    let full = kiln.http.get(&url).send().await.unwrap();
    assert_eq!(full.status(), 200);
    let h = full.headers().clone();
    assert_eq!(h["cache-control"], "public, max-age=31536000, immutable");
    assert_eq!(h["content-type"], "text/javascript; charset=utf-8");
    assert_eq!(h["accept-ranges"], "bytes");
    assert_eq!(h["content-length"], size.to_string().as_str());
    assert!(
        h.get("content-encoding").is_none(),
        "identity without Accept-Encoding"
    );
    let etag = h["etag"].to_str().unwrap().to_string();
    assert_eq!(
        etag,
        format!("\"{}\"", file["sha256"].as_str().unwrap()),
        "strong ETag"
    );
    let body = full.bytes().await.unwrap();

    let not_modified = kiln
        .http
        .get(&url)
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(not_modified.status(), 304);
    assert_eq!(not_modified.headers()["etag"], etag.as_str());

    let partial = kiln
        .http
        .get(&url)
        .header("range", "bytes=10-99")
        .send()
        .await
        .unwrap();
    assert_eq!(partial.status(), 206);
    assert_eq!(
        partial.headers()["content-range"],
        format!("bytes 10-99/{size}").as_str()
    );
    assert_eq!(&partial.bytes().await.unwrap()[..], &body[10..100]);
    let suffix = kiln
        .http
        .get(&url)
        .header("range", "bytes=-5")
        .send()
        .await
        .unwrap();
    assert_eq!(suffix.status(), 206);
    assert_eq!(&suffix.bytes().await.unwrap()[..], &body[body.len() - 5..]);
    let unsatisfiable = kiln
        .http
        .get(&url)
        .header("range", format!("bytes={}-", size + 10))
        .send()
        .await
        .unwrap();
    assert_eq!(unsatisfiable.status(), 416);
    assert_eq!(
        unsatisfiable.headers()["content-range"],
        format!("bytes */{size}").as_str()
    );

    let br = kiln
        .http
        .get(&url)
        .header("accept-encoding", "gzip, deflate, br")
        .send()
        .await
        .unwrap();
    assert_eq!(br.headers()["content-encoding"], "br");
    assert_eq!(br.headers()["vary"], "Accept-Encoding");
    let br_etag = br.headers()["etag"].to_str().unwrap().to_string();
    assert_ne!(br_etag, etag, "each encoding has its own ETag");
    let gz = kiln
        .http
        .get(&url)
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(gz.headers()["content-encoding"], "gzip");
    let identity = kiln
        .http
        .get(&url)
        .header("accept-encoding", "identity")
        .send()
        .await
        .unwrap();
    assert!(identity.headers().get("content-encoding").is_none());
    let head = kiln.http.head(&url).send().await.unwrap();
    assert_eq!(head.status(), 200);
    assert_eq!(head.headers()["content-length"], size.to_string().as_str());

    // Nothing but published objects: no packages, no path tricks.
    for bad in [
        format!(
            "{}/cdn/packages/{}.zip",
            kiln.content,
            accepted["build_id"].as_str().unwrap()
        ),
        format!("{}/cdn/files/../packages/x.zip", kiln.content),
        format!("{}/cdn/files/%2e%2e/%2e%2e/etc/passwd", kiln.content),
        format!("{}/cdn/files/00/nothing.js", kiln.content),
    ] {
        let response = kiln.http.get(&bad).send().await.unwrap();
        assert_eq!(response.status(), 404, "{bad}");
    }
    kiln.stop().await;
}

/// Health, readiness, metrics and the OpenAPI document.
pub async fn operations_endpoints(deployment: Deployment) {
    let kiln = Kiln::start(deployment).await;
    let get = |path: &str| kiln.http.get(format!("{}{path}", kiln.url)).send();
    assert_eq!(get("/healthz").await.unwrap().status(), 200);
    let ready = get("/readyz").await.unwrap();
    assert_eq!(ready.status(), 200);
    let ready: Value = ready.json().await.unwrap();
    assert_eq!(ready["database"], "ok");
    assert_eq!(ready["storage"], "ok");
    let metrics = get("/metrics").await.unwrap().text().await.unwrap();
    for name in [
        "kiln_http_requests_total",
        "kiln_http_request_duration_seconds_bucket",
        "kiln_upload_bytes_total",
        "kiln_builds{status=\"queued\"}",
        "kiln_queue_depth",
    ] {
        assert!(metrics.contains(name), "{name} in /metrics");
    }
    let openapi: Value = get("/v1/openapi.json").await.unwrap().json().await.unwrap();
    assert!(openapi["openapi"].as_str().unwrap().starts_with("3."));
    for path in [
        "/v1/games/{game}/builds",
        "/v1/builds/{id}",
        "/v1/keys",
        "/cdn/{key}",
    ] {
        assert!(openapi["paths"].get(path).is_some(), "{path} documented");
    }
    kiln.stop().await;
}

/// A worker process killed (SIGKILL) mid-job: the job is picked up again and the build
/// publishes exactly one manifest, with outputs identical to an uninterrupted run.
pub async fn killed_worker_still_publishes_once(deployment: Deployment) {
    let kiln = Kiln::start_with(deployment, |c| {
        c.worker.in_process = Some(0);
    })
    .await;
    let (_, token) = kiln.team("crash").await;
    let package = sample_package();
    let key_file = kiln.dir.path().join("signing.key");
    let spawn_worker = |pause_ms: u64| spawn_worker(&kiln, &key_file, pause_ms);

    let mut first = spawn_worker(1500);
    let (code, accepted) = kiln
        .upload(
            &token,
            "crash-game",
            "1",
            "application/zip",
            package.clone(),
        )
        .await;
    assert_eq!(code, 202, "{accepted}");
    let id = accepted["build_id"].as_str().unwrap().to_string();
    // Kill it once it is inside the pipeline (a stage has started).
    kiln.wait_for_build_state(&token, &id, "worker never started the job", |status| {
        let started = status["stages"]
            .as_array()
            .map(|s| {
                s.iter()
                    .any(|s| s["status"] == "running" || s["status"] == "succeeded")
            })
            .unwrap_or(false);
        status["status"] == "processing" && started
    })
    .await;
    first.kill().expect("SIGKILL the worker");
    first.wait().unwrap();
    let (_, status) = kiln.get_json(&token, &format!("/v1/builds/{id}")).await;
    assert_eq!(status["status"], "processing", "killed mid-job: {status}");

    let mut second = spawn_worker(0);
    let status = kiln.wait_for_build(&token, &id).await;
    second.kill().ok();
    second.wait().ok();
    assert_eq!(status["status"], "published", "{status}");

    // Exactly one manifest for the build.
    let db = &kiln.running.as_ref().unwrap().state.db;
    assert_eq!(db.manifests_for_build(&id).await.unwrap().len(), 1);

    // Outputs identical to an uninterrupted run of the same package with the same key (and
    // the same trust roots pinned in its pages).
    let out = kiln.dir.path().join("reference");
    let package_file = kiln.dir.path().join("sample.zip");
    std::fs::write(&package_file, &package).unwrap();
    let trust_file = kiln.dir.path().join("trust.json");
    let trust = kiln
        .http
        .get(format!("{}/v1/keys/trust", kiln.url))
        .send()
        .await
        .unwrap();
    assert_eq!(trust.status(), 200);
    std::fs::write(&trust_file, trust.bytes().await.unwrap()).unwrap();
    let reference = std::process::Command::new(worker_binary())
        .args([
            "process",
            package_file.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ])
        .args(["--key", key_file.to_str().unwrap()])
        .args(["--trust", trust_file.to_str().unwrap()])
        // The same game, build and URLs: rewritten pages name the game, build, loader and library.
        .args([
            "--game",
            "crash-game",
            "--build-id",
            &id,
            "--cdn-base",
            &format!("{}/cdn", kiln.content),
        ])
        .env("KILN_PUBLIC_URL", &kiln.url)
        .env("KILN_CONTENT_URL", &kiln.content)
        .env("KILN_DATA_DIR", kiln.dir.path().join("cli-data"))
        .output()
        .unwrap();
    assert!(
        reference.status.success(),
        "{}",
        String::from_utf8_lossy(&reference.stderr)
    );
    let reference: Value =
        serde_json::from_slice(&std::fs::read(out.join("manifest.json")).unwrap()).unwrap();
    let published: Value = kiln
        .http
        .get(format!("{}/v1/games/crash-game/manifest", kiln.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let strip = |m: &Value| -> Vec<Value> {
        m["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                let mut f = f.clone();
                f.as_object_mut().unwrap().remove("url");
                f
            })
            .collect()
    };
    assert_eq!(
        strip(&published),
        strip(&reference),
        "same objects as an uninterrupted run"
    );
    for file in published["files"].as_array().unwrap() {
        let body = kiln
            .http
            .get(file["url"].as_str().unwrap())
            .send()
            .await
            .unwrap();
        assert_eq!(
            sha256_hex(&body.bytes().await.unwrap()),
            file["sha256"].as_str().unwrap()
        );
    }
    kiln.stop().await;
}

/// A storage failure that does not go away: retried with backoff, then the build fails with
/// the last error, and the next build publishes once the store is back.
pub async fn transient_failures_are_retried_then_fail_the_build(deployment: Deployment) {
    let kiln = Kiln::start_with(deployment, |c| c.worker.transient_retries = 2).await;
    let (_, token) = kiln.team("flaky").await;
    let retried_before = metric_sum(
        &kiln.metrics().await,
        "kiln_jobs_total",
        &[("outcome", "retried")],
    );
    // A file where the store wants its `files/` directory: every object write fails.
    let blocker = kiln.config.data_dir.join("objects/files");
    std::fs::write(&blocker, b"in the way").unwrap();
    let package = zip_with(&[("index.html", b"<html>flaky</html>")]);
    let (code, accepted) = kiln
        .upload(&token, "flaky", "1", "application/zip", package.clone())
        .await;
    assert_eq!(code, 202, "{accepted}");
    let id = accepted["build_id"].as_str().unwrap();
    let status = kiln.wait_for_build(&token, id).await;
    assert_eq!(status["status"], "failed", "{status}");
    let error = status["error"].as_str().unwrap();
    assert!(error.starts_with("gave up after 2 attempts"), "{error}");
    // The second attempt was a job of its own, queued with a delay (no worker slot held
    // through the wait).
    let retried = metric_sum(
        &kiln.metrics().await,
        "kiln_jobs_total",
        &[("outcome", "retried")],
    );
    assert!(
        retried >= retried_before + 1.0,
        "{retried_before} → {retried}"
    );
    assert!(error.contains("object store"), "{error}");
    let publish = status["stages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(publish["status"], "failed", "{publish}");
    assert!(kiln.package_kept(id, "zip").await);

    std::fs::remove_file(&blocker).unwrap();
    let (_, again) = kiln
        .upload(&token, "flaky", "2", "application/zip", package)
        .await;
    let status = kiln
        .wait_for_build(&token, again["build_id"].as_str().unwrap())
        .await;
    assert_eq!(status["status"], "published", "{status}");
    kiln.stop().await;
}

/// A build whose row committed but whose job never reached the queue (its API was SIGKILLed
/// between the two: bench/faults found one) is queued again by a worker's sweep, whether it
/// was a new upload or a failed build's retry. Before the sweep it stayed `queued` for ever,
/// and a replay with its Idempotency-Key answered `200` for that dead build.
pub async fn queued_build_without_a_job_is_queued_again(deployment: Deployment) {
    use kiln_common::db::{Inserted, NewBuild};
    let kiln = Kiln::start_with(deployment, |c| c.worker.orphan_secs = 1).await;
    let (team_id, token) = kiln.team("orphans").await;
    let team_id = team_id.as_str();
    let state = &kiln.running.as_ref().unwrap().state;
    let requeued_before = metric_sum(
        &kiln.metrics().await,
        "kiln_orphaned_builds_requeued_total",
        &[],
    );

    // What the killed API left: the package stored, the build row committed, no job.
    let orphan = |version: &'static str, package: Vec<u8>, key: Option<&'static str>| async move {
        let id = uuid::Uuid::now_v7().to_string();
        let package_key = kiln_common::keys::package_key(&id, "zip");
        state
            .storage
            .put_bytes(&package_key, package.clone().into())
            .await
            .unwrap();
        let inserted = state
            .db
            .insert_build(
                NewBuild {
                    id: &id,
                    team_id,
                    game: "orphan-game",
                    version,
                    package_key: &package_key,
                    package_format: "zip",
                    package_sha256: &sha256_hex(&package),
                    package_size: package.len() as i64,
                    idempotency_key: key,
                },
                kiln_jobs::STAGES,
            )
            .await
            .unwrap();
        assert!(matches!(inserted, Inserted::New(_)), "a new build");
        id
    };
    let published = orphan("1", sample_package(), Some("ci-run-1")).await;
    // The client's retry with the same key names the same build, which now does get built.
    let replay = kiln
        .http
        .post(format!(
            "{}/v1/games/orphan-game/builds?version=1",
            kiln.url
        ))
        .bearer_auth(&token)
        .header("content-type", "application/zip")
        .header("idempotency-key", "ci-run-1")
        .body(sample_package())
        .send()
        .await
        .unwrap();
    assert_eq!(replay.status(), 200);
    let replay: Value = replay.json().await.unwrap();
    assert_eq!(replay["build_id"], published.as_str(), "{replay}");
    let status = kiln.wait_for_build(&token, &published).await;
    assert_eq!(status["status"], "published", "orphaned upload: {status}");

    // A failed build retried (`requeue_failed_build` committed), its push never made.
    let failing = orphan("2", zip_with(&[]), None).await;
    let status = kiln.wait_for_build(&token, &failing).await;
    assert_eq!(status["status"], "failed", "{status}");
    let first_failure = status["stages"][0]["finished_at"].clone();
    assert!(state.db.requeue_failed_build(&failing).await.unwrap());
    let status = kiln.wait_for_build(&token, &failing).await;
    assert_eq!(status["status"], "failed", "retried: {status}");
    assert!(
        status["error"]
            .as_str()
            .unwrap_or("")
            .contains("package is empty"),
        "{status}"
    );
    assert_ne!(
        status["stages"][0]["finished_at"], first_failure,
        "the retry ran the pipeline again: {status}"
    );

    // Three pushed by the sweep, each once: the marks are cleared.
    let requeued = metric_sum(
        &kiln.metrics().await,
        "kiln_orphaned_builds_requeued_total",
        &[],
    ) - requeued_before;
    assert!(requeued >= 3.0, "sweeps counted: {requeued}");
    assert!(
        state
            .db
            .builds_missing_a_job("9999", 10)
            .await
            .unwrap()
            .is_empty(),
        "no build left marked"
    );
    kiln.stop().await;
}

/// SIGTERM: the worker stops taking jobs, finishes its current one, and exits cleanly; the
/// build is published once, by that worker.
pub async fn sigterm_lets_the_worker_finish_its_job(deployment: Deployment) {
    let kiln = Kiln::start_with(deployment, |c| c.worker.in_process = Some(0)).await;
    let (_, token) = kiln.team("term").await;
    let key_file = kiln.dir.path().join("signing.key");
    let spawn_worker = |pause_ms: u64| spawn_worker(&kiln, &key_file, pause_ms);
    let mut worker = spawn_worker(400);
    let (_, accepted) = kiln
        .upload(
            &token,
            "term-game",
            "1",
            "application/zip",
            zip_with(&[("index.html", b"<html>term</html>")]),
        )
        .await;
    let id = accepted["build_id"].as_str().unwrap().to_string();
    kiln.wait_for_build_state(&token, &id, "never started", |status| {
        status["status"] == "processing"
    })
    .await;
    let term = std::process::Command::new("kill")
        .args(["-TERM", &worker.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let exit = tokio::task::spawn_blocking(move || worker.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(exit.success(), "worker exits cleanly on SIGTERM: {exit:?}");
    // Graceful: the job it had started ran to the end before the process exited (apalis
    // stops polling, then waits for in-flight jobs), so nothing is left for another worker.
    let (_, status) = kiln.get_json(&token, &format!("/v1/builds/{id}")).await;
    assert_eq!(
        status["status"], "published",
        "the worker exited before finishing its job: {status}"
    );
    let db = &kiln.running.as_ref().unwrap().state.db;
    assert_eq!(db.manifests_for_build(&id).await.unwrap().len(), 1);
    kiln.stop().await;
}

/// A build reads as published only once every stage reads as succeeded, also when recording
/// the stages lags behind the pipeline: the stage pause delays the record of each stage's end
/// as a busy database would (a loaded CI machine once showed `sign` running on a published
/// build).
pub async fn a_published_build_shows_every_stage_done(deployment: Deployment) {
    let kiln = Kiln::start_with(deployment, |c| c.worker.stage_pause_ms = 300).await;
    let (_, token) = kiln.team("stages").await;
    let (_, status) = kiln
        .publish_status(
            &token,
            "stages-game",
            "1",
            zip_with(&[("index.html", b"<html>stages</html>")]),
        )
        .await;
    let stages = status["stages"].as_array().unwrap();
    assert_eq!(
        stages
            .iter()
            .map(|s| s["name"].as_str().unwrap())
            .collect::<Vec<_>>(),
        kiln_jobs::STAGES,
        "{status}"
    );
    for stage in stages {
        assert_eq!(stage["status"], "succeeded", "{status}");
        assert!(stage["finished_at"].is_string(), "{status}");
    }
    // The dashboard's pipeline view reads the published build's report (its images stage:
    // nothing to re-encode in this build), on this deployment's database.
    let (_, data) = kiln
        .get_json(ADMIN, "/v1/dashboard/data?game=stages-game")
        .await;
    let images = &data["pipeline"]["images"];
    assert_eq!(images["builds"], 1, "{data}");
    assert_eq!(images["bytes_saved"], 0, "{images}");
    kiln.stop().await;
}

/// A queue consumer whose connection to the queue fails under it (here its worker row is moved
/// to another queue, so its next heartbeat finds no row and fails, as when a loaded database
/// lets the row go stale) ends
/// the job it was running instead of dropping it, and a new consumer goes on taking jobs.
pub async fn a_worker_that_loses_its_queue_finishes_its_job_and_goes_on(deployment: Deployment) {
    let kiln = Kiln::start_with(deployment, |c| c.worker.stage_pause_ms = 500).await;
    let (_, token) = kiln.team("lost").await;
    let failures_before = metric_sum(
        &kiln.metrics().await,
        "kiln_worker_queue_failures_total",
        &[],
    );
    let (_, accepted) = kiln
        .upload(
            &token,
            "lost-game",
            "1",
            "application/zip",
            zip_with(&[("index.html", b"<html>lost</html>")]),
        )
        .await;
    let id = accepted["build_id"].as_str().unwrap().to_string();
    // Between its first and second stage (each is followed by a 500 ms pause): seven stages
    // to go, several heartbeats.
    kiln.wait_for_build_state(&token, &id, "never started", |status| {
        status["status"] == "processing" && status["stages"][0]["status"] == "succeeded"
    })
    .await;
    // The job is in flight: take the consumers' rows out of the queue (they stay, for the
    // jobs' foreign keys).
    let db = &kiln.running.as_ref().unwrap().state.db;
    let moved = match &db.queue {
        kiln_common::db::QueuePool::Sqlite(pool) => {
            sqlx::query("UPDATE Workers SET worker_type = 'gone'")
                .execute(pool)
                .await
                .unwrap()
                .rows_affected()
        }
        kiln_common::db::QueuePool::Postgres(pool) => {
            sqlx::query("UPDATE apalis.workers SET worker_type = 'gone'")
                .execute(pool)
                .await
                .unwrap()
                .rows_affected()
        }
    };
    assert!(moved > 0, "no worker row to move");
    let status = kiln.wait_for_build(&token, &id).await;
    assert_eq!(
        status["status"], "published",
        "the job was dropped with its consumer: {status}"
    );
    let failures = eventually("the lost queue counted", || async {
        let n = metric_sum(
            &kiln.metrics().await,
            "kiln_worker_queue_failures_total",
            &[],
        ) - failures_before;
        (n >= 1.0).then_some(n)
    })
    .await;
    assert!(failures >= 1.0);
    // And the worker still takes jobs.
    let (_, next) = kiln
        .upload(
            &token,
            "lost-game",
            "2",
            "application/zip",
            zip_with(&[("index.html", b"<html>lost again</html>")]),
        )
        .await;
    let status = kiln
        .wait_for_build(&token, next["build_id"].as_str().unwrap())
        .await;
    assert_eq!(status["status"], "published", "{status}");
    assert_eq!(db.manifests_for_build(&id).await.unwrap().len(), 1);
    kiln.stop().await;
}

/// Key rotation: a new signing key signs new manifests, and the old key stays in the JWKS
/// so manifests signed before the rotation still verify.
pub async fn rotated_keys_keep_old_manifests_verifiable(deployment: Deployment) {
    let key_a = tempfile::NamedTempFile::new()
        .unwrap()
        .into_temp_path()
        .to_path_buf();
    let key_b = key_a.with_extension("b");
    let kiln = Kiln::start_with(deployment, |c| {
        c.signing_key_file = key_a.display().to_string();
    })
    .await;
    let (_, token) = kiln.team("rotate").await;
    let (_, first) = kiln
        .upload(
            &token,
            "old-game",
            "1",
            "application/zip",
            zip_with(&[("index.html", b"<html>old</html>")]),
        )
        .await;
    kiln.wait_for_build(&token, first["build_id"].as_str().unwrap())
        .await;
    let kiln = kiln
        .restart_with(|c| c.signing_key_file = key_b.display().to_string())
        .await;
    let (_, second) = kiln
        .upload(
            &token,
            "new-game",
            "1",
            "application/zip",
            zip_with(&[("index.html", b"<html>new</html>")]),
        )
        .await;
    kiln.wait_for_build(&token, second["build_id"].as_str().unwrap())
        .await;

    let jwks = kiln.jwks().await;
    let keys: Vec<Jwk> = serde_json::from_value(jwks["keys"].clone()).unwrap();
    assert_eq!(keys.len(), 2, "both keys listed: {jwks}");
    let mut kids = Vec::new();
    for game in ["old-game", "new-game"] {
        let response = kiln
            .http
            .get(format!("{}/v1/games/{game}/manifest", kiln.url))
            .send()
            .await
            .unwrap();
        let signature =
            ManifestSignature::parse_header(response.headers()["kiln-signature"].to_str().unwrap())
                .unwrap();
        let bytes = response.bytes().await.unwrap();
        let key = keys.iter().find(|k| k.kid == signature.kid).unwrap();
        assert!(key.verify(&bytes, &signature), "{game} verifies");
        kids.push(signature.kid);
    }
    assert_ne!(
        kids[0], kids[1],
        "the new manifest is signed by the new key"
    );
    kiln.stop().await;
    let _ = std::fs::remove_file(&key_a);
    let _ = std::fs::remove_file(&key_b);
}

/// Uploads beyond the concurrency limit get `503` with `Retry-After`, not a queue of
/// half-read bodies.
pub async fn concurrent_uploads_are_bounded(deployment: Deployment) {
    let kiln = Kiln::start_with(deployment, |c| c.upload.max_concurrent = 1).await;
    let (_, token) = kiln.team("busy").await;
    // A slow upload holds the only slot until we release it.
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let head =
        futures::stream::once(async { Ok::<_, std::io::Error>(zip_with(&[("a.html", b"slow")])) });
    let tail = futures::stream::once(async move {
        let _ = released.await;
        Ok::<_, std::io::Error>(Vec::new())
    });
    let slow = {
        let request = kiln
            .http
            .post(format!("{}/v1/games/busy/builds?version=slow", kiln.url))
            .bearer_auth(&token)
            .header("content-type", "application/zip")
            .body(reqwest::Body::wrap_stream(futures::StreamExt::chain(
                head, tail,
            )));
        tokio::spawn(request.send())
    };
    // Wait until the slow upload holds its slot (it is past the format check). Polled, not
    // slept: on a busy machine a fixed wait let the second upload take the slot first, and the
    // failed assertion then hung the test's runtime on the build it started.
    let slots = kiln.running.as_ref().unwrap().state.upload_slots.clone();
    eventually("the slow upload to hold the only slot", || {
        let slots = slots.clone();
        async move { (slots.available_permits() == 0).then_some(()) }
    })
    .await;
    let busy = kiln
        .http
        .post(format!("{}/v1/games/busy/builds?version=fast", kiln.url))
        .bearer_auth(&token)
        .header("content-type", "application/zip")
        .body(zip_with(&[("b.html", b"fast")]))
        .send()
        .await
        .unwrap();
    assert_eq!(busy.status(), 503);
    assert!(busy.headers().contains_key("retry-after"));
    release.send(()).unwrap();
    let slow = slow.await.unwrap().unwrap();
    assert_eq!(slow.status(), 202);
    let retry = kiln
        .upload(
            &token,
            "busy",
            "fast",
            "application/zip",
            zip_with(&[("b.html", b"fast")]),
        )
        .await;
    assert_eq!(retry.0, 202, "the slot is free again: {}", retry.1);
    kiln.stop().await;
}

/// A `kiln-worker run` process on the same database and store as `kiln`, pausing
/// `pause_ms` before each stage so a test can catch it mid-job.
pub fn spawn_worker(kiln: &Kiln, key_file: &std::path::Path, pause_ms: u64) -> std::process::Child {
    let mut cmd = std::process::Command::new(worker_binary());
    cmd.arg("run")
        .env("KILN_DATA_DIR", &kiln.config.data_dir)
        .env("KILN_DATABASE_URL", kiln.config.database_url())
        .env("KILN_PUBLIC_URL", &kiln.url)
        .env("KILN_CONTENT_URL", &kiln.content)
        .env("KILN_SIGNING_KEY_FILE", key_file)
        .env(
            "KILN_WORK_DIR",
            kiln.dir
                .path()
                .join(format!("work-{}", uuid::Uuid::new_v4().simple())),
        )
        .env("KILN_WORKER_HEARTBEAT_SECS", "1")
        .env("KILN_WORKER_STAGE_PAUSE_MS", pause_ms.to_string())
        // KILN_TEST_WORKER_LOG: the spawned workers' RUST_LOG (e.g. `warn,apalis_core=trace`
        // to follow the queue consumer's states).
        .env(
            "RUST_LOG",
            std::env::var("KILN_TEST_WORKER_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdout(std::process::Stdio::null());
    if !kiln.config.storage.s3_bucket.is_empty() {
        cmd.env("KILN_S3_BUCKET", &kiln.config.storage.s3_bucket)
            .env("KILN_S3_ENDPOINT", &kiln.config.storage.s3_endpoint)
            .env("KILN_S3_REGION", &kiln.config.storage.s3_region);
    }
    cmd.spawn().expect("start kiln-worker")
}

/// The `kiln-worker` binary beside this test's binary (built by `cargo test --workspace`).
pub fn worker_binary() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    let binary = dir.join("kiln-worker");
    assert!(
        binary.exists(),
        "{} is missing: run the tests with `cargo test --workspace` (it builds kiln-worker)",
        binary.display()
    );
    binary
}

/// A build whose `kiln.toml` asks for VAT: the bake is published with the build, listed in the
/// signed manifest, and every file of it served by the CDN as the manifest says.
pub async fn vat_bakes_what_the_build_asks_for(deployment: Deployment) {
    let kiln = Kiln::start(deployment).await;
    let (_, token) = kiln.team("vat").await;
    let fox = std::fs::read(repo_root().join("examples/sample-game/assets/Fox.glb")).unwrap();
    let package = zip_with(&[
        ("kiln.toml", b"[vat]\nfiles = [\"models/fox.glb\"]\n"),
        ("models/fox.glb", &fox),
    ]);
    let (code, accepted) = kiln
        .upload(&token, "crowd", "1.0.0", "application/zip", package)
        .await;
    assert_eq!(code, 202, "{accepted}");
    let id = accepted["build_id"].as_str().unwrap().to_string();
    let status = kiln.wait_for_build(&token, &id).await;
    assert_eq!(status["status"], "published", "{status}");
    let manifest: Value = kiln
        .http
        .get(format!("{}/v1/games/crowd/manifest", kiln.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let vat = &manifest["vat"][0];
    assert_eq!(vat["source"], "models/fox.glb", "{manifest}");
    let meta: Value = kiln
        .http
        .get(vat["url"].as_str().unwrap())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(meta["format"], "kiln-vat");
    assert!(meta["error"]["position_max"].as_f64().unwrap() <= meta["tolerance"].as_f64().unwrap());
    // Every file vat.json names is in the manifest and served with the bytes it lists.
    let folder = vat["path"]
        .as_str()
        .unwrap()
        .trim_end_matches("vat.json")
        .to_string();
    let texture = &meta["textures"][0];
    for name in [
        "mesh.glb",
        texture["positions"].as_str().unwrap(),
        texture["normals"].as_str().unwrap(),
        "vat.glsl",
    ] {
        let path = format!("{folder}{name}");
        let file = manifest["files"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["path"] == path.as_str())
            .unwrap_or_else(|| panic!("{path} not in the manifest"));
        let bytes = kiln
            .http
            .get(file["url"].as_str().unwrap())
            .header("accept-encoding", "identity")
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        assert_eq!(
            sha256_hex(&bytes),
            file["sha256"].as_str().unwrap(),
            "{path}"
        );
    }
}
