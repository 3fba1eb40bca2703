"""The Python half of .ci/container-check (run in .ci/chart-check's venv: helm-python-sdk, PyYAML).

    python container_check.py plan REPO WORK VALUES_FILE BIN_DIR
    python container_check.py proc WORK NAME PID|@PID_FILE [--stop]
    python container_check.py pg-url BASE_URL USER|- DATABASE
    python container_check.py exercise WORK REPO probes [NAME=PID...] | all

`plan` renders the chart (release "kiln", namespace "kiln", as `helm install`) with VALUES_FILE
and the running Garage's endpoint, bucket and region (KILN_TEST_S3_*, as `--set` would), and
reads from the rendered objects what Kubernetes would give the migration Job's container, the
API container and the worker container: command and args, env (value, valueFrom, envFrom, with
Kubernetes' $(VAR) expansion), volumeMounts and the volumes behind them, securityContext (pod
and container merged). It adds what the image and the kubelet add (the Dockerfile's runtime
stage ENV, USER, WORKDIR and COPY destinations; PATH, HOME, HOSTNAME; the KUBERNETES_* and
service-link variables) and maps what only a cluster has:
  - every secretKeyRef and secret volume to the Secrets helm/kiln/README.md's "Secrets" creates,
    generated here (database URLs from CC_DB_URL / CC_DB_OWNER_URL, S3 keys from the env);
  - every emptyDir and secret volume to a directory under WORK, laid out as the kubelet does
    (secret files behind ..data links, defaultMode, group fsGroup; emptyDirs setgid fsGroup);
  - every listener bound to a container port (0.0.0.0:PORT) to 127.0.0.1 and a free port, and
    every URL naming an Ingress host or a Service to http://127.0.0.1:<that free port>: the only
    variables that change, printed as such.
For each process it writes WORK/plan/<name>/{env,argv} (NUL-separated), mounts (TSV for the
sandbox) and sandbox.env (UID, groups, privileges), and WORK/plan.json.

`proc` checks a running process against its plan: /proc/PID/status (UID, GID, groups,
capabilities, no_new_privs), /proc/PID/environ (exactly the planned environment) and
/proc/PID/mountinfo (the root and every other mount read-only but the rendered writable ones).

`exercise` is what a team and Prometheus do against the running release: the rendered probes,
a team and token with the admin token, the sample game uploaded (packaged as `kiln-api --demo`
does) until published, its signed manifest from the content origin, /metrics only on the
metrics ports.

Counts go to WORK/counts.tsv (count, what, ok); failures are printed with FAIL and make the
exit status 1.
"""

from __future__ import annotations

import io
import json
import os
import re
import secrets
import shlex
import signal
import socket
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ in the repository
sys.path.insert(0, str(Path(__file__).resolve().parent))
from chart_check import documents, load_values, merge  # noqa: E402

FAILURES: list[str] = []
RELEASE, NAMESPACE = "kiln", "kiln"
# Docker's (and containerd's) PATH for an image that sets none: debian:bookworm-slim sets none.
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
KUBERNETES_IP = "10.96.0.1"


def fail(message: str) -> None:
    FAILURES.append(message)
    print(f"FAIL {message}", flush=True)


def record(work: Path, n: int, what: str, ok: bool = True) -> None:
    with open(work / "counts.tsv", "a") as f:
        f.write(f"{n}\t{what}\t{1 if ok else 0}\n")


def say(text: str) -> None:
    print(f"   {text}", flush=True)


# ---- the image: the Dockerfile's runtime stage ------------------------------------------


def dockerfile_runtime(path: Path) -> dict:
    """ENV, USER, WORKDIR and what COPY puts where, in the Dockerfile's last stage."""
    lines, current = [], ""
    for raw in path.read_text().splitlines():
        if not current and (raw.lstrip().startswith("#") or not raw.strip()):
            continue
        if raw.rstrip().endswith("\\"):
            current += raw.rstrip()[:-1] + " "
            continue
        lines.append(current + raw)
        current = ""
    stages: list[list[str]] = []
    for line in lines:
        if re.match(r"(?i)^\s*FROM\s", line):
            stages.append([])
        if stages:
            stages[-1].append(line.strip())
    image = {"env": {}, "user": "", "workdir": "/", "files": []}
    for line in stages[-1]:
        word, _, rest = line.partition(" ")
        word = word.upper()
        if word == "ENV":
            parts = shlex.split(rest)
            if parts and "=" not in parts[0]:
                image["env"][parts[0]] = " ".join(parts[1:])
            else:
                for p in parts:
                    k, _, v = p.partition("=")
                    image["env"][k] = v
        elif word == "USER":
            image["user"] = rest.strip()
        elif word == "WORKDIR":
            image["workdir"] = rest.strip()
        elif word == "COPY":
            words = shlex.split(rest)
            if not any(w.startswith("--from=") for w in words):
                raise SystemExit(f"Dockerfile: COPY from the build context into the runtime image is not emulated: {line}")
            parts = [w for w in words if not w.startswith("--")]
            dest = parts[-1]
            for src in parts[:-1]:
                name = Path(src).name
                image["files"].append((name, dest.rstrip("/") + "/" + name if dest.endswith("/") else dest))
    return image


# ---- Kubernetes' environment ------------------------------------------------------------

EXPAND = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes' dependent variables: $(NAME) of one defined before, $$ for a literal $."""

    def sub(m):
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env[name] if name in env else m.group(0)

    return EXPAND.sub(sub, value)


def service_env(services: list[dict]) -> dict[str, str]:
    """The variables the kubelet adds for every Service with a cluster IP (docker-links style)."""
    env: dict[str, str] = {}
    for svc in services:
        ip, ports = svc["ip"], svc["ports"]
        n = svc["name"].upper().replace("-", "_")
        env[f"{n}_SERVICE_HOST"] = ip
        env[f"{n}_SERVICE_PORT"] = str(ports[0]["port"])
        for p in ports:
            if p.get("name"):
                env[f"{n}_SERVICE_PORT_{p['name'].upper().replace('-', '_')}"] = str(p["port"])
        first = ports[0]
        env[f"{n}_PORT"] = f"{first.get('protocol', 'TCP').lower()}://{ip}:{first['port']}"
        for p in ports:
            proto = p.get("protocol", "TCP")
            pre = f"{n}_PORT_{p['port']}_{proto.upper()}"
            env[pre] = f"{proto.lower()}://{ip}:{p['port']}"
            env[f"{pre}_PROTO"] = proto.lower()
            env[f"{pre}_PORT"] = str(p["port"])
            env[f"{pre}_ADDR"] = ip
    return env


def kiln_settings(repo: Path) -> set[str]:
    """The KILN_* variables the binaries read: the match arms of Config::apply_env, and
    KILN_CONFIG (common/src/config.rs). Any other KILN_* is ignored there, silently."""
    text = (repo / "common" / "src" / "config.rs").read_text()
    return set(re.findall(r'"(KILN_[A-Z0-9_]+)"(?=\s*(?:=>|\|))', text)) | {"KILN_CONFIG"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- plan -------------------------------------------------------------------------------


def render(repo: Path, values: dict) -> list[dict]:
    import helm_python as helm

    with helm.Chart.load(str(repo / "helm" / "kiln")) as chart:
        rendered = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    return [doc for _, doc in documents(rendered)]


def secret_store(values: dict) -> dict[str, dict[str, str]]:
    """The Secrets helm/kiln/README.md's "Secrets" section creates, with generated contents."""
    s = values["secrets"]
    store: dict[str, dict[str, str]] = {}

    def put(name: str, key: str, value: str) -> None:
        if name:
            store.setdefault(name, {})[key] = value

    put(s["database"]["name"], s["database"]["key"], os.environ["CC_DB_URL"])
    m = values["migration"]["database"]
    put(m["name"], m["key"] or s["database"]["key"], os.environ["CC_DB_OWNER_URL"])
    # `openssl rand -hex 32 > signing.key` then --from-file: with its newline.
    put(s["signingKey"]["name"], s["signingKey"]["key"], secrets.token_hex(32) + "\n")
    # --from-literal=telemetry.key="$(openssl rand -hex 32)": without.
    put(s["telemetry"]["name"], s["telemetry"]["key"], secrets.token_hex(32))
    put(s["admin"]["name"], s["admin"]["key"], secrets.token_hex(24))
    put(s["aws"]["name"], s["aws"]["accessKeyIdKey"], os.environ["AWS_ACCESS_KEY_ID"])
    put(s["aws"]["name"], s["aws"]["secretAccessKeyKey"], os.environ["AWS_SECRET_ACCESS_KEY"])
    return store


def resolve_env(proc: str, c: dict, store: dict, configmaps: dict, pod_meta: dict, base: dict, refs: dict) -> dict[str, str]:
    env = dict(base)
    for src in c.get("envFrom", []):
        prefix = src.get("prefix", "")
        if "secretRef" in src:
            name = src["secretRef"]["name"]
            data = store.get(name)
            kind = "Secret"
        else:
            name = src["configMapRef"]["name"]
            data = configmaps.get(name)
            kind = "ConfigMap"
        if data is None:
            if not (src.get("secretRef") or src.get("configMapRef")).get("optional"):
                fail(f"{proc}: envFrom {kind} {name}, which the documented install does not create")
            continue
        for k, v in data.items():
            env[prefix + k] = v
        refs["envFrom"] += 1
    for e in c.get("env", []):
        name = e["name"]
        if "valueFrom" not in e:
            env[name] = expand(str(e.get("value", "")), env)
            refs["value"] += 1
            continue
        vf = e["valueFrom"]
        if "secretKeyRef" in vf or "configMapKeyRef" in vf:
            kind = "secretKeyRef" if "secretKeyRef" in vf else "configMapKeyRef"
            ref = vf[kind]
            data = (store if kind == "secretKeyRef" else configmaps).get(ref["name"], {})
            if ref["key"] in data:
                env[name] = data[ref["key"]]
                refs[kind] += 1
            elif not ref.get("optional"):
                fail(f"{proc}: {name} from {kind} {ref['name']}/{ref['key']}, which the documented install does not create")
        elif "fieldRef" in vf:
            path = vf["fieldRef"]["fieldPath"]
            known = {"metadata.name": pod_meta["name"], "metadata.namespace": NAMESPACE,
                     "status.podIP": "127.0.0.1", "spec.nodeName": "node-1",
                     "spec.serviceAccountName": pod_meta["serviceAccount"]}
            if path not in known:
                fail(f"{proc}: {name}: fieldRef {path} is not emulated")
                continue
            env[name] = known[path]
            refs["fieldRef"] += 1
        else:
            fail(f"{proc}: {name}: valueFrom {list(vf)} is not emulated")
    return env


def make_secret_volume(path: Path, data: dict[str, str], volume: dict, fs_group: int | None, proc: str) -> None:
    """The kubelet's atomic writer: files in a timestamped dir, ..data -> it, links to ..data."""
    items = volume.get("items") or [{"key": k, "path": k} for k in data]
    mode = volume.get("defaultMode", 0o644)
    stamp = path / "..2025_01_01_00_00_00.000000000"
    stamp.mkdir(parents=True)
    for item in items:
        if item["key"] not in data:
            if not volume.get("optional"):
                fail(f"{proc}: secret volume {volume.get('secretName')} needs key {item['key']}, which the documented install does not create")
            continue
        f = stamp / item["path"]
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(data[item["key"]])
        os.chmod(f, item.get("mode", mode))
        if fs_group is not None:
            os.chown(f, 0, fs_group)
        top = item["path"].split("/")[0]
        if not (path / top).is_symlink():
            (path / top).symlink_to(f"..data/{top}")
    (path / "..data").symlink_to(stamp.name)
    for d in (path, stamp):
        os.chmod(d, 0o755)
        if fs_group is not None:
            os.chown(d, 0, fs_group)


def plan(repo: Path, work: Path, values_file: Path, bin_dir: Path) -> None:
    chart = repo / "helm" / "kiln"
    overrides = {"config": {"s3": {
        "endpoint": os.environ["KILN_TEST_S3_ENDPOINT"],
        "bucket": os.environ["KILN_TEST_S3_BUCKET"],
        "region": os.environ.get("KILN_TEST_S3_REGION", "garage"),
    }}}
    given = merge(load_values(values_file), overrides)
    docs = render(repo, given)
    values = merge(load_values(chart / "values.yaml"), given)
    say(f"rendered {len(docs)} objects from {os.path.relpath(values_file, repo)} (release {RELEASE}, "
        f"namespace {NAMESPACE}; S3 endpoint, bucket and region set to the running Garage's)")
    image = dockerfile_runtime(repo / "Dockerfile")
    say(f"image (Dockerfile runtime stage): ENV {', '.join(image['env'])}; USER {image['user']}; "
        f"files {', '.join(d for _, d in image['files'])}")
    store = secret_store(values)
    configmaps = {d["metadata"]["name"]: d.get("data", {}) for d in docs if d["kind"] == "ConfigMap"}

    # Which pod specs: the migration Job's, the API Deployment's, the worker Deployment's.
    def component(doc):
        return doc["metadata"].get("labels", {}).get("app.kubernetes.io/component")

    pods = {}
    for doc in docs:
        if doc["kind"] == "Job" and component(doc) == "migrate":
            pods["migrate"] = doc
        elif doc["kind"] == "Deployment" and component(doc) in ("api", "worker"):
            pods[component(doc)] = doc
    for name in ("migrate", "api", "worker"):
        if name not in pods:
            fail(f"the render has no {name} workload")
    if FAILURES:
        return

    # Free local ports for every container port, by (process, port name).
    local_ports: dict[tuple[str, str], int] = {}
    container_ports: dict[str, dict[str, int]] = {}
    for proc, doc in pods.items():
        c = doc["spec"]["template"]["spec"]["containers"][0]
        container_ports[proc] = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
        for pname in container_ports[proc]:
            local_ports[(proc, pname)] = free_port()

    # Services (their cluster IPs are invented) and the Ingress: host names -> local ports.
    services = []
    ip = 10
    selector_of = {}
    for doc in docs:
        if doc["kind"] != "Service":
            continue
        spec = doc["spec"]
        target = next((p for p, d in pods.items() if p != "migrate" and all(
            d["spec"]["template"]["metadata"]["labels"].get(k) == v for k, v in spec.get("selector", {}).items())), None)
        selector_of[doc["metadata"]["name"]] = (target, spec["ports"])
        if spec.get("clusterIP") == "None" or spec.get("type") == "ExternalName":
            continue
        services.append({"name": doc["metadata"]["name"], "ip": f"10.96.0.{ip}", "ports": spec["ports"]})
        ip += 1
    host_routes: dict[str, int] = {}   # host name -> local port
    for doc in docs:
        if doc["kind"] == "Ingress":
            for rule in doc["spec"]["rules"]:
                for path in rule["http"]["paths"]:
                    svc = path["backend"]["service"]
                    target, ports = selector_of[svc["name"]]
                    port = next(p for p in ports if p.get("name") == svc["port"].get("name") or p["port"] == svc["port"].get("number"))
                    tp = port["targetPort"]
                    pname = tp if isinstance(tp, str) else next(n for n, v in container_ports[target].items() if v == tp)
                    host_routes[rule["host"]] = local_ports[(target, pname)]
    for name, (target, ports) in selector_of.items():
        if target is None:
            continue
        for p in ports:
            tp = p["targetPort"]
            pname = tp if isinstance(tp, str) else next((n for n, v in container_ports[target].items() if v == tp), None)
            if pname:
                for host in (name, f"{name}.{NAMESPACE}", f"{name}.{NAMESPACE}.svc", f"{name}.{NAMESPACE}.svc.cluster.local"):
                    host_routes[f"{host}:{p['port']}"] = local_ports[(target, pname)]
                    if p["port"] in (80, 443):
                        host_routes.setdefault(host, local_ports[(target, pname)])

    kube_env = service_env([{"name": "kubernetes", "ip": KUBERNETES_IP, "ports": [{"name": "https", "port": 443, "protocol": "TCP"}]}])
    home = re.search(r"--home-dir\s+(\S+)", (repo / "Dockerfile").read_text())
    binaries = {name: bin_dir / name for name, _ in image["files"]}
    for name, path in binaries.items():
        if not os.access(path, os.X_OK):
            fail(f"{path}: not an executable (the image's {name})")
    out_plan = {"processes": {}, "ports": {f"{p}/{n}": v for (p, n), v in local_ports.items()},
                "hosts": host_routes, "secrets": str(work / "secrets.json")}
    (work / "secrets.json").write_text(json.dumps(store))
    os.chmod(work / "secrets.json", 0o600)
    refs_total: dict[str, int] = {}
    known = kiln_settings(repo)
    say(f"Kiln settings the binaries read (common/src/config.rs): {len(known)}")
    print()
    for proc, doc in pods.items():
        spec = doc["spec"]["template"]["spec"]
        c = spec["containers"][0]
        pod_name = f"{doc['metadata']['name']}-{'x7k2p' if proc == 'migrate' else '5d8f9c7b6-x7k2p'}"
        psc, csc = spec.get("securityContext", {}), c.get("securityContext", {})
        image_user = image["user"].split(":")
        uid = csc.get("runAsUser", psc.get("runAsUser", int(image_user[0]) if image_user[0].isdigit() else 0))
        gid = csc.get("runAsGroup", psc.get("runAsGroup", int(image_user[1]) if len(image_user) > 1 else 0))
        fs_group = psc.get("fsGroup")
        groups = sorted({g for g in [fs_group, *psc.get("supplementalGroups", [])] if g is not None})
        if (csc.get("runAsNonRoot", psc.get("runAsNonRoot")) is True) and uid == 0:
            fail(f"{proc}: runAsNonRoot with UID 0: the kubelet would refuse to start it")
        caps = csc.get("capabilities", {})
        sandbox = {
            "RUN_UID": uid, "RUN_GID": gid, "RUN_GROUPS": ",".join(map(str, groups)) or "-",
            "NO_NEW_PRIVS": int(csc.get("allowPrivilegeEscalation", True) is False),
            "DROP_ALL_CAPS": int("ALL" in caps.get("drop", [])),
            "READONLY_ROOT": int(bool(csc.get("readOnlyRootFilesystem"))),
            "WORKDIR": c.get("workingDir") or image["workdir"],
        }
        if caps.get("add") or csc.get("privileged"):
            fail(f"{proc}: capabilities.add / privileged are not emulated: {csc}")
        # The environment: the image's, then the kubelet's (service links: a pre-install hook runs
        # before the release's Services exist), then the container's.
        base = {"PATH": DEFAULT_PATH, **image["env"]}
        base["HOSTNAME"] = pod_name
        base["HOME"] = home.group(1) if home else "/"
        base.update(kube_env)
        hook = "helm.sh/hook" in doc["metadata"].get("annotations", {})
        if spec.get("enableServiceLinks", True) and not hook:
            base.update(service_env(services))
        refs = {"value": 0, "secretKeyRef": 0, "configMapKeyRef": 0, "fieldRef": 0, "envFrom": 0}
        rendered_names = [e["name"] for e in c.get("env", [])]
        env = resolve_env(proc, c, store, configmaps, {"name": pod_name, "serviceAccount": spec.get("serviceAccountName", "default")}, base, refs)
        for k, v in refs.items():
            refs_total[k] = refs_total.get(k, 0) + v
        # One host: listeners on container ports move to 127.0.0.1 and free ports; URLs naming an
        # Ingress host or a Service go to the local port behind it (TLS ends at the Ingress).
        changed = []
        for name in sorted(env):
            value = env[name]
            new = value
            m = re.fullmatch(r"(0\.0\.0\.0|\[::\]|::|):(\d+)", value)
            if m:
                pname = next((n for n, v in container_ports[proc].items() if v == int(m.group(2))), None)
                if pname:
                    new = f"127.0.0.1:{local_ports[(proc, pname)]}"
            elif re.match(r"https?://", value):
                u = urllib.parse.urlsplit(value)
                key = f"{u.hostname}:{u.port}" if u.port else u.hostname
                if key in host_routes:
                    new = urllib.parse.urlunsplit(("http", f"127.0.0.1:{host_routes[key]}", u.path, u.query, u.fragment))
            if new != value:
                env[name] = new
                changed.append((name, value, new))
        # Volumes.
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        mounts = []
        for vm in c.get("volumeMounts", []):
            if vm.get("subPath") or vm.get("subPathExpr"):
                fail(f"{proc}: volumeMount {vm['name']} uses subPath, which is not emulated")
                continue
            vol = volumes[vm["name"]]
            rel = Path("volumes") / proc / vm["name"]
            path = work / rel
            if "emptyDir" in vol:
                path.mkdir(parents=True)
                os.chmod(path, 0o2777 if fs_group is not None else 0o777)
                if fs_group is not None:
                    os.chown(path, 0, fs_group)
                kind = f"emptyDir{' ' + str(vol['emptyDir'].get('sizeLimit')) if vol['emptyDir'].get('sizeLimit') else ''}"
                ro = bool(vm.get("readOnly"))
            elif "secret" in vol:
                sv = vol["secret"]
                data = store.get(sv["secretName"])
                if data is None:
                    fail(f"{proc}: secret volume {sv['secretName']}, which the documented install does not create")
                    continue
                make_secret_volume(path, data, sv, fs_group, proc)
                kind = f"secret {sv['secretName']}"
                ro = True   # secret volumes are always read-only
            elif "configMap" in vol:
                cv = vol["configMap"]
                make_secret_volume(path, configmaps.get(cv["name"], {}), cv, fs_group, proc)
                kind = f"configMap {cv['name']}"
                ro = True
            else:
                fail(f"{proc}: volume {vm['name']} of type {[k for k in vol if k != 'name']} is not emulated")
                continue
            mounts.append({"source": str(rel), "target": vm["mountPath"], "ro": ro, "kind": kind})
        argv = list(c.get("command") or []) + list(c.get("args") or [])
        argv = [expand(a, env) for a in argv]
        d = work / "plan" / proc
        d.mkdir(parents=True)
        (d / "env").write_bytes(b"".join(f"{k}={v}".encode() + b"\0" for k, v in sorted(env.items())))
        (d / "argv").write_bytes(b"".join(a.encode() + b"\0" for a in argv))
        with open(d / "mounts", "w") as f:
            for name, dest in image["files"]:
                f.write(f"imagefile\t{binaries[name]}\t{dest}\tro\n")
            for mnt in sorted(mounts, key=lambda m: m["target"].count("/")):
                f.write(f"bind\t{mnt['source']}\t{mnt['target']}\t{'ro' if mnt['ro'] else 'rw'}\n")
        (d / "sandbox.env").write_text("".join(f"{k}={shlex.quote(str(v))}\n" for k, v in sandbox.items()))
        probes = {}
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            h = c.get(probe, {}).get("httpGet")
            if h:
                port = h["port"] if isinstance(h["port"], str) else next(n for n, v in container_ports[proc].items() if v == h["port"])
                probes[probe] = f"http://127.0.0.1:{local_ports[(proc, port)]}{h.get('path', '/')}"
        out_plan["processes"][proc] = {
            "object": f"{doc['kind']} {doc['metadata']['name']}, container {c['name']}",
            "argv": argv, "env": env, "rendered_env": rendered_names, "overrides": changed,
            "mounts": mounts, "sandbox": sandbox, "probes": probes,
            "ports": {n: local_ports[(proc, n)] for n in container_ports[proc]},
            "container_ports": container_ports[proc],
        }
        # What was read from the render, and what changed.
        secret_names = sorted(e["name"] for e in c.get("env", []) if "valueFrom" in e)
        say(f"{proc}: {doc['kind']} {doc['metadata']['name']} / container {c['name']}: {' '.join(argv)}")
        say(f"  env from the render ({len(rendered_names)}): {', '.join(rendered_names)}")
        say(f"    of which from Secrets: {', '.join(secret_names) or 'none'}")
        say(f"  added by the image and the kubelet ({len(set(env) - set(rendered_names))}): "
            f"{', '.join(sorted(set(env) - set(rendered_names)))}")
        for name, old, new in changed:
            origin = "the render" if name in rendered_names else "the image's ENV" if name in image["env"] else "the kubelet"
            say(f"  ONE-HOST OVERRIDE {name} (from {origin}): {old} -> {new}")
        # A KILN_* variable the binaries do not read is ignored without a word: a typo in the
        # chart (or the image) would go unnoticed. The kubelet's service links are expected.
        links = set(service_env(services)) if spec.get("enableServiceLinks", True) and not hook else set()
        unknown = sorted(n for n in env if n.startswith("KILN_") and n not in known and n not in links)
        for n in unknown:
            fail(f"{proc}: {n} (from {'the render' if n in rendered_names else 'the image'}) is no setting the binaries read")
        kiln_vars = [n for n in env if n.startswith("KILN_") and n not in links]
        record(work, len(kiln_vars) - len(unknown), f"{proc}: KILN_* variables given that the binaries read", not unknown)
        ignored = sorted(n for n in env if n.startswith("KILN_") and n in links)
        if ignored:
            say(f"  service links the kubelet adds in the KILN_ namespace, ignored by the binaries: {len(ignored)} ({ignored[0]}, …)")
        for mnt in mounts:
            say(f"  mount {mnt['target']} ({mnt['kind']}, {'read-only' if mnt['ro'] else 'writable'})")
        say(f"  securityContext: UID {uid}, GID {gid}, groups {sandbox['RUN_GROUPS']}, "
            f"readOnlyRootFilesystem {bool(sandbox['READONLY_ROOT'])}, no_new_privs {bool(sandbox['NO_NEW_PRIVS'])}, "
            f"drop ALL capabilities {bool(sandbox['DROP_ALL_CAPS'])}; not emulated: "
            f"{', '.join(k for k in ('seccompProfile',) if k in psc or k in csc) or 'nothing'}, resource limits")
        record(work, len(rendered_names), f"{proc}: env entries read from the render")
        record(work, len(mounts), f"{proc}: volume mounts read from the render and mapped")
        record(work, len(changed), f"{proc}: variables overridden for one host (listeners, URLs)")
    record(work, refs_total.get("secretKeyRef", 0) + refs_total.get("envFrom", 0),
           "secretKeyRef/envFrom references resolved to generated Secrets")
    (work / "plan.json").write_text(json.dumps(out_plan, indent=1))
    # The operator's copy of the signing key (`keys init` runs where the root key is kept).
    op = work / "operator"
    op.mkdir()
    (op / "signing.key").write_text(store[values["secrets"]["signingKey"]["name"]][values["secrets"]["signingKey"]["key"]])
    os.chmod(op / "signing.key", 0o600)
    (op / "admin.token").write_text(store[values["secrets"]["admin"]["name"]][values["secrets"]["admin"]["key"]])


# ---- proc -------------------------------------------------------------------------------


def unescape(path: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)


def check_proc(work: Path, name: str, pid_arg: str, stop: bool) -> None:
    p = json.loads((work / "plan.json").read_text())["processes"][name]
    sb = p["sandbox"]
    if pid_arg.startswith("@"):
        # Started before the process, so that a short-lived one is not missed: its PID comes
        # through this file.
        pid_file, deadline = Path(pid_arg[1:]), time.monotonic() + 30
        while not (pid_file.exists() and pid_file.read_text().endswith("\n")):
            if time.monotonic() > deadline:
                fail(f"{name}: no PID in {pid_file}")
                return
            time.sleep(0.001)
        pid = int(pid_file.read_text())
    else:
        pid = int(pid_arg)
    # Until the sandbox has exec'd the binary (unshare -> bash -> setpriv -> env -> binary).
    comm = Path(p["argv"][0]).name[:15]
    deadline = time.monotonic() + 30
    while True:
        try:
            now = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            now = None
        # The binary, or whatever the rendered command is once the sandbox's own steps are done.
        if now == comm or (now is not None and now not in ("unshare", "bash", "setpriv", "env")):
            break
        if now is None or time.monotonic() > deadline:
            fail(f"{name} (pid {pid}): {'exited' if now is None else 'still ' + now} before it could be inspected")
            record(work, 0, f"{name}: process checks passed", False)
            return
        time.sleep(0.001)
    if stop:
        # A short-lived process (the migration Job): held still while it is read. A stop takes
        # effect on the way back to user space, so once it shows, its exec is complete
        # (comm changes before the new environment is in place).
        os.kill(pid, signal.SIGSTOP)
        while Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in "Tt":
            time.sleep(0.001)
    try:
        status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        mountinfo = Path(f"/proc/{pid}/mountinfo").read_text()
    finally:
        if stop:
            os.kill(pid, signal.SIGCONT)
    uids = status["Uid"].split()
    gids = status["Gid"].split()
    groups = sorted(int(g) for g in status["Groups"].split())
    want_groups = [] if sb["RUN_GROUPS"] == "-" else sorted(int(g) for g in str(sb["RUN_GROUPS"]).split(","))
    checks = [
        (uids == [str(sb["RUN_UID"])] * 4, f"Uid {status['Uid'].strip()} (real, effective, saved, fs: {sb['RUN_UID']})"),
        (gids == [str(sb["RUN_GID"])] * 4, f"Gid {status['Gid'].strip()} ({sb['RUN_GID']})"),
        (groups == want_groups, f"Groups {groups} (fsGroup/supplementalGroups {want_groups})"),
    ]
    if sb["DROP_ALL_CAPS"]:
        for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
            checks.append((int(status[cap], 16) == 0, f"{cap} {status[cap].strip()} (drop ALL)"))
    if sb["NO_NEW_PRIVS"]:
        checks.append((status["NoNewPrivs"].strip() == "1", "NoNewPrivs 1 (allowPrivilegeEscalation: false)"))
    # Exactly the planned environment (env -i: nothing of this shell's).
    got = dict(e.decode().split("=", 1) for e in environ if e)
    checks.append((got == p["env"], f"environment: {len(got)} variables, exactly the planned {len(p['env'])}"))
    if got != p["env"]:
        extra = sorted(set(got) - set(p["env"]))
        missing = sorted(set(p["env"]) - set(got))
        print(f"      extra {extra}, missing {missing}")
    # Mounts: what this process may write to.
    writable = []
    root_ro = None
    for line in mountinfo.splitlines():
        f = line.split()
        mp, opts = unescape(f[4]), f[5].split(",")
        if mp == "/":
            root_ro = "ro" in opts
        if "rw" in opts and not (mp == "/proc" or mp.startswith("/proc/") or mp == "/dev" or mp.startswith("/dev/")):
            writable.append(mp)
    want = sorted(m["target"] for m in p["mounts"] if not m["ro"])
    if sb["READONLY_ROOT"]:
        checks.append((root_ro is True, "root filesystem mounted read-only"))
        checks.append((sorted(writable) == want, f"writable mounts (besides /proc, /dev): {sorted(writable)} == the rendered {want}"))
    ok_all = True
    for ok, what in checks:
        print(f"   {'ok  ' if ok else 'FAIL'} {name} (pid {pid}): {what}")
        if not ok:
            FAILURES.append(what)
            ok_all = False
    record(work, sum(1 for ok, _ in checks if ok), f"{name}: process checks passed (UID/GID/groups, capabilities, no_new_privs, exact env, read-only mounts)", ok_all)


# ---- exercise ---------------------------------------------------------------------------


def http(method: str, url: str, body: bytes | None = None, headers: dict | None = None, timeout: float = 30):
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def wait_for(url: str, deadline: float, what: str, pid: int | None = None) -> bool:
    last = ""
    while time.monotonic() < deadline:
        if pid and not Path(f"/proc/{pid}").exists():
            fail(f"{what}: the process (pid {pid}) exited before {url} answered")
            return False
        try:
            code, _, body = http("GET", url, timeout=5)
            if 200 <= code < 400:
                return True
            last = f"{code} {body[:200]!r}"
        except (OSError, urllib.error.URLError) as e:
            last = str(e)
        time.sleep(0.25)
    fail(f"{what}: {url} not ready in time (last: {last})")
    return False


def package_dir(game: Path) -> bytes:
    """Zips a game directory as `kiln-api --demo` does (api/src/demo.rs): no dotfiles, no npm files."""
    skipped = {"node_modules", "package.json", "package-lock.json", "copy-engine.mjs"}
    files = []
    for root, dirs, names in os.walk(game):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in skipped]
        for n in names:
            if not n.startswith(".") and n not in skipped:
                files.append(os.path.relpath(os.path.join(root, n), game).replace(os.sep, "/"))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for rel in sorted(files):
            z.write(game / rel, rel)
    return buf.getvalue()


def exercise(work: Path, repo: Path, which: str) -> None:
    plan_ = json.loads((work / "plan.json").read_text())
    procs = plan_["processes"]
    api, worker = procs["api"], procs["worker"]
    deadline = time.monotonic() + float(os.environ.get("CC_READY_TIMEOUT", "120"))
    if which == "probes":
        pids = dict(a.split("=", 1) for a in sys.argv[5:])
        n = 0
        for proc in ("api", "worker"):
            pid = int(pids[proc]) if proc in pids else None
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                url = procs[proc]["probes"].get(probe)
                if url and wait_for(url, deadline, f"{proc} {probe}", pid):
                    say(f"{proc} {probe}: {url} answers")
                    n += 1
        record(work, n, "rendered probes answering (startup, readiness, liveness)", not FAILURES)
        return
    base = api["env"]["KILN_PUBLIC_URL"]
    content = api["env"]["KILN_CONTENT_URL"]
    admin = (work / "operator" / "admin.token").read_text()
    auth = {"Authorization": f"Bearer {admin}", "content-type": "application/json"}
    code, _, body = http("POST", f"{base}/v1/teams", json.dumps({"name": f"container-check-{secrets.token_hex(4)}"}).encode(), auth)
    if code not in (200, 201):
        fail(f"POST /v1/teams with the admin token: {code} {body[:300]!r}")
        return
    team = json.loads(body)["id"]
    code, _, body = http("POST", f"{base}/v1/teams/{team}/tokens", None, {"Authorization": f"Bearer {admin}"})
    if code not in (200, 201):
        fail(f"POST /v1/teams/{team}/tokens: {code} {body[:300]!r}")
        return
    token = json.loads(body)["token"]
    say(f"team {team} and a team token created with the admin token")
    record(work, 2, "admin API calls (team, token) with the admin token from the Secret")

    game_dir = repo / "examples" / "sample-game"
    if not (game_dir / "vendor").exists():
        fail(f"{game_dir} has no vendor/: run `npm install` there first (.ci/run does)")
        return
    package = package_dir(game_dir)
    game = "sample-game"
    version = f"cc-{time.strftime('%Y%m%d%H%M%S')}"
    code, _, body = http("POST", f"{base}/v1/games/{game}/builds?version={version}", package,
                         {"Authorization": f"Bearer {token}", "content-type": "application/zip",
                          "Idempotency-Key": f"container-check-{version}"}, timeout=120)
    if code != 202:
        fail(f"upload of {game_dir.name} ({len(package)} bytes): {code} {body[:300]!r}")
        return
    accepted = json.loads(body)
    status_url = accepted["status_url"]
    say(f"uploaded {game_dir.name} ({len(package)} bytes zipped): 202, build {accepted['build_id']}")
    if not status_url.startswith(base):
        fail(f"status_url {status_url} is not under KILN_PUBLIC_URL {base}")
        return
    started = time.monotonic()
    publish_deadline = started + float(os.environ.get("CC_PUBLISH_TIMEOUT", "180"))
    status = {}
    # The worker's scratch space while it builds: the emptyDir at KILN_WORK_DIR.
    work_dir = worker["env"].get("KILN_WORK_DIR", "")
    scratch = next((work / m["source"] for m in worker["mounts"] if m["target"] == work_dir), None)
    most = 0
    while time.monotonic() < publish_deadline:
        code, _, body = http("GET", status_url, None, {"Authorization": f"Bearer {token}"})
        status = json.loads(body) if code == 200 else {}
        if status.get("status") in ("published", "failed"):
            break
        if scratch:
            most = max(most, sum(1 for f in scratch.rglob("*") if f.is_file()))
        time.sleep(0.3)
    if status.get("status") != "published":
        fail(f"build {accepted['build_id']} did not publish: {json.dumps(status)[:800]}")
        return
    stages = [s.get("name") for s in status.get("stages", [])]
    say(f"published in {time.monotonic() - started:.1f} s by the worker ({len(stages)} stages: {', '.join(stages)})")
    record(work, 1, f"builds published by the sandboxed worker ({len(stages)} stages)")
    if scratch:
        say(f"the worker's scratch space {work_dir} (emptyDir) held up to {most} files during the build")

    code, headers, body = http("GET", f"{content}/v1/games/{game}/manifest")
    headers = {k.lower(): v for k, v in headers.items()}
    sig = headers.get("kiln-signature", "")
    if code != 200 or not re.search(r"keyid=.+sig=", sig):
        fail(f"manifest from the content origin: {code}, Kiln-Signature {sig!r}")
        return
    manifest = json.loads(body)
    say(f"manifest from the content origin: 200, Kiln-Signature: {sig[:60]}…")
    files = manifest.get("files", [])
    urls = [f["url"] for f in files if f.get("url")]
    bad = [u for u in urls if not u.startswith(content)]
    if not urls or bad:
        fail(f"manifest file URLs not on KILN_CONTENT_URL {content}: {bad[:3]} (of {len(urls)})")
    fetched = 0
    for u in urls[:3]:
        code, _, _ = http("GET", u)
        if code != 200:
            fail(f"GET {u}: {code}")
        else:
            fetched += 1
    code, _, _ = http("GET", f"{content}/v1/keys/trust")
    if code != 200:
        fail(f"trust document from the content origin: {code}")
    record(work, 1, "signed manifests fetched from the content port (Kiln-Signature present)")
    record(work, fetched, "published objects fetched from the content port (/cdn, from the store)", fetched > 0)

    # /metrics on the metrics ports only.
    n = 0
    for proc, port_name, want in (("api", "metrics", 200), ("api", "http", 404), ("api", "content", 404), ("worker", "metrics", 200)):
        url = f"http://127.0.0.1:{procs[proc]['ports'][port_name]}/metrics"
        code, _, body = http("GET", url)
        ok = code == want and (want != 200 or b"kiln_" in body)
        print(f"   {'ok  ' if ok else 'FAIL'} {proc} port {port_name} ({procs[proc]['container_ports'][port_name]} in the pod): GET /metrics -> {code} (want {want})")
        if ok:
            n += 1
        else:
            FAILURES.append(url)
    record(work, n, "/metrics answers: 200 on the metrics ports, 404 on the API and content ports", n == 4)


def main() -> int:
    mode = sys.argv[1]
    if mode == "plan":
        plan(Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]), Path(sys.argv[5]))
    elif mode == "proc":
        check_proc(Path(sys.argv[2]), sys.argv[3], sys.argv[4], "--stop" in sys.argv[5:])
    elif mode == "pg-url":
        # pg-url BASE_URL USER|- DATABASE: the same server, another database, as another role
        # (no password: trust auth on loopback) or, with -, as the base URL's own.
        u = urllib.parse.urlsplit(sys.argv[2])
        host = u.netloc.rsplit("@", 1)[-1]
        user = u.netloc.rsplit("@", 1)[0] + "@" if "@" in u.netloc else ""
        if sys.argv[3] != "-":
            user = f"{sys.argv[3]}@"
        print(urllib.parse.urlunsplit((u.scheme, f"{user}{host}", f"/{sys.argv[4]}", u.query, "")))
    elif mode == "exercise":
        exercise(Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4] if len(sys.argv) > 4 else "all")
    else:
        print(__doc__)
        return 2
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
