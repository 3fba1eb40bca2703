//! Stage `unpack` on a zip package: a result or a clear error, never a panic, and nothing
//! written outside the destination.
#![no_main]

use kiln_common::config::UnpackLimits;
use kiln_worker::stages::{PackageFormat, unpack};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().unwrap();
    let package = dir.path().join("package.zip");
    let dest = dir.path().join("dest");
    std::fs::write(&package, data).unwrap();
    std::fs::create_dir(&dest).unwrap();
    let limits = UnpackLimits {
        max_total_bytes: 64 << 20,
        ..UnpackLimits::default()
    };
    let _ = unpack::run(&package, PackageFormat::Zip, &dest, &limits);
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 2, "wrote outside dest: {names:?}");
});
