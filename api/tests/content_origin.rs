//! Team content runs on its own origin: an admin who logs into the dashboard and then opens
//! a team's game gives that game nothing (headless Chromium, driven by `api/sdk/test/e2e.mjs`);
//! the API origin serves no team content; `If-None-Match: *` only matches what exists.

mod common;

use std::io::Write;
use std::path::PathBuf;
use std::process::Command;

use common::*;
use serde_json::{Value, json};

fn sdk_dir() -> PathBuf {
    let dir = repo_root().join("api/sdk");
    npm_installed(&dir, "node_modules/three-150/build/three.min.js", "ci");
    dir
}

/// Runs the steps in one browser context (one localStorage, one cookie jar); one line each.
async fn browse(steps: Value) -> Vec<Value> {
    let dir = sdk_dir();
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(steps.to_string().as_bytes()).unwrap();
    let path = file.path().to_owned();
    let output = tokio::task::spawn_blocking(move || {
        Command::new("node")
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
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert_eq!(
        lines.len(),
        steps.as_array().unwrap().len(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    lines
}

/// A game whose script takes whatever it can reach: every `localStorage` entry, the cookies
/// it can read, and the dashboard's data (from its own origin and from the API's, with
/// credentials). It publishes what it got as `window.stolen`.
fn hostile_game(api: &str) -> Vec<u8> {
    let script = format!(
        r#"(async () => {{
  const got = {{ origin: location.origin, storage: {{}}, cookie: document.cookie, data: [] }};
  for (let i = 0; i < localStorage.length; i++) {{
    const k = localStorage.key(i);
    got.storage[k] = localStorage.getItem(k);
  }}
  for (const url of ['/v1/dashboard/data', {api:?} + '/v1/dashboard/data']) {{
    try {{
      const r = await fetch(url, {{ credentials: 'include' }});
      got.data.push({{ url, status: r.status, body: (await r.text()).slice(0, 200) }});
    }} catch (e) {{
      got.data.push({{ url, error: String(e) }});
    }}
  }}
  window.stolen = got;
}})();
"#
    );
    zip_with(&[
        (
            "index.html",
            br#"<!doctype html><html><head><meta charset="utf-8"><title>free game</title></head>
<body><p>a free game</p><script src="steal.js"></script></body></html>"#,
        ),
        ("steal.js", script.as_bytes()),
    ])
}

/// Problem 1: an admin logs into the dashboard, then opens a team's game (the `/play` link
/// on the API's own host, as they would have it); the game's script gets no token, no
/// session and no dashboard data.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_team_game_cannot_take_the_dashboard_token() {
    let kiln = Kiln::start(Deployment::Embedded).await;
    let (_, token) = kiln.team("hostile").await;
    kiln.publish(&token, "free-game", "1.0.0", hostile_game(&kiln.url))
        .await;
    let url = &kiln.url;
    let lines = browse(json!([
        {
            "open": format!("{url}/dashboard#token={ADMIN}"),
            "wait_for": "['ready', 'error'].includes(document.body.dataset.state)",
            "eval": "document.body.dataset.state",
        },
        {
            "open": format!("{url}/play/free-game/"),
            "wait_for": "window.stolen !== undefined",
            "eval": "window.stolen",
        },
    ]))
    .await;
    assert_eq!(lines[0]["result"], "ready", "the admin's dashboard: {}", lines[0]);
    let stolen = &lines[1]["result"];
    println!("what the game's script got: {stolen}");
    assert_eq!(lines[1]["started"], true, "{}", lines[1]);
    let text = stolen.to_string();
    assert!(
        !text.contains(ADMIN),
        "the game's script read the admin token: {stolen}"
    );
    assert_eq!(
        stolen["storage"],
        json!({}),
        "the game sees the dashboard's localStorage: {stolen}"
    );
    assert!(
        !stolen["cookie"].as_str().unwrap_or("").contains("kiln"),
        "the game reads a Kiln cookie: {stolen}"
    );
    for attempt in stolen["data"].as_array().unwrap() {
        assert_ne!(
            attempt["status"], 200,
            "the game read the dashboard's data: {attempt}"
        );
        assert!(
            !attempt["body"].as_str().unwrap_or("").contains("\"games\""),
            "{attempt}"
        );
    }
    kiln.stop().await;
}

/// Problem 8: `If-None-Match: *` matches any current representation (RFC 9110 13.1.2), so a
/// `304` says the object exists; an object that does not exist is a `404`, `*` or not.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn if_none_match_star_only_matches_an_existing_object() {
    let kiln = Kiln::start(Deployment::Embedded).await;
    let (_, token) = kiln.team("inm").await;
    kiln.publish(
        &token,
        "inm-game",
        "1.0.0",
        zip_with(&[
            ("index.html", b"<!doctype html><title>x</title>".as_slice()),
            ("main.js", b"console.log('hello');\n".as_slice()),
        ]),
    )
    .await;
    let manifest: Value = kiln
        .http
        .get(format!("{}/v1/games/inm-game/manifest", kiln.url))
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
        .expect("main.js in the manifest")
        .clone();
    let key = file["key"].as_str().unwrap();
    let content = content_base(&kiln);
    let status = |path: String, encoding: &'static str| {
        let http = kiln.http.clone();
        async move {
            http.get(path)
                .header("if-none-match", "*")
                .header("accept-encoding", encoding)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    for encoding in ["identity", "br, gzip"] {
        assert_eq!(
            status(format!("{content}/cdn/{key}"), encoding).await,
            304,
            "an existing object, {encoding}"
        );
        let missing = format!("{content}/cdn/files/00/{}.js", "0".repeat(64));
        assert_eq!(
            status(missing, encoding).await,
            404,
            "a missing object is not `*`, {encoding}"
        );
        assert_eq!(
            status(format!("{content}/play/inm-game/nothing.js"), encoding).await,
            404,
            "a path not in the build, {encoding}"
        );
        assert_eq!(
            status(format!("{content}/play/inm-game/main.js"), encoding).await,
            304,
            "a file of the live build, {encoding}"
        );
    }
    kiln.stop().await;
}

/// Where game files are served from: the content origin.
fn content_base(kiln: &Kiln) -> String {
    kiln.content_url().to_string()
}
