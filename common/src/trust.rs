//! The trust document: which online signing keys may sign manifests, signed by long-lived root
//! keys (in the style of TUF's root metadata, kept small).
//!
//! Pages and hosts pin the root(s). A manifest signed by a key they do not know is checked
//! against the trust document served at `/v1/keys/trust`: the document must carry a valid
//! signature from one pinned root (threshold 1), must not be expired, must not have a lower
//! `version` than one the verifier saw before, and must list the manifest's key as `active` or
//! `retired` (a kid in `revoked` is refused). This is the Rust twin of the loader's checks
//! (`api/sdk/kiln-loader.js`, `trusted()`); [`verify_trust_document`] takes arbitrary bytes.
//!
//! Wire form (`SignedTrust`): `{"signed": "<the document's exact JSON text>", "signatures":
//! [{"keyid": "<root kid>", "sig": "<base64 Ed25519 over the UTF-8 bytes of signed>"}]}`.
//! Carrying the signed text as a string keeps its exact bytes through any JSON parser.

use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::signing::{Jwk, KeyError, ManifestSignature, ManifestSigner, key_id};

/// What the trust document says of one signing key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyStatus {
    /// The key the workers sign with now.
    Active,
    /// No longer signs new manifests; what it signed still verifies until re-signed.
    Retired,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrustedKey {
    pub jwk: Jwk,
    pub status: KeyStatus,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrustDocument {
    /// Grows by one with every document the root signs; verifiers refuse a lower one.
    pub version: u64,
    /// RFC 3339; an expired document is refused (`trust_expired`).
    pub expires: String,
    /// The roots that sign this document (pages built from now on pin these).
    pub roots: Vec<Jwk>,
    pub keys: Vec<TrustedKey>,
    /// Key ids that must never verify again.
    #[serde(default)]
    pub revoked: Vec<String>,
}

/// The document as served: its exact signed text and the roots' detached signatures.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignedTrust {
    pub signed: String,
    pub signatures: Vec<TrustSignature>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrustSignature {
    pub keyid: String,
    pub sig: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrustError {
    #[error("trust document is malformed: {0}")]
    Malformed(String),
    #[error("trust document carries no signature of a pinned root")]
    NoPinnedRoot,
    #[error("trust document's signature by a pinned root does not verify")]
    UntrustedRoot,
    #[error("trust document expired at {0}")]
    Expired(String),
    #[error("trust document version {version} is older than version {seen} seen before")]
    Rollback { version: u64, seen: u64 },
    #[error("key {0} is revoked")]
    Revoked(String),
    #[error("key {0} is not in the trust document")]
    UnknownKey(String),
    #[error("signature does not verify")]
    BadSignature,
}

impl TrustError {
    /// The reason the loader reports for the same failure (`kiln.events`, telemetry).
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Malformed(_) | Self::UntrustedRoot => "bad_trust",
            // Nothing the verifier pins vouches for the manifest's key.
            Self::NoPinnedRoot => "unknown_key",
            Self::Expired(_) => "trust_expired",
            Self::Rollback { .. } => "trust_rollback",
            Self::Revoked(_) => "revoked_key",
            Self::UnknownKey(_) => "unknown_key",
            Self::BadSignature => "bad_signature",
        }
    }
}

/// Checks `bytes` (a trust document's exact text) against `signatures`: at least one by a key in
/// `pinned_roots` must verify; then the document must parse, be well-formed and unexpired at
/// `now`. Never panics, whatever the bytes.
pub fn verify_trust_document(
    bytes: &[u8],
    signatures: &[ManifestSignature],
    pinned_roots: &[Jwk],
    now: DateTime<Utc>,
) -> Result<TrustDocument, TrustError> {
    let mut pinned = signatures.iter().filter_map(|sig| {
        let root = pinned_roots.iter().find(|root| root.kid == sig.kid)?;
        Some(root.verify(bytes, sig))
    });
    let first = pinned.next().ok_or(TrustError::NoPinnedRoot)?;
    if !(first || pinned.any(|ok| ok)) {
        return Err(TrustError::UntrustedRoot);
    }
    let doc = parse_trust_document(bytes)?;
    let expires = DateTime::parse_from_rfc3339(&doc.expires)
        .map_err(|e| TrustError::Malformed(format!("expires {:?}: {e}", doc.expires)))?;
    if expires <= now {
        return Err(TrustError::Expired(doc.expires));
    }
    Ok(doc)
}

/// Parses a document's text and checks its shape: roots and keys are Ed25519 JWKs whose `kid`
/// is their key id, every kid once, at least one root and one active key.
pub fn parse_trust_document(bytes: &[u8]) -> Result<TrustDocument, TrustError> {
    let doc: TrustDocument =
        serde_json::from_slice(bytes).map_err(|e| TrustError::Malformed(e.to_string()))?;
    let well_formed = |jwk: &Jwk| {
        jwk.kty == "OKP"
            && jwk.crv == "Ed25519"
            && jwk.verifying_key().is_some_and(|k| key_id(&k) == jwk.kid)
    };
    if doc.roots.is_empty() || !doc.roots.iter().all(well_formed) {
        return Err(TrustError::Malformed("roots must be Ed25519 keys".into()));
    }
    if !doc.keys.iter().all(|k| well_formed(&k.jwk)) {
        return Err(TrustError::Malformed("keys must be Ed25519 keys".into()));
    }
    if !doc.keys.iter().any(|k| k.status == KeyStatus::Active) {
        return Err(TrustError::Malformed("no active key".into()));
    }
    let mut kids: Vec<&str> = doc.keys.iter().map(|k| k.jwk.kid.as_str()).collect();
    kids.sort();
    if kids.windows(2).any(|w| w[0] == w[1]) {
        return Err(TrustError::Malformed("a key is listed twice".into()));
    }
    if doc.keys.iter().any(|k| doc.revoked.contains(&k.jwk.kid)) {
        return Err(TrustError::Malformed("a revoked key is listed".into()));
    }
    Ok(doc)
}

/// Refuses a document older than the newest one the verifier saw (`seen`).
pub fn check_version(doc: &TrustDocument, seen: Option<u64>) -> Result<(), TrustError> {
    match seen {
        Some(seen) if doc.version < seen => Err(TrustError::Rollback {
            version: doc.version,
            seen,
        }),
        _ => Ok(()),
    }
}

impl SignedTrust {
    /// Reads the served form; the signed bytes and their signatures.
    pub fn parse(bytes: &[u8]) -> Result<(Vec<u8>, Vec<ManifestSignature>), TrustError> {
        let envelope: SignedTrust =
            serde_json::from_slice(bytes).map_err(|e| TrustError::Malformed(e.to_string()))?;
        let signatures = envelope
            .signatures
            .iter()
            .filter_map(|s| {
                Some(ManifestSignature {
                    kid: s.keyid.clone(),
                    signature: STANDARD.decode(&s.sig).ok()?,
                })
            })
            .collect();
        Ok((envelope.signed.into_bytes(), signatures))
    }

    /// [`SignedTrust::parse`] then [`verify_trust_document`].
    pub fn verify(
        bytes: &[u8],
        pinned_roots: &[Jwk],
        now: DateTime<Utc>,
    ) -> Result<TrustDocument, TrustError> {
        let (signed, signatures) = Self::parse(bytes)?;
        verify_trust_document(&signed, &signatures, pinned_roots, now)
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("trust envelope serialises")
    }
}

impl TrustDocument {
    /// The first document: `roots`, one active signing key.
    pub fn genesis(roots: &[&ManifestSigner], signing: Jwk, expires: String) -> Self {
        Self {
            version: 1,
            expires,
            roots: roots.iter().map(|r| r.public_jwk()).collect(),
            keys: vec![TrustedKey {
                jwk: signing,
                status: KeyStatus::Active,
            }],
            revoked: Vec::new(),
        }
    }

    /// The key `kid` may verify a manifest: listed, not revoked.
    pub fn key(&self, kid: &str) -> Result<&Jwk, TrustError> {
        if self.revoked.iter().any(|r| r == kid) {
            return Err(TrustError::Revoked(kid.to_string()));
        }
        self.keys
            .iter()
            .find(|k| k.jwk.kid == kid)
            .map(|k| &k.jwk)
            .ok_or_else(|| TrustError::UnknownKey(kid.to_string()))
    }

    /// Checks a manifest's bytes and signature with the key this document lists for it.
    pub fn verify_manifest(
        &self,
        bytes: &[u8],
        signature: &ManifestSignature,
    ) -> Result<(), TrustError> {
        if self.key(&signature.kid)?.verify(bytes, signature) {
            Ok(())
        } else {
            Err(TrustError::BadSignature)
        }
    }

    pub fn active(&self) -> Option<&Jwk> {
        self.keys
            .iter()
            .find(|k| k.status == KeyStatus::Active)
            .map(|k| &k.jwk)
    }

    /// The next version: `signing` becomes the active key; the keys active before are retired
    /// (still listed, so what they signed verifies until it is re-signed).
    pub fn rotated(&self, signing: Jwk, expires: String) -> Result<Self, String> {
        if self.revoked.contains(&signing.kid) {
            return Err(format!("key {} is revoked", signing.kid));
        }
        let mut next = self.next(expires);
        for k in &mut next.keys {
            k.status = KeyStatus::Retired;
        }
        match next.keys.iter_mut().find(|k| k.jwk.kid == signing.kid) {
            Some(k) => k.status = KeyStatus::Active,
            None => next.keys.push(TrustedKey {
                jwk: signing,
                status: KeyStatus::Active,
            }),
        }
        Ok(next)
    }

    /// The next version without `kid`, which is listed as revoked. The active key cannot be
    /// revoked (rotate first).
    pub fn revoked(&self, kid: &str, expires: String) -> Result<Self, String> {
        if self.active().is_some_and(|k| k.kid == kid) {
            return Err(format!(
                "{kid} is the active signing key: rotate first (kiln-worker keys rotate), then revoke it"
            ));
        }
        if self.revoked.iter().any(|r| r == kid) {
            return Err(format!("{kid} is already revoked"));
        }
        if !self.keys.iter().any(|k| k.jwk.kid == kid) {
            return Err(format!("{kid} is not a signing key of this document"));
        }
        let mut next = self.next(expires);
        next.keys.retain(|k| k.jwk.kid != kid);
        next.revoked.push(kid.to_string());
        Ok(next)
    }

    /// The same content, version + 1, new expiry, `roots` as given.
    pub fn next(&self, expires: String) -> Self {
        Self {
            version: self.version + 1,
            expires,
            ..self.clone()
        }
    }

    /// Signs this document with every root key given.
    pub fn sign(&self, roots: &[ManifestSigner]) -> SignedTrust {
        let signed = serde_json::to_string(self).expect("trust document serialises");
        let signatures = roots
            .iter()
            .map(|root| {
                let sig = root.sign(signed.as_bytes());
                TrustSignature {
                    keyid: sig.kid,
                    sig: STANDARD.encode(&sig.signature),
                }
            })
            .collect();
        SignedTrust { signed, signatures }
    }
}

/// The JWKS `/v1/keys` lists: every registered key the trust document has not revoked.
pub fn unrevoked(keys: Vec<Jwk>, doc: Option<&TrustDocument>) -> Vec<Jwk> {
    match doc {
        Some(doc) => keys
            .into_iter()
            .filter(|k| !doc.revoked.contains(&k.kid))
            .collect(),
        None => keys,
    }
}

/// The root keys in `path`: one hex Ed25519 seed per line (more than one during a root
/// rotation; each signs every document).
pub fn load_roots(path: &Path) -> Result<Vec<ManifestSigner>, KeyError> {
    let err = |reason: String| KeyError::File {
        path: path.display().to_string(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    let roots = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|line| {
            let seed: [u8; 32] = hex::decode(line)
                .ok()
                .and_then(|b| b.try_into().ok())
                .ok_or_else(|| err("expected one 32-byte Ed25519 seed in hex per line".into()))?;
            Ok(ManifestSigner::from_seed(seed))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if roots.is_empty() {
        return Err(err("no root key in the file".into()));
    }
    Ok(roots)
}

/// Writes root seeds to `path` (mode 0600, replacing the file atomically).
pub fn save_roots(path: &Path, seeds: &[[u8; 32]]) -> Result<(), KeyError> {
    let text: String = seeds
        .iter()
        .map(|s| format!("{}\n", hex::encode(s)))
        .collect();
    crate::signing::replace_secret(path, &text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().to_utc()
    }
    const LATER: &str = "2030-01-01T00:00:00Z";
    fn now() -> DateTime<Utc> {
        at("2026-12-01T00:00:00Z")
    }

    fn signed(doc: &TrustDocument, roots: &[ManifestSigner]) -> Vec<u8> {
        doc.sign(roots).to_bytes()
    }

    #[test]
    fn a_rotated_key_verifies_through_the_document_the_root_signed() {
        let root = ManifestSigner::from_seed([1; 32]);
        let (old, new) = (
            ManifestSigner::from_seed([2; 32]),
            ManifestSigner::from_seed([3; 32]),
        );
        let v1 = TrustDocument::genesis(&[&root], old.public_jwk(), LATER.into());
        let v2 = v1.rotated(new.public_jwk(), LATER.into()).unwrap();
        assert_eq!(v2.version, 2);
        assert_eq!(v2.active().unwrap().kid, new.kid());
        let doc = SignedTrust::verify(
            &signed(&v2, std::slice::from_ref(&root)),
            &[root.public_jwk()],
            now(),
        )
        .unwrap();
        for signer in [&old, &new] {
            let sig = signer.sign(b"manifest");
            doc.verify_manifest(b"manifest", &sig).unwrap();
            assert_eq!(
                doc.verify_manifest(b"manifest!", &sig),
                Err(TrustError::BadSignature)
            );
        }
        let stranger = ManifestSigner::from_seed([4; 32]).sign(b"manifest");
        assert_eq!(
            doc.verify_manifest(b"manifest", &stranger)
                .unwrap_err()
                .reason(),
            "unknown_key"
        );
    }

    #[test]
    fn a_revoked_key_is_refused() {
        let root = ManifestSigner::from_seed([1; 32]);
        let (old, new) = (
            ManifestSigner::from_seed([2; 32]),
            ManifestSigner::from_seed([3; 32]),
        );
        let v1 = TrustDocument::genesis(&[&root], old.public_jwk(), LATER.into());
        assert!(v1.revoked(old.kid(), LATER.into()).is_err(), "active key");
        let v3 = v1
            .rotated(new.public_jwk(), LATER.into())
            .unwrap()
            .revoked(old.kid(), LATER.into())
            .unwrap();
        let doc =
            SignedTrust::verify(&signed(&v3, &[root]), &[v3.roots[0].clone()], now()).unwrap();
        let err = doc.verify_manifest(b"m", &old.sign(b"m")).unwrap_err();
        assert_eq!(err, TrustError::Revoked(old.kid().into()));
        assert_eq!(err.reason(), "revoked_key");
        assert!(v3.rotated(old.public_jwk(), LATER.into()).is_err());
        assert_eq!(
            unrevoked(vec![old.public_jwk(), new.public_jwk()], Some(&v3)),
            [new.public_jwk()]
        );
    }

    #[test]
    fn a_forged_document_is_refused() {
        let root = ManifestSigner::from_seed([1; 32]);
        let forger = ManifestSigner::from_seed([9; 32]);
        let doc = TrustDocument::genesis(
            &[&forger],
            ManifestSigner::from_seed([8; 32]).public_jwk(),
            LATER.into(),
        );
        let forged = signed(&doc, std::slice::from_ref(&forger));
        let err = SignedTrust::verify(&forged, &[root.public_jwk()], now()).unwrap_err();
        assert_eq!(err, TrustError::NoPinnedRoot);
        assert_eq!(err.reason(), "unknown_key");
        // The forger's signature under the root's kid.
        let mut claimed: SignedTrust = serde_json::from_slice(&forged).unwrap();
        claimed.signatures[0].keyid = root.kid().to_string();
        let err =
            SignedTrust::verify(&claimed.to_bytes(), &[root.public_jwk()], now()).unwrap_err();
        assert_eq!(err, TrustError::UntrustedRoot);
        assert_eq!(err.reason(), "bad_trust");
        // The root's signature over other bytes does not carry over.
        let genuine = TrustDocument::genesis(
            &[&root],
            ManifestSigner::from_seed([2; 32]).public_jwk(),
            LATER.into(),
        )
        .sign(std::slice::from_ref(&root));
        let mut spliced: SignedTrust = serde_json::from_slice(&forged).unwrap();
        spliced.signatures = genuine.signatures;
        assert_eq!(
            SignedTrust::verify(&spliced.to_bytes(), &[root.public_jwk()], now()),
            Err(TrustError::UntrustedRoot)
        );
    }

    #[test]
    fn an_older_version_than_one_seen_is_refused_and_an_expired_one_too() {
        let root = ManifestSigner::from_seed([1; 32]);
        let v1 = TrustDocument::genesis(
            &[&root],
            ManifestSigner::from_seed([2; 32]).public_jwk(),
            LATER.into(),
        );
        let v2 = v1.next(LATER.into());
        check_version(&v2, Some(1)).unwrap();
        check_version(&v2, Some(2)).unwrap();
        let err = check_version(&v1, Some(2)).unwrap_err();
        assert_eq!(err.reason(), "trust_rollback");
        let expired = v1.next("2026-11-30T00:00:00Z".into());
        let err = SignedTrust::verify(&signed(&expired, &[root]), &[v1.roots[0].clone()], now())
            .unwrap_err();
        assert_eq!(err.reason(), "trust_expired");
    }

    #[test]
    fn during_a_root_rotation_either_pinned_root_verifies() {
        let (old_root, new_root) = (
            ManifestSigner::from_seed([1; 32]),
            ManifestSigner::from_seed([5; 32]),
        );
        let mut doc = TrustDocument::genesis(
            &[&old_root],
            ManifestSigner::from_seed([2; 32]).public_jwk(),
            LATER.into(),
        )
        .next(LATER.into());
        doc.roots.push(new_root.public_jwk());
        let bytes = signed(&doc, &[old_root, new_root]);
        for pinned in &doc.roots {
            assert_eq!(
                SignedTrust::verify(&bytes, std::slice::from_ref(pinned), now()).unwrap(),
                doc
            );
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let root = ManifestSigner::from_seed([1; 32]);
        let pinned = [root.public_jwk()];
        for bytes in [
            &b""[..],
            b"{",
            b"null",
            b"{\"signed\": 7, \"signatures\": []}",
            b"{\"signed\": \"{}\", \"signatures\": [{\"keyid\": \"x\", \"sig\": \"!!\"}]}",
        ] {
            assert!(SignedTrust::verify(bytes, &pinned, now()).is_err());
            assert!(verify_trust_document(bytes, &[], &pinned, now()).is_err());
            assert!(parse_trust_document(bytes).is_err());
        }
        // Signed by the root but not a document.
        let sig = root.sign(b"[1, 2]");
        assert!(matches!(
            verify_trust_document(b"[1, 2]", &[sig], &pinned, now()),
            Err(TrustError::Malformed(_))
        ));
    }

    #[test]
    fn root_files_hold_one_seed_per_line() {
        let dir = std::env::temp_dir().join(format!("kiln-roots-{}", uuid::Uuid::new_v4()));
        let path = dir.join("keys/root.key");
        save_roots(&path, &[[1; 32], [5; 32]]).unwrap();
        let roots = load_roots(&path).unwrap();
        assert_eq!(roots.len(), 2);
        assert_eq!(roots[1].kid(), ManifestSigner::from_seed([5; 32]).kid());
        std::fs::write(&path, "zz\n").unwrap();
        assert!(load_roots(&path).is_err());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
