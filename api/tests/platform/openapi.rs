//! The OpenAPI document tells the truth: every route is documented with its security scheme,
//! every status it can answer and the constraints the server enforces; and every error,
//! including the extractors' rejections and unknown routes, comes in the one JSON shape of
//! `api/src/error.rs` with a status the document lists.

use crate::common;

use common::{ADMIN, Deployment::Embedded, Kiln};
use serde_json::Value;

#[derive(Clone, Copy, PartialEq, Debug)]
enum Auth {
    None,
    Team,
    Admin,
    TeamOrAdmin,
}

/// Every route the router serves: method, path template, who may call it, and the statuses
/// it can answer besides its successes (all must be documented).
const ROUTES: &[(&str, &str, Auth, &[u16])] = &[
    (
        "post",
        "/v1/games/{game}/builds",
        Auth::Team,
        &[400, 401, 403, 413, 415, 503],
    ),
    ("get", "/v1/builds/{id}", Auth::Team, &[400, 401, 404, 503]),
    (
        "get",
        "/v1/builds/{id}/events",
        Auth::Team,
        &[400, 401, 404, 503],
    ),
    (
        "get",
        "/v1/builds/{id}/report",
        Auth::Team,
        &[400, 401, 404, 503],
    ),
    (
        "get",
        "/v1/games/{game}/manifest",
        Auth::None,
        &[400, 404, 503],
    ),
    ("get", "/v1/keys", Auth::None, &[503]),
    ("get", "/v1/keys/trust", Auth::None, &[404, 503]),
    (
        "post",
        "/v1/builds/{id}/retry",
        Auth::Team,
        &[400, 401, 404, 409, 503],
    ),
    (
        "post",
        "/v1/games/{game}/transfer",
        Auth::Admin,
        &[400, 401, 404, 415, 503],
    ),
    ("post", "/dashboard/session", Auth::None, &[400, 401, 403]),
    ("delete", "/dashboard/session", Auth::None, &[403]),
    (
        "post",
        "/v1/games/{game}/releases",
        Auth::Team,
        &[400, 401, 404, 409, 415, 503],
    ),
    (
        "get",
        "/v1/games/{game}/releases",
        Auth::Team,
        &[400, 401, 404, 503],
    ),
    (
        "post",
        "/v1/telemetry",
        Auth::None,
        &[400, 413, 415, 429, 503],
    ),
    ("options", "/v1/telemetry", Auth::None, &[]),
    ("get", "/v1/library", Auth::TeamOrAdmin, &[401, 503]),
    (
        "delete",
        "/v1/library/{id}",
        Auth::Admin,
        &[400, 401, 404, 409, 503],
    ),
    ("post", "/v1/teams", Auth::Admin, &[400, 401, 409, 415, 503]),
    (
        "post",
        "/v1/teams/{id}/tokens",
        Auth::Admin,
        &[400, 401, 404, 503],
    ),
    ("get", "/v1/openapi.json", Auth::None, &[]),
    ("get", "/healthz", Auth::None, &[]),
    ("get", "/readyz", Auth::None, &[503]),
    ("get", "/metrics", Auth::None, &[]),
    ("get", "/dashboard", Auth::None, &[]),
    ("get", "/dashboard/", Auth::None, &[]),
    ("get", "/dashboard/dashboard.css", Auth::None, &[]),
    ("get", "/dashboard/charts.js", Auth::None, &[]),
    ("get", "/dashboard/dashboard.js", Auth::None, &[]),
    (
        "get",
        "/v1/dashboard/data",
        Auth::TeamOrAdmin,
        &[400, 401, 403, 503],
    ),
    ("get", "/sdk/kiln-loader.js", Auth::None, &[]),
    ("get", "/sdk/{file}", Auth::None, &[400, 404]),
    ("get", "/cdn/{key}", Auth::None, &[400, 404, 416, 503]),
    ("get", "/play/{game}/", Auth::None, &[400, 404, 416, 503]),
    (
        "get",
        "/play/{game}/{path}",
        Auth::None,
        &[400, 404, 416, 503],
    ),
    (
        "get",
        "/play/{game}/@{build_id}/",
        Auth::None,
        &[400, 404, 416, 503],
    ),
    (
        "get",
        "/play/{game}/@{build_id}/{path}",
        Auth::None,
        &[400, 404, 416, 503],
    ),
];

async fn document(kiln: &Kiln) -> Value {
    let response = kiln
        .http
        .get(format!("{}/v1/openapi.json", kiln.url))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

fn operation<'a>(doc: &'a Value, method: &str, path: &str) -> Option<&'a Value> {
    doc["paths"].get(path)?.get(method)
}

/// A `$ref`'s target, or the value itself.
fn resolve<'a>(doc: &'a Value, value: &'a Value) -> &'a Value {
    match value.get("$ref").and_then(Value::as_str) {
        Some(r) => {
            let name = r.rsplit('/').next().unwrap();
            &doc["components"]["schemas"][name]
        }
        None => value,
    }
}

fn parameter<'a>(op: &'a Value, name: &str) -> Option<&'a Value> {
    op["parameters"]
        .as_array()?
        .iter()
        .find(|p| p["name"] == name)
}

fn schemes(op: &Value) -> Vec<String> {
    let mut out: Vec<String> = op["security"]
        .as_array()
        .map(|alternatives| {
            alternatives
                .iter()
                .flat_map(|a| a.as_object().unwrap().keys().cloned())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_lists_every_route_scheme_status_and_constraint() {
    let kiln = Kiln::start(Embedded).await;
    let doc = document(&kiln).await;
    let mut problems = Vec::new();

    for scheme in ["team_token", "admin_token"] {
        let s = &doc["components"]["securitySchemes"][scheme];
        if s["type"] != "http" || s["scheme"] != "bearer" {
            problems.push(format!("security scheme {scheme} is not HTTP bearer: {s}"));
        }
    }

    for (method, path, auth, statuses) in ROUTES {
        let Some(op) = operation(&doc, method, path) else {
            problems.push(format!("{method} {path}: not documented"));
            continue;
        };
        let want: Vec<String> = match auth {
            Auth::None => vec![],
            Auth::Team => vec!["team_token".into()],
            Auth::Admin => vec!["admin_token".into()],
            Auth::TeamOrAdmin => vec!["admin_token".into(), "team_token".into()],
        };
        if schemes(op) != want {
            problems.push(format!(
                "{method} {path}: security {:?}, want {want:?}",
                schemes(op)
            ));
        }
        let mut needed: Vec<u16> = statuses.to_vec();
        if *auth != Auth::None {
            needed.push(401);
        }
        // Every route is under a timeout layer (its 503).
        needed.push(503);
        needed.sort();
        needed.dedup();
        for status in needed {
            let Some(response) = op["responses"].get(status.to_string()) else {
                problems.push(format!("{method} {path}: {status} not documented"));
                continue;
            };
            // Errors are one shape everywhere (readyz's 503 is its own report).
            if *path != "/readyz" {
                let schema = &response["content"]["application/json"]["schema"];
                if schema["$ref"] != "#/components/schemas/ErrorBody" {
                    problems.push(format!(
                        "{method} {path}: {status} is not documented as an ErrorBody"
                    ));
                }
            }
        }
    }
    // Nothing documented that the router does not serve.
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            if !ROUTES.iter().any(|(m, p, ..)| m == method && p == path) {
                problems.push(format!("{method} {path}: documented but not served"));
            }
        }
    }

    // The constraints the handlers enforce.
    let game_pattern = "^[a-z0-9][a-z0-9_-]{0,63}$";
    for (method, path, ..) in ROUTES.iter().filter(|(_, p, ..)| p.contains("{game}")) {
        let Some(op) = operation(&doc, method, path) else {
            continue;
        };
        let schema = parameter(op, "game").map(|p| &p["schema"]);
        if schema.is_none_or(|s| {
            s["pattern"] != game_pattern || s["minLength"] != 1 || s["maxLength"] != 64
        }) {
            problems.push(format!(
                "{method} {path}: `game` lacks pattern {game_pattern}, minLength 1, maxLength 64: {schema:?}"
            ));
        }
    }
    // The documented pattern is the handler's rule.
    let regex = regex::Regex::new(game_pattern).unwrap();
    let long = "a".repeat(64);
    let longer = "a".repeat(65);
    for name in [
        "a", "my-game", "0_x", "-a", "_a", "A", "a b", "a.b", "é", "", &long, &longer,
    ] {
        assert_eq!(
            regex.is_match(name),
            kiln_api::routes::uploads::valid_game(name),
            "{name:?}"
        );
    }
    if let Some(upload) = operation(&doc, "post", "/v1/games/{game}/builds") {
        let version = parameter(upload, "version").map(|p| &p["schema"]);
        if version.is_none_or(|s| {
            s["minLength"] != 1 || s["maxLength"] != 128 || s["pattern"] != "^[A-Za-z0-9._+-]+$"
        }) {
            problems.push(format!(
                "upload: `version` lacks minLength 1, maxLength 128, pattern: {version:?}"
            ));
        }
        if parameter(upload, "version").is_some_and(|p| p["required"] != true) {
            problems.push("upload: `version` is not required".into());
        }
        let key = parameter(upload, "Idempotency-Key").map(|p| &p["schema"]);
        if key.is_none_or(|s| s["minLength"] != 1 || s["maxLength"] != 255) {
            problems.push(format!(
                "upload: `Idempotency-Key` lacks minLength 1, maxLength 255: {key:?}"
            ));
        }
    }
    if let Some(manifest) = operation(&doc, "get", "/v1/games/{game}/manifest") {
        let device = parameter(manifest, "device").map(|p| &p["schema"]);
        let classes: Vec<Value> = kiln_common::devices::CLASSES
            .iter()
            .map(|c| Value::from(*c))
            .collect();
        if device.is_none_or(|s| s["enum"].as_array() != Some(&classes)) {
            problems.push(format!(
                "manifest: `device` lacks the enum {classes:?}: {device:?}"
            ));
        }
    }
    if let Some(data) = operation(&doc, "get", "/v1/dashboard/data") {
        for name in ["from", "to"] {
            let s = parameter(data, name).map(|p| &p["schema"]);
            if s.is_none_or(|s| s["format"] != "date-time") {
                problems.push(format!(
                    "dashboard data: `{name}` is not a date-time: {s:?}"
                ));
            }
        }
    }
    let schemas = &doc["components"]["schemas"];
    let statuses: Vec<Value> = kiln_common::db::BuildStatus::ALL
        .iter()
        .map(|s| Value::from(s.as_str()))
        .collect();
    for schema in ["BuildView", "UploadResponse"] {
        let status = resolve(&doc, &schemas[schema]["properties"]["status"]);
        if status["enum"].as_array() != Some(&statuses) {
            problems.push(format!(
                "{schema}.status lacks the enum {statuses:?}: {status}"
            ));
        }
    }
    let reason = &schemas["ReleaseView"]["properties"]["reason"];
    if reason["enum"] != serde_json::json!(["publish", "release", "resign"]) {
        problems.push(format!("ReleaseView.reason lacks its enum: {reason}"));
    }
    let name = &schemas["NewTeam"]["properties"]["name"];
    if name["minLength"] != 1 || name["maxLength"] != 128 {
        problems.push(format!(
            "NewTeam.name lacks minLength 1, maxLength 128: {name}"
        ));
    }
    for (schema, required) in [("NewTeam", "name"), ("ReleaseRequest", "build_id")] {
        let list = schemas[schema]["required"].as_array();
        if !list.is_some_and(|l| l.contains(&Value::from(required))) {
            problems.push(format!("{schema}.{required} is not required"));
        }
    }
    kiln.stop().await;
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// One malformed request: method, concrete path, path template, token, content type, body,
/// and the status it must get.
struct Bad {
    method: &'static str,
    path: String,
    template: &'static str,
    token: Option<String>,
    content_type: Option<&'static str>,
    body: Vec<u8>,
    status: u16,
}

fn bad(
    method: &'static str,
    path: impl Into<String>,
    template: &'static str,
    token: Option<&str>,
    status: u16,
) -> Bad {
    Bad {
        method,
        path: path.into(),
        template,
        token: token.map(str::to_string),
        content_type: None,
        body: Vec::new(),
        status,
    }
}

fn with_body(mut b: Bad, content_type: Option<&'static str>, body: &[u8]) -> Bad {
    b.content_type = content_type;
    b.body = body.to_vec();
    b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_get_a_documented_json_error() {
    malformed_requests(Kiln::start(Embedded).await).await;
}

/// The same on PostgreSQL, whose text refuses NUL (local object store: no S3 needed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL (KILN_TEST_PG_URL); .ci/run runs it"]
async fn malformed_requests_get_a_documented_json_error_on_postgresql() {
    let admin_url = std::env::var("KILN_TEST_PG_URL").expect("KILN_TEST_PG_URL");
    let name = format!("kiln_test_{}", uuid::Uuid::new_v4().simple());
    let admin = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&admin_url)
        .await
        .unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&admin)
        .await
        .unwrap();
    let url = format!("{}/{name}", admin_url.rsplit_once('/').unwrap().0);
    malformed_requests(Kiln::start_with(Embedded, |c| c.database_url = url).await).await;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
    )))
    .execute(&admin)
    .await
    .unwrap();
}

async fn malformed_requests(kiln: Kiln) {
    let (_, team) = kiln.team("malformed").await;
    let doc = document(&kiln).await;
    let t = Some(team.as_str());
    let a = Some(ADMIN);
    let json = Some("application/json");
    let cases = vec![
        // Query strings: a missing field, a wrong type, a repeated field.
        with_body(
            bad(
                "POST",
                "/v1/games/g/builds",
                "/v1/games/{game}/builds",
                t,
                400,
            ),
            Some("application/zip"),
            b"PK\x03\x04",
        ),
        with_body(
            bad(
                "POST",
                "/v1/games/g/builds?version=1&version=2",
                "/v1/games/{game}/builds",
                t,
                400,
            ),
            Some("application/zip"),
            b"PK\x03\x04",
        ),
        bad(
            "GET",
            "/v1/games/g/manifest?memory=abc",
            "/v1/games/{game}/manifest",
            None,
            400,
        ),
        bad(
            "GET",
            "/v1/games/g/manifest?cores=-1",
            "/v1/games/{game}/manifest",
            None,
            400,
        ),
        bad(
            "GET",
            "/v1/dashboard/data?from=a&from=b",
            "/v1/dashboard/data",
            t,
            400,
        ),
        bad(
            "GET",
            "/v1/dashboard/data?from=notadate",
            "/v1/dashboard/data",
            t,
            400,
        ),
        // Path parameters that are not UTF-8 once decoded.
        bad(
            "POST",
            "/v1/games/%FF/builds?version=1",
            "/v1/games/{game}/builds",
            t,
            400,
        ),
        bad("GET", "/v1/builds/%FF", "/v1/builds/{id}", t, 400),
        bad(
            "GET",
            "/v1/builds/%FF/events",
            "/v1/builds/{id}/events",
            t,
            400,
        ),
        bad(
            "GET",
            "/v1/builds/%FF/report",
            "/v1/builds/{id}/report",
            t,
            400,
        ),
        bad(
            "GET",
            "/v1/games/%FF/manifest",
            "/v1/games/{game}/manifest",
            None,
            400,
        ),
        bad(
            "GET",
            "/v1/games/%FF/releases",
            "/v1/games/{game}/releases",
            t,
            400,
        ),
        with_body(
            bad(
                "POST",
                "/v1/games/%FF/releases",
                "/v1/games/{game}/releases",
                t,
                400,
            ),
            json,
            br#"{"build_id":"x"}"#,
        ),
        bad("DELETE", "/v1/library/%FF", "/v1/library/{id}", a, 400),
        bad(
            "POST",
            "/v1/teams/%FF/tokens",
            "/v1/teams/{id}/tokens",
            a,
            400,
        ),
        bad("GET", "/sdk/%FF", "/sdk/{file}", None, 400),
        bad("GET", "/cdn/%FF", "/cdn/{key}", None, 400),
        bad("GET", "/play/%FF/", "/play/{game}/", None, 400),
        bad("GET", "/play/g/%FF", "/play/{game}/{path}", None, 400),
        bad(
            "GET",
            "/play/g/@%FF/",
            "/play/{game}/@{build_id}/",
            None,
            400,
        ),
        bad(
            "GET",
            "/play/g/@%FF/x",
            "/play/{game}/@{build_id}/{path}",
            None,
            400,
        ),
        // NUL, which no name or id holds (and PostgreSQL's text refuses: that was a 503).
        bad("GET", "/v1/builds/a%00b", "/v1/builds/{id}", t, 400),
        bad(
            "GET",
            "/v1/games/a%00/manifest",
            "/v1/games/{game}/manifest",
            None,
            400,
        ),
        bad(
            "GET",
            "/v1/games/g/manifest?model=a%00",
            "/v1/games/{game}/manifest",
            None,
            400,
        ),
        bad("DELETE", "/v1/library/a%00", "/v1/library/{id}", a, 400),
        bad(
            "POST",
            "/v1/teams/a%00/tokens",
            "/v1/teams/{id}/tokens",
            a,
            400,
        ),
        bad("GET", "/play/a%00/", "/play/{game}/", None, 400),
        with_body(
            bad("POST", "/v1/teams", "/v1/teams", a, 400),
            json,
            br#"{"name":"a\u0000b"}"#,
        ),
        with_body(
            bad(
                "POST",
                "/v1/games/g/releases",
                "/v1/games/{game}/releases",
                t,
                400,
            ),
            json,
            br#"{"build_id":"a\u0000"}"#,
        ),
        // JSON bodies: wrong types, missing fields, not JSON, wrong or no content type.
        with_body(
            bad("POST", "/v1/teams", "/v1/teams", a, 400),
            json,
            br#"{"name":1}"#,
        ),
        with_body(bad("POST", "/v1/teams", "/v1/teams", a, 400), json, b"{}"),
        with_body(
            bad("POST", "/v1/teams", "/v1/teams", a, 400),
            json,
            b"not json",
        ),
        with_body(
            bad("POST", "/v1/teams", "/v1/teams", a, 415),
            None,
            br#"{"name":"x"}"#,
        ),
        with_body(
            bad("POST", "/v1/teams", "/v1/teams", a, 415),
            Some("text/plain"),
            br#"{"name":"x"}"#,
        ),
        with_body(
            bad(
                "POST",
                "/v1/games/g/releases",
                "/v1/games/{game}/releases",
                t,
                400,
            ),
            json,
            br#"{"build_id":7}"#,
        ),
        with_body(
            bad(
                "POST",
                "/v1/games/g/releases",
                "/v1/games/{game}/releases",
                t,
                400,
            ),
            json,
            b"{}",
        ),
        with_body(
            bad(
                "POST",
                "/v1/games/g/releases",
                "/v1/games/{game}/releases",
                t,
                400,
            ),
            json,
            b"[",
        ),
        with_body(
            bad(
                "POST",
                "/v1/games/g/releases",
                "/v1/games/{game}/releases",
                t,
                415,
            ),
            None,
            br#"{"build_id":"x"}"#,
        ),
        // A body over the extractor's own limit, well past the telemetry limit.
        with_body(
            bad("POST", "/v1/telemetry", "/v1/telemetry", None, 413),
            Some("text/plain"),
            &vec![b' '; 3 << 20],
        ),
    ];
    // A fresh connection each: the server closes one whose body it did not read (the 413).
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let mut problems = Vec::new();
    for case in &cases {
        let method = reqwest::Method::from_bytes(case.method.as_bytes()).unwrap();
        let mut request = http
            .request(method, format!("{}{}", kiln.url, case.path))
            .body(case.body.clone());
        if let Some(token) = &case.token {
            request = request.bearer_auth(token);
        }
        if let Some(ct) = case.content_type {
            request = request.header("content-type", ct);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let text = response.text().await.unwrap();
        let what = format!("{} {} ({} bytes)", case.method, case.path, case.body.len());
        if status != case.status {
            problems.push(format!("{what}: {status}, want {}: {text}", case.status));
        }
        if let Err(why) = error_shape(&content_type, &text) {
            problems.push(format!("{what}: {why}: {content_type} {text:?}"));
        }
        let documented = operation(&doc, &case.method.to_lowercase(), case.template)
            .is_some_and(|op| op["responses"].get(status.to_string()).is_some());
        if !documented {
            problems.push(format!(
                "{what}: {status} is not documented for {} {}",
                case.method, case.template
            ));
        }
    }

    // No route: 404, and a route without that method: 405, in the same shape.
    for (method, path, status) in [
        ("GET", "/nope", 404),
        ("GET", "/v1/nope/deeper", 404),
        ("PUT", "/v1/keys", 405),
        ("DELETE", "/v1/teams", 405),
    ] {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let response = http
            .request(method.clone(), format!("{}{path}", kiln.url))
            .send()
            .await
            .unwrap();
        let got = response.status().as_u16();
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let text = response.text().await.unwrap();
        if got != status {
            problems.push(format!("{method} {path}: {got}, want {status}"));
        }
        if let Err(why) = error_shape(&content_type, &text) {
            problems.push(format!("{method} {path}: {why}: {content_type} {text:?}"));
        }
    }
    kiln.stop().await;
    assert!(
        problems.is_empty(),
        "{} problems in {} requests:\n{}",
        problems.len(),
        cases.len() + 4,
        problems.join("\n")
    );
}

/// `{"error": {"code": "...", "message": "..."}}` as `application/json`, nothing else.
fn error_shape(content_type: &str, text: &str) -> Result<(), &'static str> {
    if !content_type.starts_with("application/json") {
        return Err("not application/json");
    }
    let body: Value = serde_json::from_str(text).map_err(|_| "not JSON")?;
    let ok = body.as_object().is_some_and(|o| o.len() == 1)
        && body["error"].as_object().is_some_and(|e| e.len() == 2)
        && body["error"]["code"]
            .as_str()
            .is_some_and(|c| !c.is_empty())
        && body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty());
    if ok {
        Ok(())
    } else {
        Err("not {\"error\":{\"code\",\"message\"}}")
    }
}
