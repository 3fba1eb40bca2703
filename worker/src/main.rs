//! `kiln-worker`: consume build jobs from the queue, or process one package locally.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Parser, Subcommand};
use kiln_common::config::Config;
use kiln_common::db::Db;
use kiln_common::manifest::BuildIdentity;
use kiln_common::signing::ManifestSigner;
use kiln_common::storage::Storage;
use kiln_stages::pipeline::{self, StageObserver};
use kiln_stages::stages::{PackageFormat, read_head};
use kiln_worker::job;
use kiln_worker::runtime;
use sha2::Digest;

#[derive(Parser)]
#[command(name = "kiln-worker", version, about = "Kiln build worker")]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Consume build jobs from the queue (the default).
    Run,
    /// The trust root and the signing keys (docs/key-rotation.md). Needs the root key file
    /// (`KILN_ROOT_KEY_FILE`) and the database; prints the new trust document.
    Keys {
        #[command(subcommand)]
        command: KeysCommand,
    },
    /// Run the whole pipeline on one package, with no server and no database.
    Process {
        /// A .zip or .tar.gz game package.
        package: PathBuf,
        /// Output directory: objects under `files/`, `manifest.json`, `manifest.sig`, `report.json`.
        #[arg(long)]
        out: PathBuf,
        /// Game name written into the manifest.
        #[arg(long, default_value = "local")]
        game: String,
        /// Version written into the manifest.
        #[arg(long, default_value = "0.0.0")]
        version: String,
        /// Build id written into the manifest and the rewritten pages' `<base>`.
        #[arg(long, default_value = "local")]
        build_id: String,
        /// Signing key (hex seed); default: the configured key, generated if missing.
        #[arg(long)]
        key: Option<PathBuf>,
        /// URL prefix for objects in the manifest.
        #[arg(long, default_value = "cdn")]
        cdn_base: String,
        /// A trust document as `/v1/keys/trust` serves it: rewritten pages pin its roots (as a
        /// worker's do) instead of the signing key itself.
        #[arg(long)]
        trust: Option<PathBuf>,
        /// Also bake every animated model into vertex animation textures (the `[vat]`
        /// configuration's settings; a `kiln.toml` in the package can refine them).
        #[arg(long)]
        vat: bool,
    },
    /// Bake one model's skinned / morph-animated meshes into vertex animation textures:
    /// per mesh, DIR/<mesh>/{mesh.glb, positions-*.png|exr, normals-*, vat.json, vat.glsl,
    /// vat.wgsl} (docs/vat.md). Defaults come from the `[vat]` configuration.
    Vat {
        model: PathBuf,
        #[arg(long)]
        out: PathBuf,
        /// auto, low, medium, high, rgba16 or half.
        #[arg(long)]
        encoding: Option<String>,
        /// relative or absolute.
        #[arg(long)]
        mode: Option<String>,
        #[arg(long)]
        frame_rate: Option<f64>,
        /// Error `auto` accepts, relative to the bounding-box diagonal.
        #[arg(long)]
        tolerance: Option<f64>,
        /// The same in model units (overrides --tolerance).
        #[arg(long)]
        tolerance_abs: Option<f64>,
        /// Largest texture dimension: 2048, 4096 or 8192.
        #[arg(long)]
        max_size: Option<u32>,
        /// Texels per row.
        #[arg(long)]
        width: Option<u32>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Measure a compressed model's animation error against its source: per clip, max / p99 /
    /// mean distance of every vertex (skinned, morphed) and of shell points around joints
    /// that move no vertex, sampled at 4× the source key rate.
    AnimError {
        source: PathBuf,
        compressed: PathBuf,
        /// Tolerance relative to the model's bounding-box diagonal [default: the animation
        /// pass's].
        #[arg(long)]
        tolerance: Option<f64>,
        /// Absolute tolerance in model units (overrides --tolerance).
        #[arg(long)]
        tolerance_abs: Option<f64>,
        /// Shell radius for virtual vertices, relative to the diagonal [default: the metric's].
        #[arg(long)]
        shell: Option<f64>,
        /// Samples per source key interval [default: the metric's].
        #[arg(long)]
        rate_multiplier: Option<f64>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum KeysCommand {
    /// Root key (generated if missing), signing key (generated if missing), trust document v1.
    Init,
    /// A new online signing key (written to the signing key file) becomes active; the old one
    /// is retired, still listed. Restart the workers afterwards.
    Rotate,
    /// Revoke a signing key: refused while a live manifest is signed by it, unless --force
    /// (which re-signs those with the active key at once).
    Revoke {
        kid: String,
        #[arg(long)]
        force: bool,
    },
    /// A new root key: the document lists and is signed by the old and the new roots.
    RotateRoot,
    /// Drop an old root once every live build pins the new one.
    DropRoot { kid: String },
    /// The same document, version + 1, a new expiry.
    Refresh,
    /// Print the current trust document, verified against the root key file's roots.
    Show,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let config = match Config::load() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("kiln-worker: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    kiln_common::init_tracing(config.log_json);
    if let Some(Command::AnimError {
        source,
        compressed,
        tolerance,
        tolerance_abs,
        shell,
        rate_multiplier,
        json,
    }) = &cli.command
    {
        // Unset flags keep the stage's own defaults (the metric's, the animation pass's).
        let defaults = kiln_stages::animation::MetricOptions::default();
        let metric = kiln_stages::animation::MetricOptions {
            shell: shell.unwrap_or(defaults.shell),
            rate_multiplier: rate_multiplier.unwrap_or(defaults.rate_multiplier),
        };
        let tolerance = tolerance
            .unwrap_or(kiln_stages::stages::animation::AnimationOptions::DEFAULT_TOLERANCE);
        return anim_error(source, compressed, tolerance, *tolerance_abs, metric, *json);
    }
    if let Some(Command::Vat {
        model,
        out,
        encoding,
        mode,
        frame_rate,
        tolerance,
        tolerance_abs,
        max_size,
        width,
        json,
    }) = &cli.command
    {
        let settings = kiln_stages::stages::vat::VatSettings {
            encoding: encoding.clone(),
            mode: mode.clone(),
            frame_rate: *frame_rate,
            tolerance: *tolerance,
            tolerance_abs: *tolerance_abs,
            max_size: *max_size,
            width: *width,
            ..Default::default()
        };
        return vat_command(&config, model, out, &settings, *json);
    }
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    let result = match cli.command.unwrap_or(Command::Run) {
        Command::Run => runtime.block_on(consume(config)),
        Command::Keys { command } => runtime.block_on(keys_command(config, command)),
        Command::Process {
            package,
            out,
            game,
            version,
            build_id,
            key,
            cdn_base,
            trust,
            vat,
        } => {
            let mut config = config;
            if vat && config.vat.files.as_ref().is_none_or(Vec::is_empty) {
                config.vat.files = Some(vec!["*".into()]);
            }
            let ids = Ids {
                game,
                version,
                build_id,
                trust,
            };
            runtime.block_on(process(config, package, out, ids, key, cdn_base))
        }
        Command::AnimError { .. } | Command::Vat { .. } => unreachable!("handled above"),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("kiln-worker: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn keys_command(
    config: Config,
    command: KeysCommand,
) -> anyhow::Result<std::process::ExitCode> {
    use kiln_worker::keys;
    let db = kiln_jobs::open_database(&config, kiln_common::config::MIN_DB_CONNECTIONS).await?;
    let doc = match command {
        KeysCommand::Init => keys::init(&config, &db).await?,
        KeysCommand::Rotate => {
            let doc = keys::rotate(&config, &db).await?;
            eprintln!(
                "kiln-worker: new active key {} written to {}; restart the workers to sign with it",
                doc.active().map_or("?", |k| k.kid.as_str()),
                config.signing_key_path().display()
            );
            doc
        }
        KeysCommand::Revoke { kid, force } => {
            let (doc, live) = keys::revoke(&config, &db, &kid, force).await?;
            if !live.is_empty() {
                resign_live(&config, db.clone(), &kid).await?;
            }
            doc
        }
        KeysCommand::RotateRoot => {
            let (doc, root) = keys::rotate_root(&config, &db).await?;
            eprintln!(
                "kiln-worker: new root {} (the document is signed by {} roots); restart the workers so new builds pin it",
                root.kid,
                doc.roots.len()
            );
            doc
        }
        KeysCommand::DropRoot { kid } => keys::drop_root(&config, &db, &kid).await?,
        KeysCommand::Refresh => keys::refresh(&config, &db).await?,
        KeysCommand::Show => {
            let row = db.latest_trust_document().await?.ok_or_else(|| {
                anyhow::anyhow!("no trust document yet: run `kiln-worker keys init`")
            })?;
            let roots: Vec<_> = kiln_common::trust::load_roots(&config.root_key_path())?
                .iter()
                .map(|r| r.public_jwk())
                .collect();
            kiln_common::trust::SignedTrust::verify(
                row.envelope.as_bytes(),
                &roots,
                chrono::Utc::now(),
            )?
        }
    };
    println!("{}", serde_json::to_string_pretty(&doc)?);
    Ok(std::process::ExitCode::SUCCESS)
}

/// Signs again, with the active key, every live release that `kid` signed (`keys revoke
/// --force`): the next sequence, so a device that saw the old one takes it.
async fn resign_live(config: &Config, db: Db, kid: &str) -> anyhow::Result<()> {
    let storage = Storage::from_config(&config.storage, &config.data_dir).await?;
    let context = runtime::job_context(config, db.clone(), storage).await?;
    anyhow::ensure!(
        context.signer.kid() != kid,
        "the signing key file still holds the revoked key {kid}: run `keys rotate` first"
    );
    for live in db.live_releases().await? {
        let class_signed = db
            .live_signed_by(kid)
            .await?
            .iter()
            .any(|(g, _, _)| *g == live.game);
        if live.kid != kid && !class_signed {
            continue;
        }
        // Only what is live now is re-signed (compare-and-set; `release::resign`).
        match kiln_worker::release::resign(&context, &live).await? {
            kiln_worker::release::Outcome::Signed(row) => eprintln!(
                "kiln-worker: re-signed {} as sequence {} with {}",
                row.game, row.sequence, row.kid
            ),
            _ => eprintln!(
                "kiln-worker: {} moved on while re-signing; its new release is signed with the current key",
                live.game
            ),
        }
    }
    Ok(())
}

async fn consume(config: Config) -> anyhow::Result<std::process::ExitCode> {
    kiln_common::metrics::init();
    let db = kiln_jobs::open_database(&config, kiln_common::config::WORKER_DB_CONNECTIONS).await?;
    let storage = Storage::from_config(&config.storage, &config.data_dir).await?;
    tracing::info!(storage = ?storage, "kiln-worker starting");
    let context = runtime::job_context(&config, db, storage).await?;
    if !config.worker.metrics_bind.is_empty() {
        serve_metrics(&config.worker.metrics_bind).await?;
    }
    let (stop, stopped) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        kiln_jobs::shutdown_signal().await;
        let _ = stop.send(true);
    });
    job::run_workers(
        context,
        1,
        config.worker.concurrency,
        Duration::from_secs(config.worker.heartbeat_secs),
        stopped,
    )
    .await?;
    Ok(std::process::ExitCode::SUCCESS)
}

/// A tiny `/metrics` endpoint for a standalone worker (stage durations, job outcomes).
async fn serve_metrics(bind: &str) -> anyhow::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind(bind).await?;
    tracing::info!(%bind, "worker metrics listening");
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                let _ = socket.read(&mut buf).await;
                let body = kiln_common::metrics::render();
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = socket.write_all(head.as_bytes()).await;
                let _ = socket.write_all(body.as_bytes()).await;
            });
        }
    });
    Ok(())
}

/// Prints each stage as it runs.
struct Printer;

impl StageObserver for Printer {
    fn started(&mut self, stage: &'static str) {
        eprintln!("  {stage:<10} …");
    }
    fn progress(&mut self, _: &'static str, _: f64) {}
    fn succeeded(&mut self, stage: &'static str, elapsed: Duration) {
        eprintln!(
            "  {stage:<10} ok ({:.0} ms)",
            elapsed.as_secs_f64() * 1000.0
        );
    }
    fn failed(&mut self, stage: &'static str, _: Duration, error: &str) {
        eprintln!("  {stage:<10} FAILED: {error}");
    }
}

/// What `process` names the build.
struct Ids {
    game: String,
    version: String,
    build_id: String,
    /// A trust document whose roots the pages pin.
    trust: Option<PathBuf>,
}

async fn process(
    config: Config,
    package: PathBuf,
    out: PathBuf,
    ids: Ids,
    key: Option<PathBuf>,
    cdn_base: String,
) -> anyhow::Result<std::process::ExitCode> {
    let head = read_head(&package, 8).map_err(|e| anyhow::anyhow!("{}: {e}", package.display()))?;
    let Some(format) = PackageFormat::sniff(&head) else {
        anyhow::bail!("{}: not a zip or tar.gz package", package.display());
    };
    let key_path = key.unwrap_or_else(|| config.signing_key_path());
    let (signer, _) = ManifestSigner::load_or_generate(&key_path)?;
    let bytes = std::fs::read(&package)?;
    let identity = BuildIdentity {
        game: ids.game,
        version: ids.version,
        build_id: ids.build_id,
        package_sha256: hex::encode(sha2::Sha256::digest(&bytes)),
        created_at: kiln_common::db::now(),
    };
    drop(bytes);
    let trust_roots = match &ids.trust {
        Some(path) => {
            let bytes =
                std::fs::read(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
            kiln_common::trust::SignedTrust::parse(&bytes)
                .and_then(|(signed, _)| kiln_common::trust::parse_trust_document(&signed))
                .map_err(|e| anyhow::anyhow!("{}: not a trust document: {e}", path.display()))?
                .roots
        }
        None => Vec::new(),
    };
    let work = tempfile_dir(&out)?;
    let options = pipeline::PipelineOptions {
        cdn_base,
        trust_roots,
        ..runtime::pipeline_options(&config)?
    };
    eprintln!("kiln-worker: processing {}", package.display());
    let work_for_pipeline = work.clone();
    let prepared = tokio::task::spawn_blocking(move || {
        pipeline::prepare(
            &package,
            format,
            &work_for_pipeline,
            &identity,
            &signer,
            &options,
            &mut Printer,
        )
    })
    .await?;
    let prepared = match prepared {
        Ok(p) => p,
        Err(failed) => {
            std::fs::create_dir_all(&out)?;
            std::fs::write(
                out.join("report.json"),
                serde_json::to_vec_pretty(&failed.report)?,
            )?;
            let _ = std::fs::remove_dir_all(&work);
            eprintln!("kiln-worker: {}", failed.error);
            return Ok(std::process::ExitCode::from(1));
        }
    };
    let storage = Storage::local(out.clone()).await?;
    let published = job::execute_plan(&storage, &prepared.plan, &mut |_| async {}).await?;
    std::fs::write(out.join("manifest.json"), &prepared.signed.bytes)?;
    std::fs::write(
        out.join("manifest.sig"),
        prepared.signed.signature.header_value() + "\n",
    )?;
    std::fs::write(
        out.join("report.json"),
        serde_json::to_vec_pretty(&prepared.report)?,
    )?;
    let _ = std::fs::remove_dir_all(&work);
    let _ = std::fs::remove_dir_all(out.join(".tmp"));
    let t = &prepared.report.totals;
    eprintln!(
        "kiln-worker: {} files, {} bytes → {} bytes (br {}, gzip {}); {} objects written to {}",
        t.files,
        t.bytes_before,
        t.bytes_after,
        t.brotli_bytes,
        t.gzip_bytes,
        published.objects,
        out.display()
    );
    Ok(std::process::ExitCode::SUCCESS)
}

/// A scratch directory beside the output (same filesystem, removed at the end).
fn tempfile_dir(out: &std::path::Path) -> anyhow::Result<PathBuf> {
    let dir = out.join(format!(".work-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// `kiln-worker anim-error`: exit 0 when every sample of every clip is within tolerance, 1
/// when not, 2 when a file can't be read.
fn anim_error(
    source: &std::path::Path,
    compressed: &std::path::Path,
    tolerance: f64,
    tolerance_abs: Option<f64>,
    options: kiln_stages::animation::MetricOptions,
    json: bool,
) -> std::process::ExitCode {
    use kiln_stages::animation::metric::compare;
    use kiln_stages::gltf::read_path;
    let read = |p: &std::path::Path| read_path(p).map_err(|e| format!("{}: {e}", p.display()));
    let result = read(source).and_then(|s| {
        let c = read(compressed)?;
        compare(&s, &c, &options, tolerance_abs, tolerance).map_err(|e| e.to_string())
    });
    let (rig, clips) = match result {
        Ok(r) => r,
        Err(e) => {
            eprintln!("kiln-worker anim-error: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let limit = tolerance_abs.unwrap_or(tolerance * rig.diagonal);
    let ok = clips
        .iter()
        .all(|c| c.max <= limit && c.duration_source == c.duration_output);
    if json {
        let out = serde_json::json!({"diagonal": rig.diagonal, "tolerance": limit, "clips": clips, "ok": ok});
        println!("{out}");
    } else {
        println!(
            "diagonal {:.6} · tolerance {:.3e} (model units)",
            rig.diagonal, limit
        );
        println!(
            "{:<4} {:<24} {:>7} {:>7} {:>11} {:>11} {:>11} {:>10} {:>9}",
            "clip", "name", "samples", "points", "max", "p99", "mean", "max/diag", "within"
        );
        for c in &clips {
            println!(
                "{:<4} {:<24} {:>7} {:>7} {:>11.4e} {:>11.4e} {:>11.4e} {:>10.2e} {:>8.2}%{}",
                c.index,
                c.name.chars().take(24).collect::<String>(),
                c.samples,
                c.points,
                c.max,
                c.p99,
                c.mean,
                c.max_relative,
                100.0 * c.within_share,
                if c.duration_source == c.duration_output {
                    String::new()
                } else {
                    format!("  duration {} → {}", c.duration_source, c.duration_output)
                }
            );
        }
    }
    if ok {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    }
}

/// `kiln-worker vat`: bakes one model; exit 0 when baked, 2 when it can't be (with why).
fn vat_command(
    config: &Config,
    model: &std::path::Path,
    out: &std::path::Path,
    settings: &kiln_stages::stages::vat::VatSettings,
    json: bool,
) -> std::process::ExitCode {
    use kiln_stages::stages::vat;
    let fail = |why: String| {
        eprintln!("kiln-worker vat: {}: {why}", model.display());
        std::process::ExitCode::from(2)
    };
    let base = match runtime::vat_selection(&config.vat) {
        Ok(s) => s.options,
        Err(e) => return fail(e.to_string()),
    };
    let options = match vat::apply(settings, &base) {
        Ok(o) => o,
        Err(e) => return fail(e),
    };
    let asset = match kiln_stages::gltf::read_path(model) {
        Ok(a) => a,
        Err(e) => return fail(e.to_string()),
    };
    let source = model
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let bake = match vat::bake_model(&asset, &source, &options) {
        Ok(b) => b,
        Err(e) => return fail(e.to_string()),
    };
    for mesh in &bake.meshes {
        let dir = out.join(&mesh.folder);
        let written = std::fs::create_dir_all(&dir).and_then(|_| {
            mesh.files
                .iter()
                .try_for_each(|(name, data)| std::fs::write(dir.join(name), data))
        });
        if let Err(e) = written {
            return fail(format!("writing {}: {e}", dir.display()));
        }
    }
    // Textures the model references by URI are referenced, not copied: from beside the model
    // (OUT = MODEL.vat, as the pipeline writes it) they resolve.
    // `Fox.glb`'s parent is the empty path, which is the current folder.
    let model_dir = model
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let images_reached = out
        .join(bake.meshes.first().map_or("", |m| m.folder.as_str()))
        .join(vat::MESH_TO_MODEL)
        .canonicalize()
        .ok()
        .zip(model_dir.canonicalize().ok())
        .is_some_and(|(a, b)| a == b);
    let external_images = asset
        .array("images")
        .iter()
        .filter(|i| {
            i.get("uri")
                .and_then(|u| u.as_str())
                .is_some_and(|u| !u.starts_with("data:"))
        })
        .count();
    if external_images > 0 && !images_reached {
        eprintln!(
            "warning: the model references {external_images} image(s) by URI; each mesh.glb \
             reaches them as {}<uri>, which resolves when --out is a folder beside the model \
             (e.g. {}.vat)",
            vat::MESH_TO_MODEL,
            model.with_extension("").display()
        );
    }
    if json {
        println!(
            "{}",
            serde_json::to_string(&bake.report).unwrap_or_default()
        );
    } else {
        println!(
            "{:<20} {:>8} {:>7} {:>8} {:>12} {:>12} {:>10} {:>12}",
            "mesh",
            "vertices",
            "frames",
            "encoding",
            "texture B",
            "max error",
            "of diag",
            "normal max°"
        );
        for m in &bake.report.meshes {
            println!(
                "{:<20} {:>8} {:>7} {:>8} {:>12} {:>12.3e} {:>10.2e} {:>12.4}",
                m.folder,
                m.vertices,
                m.frames,
                m.encoding.name(),
                m.texture_bytes,
                m.position_max,
                m.position_max_relative,
                m.normal_max_degrees
            );
            for w in &m.warnings {
                println!("  warning: {w}");
            }
        }
        println!("written to {}", out.display());
    }
    std::process::ExitCode::SUCCESS
}
