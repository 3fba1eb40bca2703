//! Team content runs on its own origin: an admin who logs into the dashboard and then opens
//! a team's game gives that game nothing (headless Chromium, driven by `api/sdk/test/e2e.mjs`);
//! the API origin serves no team content; `If-None-Match: *` only matches what exists.

use crate::common;

use common::*;
use serde_json::{Value, json};

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
    assert_eq!(
        lines[0]["result"], "ready",
        "the admin's dashboard: {}",
        lines[0]
    );
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

/// The API origin serves no team content: `/play`, `/cdn` and `/sdk` answer `308` to the same
/// path on the content origin; the content origin has no token-taking route. The API's own
/// pages cannot be framed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_api_origin_serves_no_team_content() {
    let kiln = Kiln::start(Deployment::Embedded).await;
    let (_, token) = kiln.team("split").await;
    kiln.publish(
        &token,
        "split-game",
        "1.0.0",
        zip_with(&[(
            "index.html",
            b"<!doctype html><title>split</title>".as_slice(),
        )]),
    )
    .await;
    assert_ne!(kiln.url, kiln.content_url());
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    for path in [
        "/play/split-game/",
        "/play/split-game/index.html?x=1",
        "/cdn/files/00/x.js",
        "/sdk/kiln-loader.js",
    ] {
        let response = no_redirects
            .get(format!("{}{path}", kiln.url))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 308, "{path}");
        assert_eq!(
            response.headers()["location"],
            format!("{}{path}", kiln.content_url()).as_str(),
            "{path}"
        );
        assert!(
            response
                .headers()
                .get("content-type")
                .is_none_or(|t| !t.to_str().unwrap().starts_with("text/html"))
        );
    }
    // Following the redirect, the page comes from the content origin, with its policy.
    let page = kiln
        .http
        .get(format!("{}/play/split-game/", kiln.url))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.url().as_str().starts_with(kiln.content_url()));
    let csp = page.headers()["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains(&format!("base-uri {}", kiln.content_url())),
        "{csp}"
    );
    assert!(csp.contains("frame-ancestors 'self'"), "{csp}");
    assert!(csp.contains("object-src 'none'"), "{csp}");
    assert!(csp.contains("connect-src 'self' data: blob:"), "{csp}");
    // What games need at run time is on the content origin too; nothing that takes a token.
    for path in ["/v1/games/split-game/manifest", "/v1/keys"] {
        let response = kiln
            .http
            .get(format!("{}{path}", kiln.content_url()))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{path}");
        assert_eq!(response.headers()["access-control-allow-origin"], "*");
    }
    let beacon = kiln
        .http
        .request(
            reqwest::Method::OPTIONS,
            format!("{}/v1/telemetry", kiln.content_url()),
        )
        .header("origin", "https://games.example")
        .header("access-control-request-method", "POST")
        .send()
        .await
        .unwrap();
    assert!(beacon.status().is_success(), "{}", beacon.status());
    for path in [
        "/dashboard",
        "/v1/dashboard/data",
        "/v1/builds/x",
        "/metrics",
    ] {
        let response = kiln
            .http
            .get(format!("{}{path}", kiln.content_url()))
            .bearer_auth(ADMIN)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 404, "{path} on the content origin");
    }
    let teams = kiln
        .http
        .post(format!("{}/v1/teams", kiln.content_url()))
        .bearer_auth(ADMIN)
        .json(&json!({"name": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(teams.status(), 404);
    // The API's pages: never framed.
    for path in ["/dashboard", "/v1/openapi.json"] {
        let response = kiln
            .http
            .get(format!("{}{path}", kiln.url))
            .send()
            .await
            .unwrap();
        assert_eq!(response.headers()["x-frame-options"], "DENY", "{path}");
        let csp = response.headers()["content-security-policy"]
            .to_str()
            .unwrap();
        assert!(csp.contains("frame-ancestors 'none'"), "{path}: {csp}");
    }
    kiln.stop().await;
}

/// A build extends its pages' policy in `kiln.toml` `[csp]`; an extension that names the API
/// origin fails the build with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_build_extends_its_policy_but_never_toward_the_api() {
    let kiln = Kiln::start(Deployment::Embedded).await;
    let (_, token) = kiln.team("csp").await;
    let page = b"<!doctype html><title>csp</title>".as_slice();
    kiln.publish(
        &token,
        "csp-game",
        "1.0.0",
        zip_with(&[
            ("index.html", page),
            (
                "kiln.toml",
                b"[csp]\nconnect-src = [\"https://api.studio.example\"]\nframe-ancestors = [\"https://portal.example\"]\n"
                    .as_slice(),
            ),
        ]),
    )
    .await;
    let response = kiln
        .http
        .get(format!("{}/play/csp-game/", kiln.content_url()))
        .send()
        .await
        .unwrap();
    let csp = response.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        csp.contains("connect-src 'self' data: blob: https://api.studio.example"),
        "{csp}"
    );
    assert!(
        csp.contains("frame-ancestors 'self' https://portal.example"),
        "{csp}"
    );
    let (_, manifest) = kiln.get_json(&token, "/v1/games/csp-game/manifest").await;
    assert_eq!(
        manifest["csp"]["connect-src"],
        json!(["https://api.studio.example"])
    );

    let toml = format!("[csp]\nconnect-src = [\"{}\"]\n", kiln.url);
    let (code, accepted) = kiln
        .upload(
            &token,
            "csp-bad",
            "1.0.0",
            "application/zip",
            zip_with(&[("index.html", page), ("kiln.toml", toml.as_bytes())]),
        )
        .await;
    assert_eq!(code, 202, "{accepted}");
    let status = kiln
        .wait_for_build(&token, accepted["build_id"].as_str().unwrap())
        .await;
    assert_eq!(status["status"], "failed", "{status}");
    assert!(
        status
            .to_string()
            .contains("build pages may not reach the API origin"),
        "{status}"
    );
    kiln.stop().await;
}

/// The dashboard's login: a token buys an HttpOnly, SameSite=Strict session cookie (stored
/// hashed, with an expiry) that `/v1/dashboard/data` accepts from the API's own origin only;
/// another origin's request with it is refused; logout ends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dashboard_sessions_are_cookies_for_this_origin_only() {
    let kiln = Kiln::start(Deployment::Embedded).await;
    let (_, token) = kiln.team("session").await;
    let login = |token: String, origin: Option<String>| {
        let http = kiln.http.clone();
        let url = format!("{}/dashboard/session", kiln.url);
        async move {
            let mut request = http.post(url).json(&json!({ "token": token }));
            if let Some(origin) = origin {
                request = request.header("origin", origin);
            }
            request.send().await.unwrap()
        }
    };
    assert_eq!(login("nope".into(), None).await.status(), 401);
    assert_eq!(
        login(token.clone(), Some(kiln.content_url().to_string()))
            .await
            .status(),
        403,
        "a login from the content origin"
    );
    let response = login(token.clone(), Some(kiln.url.clone())).await;
    assert_eq!(response.status(), 200);
    let cookie = response.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .to_string();
    for flag in ["HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=43200"] {
        assert!(cookie.contains(flag), "{cookie}");
    }
    assert!(!cookie.contains("Secure"), "plain http: {cookie}");
    let session = cookie.split(';').next().unwrap().to_string();
    let id = session.split_once('=').unwrap().1;
    assert!(!id.contains(&token));
    let data = |origin: Option<&str>, site: Option<&str>| {
        let mut request = kiln
            .http
            .get(format!("{}/v1/dashboard/data", kiln.url))
            .header("cookie", &session);
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        if let Some(site) = site {
            request = request.header("sec-fetch-site", site);
        }
        request.send()
    };
    assert_eq!(data(None, Some("same-origin")).await.unwrap().status(), 200);
    assert_eq!(data(None, None).await.unwrap().status(), 200);
    assert_eq!(
        data(Some(kiln.content_url()), Some("same-site"))
            .await
            .unwrap()
            .status(),
        403,
        "the content origin shares the API's site: SameSite alone would let it through"
    );
    assert_eq!(data(None, Some("same-site")).await.unwrap().status(), 403);
    // Stored hashed.
    let db = &kiln.running.as_ref().unwrap().state.db;
    assert!(
        db.dashboard_session(&kiln_api::auth::token_hash(id))
            .await
            .unwrap()
            .is_some()
    );
    assert!(db.dashboard_session(id).await.unwrap().is_none());
    // Logout.
    let out = kiln
        .http
        .delete(format!("{}/dashboard/session", kiln.url))
        .header("cookie", &session)
        .header("origin", &kiln.url)
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), 204);
    assert!(
        out.headers()["set-cookie"]
            .to_str()
            .unwrap()
            .contains("Max-Age=0")
    );
    assert_eq!(data(None, None).await.unwrap().status(), 401);
    kiln.stop().await;
}
