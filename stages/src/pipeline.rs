//! The pipeline's script: which stages run, in which order, and what each hands the next.
//!
//! `prepare` is pure (files in, files and a publish plan out) and shared by the job and by
//! `kiln-worker process`. Adding a stage: its file in `stages/`, a `step` call here, and its
//! name in `STAGES` and `kiln_jobs::STAGES` (docs/ARCHITECTURE.md, "Adding a stage").

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use kiln_common::config::UnpackLimits;
use kiln_common::manifest::BuildIdentity;
use kiln_common::signing::ManifestSigner;
use serde::Serialize;

use crate::build_config::{self, BuildConfig};
use crate::stages::encode::{self, EncodeOptions, OutputFile};
use crate::stages::engines::{self, BootLinks, EngineOptions};
use crate::stages::geometry::{self, GeometryOptions, ModelOutcome, ModelVariants};
use crate::stages::images::{self, ImageOptions};
use crate::stages::inventory::{self, FileKind, Inventory};
use crate::stages::publish::{self, PublishPlan};
use crate::stages::sign::{self, SignedManifest};
use crate::stages::unpack;
use crate::stages::vat::{self, VatSelection};
use crate::stages::{FileTree, Files, PackageFormat, Stage, StageError};

/// Every stage in order, as shown in a build's status. `publish` is run by the caller.
pub const STAGES: &[&str] = &[
    unpack::NAME,
    inventory::NAME,
    engines::NAME,
    vat::NAME,
    geometry::NAME,
    images::NAME,
    encode::NAME,
    sign::NAME,
    publish::NAME,
];

#[derive(Debug, Clone, Default)]
pub struct PipelineOptions {
    pub unpack: UnpackLimits,
    pub encode: EncodeOptions,
    pub geometry: GeometryOptions,
    /// The images stage's settings; a build's `kiln.toml` `[images]` applies on top.
    pub images: ImageOptions,
    pub engines: EngineOptions,
    /// Models every build bakes into vertex animation textures (a build's `kiln.toml` adds).
    pub vat: VatSelection,
    /// URL prefix for published objects, e.g. `http://127.0.0.1:8080/cdn`.
    pub cdn_base: String,
    /// The API's public URL. No rewritten page names it: team pages run on the content origin.
    pub api_base: String,
    /// The trust roots rewritten pages pin (the trust document's `roots`); empty (a local
    /// `kiln-worker process` with no database): the build's signing key itself.
    pub trust_roots: Vec<kiln_common::signing::Jwk>,
    /// The content origin's URL: rewritten pages, the loader, manifests, keys and telemetry.
    pub content_base: String,
}

/// What happens to each stage, for progress bars and metrics.
pub trait StageObserver {
    fn started(&mut self, stage: &'static str);
    fn progress(&mut self, stage: &'static str, done: f64);
    fn succeeded(&mut self, stage: &'static str, elapsed: Duration);
    fn failed(&mut self, stage: &'static str, elapsed: Duration, error: &str);
}

/// An observer that ignores everything.
pub struct Quiet;

impl StageObserver for Quiet {
    fn started(&mut self, _: &'static str) {}
    fn progress(&mut self, _: &'static str, _: f64) {}
    fn succeeded(&mut self, _: &'static str, _: Duration) {}
    fn failed(&mut self, _: &'static str, _: Duration, _: &str) {}
}

#[derive(Debug, thiserror::Error, Clone, Serialize)]
#[error("stage {stage} failed: {reason}")]
pub struct PipelineError {
    pub stage: &'static str,
    /// The file the failure is about, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    pub reason: String,
    /// Permanent failures end the build; others are worth a retry.
    pub permanent: bool,
}

/// A failed run: why, and the report up to that point.
#[derive(Debug)]
pub struct Failed {
    pub error: PipelineError,
    pub report: BuildReport,
}

/// Everything `prepare` produced: the outputs to store and the report to show.
#[derive(Debug)]
pub struct Prepared {
    pub tree: FileTree,
    pub inventory: Inventory,
    pub outputs: Vec<OutputFile>,
    pub signed: SignedManifest,
    /// Engine files split into the library (the job indexes them).
    pub engines: Vec<engines::EngineFile>,
    pub plan: PublishPlan,
    pub report: BuildReport,
}

/// `GET /v1/builds/{id}/report`: per file, bytes before and after, and any error.
#[derive(Debug, Clone, Serialize, Default)]
pub struct BuildReport {
    pub files: Vec<FileReport>,
    pub totals: Totals,
    /// Each stage's own report.
    pub stages: BTreeMap<&'static str, serde_json::Value>,
    /// Why the build failed, if it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<PipelineError>,
}

#[derive(Debug, Clone, Serialize, Default)]
pub struct Totals {
    pub files: u64,
    pub bytes_before: u64,
    pub bytes_after: u64,
    pub brotli_bytes: u64,
    pub gzip_bytes: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct FileReport {
    pub path: String,
    pub kind: FileKind,
    pub bytes_before: u64,
    pub bytes_after: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub brotli_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gzip_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// Runs every stage up to the publish plan. `work_dir` must be empty; all files go there.
pub fn prepare(
    package: &Path,
    format: PackageFormat,
    work_dir: &Path,
    identity: &BuildIdentity,
    signer: &ManifestSigner,
    options: &PipelineOptions,
    observer: &mut dyn StageObserver,
) -> Result<Prepared, Box<Failed>> {
    let mut report = BuildReport::default();
    let tree_dir = work_dir.join("tree");
    let encoded_dir = work_dir.join("encoded");
    std::fs::create_dir_all(&tree_dir).map_err(|e| {
        Box::new(Failed {
            error: io_failure(unpack::NAME, &e),
            report: BuildReport::default(),
        })
    })?;

    let package = unpack::Package {
        path: package,
        format,
        dest: &tree_dir,
    };
    let (tree, unpack_report) = step(observer, &mut report, unpack::NAME, |obs| {
        call::<unpack::Step>(obs, package, &options.unpack)
    })?;
    report.record(unpack::NAME, &unpack_report);

    let (inventory, inventory_report) = step(observer, &mut report, inventory::NAME, |obs| {
        call::<inventory::Step>(obs, &tree, &())
    })?;
    report.record(inventory::NAME, &inventory_report);

    let (tree, engines_report, inventory) = step(observer, &mut report, engines::NAME, |obs| {
        let api = options.content_base.trim_end_matches('/');
        let links = BootLinks {
            loader: loader_url(options),
            game: identity.game.clone(),
            manifest: format!("{api}/v1/games/{}/manifest", identity.game),
            telemetry: format!("{api}/v1/telemetry"),
            keys: if options.trust_roots.is_empty() {
                vec![signer.public_jwk()]
            } else {
                options.trust_roots.clone()
            }
            .iter()
            .map(|k| serde_json::to_value(k).expect("JWK serialises"))
            .collect(),
            build: identity.build_id.clone(),
            base: Some(page_base(options, identity)),
        };
        let cdn = options.cdn_base.trim_end_matches('/');
        let input = engines::EnginesInput {
            files: Files {
                tree: &tree,
                inventory: &inventory,
            },
            links: &links,
            library_url: &|key| format!("{cdn}/{key}"),
        };
        let (tree, report) = call::<engines::Step>(obs, input, &options.engines)?;
        // Rewritten pages changed size; nothing else did.
        let mut inventory = inventory;
        for entry in &mut inventory.entries {
            if report.pages.iter().any(|p| p.path == entry.path)
                && let Some(file) = tree.files.iter().find(|f| f.path == entry.path)
            {
                entry.size = file.size;
            }
        }
        Ok((tree, report, inventory))
    })?;
    report.record(engines::NAME, &engines_report);

    // The build's own configuration, read once and checked whole (each stage's section
    // applied on top of the server's options) before any model work.
    let ((tree, vat_report), (config, variant, csp, image_options)) =
        step(observer, &mut report, vat::NAME, |obs| {
            let failed = config_failure(vat::NAME);
            let config = BuildConfig::read(&tree).map_err(failed)?;
            let selection =
                vat::build_selection(config.vat.as_ref(), &options.vat).map_err(failed)?;
            let variant = geometry::served_variant(&config.models).map_err(failed)?;
            let csp = kiln_common::csp::check_extension(config.csp.as_ref(), &api_origin(options))
                .map_err(failed)?;
            let images = images::apply(&config.images, &options.images)
                .map_err(|e| failed(format!("{}: {e}", build_config::FILE)))?;
            let files = Files {
                tree: &tree,
                inventory: &inventory,
            };
            let baked = call::<vat::Step>(obs, files, &selection)?;
            Ok((baked, (config, variant, csp, images)))
        })?;
    let inventory = apply_vat(&tree, &inventory, &vat_report).map_err(|error| {
        Box::new(Failed {
            error,
            report: std::mem::take(&mut report),
        })
    })?;
    report.record(vat::NAME, &vat_report);
    let vat_baked = vat_report.baked();

    let files = Files {
        tree: &tree,
        inventory: &inventory,
    };
    let ((tree, outcomes), geometry_report) = step(observer, &mut report, geometry::NAME, |obs| {
        // The build's `[models]` settings on top of the server's.
        let options = geometry::GeometryOptions {
            drop_unused_attributes: options.geometry.drop_unused_attributes
                || config.models.drop_unused_attributes,
            ..options.geometry.clone()
        };
        call::<geometry::Step>(obs, files, &options)
    })?;
    let (inventory, models) = apply_geometry(&tree, &outcomes, &inventory).map_err(|error| {
        Box::new(Failed {
            error,
            report: std::mem::take(&mut report),
        })
    })?;
    report.record(
        geometry::NAME,
        &serde_json::json!({ "summary": geometry_report, "models": models }),
    );

    let files = Files {
        tree: &tree,
        inventory: &inventory,
    };
    let ((tree, served_images), images_report) =
        step(observer, &mut report, images::NAME, |obs| {
            // The build's `[images]` settings on top of the server's.
            call::<images::Step>(obs, files, &image_options)
        })?;
    let inventory =
        apply_images(&tree, &inventory, &served_images, &images_report).map_err(|error| {
            Box::new(Failed {
                error,
                report: std::mem::take(&mut report),
            })
        })?;
    report.record(images::NAME, &images_report);

    let input = encode::EncodeInput {
        files: Files {
            tree: &tree,
            inventory: &inventory,
        },
        out_dir: &encoded_dir,
    };
    let (outputs, encode_report) = step(observer, &mut report, encode::NAME, |obs| {
        call::<encode::Step>(obs, input, &options.encode)
    })?;
    report.record(encode::NAME, &encode_report);

    let (signed, sign_report) = step(observer, &mut report, sign::NAME, |obs| {
        let mut serving = serving(
            &engines_report,
            variant,
            &page_base(options, identity),
            &loader_url(options),
        );
        serving.csp = csp;
        let model_paths: Vec<_> = models
            .iter()
            .map(|m| {
                let mut paths = m.paths();
                paths.ktx2 = images_report
                    .ktx2_variants
                    .iter()
                    .find(|v| v.model == m.source)
                    .map(|v| (v.path.clone(), v.formats.clone()));
                paths
            })
            .collect();
        let input = sign::SignInput {
            identity,
            outputs: &outputs,
            models: &model_paths,
            vat: &vat_baked,
            images: &served_images,
            engines: &engines_report.engines,
            serving: &serving,
            signer,
        };
        let options = sign::SignOptions {
            cdn_base: options.cdn_base.clone(),
        };
        call::<sign::Step>(obs, input, &options)
    })?;
    report.record(sign::NAME, &sign_report);

    let input = publish::PublishInput {
        outputs: &outputs,
        signed: &signed,
        engines: &engines_report.engines,
    };
    let (plan, ()) = call::<publish::Step>(observer, input, &()).map_err(|error| {
        Box::new(Failed {
            error,
            report: std::mem::take(&mut report),
        })
    })?;
    report.files = file_reports(&inventory, &outputs);
    report.totals = totals(&report.files);
    Ok(Prepared {
        tree,
        inventory,
        outputs,
        signed,
        engines: engines_report.engines,
        plan,
        report,
    })
}

/// The API's origin, which no build's Content-Security-Policy may name.
fn api_origin(options: &PipelineOptions) -> String {
    kiln_common::config::Config::origin_of(&options.api_base)
}

/// The build's immutable folder under `/play/` (a rewritten page's `<base>`).
fn page_base(options: &PipelineOptions, identity: &BuildIdentity) -> String {
    format!(
        "{}/play/{}/@{}/",
        options.content_base.trim_end_matches('/'),
        identity.game,
        identity.build_id
    )
}

/// The versioned loader a rewritten page loads (immutable: its name holds its hash).
fn loader_url(options: &PipelineOptions) -> String {
    format!(
        "{}{}",
        options.content_base.trim_end_matches('/'),
        kiln_common::loader::versioned_path()
    )
}

/// What the rewritten pages load, for the manifest's `warm` lists: the same URLs (the page's
/// folder under `/play/{game}/@{build}/`, the versioned loader), so a host's pre-warm leaves
/// nothing for the page to fetch again.
fn serving(
    report: &engines::EnginesReport,
    variant: Option<String>,
    base: &str,
    loader: &str,
) -> sign::Serving {
    let mut serving = sign::Serving {
        variant,
        ..Default::default()
    };
    for page in &report.pages {
        if page.rewrite.base.is_none() {
            continue;
        }
        serving.page_base = Some(base.to_string());
        serving.warm.push(loader.to_string());
        let direct_models = if page.rewrite.kiln_model {
            serving
                .warm_models
                .extend(page.rewrite.models.iter().cloned());
            &[][..]
        } else {
            &page.rewrite.models[..]
        };
        for path in page
            .rewrite
            .preloaded
            .iter()
            .chain(direct_models)
            .chain(&page.rewrite.assets)
            .chain(&page.rewrite.loads)
        {
            serving.warm.push(format!("{base}{path}"));
        }
    }
    serving.warm.sort();
    serving.warm.dedup();
    serving.warm_models.sort();
    serving.warm_models.dedup();
    serving
}

/// The inventory with the VAT outputs added: each is marked as made from its model, and a
/// model that could not be baked gets the reason as a warning.
fn apply_vat(
    tree: &FileTree,
    before: &Inventory,
    report: &vat::VatReport,
) -> Result<Inventory, PipelineError> {
    let mut inventory =
        inventory::extend(before, tree).map_err(|e| PipelineError::of(vat::NAME, &e))?;
    for model in &report.models {
        let folder = model.baked.first().and_then(|p| p.split_once(".vat/"));
        for entry in &mut inventory.entries {
            if let Some((stem, _)) = folder
                && entry.path.starts_with(&format!("{stem}.vat/"))
            {
                entry.used_by = Some(model.source.clone());
            }
            if entry.path == model.source
                && let Some(error) = &model.error
            {
                entry.warnings.push(format!("vat: {error}"));
            }
        }
    }
    Ok(inventory)
}

/// The inventory with the kept originals of re-encoded images added (each made from its
/// image), and a warning on each image that could not be read.
fn apply_images(
    tree: &FileTree,
    before: &Inventory,
    served: &[images::ServedImage],
    report: &images::ImagesReport,
) -> Result<Inventory, PipelineError> {
    let mut inventory =
        inventory::extend(before, tree).map_err(|e| PipelineError::of(images::NAME, &e))?;
    for entry in &mut inventory.entries {
        if let Some(image) = served.iter().find(|s| s.original == entry.path) {
            entry.used_by = Some(image.path.clone());
        }
        if let Some(variant) = report.ktx2_variants.iter().find(|v| v.path == entry.path) {
            entry.used_by = Some(variant.model.clone());
        }
        if let Some(why) = report
            .files
            .iter()
            .find(|f| f.path == entry.path)
            .and_then(|f| f.kept.as_ref())
            .filter(|why| why.starts_with("cannot") || why.starts_with("internal"))
        {
            entry.warnings.push(format!("images: {why}"));
        }
    }
    Ok(inventory)
}

/// The inventory with the variants added, and on each model what the geometry stage did
/// with it.
fn apply_geometry(
    tree: &FileTree,
    outcomes: &[ModelOutcome],
    before: &Inventory,
) -> Result<(Inventory, Vec<ModelVariants>), PipelineError> {
    let mut inventory =
        inventory::extend(before, tree).map_err(|e| PipelineError::of(geometry::NAME, &e))?;
    let mut models = Vec::new();
    for outcome in outcomes {
        match outcome {
            ModelOutcome::Optimized(variants) => {
                for entry in &mut inventory.entries {
                    if entry.path == variants.quantized || entry.path == variants.meshopt {
                        entry.used_by = Some(variants.source.clone());
                    }
                }
                models.push((**variants).clone());
            }
            ModelOutcome::Kept(path, why) => {
                if let Some(entry) = inventory.entries.iter_mut().find(|e| &e.path == path) {
                    entry.warnings.push(why.clone());
                }
            }
            ModelOutcome::Failed(path, why) => {
                if let Some(entry) = inventory.entries.iter_mut().find(|e| &e.path == path) {
                    entry.error = Some(format!("geometry: {why}"));
                }
            }
        }
    }
    Ok((inventory, models))
}

/// Calls stage `S`, its progress going to the observer and its error becoming the
/// pipeline's. Every stage is called through here.
fn call<S: Stage>(
    observer: &mut dyn StageObserver,
    input: S::Input<'_>,
    options: &S::Options,
) -> Result<(S::Output, S::Report), PipelineError> {
    S::run(input, options, &mut |done| observer.progress(S::NAME, done))
        .map_err(|e| PipelineError::of(S::NAME, &e))
}

impl PipelineError {
    /// Stage `stage` failed with `error`.
    pub fn of(stage: &'static str, error: &dyn StageError) -> Self {
        Self {
            stage,
            file: error.file(),
            permanent: error.is_permanent(),
            reason: error.to_string(),
        }
    }
}

/// Runs one stage between the observer's start and finish, timing it.
fn step<T>(
    observer: &mut dyn StageObserver,
    report: &mut BuildReport,
    stage: &'static str,
    run: impl FnOnce(&mut dyn StageObserver) -> Result<T, PipelineError>,
) -> Result<T, Box<Failed>> {
    observer.started(stage);
    let start = Instant::now();
    // A panic in a stage is a bug in Kiln that this package found: retrying the same bytes
    // would panic again, so it fails the build at once, with the report so far and the
    // reason. (Model stages catch their own per file: see `gltf::guard_model`.)
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(observer)))
        .unwrap_or_else(|payload| {
            Err(PipelineError {
                stage,
                file: None,
                reason: format!(
                    "internal error: {}",
                    crate::gltf::panic_message(payload.as_ref())
                ),
                permanent: true,
            })
        });
    match outcome {
        Ok(value) => {
            observer.succeeded(stage, start.elapsed());
            Ok(value)
        }
        Err(error) => {
            observer.failed(stage, start.elapsed(), &error.reason);
            let mut failed = std::mem::take(report);
            failed.error = Some(error.clone());
            Err(Box::new(Failed {
                error,
                report: failed,
            }))
        }
    }
}

impl BuildReport {
    fn record<R: Serialize>(&mut self, stage: &'static str, stage_report: &R) {
        self.stages.insert(
            stage,
            serde_json::to_value(stage_report).unwrap_or(serde_json::Value::Null),
        );
    }
}

/// A failure the build's `kiln.toml` causes in `stage`: permanent, naming the file.
fn config_failure(stage: &'static str) -> impl Fn(String) -> PipelineError + Copy {
    move |reason| PipelineError {
        stage,
        file: Some(build_config::FILE.to_string()),
        reason,
        permanent: true,
    }
}

fn file_reports(inventory: &Inventory, outputs: &[OutputFile]) -> Vec<FileReport> {
    inventory
        .entries
        .iter()
        .zip(outputs)
        .map(|(entry, output)| {
            let form = |enc| {
                output
                    .encodings
                    .iter()
                    .find(|f| f.encoding == enc)
                    .map(|f| f.size)
            };
            FileReport {
                path: entry.path.clone(),
                kind: entry.kind,
                bytes_before: entry.size,
                bytes_after: output.size,
                brotli_bytes: form(kiln_common::keys::Encoding::Br),
                gzip_bytes: form(kiln_common::keys::Encoding::Gzip),
                error: entry.error.clone(),
                warnings: entry.warnings.clone(),
            }
        })
        .collect()
}

fn totals(files: &[FileReport]) -> Totals {
    Totals {
        files: files.len() as u64,
        bytes_before: files.iter().map(|f| f.bytes_before).sum(),
        bytes_after: files.iter().map(|f| f.bytes_after).sum(),
        brotli_bytes: files
            .iter()
            .map(|f| f.brotli_bytes.unwrap_or(f.bytes_after))
            .sum(),
        gzip_bytes: files
            .iter()
            .map(|f| f.gzip_bytes.unwrap_or(f.bytes_after))
            .sum(),
    }
}

fn io_failure(stage: &'static str, error: &std::io::Error) -> PipelineError {
    PipelineError {
        stage,
        file: None,
        reason: format!("work directory: {error}"),
        permanent: false,
    }
}
