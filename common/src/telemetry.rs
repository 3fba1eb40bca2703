//! Loader beacons: what a `POST /v1/telemetry` body may hold, validated per event.
//!
//! A beacon is `{"events": [...]}` (JSON, or the same text as `navigator.sendBeacon` sends it
//! as `text/plain`). Unknown fields are ignored; an event with a wrong type or an
//! out-of-range value is rejected on its own and counted, never failing its batch.

use serde_json::Value;

use crate::db::TelemetryEvent;

pub const OUTCOMES: &[&str] = &["hit", "miss", "fallback", "error", "rejected"];
pub const REASONS: &[&str] = &[
    "cold",
    "evicted",
    "version_mismatch",
    "integrity_failed",
    "unsupported",
    "timeout",
    "error",
    "bad_signature",
    "unknown_key",
    "rollback",
    "expired",
    "malformed",
];
pub const DEVICE_CLASSES: &[&str] = &[
    "ios-high",
    "ios-low",
    "android-high",
    "android-mid",
    "android-low",
    "desktop",
    "unknown",
];

/// The events worth storing, and why the others were not.
#[derive(Debug, Default, PartialEq)]
pub struct Parsed {
    pub events: Vec<TelemetryEvent>,
    pub rejected: Vec<String>,
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    #[error("body is not JSON: {0}")]
    NotJson(String),
    #[error("body must be an object with an `events` array")]
    Shape,
    #[error("{0} events in one batch; at most {1}")]
    TooMany(usize, usize),
}

/// Parses one beacon body.
pub fn parse(body: &[u8], max_events: usize) -> Result<Parsed, BatchError> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| BatchError::NotJson(e.to_string()))?;
    let events = match &value {
        Value::Object(map) => map.get("events").and_then(Value::as_array),
        Value::Array(list) => Some(list),
        _ => None,
    }
    .ok_or(BatchError::Shape)?;
    if events.len() > max_events {
        return Err(BatchError::TooMany(events.len(), max_events));
    }
    let mut parsed = Parsed::default();
    for (n, event) in events.iter().enumerate() {
        match event_of(event) {
            Ok(e) => parsed.events.push(e),
            Err(why) => parsed.rejected.push(format!("event {n}: {why}")),
        }
    }
    Ok(parsed)
}

fn event_of(v: &Value) -> Result<TelemetryEvent, String> {
    let obj = v.as_object().ok_or("not an object")?;
    let text = |name: &str, max: usize| -> Result<Option<String>, String> {
        match obj.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if s.len() <= max && !s.chars().any(char::is_control) => {
                Ok(Some(s.clone()))
            }
            Some(Value::String(_)) => Err(format!("`{name}` too long or has control characters")),
            Some(_) => Err(format!("`{name}` must be a string")),
        }
    };
    let one_of = |name: &str, allowed: &[&str]| -> Result<Option<String>, String> {
        match text(name, 32)? {
            Some(s) if !allowed.contains(&s.as_str()) => Err(format!("`{name}` {s:?} is unknown")),
            other => Ok(other),
        }
    };
    let kind = text("type", 16)?.ok_or("`type` missing")?;
    if kind != "preheat" && kind != "manifest" {
        return Err(format!("`type` {kind:?} is unknown"));
    }
    let game = text("game", 128)?
        .filter(|g| !g.is_empty())
        .ok_or("`game` missing")?;
    let outcome = one_of("outcome", OUTCOMES)?.ok_or("`outcome` missing")?;
    let reason = one_of("reason", REASONS)?;
    let ms = match obj.get("ms") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => {
            let ms = n.as_f64().ok_or("`ms` is not a number")?;
            if !(0.0..=600_000.0).contains(&ms) {
                return Err(format!("`ms` {ms} out of range 0–600000"));
            }
            Some(ms)
        }
        Some(_) => return Err("`ms` must be a number".into()),
    };
    let prewarmed = match obj.get("prewarmed") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(_) => return Err("`prewarmed` must be true or false".into()),
    };
    let engine = text("engine", 64)?;
    let version = text("version", 64)?;
    if kind == "preheat" {
        if engine.is_none() {
            return Err("`engine` missing".into());
        }
        if outcome == "rejected" {
            return Err("a preheat outcome is hit, miss or fallback".into());
        }
        if outcome != "hit" && reason.is_none() {
            return Err(format!("a {outcome} needs a `reason`"));
        }
    }
    let device = match obj.get("device") {
        None | Some(Value::Null) => None,
        Some(Value::Object(d)) => Some(d),
        Some(_) => return Err("`device` must be an object".into()),
    };
    let device_class = match device.and_then(|d| d.get("class")) {
        None | Some(Value::Null) => None,
        Some(Value::String(c)) if DEVICE_CLASSES.contains(&c.as_str()) => Some(c.clone()),
        Some(other) => return Err(format!("device class {other} is unknown")),
    };
    let device = device
        .map(|d| Value::Object(d.clone()).to_string())
        .filter(|d| d.len() <= 1024);
    Ok(TelemetryEvent {
        kind,
        game,
        engine,
        version,
        outcome: Some(outcome),
        reason,
        ms,
        prewarmed,
        device_class,
        device,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn good_and_bad_events_in_one_batch() {
        let body = br#"{"events":[
            {"type":"preheat","game":"g","engine":"three","version":"0.160","outcome":"miss","reason":"cold","ms":12.5,"prewarmed":false,"device":{"class":"desktop","cores":8},"extra":1},
            {"type":"preheat","game":"g","engine":"three","outcome":"hit","ms":-1},
            {"type":"preheat","game":"g","engine":"three","outcome":"miss"},
            {"type":"preheat","game":"g","engine":"three","outcome":"hit","ms":"fast"},
            {"type":"launch","game":"g","outcome":"hit"},
            {"type":"manifest","game":"g","outcome":"rejected","reason":"rollback"},
            {"type":"preheat","game":"g","engine":"three","outcome":"hit","device":{"class":"toaster"}},
            7
        ]}"#;
        let parsed = parse(body, 100).unwrap();
        assert_eq!(parsed.events.len(), 2, "{parsed:?}");
        assert_eq!(parsed.events[0].reason.as_deref(), Some("cold"));
        assert_eq!(parsed.events[0].device_class.as_deref(), Some("desktop"));
        assert_eq!(parsed.events[1].kind, "manifest");
        assert_eq!(parsed.rejected.len(), 6);
        assert!(
            parsed.rejected[0].contains("out of range"),
            "{:?}",
            parsed.rejected
        );
        assert!(parsed.rejected[1].contains("needs a `reason`"));
        assert!(parsed.rejected[2].contains("must be a number"));
        assert!(parsed.rejected[3].contains("unknown"));
    }

    #[test]
    fn whole_batch_errors() {
        assert!(matches!(parse(b"nope", 10), Err(BatchError::NotJson(_))));
        assert_eq!(parse(br#"{"x":1}"#, 10), Err(BatchError::Shape));
        let many = format!("{{\"events\":[{}]}}", ["{}"; 11].join(","));
        assert_eq!(parse(many.as_bytes(), 10), Err(BatchError::TooMany(11, 10)));
    }
}
