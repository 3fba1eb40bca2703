//! Stage `unpack`: a zip or tar.gz package into a fresh directory, refusing anything hostile.
//!
//! Every check names the attack it stops. Nothing is written outside `dest`: paths are
//! validated before use, no links are ever created, and files are opened with `create_new`
//! so an entry can never reuse or follow something already there.

use std::collections::HashSet;
use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::path::Path;

use kiln_common::config::UnpackLimits;
use serde::Serialize;

use super::{Stage, StageError};
use crate::ir::{FileTree, PackageFormat, TreeFile};

pub const NAME: &str = "unpack";

/// Entries at most this deep, names at most this long: deeper trees only exhaust inodes and
/// path buffers, no real game needs them.
const MAX_DEPTH: usize = 32;
const MAX_PATH_BYTES: usize = 1024;
/// Below this many uncompressed bytes the ratio check stays quiet: tiny files of zeros are not bombs.
const RATIO_FLOOR_BYTES: u64 = 16 * 1024 * 1024;

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct UnpackReport {
    pub format: PackageFormat,
    pub entries: u64,
    pub files: u64,
    pub uncompressed_bytes: u64,
    pub package_bytes: u64,
}

/// Why a package was refused. All of these are permanent: retrying the same bytes can't help.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UnpackError {
    #[error("entry {entry:?}: unsafe path ({reason})")]
    UnsafePath { entry: String, reason: &'static str },
    #[error("entry {entry:?}: links are not allowed in a package")]
    Link { entry: String },
    #[error("entry {entry:?}: unsupported entry type ({kind})")]
    UnsupportedEntry { entry: String, kind: String },
    #[error("entry {entry:?}: duplicate path")]
    Duplicate { entry: String },
    /// `a` as a file and `a/b` (or a directory `a/`): no tree can hold both.
    #[error("entry {entry:?}: {path:?} is both a file and a directory in this package")]
    FileAndDirectory { entry: String, path: String },
    #[error("package has more than {limit} entries")]
    TooManyEntries { limit: u64 },
    #[error("entry {entry:?}: package expands beyond {limit} bytes")]
    TooLarge { entry: String, limit: u64 },
    #[error("entry {entry:?}: compression ratio above {limit}:1 looks like a decompression bomb")]
    Bomb { entry: String, limit: u64 },
    #[error("entry {entry:?}: encrypted entries are not supported")]
    Encrypted { entry: String },
    #[error("corrupt or truncated {format} package{}: {reason}", entry.as_ref().map(|e| format!(" at entry {e:?}")).unwrap_or_default())]
    Corrupt {
        format: PackageFormat,
        entry: Option<String>,
        reason: String,
    },
    #[error("package is empty: no files")]
    Empty,
    #[error("work directory: {0}")]
    Io(String),
}

impl StageError for UnpackError {
    /// Only a failing work directory is the machine's fault; everything else is the package's.
    fn is_permanent(&self) -> bool {
        !matches!(self, Self::Io(_))
    }

    /// The package entry refused, when the refusal is about one.
    fn file(&self) -> Option<String> {
        use UnpackError as E;
        match self {
            E::UnsafePath { entry, .. }
            | E::Link { entry }
            | E::UnsupportedEntry { entry, .. }
            | E::Duplicate { entry }
            | E::FileAndDirectory { entry, .. }
            | E::TooLarge { entry, .. }
            | E::Bomb { entry, .. }
            | E::Encrypted { entry } => Some(entry.clone()),
            E::Corrupt { entry, .. } => entry.clone(),
            E::TooManyEntries { .. } | E::Empty | E::Io(_) => None,
        }
    }
}

/// The uploaded package, and the empty directory it is unpacked into.
#[derive(Debug, Clone, Copy)]
pub struct Package<'a> {
    pub path: &'a Path,
    pub format: PackageFormat,
    /// Must exist and be empty.
    pub dest: &'a Path,
}

/// The unpack stage: a package in, its file tree out.
pub struct Step;

impl Stage for Step {
    const NAME: &'static str = NAME;
    type Input<'a> = Package<'a>;
    type Options = UnpackLimits;
    type Output = FileTree;
    type Report = UnpackReport;
    type Error = UnpackError;

    fn run(
        package: Package<'_>,
        limits: &UnpackLimits,
        _progress: &mut dyn FnMut(f64),
    ) -> Result<(FileTree, UnpackReport), UnpackError> {
        unpack(package.path, package.format, package.dest, limits)
    }
}

/// Unpacks `package` into `dest` (which must exist and be empty).
fn unpack(
    package: &Path,
    format: PackageFormat,
    dest: &Path,
    limits: &UnpackLimits,
) -> Result<(FileTree, UnpackReport), UnpackError> {
    let package_bytes = std::fs::metadata(package)
        .map_err(|e| UnpackError::Io(format!("{}: {e}", package.display())))?
        .len();
    let mut writer = TreeWriter {
        dest,
        limits,
        package_bytes,
        seen: HashSet::new(),
        dirs: HashSet::new(),
        files: Vec::new(),
        entries: 0,
        total: 0,
    };
    match format {
        PackageFormat::Zip => unpack_zip(package, &mut writer)?,
        PackageFormat::TarGz => unpack_tar_gz(package, &mut writer)?,
    }
    if writer.files.is_empty() {
        return Err(UnpackError::Empty);
    }
    let report = UnpackReport {
        format,
        entries: writer.entries,
        files: writer.files.len() as u64,
        uncompressed_bytes: writer.total,
        package_bytes,
    };
    let mut files = writer.files;
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok((
        FileTree {
            root: dest.to_owned(),
            files,
        },
        report,
    ))
}

fn unpack_zip(package: &Path, writer: &mut TreeWriter<'_>) -> Result<(), UnpackError> {
    let corrupt = |entry: Option<String>, reason: String| UnpackError::Corrupt {
        format: PackageFormat::Zip,
        entry,
        reason,
    };
    let file = File::open(package).map_err(|e| UnpackError::Io(e.to_string()))?;
    let mut archive =
        zip::ZipArchive::new(BufReader::new(file)).map_err(|e| corrupt(None, e.to_string()))?;
    // Two central-directory records with one name: which one wins depends on the unpacker,
    // so a reviewer could see a different file than the player gets.
    if archive.has_duplicate_names() {
        let mut names = HashSet::new();
        let duplicate = archive
            .file_names_raw()
            .find(|n| !names.insert(n.to_vec()))
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .unwrap_or_default();
        return Err(UnpackError::Duplicate { entry: duplicate });
    }
    // Entry count first, from the central directory, before any byte is written.
    if archive.len() as u64 > writer.limits.max_entries {
        return Err(UnpackError::TooManyEntries {
            limit: writer.limits.max_entries,
        });
    }
    // Overlapping entries are the non-recursive zip bomb (many entries sharing one stream);
    // a damaged local header looks the same. Either way the archive can't be trusted.
    if archive
        .has_overlapping_entries()
        .map_err(|e| corrupt(None, e.to_string()))?
    {
        return Err(corrupt(
            None,
            "entries overlap each other (a non-recursive zip bomb, or a damaged archive)".into(),
        ));
    }
    for index in 0..archive.len() {
        let mut entry = archive
            .by_index(index)
            .map_err(|e| corrupt(Some(format!("#{index}")), e.to_string()))?;
        let name = String::from_utf8_lossy(entry.name_raw()).into_owned();
        if entry.encrypted() {
            return Err(UnpackError::Encrypted { entry: name });
        }
        // A symlink entry could later let a file write land outside the tree.
        if entry.is_symlink() {
            return Err(UnpackError::Link { entry: name });
        }
        let path = safe_relative_path(entry.name_raw(), &name)?;
        writer.entries += 1;
        if entry.is_dir() {
            writer.directory(&path, &name)?;
            continue;
        }
        // Declared sizes can lie; they are checked here and the real bytes again while copying.
        writer.check_declared(&name, entry.size(), entry.compressed_size())?;
        writer.file(&path, &name, &mut entry, |e| {
            corrupt(Some(name.clone()), e.to_string())
        })?;
    }
    Ok(())
}

fn unpack_tar_gz(package: &Path, writer: &mut TreeWriter<'_>) -> Result<(), UnpackError> {
    let corrupt = |entry: Option<String>, reason: String| UnpackError::Corrupt {
        format: PackageFormat::TarGz,
        entry,
        reason,
    };
    let file = File::open(package).map_err(|e| UnpackError::Io(e.to_string()))?;
    let gz = flate2::read::MultiGzDecoder::new(BufReader::new(file));
    let mut archive = tar::Archive::new(gz);
    let entries = archive
        .entries()
        .map_err(|e| corrupt(None, e.to_string()))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| corrupt(None, e.to_string()))?;
        let raw_path = entry.path_bytes().into_owned();
        let name = String::from_utf8_lossy(&raw_path).into_owned();
        writer.entries += 1;
        if writer.entries > writer.limits.max_entries {
            return Err(UnpackError::TooManyEntries {
                limit: writer.limits.max_entries,
            });
        }
        let kind = entry.header().entry_type();
        match kind {
            tar::EntryType::Regular | tar::EntryType::Continuous => {}
            // A pax global header (`git archive` writes one with the commit id) holds
            // defaults for the entries after it, not a file: nothing to write.
            tar::EntryType::XGlobalHeader => continue,
            tar::EntryType::Directory => {
                let path = safe_relative_path(&raw_path, &name)?;
                writer.directory(&path, &name)?;
                continue;
            }
            // Symlinks and hard links could point a later entry's write outside the tree.
            tar::EntryType::Symlink | tar::EntryType::Link => {
                return Err(UnpackError::Link { entry: name });
            }
            // Devices, FIFOs and the like have no place in a web build.
            other => {
                return Err(UnpackError::UnsupportedEntry {
                    entry: name,
                    kind: format!("{other:?}"),
                });
            }
        }
        let path = safe_relative_path(&raw_path, &name)?;
        let declared = entry.header().size().unwrap_or(0);
        writer.check_declared(&name, declared, 0)?;
        writer.file(&path, &name, &mut entry, |e| {
            corrupt(Some(name.clone()), e.to_string())
        })?;
    }
    Ok(())
}

struct TreeWriter<'a> {
    dest: &'a Path,
    limits: &'a UnpackLimits,
    package_bytes: u64,
    seen: HashSet<String>,
    /// Every directory the tree has so far, named or implied by a file's path.
    dirs: HashSet<String>,
    files: Vec<TreeFile>,
    entries: u64,
    total: u64,
}

impl TreeWriter<'_> {
    fn directory(&mut self, path: &str, name: &str) -> Result<(), UnpackError> {
        self.claim_directory(path, name)?;
        std::fs::create_dir_all(self.dest.join(path)).map_err(|e| UnpackError::Io(e.to_string()))
    }

    /// Records `path` and its parents as directories; a file already there is a clash.
    fn claim_directory(&mut self, path: &str, name: &str) -> Result<(), UnpackError> {
        let mut at = path.len();
        loop {
            let dir = &path[..at];
            if self.seen.contains(dir) {
                return Err(UnpackError::FileAndDirectory {
                    entry: name.into(),
                    path: dir.into(),
                });
            }
            if !self.dirs.insert(dir.to_string()) {
                break; // its parents are recorded already
            }
            match dir.rfind('/') {
                Some(slash) => at = slash,
                None => break,
            }
        }
        Ok(())
    }

    fn check_declared(&self, name: &str, size: u64, compressed: u64) -> Result<(), UnpackError> {
        if self.total.saturating_add(size) > self.limits.max_total_bytes {
            return Err(UnpackError::TooLarge {
                entry: name.into(),
                limit: self.limits.max_total_bytes,
            });
        }
        if compressed > 0 && size > RATIO_FLOOR_BYTES && size / compressed > self.limits.max_ratio {
            return Err(UnpackError::Bomb {
                entry: name.into(),
                limit: self.limits.max_ratio,
            });
        }
        Ok(())
    }

    fn file(
        &mut self,
        path: &str,
        name: &str,
        reader: &mut dyn Read,
        corrupt: impl Fn(std::io::Error) -> UnpackError,
    ) -> Result<(), UnpackError> {
        // Exact duplicates and aliases such as `a//b` vs `a/b` both land here.
        if self.dirs.contains(path) {
            return Err(UnpackError::FileAndDirectory {
                entry: name.into(),
                path: path.into(),
            });
        }
        if let Some((parent, _)) = path.rsplit_once('/') {
            self.claim_directory(parent, name)?;
        }
        if !self.seen.insert(path.to_string()) {
            return Err(UnpackError::Duplicate { entry: name.into() });
        }
        let target = self.dest.join(path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(|e| UnpackError::Io(e.to_string()))?;
        }
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&target)
            .map_err(|e| UnpackError::Io(format!("{path}: {e}")))?;
        let mut buf = vec![0u8; 64 * 1024];
        let mut written = 0u64;
        loop {
            let n = reader.read(&mut buf).map_err(&corrupt)?;
            if n == 0 {
                break;
            }
            written += n as u64;
            self.total += n as u64;
            // The real bytes, not the declared ones, decide the size limits.
            if self.total > self.limits.max_total_bytes {
                return Err(UnpackError::TooLarge {
                    entry: name.into(),
                    limit: self.limits.max_total_bytes,
                });
            }
            if self.total > RATIO_FLOOR_BYTES
                && self.total / self.package_bytes.max(1) > self.limits.max_ratio
            {
                return Err(UnpackError::Bomb {
                    entry: name.into(),
                    limit: self.limits.max_ratio,
                });
            }
            out.write_all(&buf[..n])
                .map_err(|e| UnpackError::Io(format!("{path}: {e}")))?;
        }
        self.files.push(TreeFile {
            path: path.to_string(),
            size: written,
        });
        Ok(())
    }
}

/// Turns an archive entry name into a safe `a/b/c` path relative to the tree root.
fn safe_relative_path(raw: &[u8], name: &str) -> Result<String, UnpackError> {
    let unsafe_path = |reason| UnpackError::UnsafePath {
        entry: name.to_string(),
        reason,
    };
    let text = std::str::from_utf8(raw).map_err(|_| unsafe_path("name is not UTF-8"))?;
    if text.is_empty() {
        return Err(unsafe_path("empty name"));
    }
    if text.len() > MAX_PATH_BYTES {
        return Err(unsafe_path("name too long"));
    }
    // NUL truncates paths in C APIs; control characters hide the real name from reviewers.
    if text.chars().any(|c| c.is_control()) {
        return Err(unsafe_path("control character in name"));
    }
    // `a\..\..\x` is a traversal on Windows hosts and for tools that normalise separators.
    if text.contains('\\') {
        return Err(unsafe_path("backslash in name"));
    }
    if text.starts_with('/') {
        return Err(unsafe_path("absolute path"));
    }
    // `C:foo` / `C:/foo` address another drive on Windows.
    let bytes = text.as_bytes();
    if bytes.len() >= 2 && bytes[0].is_ascii_alphabetic() && bytes[1] == b':' {
        return Err(unsafe_path("drive letter"));
    }
    let mut parts = Vec::new();
    for segment in text.split('/') {
        match segment {
            // Empty segments (`a//b`, trailing `/`) and `.` are harmless: skip them.
            "" | "." => {}
            ".." => return Err(unsafe_path("parent directory (..) segment")),
            s if s.contains(':') => return Err(unsafe_path("colon in name")),
            s => parts.push(s),
        }
    }
    if parts.is_empty() {
        return Err(unsafe_path("empty name"));
    }
    if parts.len() > MAX_DEPTH {
        return Err(unsafe_path("too deeply nested"));
    }
    Ok(parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safe_paths_are_normalised() {
        assert_eq!(safe_relative_path(b"a//b/./c.js", "x").unwrap(), "a/b/c.js");
        assert_eq!(
            safe_relative_path(b"./index.html", "x").unwrap(),
            "index.html"
        );
    }

    #[test]
    fn hostile_paths_name_the_reason() {
        for (raw, reason) in [
            (&b"../etc/passwd"[..], "parent directory (..) segment"),
            (b"a/../../b", "parent directory (..) segment"),
            (b"/etc/passwd", "absolute path"),
            (b"C:/windows/x", "drive letter"),
            (b"c:x", "drive letter"),
            (b"a\\..\\..\\b", "backslash in name"),
            (b"a\0b", "control character in name"),
            (b"a/b:stream", "colon in name"),
            (b"/", "absolute path"),
            (b"./", "empty name"),
            (b"\xff\xfe", "name is not UTF-8"),
        ] {
            match safe_relative_path(raw, "x") {
                Err(UnpackError::UnsafePath { reason: r, .. }) => assert_eq!(r, reason, "{raw:?}"),
                other => panic!("{raw:?}: {other:?}"),
            }
        }
    }

    fn sample_zip() -> Vec<u8> {
        use std::io::Write;
        let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        let options = zip::write::SimpleFileOptions::default();
        for (name, body) in [
            ("index.html", &b"<html>hello</html>"[..]),
            ("js/game.js", &[b'x'; 3000][..]),
        ] {
            zip.start_file(name, options).unwrap();
            zip.write_all(body).unwrap();
        }
        zip.finish().unwrap().into_inner()
    }

    fn sample_tar_gz() -> Vec<u8> {
        let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        let mut builder = tar::Builder::new(gz);
        for (name, body) in [
            ("index.html", &b"<html>hello</html>"[..]),
            ("js/game.js", &[b'x'; 3000][..]),
        ] {
            let mut header = tar::Header::new_gnu();
            header.set_size(body.len() as u64);
            header.set_mode(0o644);
            header.set_path(name).unwrap();
            header.set_cksum();
            builder.append(&header, body).unwrap();
        }
        builder.into_inner().unwrap().finish().unwrap()
    }

    /// Damaged packages (random byte flips, truncations) give a result or an error, never a
    /// panic, and never a file outside the destination.
    #[test]
    fn damaged_packages_never_panic_or_escape() {
        let mut seed = 0x2545_f491_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let limits = UnpackLimits::default();
        for (format, original) in [
            (PackageFormat::Zip, sample_zip()),
            (PackageFormat::TarGz, sample_tar_gz()),
        ] {
            let (mut ok, mut refused) = (0, 0);
            for round in 0..300 {
                let mut bytes = original.clone();
                if round % 5 == 0 {
                    bytes.truncate((next() as usize) % bytes.len());
                } else {
                    for _ in 0..1 + next() % 8 {
                        let at = (next() as usize) % bytes.len();
                        bytes[at] = next() as u8;
                    }
                }
                let dir = tempfile::tempdir().unwrap();
                let package = dir.path().join("package");
                let dest = dir.path().join("dest");
                std::fs::write(&package, &bytes).unwrap();
                std::fs::create_dir(&dest).unwrap();
                match unpack(&package, format, &dest, &limits) {
                    Ok(_) => ok += 1,
                    Err(_) => refused += 1,
                }
                let mut names: Vec<_> = std::fs::read_dir(dir.path())
                    .unwrap()
                    .map(|e| e.unwrap().file_name())
                    .collect();
                names.sort();
                assert_eq!(
                    names,
                    ["dest", "package"],
                    "round {round}: wrote outside dest"
                );
            }
            assert!(
                refused > 0 && ok + refused == 300,
                "{format}: {ok} ok, {refused} refused"
            );
        }
    }
}
