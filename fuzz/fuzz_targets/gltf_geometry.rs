//! The glTF reader and stage `geometry` (which runs the animation stage first): one model's
//! bytes to its variants, or a clear error.
#![no_main]

use kiln_worker::gltf::{Asset, NoResources};
use kiln_worker::stages::geometry::{self, GeometryOptions};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if Asset::read(data, &NoResources).is_err() {
        return;
    }
    if let Ok(model) = geometry::optimize_model(data, &NoResources, &GeometryOptions::default()) {
        // What the stage writes, Kiln can read back.
        Asset::read(&model.quantized, &NoResources).expect("quantized variant reads back");
        Asset::read(&model.meshopt, &NoResources).expect("meshopt variant reads back");
    }
});
