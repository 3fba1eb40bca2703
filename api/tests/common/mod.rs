//! Test harness: a real Kiln (HTTP on a free port) on either deployment, real packages.
//!
//! - `Deployment::Embedded`: SQLite file and local object directory in a temp dir.
//! - `Deployment::Distributed`: a fresh PostgreSQL database per test and the S3-compatible
//!   server that `.ci/run` starts (`KILN_TEST_PG_URL`, `KILN_TEST_S3_ENDPOINT`,
//!   `KILN_TEST_S3_BUCKET`, AWS credentials in the environment).
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kiln_common::config::Config;
use serde_json::Value;

pub const ADMIN: &str = "test-admin-token";

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Deployment {
    Embedded,
    Distributed,
}

pub struct Kiln {
    pub running: Option<kiln_api::Running>,
    /// The API origin (uploads, tokens, the dashboard).
    pub url: String,
    /// The content origin (game files, manifests, keys, telemetry, the loader).
    pub content: String,
    pub config: Config,
    pub dir: tempfile::TempDir,
    pub http: reqwest::Client,
    pg_database: Option<String>,
}

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

/// The config for a deployment, in a fresh temp dir (and database, for PostgreSQL).
pub async fn config_for(deployment: Deployment, dir: &Path) -> (Config, Option<String>) {
    let mut config = Config {
        data_dir: dir.join("data"),
        bind: "127.0.0.1:0".into(),
        content_bind: "127.0.0.1:0".into(),
        admin_token: ADMIN.into(),
        ..Config::default()
    };
    config.worker.heartbeat_secs = 1;
    config.worker.concurrency = 2;
    let mut database = None;
    if deployment == Deployment::Distributed {
        let admin_url = std::env::var("KILN_TEST_PG_URL")
            .expect("KILN_TEST_PG_URL (e.g. postgres://postgres@127.0.0.1:5432/postgres)");
        let name = format!("kiln_test_{}", uuid::Uuid::new_v4().simple());
        let conn = sqlx_admin(&admin_url).await;
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&conn)
            .await
            .expect("create test database");
        conn.close().await;
        let base = admin_url.rsplit_once('/').unwrap().0;
        config.database_url = format!("{base}/{name}");
        config.storage.s3_bucket =
            std::env::var("KILN_TEST_S3_BUCKET").expect("KILN_TEST_S3_BUCKET");
        config.storage.s3_endpoint =
            std::env::var("KILN_TEST_S3_ENDPOINT").expect("KILN_TEST_S3_ENDPOINT");
        config.storage.s3_region = std::env::var("KILN_TEST_S3_REGION").unwrap_or("garage".into());
        config.storage.s3_path_style = true;
        database = Some(name);
    }
    (config, database)
}

async fn sqlx_admin(url: &str) -> sqlx::PgPool {
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await
        .expect("connect to PostgreSQL admin database")
}

impl Kiln {
    pub async fn start(deployment: Deployment) -> Self {
        Self::start_with(deployment, |_| {}).await
    }

    pub async fn start_with(deployment: Deployment, tweak: impl FnOnce(&mut Config)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let (mut config, pg_database) = config_for(deployment, dir.path()).await;
        // Both deployments run one in-process worker here; the crash test runs its own.
        config.worker.in_process = Some(1);
        tweak(&mut config);
        let running = kiln_api::start(config.clone()).await.expect("kiln starts");
        let url = running.url();
        let content = running.content_url();
        config.public_url = url.clone();
        config.content_url = content.clone();
        Self {
            running: Some(running),
            url,
            content,
            config,
            dir,
            http: reqwest::Client::builder()
                .no_gzip()
                .no_brotli()
                .build()
                .unwrap(),
            pg_database,
        }
    }

    /// Stops and starts again on the same data directory and database, e.g. with a new key.
    pub async fn restart_with(mut self, tweak: impl FnOnce(&mut Config)) -> Self {
        if let Some(running) = self.running.take() {
            running.shutdown().await;
        }
        let mut config = self.config.clone();
        config.public_url = String::new();
        config.content_url = String::new();
        tweak(&mut config);
        let running = kiln_api::start(config.clone())
            .await
            .expect("kiln restarts");
        self.url = running.url();
        self.content = running.content_url();
        config.public_url = self.url.clone();
        config.content_url = self.content.clone();
        self.config = config;
        self.running = Some(running);
        self
    }

    pub async fn stop(mut self) {
        if let Some(running) = self.running.take() {
            running.shutdown().await;
        }
        if let Some(name) = self.pg_database.take() {
            let admin = sqlx_admin(&std::env::var("KILN_TEST_PG_URL").unwrap()).await;
            let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
            )))
            .execute(&admin)
            .await;
        }
    }

    /// The content origin's base URL: where `/play`, `/cdn` and `/sdk` are served.
    pub fn content_url(&self) -> &str {
        &self.content
    }

    /// A new team and its token.
    pub async fn team(&self, name: &str) -> (String, String) {
        let team: Value = self
            .http
            .post(format!("{}/v1/teams", self.url))
            .bearer_auth(ADMIN)
            .json(
                &serde_json::json!({ "name": format!("{name}-{}", uuid::Uuid::new_v4().simple()) }),
            )
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let id = team["id"].as_str().expect("team id").to_string();
        let token: Value = self
            .http
            .post(format!("{}/v1/teams/{id}/tokens", self.url))
            .bearer_auth(ADMIN)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        (id, token["token"].as_str().unwrap().to_string())
    }

    pub async fn upload(
        &self,
        token: &str,
        game: &str,
        version: &str,
        content_type: &str,
        body: Vec<u8>,
    ) -> (u16, Value) {
        let response = self
            .http
            .post(format!(
                "{}/v1/games/{game}/builds?version={version}",
                self.url
            ))
            .bearer_auth(token)
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// The Prometheus text `/metrics` serves now.
    pub async fn metrics(&self) -> String {
        let response = self
            .http
            .get(format!("{}/metrics", self.url))
            .send()
            .await
            .unwrap();
        response.text().await.unwrap()
    }

    /// Posts a beacon of `events` the way `navigator.sendBeacon` does (`text/plain`).
    pub async fn send_beacon(&self, events: &[Value]) -> reqwest::Response {
        self.http
            .post(format!("{}/v1/telemetry", self.url))
            .header("content-type", "text/plain")
            .body(serde_json::json!({ "events": events }).to_string())
            .send()
            .await
            .unwrap()
    }

    pub async fn get_json(&self, token: &str, path: &str) -> (u16, Value) {
        let response = self
            .http
            .get(format!("{}{path}", self.url))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// `GET /v1/keys` as JSON.
    pub async fn jwks(&self) -> Value {
        self.http
            .get(format!("{}/v1/keys", self.url))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// Sends only the request head (as a client using `Expect: 100-continue` would) and
    /// returns the status the server answers with before any body byte is sent.
    pub async fn status_for_head(&self, token: &str, path: &str, headers: &[(&str, &str)]) -> u16 {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let addr = self.url.trim_start_matches("http://");
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut head =
            format!("POST {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n");
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes()).await.unwrap();
        let mut buf = vec![0u8; 1024];
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf))
            .await
            .expect("the server answers without waiting for the body")
            .unwrap();
        let text = String::from_utf8_lossy(&buf[..n]);
        text.split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    }

    /// Uploads a package and waits for it to be published; the build id.
    pub async fn publish(
        &self,
        token: &str,
        game: &str,
        version: &str,
        package: Vec<u8>,
    ) -> String {
        self.publish_status(token, game, version, package).await.0
    }

    /// `publish`, with the build's status as first read published.
    pub async fn publish_status(
        &self,
        token: &str,
        game: &str,
        version: &str,
        package: Vec<u8>,
    ) -> (String, Value) {
        let (code, accepted) = self
            .upload(token, game, version, "application/zip", package)
            .await;
        assert_eq!(code, 202, "{accepted}");
        let id = accepted["build_id"].as_str().unwrap().to_string();
        let status = self.wait_for_build(token, &id).await;
        assert_eq!(status["status"], "published", "{status}");
        (id, status)
    }

    /// Polls the build every 20 ms until `reached` holds of its status, for up to 60 s, and
    /// returns that status: for a test that acts on a build in a given state (mid-pipeline).
    pub async fn wait_for_build_state(
        &self,
        token: &str,
        build_id: &str,
        what: &str,
        reached: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (_, status) = self
                .get_json(token, &format!("/v1/builds/{build_id}"))
                .await;
            if reached(&status) {
                return status;
            }
            assert!(Instant::now() < deadline, "{what}: {status}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Polls the build until it is published or failed.
    pub async fn wait_for_build(&self, token: &str, build_id: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let (code, status) = self
                .get_json(token, &format!("/v1/builds/{build_id}"))
                .await;
            assert_eq!(code, 200, "{status}");
            if matches!(status["status"].as_str(), Some("published" | "failed")) {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "build {build_id} never finished: {status}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Whether the uploaded package of a build is still in the object store.
    pub async fn package_kept(&self, build_id: &str, ext: &str) -> bool {
        let storage = &self.running.as_ref().unwrap().state.storage;
        storage
            .head(&kiln_common::keys::package_key(build_id, ext))
            .await
            .unwrap()
            .is_some()
    }
}

/// The sample game (three.js installed from npm by its `npm install`), zipped.
/// Polls `check` every 50 ms until it gives a value, for up to 20 s: for what Kiln does
/// asynchronously (telemetry is written in batches, class manifests by workers).
pub async fn eventually<T, Fut: std::future::Future<Output = Option<T>>>(
    what: &str,
    check: impl Fn() -> Fut,
) -> T {
    let start = Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Sum of a metric's series (in a `/metrics` text) whose labels include every
/// `(name, value)` in `labels`; 0 when there is none.
pub fn metric_sum(metrics: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (metric, rest) = series.split_once('{').unwrap_or((series, "}"));
            (metric == name).then_some(())?;
            let all = labels
                .iter()
                .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")));
            all.then(|| value.parse::<f64>().unwrap())
        })
        .sum()
}

pub fn sample_package() -> Vec<u8> {
    let dir = repo_root().join("examples/sample-game");
    npm_installed(
        &dir,
        "vendor/addons/libs/meshopt_decoder.module.js",
        "install",
    );
    kiln_api::demo::package_dir(&dir).expect("package sample game")
}

#[path = "../../../worker/tests/support/npm.rs"]
mod npm;
pub use npm::npm_installed;

/// A zip built entry by entry, including entries no honest tool would write.
pub fn zip_with(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    for (name, data) in entries {
        zip.start_file(*name, options).unwrap();
        zip.write_all(data).unwrap();
    }
    zip.finish().unwrap().into_inner()
}

/// A zip whose entry names are patched after writing (same length), e.g. to make two
/// entries share a name, which zip writers refuse to do.
pub fn zip_renamed(entries: &[(&str, &[u8])], from: &str, to: &str) -> Vec<u8> {
    assert_eq!(from.len(), to.len());
    let mut bytes = zip_with(entries);
    let (from, to) = (from.as_bytes(), to.as_bytes());
    let mut i = 0;
    while i + from.len() <= bytes.len() {
        if &bytes[i..i + from.len()] == from {
            bytes[i..i + from.len()].copy_from_slice(to);
        }
        i += 1;
    }
    bytes
}

pub fn zip_with_symlink() -> Vec<u8> {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default();
    zip.start_file("index.html", options).unwrap();
    zip.write_all(b"<html></html>").unwrap();
    zip.add_symlink("evil", "/etc/passwd", options).unwrap();
    zip.finish().unwrap().into_inner()
}

pub enum TarEntry<'a> {
    File(&'a str, &'a [u8]),
    /// A path written raw into the header (bypassing the tar crate's own checks).
    RawFile(&'a [u8], &'a [u8]),
    Symlink(&'a str, &'a str),
    HardLink(&'a str, &'a str),
    Fifo(&'a str),
}

pub fn tar_gz_with(entries: &[TarEntry<'_>]) -> Vec<u8> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let mut builder = tar::Builder::new(gz);
    for entry in entries {
        let mut header = tar::Header::new_gnu();
        header.set_mode(0o644);
        match entry {
            TarEntry::File(path, data) => {
                header.set_size(data.len() as u64);
                header.set_entry_type(tar::EntryType::Regular);
                header.set_path(path).unwrap();
                header.set_cksum();
                builder.append(&header, *data).unwrap();
            }
            TarEntry::RawFile(path, data) => {
                header.set_size(data.len() as u64);
                header.set_entry_type(tar::EntryType::Regular);
                let name = &mut header.as_old_mut().name;
                name[..path.len()].copy_from_slice(path);
                header.set_cksum();
                builder.append(&header, *data).unwrap();
            }
            TarEntry::Symlink(path, target) | TarEntry::HardLink(path, target) => {
                header.set_size(0);
                header.set_entry_type(if matches!(entry, TarEntry::Symlink(..)) {
                    tar::EntryType::Symlink
                } else {
                    tar::EntryType::Link
                });
                header.set_path(path).unwrap();
                header.set_link_name(target).unwrap();
                header.set_cksum();
                builder.append(&header, &[][..]).unwrap();
            }
            TarEntry::Fifo(path) => {
                header.set_size(0);
                header.set_entry_type(tar::EntryType::Fifo);
                header.set_path(path).unwrap();
                header.set_cksum();
                builder.append(&header, &[][..]).unwrap();
            }
        }
    }
    builder.into_inner().unwrap().finish().unwrap()
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// The distributed tests need these; `.ci/run` sets them.
pub fn distributed_available() -> bool {
    std::env::var("KILN_TEST_PG_URL").is_ok() && std::env::var("KILN_TEST_S3_ENDPOINT").is_ok()
}

/// The loader's folder, its test packages (playwright-core, three 0.150) installed.
pub fn sdk_dir() -> PathBuf {
    let dir = repo_root().join("api/sdk");
    npm_installed(&dir, "node_modules/three-150/build/three.min.js", "ci");
    dir
}

/// Runs `api/sdk/test/e2e.mjs` (real headless Chromium) over `steps` in one browser (one
/// localStorage, one cookie jar, unless a step asks for a new context); one result per step.
pub async fn browse(steps: Value) -> Vec<Value> {
    let dir = sdk_dir();
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(steps.to_string().as_bytes()).unwrap();
    let path = file.path().to_owned();
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new("node")
            .arg(dir.join("test/e2e.mjs"))
            .args(["--steps", path.to_str().unwrap(), "--timeout-ms", "60000"])
            .output()
            .expect("node runs e2e.mjs (is chromium installed?)")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|_| panic!("not JSON: {l}")))
        .collect();
    assert_eq!(
        lines.len(),
        steps.as_array().unwrap().len(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    lines
}
