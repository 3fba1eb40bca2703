//! Stage `vat`: one model baked into vertex animation textures, or a clear error.
#![no_main]

use kiln_worker::gltf::{Asset, NoResources};
use kiln_worker::stages::vat::{self, VatOptions};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(asset) = Asset::read(data, &NoResources) {
        let _ = vat::bake_model(&asset, "model.glb", &VatOptions::default());
    }
});
