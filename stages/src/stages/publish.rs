//! Stage `publish`: the ordered list of objects to store for a build. The job layer executes
//! it against the object store; `kiln-worker process` against a local directory.
//!
//! Files come first and the manifest last, so a manifest never names an object that is not
//! there yet. Keys are content-addressed: an object already stored is skipped, not rewritten.

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde::Serialize;

use super::Stage;
use crate::ir::{EngineFile, OutputFile, SignedManifest};

pub const NAME: &str = "publish";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UploadSource {
    File(PathBuf),
    Bytes(Vec<u8>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upload {
    pub key: String,
    pub size: u64,
    pub source: UploadSource,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishPlan {
    /// Content objects, each key once, in a stable order.
    pub objects: Vec<Upload>,
    /// Written last.
    pub manifest: Upload,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PublishReport {
    pub objects: u64,
    pub bytes: u64,
    /// Objects that were already in the store (from this build's earlier attempt, or
    /// another build with the same files).
    pub already_stored: u64,
}

/// What is published: the encoded outputs, the signed manifest, and which outputs are engine
/// files the library serves too.
#[derive(Debug, Clone, Copy)]
pub struct PublishInput<'a> {
    pub outputs: &'a [OutputFile],
    pub signed: &'a SignedManifest,
    pub engines: &'a [EngineFile],
}

/// The publish stage's pure part: the plan. The job layer executes it (its report is the
/// execution's, [`PublishReport`]); it has no options and cannot fail.
pub struct Step;

impl Stage for Step {
    const NAME: &'static str = NAME;
    type Input<'a> = PublishInput<'a>;
    type Options = ();
    type Output = PublishPlan;
    type Report = ();
    type Error = std::convert::Infallible;

    fn run(
        input: PublishInput<'_>,
        _: &(),
        _progress: &mut dyn FnMut(f64),
    ) -> Result<(PublishPlan, ()), std::convert::Infallible> {
        Ok((plan(input.outputs, input.signed, input.engines), ()))
    }
}

/// The library copy of each engine file (its bytes and compressed forms under the
/// content-addressed library key), every output, then the manifest.
fn plan(outputs: &[OutputFile], signed: &SignedManifest, engines: &[EngineFile]) -> PublishPlan {
    let mut seen = BTreeSet::new();
    let mut objects = Vec::new();
    // An output's bytes and compressed forms under `key` (its own, or its library key).
    let mut add = |key: &str, output: &OutputFile| {
        let forms = output.encodings.iter().map(|form| {
            (
                kiln_common::keys::encoded_key(key, form.encoding),
                form.size,
                &form.source,
            )
        });
        for (key, size, source) in
            std::iter::once((key.to_string(), output.size, &output.source)).chain(forms)
        {
            if seen.insert(key.clone()) {
                objects.push(Upload {
                    key,
                    size,
                    source: UploadSource::File(source.clone()),
                });
            }
        }
    };
    for engine in engines {
        if let Some(output) = outputs.iter().find(|o| o.path == engine.path) {
            add(&engine.library_key, output);
        }
    }
    for output in outputs {
        add(&output.key, output);
    }
    PublishPlan {
        objects,
        manifest: Upload {
            key: signed.key.clone(),
            size: signed.bytes.len() as u64,
            source: UploadSource::Bytes(signed.bytes.clone()),
        },
    }
}
