//! Stage `inventory`'s reading of a `.gltf`: its external resources, each resolved inside
//! the build or refused.
#![no_main]

use kiln_worker::stages::inventory;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(resources) = inventory::gltf_resources(data) {
        for (uri, _) in resources {
            if let Some(path) = inventory::resolve_uri("models/a/model.gltf", &uri) {
                assert!(!path.split('/').any(|s| s == ".."), "{uri:?} → {path:?}");
            }
        }
    }
});
