//! The API's integration tests that each start their own Kiln (or cluster) and share no
//! scenario list with another deployment, as one test binary: one link, and one copy of the
//! generic code they all instantiate (release builds share no generics between crates; as six
//! binaries they took 56–65 s of compile each). `cargo test -p kiln-api --test platform
//! key_rotation` runs one module's tests.
//!
//! `embedded` and `distributed` stay binaries of their own: they run the same scenarios on two
//! deployments and count the process-wide metrics each scenario moved; `engine_library` checks
//! those metrics against its own beacons exactly.

#[path = "../common/mod.rs"]
mod common;

mod content_origin;
mod deployment;
mod key_rotation;
mod names_and_retries;
mod openapi;
mod release_races;
