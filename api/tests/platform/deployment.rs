//! What a cluster deployment relies on (the Helm chart, `helm/kiln/`): `/metrics` on a port of
//! its own that the Ingress never routes, migrations as their own step (`kiln-api migrate`,
//! then processes with `KILN_MIGRATE_ON_START=false`), and one connection budget per process.

use crate::common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Deployment, Kiln};

#[tokio::test]
async fn metrics_are_served_apart_from_the_api_and_content_origins() {
    let kiln = Kiln::start_with(Deployment::Embedded, |c| {
        c.metrics_bind = "127.0.0.1:0".into();
    })
    .await;
    let metrics_addr = kiln
        .running
        .as_ref()
        .unwrap()
        .metrics_addr
        .expect("a metrics listener");
    for origin in [&kiln.url, &kiln.content] {
        let response = kiln
            .http
            .get(format!("{origin}/metrics"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 404, "{origin}/metrics");
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "not_found", "{body}");
    }
    let response = kiln
        .http
        .get(format!("http://{metrics_addr}/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    assert!(text.contains("kiln_builds"), "{text}");
    // Nothing else is on that port.
    let other = kiln
        .http
        .get(format!("http://{metrics_addr}/v1/openapi.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 404);
    kiln.stop().await;
}

#[tokio::test]
async fn without_a_metrics_bind_the_api_port_serves_metrics() {
    let kiln = Kiln::start(Deployment::Embedded).await;
    assert!(kiln.running.as_ref().unwrap().metrics_addr.is_none());
    assert!(kiln.metrics().await.contains("kiln_builds"));
    kiln.stop().await;
}

/// `kiln-api` with only the given environment (as a container gets it), on a fresh data dir.
fn kiln_api(data: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kiln-api"));
    command
        .args(args)
        .env_clear()
        .env("KILN_DATA_DIR", data)
        .env("KILN_BIND", "127.0.0.1:0")
        .env("KILN_CONTENT_BIND", "127.0.0.1:0")
        .env("RUST_LOG", "info")
        .envs(env.iter().copied())
        .stdin(Stdio::null());
    command
}

#[test]
fn migrations_are_a_step_of_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");

    // Told not to migrate, a process on an empty database refuses to start, saying why.
    let output = kiln_api(&data, &[], &[("KILN_MIGRATE_ON_START", "false")])
        .output()
        .unwrap();
    assert!(
        !output.status.success(),
        "started on an unmigrated database"
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("run `kiln-api migrate` first"), "{stderr}");

    // `kiln-api migrate` migrates and exits; twice is fine (a re-run Job).
    for _ in 0..2 {
        let output = kiln_api(&data, &["migrate"], &[]).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{stderr}");
        assert!(stderr.contains("migrations applied"), "{stderr}");
    }

    // Then a process that does not migrate starts and serves.
    let mut child = kiln_api(&data, &[], &[("KILN_MIGRATE_ON_START", "false")])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut seen = Vec::new();
    let listening = loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(line) => {
                if line.contains("kiln-api listening") {
                    break true;
                }
                seen.push(line);
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break false,
        }
        if Instant::now() > deadline {
            break false;
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    assert!(listening, "did not start after `migrate`: {seen:#?}");
}
