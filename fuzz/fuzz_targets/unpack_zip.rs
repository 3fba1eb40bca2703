//! Stage `unpack` on a zip package (`kiln_stages::fuzzing::unpack_zip`).
//! The body is shared with the regression test, `worker/tests/fuzz_regressions.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let scratch = tempfile::tempdir().expect("scratch dir");
    kiln_stages::fuzzing::unpack_zip(data, scratch.path());
});
