//! The loader's telemetry beacon parser (`common/src/telemetry.rs`), on a beacon body.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(parsed) = kiln_common::telemetry::parse(data, 50) {
        assert!(parsed.events.len() <= 50);
    }
});
