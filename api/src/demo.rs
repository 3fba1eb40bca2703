//! `kiln-api --demo DIR`: package a game directory, upload it to this very server through
//! the public API, follow its progress and print what a game team gets back.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};

/// Files a game directory holds for its developers, not for players.
const SKIPPED: &[&str] = &[
    "node_modules",
    "package.json",
    "package-lock.json",
    "copy-engine.mjs",
];

/// Zips a directory (minus dotfiles and npm files) the way a game team's CI would.
pub fn package_dir(dir: &Path) -> anyhow::Result<Vec<u8>> {
    let mut files = Vec::new();
    collect(dir, dir, &mut files)?;
    files.sort();
    if files.is_empty() {
        bail!("{} holds no files", dir.display());
    }
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    for rel in files {
        zip.start_file(&rel, options)?;
        zip.write_all(&std::fs::read(dir.join(&rel))?)?;
    }
    Ok(zip.finish()?.into_inner())
}

fn collect(root: &Path, dir: &Path, out: &mut Vec<String>) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || SKIPPED.contains(&name.as_str()) {
            continue;
        }
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            collect(root, &path, out)?;
        } else if entry.file_type()?.is_file() {
            let rel = path
                .strip_prefix(root)?
                .to_string_lossy()
                .replace('\\', "/");
            out.push(rel);
        }
    }
    Ok(())
}

/// The images stage's result: bytes saved in total and per image, and what lossy would save.
fn print_images(images: &serde_json::Value) {
    let count = images["images"].as_u64().unwrap_or(0);
    let before = images["bytes_before"].as_u64().unwrap_or(0);
    let after = images["bytes_after"].as_u64().unwrap_or(0);
    println!(
        "\n  images: {} of {count} re-encoded, {before} → {after} bytes ({} saved){}",
        images["re_encoded"].as_u64().unwrap_or(0),
        before.saturating_sub(after),
        images["bytes_with_lossy"]
            .as_u64()
            .map(|b| format!(
                "; with lossy at ssimulacra2 ≥ 80 (kiln.toml [images] lossy = true): {b} bytes"
            ))
            .unwrap_or_default()
    );
    if count == 0 {
        println!("    (the build has no image: no sprite, background or model texture)");
    }
    for file in images["files"].as_array().into_iter().flatten() {
        println!(
            "    {:<44} {} → {} B  {}{}{}",
            file["path"].as_str().unwrap_or(""),
            file["bytes_before"],
            file["bytes_after"],
            file["chosen"].as_str().unwrap_or(""),
            file["slots"]
                .as_array()
                .filter(|s| !s.is_empty())
                .map(|s| format!(
                    " (texture in the model's variants: {})",
                    s.iter()
                        .filter_map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
                .unwrap_or_default(),
            file["kept"]
                .as_str()
                .map(|why| format!(" ({why})"))
                .unwrap_or_default()
        );
    }
}

/// Opens the published game in headless Chromium (`bench/load/page-bytes.mjs`) and prints
/// what the page downloaded, request by request; says how to get that when it can't run here.
async fn print_measured_download(url: &str) {
    let script = [
        "bench/load/page-bytes.mjs",
        concat!(env!("CARGO_MANIFEST_DIR"), "/../bench/load/page-bytes.mjs"),
    ]
    .into_iter()
    .map(std::path::PathBuf::from)
    .find(|p| p.exists());
    let ready = script.as_ref().is_some_and(|s| {
        s.parent()
            .is_some_and(|d| d.join("node_modules/playwright-core").exists())
    });
    let Some(script) = script.filter(|_| ready) else {
        println!(
            "\n  what a player downloads is measured in a browser: (cd bench/load && npm install), then node bench/load/page-bytes.mjs {url}"
        );
        return;
    };
    let output = tokio::process::Command::new("node")
        .arg(&script)
        .arg(url)
        .arg("--json")
        .output()
        .await;
    let measured = output
        .ok()
        .and_then(|o| serde_json::from_slice::<serde_json::Value>(&o.stdout).ok());
    let Some(m) = measured.filter(|m| m["totals"].is_object()) else {
        println!(
            "\n  could not measure the page in headless Chromium (is /usr/bin/chromium installed?): node {} {url}",
            script.display()
        );
        return;
    };
    println!("\n  what a player downloads, measured (headless Chromium, fresh profile):");
    let mut engine = 0;
    for r in m["requests"].as_array().into_iter().flatten() {
        if r["local"] == true {
            continue;
        }
        let path = r["path"].as_str().unwrap_or("");
        let bytes = r["transferred"].as_u64().unwrap_or(0);
        if path.contains("/cdn/library/") {
            engine += bytes;
        }
        println!(
            "    {:<72} {:>4} {bytes:>9} B {}",
            path.chars().take(72).collect::<String>(),
            r["status"],
            r["encoding"].as_str().unwrap_or("")
        );
    }
    let total = m["totals"]["transferred"].as_u64().unwrap_or(0);
    println!(
        "  {} requests, {total} bytes; a player whose device already holds the engine (from another game) downloads {} bytes; first frame at {} ms",
        m["totals"]["requests"],
        total.saturating_sub(engine),
        m["firstFrame"]
    );
}

/// Runs the demo against the server at `base` (the API origin) whose games are served from
/// `content` (the content origin), authorised by `admin_token`.
pub async fn run(base: &str, content: &str, admin_token: &str, dir: &Path) -> anyhow::Result<()> {
    if !dir.join("vendor").exists() {
        bail!(
            "{} has no vendor/ folder: run `npm install` there first (it copies three.js from npm)",
            dir.display()
        );
    }
    let package = package_dir(dir)?;
    let game = dir
        .file_name()
        .map(|n| {
            n.to_string_lossy()
                .to_ascii_lowercase()
                .replace(|c: char| !c.is_ascii_alphanumeric() && c != '-', "-")
        })
        .unwrap_or_else(|| "demo".into());
    let http = reqwest::Client::new();
    let team: serde_json::Value = http
        .post(format!("{base}/v1/teams"))
        .bearer_auth(admin_token)
        .json(&serde_json::json!({ "name": format!("demo-{}", uuid::Uuid::new_v4().simple()) }))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let team_id = team["id"].as_str().context("team id")?;
    let token: serde_json::Value = http
        .post(format!("{base}/v1/teams/{team_id}/tokens"))
        .bearer_auth(admin_token)
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let token = token["token"].as_str().context("token")?.to_string();

    println!("\n== Kiln demo ==================================================");
    println!(
        "uploading {} ({} bytes zipped) as game {game:?}",
        dir.display(),
        package.len()
    );
    let version = format!("demo-{}", chrono::Utc::now().format("%Y%m%d%H%M%S"));
    let upload = http
        .post(format!("{base}/v1/games/{game}/builds?version={version}"))
        .bearer_auth(&token)
        .header("content-type", "application/zip")
        .body(package)
        .send()
        .await?;
    let code = upload.status();
    let accepted: serde_json::Value = upload.json().await?;
    if !code.is_success() {
        bail!("upload refused ({code}): {accepted}");
    }
    println!("{code}: {}", serde_json::to_string_pretty(&accepted)?);
    let status_url = accepted["status_url"]
        .as_str()
        .context("status_url")?
        .to_string();

    let mut shown = String::new();
    let status = loop {
        let status: serde_json::Value = http
            .get(&status_url)
            .bearer_auth(&token)
            .send()
            .await?
            .json()
            .await?;
        let line: Vec<String> = status["stages"]
            .as_array()
            .map(|stages| {
                stages
                    .iter()
                    .map(|s| {
                        format!(
                            "{} {}",
                            s["name"].as_str().unwrap_or("?"),
                            s["status"].as_str().unwrap_or("?")
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let line = format!(
            "{}: {}",
            status["status"].as_str().unwrap_or("?"),
            line.join(", ")
        );
        if line != shown {
            println!("  {line}");
            shown = line;
        }
        if matches!(status["status"].as_str(), Some("published" | "failed")) {
            break status;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    if status["status"] != "published" {
        bail!("build failed: {}", status["error"]);
    }
    let manifest_response = http
        .get(format!("{base}/v1/games/{game}/manifest"))
        .send()
        .await?;
    let signature = manifest_response
        .headers()
        .get("kiln-signature")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let manifest: serde_json::Value = manifest_response.json().await?;
    let report: serde_json::Value = http
        .get(format!(
            "{base}/v1/builds/{}/report",
            accepted["build_id"].as_str().unwrap_or("")
        ))
        .bearer_auth(&token)
        .send()
        .await?
        .json()
        .await?;
    println!("\npublished. signed manifest: {content}/v1/games/{game}/manifest");
    println!("  Kiln-Signature: {signature}   (public keys: {content}/v1/keys)");
    println!(
        "\n  {:<44} {:>10} {:>10} {:>10}  CDN URL",
        "file", "bytes", "br", "gzip"
    );
    for file in manifest["files"].as_array().into_iter().flatten() {
        let path = file["path"].as_str().unwrap_or("");
        let size = file["size"].as_u64().unwrap_or(0);
        let form = |enc: &str| {
            file["encodings"]
                .as_array()
                .and_then(|e| e.iter().find(|f| f["encoding"] == enc))
                .and_then(|f| f["size"].as_u64())
                .map_or("-".to_string(), |s| s.to_string())
        };
        println!(
            "  {path:<44} {size:>10} {:>10} {:>10}  {}",
            form("br"),
            form("gzip"),
            file["url"].as_str().unwrap_or("")
        );
    }
    for model in manifest["models"].as_array().into_iter().flatten() {
        let preferred = model["preferred"].as_str().unwrap_or("");
        let mut line = format!("\n  model {}:", model["path"].as_str().unwrap_or(""));
        for variant in model["variants"].as_array().into_iter().flatten() {
            let name = variant["variant"].as_str().unwrap_or("");
            line.push_str(&format!(
                " {name} {} B (br {}){}",
                variant["size"],
                variant["brotli_size"],
                if name == preferred {
                    " ← preferred"
                } else {
                    ""
                }
            ));
        }
        println!("{line}");
    }
    print_images(&report["stages"]["images"]);
    let split = &report["stages"]["engines"];
    for engine in manifest["engines"].as_array().into_iter().flatten() {
        println!(
            "  engine {} {} ({} bytes) → shared library: {}",
            engine["name"].as_str().unwrap_or(""),
            engine["version"].as_str().unwrap_or(""),
            engine["size"],
            engine["url"].as_str().unwrap_or("")
        );
    }
    if let Some(reduction) = split["package_reduction"].as_f64().filter(|r| *r > 0.0) {
        println!(
            "  main package −{:.2} % ({} of {} bytes are the engine)",
            reduction * 100.0,
            split["bytes_moved"],
            split["build_bytes"],
        );
    }
    // What a player downloads: measured from the requests the page really makes.
    print_measured_download(&format!("{content}/play/{game}/")).await;
    println!(
        "\nplay it:        {content}/play/{game}/   (the content origin, apart from the API's)"
    );
    println!("build status:   curl -H 'Authorization: Bearer {token}' {status_url}");
    println!("metrics:        {base}/metrics     API: {base}/v1/openapi.json");
    println!(
        "dashboard:      {base}/dashboard#token={token}   (pre-warm, decode, library, pipeline)"
    );
    println!(
        "per device:     {content}/v1/games/{game}/manifest?device=android-low   (variant chosen for low-end Android)"
    );
    println!("================================================================\n");
    Ok(())
}
