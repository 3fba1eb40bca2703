// The chart's checks that need npm packages (run by .ci/chart-check):
//
//   node check-schemas.mjs NODE_DIR DASHBOARDS_DIR CUSTOM_DIR SCHEMA_CACHE COUNTS_OUT
//
// Grafana dashboards. @grafana/schema ships TypeScript types only (no JSON Schema), so the
// JSON Schema is generated from them here with ts-json-schema-generator (cached per version),
// with `additionalProperties: false` wherever the types name their fields, and every
// dashboard is validated with Ajv against it: the `Dashboard` type for both Grafana versions
// the dashboards claim (the oldest they support and the newest @grafana/schema), and each
// panel's `options` and `fieldConfig.defaults.custom` against its panel plugin's `Options`
// and `FieldConfig` types (required fields left out: Grafana fills in a panel's defaults).
// Also: no `__inputs` (import placeholders that file provisioning cannot fill), and every
// Prometheus query goes through the `datasource` template variable.
//
// Custom resources the chart renders (ServiceMonitor, PodMonitor, PrometheusRule,
// ScaledObject, TriggerAuthentication), which kubernetes-validate has no schema for: each is
// validated by its @kubernetes-models class (Ajv, compiled from the operator's CRD OpenAPI
// schema: types, enums, patterns, required fields) and, strictly, against a JSON Schema
// generated from the same package's TypeScript interface (unknown fields are errors, as a
// server with strict field validation treats them).
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

const [nodeDir, dashboardsDir, customDir, cacheDir, countsOut] = process.argv.slice(2);
const require = createRequire(path.join(nodeDir, "package.json"));
const Ajv = require("ajv");
const { createGenerator } = require("ts-json-schema-generator");

const counts = {};
const failures = [];
const count = (key, n = 1) => (counts[key] = (counts[key] || 0) + n);
const fail = (message) => {
  failures.push(message);
  console.log(`FAIL ${message}`);
};
const modules = path.join(nodeDir, "node_modules");
const version = (pkg) => JSON.parse(fs.readFileSync(path.join(modules, pkg, "package.json"))).version;
fs.mkdirSync(cacheDir, { recursive: true });

// A JSON Schema for `type` in the declaration file `file` (resolved with `paths`), cached.
function schemaFor(key, file, type, paths = {}) {
  const cached = path.join(cacheDir, `${key}.json`);
  if (fs.existsSync(cached)) return JSON.parse(fs.readFileSync(cached));
  // `paths` resolves a package's own `@grafana/schema` imports to the version under test;
  // the ESM-only @kubernetes-models packages need Node's module resolution.
  const compilerOptions = Object.keys(paths).length
    ? { baseUrl: modules, paths, module: "commonjs", moduleResolution: "node" }
    : { module: "nodenext", moduleResolution: "nodenext" };
  const tsconfig = path.join(cacheDir, `${key}.tsconfig.json`);
  fs.writeFileSync(tsconfig, JSON.stringify({ compilerOptions: { ...compilerOptions, skipLibCheck: true, strict: true }, files: [file] }));
  const schema = createGenerator({ path: file, type, tsconfig, skipTypeCheck: true, expose: "none", topRef: true, additionalProperties: false }).createSchema(type);
  fs.writeFileSync(cached, JSON.stringify(schema));
  return schema;
}

function withoutRequired(schema) {
  if (Array.isArray(schema)) schema.forEach(withoutRequired);
  else if (schema && typeof schema === "object") {
    delete schema.required;
    Object.values(schema).forEach(withoutRequired);
  }
  return schema;
}

const ajv = new Ajv({ allErrors: true, strict: false });
const explain = (errors) =>
  (errors || [])
    .slice(0, 8)
    .map((e) => `${e.instancePath || "/"} ${e.message}${e.params?.additionalProperty ? ` (${e.params.additionalProperty})` : ""}${e.params?.allowedValues ? ` ${JSON.stringify(e.params.allowedValues)}` : ""}`)
    .join("; ");

// ---- Grafana dashboards ---------------------------------------------------------------
const find = (dir, test) => {
  const out = [];
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) out.push(...find(full, test));
    else if (test(full)) out.push(full);
  }
  return out;
};
const grafanaPackages = ["grafana-schema-10.4", "@grafana/schema"];
const dashboards = fs
  .readdirSync(dashboardsDir)
  .filter((f) => f.endsWith(".json"))
  .map((f) => ({ file: f, json: JSON.parse(fs.readFileSync(path.join(dashboardsDir, f))) }));
if (!dashboards.length) fail(`no dashboards in ${dashboardsDir}`);

function allPanels(dashboard) {
  const out = [];
  const stack = [...(dashboard.panels || [])];
  while (stack.length) {
    const p = stack.pop();
    out.push(p);
    stack.push(...(p.panels || []));
  }
  return out;
}

// Provisioning-ready: no import placeholders, one datasource variable everything uses.
for (const { file, json } of dashboards) {
  const text = JSON.stringify(json);
  for (const key of ["__inputs", "__requires", "__elements"]) if (key in json) fail(`${file}: has ${key} (file provisioning cannot fill it)`);
  if (/\$\{DS_[A-Z_]+\}/.test(text)) fail(`${file}: names an import placeholder \${DS_…}`);
  const variable = (json.templating?.list || []).find((v) => v.name === "datasource");
  if (!variable || variable.type !== "datasource" || variable.query !== "prometheus") fail(`${file}: no datasource variable of type datasource for prometheus`);
  let refs = 0;
  const walk = (node, where) => {
    if (Array.isArray(node)) return node.forEach((n) => walk(n, where));
    if (!node || typeof node !== "object") return;
    if (node.datasource && typeof node.datasource === "object" && node.datasource.type === "prometheus") {
      refs++;
      if (node.datasource.uid !== "${datasource}") fail(`${file}: ${where}: datasource uid ${node.datasource.uid}, not \${datasource}`);
    }
    for (const [k, v] of Object.entries(node)) walk(v, node.title ? `${where} / ${node.title}` : where);
  };
  walk(json, file);
  if (!refs) fail(`${file}: no Prometheus query`);
  count("dashboard datasource references through ${datasource}", refs);
  count("dashboards without __inputs, with a datasource variable");
}

for (const pkg of grafanaPackages) {
  const dir = path.join(modules, pkg);
  const v = version(pkg);
  const index = find(path.join(dir, "dist"), (f) => /dist\/(types|esm)\/index\.d\.ts$/.test(f)).sort((a, b) => a.length - b.length)[0];
  const paths = { "@grafana/schema": [path.relative(modules, index)] };
  const key = `grafana-${v}`;
  const validateDashboard = ajv.compile(schemaFor(`${key}-Dashboard`, index, "Dashboard", paths));
  const panelTypes = new Set(dashboards.flatMap(({ json }) => allPanels(json).map((p) => p.type)).filter((t) => t !== "row"));
  const panelValidators = {};
  for (const type of panelTypes) {
    const decl = find(path.join(dir, "dist"), (f) => f.includes(`/raw/composable/${type}/panelcfg/`) && f.endsWith(".d.ts"))[0];
    if (!decl) {
      fail(`@grafana/schema ${v} has no panel config types for panel type ${type}`);
      continue;
    }
    const source = fs.readFileSync(decl, "utf8");
    panelValidators[type] = {};
    for (const t of ["Options", "FieldConfig"]) {
      if (!new RegExp(`export interface ${t}\\b`).test(source)) continue;
      panelValidators[type][t] = ajv.compile(withoutRequired(schemaFor(`${key}-${type}-${t}`, decl, t, paths)));
    }
  }
  // The checker itself: a misspelt field is caught, in the dashboard and in a panel's options.
  const broken = structuredClone(dashboards[0].json);
  broken.titel = broken.title;
  if (validateDashboard(broken)) fail(`@grafana/schema ${v}: a dashboard with a misspelt field passed`);
  else count("checker self-tests (a misspelt field is caught)");
  const timeseries = panelValidators.timeseries?.Options;
  if (timeseries) {
    if (timeseries({ legend: { showLegnd: true } })) fail(`@grafana/schema ${v}: a misspelt timeseries option passed`);
    else count("checker self-tests (a misspelt field is caught)");
  }
  for (const { file, json } of dashboards) {
    if (validateDashboard(json)) count(`dashboards valid against @grafana/schema ${v} Dashboard`);
    else fail(`${file}: not a @grafana/schema ${v} Dashboard: ${explain(validateDashboard.errors)}`);
    for (const panel of allPanels(json)) {
      if (panel.type === "row") continue;
      const checks = [
        ["Options", panel.options || {}],
        ["FieldConfig", panel.fieldConfig?.defaults?.custom || {}],
      ];
      for (const [t, value] of checks) {
        const validate = panelValidators[panel.type]?.[t];
        if (!validate) continue;
        if (validate(value)) count(`panel ${t === "Options" ? "options" : "field configs"} valid against @grafana/schema ${v}`);
        else fail(`${file}: panel "${panel.title}" (${panel.type}) ${t}: ${explain(validate.errors)} (@grafana/schema ${v})`);
      }
    }
  }
}

// ---- Custom resources ------------------------------------------------------------------
const models = {
  "monitoring.coreos.com/v1": { pkg: "@kubernetes-models/prometheus-operator", dir: "monitoring.coreos.com/v1" },
  "keda.sh/v1alpha1": { pkg: "@kubernetes-models/keda", dir: "keda.sh/v1alpha1" },
};
const strict = {};
let customFiles = 0;
for (const file of fs.readdirSync(customDir).filter((f) => f.endsWith(".json"))) {
  customFiles++;
  for (const { values, template, object } of JSON.parse(fs.readFileSync(path.join(customDir, file)))) {
    const where = `${values}: ${template}: ${object.kind} ${object.metadata?.name}`;
    const model = models[object.apiVersion];
    if (!model) {
      fail(`${where}: no schema for ${object.apiVersion}`);
      continue;
    }
    // ESM-only packages: imported by file, from the tools' node_modules.
    const mod = await import(pathToFileURL(path.join(modules, model.pkg, model.dir, `${object.kind}.js`)).href);
    const Model = mod[object.kind];
    try {
      new Model(object).validate();
      count(`custom resources valid against their CRD schema (${object.kind})`);
    } catch (e) {
      fail(`${where}: ${e.message}`);
    }
    const key = `${object.apiVersion}/${object.kind}`;
    if (!strict[key]) {
      const decl = path.join(modules, model.pkg, model.dir, `${object.kind}.d.ts`);
      strict[key] = ajv.compile(schemaFor(`${model.pkg.replace(/[@/]/g, "_")}-${version(model.pkg)}-${object.kind}`, decl, `I${object.kind}`));
    }
    if (strict[key](object)) count(`custom resources with no unknown field (${object.kind})`);
    else fail(`${where}: ${explain(strict[key].errors)}`);
  }
}
if (!customFiles) fail(`no rendered custom resources in ${customDir}`);
// The checker itself: an unknown field and a wrong type are caught.
{
  const { ServiceMonitor } = await import(pathToFileURL(path.join(modules, models["monitoring.coreos.com/v1"].pkg, "monitoring.coreos.com/v1", "ServiceMonitor.js")).href);
  const good = { apiVersion: "monitoring.coreos.com/v1", kind: "ServiceMonitor", metadata: { name: "x" }, spec: { selector: {}, endpoints: [{ port: "metrics" }] } };
  const unknown = structuredClone(good);
  unknown.spec.endpoints[0].prot = "metrics";
  const wrongType = structuredClone(good);
  wrongType.spec.endpoints[0].port = 9090;
  const strictCheck = strict["monitoring.coreos.com/v1/ServiceMonitor"];
  if (!strictCheck || !strictCheck(good) || strictCheck(unknown)) fail("the strict custom resource check does not catch an unknown field");
  else count("checker self-tests (a misspelt field is caught)");
  let threw = false;
  try {
    new ServiceMonitor(wrongType).validate();
  } catch {
    threw = true;
  }
  if (!threw) fail("the CRD schema check does not catch a wrong type");
  else count("checker self-tests (a misspelt field is caught)");
}

fs.writeFileSync(countsOut, JSON.stringify(counts));
for (const [k, n] of Object.entries(counts)) console.log(`  ${String(n).padStart(5)}  ${k}`);
process.exit(failures.length ? 1 : 0);
