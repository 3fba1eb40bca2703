//! The trust document's life (`common/src/trust.rs`): first issue, online-key rotation,
//! revocation, root rotation. The `kiln-worker keys …` commands and start-up call these; only
//! these functions read the root key file. Runbook: docs/key-rotation.md.

use std::path::Path;

use kiln_common::config::Config;
use kiln_common::db::Db;
use kiln_common::signing::{Jwk, ManifestSigner};
use kiln_common::trust::{self, SignedTrust, TrustDocument};

/// The newest stored trust document, parsed (its shape checked; it is Kiln's own record).
pub async fn current(db: &Db) -> anyhow::Result<Option<TrustDocument>> {
    let Some(row) = db.latest_trust_document().await? else {
        return Ok(None);
    };
    let (signed, _) = SignedTrust::parse(row.envelope.as_bytes())?;
    Ok(Some(trust::parse_trust_document(&signed)?))
}

/// When a document signed now expires.
pub fn expiry(config: &Config) -> String {
    let ttl = chrono::Duration::seconds(config.trust_ttl_secs.min(i64::MAX as u64) as i64);
    (chrono::Utc::now() + ttl).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Signs `doc` with `roots` and stores it; refused if that version exists already.
pub async fn issue(db: &Db, doc: &TrustDocument, roots: &[ManifestSigner]) -> anyhow::Result<()> {
    let listed: Vec<&str> = doc.roots.iter().map(|r| r.kid.as_str()).collect();
    anyhow::ensure!(
        roots.iter().all(|r| listed.contains(&r.kid())),
        "a root key that signs the document must be listed in it"
    );
    let envelope = doc.sign(roots).to_bytes();
    let envelope = String::from_utf8(envelope).expect("JSON is UTF-8");
    anyhow::ensure!(
        db.insert_trust_document(doc.version, &envelope).await?,
        "trust document version {} exists already (another key command ran at the same time): run it again",
        doc.version
    );
    for key in &doc.keys {
        db.register_key(&key.jwk).await?;
    }
    Ok(())
}

fn roots(config: &Config) -> anyhow::Result<Vec<ManifestSigner>> {
    Ok(trust::load_roots(&config.root_key_path())?)
}

/// Roots a document lists must be the roots in the file (it signs with all of them).
fn roots_for(config: &Config, doc: &TrustDocument) -> anyhow::Result<Vec<ManifestSigner>> {
    let roots = roots(config)?;
    let listed: Vec<&str> = doc.roots.iter().map(|r| r.kid.as_str()).collect();
    let signing: Vec<ManifestSigner> = roots
        .into_iter()
        .filter(|r| listed.contains(&r.kid()))
        .collect();
    anyhow::ensure!(
        !signing.is_empty(),
        "none of the roots in {} is a root of trust document v{} ({})",
        config.root_key_path().display(),
        doc.version,
        listed.join(", ")
    );
    Ok(signing)
}

/// Start-up of every worker: the signing key it loaded must be listed by the trust document.
/// With no document yet, the first one is issued (a development root key is generated at the
/// root key path if none exists: the embedded default). A key the document does not list is
/// added as the active one only where the root key file is present (embedded), else refused.
pub async fn ensure_listed(
    config: &Config,
    db: &Db,
    signer: &ManifestSigner,
) -> anyhow::Result<TrustDocument> {
    let path = config.root_key_path();
    for _ in 0..5 {
        let next = match current(db).await? {
            None => {
                // Only the embedded default makes its own root; a configured root key file
                // that is not there means an operator has not run `keys init` yet.
                if !config.root_key_file.is_empty() && !path.exists() {
                    anyhow::bail!(
                        "no trust document in the database and no root key at {}: run \
                         `kiln-worker keys init` where the root key is kept (docs/key-rotation.md)",
                        path.display()
                    );
                }
                let roots = generate_roots_if_missing(&path)?;
                let refs: Vec<&ManifestSigner> = roots.iter().collect();
                let doc = TrustDocument::genesis(&refs, signer.public_jwk(), expiry(config));
                (doc, roots)
            }
            Some(doc) => {
                if doc.revoked.iter().any(|k| k == signer.kid()) {
                    anyhow::bail!(
                        "signing key {} is revoked in trust document v{}: give this worker the new key (docs/key-rotation.md)",
                        signer.kid(),
                        doc.version
                    );
                }
                if doc.keys.iter().any(|k| k.jwk.kid == signer.kid()) {
                    return Ok(doc);
                }
                if !path.exists() {
                    anyhow::bail!(
                        "signing key {} is not listed in trust document v{}: run `kiln-worker keys rotate` where the root key is (docs/key-rotation.md)",
                        signer.kid(),
                        doc.version
                    );
                }
                let roots = roots_for(config, &doc)?;
                tracing::warn!(
                    kid = signer.kid(),
                    root = %path.display(),
                    "the signing key is not in the trust document: listing it as the active key"
                );
                let next = doc
                    .rotated(signer.public_jwk(), expiry(config))
                    .map_err(anyhow::Error::msg)?;
                (next, roots)
            }
        };
        match issue(db, &next.0, &next.1).await {
            Ok(()) => return Ok(next.0),
            // Another process issued this version first: decide again on what it wrote.
            Err(e)
                if current(db)
                    .await?
                    .is_some_and(|d| d.version >= next.0.version) =>
            {
                tracing::info!(error = %e, "trust document changed meanwhile; reading it again");
            }
            Err(e) => return Err(e),
        }
    }
    anyhow::bail!("the trust document kept changing while this worker started")
}

fn generate_roots_if_missing(path: &Path) -> anyhow::Result<Vec<ManifestSigner>> {
    if !path.exists() {
        let root = ManifestSigner::generate()?;
        trust::save_roots(path, &[root.to_seed()])?;
        tracing::warn!(
            kid = root.kid(),
            path = %path.display(),
            "generated a root key; keep it offline, never on the API or the workers (docs/key-rotation.md)"
        );
    }
    Ok(trust::load_roots(path)?)
}

/// `keys init`: the root key (generated if missing), the signing key (generated if missing)
/// and the first trust document. Refused when a document exists already.
pub async fn init(config: &Config, db: &Db) -> anyhow::Result<TrustDocument> {
    if let Some(doc) = current(db).await? {
        anyhow::bail!(
            "trust document v{} exists already: use `keys rotate`, `keys revoke` or `keys rotate-root`",
            doc.version
        );
    }
    let (signer, _) = ManifestSigner::load_or_generate(&config.signing_key_path())?;
    let roots = generate_roots_if_missing(&config.root_key_path())?;
    let refs: Vec<&ManifestSigner> = roots.iter().collect();
    let doc = TrustDocument::genesis(&refs, signer.public_jwk(), expiry(config));
    issue(db, &doc, &roots).await?;
    Ok(doc)
}

fn existing(doc: Option<TrustDocument>) -> anyhow::Result<TrustDocument> {
    doc.ok_or_else(|| anyhow::anyhow!("no trust document yet: run `kiln-worker keys init` first"))
}

/// `keys rotate`: a new online signing key replaces the one in the signing key file and
/// becomes active; the old one is retired (still listed). Workers sign with it once restarted.
pub async fn rotate(config: &Config, db: &Db) -> anyhow::Result<TrustDocument> {
    let doc = existing(current(db).await?)?;
    let roots = roots_for(config, &doc)?;
    let new = ManifestSigner::generate()?;
    let next = doc
        .rotated(new.public_jwk(), expiry(config))
        .map_err(anyhow::Error::msg)?;
    // The document first: a worker that restarts on the new key finds it listed.
    issue(db, &next, &roots).await?;
    kiln_common::signing::replace_secret(&config.signing_key_path(), &hex::encode(new.to_seed()))?;
    Ok(next)
}

/// `keys revoke KID`: the key leaves the document and is listed as revoked. Refused while a
/// live release (or one of its per-class manifests) is signed by it, unless `force`; the
/// caller re-signs those (`kiln-worker keys revoke --force` does).
pub async fn revoke(
    config: &Config,
    db: &Db,
    kid: &str,
    force: bool,
) -> anyhow::Result<(TrustDocument, Vec<(String, i64, String)>)> {
    let doc = existing(current(db).await?)?;
    let live = db.live_signed_by(kid).await?;
    if !live.is_empty() && !force {
        let list: Vec<String> = live
            .iter()
            .map(|(g, s, c)| {
                format!(
                    "{g}#{s}{}",
                    if c.is_empty() {
                        String::new()
                    } else {
                        format!(" ({c})")
                    }
                )
            })
            .collect();
        anyhow::bail!(
            "{} live manifest(s) are signed by {kid}: {}; wait until the workers re-sign them with the active key, or pass --force to revoke now and re-sign them",
            live.len(),
            list.join(", ")
        );
    }
    let roots = roots_for(config, &doc)?;
    let next = doc
        .revoked(kid, expiry(config))
        .map_err(anyhow::Error::msg)?;
    issue(db, &next, &roots).await?;
    Ok((next, live))
}

/// `keys rotate-root`: a new root key joins the file; the document lists old and new roots and
/// is signed by both, so pages that pin either verify it.
pub async fn rotate_root(config: &Config, db: &Db) -> anyhow::Result<(TrustDocument, Jwk)> {
    let doc = existing(current(db).await?)?;
    let path = config.root_key_path();
    let mut seeds: Vec<[u8; 32]> = roots(config)?.iter().map(|r| r.to_seed()).collect();
    let new = ManifestSigner::generate()?;
    seeds.push(new.to_seed());
    let mut next = doc.next(expiry(config));
    next.roots.push(new.public_jwk());
    let mut roots = roots_for(config, &doc)?;
    roots.push(ManifestSigner::from_seed(new.to_seed()));
    // The file first: a root in the file that no document lists signs nothing.
    trust::save_roots(&path, &seeds)?;
    issue(db, &next, &roots).await?;
    Ok((next, new.public_jwk()))
}

/// `keys drop-root KID`: the root leaves the document (signed by the others) and the file.
/// Pages that pin only it stop verifying new keys: drop it only once every live build was
/// built after the rotation (docs/key-rotation.md).
pub async fn drop_root(config: &Config, db: &Db, kid: &str) -> anyhow::Result<TrustDocument> {
    let doc = existing(current(db).await?)?;
    anyhow::ensure!(
        doc.roots.iter().any(|r| r.kid == kid),
        "{kid} is not a root of trust document v{}",
        doc.version
    );
    anyhow::ensure!(doc.roots.len() > 1, "{kid} is the only root");
    let mut next = doc.next(expiry(config));
    next.roots.retain(|r| r.kid != kid);
    let roots: Vec<ManifestSigner> = roots_for(config, &next)?;
    issue(db, &next, &roots).await?;
    let seeds: Vec<[u8; 32]> = roots.iter().map(|r| r.to_seed()).collect();
    trust::save_roots(&config.root_key_path(), &seeds)?;
    Ok(next)
}

/// `keys refresh`: the same document, version + 1, a new expiry.
pub async fn refresh(config: &Config, db: &Db) -> anyhow::Result<TrustDocument> {
    let doc = existing(current(db).await?)?;
    let roots = roots_for(config, &doc)?;
    let next = doc.next(expiry(config));
    issue(db, &next, &roots).await?;
    Ok(next)
}
