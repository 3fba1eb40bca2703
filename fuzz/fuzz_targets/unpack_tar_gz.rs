//! Stage `unpack` on a tar.gz package, or a plain tar gzipped first
//! (`kiln_stages::fuzzing::unpack_tar_gz`).
//! The body is shared with the regression test, `worker/tests/fuzz_regressions.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let scratch = tempfile::tempdir().expect("scratch dir");
    kiln_stages::fuzzing::unpack_tar_gz(data, scratch.path());
});
