# Kiln's image: kiln-api and kiln-worker in one image (the Helm chart runs each from it).
#   docker build -t registry.example/kiln:0.1.0 .
# Both binaries carry everything they serve (migrations, the loader, the dashboard, the engine
# and device rules); the runtime needs only glibc, libstdc++ (meshoptimizer) and CA
# certificates (S3 and PostgreSQL over TLS). It runs as UID 10001 on a read-only root
# filesystem: the only writable paths are the ones the chart mounts (KILN_WORK_DIR's emptyDir
# under /var/lib/kiln/work, /tmp). `.ci/container-check` (run by `.ci/run`) runs the release
# binaries the same way, since our machines have no container engine.

# ---- builder: the official Rust image ------------------------------------------------------
FROM docker.io/library/rust:1.95-slim-bookworm AS builder
# g++ for meshoptimizer (meshopt's C++ core), cmake for aws-lc-sys (the S3 client's TLS).
RUN apt-get update \
 && apt-get install -y --no-install-recommends g++ cmake make pkg-config \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# Cache the registry and target dir between builds (BuildKit); the binaries are copied out of
# the cache mount, which is not part of the layer.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p kiln-api -p kiln-worker --bin kiln-api --bin kiln-worker \
 && install -D -m 0755 target/release/kiln-api target/release/kiln-worker -t /out/

# ---- runtime: slim Debian, CA certificates, nothing else -----------------------------------
FROM docker.io/library/debian:bookworm-slim AS runtime
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 kiln \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin kiln \
 && install -d -o 10001 -g 10001 -m 0750 /var/lib/kiln
COPY --from=builder /out/kiln-api /out/kiln-worker /usr/local/bin/
# Defaults for a container: listen on all interfaces, JSON logs, data under /var/lib/kiln
# (owned by 10001, so a plain `docker run` works on the embedded defaults; make it a volume to
# keep it). The chart mounts an emptyDir at /var/lib/kiln/work and sets everything else.
ENV KILN_BIND=0.0.0.0:8080 \
    KILN_CONTENT_BIND=0.0.0.0:8081 \
    KILN_METRICS_BIND=0.0.0.0:9090 \
    KILN_DATA_DIR=/var/lib/kiln \
    KILN_LOG_JSON=true
USER 10001:10001
VOLUME /var/lib/kiln
EXPOSE 8080 8081 9090
ENTRYPOINT ["/usr/local/bin/kiln-api"]
# kiln-api migrate | kiln-worker (override the entrypoint) | kiln-worker keys init
