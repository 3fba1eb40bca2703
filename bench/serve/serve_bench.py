#!/usr/bin/env python3
"""Serving and upload figures side by side (issue 15): Kiln's content origin against nginx
serving the same bytes from disk (wrk), and Kiln's upload API against a raw S3 PUT of the same
bytes to the same Garage bucket (boto3). A benchmark, not a test: it asserts that it measured
something (requests answered 200, the same bytes from both servers, few socket errors), never
a speed. Run it through run.sh, which installs wrk and the boto3 venv; see README.md.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import io
import json
import os
import platform
import random
import re
import resource
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
GAME_DIR = REPO / "examples" / "sample-game"
# What a game directory holds for its developers, not for players (as api/src/demo.rs).
SKIPPED = {"node_modules", "package.json", "package-lock.json", "copy-engine.mjs"}
CLK_TCK = os.sysconf("SC_CLK_TCK")

PROFILES = {
    # threads, connections, seconds per wrk run, warm-up seconds, timed uploads, padding MiB
    "full": dict(threads=2, connections=32, duration=10, warmup=1, uploads=5, padding_mib=6),
    "quick": dict(threads=2, connections=32, duration=2, warmup=0, uploads=2, padding_mib=2),
}
# Accept-Encoding rows: none (identity bytes) and gzip (Kiln's pre-compressed .gz form; nginx
# serves the very same .gz file with gzip_static). Brotli is left out: nginx-light has no
# brotli module, so the two servers could not send the same bytes.
ENCODINGS = [None, "gzip"]


def log(msg: str) -> None:
    print(f"[serve-bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class BenchError(Exception):
    pass


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def loadavg_1m() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(method, url, headers=None, body=None, timeout=120):
    """One request on a fresh connection; the body exactly as sent (no decoding)."""
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        path = u.path + (f"?{u.query}" if u.query else "")
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        data = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, data
    finally:
        conn.close()


def get_json(url, token=None):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    status, _, body = request("GET", url, headers)
    if status != 200:
        raise BenchError(f"GET {url}: {status} {body[:300]!r}")
    return json.loads(body)


def post_json(url, token, payload=None):
    headers = {"Authorization": f"Bearer {token}"}
    body = None
    if payload is not None:
        headers["content-type"] = "application/json"
        body = json.dumps(payload).encode()
    status, _, data = request("POST", url, headers, body)
    if status not in (200, 201):
        raise BenchError(f"POST {url}: {status} {data[:300]!r}")
    return json.loads(data)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- processes ---------------------------------------------------------------------------


class Proc:
    """A child process with its log file; stopped with SIGTERM, then SIGKILL."""

    running: list["Proc"] = []

    def __init__(self, name, argv, env, log_path: Path, cwd=None):
        self.name, self.log_path = name, log_path
        self.log_file = open(log_path, "wb")
        self.popen = subprocess.Popen(
            argv, env=env, cwd=cwd, stdout=self.log_file, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True)
        Proc.running.append(self)

    @property
    def pid(self):
        return self.popen.pid

    def alive(self):
        return self.popen.poll() is None

    def tail(self, n=30):
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self):
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(15)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)
        self.log_file.close()
        if self in Proc.running:
            Proc.running.remove(self)


def clean_env(**extra):
    """The caller's environment without any KILN_/AWS_/GARAGE_ setting that could leak in."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KILN_", "AWS_", "GARAGE_"))}
    env.update({k: str(v) for k, v in extra.items()})
    return env


def wait_until(what, check, proc: Proc | None, deadline_s=120, every=0.2):
    end = time.monotonic() + deadline_s
    last = None
    while time.monotonic() < end:
        if proc is not None and not proc.alive():
            raise BenchError(f"{what}: {proc.name} exited ({proc.popen.returncode}):\n{proc.tail()}")
        try:
            if check():
                return
        except (OSError, http.client.HTTPException) as e:
            last = e
        time.sleep(every)
    raise BenchError(f"{what}: not ready after {deadline_s} s ({last})"
                     + (f"\n{proc.tail()}" if proc else ""))


def cpu_ticks(pids) -> dict[int, int]:
    """utime + stime (clock ticks) of each pid that still exists."""
    out = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            out[pid] = int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            pass
    return out


def children_of(pid: int) -> list[int]:
    kids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == pid:
                kids.append(int(entry))
    return kids


def pg_backends(dbname: str) -> list[int]:
    """PostgreSQL backend processes serving our database (their title names it)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                title = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if title.startswith("postgres: ") and f" {dbname} " in title:
                found.append(int(entry))
    return found


# --- services: Garage, PostgreSQL, Kiln, nginx --------------------------------------------


@dataclass
class Garage:
    proc: Proc
    endpoint: str
    bucket: str
    key_id: str
    secret: str

    def client(self):
        import boto3
        from botocore.config import Config
        return boto3.client(
            "s3", endpoint_url=self.endpoint, region_name="garage",
            aws_access_key_id=self.key_id, aws_secret_access_key=self.secret,
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))


def start_garage(scratch: Path, garage_bin: str) -> Garage:
    d = scratch / "garage"
    d.mkdir()
    s3_port, rpc_port = free_port(), free_port()
    conf = d / "garage.toml"
    conf.write_text(f"""metadata_dir = "{d}/meta"
data_dir = "{d}/data"
db_engine = "sqlite"
replication_factor = 1
rpc_bind_addr = "127.0.0.1:{rpc_port}"
rpc_public_addr = "127.0.0.1:{rpc_port}"
rpc_secret = "{secrets.token_hex(32)}"

[s3_api]
s3_region = "garage"
api_bind_addr = "127.0.0.1:{s3_port}"
root_domain = ".s3.garage.localhost"
""")
    key_id, secret, bucket = "GK" + secrets.token_hex(12), secrets.token_hex(32), "kiln-serve-bench"
    env = clean_env(GARAGE_DEFAULT_ACCESS_KEY=key_id, GARAGE_DEFAULT_SECRET_KEY=secret,
                    GARAGE_DEFAULT_BUCKET=bucket, RUST_LOG="warn")
    proc = Proc("garage", [garage_bin, "-c", str(conf), "server", "--single-node", "--default-bucket"],
                env, d / "garage.log")
    g = Garage(proc, f"http://127.0.0.1:{s3_port}", bucket, key_id, secret)
    s3 = g.client()

    def bucket_ready():
        try:
            s3.head_bucket(Bucket=bucket)
            return True
        except Exception:  # noqa: BLE001 - not up yet
            return False

    wait_until("Garage", bucket_ready, proc, 60, 0.5)
    return g


def psql(admin_url: str, sql: str) -> None:
    subprocess.run(["psql", admin_url, "-v", "ON_ERROR_STOP=1", "-qAtc", sql], check=True,
                   stdout=subprocess.DEVNULL)


def db_url(admin_url: str, name: str) -> str:
    u = urllib.parse.urlsplit(admin_url)
    return urllib.parse.urlunsplit((u.scheme, u.netloc, "/" + name, u.query, ""))


@dataclass
class Kiln:
    label: str
    proc: Proc
    api: str
    content: str
    admin: str
    dbname: str | None
    token: str = ""

    def cpu_pids(self):
        return [self.proc.pid]


def start_kiln(label, kind, kiln_bin: Path, scratch: Path, garage: Garage | None,
               pg_admin: str | None) -> Kiln:
    api_port, content_port = free_port(), free_port()
    data = scratch / f"kiln-{kind}"
    data.mkdir()
    admin = secrets.token_hex(16)
    env = dict(
        KILN_DATA_DIR=data, KILN_BIND=f"127.0.0.1:{api_port}",
        KILN_PUBLIC_URL=f"http://127.0.0.1:{api_port}",
        KILN_CONTENT_BIND=f"127.0.0.1:{content_port}",
        KILN_CONTENT_URL=f"http://127.0.0.1:{content_port}",
        KILN_ADMIN_TOKEN=admin, KILN_WORKERS=1)
    dbname = None
    if kind == "distributed":
        dbname = f"kiln_serve_bench_{os.getpid()}_{secrets.token_hex(3)}"
        psql(pg_admin, f'CREATE DATABASE "{dbname}"')
        env.update(KILN_DATABASE_URL=db_url(pg_admin, dbname), KILN_S3_BUCKET=garage.bucket,
                   KILN_S3_ENDPOINT=garage.endpoint, KILN_S3_REGION="garage",
                   KILN_S3_PATH_STYLE="true", AWS_ACCESS_KEY_ID=garage.key_id,
                   AWS_SECRET_ACCESS_KEY=garage.secret, AWS_REGION="garage")
    proc = Proc(f"kiln-api ({kind})", [str(kiln_bin)], clean_env(**env), scratch / f"kiln-{kind}.log")
    k = Kiln(label, proc, f"http://127.0.0.1:{api_port}", f"http://127.0.0.1:{content_port}",
             admin, dbname)
    wait_until(f"kiln-api ({kind})", lambda: request("GET", f"{k.api}/readyz", timeout=5)[0] == 200
               and request("GET", f"{k.content}/healthz", timeout=5)[0] == 200, proc, 120)
    team = post_json(f"{k.api}/v1/teams", admin, {"name": f"serve-bench-{secrets.token_hex(4)}"})
    k.token = post_json(f"{k.api}/v1/teams/{team['id']}/tokens", admin)["token"]
    return k


@dataclass
class Nginx:
    proc: Proc
    base: str
    root: Path

    def cpu_pids(self):
        return [self.proc.pid, *children_of(self.proc.pid)]


def start_nginx(scratch: Path, name: str, nginx_bin: str, root: Path) -> Nginx:
    d = scratch / f"nginx-{name}"
    for sub in ("logs", "tmp"):
        (d / sub).mkdir(parents=True)
    port = free_port()
    conf = d / "nginx.conf"
    # Plain static serving as a CDN origin would be set up: sendfile, keep-alive (as many
    # requests per connection as the client wants, like Kiln's hyper), no access log (Kiln logs
    # no request at its default level either), the same Cache-Control as Kiln per path,
    # gzip_static for the pre-compressed .gz files (no on-the-fly compression: Kiln has none).
    conf.write_text(f"""daemon off;
worker_processes auto;
pid {d}/nginx.pid;
error_log {d}/logs/error.log warn;
events {{ worker_connections 4096; }}
http {{
  types {{
    text/html html;
    text/javascript js;
    text/css css;
    text/markdown md;
    model/gltf-binary glb;
    application/json json;
  }}
  default_type application/octet-stream;
  charset utf-8;
  charset_types text/html text/javascript text/css text/markdown application/json;
  access_log off;
  sendfile on;
  tcp_nopush on;
  tcp_nodelay on;
  keepalive_timeout 75s;
  keepalive_requests 100000000;
  etag on;
  gzip off;
  gzip_static on;
  gzip_vary on;
  client_body_temp_path {d}/tmp/body;
  proxy_temp_path {d}/tmp/proxy;
  fastcgi_temp_path {d}/tmp/fastcgi;
  uwsgi_temp_path {d}/tmp/uwsgi;
  scgi_temp_path {d}/tmp/scgi;
  server {{
    listen 127.0.0.1:{port} reuseport;
    root {root};
    add_header Access-Control-Allow-Origin "*";
    location /cdn/ {{
      add_header Cache-Control "public, max-age=31536000, immutable";
      add_header Access-Control-Allow-Origin "*";
    }}
    location ~ ^/play/[^/]+/@ {{
      add_header Cache-Control "public, max-age=31536000, immutable";
      add_header Access-Control-Allow-Origin "*";
    }}
    location /play/ {{
      add_header Cache-Control "public, max-age=60";
      add_header Access-Control-Allow-Origin "*";
    }}
  }}
}}
""")
    proc = Proc(f"nginx ({name})", [nginx_bin, "-p", str(d), "-c", str(conf)], clean_env(),
                d / "logs" / "stderr.log")
    n = Nginx(proc, f"http://127.0.0.1:{port}", root)

    def up():
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True

    wait_until(f"nginx ({name})", up, proc, 20)
    return n


# --- the package and the build -------------------------------------------------------------


def game_files() -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(GAME_DIR):
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d not in SKIPPED]
        for f in filenames:
            if not f.startswith(".") and f not in SKIPPED:
                out.append(str(Path(dirpath, f).relative_to(GAME_DIR)))
    return sorted(out)


def make_package(padding_bytes: int) -> bytes:
    """The sample game zipped as demo.rs does, plus an incompressible "soundtrack" (audio is
    published as it is: no pre-compression) so the package is a few MB."""
    if not (GAME_DIR / "vendor").exists():
        raise BenchError(f"{GAME_DIR}/vendor is missing: run `npm install` there first")
    buf = io.BytesIO()
    stamp = (2026, 1, 1, 0, 0, 0)
    with zipfile.ZipFile(buf, "w") as z:
        for rel in game_files():
            z.writestr(zipfile.ZipInfo(rel, stamp), (GAME_DIR / rel).read_bytes(),
                       compress_type=zipfile.ZIP_DEFLATED)
        if padding_bytes:
            z.writestr(zipfile.ZipInfo("assets/soundtrack.ogg", stamp),
                       random.Random(15).randbytes(padding_bytes), compress_type=zipfile.ZIP_STORED)
    return buf.getvalue()


def upload(k: Kiln, game: str, package: bytes, version: str):
    """POST the package; returns (seconds until the 202 was read, build id, status URL)."""
    headers = {"Authorization": f"Bearer {k.token}", "content-type": "application/zip",
               "Idempotency-Key": f"serve-bench-{version}-{secrets.token_hex(6)}"}
    t0 = time.perf_counter()
    status, _, body = request("POST", f"{k.api}/v1/games/{game}/builds?version={version}",
                              headers, package, timeout=600)
    t1 = time.perf_counter()
    if status != 202:
        raise BenchError(f"upload {version}: {status} {body[:400]!r} (want 202: a new build)")
    accepted = json.loads(body)
    return t1 - t0, t0, accepted["build_id"], accepted["status_url"]


def _ts(text: str) -> float:
    from datetime import datetime
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def queue_wait(status: dict) -> float | None:
    """Seconds from the build's creation (the upload's 202) until its first stage started."""
    starts = [s["started_at"] for s in status.get("stages", []) if s.get("started_at")]
    try:
        return min(_ts(t) for t in starts) - _ts(status["created_at"]) if starts else None
    except (KeyError, ValueError):
        return None


def wait_published(k: Kiln, status_url: str, deadline_s=900, every=0.1):
    """(time.perf_counter() when seen published, the build's status)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        s = get_json(status_url, k.token)
        if s["status"] == "published":
            return time.perf_counter(), s
        if s["status"] == "failed":
            raise BenchError(f"build failed: {s.get('error')}")
        time.sleep(every)
    raise BenchError(f"build not published after {deadline_s} s: {status_url}")


# --- targets: what both servers serve ------------------------------------------------------


@dataclass
class Target:
    name: str
    path: str  # URL path, the same on both servers
    original: Path | None  # the game's own file, where Kiln serves it unchanged
    note: str = ""
    bodies: dict = field(default_factory=dict)  # encoding -> (sha256, size, encoding, type, cache)
    headers: dict = field(default_factory=dict)  # "server encoding" -> response headers


def find_targets(k: Kiln, game: str, build_id: str) -> list[Target]:
    m = get_json(f"{k.content}/v1/games/{game}/manifest")
    if m.get("build_id") != build_id:
        raise BenchError(f"live build is {m.get('build_id')}, not {build_id}")
    path_of = lambda url: urllib.parse.urlsplit(url).path  # noqa: E731
    engine = m["engines"][0]
    model = m["models"][0]
    variant = next(v for v in model["variants"] if v["variant"] == model["preferred"])
    return [
        Target(f"/cdn engine ({engine['name']} {engine['size'] // 1024} KiB)", path_of(engine["url"]),
               GAME_DIR / engine["path"], "the shared library object"),
        Target(f"/cdn model ({variant['variant']} {variant['size'] // 1024} KiB)", path_of(variant["url"]),
               None, f"{variant['path']}, made by the pipeline"),
        Target("/play index.html (live)", f"/play/{game}/", GAME_DIR / "index.html",
               "the live page (one database read per request)"),
        Target("/play game.js (live)", f"/play/{game}/game.js", GAME_DIR / "game.js",
               "a live-build file by its own path (one database read per request)"),
        Target("/play @build/game.js", f"/play/{game}/@{build_id}/game.js", GAME_DIR / "game.js",
               "what the rewritten page loads: the immutable build folder (cached manifest)"),
    ]


def stage_for_nginx(k: Kiln, targets: list[Target], root: Path) -> list[str]:
    """Fetches each target from Kiln (identity and gzip) and lays the same bytes out under
    nginx's root: the game's original file where Kiln serves it unchanged, else Kiln's bytes
    (the rewritten page, the pipeline's model); Kiln's .gz form beside it for gzip_static."""
    notes = []
    for t in targets:
        disk = root / t.path.lstrip("/")
        if t.path.endswith("/"):
            disk = disk / "index.html"
        disk.parent.mkdir(parents=True, exist_ok=True)
        for enc in ENCODINGS:
            headers = {"Accept-Encoding": enc} if enc else {}
            status, h, body = request("GET", k.content + t.path, headers)
            if status != 200:
                raise BenchError(f"Kiln {t.path} ({enc or 'identity'}): {status} {body[:200]!r}")
            ce = h.get("content-encoding")
            if enc is None:
                if ce:
                    raise BenchError(f"Kiln {t.path}: Content-Encoding {ce} without Accept-Encoding")
                if t.original is not None and t.original.read_bytes() == body:
                    shutil.copyfile(t.original, disk)
                    how = f"the game's own {t.original.relative_to(GAME_DIR)}"
                else:
                    disk.write_bytes(body)
                    how = ("Kiln's rewritten page (base href, loader)" if t.path.endswith("/")
                           else "Kiln's object bytes")
                notes.append(f"{t.path}: nginx serves {how} ({len(body)} B)")
            elif ce == enc:
                disk.with_name(disk.name + ".gz").write_bytes(body)
            elif ce is None:
                notes.append(f"{t.path}: Kiln has no {enc} form; both send identity")
            else:
                raise BenchError(f"Kiln {t.path}: asked for {enc}, got {ce}")
            t.bodies[enc] = (sha(body), len(body), ce, h.get("content-type"), h.get("cache-control"))
            t.headers[f"kiln {enc or 'identity'}"] = h
    for dirpath, dirnames, filenames in os.walk(root):
        os.chmod(dirpath, 0o755)
    return notes


def same_bytes(n: Nginx, targets: list[Target]) -> list[str]:
    """One GET from nginx per target and encoding: 200, the same body hash as Kiln's."""
    problems = []
    for t in targets:
        for enc in ENCODINGS:
            headers = {"Accept-Encoding": enc} if enc else {}
            status, h, body = request("GET", n.base + t.path, headers)
            t.headers[f"nginx {enc or 'identity'}"] = h
            k_sha, _, k_ce, k_ct, k_cc = t.bodies[enc]
            where = f"{t.path} ({enc or 'identity'})"
            if status != 200:
                problems.append(f"nginx {where}: {status}")
            elif sha(body) != k_sha or h.get("content-encoding") != k_ce:
                problems.append(f"nginx {where}: other bytes than Kiln's "
                                f"({sha(body)[:12]} {h.get('content-encoding')} vs {k_sha[:12]} {k_ce})")
            elif h.get("content-type") != k_ct:
                log(f"note: {where}: Content-Type nginx {h.get('content-type')!r}, Kiln {k_ct!r}")
            if status == 200 and h.get("cache-control") != k_cc:
                log(f"note: {where}: Cache-Control nginx {h.get('cache-control')!r}, Kiln {k_cc!r}")
    return problems


# --- wrk -----------------------------------------------------------------------------------

_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3, "h": 3600e3}


def parse_wrk(out: str) -> dict:
    def lat(pct):
        m = re.search(rf"^\s+{pct}%\s+([\d.]+)(us|ms|s|m|h)\s*$", out, re.M)
        return float(m.group(1)) * _UNITS[m.group(2)] if m else None

    m = re.search(r"(\d+) requests in ([\d.]+)(\w+), ([\d.]+)(\w+) read", out)
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    tps = re.search(r"Transfer/sec:\s+([\d.]+)(\w+)", out)
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    scale = {"B": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3}
    return {
        "requests": int(m.group(1)) if m else 0,
        "rps": float(rps.group(1)) if rps else 0.0,
        "transfer_Bps": float(tps.group(1)) * scale.get(tps.group(2), 1) if tps else 0.0,
        "p50_ms": lat(50), "p99_ms": lat(99),
        "socket_errors": sum(int(x) for x in sock.groups()) if sock else 0,
        "socket_detail": sock.group(0) if sock else "",
        "non2xx": int(non2xx.group(1)) if non2xx else 0,
    }


def run_wrk(url, enc, p, duration, server_pids, extra_pids=()):
    cmd = ["wrk", f"-t{p['threads']}", f"-c{p['connections']}", f"-d{duration}s", "--latency",
           "--timeout", "10s"]
    if enc:
        cmd += ["-H", f"Accept-Encoding: {enc}"]
    cmd.append(url)
    la = loadavg_1m()
    srv0, ext0 = set(server_pids()), set(extra_pids())
    before = cpu_ticks(srv0 | ext0)
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 120)
    wall = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    srv, ext = srv0 | set(server_pids()), ext0 | set(extra_pids())
    after = cpu_ticks(srv | ext)

    def used(pids):
        # A process that ended meanwhile counts nothing; one that started counts its whole life.
        return sum(after.get(pid, before.get(pid, 0)) - before.get(pid, 0) for pid in pids) / CLK_TCK

    r = parse_wrk(done.stdout)
    r.update(cmd=" ".join(cmd), output=done.stdout + done.stderr, rc=done.returncode,
             load1=la, wall_s=wall, server_cpu_s=used(srv), extra_cpu_s=used(ext - srv),
             wrk_cpu_s=(ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime))
    return r


def check_wrk(r, who, where) -> list[str]:
    problems = []
    if r["rc"] != 0:
        problems.append(f"{who} {where}: wrk exited {r['rc']}: {r['output'][-300:]}")
    if r["requests"] <= 0:
        problems.append(f"{who} {where}: no request completed")
    if r["non2xx"]:
        problems.append(f"{who} {where}: {r['non2xx']} responses not 2xx/3xx")
    if r["socket_errors"] > max(10, r["requests"] // 1000):
        problems.append(f"{who} {where}: {r['socket_detail']} (over 0.1 % of {r['requests']})")
    if r["p99_ms"] is None:
        problems.append(f"{who} {where}: no p99 in wrk's output")
    return problems


# --- one deployment: serve, then uploads -------------------------------------------------


def ratio(a, b):
    return f"{a / b:.2f}" if a and b else "-"


def us_per_req(cpu_s, r):
    return f"{cpu_s * 1e6 / r['requests']:.0f}" if r["requests"] else "-"


def serve_table(label, rows, p) -> str:
    lines = [
        f"**{label}** — wrk -t{p['threads']} -c{p['connections']} -d{p['duration']}s --latency, "
        "nginx and Kiln measured back to back per row",
        "",
        "| path | Accept-Encoding | body B | Kiln req/s | nginx req/s | Kiln/nginx | Kiln p99 ms | "
        "nginx p99 ms | Kiln/nginx | Kiln CPU µs/req | + store/db µs/req | nginx CPU µs/req | load 1m |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        k, n = row["kiln"], row["nginx"]
        lines.append(
            f"| {row['target']} | {row['enc'] or '(none)'} | {row['bytes']} | {k['rps']:.0f} | "
            f"{n['rps']:.0f} | {ratio(k['rps'], n['rps'])} | {k['p99_ms']:.2f} | {n['p99_ms']:.2f} | "
            f"{ratio(k['p99_ms'], n['p99_ms'])} | {us_per_req(k['server_cpu_s'], k)} | "
            f"{us_per_req(k['extra_cpu_s'], k) if row['has_extra'] else '-'} | "
            f"{us_per_req(n['server_cpu_s'], n)} | {k['load1']:.2f} |")

    def cores(who, key):
        return statistics.mean(row[who][key] / row[who]["wall_s"] for row in rows)

    lines += ["", f"CPU in use, mean over the rows (cores of {os.cpu_count()}): during nginx's runs wrk "
              f"{cores('nginx', 'wrk_cpu_s'):.2f} + nginx {cores('nginx', 'server_cpu_s'):.2f}; during Kiln's "
              f"runs wrk {cores('kiln', 'wrk_cpu_s'):.2f} + Kiln {cores('kiln', 'server_cpu_s'):.2f}"
              + (f" + store/db {cores('kiln', 'extra_cpu_s'):.2f}" if rows[0]["has_extra"] else "")]
    return "\n".join(lines)


def run_deployment(kind, label, args, p, scratch, kiln_bin, garage, package, results, problems):
    log(f"== {label}: starting kiln-api")
    k = start_kiln(label, kind, kiln_bin, scratch, garage, args.pg_url)
    nginx = None
    game = "serve-bench"
    out = {"label": label, "kind": kind, "rows": [], "uploads": []}
    results["deployments"].append(out)
    try:
        # The build every row serves; also the uploads' warm-up (not timed).
        log(f"publishing the sample game ({len(package)} B package)")
        t_up, t0, build_id, status_url = upload(k, game, package, "serve-0")
        t_pub = wait_published(k, status_url)[0] - t0
        log(f"published build {build_id}: 202 after {t_up:.2f} s, published after {t_pub:.1f} s")
        targets = find_targets(k, game, build_id)
        root = scratch / f"nginx-root-{kind}"
        root.mkdir()
        out["staging"] = stage_for_nginx(k, targets, root)
        for note in out["staging"]:
            log(note)
        nginx = start_nginx(scratch, kind, args.nginx, root)
        bad = same_bytes(nginx, targets)
        problems += bad
        if bad:
            raise BenchError("; ".join(bad))
        out["headers"] = {t.path: t.headers for t in targets}
        log(f"nginx {nginx.base} and Kiln {k.content} answer 200 with the same bytes "
            f"for all {len(targets) * len(ENCODINGS)} path × encoding pairs")

        extra = (lambda: [garage.proc.pid, *pg_backends(k.dbname)]) if kind == "distributed" else (lambda: [])
        log(f"measuring at load average {loadavg()}")
        for t in targets:
            for enc in ENCODINGS:
                where = f"{t.path} ({enc or 'identity'})"
                row = {"target": t.name, "path": t.path, "enc": enc, "bytes": t.bodies[enc][1],
                       "sha256": t.bodies[enc][0], "has_extra": kind == "distributed"}
                for who, base, pids, ext in (("nginx", nginx.base, nginx.cpu_pids, lambda: []),
                                             ("kiln", k.content, k.cpu_pids, extra)):
                    if p["warmup"]:
                        run_wrk(base + t.path, enc, p, p["warmup"], pids, ext)
                    r = run_wrk(base + t.path, enc, p, p["duration"], pids, ext)
                    problems += check_wrk(r, who, where)
                    row[who] = r
                out["rows"].append(row)
                log(f"{t.name:<34} {enc or 'identity':<8} Kiln {row['kiln']['rps']:>8.0f} req/s "
                    f"p99 {row['kiln']['p99_ms']:.2f} ms | nginx {row['nginx']['rps']:>8.0f} req/s "
                    f"p99 {row['nginx']['p99_ms']:.2f} ms | load {row['kiln']['load1']:.2f}")
        nginx.proc.stop()
        nginx = None

        # Uploads: the same bytes, a new build each (another version and Idempotency-Key);
        # timed until the 202, then each waits for its build to publish before the next one
        # starts, so the pipeline never runs beside a timed upload.
        log(f"timing {p['uploads']} uploads of {len(package)} B through Kiln's upload API")
        for i in range(1, p["uploads"] + 1):
            la = loadavg_1m()
            t_up, t0, build_id, status_url = upload(k, game, package, f"serve-{i}")
            seen, status = wait_published(k, status_url)
            t_pub, waited = seen - t0, queue_wait(status)
            out["uploads"].append({"seconds_to_202": t_up, "seconds_to_published": t_pub,
                                   "seconds_queued": waited, "build_id": build_id, "load1": la})
            log(f"upload {i}: 202 after {t_up * 1000:.0f} ms ({len(package) / t_up / 1e6:.1f} MB/s), "
                f"published after {t_pub:.1f} s"
                + (f" (queued {waited:.1f} s before its first stage)" if waited is not None else ""))
    finally:
        if nginx:
            nginx.proc.stop()
        k.proc.stop()
        if k.dbname:
            try:
                psql(args.pg_url, f'DROP DATABASE IF EXISTS "{k.dbname}" WITH (FORCE)')
            except subprocess.CalledProcessError as e:
                log(f"could not drop database {k.dbname}: {e}")
    return out


def raw_puts(garage: Garage, package: bytes, n: int) -> list[dict]:
    s3 = garage.client()
    s3.put_object(Bucket=garage.bucket, Key="serve-bench/warm-up.zip", Body=package,
                  ContentType="application/zip")  # connection, credentials: not timed
    out = []
    for i in range(1, n + 1):
        la = loadavg_1m()
        t0 = time.perf_counter()
        s3.put_object(Bucket=garage.bucket, Key=f"serve-bench/raw-{i}.zip", Body=package,
                      ContentType="application/zip")
        t = time.perf_counter() - t0
        head = s3.head_object(Bucket=garage.bucket, Key=f"serve-bench/raw-{i}.zip")
        if head["ContentLength"] != len(package):
            raise BenchError(f"raw PUT {i}: stored {head['ContentLength']} B, sent {len(package)}")
        out.append({"seconds": t, "load1": la})
        log(f"raw PUT {i}: {t * 1000:.0f} ms ({len(package) / t / 1e6:.1f} MB/s)")
    return out


def upload_table(results, size) -> str:
    lines = [
        f"**Upload** — the same {size / 1e6:.2f} MB zip each time (MB = 10^6 B; median of the timed "
        "uploads; Kiln: until the 202 is read, each build published before the next upload)",
        "",
        "| what | uploads | median s | MB/s | × raw PUT | min–max s | time to published, median s "
        "(queued before the first stage) | load 1m |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    raw = results.get("raw_put") or []
    raw_mbs = size / statistics.median(r["seconds"] for r in raw) / 1e6 if raw else None
    def queued(ups):
        waits = [u["seconds_queued"] for u in ups if u.get("seconds_queued") is not None]
        return f"{statistics.median(waits):.1f}" if waits else "?"

    for d in results["deployments"]:
        ups = d["uploads"]
        if not ups:
            continue
        secs = [u["seconds_to_202"] for u in ups]
        med = statistics.median(secs)
        mbs = size / med / 1e6
        lines.append(
            f"| Kiln upload API, {d['label']} | {len(ups)} | {med:.3f} | {mbs:.1f} | "
            f"{f'{mbs / raw_mbs:.2f}' if raw_mbs and d['kind'] == 'distributed' else '-'} | "
            f"{min(secs):.3f}–{max(secs):.3f} | "
            f"{statistics.median(u['seconds_to_published'] for u in ups):.1f} ({queued(ups)}) | "
            f"{statistics.mean(u['load1'] for u in ups):.2f} |")
    if raw:
        secs = [r["seconds"] for r in raw]
        lines.append(
            f"| raw S3 PUT to the same Garage bucket (boto3 put_object) | {len(raw)} | "
            f"{statistics.median(secs):.3f} | {raw_mbs:.1f} | 1.00 | {min(secs):.3f}–{max(secs):.3f} | - | "
            f"{statistics.mean(r['load1'] for r in raw):.2f} |")
    return "\n".join(lines)


def machine() -> str:
    model = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    return f"{os.cpu_count()} CPUs ({model}), {platform.system()} {platform.release()}"


def version_of(argv) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10)
        return re.sub(r"\s*Copyright.*", "", (done.stdout + done.stderr).strip().splitlines()[0])
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return "?"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="short profile for CI")
    ap.add_argument("--duration", type=int, help="seconds per wrk run")
    ap.add_argument("--threads", type=int)
    ap.add_argument("--connections", type=int)
    ap.add_argument("--uploads", type=int, help="timed uploads (and raw PUTs)")
    ap.add_argument("--padding-mib", type=float, help="incompressible asset added to the package")
    ap.add_argument("--deployments", default="distributed,embedded",
                    help="distributed (PostgreSQL + Garage), embedded (SQLite + local dir)")
    ap.add_argument("--kiln-bin", help="kiln-api binary (run.sh passes it)")
    ap.add_argument("--garage", default=os.path.expanduser("~/.cache/kiln-tools/bin/garage"))
    ap.add_argument("--nginx", default="/usr/sbin/nginx")
    ap.add_argument("--pg-url", default=os.environ.get(
        "KILN_TEST_PG_URL", "postgres://postgres@127.0.0.1:5432/postgres"))
    ap.add_argument("--out", help="results JSON (default bench/serve/results/serve-<time>.json)")
    ap.add_argument("--keep-scratch", action="store_true")
    args = ap.parse_args()

    p = dict(PROFILES["quick" if args.quick else "full"])
    for key in ("duration", "threads", "connections", "uploads", "padding_mib"):
        if getattr(args, key) is not None:
            p[key] = getattr(args, key)
    deployments = [d.strip() for d in args.deployments.split(",") if d.strip()]
    for d in deployments:
        if d not in ("distributed", "embedded"):
            ap.error(f"unknown deployment {d!r}")
    kiln_bin = Path(args.kiln_bin or REPO / "target/release/kiln-api")
    if not kiln_bin.is_file():
        raise SystemExit(f"serve-bench: no kiln-api at {kiln_bin}")
    if "distributed" in deployments and not os.access(args.garage, os.X_OK):
        raise SystemExit(f"serve-bench: no Garage at {args.garage} (.ci/run builds Garage 2.5.0 there "
                         "once), or run --deployments embedded")
    debug = "/debug/" in str(kiln_bin)
    started = time.perf_counter()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out_path = Path(args.out) if args.out else HERE / "results" / f"serve-{stamp}.json"
    scratch = Path(tempfile.mkdtemp(prefix="kiln-serve-bench."))
    os.chmod(scratch, 0o755)  # nginx's workers (an unprivileged user under root) read from here

    def on_signal(sig, _frame):
        raise KeyboardInterrupt(f"signal {sig}")

    signal.signal(signal.SIGTERM, on_signal)
    import boto3  # noqa: F401 - fail early when run outside the venv

    results = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"), "machine": machine(),
        "profile": "quick" if args.quick else "full", "params": p, "kiln_bin": str(kiln_bin),
        "debug_build": debug, "loadavg_start": loadavg(),
        "versions": {"wrk": version_of(["wrk", "--version"]), "nginx": version_of([args.nginx, "-v"]),
                     "garage": version_of([args.garage, "--version"]) if "distributed" in deployments else "-",
                     "boto3": __import__("boto3").__version__, "python": platform.python_version()},
        "deployments": [],
    }
    problems: list[str] = []
    failed = None
    package = make_package(int(p["padding_mib"] * 1024 * 1024))
    results["package_bytes"] = len(package)
    log(f"machine: {results['machine']}; load average {results['loadavg_start']}")
    log(f"kiln-api: {kiln_bin}" + ("   *** DEBUG BUILD: numbers are NOT representative ***" if debug else ""))
    log(f"wrk: {results['versions']['wrk']}; nginx: {results['versions']['nginx']}; "
        f"garage: {results['versions']['garage']}; boto3 {results['versions']['boto3']}")
    log(f"scratch: {scratch}")
    garage = None
    try:
        if "distributed" in deployments:
            log("starting Garage (its own instance, free ports)")
            garage = start_garage(scratch, args.garage)
            log(f"Garage: {garage.endpoint}, bucket {garage.bucket}")
        for kind in deployments:
            label = ("PostgreSQL + Garage (S3)" if kind == "distributed"
                     else "embedded (SQLite + local object dir)")
            run_deployment(kind, label, args, p, scratch, kiln_bin, garage if kind == "distributed" else None,
                           package, results, problems)
            if kind == "distributed":
                log(f"timing {p['uploads']} raw PUTs of the same bytes to the same Garage bucket (boto3)")
                results["raw_put"] = raw_puts(garage, package, p["uploads"])
                garage.proc.stop()
                garage = None
    except (BenchError, subprocess.CalledProcessError, KeyboardInterrupt) as e:
        failed = str(e) or type(e).__name__
        problems.append(failed)
    finally:
        for proc in list(Proc.running):
            proc.stop()

    results["problems"] = problems
    results["seconds"] = time.perf_counter() - started
    results["loadavg_end"] = loadavg()
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(results, indent=1))

    title = "Serving and upload against nginx and raw S3"
    if debug:
        title += " — DEBUG kiln-api BUILD, NOT REPRESENTATIVE"
    print(f"\n## {title}\n")
    print(f"{results['date']}, {results['machine']}; kiln-api {kiln_bin}; {results['versions']['wrk']}; "
          f"{results['versions']['nginx']}; {results['versions']['garage']}; boto3 {results['versions']['boto3']}")
    print(f"load average at start {results['loadavg_start']}, at end {results['loadavg_end']}; "
          f"wrk, nginx, Kiln, Garage and PostgreSQL share the machine's cores on loopback\n")
    for d in results["deployments"]:
        if d["rows"]:
            print(serve_table(f"Kiln on {d['label']}", d["rows"], p))
            print()
    if any(d["uploads"] for d in results["deployments"]) or results.get("raw_put"):
        print(upload_table(results, len(package)))
        print()
    runs = sum(2 for d in results["deployments"] for _ in d["rows"])
    if problems:
        print("problems:")
        for pr in problems:
            print(f"  - {pr}")
    keep = args.keep_scratch or bool(problems)
    if keep:
        print(f"scratch kept: {scratch}")
    else:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"results: {out_path}")
    print(f"serve bench: {runs} wrk runs, {len(problems)} problems, {results['seconds']:.0f} s")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
