//! The Grafana dashboards and alert rules in `dashboards/` query only metrics Kiln exports:
//! every `kiln_…` name in every panel query and alert expression is in the registry
//! (histograms with their `_bucket`/`_sum`/`_count` series).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use kiln_common::metrics;
use regex::Regex;
use serde_json::Value;

fn dashboards_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../dashboards")
}

/// Every `expr` string anywhere in a dashboard (panels, nested rows, template variables'
/// `query` too), with where it was found.
fn queries(value: &Value, at: &str, out: &mut Vec<(String, String)>) {
    match value {
        Value::Object(map) => {
            let here = map
                .get("title")
                .and_then(Value::as_str)
                .map_or(at.to_string(), |t| format!("{at} / {t}"));
            for (key, v) in map {
                match (key.as_str(), v) {
                    ("expr", Value::String(q)) => out.push((here.clone(), q.clone())),
                    ("query", Value::String(q)) if q.contains("kiln_") => {
                        out.push((here.clone(), q.clone()))
                    }
                    ("query", Value::Object(o)) => {
                        if let Some(Value::String(q)) = o.get("query") {
                            out.push((here.clone(), q.clone()));
                        }
                    }
                    _ => queries(v, &here, out),
                }
            }
        }
        Value::Array(list) => list.iter().for_each(|v| queries(v, at, out)),
        _ => {}
    }
}

/// `expr:` values of a Prometheus rules file, single-line or block (`|` / `>`).
fn alert_exprs(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    let mut alert = String::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let trimmed = line.trim_start().trim_start_matches("- ");
        if let Some(name) = trimmed.strip_prefix("alert:") {
            alert = name.trim().to_string();
        }
        if let Some(rest) = trimmed.strip_prefix("expr:") {
            let rest = rest.trim();
            if rest.starts_with('|') || rest.starts_with('>') {
                let indent = line.len() - line.trim_start().len();
                let mut block = String::new();
                while i + 1 < lines.len()
                    && (lines[i + 1].trim().is_empty()
                        || lines[i + 1].len() - lines[i + 1].trim_start().len() > indent)
                {
                    i += 1;
                    block.push_str(lines[i].trim());
                    block.push('\n');
                }
                out.push((alert.clone(), block));
            } else {
                out.push((alert.clone(), rest.trim_matches(['"', '\'']).to_string()));
            }
        }
        i += 1;
    }
    out
}

/// Names in `query` that Kiln does not export.
fn unknown_metrics(query: &str, exported: &BTreeSet<String>) -> Vec<String> {
    let name = Regex::new(r"\bkiln_[a-z0-9_]+").unwrap();
    name.find_iter(query)
        .map(|m| m.as_str().to_string())
        .filter(|n| !exported.contains(n))
        .collect()
}

#[test]
fn every_dashboard_and_alert_names_exported_metrics() {
    let exported: BTreeSet<String> = metrics::catalog().into_iter().collect();
    assert!(exported.contains("kiln_decode_duration_seconds_bucket"));
    assert!(exported.contains("kiln_preheat_outcomes_total"));
    // The checker itself: a misspelt name is caught.
    assert_eq!(
        unknown_metrics("sum(rate(kiln_preheat_outcome_total[5m]))", &exported),
        ["kiln_preheat_outcome_total"]
    );

    let mut checked = 0;
    let mut problems = Vec::new();
    let mut uids = BTreeSet::new();
    for entry in std::fs::read_dir(dashboards_dir()).unwrap() {
        let path = entry.unwrap().path();
        let file = path.file_name().unwrap().to_string_lossy().to_string();
        let found = match path.extension().and_then(|e| e.to_str()) {
            Some("json") => {
                let text = std::fs::read_to_string(&path).unwrap();
                let dashboard: Value = serde_json::from_str(&text)
                    .unwrap_or_else(|e| panic!("{file} is not valid JSON: {e}"));
                uids.insert(dashboard["uid"].as_str().unwrap_or_default().to_string());
                // Every panel with a data source has at least one query.
                let panels = all_panels(&dashboard);
                assert!(!panels.is_empty(), "{file}: no panels");
                for p in &panels {
                    if p["type"] != "row" && p["type"] != "text" {
                        let targets = p["targets"].as_array().map_or(0, Vec::len);
                        assert!(targets > 0, "{file}: panel {:?} has no query", p["title"]);
                    }
                }
                let mut found = Vec::new();
                queries(&dashboard, &file, &mut found);
                found
            }
            Some("yml") | Some("yaml") => alert_exprs(&std::fs::read_to_string(&path).unwrap())
                .into_iter()
                .map(|(alert, q)| (format!("{file} / {alert}"), q))
                .collect(),
            _ => continue,
        };
        for (at, query) in found {
            checked += 1;
            let unknown = unknown_metrics(&query, &exported);
            if !unknown.is_empty() {
                problems.push(format!("{at}: {unknown:?} in {query}"));
            }
            if !query.contains("kiln_") && !query.contains("$__") && !query.trim().is_empty() {
                // Template variables may list label values of a kiln metric only.
                problems.push(format!("{at}: names no Kiln metric: {query}"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    for uid in [
        "kiln-prewarm",
        "kiln-decode",
        "kiln-library",
        "kiln-pipeline",
    ] {
        assert!(uids.contains(uid), "no dashboard with uid {uid}: {uids:?}");
    }
    assert!(checked > 40, "only {checked} queries found");
    let alerts =
        alert_exprs(&std::fs::read_to_string(dashboards_dir().join("alerts.yml")).unwrap());
    assert!(alerts.len() >= 5, "{alerts:?}");
    println!(
        "{checked} queries checked against {} exported series",
        exported.len()
    );
}

fn all_panels(dashboard: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    let mut stack: Vec<Value> = dashboard["panels"].as_array().cloned().unwrap_or_default();
    while let Some(p) = stack.pop() {
        if let Some(inner) = p["panels"].as_array() {
            stack.extend(inner.iter().cloned());
        }
        out.push(p);
    }
    out
}
