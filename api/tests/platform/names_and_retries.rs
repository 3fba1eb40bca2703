//! Names and retries that make sense (embedded deployment, real HTTP): a game is claimed
//! only by an upload that passed the checks, an admin can transfer a game, a failed build can
//! be retried (in place, or by a re-upload with a new Idempotency-Key), keys are matched per
//! game, and `/v1/library` shows a team only what its own games use.

use crate::common;

use common::Deployment::Embedded;
use common::*;
use serde_json::{Value, json};

async fn post_json(kiln: &Kiln, token: &str, path: &str, body: Value) -> (u16, Value) {
    let response = kiln
        .http
        .post(format!("{}{path}", kiln.url))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn upload_with_key(
    kiln: &Kiln,
    token: &str,
    game: &str,
    version: &str,
    key: &str,
    body: Vec<u8>,
) -> (u16, Value) {
    let response = kiln
        .http
        .post(format!(
            "{}/v1/games/{game}/builds?version={version}",
            kiln.url
        ))
        .bearer_auth(token)
        .header("content-type", "application/zip")
        .header("idempotency-key", key)
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_uploads_do_not_claim_the_game() {
    let kiln = Kiln::start_with(Embedded, |c| c.upload.max_bytes = 64 * 1024).await;
    let (_, squatter) = kiln.team("squatter").await;
    let (_, owner) = kiln.team("owner").await;
    let package = zip_with(&[("index.html", b"<html>mine</html>")]);
    // 415, 400 (not the declared format), 413: each refused, none claims the name.
    let (code, body) = kiln
        .upload(&squatter, "wanted", "1", "text/plain", b"hi".to_vec())
        .await;
    assert_eq!(code, 415, "{body}");
    let (code, body) = kiln
        .upload(
            &squatter,
            "wanted",
            "1",
            "application/zip",
            b"not a zip".to_vec(),
        )
        .await;
    assert_eq!(code, 400, "{body}");
    let mut huge = package.clone();
    huge.resize(128 * 1024, 0);
    let (code, body) = kiln
        .upload(&squatter, "wanted", "1", "application/zip", huge)
        .await;
    assert_eq!(code, 413, "{body}");
    // The name is still free: the team whose upload passes gets it.
    let (code, body) = kiln
        .upload(&owner, "wanted", "1", "application/zip", package.clone())
        .await;
    assert_eq!(
        code, 202,
        "the name was squatted by rejected uploads: {body}"
    );
    let id = body["build_id"].as_str().unwrap().to_string();
    let (code, body) = kiln
        .upload(&squatter, "wanted", "2", "application/zip", package)
        .await;
    assert_eq!(code, 403, "{body}");
    kiln.wait_for_build(&owner, &id).await;
    kiln.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_transfers_a_game_and_its_live_release_stays() {
    let kiln = Kiln::start(Embedded).await;
    let (_, alice) = kiln.team("alice").await;
    let (bob_id, bob) = kiln.team("bob").await;
    let build = kiln
        .publish(
            &alice,
            "moving",
            "1",
            zip_with(&[("index.html", b"<html>v1</html>")]),
        )
        .await;
    let (_, before) = kiln.get_json(&alice, "/v1/games/moving/releases").await;
    let live_before = (before[0]["sequence"].clone(), before[0]["build_id"].clone());

    // Only the admin; unknown game or team: 404.
    let (code, _) = post_json(
        &kiln,
        &alice,
        "/v1/games/moving/transfer",
        json!({"team_id": bob_id}),
    )
    .await;
    assert_eq!(code, 401);
    let (code, body) = post_json(
        &kiln,
        ADMIN,
        "/v1/games/nope/transfer",
        json!({"team_id": bob_id}),
    )
    .await;
    assert_eq!(code, 404, "{body}");
    let (code, body) = post_json(
        &kiln,
        ADMIN,
        "/v1/games/moving/transfer",
        json!({"team_id": "no-team"}),
    )
    .await;
    assert_eq!(code, 404, "{body}");

    let (code, body) = post_json(
        &kiln,
        ADMIN,
        "/v1/games/moving/transfer",
        json!({"team_id": bob_id}),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["team_id"], bob_id.as_str());
    assert_eq!(body["live_sequence"], live_before.0);

    // The live release stays; the game and its builds are bob's now.
    let (code, after) = kiln.get_json(&bob, "/v1/games/moving/releases").await;
    assert_eq!(code, 200, "{after}");
    assert_eq!(
        (after[0]["sequence"].clone(), after[0]["build_id"].clone()),
        live_before
    );
    let served: Value = kiln
        .http
        .get(format!("{}/v1/games/moving/manifest", kiln.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(served["build_id"], build.as_str());
    let (code, _) = kiln.get_json(&bob, &format!("/v1/builds/{build}")).await;
    assert_eq!(code, 200);
    let (code, _) = kiln.get_json(&alice, &format!("/v1/builds/{build}")).await;
    assert_eq!(code, 404);
    let (code, _) = kiln.get_json(&alice, "/v1/games/moving/releases").await;
    assert_eq!(code, 404);
    let v2 = zip_with(&[("index.html", b"<html>v2</html>")]);
    let (code, body) = kiln
        .upload(&alice, "moving", "2", "application/zip", v2.clone())
        .await;
    assert_eq!(code, 403, "{body}");
    let v2 = kiln.publish(&bob, "moving", "2", v2).await;
    // Bob can roll back to the build alice uploaded.
    let (code, body) = post_json(
        &kiln,
        &bob,
        "/v1/games/moving/releases",
        json!({"build_id": build}),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    assert_ne!(body["build_id"], v2.as_str());
    kiln.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_build_can_be_retried() {
    // Two entries at most: the three-entry package fails until the limit is raised.
    let kiln = Kiln::start_with(Embedded, |c| c.unpack.max_entries = 2).await;
    let (_, token) = kiln.team("retry").await;
    let (_, other) = kiln.team("retry-other").await;
    let package = zip_with(&[
        ("index.html", b"<html>retry</html>"),
        ("a.js", b"1"),
        ("b.js", b"2"),
    ]);
    let (code, first) =
        upload_with_key(&kiln, &token, "retry-game", "1", "ci-1", package.clone()).await;
    assert_eq!(code, 202, "{first}");
    let id = first["build_id"].as_str().unwrap().to_string();
    let failed = kiln.wait_for_build(&token, &id).await;
    assert_eq!(failed["status"], "failed", "{failed}");

    // Without a key, the same bytes are still that (failed) build.
    let (code, again) = kiln
        .upload(
            &token,
            "retry-game",
            "1",
            "application/zip",
            package.clone(),
        )
        .await;
    assert_eq!(
        (code, again["build_id"].as_str()),
        (200, Some(id.as_str())),
        "{again}"
    );

    let kiln = kiln.restart_with(|c| c.unpack.max_entries = 100).await;
    let retry = |token: String, id: String| {
        let http = kiln.http.clone();
        let url = kiln.url.clone();
        async move {
            let response = http
                .post(format!("{url}/v1/builds/{id}/retry"))
                .bearer_auth(token)
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            (
                status,
                response.json::<Value>().await.unwrap_or(Value::Null),
            )
        }
    };
    // Another team's build: not found.
    let (code, _) = retry(other.clone(), id.clone()).await;
    assert_eq!(code, 404);
    let (code, body) = retry(token.clone(), id.clone()).await;
    assert_eq!(code, 202, "{body}");
    assert_eq!(body["build_id"], id.as_str());
    assert_eq!(body["status"], "queued");
    assert!(
        body["status_url"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/v1/builds/{id}"))
    );
    let done = kiln.wait_for_build(&token, &id).await;
    assert_eq!(done["status"], "published", "{done}");
    assert_eq!(done["error"], Value::Null);
    for stage in done["stages"].as_array().unwrap() {
        assert_eq!(stage["status"], "succeeded", "{stage}");
    }
    // Only a failed build.
    let (code, body) = retry(token.clone(), id.clone()).await;
    assert_eq!(code, 409, "{body}");
    kiln.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_key_after_a_failed_build_makes_a_new_build() {
    let kiln = Kiln::start_with(Embedded, |c| c.unpack.max_entries = 2).await;
    let (_, token) = kiln.team("rekey").await;
    let package = zip_with(&[
        ("index.html", b"<html>x</html>"),
        ("a.js", b"1"),
        ("b.js", b"2"),
    ]);
    let (code, first) =
        upload_with_key(&kiln, &token, "rekey-game", "1", "run-1", package.clone()).await;
    assert_eq!(code, 202, "{first}");
    let first_id = first["build_id"].as_str().unwrap().to_string();
    assert_eq!(
        kiln.wait_for_build(&token, &first_id).await["status"],
        "failed"
    );
    // The same key: the same (failed) build.
    let (code, same) =
        upload_with_key(&kiln, &token, "rekey-game", "1", "run-1", package.clone()).await;
    assert_eq!(
        (code, same["build_id"].as_str()),
        (200, Some(first_id.as_str()))
    );
    // A new key: a new build, queued and run.
    let (code, second) =
        upload_with_key(&kiln, &token, "rekey-game", "1", "run-2", package.clone()).await;
    assert_eq!(
        code, 202,
        "a failed build's bytes with a new key made no new build: {second}"
    );
    let second_id = second["build_id"].as_str().unwrap().to_string();
    assert_ne!(second_id, first_id);
    assert_eq!(second["existing"], false);
    assert_eq!(
        kiln.wait_for_build(&token, &second_id).await["status"],
        "failed"
    );
    kiln.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotency_keys_are_matched_per_game() {
    let kiln = Kiln::start(Embedded).await;
    let (_, token) = kiln.team("keys").await;
    let (code, a) = upload_with_key(
        &kiln,
        &token,
        "game-a",
        "1",
        "ci-run-7",
        zip_with(&[("index.html", b"<html>a</html>")]),
    )
    .await;
    assert_eq!(code, 202, "{a}");
    let (code, b) = upload_with_key(
        &kiln,
        &token,
        "game-b",
        "1",
        "ci-run-7",
        zip_with(&[("index.html", b"<html>b</html>")]),
    )
    .await;
    assert_eq!(code, 202, "game-b got game-a's build for the same key: {b}");
    assert_ne!(a["build_id"], b["build_id"]);
    let b_id = b["build_id"].as_str().unwrap();
    let status = kiln.wait_for_build(&token, b_id).await;
    assert_eq!(status["game"], "game-b");
    // Within one game the key still means the same build.
    let (code, again) = upload_with_key(
        &kiln,
        &token,
        "game-b",
        "1",
        "ci-run-7",
        zip_with(&[("index.html", b"<html>other</html>")]),
    )
    .await;
    assert_eq!((code, again["build_id"].as_str()), (200, Some(b_id)));
    kiln.wait_for_build(&token, a["build_id"].as_str().unwrap())
        .await;
    kiln.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_library_shows_a_team_only_its_own_entries() {
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
    let kiln = Kiln::start_with(Embedded, |c| {
        c.library.rules_file = rules.display().to_string();
    })
    .await;
    let (_, alice) = kiln.team("lib-alice").await;
    let (_, bob) = kiln.team("lib-bob").await;
    let package = |version: &str| {
        let toy = format!(
            "var TOY_VERSION = \"{version}\";\nwindow.TOY = {{ v: TOY_VERSION, start: function () {{ if (!window.WebGLRenderingContext) throw new Error(\"toy-engine: no WebGL context\"); }} }};\n"
        );
        zip_with(&[
            (
                "index.html",
                br#"<!doctype html><script src="toy.js"></script><script src="game.js"></script>"#,
            ),
            ("toy.js", toy.as_bytes()),
            ("game.js", b"window.started = TOY.v;"),
        ])
    };
    kiln.publish(&alice, "alice-toy", "1", package("1.0.0"))
        .await;
    kiln.publish(&bob, "bob-toy", "1", package("2.0.0")).await;
    // An engine build both use: each sees only its own game using it.
    kiln.publish(&alice, "alice-toy", "2", package("3.0.0"))
        .await;
    kiln.publish(&bob, "bob-toy", "2", package("3.0.0")).await;

    let versions = |library: &Value| -> Vec<String> {
        let mut v: Vec<String> = library["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["version"].as_str().unwrap().to_string())
            .collect();
        v.sort();
        v
    };
    let (code, all) = kiln.get_json(ADMIN, "/v1/library").await;
    assert_eq!(code, 200, "{all}");
    assert_eq!(versions(&all), ["1.0.0", "2.0.0", "3.0.0"]);
    let shared = |library: &Value| {
        library["entries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["version"] == "3.0.0")
            .cloned()
            .unwrap()
    };
    assert_eq!(shared(&all)["games"], 2);

    let (code, mine) = kiln.get_json(&alice, "/v1/library").await;
    assert_eq!(code, 200, "{mine}");
    assert_eq!(
        versions(&mine),
        ["1.0.0", "3.0.0"],
        "alice sees bob's engine: {mine}"
    );
    assert_eq!(shared(&mine)["games"], 1, "{mine}");
    let sizes: i64 = mine["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["size"].as_i64().unwrap())
        .sum();
    assert_eq!(mine["bytes_stored"].as_i64(), Some(sizes), "{mine}");
    let (_, theirs) = kiln.get_json(&bob, "/v1/library").await;
    assert_eq!(versions(&theirs), ["2.0.0", "3.0.0"]);
    kiln.stop().await;
}
