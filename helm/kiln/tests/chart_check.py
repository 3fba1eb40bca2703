"""The chart's offline checks that need Helm (run by .ci/chart-check, in its venv).

    python chart_check.py helm REPO WORK KUBE_OLDEST KUBE_NEWEST
    python chart_check.py alerts RULES_FILE TESTS_FILE

`helm` lints (strict) and renders the chart for every helm/kiln/ci/*-values.yaml, with the
Helm v4 Go library that helm-python-sdk binds (the same code as `helm lint --strict` and
`helm template`); asserts that every values file under tests/invalid/ fails with the message
its first line names; packages the chart and renders the package; checks that the schema
declares every value and values.yaml documents every declared one, and that dashboards/
links to the chart's files. It writes what the other tools check into WORK:
  manifests/<values>/*.yaml   built-in Kubernetes objects, one per file (kubernetes-validate)
  custom/<values>.json        custom resources (ServiceMonitor, PodMonitor, PrometheusRule,
                              ScaledObject, TriggerAuthentication) for check-schemas.mjs
  rules/<values>.yml          each rendered PrometheusRule's spec, for promtool
  counts.json                 what was checked, for the summary

`alerts` checks that the promtool unit tests cover every alert of the rules file with at
least one case where it fires and one where it does not.

Every failure is printed and makes the exit status 1.
"""

from __future__ import annotations

import copy
import io
import json
import os
import re
import sys
import tarfile
from pathlib import Path

import yaml

FAILURES: list[str] = []
PRINTED: set[str] = set()
COUNTS: dict[str, int] = {}

CUSTOM_KINDS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PodMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
    ("keda.sh/v1alpha1", "ScaledObject"),
    ("keda.sh/v1alpha1", "TriggerAuthentication"),
}


# Kiln settings the chart renders only when their value is set: (component, values path).
OPTIONAL_SETTINGS = {
    "KILN_S3_REGION": ("both", "config.s3.region"),
    "KILN_S3_PATH_STYLE": ("both", "config.s3.pathStyle"),
    "KILN_LOG_JSON": ("both", "config.logJson"),
    "KILN_UPLOAD_MAX_BYTES": ("api", "api.uploadMaxBytes"),
    "KILN_UPLOAD_MAX_CONCURRENT": ("api", "api.uploadMaxConcurrent"),
    "KILN_UPLOAD_TIMEOUT_SECS": ("api", "api.uploadTimeoutSecs"),
    "KILN_REQUEST_TIMEOUT_SECS": ("api", "api.requestTimeoutSecs"),
    "KILN_WORKER_CONCURRENCY": ("worker", "worker.concurrency"),
    "KILN_WORKER_HEARTBEAT_SECS": ("worker", "worker.heartbeatSecs"),
    "KILN_WORKER_ORPHAN_SECS": ("worker", "worker.orphanSecs"),
    "KILN_TELEMETRY_ACK": ("api", "api.telemetryAck"),
    "KILN_WORKER_TRANSIENT_RETRIES": ("worker", "worker.transientRetries"),
    "KILN_UNPACK_MAX_ENTRIES": ("worker", "worker.unpackMaxEntries"),
    "KILN_UNPACK_MAX_BYTES": ("worker", "worker.unpackMaxBytes"),
    "KILN_UNPACK_MAX_RATIO": ("worker", "worker.unpackMaxRatio"),
}


def fail(message: str) -> None:
    FAILURES.append(message)
    print(f"FAIL {message}")


def count(key: str, n: int = 1) -> None:
    COUNTS[key] = COUNTS.get(key, 0) + n


def merge(base: dict, override: dict) -> dict:
    """`helm -f base -f override`: maps merge key by key, anything else replaces (a null
    stays, and Helm then drops the key, as it does for -f files)."""
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def load_values(path: Path) -> dict:
    return yaml.safe_load(path.read_text()) or {}


def lint(helm, chart: Path, name: str, values: dict, kube: str) -> None:
    report = helm.lint(str(chart), values, strict=True, kube_version=f"v{kube}", namespace="kiln")
    count("helm lint --strict runs")
    problems = [m for m in report["messages"] if m["severity"] >= 2] + [
        {"path": "", "error": e} for e in report["errors"]
    ]
    for m in problems:
        fail(f"helm lint --strict ({name}, Kubernetes {kube}): {m['path']}: {m['error'].strip()}")
    for m in report["messages"]:
        line = f"     lint info: {m['path']}: {m['error']}"
        if m["severity"] == 1 and line not in PRINTED:
            PRINTED.add(line)
            print(line)


def documents(rendered: dict[str, str]):
    """Every object of a render, with the template it came from (NOTES.txt left out)."""
    for template, text in sorted(rendered.items()):
        if template.endswith("NOTES.txt") or not text.strip():
            continue
        for doc in yaml.safe_load_all(text):
            if doc is not None:
                yield template, doc


def check_render(helm, chart_dir: Path, work: Path, name: str, values: dict) -> None:
    with helm.Chart.load(str(chart_dir)) as chart:
        try:
            rendered = chart.render(values, name="kiln", namespace="kiln", is_install=True)
        except helm.HelmError as e:
            fail(f"helm template ({name}): {e}")
            return
    count("helm template renders")
    notes = next((t for k, t in rendered.items() if k.endswith("NOTES.txt")), "")
    if "Database connections:" not in notes:
        fail(f"NOTES.txt ({name}) does not state the connection budget")
    out = work / "manifests" / name
    out.mkdir(parents=True, exist_ok=True)
    custom = []
    kinds: dict[str, int] = {}
    for n, (template, doc) in enumerate(documents(rendered)):
        kind, api = doc.get("kind"), doc.get("apiVersion")
        if not kind or not api:
            fail(f"{name}: {template}: an object without kind/apiVersion")
            continue
        kinds[kind] = kinds.get(kind, 0) + 1
        count("objects rendered")
        if (api, kind) in CUSTOM_KINDS:
            custom.append({"values": name, "template": template, "object": doc})
            if kind == "PrometheusRule":
                rules = work / "rules"
                rules.mkdir(exist_ok=True)
                (rules / f"{name}.yml").write_text(yaml.safe_dump(doc["spec"], sort_keys=False))
        else:
            meta = doc.get("metadata", {})
            (out / f"{n:03d}-{kind}-{meta.get('name', 'unnamed')}.yaml").write_text(
                yaml.safe_dump(doc, sort_keys=False)
            )
        if kind == "ConfigMap" and "grafana_dashboard" in json.dumps(doc["metadata"].get("labels", {})):
            for key, text in doc["data"].items():
                source = chart_dir / "files" / "dashboards" / key
                if json.loads(text) != json.loads(source.read_text()):
                    fail(f"{name}: ConfigMap {doc['metadata']['name']}: {key} differs from {source}")
                if len(text.encode()) > 1024 * 1024 - 4096:
                    fail(f"{name}: ConfigMap {doc['metadata']['name']} is too large for a ConfigMap")
                count("dashboard ConfigMaps checked against files/dashboards")
    (work / "custom").mkdir(exist_ok=True)
    (work / "custom" / f"{name}.json").write_text(json.dumps(custom))
    print(f"  ok helm template {name}: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))
    effective = merge(load_values(chart_dir / "values.yaml"), values)
    check_objects(name, effective, [doc for _, doc in documents(rendered)])


def env_of(container: dict) -> dict[str, str | None]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def check_objects(name: str, values: dict, docs: list[dict]) -> None:
    """What the chart promises about the objects, beyond their schemas."""
    by_kind: dict[str, list[dict]] = {}
    for doc in docs:
        by_kind.setdefault(doc["kind"], []).append(doc)
    pods = []
    for doc in by_kind.get("Deployment", []) + by_kind.get("Job", []):
        pods.append((doc["metadata"]["name"], doc["spec"]["template"]["spec"]))
    pods += [(doc["metadata"]["name"], doc["spec"]) for doc in by_kind.get("Pod", [])]
    for pod_name, spec in pods:
        sc = spec.get("securityContext", {})
        if sc.get("runAsNonRoot") is not True or sc.get("runAsUser") != 10001:
            fail(f"{name}: {pod_name}: pod securityContext must run as non-root UID 10001: {sc}")
        for c in spec["containers"]:
            csc = c.get("securityContext", {})
            if csc.get("readOnlyRootFilesystem") is not True:
                fail(f"{name}: {pod_name}/{c['name']}: root filesystem must be read-only")
            names = [e["name"] for e in c.get("env", [])]
            dupes = {n for n in names if names.count(n) > 1}
            if dupes:
                fail(f"{name}: {pod_name}/{c['name']}: environment variables set twice: {dupes}")
        count("pod specs checked (non-root, read-only root, no duplicate env)")
    ingress = values.get("ingress", {}).get("enabled")
    migration = values.get("migration", {}).get("enabled", True)
    for doc in by_kind.get("Deployment", []):
        component = doc["metadata"]["labels"]["app.kubernetes.io/component"]
        spec = doc["spec"]["template"]["spec"]
        c = spec["containers"][0]
        env = env_of(c)
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        if "metrics" not in ports:
            fail(f"{name}: {doc['metadata']['name']}: no metrics container port")
        if (env.get("KILN_MIGRATE_ON_START") == "false") != bool(migration):
            fail(f"{name}: {doc['metadata']['name']}: KILN_MIGRATE_ON_START must be false exactly when the migration Job runs")
        if "KILN_DB_MAX_CONNECTIONS" not in env:
            fail(f"{name}: {doc['metadata']['name']}: KILN_DB_MAX_CONNECTIONS not set")
        if component == "api":
            if env.get("KILN_METRICS_BIND") != f"0.0.0.0:{ports['metrics']}":
                fail(f"{name}: KILN_METRICS_BIND does not name the metrics port: {env.get('KILN_METRICS_BIND')}")
            header = values.get("config", {}).get("telemetryClientIpHeader")
            if ingress and header is None and env.get("KILN_TELEMETRY_CLIENT_IP_HEADER") != "X-Forwarded-For":
                fail(f"{name}: the Ingress is on but KILN_TELEMETRY_CLIENT_IP_HEADER is {env.get('KILN_TELEMETRY_CLIENT_IP_HEADER')}")
        if component == "worker":
            work_dir = env.get("KILN_WORK_DIR")
            mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
            volumes = {v["name"]: v for v in spec["volumes"]}
            volume = volumes.get(mounts.get(work_dir, ""), {})
            if "sizeLimit" not in volume.get("emptyDir", {}):
                fail(f"{name}: the worker's KILN_WORK_DIR {work_dir} is not an emptyDir with a sizeLimit")
            storage = c.get("resources", {})
            if not all("ephemeral-storage" in storage.get(k, {}) for k in ("requests", "limits")):
                fail(f"{name}: the worker has no ephemeral-storage request and limit")
        # A Kiln setting is rendered exactly when its value is set: unset leaves the code's
        # default (the chart copies none).
        for var, (where, path) in OPTIONAL_SETTINGS.items():
            if where != component and where != "both":
                continue
            node = values
            for part in path.split("."):
                node = node.get(part) if isinstance(node, dict) else None
            if (node is not None) != (var in env):
                fail(f"{name}: {doc['metadata']['name']}: {var} is {'not ' if var not in env else ''}rendered but {path} is {node!r}")
            count("optional Kiln settings checked (rendered only when set)")
        count("Deployments checked (metrics port, migration, pool, scratch space)")
    for doc in by_kind.get("Ingress", []):
        for rule in doc["spec"]["rules"]:
            for path in rule["http"]["paths"]:
                port = path["backend"]["service"]["port"].get("name")
                if port not in ("http", "content"):
                    fail(f"{name}: the Ingress routes {rule['host']} to port {port}")
        hosts = [r["host"] for r in doc["spec"]["rules"]]
        if len(hosts) != 2:
            fail(f"{name}: the Ingress must expose the API and content hosts: {hosts}")
        count("Ingresses checked (API and content hosts only, never metrics)")
    for doc in by_kind.get("Service", []):
        if doc["metadata"]["labels"].get("app.kubernetes.io/component") == "api":
            if any(p.get("targetPort") == "metrics" for p in doc["spec"]["ports"]):
                fail(f"{name}: the API Service (and so the Ingress) carries the metrics port")
    hooks = [d for d in docs if "helm.sh/hook" in d["metadata"].get("annotations", {})]
    if migration:
        job = [d for d in hooks if d["kind"] == "Job"]
        if not job or job[0]["metadata"]["annotations"]["helm.sh/hook"] != "pre-install,pre-upgrade":
            fail(f"{name}: no pre-install/pre-upgrade migration Job")
        elif job[0]["spec"]["template"]["spec"]["containers"][0]["command"][-1] != "migrate":
            fail(f"{name}: the migration Job does not run `kiln-api migrate`")
    if values.get("tests", {}).get("enabled", True):
        if not [d for d in hooks if d["metadata"]["annotations"]["helm.sh/hook"] == "test"]:
            fail(f"{name}: no helm test Pod")


def check_invalid(helm, chart_dir: Path, base: dict, cases: list[Path]) -> None:
    with helm.Chart.load(str(chart_dir)) as chart:
        for case in cases:
            first = case.read_text().splitlines()[0]
            m = re.match(r"#\s*expect:\s*(.+)$", first)
            if not m:
                fail(f"{case.name}: the first line must be '# expect: <part of the error>'")
                continue
            expected = m.group(1).strip()
            values = merge(base, load_values(case))
            try:
                chart.render(values, name="kiln", namespace="kiln", is_install=True)
            except helm.HelmError as e:
                if expected in str(e):
                    count("invalid values files refused")
                    print(f"  ok refused {case.name}: {expected}")
                else:
                    fail(f"{case.name}: failed, but not with '{expected}': {e}")
                continue
            fail(f"{case.name}: rendered, but must fail with '{expected}'")
        # `helm lint` refuses a typo too (the schema is checked there as well).
        typo = next((c for c in cases if c.name == "typo-values.yaml"), None)
        if typo:
            report = helm.lint(str(chart_dir), merge(base, load_values(typo)), strict=True)
            if not any("replicass" in e for e in report["errors"]):
                fail(f"helm lint accepted {typo.name}")
            else:
                count("invalid values files refused by helm lint")


def schema_paths(schema: dict, root: dict, prefix: str = "") -> set[str]:
    """Dotted paths of every property the schema declares inline (the chart's own values;
    a property whose schema is a shared definition stops there)."""
    out = set()
    node = schema
    if "$ref" in node or "allOf" in node:
        # A shared definition (resources, probes, a Kubernetes type): its own keys are the
        # definition's, not values the chart documents one by one.
        return out
    for key, sub in node.get("properties", {}).items():
        path = f"{prefix}{key}"
        out.add(path)
        out |= schema_paths(sub, root, path + ".")
    return out


def value_paths(values: dict, prefix: str = "") -> set[str]:
    out = set()
    for key, value in values.items():
        path = f"{prefix}{key}"
        out.add(path)
        if isinstance(value, dict) and value:
            out |= value_paths(value, path + ".")
    return out


def check_schema_coverage(chart_dir: Path) -> None:
    schema = json.loads((chart_dir / "values.schema.json").read_text())
    values = load_values(chart_dir / "values.yaml")
    declared = schema_paths(schema, schema) - {"global"}
    present = value_paths(values)
    # Leaves of free maps in values.yaml (resources, strategy, probes) are covered by their
    # definitions; compare paths down to the depth the schema names properties.
    for path in sorted(present):
        parent = path.rsplit(".", 1)[0] if "." in path else ""
        if path not in declared and (parent == "" or parent in declared):
            # A key the schema does not name under a parent it describes property by property.
            node = schema
            ok = True
            for part in path.split("."):
                if "$ref" in node:
                    node = schema["definitions"][node["$ref"].split("/")[-1]]
                if "allOf" in node:
                    node = node["allOf"][0]
                    if "$ref" in node:
                        node = schema["definitions"][node["$ref"].split("/")[-1]]
                props = node.get("properties")
                if props is None:
                    break
                if part not in props:
                    ok = False
                    break
                node = props[part]
            if not ok:
                fail(f"values.yaml sets {path}, which values.schema.json does not declare")
    for path in sorted(declared):
        if path not in present:
            fail(f"values.schema.json declares {path}, which values.yaml does not set (document it there)")
    count("values declared in values.schema.json and documented in values.yaml", len(declared))
    # README.md's values table names every value (the leaves; a shared definition's own
    # fields, such as secrets.database.name, may stand for it).
    readme = (chart_dir / "README.md").read_text()
    leaves = [p for p in declared if not any(q.startswith(p + ".") for q in declared)]
    for path in sorted(leaves):
        if f"`{path}`" not in readme and f"`{path}." not in readme:
            fail(f"README.md's values table does not list {path}")
        else:
            count("values listed in README.md")

    def closed(node, where):
        if "$ref" in node:
            return
        for sub in node.get("allOf", []):
            closed(sub, where)
        if node.get("type") == "object" and "properties" in node:
            if node.get("additionalProperties") is not False:
                fail(f"values.schema.json: {where} does not set additionalProperties: false")
            count("schema objects closed with additionalProperties: false")
        for key, sub in node.get("properties", {}).items():
            closed(sub, f"{where}.{key}")
        if isinstance(node.get("items"), dict):
            closed(node["items"], f"{where}[]")

    closed(schema, "(root)")
    for key, sub in schema["definitions"].items():
        closed(sub, f"definitions.{key}")


def check_links(repo: Path, chart_dir: Path) -> None:
    """dashboards/ holds links to the chart's files (the chart is their home: `helm package`
    takes files, not links that point outside the chart)."""
    files = chart_dir / "files"
    expected = [files / "alerts.yml"] + sorted((files / "dashboards").glob("*.json"))
    for target in expected:
        link = repo / "dashboards" / target.name
        if not link.is_symlink():
            fail(f"{link} must be a symbolic link to {target.relative_to(repo)}")
        elif link.resolve() != target.resolve():
            fail(f"{link} points at {os.readlink(link)}, not at {target.relative_to(repo)}")
        else:
            count("dashboards/ links resolving into helm/kiln/files")
    for path in (repo / "dashboards").iterdir():
        if path.suffix in (".json", ".yml", ".yaml") and not path.is_symlink():
            fail(f"{path} is a file of its own: move it to helm/kiln/files and link it")


def check_package(helm, chart_dir: Path, work: Path, values: dict) -> None:
    archive = Path(helm.package(str(chart_dir), destination=str(work)))
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    for needed in ["kiln/files/alerts.yml", "kiln/values.schema.json", "kiln/templates/tests/test-connection.yaml"] + [
        f"kiln/files/dashboards/{p.name}" for p in (chart_dir / "files" / "dashboards").glob("*.json")
    ]:
        if needed not in names:
            fail(f"helm package: {archive.name} lacks {needed}")
    for unwanted in [n for n in names if n.startswith("kiln/tests/")]:
        fail(f"helm package: {archive.name} carries {unwanted} (.helmignore)")
    with helm.Chart.load(str(archive)) as packaged, helm.Chart.load(str(chart_dir)) as source:
        a = packaged.render(values, name="kiln", namespace="kiln", is_install=True)
        b = source.render(values, name="kiln", namespace="kiln", is_install=True)
        if a != b:
            fail("the packaged chart renders differently from the chart directory")
    count("packaged charts rendered")
    print(f"  ok helm package: {archive.name}, {len(names)} files, renders as the directory does")


def helm_checks(repo: Path, work: Path, oldest: str, newest: str) -> None:
    import helm_python as helm

    chart_dir = repo / "helm" / "kiln"
    print(f"  Helm library {helm.helm_sdk_version()} (helm-python-sdk {helm.__version__})")
    ci = sorted((chart_dir / "ci").glob("*-values.yaml"))
    if not any(p.name == "default-values.yaml" for p in ci):
        fail("helm/kiln/ci/default-values.yaml is missing")
    for path in ci:
        name = path.name.removesuffix("-values.yaml")
        values = load_values(path)
        for kube in (oldest, newest):
            lint(helm, chart_dir, name, values, kube)
        check_render(helm, chart_dir, work, name, values)
    base = load_values(chart_dir / "ci" / "default-values.yaml")
    check_invalid(helm, chart_dir, base, sorted((chart_dir / "tests" / "invalid").glob("*.yaml")))
    check_schema_coverage(chart_dir)
    check_links(repo, chart_dir)
    check_package(helm, chart_dir, work, base)


def alert_checks(rules_file: Path, tests_file: Path) -> None:
    rules = yaml.safe_load(rules_file.read_text())
    alerts = [r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r]
    tests = yaml.safe_load(tests_file.read_text())
    fires: dict[str, int] = {}
    silent: dict[str, int] = {}
    for test in tests.get("tests", []):
        for case in test.get("alert_rule_test", []):
            target = fires if case.get("exp_alerts") else silent
            target[case["alertname"]] = target.get(case["alertname"], 0) + 1
    for alert in alerts:
        if not fires.get(alert):
            fail(f"{tests_file.name}: no case where {alert} fires")
        if not silent.get(alert):
            fail(f"{tests_file.name}: no case where {alert} stays silent")
    unknown = (set(fires) | set(silent)) - set(alerts)
    for name in sorted(unknown):
        fail(f"{tests_file.name}: tests an alert that {rules_file.name} does not define: {name}")
    COUNTS["alerts in the rules file"] = len(alerts)
    COUNTS["alerts with a firing and a silent unit test"] = sum(
        1 for a in alerts if fires.get(a) and silent.get(a)
    )
    COUNTS["alert unit test cases (firing)"] = sum(fires.values())
    COUNTS["alert unit test cases (silent)"] = sum(silent.values())


def main() -> int:
    mode = sys.argv[1]
    if mode == "helm":
        repo, work = Path(sys.argv[2]), Path(sys.argv[3])
        helm_checks(repo, work, sys.argv[4], sys.argv[5])
        (work / "counts.json").write_text(json.dumps(COUNTS))
    elif mode == "alerts":
        alert_checks(Path(sys.argv[2]), Path(sys.argv[3]))
        out = Path(sys.argv[4]) if len(sys.argv) > 4 else None
        if out:
            out.write_text(json.dumps(COUNTS))
    else:
        print(__doc__)
        return 2
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
