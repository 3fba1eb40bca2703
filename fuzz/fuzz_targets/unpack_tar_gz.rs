//! Stage `unpack` on a tar.gz package. Inputs that are not gzip are taken as a plain tar and
//! gzipped first, so the fuzzer works on the tar layer (headers, pax, GNU long names).
#![no_main]

use std::io::Write;

use kiln_common::config::UnpackLimits;
use kiln_worker::stages::{PackageFormat, unpack};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let bytes = if data.starts_with(&[0x1f, 0x8b]) {
        data.to_vec()
    } else {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(data).unwrap();
        gz.finish().unwrap()
    };
    let dir = tempfile::tempdir().unwrap();
    let package = dir.path().join("package.tar.gz");
    let dest = dir.path().join("dest");
    std::fs::write(&package, &bytes).unwrap();
    std::fs::create_dir(&dest).unwrap();
    let limits = UnpackLimits {
        max_total_bytes: 64 << 20,
        ..UnpackLimits::default()
    };
    let _ = unpack::run(&package, PackageFormat::TarGz, &dest, &limits);
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 2, "wrote outside dest: {names:?}");
});
