//! Ed25519 manifest signing keys, their ids, and the public JWKS form (RFC 8037).
//!
//! Only the worker loads a [`ManifestSigner`]; the API only ever sees public keys, which the
//! worker registers in the database so `/v1/keys` can list every key that ever signed.

use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The private key. Its `Debug` never shows the secret.
pub struct ManifestSigner {
    key: SigningKey,
    kid: String,
}

impl std::fmt::Debug for ManifestSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManifestSigner")
            .field("kid", &self.kid)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("signing key file {path}: {reason}")]
    File { path: String, reason: String },
}

/// Whether [`ManifestSigner::load_or_generate`] found a key or made one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyOrigin {
    Loaded,
    Generated,
}

impl ManifestSigner {
    pub fn from_seed(seed: [u8; 32]) -> Self {
        let key = SigningKey::from_bytes(&seed);
        let kid = key_id(&key.verifying_key());
        Self { key, kid }
    }

    /// Reads the hex seed at `path`, or writes a fresh one there (mode 0600) if none exists.
    pub fn load_or_generate(path: &Path) -> Result<(Self, KeyOrigin), KeyError> {
        let err = |reason: String| KeyError::File {
            path: path.display().to_string(),
            reason,
        };
        match std::fs::read_to_string(path) {
            Ok(text) => {
                let bytes = hex::decode(text.trim()).map_err(|_| err("not hex".into()))?;
                let seed: [u8; 32] = bytes
                    .try_into()
                    .map_err(|_| err("expected a 32-byte Ed25519 seed in hex".into()))?;
                Ok((Self::from_seed(seed), KeyOrigin::Loaded))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut seed = [0u8; 32];
                getrandom::fill(&mut seed).map_err(|e| err(e.to_string()))?;
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| err(e.to_string()))?;
                }
                write_secret(path, &hex::encode(seed)).map_err(|e| err(e.to_string()))?;
                Ok((Self::from_seed(seed), KeyOrigin::Generated))
            }
            Err(e) => Err(err(e.to_string())),
        }
    }

    /// A fresh random key.
    pub fn generate() -> Result<Self, KeyError> {
        Ok(Self::from_seed(random_seed()?))
    }

    /// The secret seed (for writing a key file; never log it).
    pub fn to_seed(&self) -> [u8; 32] {
        self.key.to_bytes()
    }

    pub fn kid(&self) -> &str {
        &self.kid
    }

    pub fn public_jwk(&self) -> Jwk {
        Jwk::from_verifying_key(&self.key.verifying_key())
    }

    pub fn sign(&self, message: &[u8]) -> ManifestSignature {
        ManifestSignature {
            kid: self.kid.clone(),
            signature: self.key.sign(message).to_bytes().to_vec(),
        }
    }
}

fn random_seed() -> Result<[u8; 32], KeyError> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| KeyError::File {
        path: "(random)".into(),
        reason: e.to_string(),
    })?;
    Ok(seed)
}

/// Writes a secret file (mode 0600) in place of `path`, atomically: a reader sees the old
/// content or the new one, never half of it.
pub fn replace_secret(path: &Path, text: &str) -> Result<(), KeyError> {
    let err = |e: std::io::Error| KeyError::File {
        path: path.display().to_string(),
        reason: e.to_string(),
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(err)?;
    }
    let tmp = path.with_extension(format!("tmp-{}", uuid::Uuid::new_v4().simple()));
    write_secret(&tmp, text).map_err(err)?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        err(e)
    })
}

#[cfg(unix)]
fn write_secret(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(text.as_bytes())
}

#[cfg(not(unix))]
fn write_secret(path: &Path, text: &str) -> std::io::Result<()> {
    std::fs::write(path, text)
}

/// Key id: the first 16 bytes of the public key's SHA-256, base64url. Stable across restarts,
/// different for every key, so a rotated key never reuses an id.
pub fn key_id(key: &VerifyingKey) -> String {
    let digest = Sha256::digest(key.as_bytes());
    URL_SAFE_NO_PAD.encode(&digest[..16])
}

/// A detached signature over a manifest's exact bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestSignature {
    pub kid: String,
    pub signature: Vec<u8>,
}

impl ManifestSignature {
    /// The `Kiln-Signature` header value.
    pub fn header_value(&self) -> String {
        format!(
            "keyid={}, sig={}",
            self.kid,
            STANDARD.encode(&self.signature)
        )
    }

    pub fn parse_header(value: &str) -> Option<Self> {
        let mut kid = None;
        let mut sig = None;
        for part in value.split(',') {
            let (name, val) = part.trim().split_once('=')?;
            match name {
                "keyid" => kid = Some(val.to_string()),
                // base64 may itself end in '=': split_once kept them in `val`.
                "sig" => sig = Some(STANDARD.decode(val).ok()?),
                _ => {}
            }
        }
        Some(Self {
            kid: kid?,
            signature: sig?,
        })
    }
}

/// One public key in JWKS form (RFC 8037 §2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Jwk {
    pub kty: String,
    pub crv: String,
    pub kid: String,
    pub x: String,
    #[serde(rename = "use")]
    pub use_: String,
    pub alg: String,
}

impl Jwk {
    pub fn from_verifying_key(key: &VerifyingKey) -> Self {
        Self {
            kty: "OKP".into(),
            crv: "Ed25519".into(),
            kid: key_id(key),
            x: URL_SAFE_NO_PAD.encode(key.as_bytes()),
            use_: "sig".into(),
            alg: "EdDSA".into(),
        }
    }

    pub fn verifying_key(&self) -> Option<VerifyingKey> {
        let bytes: [u8; 32] = URL_SAFE_NO_PAD.decode(&self.x).ok()?.try_into().ok()?;
        VerifyingKey::from_bytes(&bytes).ok()
    }

    /// Checks `signature` over `message` with this key.
    pub fn verify(&self, message: &[u8], signature: &ManifestSignature) -> bool {
        let Some(key) = self.verifying_key() else {
            return false;
        };
        let Ok(bytes) = <[u8; 64]>::try_from(signature.signature.as_slice()) else {
            return false;
        };
        signature.kid == self.kid && key.verify(message, &Signature::from_bytes(&bytes)).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_round_trips_through_header_and_jwk() {
        let signer = ManifestSigner::from_seed([7; 32]);
        let sig = signer.sign(b"manifest bytes");
        let parsed = ManifestSignature::parse_header(&sig.header_value()).unwrap();
        assert_eq!(parsed, sig);
        let jwk = signer.public_jwk();
        assert!(jwk.verify(b"manifest bytes", &parsed));
        assert!(!jwk.verify(b"manifest bytez", &parsed));
        let other = ManifestSigner::from_seed([8; 32]).public_jwk();
        assert_ne!(other.kid, jwk.kid);
        assert!(!other.verify(b"manifest bytes", &parsed));
    }

    #[test]
    fn debug_never_shows_the_secret() {
        let signer = ManifestSigner::from_seed([7; 32]);
        let text = format!("{signer:?}");
        assert!(!text.contains(&hex::encode([7u8; 32])));
        assert!(!text.contains("0707"));
    }

    #[test]
    fn generated_key_is_reloaded_unchanged() {
        let dir = std::env::temp_dir().join(format!("kiln-key-{}", uuid::Uuid::new_v4()));
        let path = dir.join("keys/signing.key");
        let (a, origin) = ManifestSigner::load_or_generate(&path).unwrap();
        assert_eq!(origin, KeyOrigin::Generated);
        let (b, origin) = ManifestSigner::load_or_generate(&path).unwrap();
        assert_eq!(origin, KeyOrigin::Loaded);
        assert_eq!(a.kid(), b.kid());
        std::fs::write(&path, "zz").unwrap();
        assert!(ManifestSigner::load_or_generate(&path).is_err());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
