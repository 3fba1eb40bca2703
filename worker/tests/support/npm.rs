//! The npm packages the tests' Node.js and browser scripts need, installed by the tests
//! themselves, so `cargo test` passes on a fresh clone with nothing installed by hand. Shared
//! by the worker's and the API's tests (the API's include this file by path).

use std::hash::{Hash, Hasher};
use std::path::Path;
use std::process::Command;
use std::sync::Mutex;

/// Runs `npm <command>` (`ci`, or `install` where a postinstall script copies files) in `dir`
/// unless an earlier run finished it for the same `package-lock.json`. Safe when tests and
/// test binaries run at once: a mutex (threads) and a file lock in the temp dir (processes)
/// let one install at a time, and the marker `node_modules/.kiln-installed` (the lockfile's
/// hash) is written only after npm succeeded and `expect` (a file the install makes,
/// relative to `dir`) exists, so a half-done install (killed, or running in another
/// process) never passes for a finished one.
pub fn npm_installed(dir: &Path, expect: &str, command: &str) {
    static THREADS: Mutex<()> = Mutex::new(());
    let _threads = THREADS.lock().unwrap_or_else(|e| e.into_inner());
    let dir = dir
        .canonicalize()
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let lockfile = std::fs::read(dir.join("package-lock.json"))
        .unwrap_or_else(|e| panic!("{}/package-lock.json: {e}", dir.display()));
    let stamp = {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        lockfile.hash(&mut h);
        format!("{:016x}\n", h.finish())
    };
    let path_hash = {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        dir.hash(&mut h);
        h.finish()
    };
    let lock_path = std::env::temp_dir().join(format!("kiln-npm-{path_hash:016x}.lock"));
    let lock = std::fs::File::create(&lock_path)
        .unwrap_or_else(|e| panic!("{}: {e}", lock_path.display()));
    lock.lock()
        .unwrap_or_else(|e| panic!("lock {}: {e}", lock_path.display()));
    let marker = dir.join("node_modules/.kiln-installed");
    if std::fs::read_to_string(&marker).ok().as_deref() == Some(stamp.as_str())
        && dir.join(expect).exists()
    {
        return;
    }
    let status = Command::new("npm")
        .args([command, "--no-audit", "--no-fund", "--loglevel=error"])
        .current_dir(&dir)
        .status()
        .expect("npm is needed to install the tests' packages (Debian: apt-get install npm)");
    assert!(
        status.success(),
        "npm {command} failed in {}",
        dir.display()
    );
    assert!(
        dir.join(expect).exists(),
        "npm {command} in {} did not make {expect}",
        dir.display()
    );
    std::fs::write(&marker, stamp).unwrap_or_else(|e| panic!("{}: {e}", marker.display()));
}
