//! The heap of a long-lived worker.
//!
//! A build's stages hold large, short-lived buffers: decoded images (4 MiB per 1024² RGBA
//! texture), libwebp's and oxipng's search state, ssimulacra2's float planes, brotli's window,
//! a model's decoded geometry. With glibc's defaults, what they free stays in the process: a
//! block freed above the dynamic mmap threshold raises that threshold to its own size, so the
//! next build's big buffers are carved out of the arenas (one per thread that ran a stage)
//! between small long-lived allocations, and those pages can no longer be returned. A worker
//! that had built a few textured models then sat at 2–3× its idle size for the rest of its life
//! (`bench/faults`: 45.8 MiB after warm-up, 115.1 MiB at the end, with `malloc_trim` alone).
//!
//! So, on glibc: buffers of 256 KiB and more are always mapped on their own and unmapped when
//! freed (a fixed `M_MMAP_THRESHOLD`, which also turns the dynamic threshold off), and after
//! each build `malloc_trim` hands the arenas' free pages back. Other allocators (musl, other
//! systems) need neither and get nothing.

/// Buffers at least this large get their own mapping, returned to the system when freed.
pub const MMAP_THRESHOLD: usize = 256 << 10;

/// Sets the allocator up for a process that runs builds (`kiln-worker`, the API's in-process
/// workers); call once, early. Idempotent.
pub fn configure() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets a tunable, under the allocator's own lock.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD as libc::c_int);
    }
}

/// Returns the allocator's free memory to the system (glibc's `malloc_trim(0)`: every arena,
/// whole free pages anywhere in them), after a build. Safe while other threads allocate.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes each arena's lock itself; it frees nothing that is in use.
    unsafe {
        libc::malloc_trim(0);
    }
}
