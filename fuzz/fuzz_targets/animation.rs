//! Stage `animation` alone (keyframe reduction and quantization) on one model's bytes.
#![no_main]

use kiln_worker::gltf::NoResources;
use kiln_worker::stages::animation::{self, AnimationOptions};
use kiln_worker::stages::geometry::MeshoptCodec;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = animation::animation_only_variants(
        data,
        &NoResources,
        &AnimationOptions::default(),
        MeshoptCodec::Ext,
    );
});
