//! Releases only move forward on purpose: several real `kiln-worker` processes on one
//! PostgreSQL database race publishes (builds finishing out of upload order), release requests
//! (rollbacks) and re-signs (a 2 s manifest lifetime, re-sign checks every second), round after
//! round; after every round the whole release history is checked against the rules of
//! `worker/src/release.rs`:
//!
//! - sequences are 1, 2, 3, … (strictly increasing, no gap, no regression);
//! - a re-sign only ever re-signs the build that was live just before it;
//! - a publish never makes a build live once a build uploaded after it was made live by a
//!   publish (a build finishing late does not replace a newer one), and a build that was not
//!   made live by its publish had such a newer one;
//! - the live build is the one the rules say (the newest build of the round, or the round's
//!   release request where it was signed after that build's publish), also as served;
//! - every stored release's bytes match their hash, name their game, build and sequence, and
//!   their signature verifies against `/v1/keys`.
//!
//! Needs PostgreSQL (`KILN_TEST_PG_URL`; `.ci/run` sets it): ignored like the other service
//! tests, `.ci/run` runs it with `--include-ignored`. Without the variable it is skipped,
//! except under `CI=true`, where it fails. It needs the `kiln-worker` binary beside the test
//! binary (`cargo test --workspace` builds it).

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::time::{Duration, Instant};

use base64::Engine;
use kiln_common::config::Config;
use kiln_common::signing::{Jwk, ManifestSignature};
use serde_json::{Value, json};

const ADMIN: &str = "race-admin-token";
const ROUNDS: usize = 40;
const WORKERS: usize = 3;
const GAME: &str = "race-game";

/// A tiny deterministic generator (the seed is printed, so a failing run can be replayed).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn worker_binary() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let binary = exe.parent().unwrap().parent().unwrap().join("kiln-worker");
    assert!(
        binary.exists(),
        "{} is missing: run the tests with `cargo test --workspace` (it builds kiln-worker)",
        binary.display()
    );
    binary
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn zip_of(name: &str, body: &[u8]) -> Vec<u8> {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    zip.start_file(name, zip::write::SimpleFileOptions::default())
        .unwrap();
    zip.write_all(body).unwrap();
    zip.finish().unwrap().into_inner()
}

/// One release as stored, with what the checks need of its build.
#[derive(Debug, Clone)]
struct Row {
    sequence: i64,
    build_id: String,
    reason: String,
}

struct Workers(Vec<std::process::Child>);

impl Drop for Workers {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL (.ci/run starts it)"]
async fn releases_only_move_forward_under_races() {
    let Ok(admin_url) = std::env::var("KILN_TEST_PG_URL") else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "KILN_TEST_PG_URL is not set: under CI this test must run against PostgreSQL"
        );
        eprintln!("skipped: KILN_TEST_PG_URL is not set (no PostgreSQL)");
        return;
    };
    let admin = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&admin_url)
        .await
        .expect("connect to PostgreSQL (KILN_TEST_PG_URL)");
    let database = format!("kiln_race_{}", uuid::Uuid::new_v4().simple());
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {database}")))
        .execute(&admin)
        .await
        .expect("create the test database");
    let database_url = format!("{}/{database}", admin_url.rsplit_once('/').unwrap().0);

    let dir = tempfile::tempdir().unwrap();
    let mut config = Config {
        data_dir: dir.path().join("data"),
        bind: "127.0.0.1:0".into(),
        admin_token: ADMIN.into(),
        database_url: database_url.clone(),
        ..Config::default()
    };
    // Only the worker processes sign; a release lives 2 s, so every live release is due for a
    // re-sign after 1 s and every worker checks each second.
    config.worker.in_process = Some(0);
    config.library.manifest_ttl_secs = 2;
    config.library.resign_interval_secs = 1;
    let running = kiln_api::start(config).await.expect("kiln starts");
    let url = running.url();
    let db = running.state.db.clone();
    let storage = running.state.storage.clone();
    let http = reqwest::Client::new();

    let key_file = dir.path().join("signing.key");
    std::fs::write(
        &key_file,
        hex::encode(uuid::Uuid::new_v4().as_bytes().repeat(2)),
    )
    .unwrap();
    let metric_ports: Vec<u16> = (0..WORKERS).map(|_| free_port()).collect();
    let mut workers = Workers(Vec::new());
    for (n, port) in metric_ports.iter().enumerate() {
        // Different pauses before each stage: jobs on the slower workers finish after the
        // builds uploaded after them.
        let pause = [0, 40, 120][n % 3];
        let child = std::process::Command::new(worker_binary())
            .arg("run")
            .env("KILN_DATA_DIR", dir.path().join("data"))
            .env("KILN_DATABASE_URL", &database_url)
            .env("KILN_PUBLIC_URL", &url)
            .env("KILN_SIGNING_KEY_FILE", &key_file)
            .env("KILN_WORK_DIR", dir.path().join(format!("work-{n}")))
            .env("KILN_WORKER_HEARTBEAT_SECS", "1")
            .env("KILN_WORKER_CONCURRENCY", "1")
            .env("KILN_WORKER_STAGE_PAUSE_MS", pause.to_string())
            .env("KILN_MANIFEST_TTL_SECS", "2")
            .env("KILN_RESIGN_INTERVAL_SECS", "1")
            .env("KILN_WORKER_METRICS_BIND", format!("127.0.0.1:{port}"))
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("start kiln-worker");
        workers.0.push(child);
    }

    // A team and its token.
    let team: Value = http
        .post(format!("{url}/v1/teams"))
        .bearer_auth(ADMIN)
        .json(&json!({"name": "racers"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let team_id = team["id"].as_str().unwrap();
    let token: Value = http
        .post(format!("{url}/v1/teams/{team_id}/tokens"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let token = token["token"].as_str().unwrap().to_string();

    let seed = u64::from_le_bytes(uuid::Uuid::new_v4().as_bytes()[..8].try_into().unwrap()) | 1;
    println!("release races: {ROUNDS} rounds, {WORKERS} worker processes, seed {seed}");
    let mut rng = Rng(seed);
    let mut published: Vec<String> = Vec::new();
    let mut upload_order: HashMap<String, (String, String)> = HashMap::new();
    let mut verified = 0usize;
    let mut keys: Vec<Jwk> = Vec::new();
    let mut tally: BTreeMap<&str, usize> = BTreeMap::new();
    let started = Instant::now();

    for round in 0..ROUNDS {
        // Let the live release age until a worker re-signs it: the round's publishes and
        // request then land while the other workers find it due too (re-sign races).
        if round > 0 {
            let deadline = Instant::now() + Duration::from_secs(60);
            while db
                .live_release(GAME)
                .await
                .unwrap()
                .map(|r| r.reason)
                .as_deref()
                != Some("resign")
            {
                assert!(
                    Instant::now() < deadline,
                    "round {round}: no re-sign within 60 s"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        // The release request of this round: an older published build (a rollback), sent
        // at a random moment while the round's builds are being processed.
        let rollback = (!published.is_empty())
            .then(|| published[rng.below(published.len() as u64) as usize].clone());
        let delay = Duration::from_millis(rng.below(900));
        let request = rollback.clone().map(|build| {
            let (http, url, token) = (http.clone(), url.clone(), token.clone());
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                let response = http
                    .post(format!("{url}/v1/games/{GAME}/releases"))
                    .bearer_auth(&token)
                    .json(&json!({ "build_id": build }))
                    .send()
                    .await
                    .unwrap();
                let status = response.status().as_u16();
                (
                    status,
                    response.json::<Value>().await.unwrap_or(Value::Null),
                )
            })
        });
        let mut round_builds = Vec::new();
        for n in 0..3 {
            let package = zip_of(
                "index.html",
                format!("<html>round {round} build {n} {seed}</html>").as_bytes(),
            );
            let response = http
                .post(format!("{url}/v1/games/{GAME}/builds?version={round}.{n}"))
                .bearer_auth(&token)
                .header("content-type", "application/zip")
                .body(package)
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 202, "upload {round}.{n}");
            let accepted: Value = response.json().await.unwrap();
            round_builds.push(accepted["build_id"].as_str().unwrap().to_string());
        }
        for id in &round_builds {
            let deadline = Instant::now() + Duration::from_secs(120);
            loop {
                let status: Value = http
                    .get(format!("{url}/v1/builds/{id}"))
                    .bearer_auth(&token)
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                match status["status"].as_str() {
                    Some("published") => break,
                    Some("failed") => panic!("round {round}: build {id} failed: {status}"),
                    _ => {}
                }
                assert!(
                    Instant::now() < deadline,
                    "round {round}: build {id} never finished: {status}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let row = db.build(id).await.unwrap().unwrap();
            upload_order.insert(id.clone(), (row.created_at, row.id));
        }
        let mut requested_sequence = None;
        if let Some(request) = request {
            let (status, body) = request.await.unwrap();
            match status {
                201 => requested_sequence = body["sequence"].as_i64(),
                // Not signed within the API's wait: it still will be; wait for it below.
                202 => {}
                _ => panic!("round {round}: release request answered {status}: {body}"),
            }
            if requested_sequence.is_none() {
                let id = body["request_id"].as_str().unwrap().to_string();
                let deadline = Instant::now() + Duration::from_secs(120);
                requested_sequence = loop {
                    let row = db.release_request(&id).await.unwrap().unwrap();
                    match row.status.as_str() {
                        "done" => break row.sequence,
                        "failed" => panic!("round {round}: release request failed: {row:?}"),
                        _ => {}
                    }
                    assert!(
                        Instant::now() < deadline,
                        "round {round}: request never signed"
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                };
            }
        }
        published.extend(round_builds.iter().cloned());

        // The whole history, oldest first.
        let mut history = db.releases(GAME, 1_000_000).await.unwrap();
        history.reverse();
        let rows: Vec<Row> = history
            .iter()
            .map(|r| Row {
                sequence: r.sequence,
                build_id: r.build_id.clone(),
                reason: r.reason.clone(),
            })
            .collect();
        let context = |what: &str| {
            let listing: Vec<String> = rows
                .iter()
                .map(|r| format!("{} {} {}", r.sequence, r.reason, &r.build_id))
                .collect();
            format!("round {round}: {what}\nhistory:\n{}", listing.join("\n"))
        };

        // Sequences 1, 2, 3, …
        for (n, row) in rows.iter().enumerate() {
            assert_eq!(
                row.sequence,
                n as i64 + 1,
                "{}",
                context("a gap or a regression")
            );
        }
        // The rules, replayed over the history.
        let order = |id: &str| upload_order.get(id).cloned();
        let mut live: Option<String> = None;
        let mut newest_published: Option<(String, String)> = None;
        for row in &rows {
            match row.reason.as_str() {
                "publish" => {
                    let mine = order(&row.build_id).expect("a build of this test");
                    assert!(
                        newest_published
                            .as_ref()
                            .is_none_or(|newest| *newest < mine),
                        "{}",
                        context(&format!(
                            "sequence {}: the late publish of {} replaced a build uploaded after it",
                            row.sequence, row.build_id
                        ))
                    );
                    newest_published = Some(mine);
                    live = Some(row.build_id.clone());
                }
                "release" => live = Some(row.build_id.clone()),
                "resign" => assert_eq!(
                    live.as_deref(),
                    Some(row.build_id.as_str()),
                    "{}",
                    context(&format!(
                        "sequence {}: a re-sign made another build live",
                        row.sequence
                    ))
                ),
                other => panic!("{}", context(&format!("unknown reason {other}"))),
            }
        }
        // A build its publish did not make live had a newer one live by its publish.
        let publish_of = |id: &str| {
            rows.iter()
                .find(|r| r.reason == "publish" && r.build_id == id)
                .map(|r| r.sequence)
        };
        for id in &round_builds {
            if publish_of(id).is_none() {
                let mine = order(id).unwrap();
                assert!(
                    rows.iter()
                        .any(|r| r.reason == "publish"
                            && order(&r.build_id).is_some_and(|o| o > mine)),
                    "{}",
                    context(&format!("{id} was published but never made live"))
                );
                *tally
                    .entry("late publishes kept from going live")
                    .or_default() += 1;
            }
        }
        // What the round must have left live.
        let newest = round_builds.last().unwrap();
        let newest_publish = publish_of(newest)
            .unwrap_or_else(|| panic!("{}", context("the newest build was never made live")));
        let expected = match (requested_sequence, &rollback) {
            (Some(s), Some(build)) if s > newest_publish => {
                *tally
                    .entry("rounds the release request won (signed last)")
                    .or_default() += 1;
                build.clone()
            }
            (Some(_), Some(_)) => {
                *tally
                    .entry("rounds the newest publish won (signed last)")
                    .or_default() += 1;
                newest.clone()
            }
            _ => newest.clone(),
        };
        assert_eq!(
            live.as_ref(),
            Some(&expected),
            "{}",
            context("wrong live build")
        );
        let served: Value = http
            .get(format!("{url}/v1/games/{GAME}/manifest"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(
            served["build_id"].as_str(),
            Some(expected.as_str()),
            "{}",
            context("served")
        );
        assert!(
            served["sequence"].as_i64() >= Some(rows.len() as i64),
            "{served}"
        );

        // Every release's bytes and signature.
        for release in &history[verified..] {
            if !keys.iter().any(|k| k.kid == release.kid) {
                let jwks: Value = http
                    .get(format!("{url}/v1/keys"))
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                keys = serde_json::from_value(jwks["keys"].clone()).unwrap();
            }
            let key = keys
                .iter()
                .find(|k| k.kid == release.kid)
                .unwrap_or_else(|| panic!("key {} not in /v1/keys", release.kid));
            let bytes = storage.get_bytes(&release.manifest_key).await.unwrap();
            use sha2::Digest;
            assert_eq!(hex::encode(sha2::Sha256::digest(&bytes)), release.sha256);
            let signature = ManifestSignature {
                kid: release.kid.clone(),
                signature: base64::engine::general_purpose::STANDARD
                    .decode(&release.signature)
                    .unwrap(),
            };
            assert!(
                key.verify(&bytes, &signature),
                "release {} does not verify",
                release.sequence
            );
            let manifest: Value = serde_json::from_slice(&bytes).unwrap();
            assert_eq!(manifest["sequence"].as_i64(), Some(release.sequence));
            assert_eq!(
                manifest["build_id"].as_str(),
                Some(release.build_id.as_str())
            );
            assert_eq!(manifest["game"].as_str(), Some(GAME));
        }
        verified = history.len();
    }

    // What happened, from the history and from the workers' own counts.
    let history = db.releases(GAME, 1_000_000).await.unwrap();
    for reason in ["publish", "release", "resign"] {
        let n = history.iter().filter(|r| r.reason == reason).count();
        println!("  releases signed by {reason}: {n}");
    }
    for (what, n) in &tally {
        println!("  {what}: {n}");
    }
    let mut attempts: BTreeMap<(String, String), f64> = BTreeMap::new();
    for port in &metric_ports {
        let Ok(response) = http
            .get(format!("http://127.0.0.1:{port}/metrics"))
            .send()
            .await
        else {
            continue;
        };
        let text = response.text().await.unwrap_or_default();
        for line in text
            .lines()
            .filter(|l| l.starts_with("kiln_release_attempts_total{"))
        {
            let (series, value) = line.rsplit_once(' ').unwrap();
            let label = |name: &str| {
                series
                    .split(&format!("{name}=\""))
                    .nth(1)
                    .and_then(|rest| rest.split('"').next())
                    .unwrap_or("")
                    .to_string()
            };
            *attempts
                .entry((label("reason"), label("outcome")))
                .or_default() += value.parse::<f64>().unwrap();
        }
    }
    for ((reason, outcome), n) in &attempts {
        println!("  worker attempts {reason}/{outcome}: {n}");
    }
    println!(
        "release races: {ROUNDS} rounds passed, {} releases checked, {:.1} s",
        history.len(),
        started.elapsed().as_secs_f64()
    );

    drop(workers);
    running.shutdown().await;
    let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {database} WITH (FORCE)"
    )))
    .execute(&admin)
    .await;
}
