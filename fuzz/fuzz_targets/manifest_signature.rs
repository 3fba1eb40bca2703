//! Manifests and their signatures (`common/src/manifest.rs`, `common/src/signing.rs`): the
//! `Kiln-Signature` header, a JWK, a manifest, and verification. Input: the header line,
//! then the manifest bytes.
#![no_main]

use std::sync::OnceLock;

use kiln_common::manifest::Manifest;
use kiln_common::signing::{Jwk, ManifestSignature, ManifestSigner};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    static SIGNER: OnceLock<ManifestSigner> = OnceLock::new();
    let signer = SIGNER.get_or_init(|| ManifestSigner::from_seed([7; 32]));
    let (header, body) = match data.iter().position(|&b| b == b'\n') {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &b""[..]),
    };
    let _ = serde_json::from_slice::<Manifest>(body);
    if let Ok(jwk) = serde_json::from_slice::<Jwk>(body) {
        let _ = jwk.verifying_key();
    }
    if let Ok(header) = std::str::from_utf8(header)
        && let Some(signature) = ManifestSignature::parse_header(header)
    {
        // A forged signature never verifies; the real one over the same bytes does.
        assert!(!signer.public_jwk().verify(body, &signature) || signature == signer.sign(body));
        let real = signer.sign(body);
        assert!(signer.public_jwk().verify(body, &real));
    }
});
