//! Stage `images` on one image's bytes (`kiln_stages::fuzzing::image_stage`).
//! The body is shared with the regression test, `worker/tests/fuzz_regressions.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| kiln_stages::fuzzing::image_stage(data));
