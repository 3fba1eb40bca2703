//! Loader beacons: what a `POST /v1/telemetry` body may hold, validated per event.
//!
//! A beacon is `{"events": [...]}` (JSON, or the same text as `navigator.sendBeacon` sends it
//! as `text/plain`). Unknown fields are ignored; an event with a wrong type or an
//! out-of-range value is rejected on its own and counted, never failing its batch.

use std::net::IpAddr;
use std::path::Path;

use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;

use crate::devices;

/// A validated loader event (`parse` makes one; `db::telemetry` stores it).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TelemetryEvent {
    /// `preheat`, `decode` or `manifest`.
    pub kind: String,
    pub game: String,
    pub engine: Option<String>,
    pub version: Option<String>,
    pub outcome: Option<String>,
    pub reason: Option<String>,
    /// Pre-warm: ms until the engine was ready; decode: ms the decode took.
    pub ms: Option<f64>,
    pub prewarmed: Option<bool>,
    /// Pre-warm hit: the engine was on the device, put there by a visit of another game.
    pub shared: Option<bool>,
    /// Decode: the model's path in the build, its variant and the decoder used.
    pub asset: Option<String>,
    pub variant: Option<String>,
    pub decoder: Option<String>,
    /// Pre-warm: the engine's size; decode: the variant's size.
    pub bytes: Option<i64>,
    /// Decode: another variant than the chosen one was used.
    pub fallback: Option<bool>,
    /// By the rule table (`common/rules/device-classes.toml`); `unknown` without a device.
    pub device_class: String,
    pub os: Option<String>,
    pub runtime: Option<String>,
    pub device_model: Option<String>,
    /// The device descriptor as sent (JSON).
    pub device: Option<String>,
    /// The manifest token the event carried (checked by `telemetry::authenticate`).
    pub claim: Option<crate::telemetry::BeaconClaim>,
    /// Its token was valid: only trusted events feed rollups, metrics, choices and ROI.
    pub trusted: bool,
    /// A salted hash of the client's address (`BeaconSecret::client_id`).
    pub client: Option<String>,
}

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
    "revoked_key",
    "bad_trust",
    "trust_expired",
    "trust_rollback",
];
pub const VARIANTS: &[&str] = &["meshopt", "quantized", "original", "ktx2"];
pub const DECODERS: &[&str] = &["wasm-simd", "wasm", "js", "none"];
/// Why a decode used another variant than the one chosen.
pub const DECODE_REASONS: &[&str] = &[
    "decoder_init_failed",
    "decoder_timeout",
    "no_decoder",
    "decode_failed",
];

/// What a beacon event says about the manifest it came from: the `beacon.token` of that
/// signed manifest with the release's `sequence` and the token's `expires`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BeaconClaim {
    pub token: String,
    pub sequence: u64,
    pub expires: String,
}

/// The secret API and workers share for beacon tokens: workers put
/// `HMAC-SHA256(secret, game|sequence|expires)` into every signed manifest, the API checks
/// the token each beacon event carries. It also salts the client hashes stored with events.
#[derive(Clone)]
pub struct BeaconSecret {
    key: [u8; 32],
}

impl std::fmt::Debug for BeaconSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BeaconSecret(…)")
    }
}

#[derive(Debug, thiserror::Error)]
#[error("telemetry secret {path}: {reason}")]
pub struct SecretError {
    pub path: String,
    pub reason: String,
}

impl BeaconSecret {
    pub fn from_bytes(key: [u8; 32]) -> Self {
        Self { key }
    }

    /// Reads the hex secret at `path`, or writes a fresh one there (mode 0600) if none exists
    /// (`true`: generated).
    pub fn load_or_generate(path: &Path) -> Result<(Self, bool), SecretError> {
        let err = |reason: String| SecretError {
            path: path.display().to_string(),
            reason,
        };
        match std::fs::read_to_string(path) {
            Ok(text) => {
                let bytes = hex::decode(text.trim()).map_err(|_| err("not hex".into()))?;
                let key: [u8; 32] = bytes
                    .try_into()
                    .map_err(|_| err("expected 32 bytes in hex".into()))?;
                Ok((Self::from_bytes(key), false))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut key = [0u8; 32];
                getrandom::fill(&mut key).map_err(|e| err(e.to_string()))?;
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| err(e.to_string()))?;
                }
                write_secret(path, &hex::encode(key)).map_err(|e| err(e.to_string()))?;
                // Two processes starting at once on one data dir: the file that won is the
                // secret.
                let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
                let key = hex::decode(text.trim())
                    .ok()
                    .and_then(|b| <[u8; 32]>::try_from(b).ok())
                    .ok_or_else(|| err("not 32 bytes in hex".into()))?;
                Ok((Self::from_bytes(key), true))
            }
            Err(e) => Err(err(e.to_string())),
        }
    }

    fn mac(&self, message: &str) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes any key");
        mac.update(message.as_bytes());
        mac
    }

    /// The token a manifest of `game`'s release `sequence` carries until `expires`.
    pub fn token(&self, game: &str, sequence: u64, expires: &str) -> String {
        hex::encode(
            self.mac(&format!("{game}|{sequence}|{expires}"))
                .finalize()
                .into_bytes(),
        )
    }

    /// Whether `claim` is a token Kiln issued for `game` that has not expired at `now`
    /// (compared in constant time).
    pub fn verify(
        &self,
        game: &str,
        claim: &BeaconClaim,
        now: chrono::DateTime<chrono::Utc>,
    ) -> bool {
        let Ok(expires) = chrono::DateTime::parse_from_rfc3339(&claim.expires) else {
            return false;
        };
        let Ok(token) = hex::decode(&claim.token) else {
            return false;
        };
        expires > now
            && self
                .mac(&format!("{game}|{}|{}", claim.sequence, claim.expires))
                .verify_slice(&token)
                .is_ok()
    }

    /// A salted hash naming one client: its IPv4 address, or its IPv6 /64 (one host gets a
    /// whole /64, so counting its addresses would count it many times).
    pub fn client_id(&self, client: IpAddr) -> String {
        let prefix = match client {
            IpAddr::V4(v4) => v4.to_string(),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => v4.to_string(),
                None => {
                    let s = v6.segments();
                    format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
                }
            },
        };
        hex::encode(
            &self
                .mac(&format!("client|{prefix}"))
                .finalize()
                .into_bytes()[..12],
        )
    }
}

#[cfg(unix)]
fn write_secret(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(mut file) => file.write_all(text.as_bytes()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(not(unix))]
fn write_secret(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
    {
        Ok(mut file) => file.write_all(text.as_bytes()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// Marks each event trusted when its beacon token is valid (see [`BeaconSecret`]) and names
/// its client by a salted hash. Returns how many are untrusted: those are stored raw, flagged,
/// and feed no rollup, metric, variant choice or library ROI.
pub fn authenticate(
    events: &mut [TelemetryEvent],
    secret: &BeaconSecret,
    client: IpAddr,
    now: chrono::DateTime<chrono::Utc>,
) -> usize {
    let client = secret.client_id(client);
    let mut untrusted = 0;
    for e in events {
        e.trusted = e
            .claim
            .as_ref()
            .is_some_and(|claim| secret.verify(&e.game, claim, now));
        untrusted += usize::from(!e.trusted);
        e.client = Some(client.clone());
    }
    untrusted
}

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
        text_field(obj.get(name), name, max)
    };
    let one_of = |name: &str, allowed: &[&str]| -> Result<Option<String>, String> {
        match text(name, 32)? {
            Some(s) if !allowed.contains(&s.as_str()) => Err(format!("`{name}` {s:?} is unknown")),
            other => Ok(other),
        }
    };
    let number = |name: &str, max: f64| -> Result<Option<f64>, String> {
        match obj.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => {
                let x = n.as_f64().ok_or(format!("`{name}` is not a number"))?;
                if !(0.0..=max).contains(&x) {
                    return Err(format!("`{name}` {x} out of range 0–{max}"));
                }
                Ok(Some(x))
            }
            Some(_) => Err(format!("`{name}` must be a number")),
        }
    };
    let boolean = |name: &str| -> Result<Option<bool>, String> {
        match obj.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(_) => Err(format!("`{name}` must be true or false")),
        }
    };
    let kind = text("type", 16)?.ok_or("`type` missing")?;
    if !["preheat", "decode", "manifest"].contains(&kind.as_str()) {
        return Err(format!("`type` {kind:?} is unknown"));
    }
    let game = text("game", 128)?
        .filter(|g| !g.is_empty())
        .ok_or("`game` missing")?;
    let ms = number("ms", 600_000.0)?;
    let bytes = number("bytes", 1e12)?.map(|b| b as i64);
    let mut event = TelemetryEvent {
        kind,
        game,
        ms,
        bytes,
        ..TelemetryEvent::default()
    };
    match event.kind.as_str() {
        "decode" => {
            event.asset = Some(
                text("asset", 512)?
                    .filter(|a| !a.is_empty())
                    .ok_or("`asset` missing")?,
            );
            event.variant = Some(one_of("variant", VARIANTS)?.ok_or("`variant` missing")?);
            event.decoder = Some(one_of("decoder", DECODERS)?.ok_or("`decoder` missing")?);
            event.fallback = boolean("fallback")?;
            event.reason = one_of("reason", DECODE_REASONS)?;
            if event.fallback == Some(true) && event.reason.is_none() {
                return Err("a decode fallback needs a `reason`".into());
            }
            if event.ms.is_none() && event.fallback != Some(true) {
                return Err("`ms` missing".into());
            }
        }
        _ => {
            let outcome = one_of("outcome", OUTCOMES)?.ok_or("`outcome` missing")?;
            event.reason = one_of("reason", REASONS)?;
            event.prewarmed = boolean("prewarmed")?;
            event.engine = text("engine", 64)?;
            event.version = text("version", 64)?;
            if event.kind == "preheat" {
                if event.engine.is_none() {
                    return Err("`engine` missing".into());
                }
                if outcome == "rejected" {
                    return Err("a preheat outcome is hit, miss or fallback".into());
                }
                if outcome != "hit" && event.reason.is_none() {
                    return Err(format!("a {outcome} needs a `reason`"));
                }
                // True when the engine was on the device, put there by another game's visit.
                event.shared = boolean("shared")?;
                if outcome != "hit" && event.shared == Some(true) {
                    return Err(format!("a {outcome} can't be `shared` (only a hit is)"));
                }
            }
            event.outcome = Some(outcome);
        }
    }
    device_of(obj.get("device"), &mut event)?;
    event.claim = claim_of(obj.get("beacon"))?;
    Ok(event)
}

/// `beacon`: `{token, sequence, expires}` as the manifest gave them (absent: untrusted).
fn claim_of(value: Option<&Value>) -> Result<Option<BeaconClaim>, String> {
    let beacon = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(b)) => b,
        Some(_) => return Err("`beacon` must be an object".into()),
    };
    let token = text_field(beacon.get("token"), "beacon.token", 128)?;
    let expires = text_field(beacon.get("expires"), "beacon.expires", 64)?;
    let sequence = beacon.get("sequence").and_then(Value::as_u64);
    match (token, sequence, expires) {
        (Some(token), Some(sequence), Some(expires)) => Ok(Some(BeaconClaim {
            token,
            sequence,
            expires,
        })),
        _ => Err("`beacon` needs `token`, `sequence` and `expires`".into()),
    }
}

fn text_field(value: Option<&Value>, name: &str, max: usize) -> Result<Option<String>, String> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.len() <= max && !s.chars().any(char::is_control) => {
            Ok(Some(s.clone()))
        }
        Some(Value::String(_)) => Err(format!("`{name}` too long or has control characters")),
        Some(_) => Err(format!("`{name}` must be a string")),
    }
}

/// Reads the device descriptor and classifies it by the rule table. A class the client sent
/// counts only when it describes nothing the rules could use.
fn device_of(value: Option<&Value>, event: &mut TelemetryEvent) -> Result<(), String> {
    let device = match value {
        None | Some(Value::Null) => {
            event.device_class = devices::UNKNOWN.into();
            return Ok(());
        }
        Some(Value::Object(d)) => d,
        Some(_) => return Err("`device` must be an object".into()),
    };
    let field =
        |name: &str, max: usize| text_field(device.get(name), &format!("device.{name}"), max);
    let number = |name: &str, max: f64| match device.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_f64()
            .filter(|x| (0.0..=max).contains(x))
            .map(Some)
            .ok_or(format!("`device.{name}` out of range 0–{max}")),
        Some(_) => Err(format!("`device.{name}` must be a number")),
    };
    let descriptor = devices::Descriptor {
        os: field("os", 32)?.map(|o| o.to_ascii_lowercase()),
        os_version: field("os_version", 32)?,
        runtime: field("runtime", 64)?,
        model: field("model", 128)?,
        memory: number("memory", 4096.0)?,
        cores: number("cores", 1024.0)?.map(|c| c as u32),
    };
    let sent = match device.get("class") {
        None | Some(Value::Null) => None,
        Some(Value::String(c)) if devices::CLASSES.contains(&c.as_str()) => Some(c.as_str()),
        Some(other) => return Err(format!("device class {other} is unknown")),
    };
    let classified = devices::classify(&descriptor);
    event.device_class = match sent {
        Some(class) if classified == devices::UNKNOWN => class,
        _ => classified,
    }
    .to_string();
    event.device_model = descriptor.model;
    event.os = descriptor.os;
    event.runtime = descriptor.runtime;
    event.device = Some(Value::Object(device.clone()).to_string()).filter(|d| d.len() <= 1024);
    Ok(())
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
        assert_eq!(parsed.events[0].device_class, "desktop");
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
    fn preheat_hits_say_whether_another_game_brought_the_engine() {
        let body = br#"{"events":[
            {"type":"preheat","game":"g","engine":"three","outcome":"hit","shared":true},
            {"type":"preheat","game":"g","engine":"three","outcome":"hit","shared":false},
            {"type":"preheat","game":"g","engine":"three","outcome":"hit"},
            {"type":"preheat","game":"g","engine":"three","outcome":"miss","reason":"cold","shared":false},
            {"type":"preheat","game":"g","engine":"three","outcome":"hit","shared":"yes"},
            {"type":"preheat","game":"g","engine":"three","outcome":"miss","reason":"cold","shared":true},
            {"type":"manifest","game":"g","outcome":"hit","shared":"ignored"}
        ]}"#;
        let parsed = parse(body, 100).unwrap();
        let shared: Vec<Option<bool>> = parsed.events.iter().map(|e| e.shared).collect();
        assert_eq!(
            shared,
            [Some(true), Some(false), None, Some(false), None],
            "{:?}",
            parsed.rejected
        );
        assert_eq!(parsed.events[4].kind, "manifest");
        let why = parsed.rejected.join("\n");
        assert!(
            why.contains("event 4: `shared` must be true or false"),
            "{why}"
        );
        assert!(why.contains("event 5: a miss can't be `shared`"), "{why}");
        assert_eq!(parsed.rejected.len(), 2);
    }

    #[test]
    fn decode_events_and_device_classes() {
        let body = br#"{"events":[
            {"type":"decode","game":"g","asset":"models/fox.glb","variant":"meshopt","decoder":"wasm-simd","bytes":52000,"ms":41.5,"device":{"os":"Android","os_version":"13","model":"SM-A135F","memory":4,"cores":8,"class":"desktop"}},
            {"type":"decode","game":"g","asset":"models/fox.glb","variant":"quantized","decoder":"none","fallback":true,"reason":"decoder_init_failed","ms":null,"device":{"class":"ios-low"}},
            {"type":"decode","game":"g","asset":"models/fox.glb","variant":"draco","decoder":"wasm","ms":3},
            {"type":"decode","game":"g","asset":"models/fox.glb","variant":"meshopt","decoder":"gpu","ms":3},
            {"type":"decode","game":"g","variant":"meshopt","decoder":"wasm","ms":3},
            {"type":"decode","game":"g","asset":"a","variant":"meshopt","decoder":"wasm"},
            {"type":"decode","game":"g","asset":"a","variant":"quantized","decoder":"none","fallback":true,"ms":2},
            {"type":"decode","game":"g","asset":"a","variant":"meshopt","decoder":"wasm","ms":700000},
            {"type":"decode","game":"g","asset":"a","variant":"meshopt","decoder":"wasm","ms":3,"device":{"memory":"lots"}},
            {"type":"preheat","game":"g","engine":"three","outcome":"hit","bytes":-5}
        ]}"#;
        let parsed = parse(body, 100).unwrap();
        assert_eq!(parsed.events.len(), 2, "{:?}", parsed.rejected);
        let first = &parsed.events[0];
        // The rule table decides, not the class the client guessed.
        assert_eq!(first.device_class, "android-low");
        assert_eq!(first.device_model.as_deref(), Some("SM-A135F"));
        assert_eq!(first.os.as_deref(), Some("android"));
        assert_eq!((first.bytes, first.ms), (Some(52000), Some(41.5)));
        // Nothing to classify: the client's class stands.
        assert_eq!(parsed.events[1].device_class, "ios-low");
        assert_eq!(parsed.events[1].fallback, Some(true));
        let why = parsed.rejected.join("\n");
        for expected in [
            "event 2: `variant` \"draco\" is unknown",
            "event 3: `decoder` \"gpu\" is unknown",
            "event 4: `asset` missing",
            "event 5: `ms` missing",
            "event 6: a decode fallback needs a `reason`",
            "event 7: `ms` 700000 out of range",
            "event 8: `device.memory` must be a number",
            "event 9: `bytes` -5 out of range",
        ] {
            assert!(why.contains(expected), "{expected:?} not in\n{why}");
        }
    }

    #[test]
    fn whole_batch_errors() {
        assert!(matches!(parse(b"nope", 10), Err(BatchError::NotJson(_))));
        assert_eq!(parse(br#"{"x":1}"#, 10), Err(BatchError::Shape));
        let many = format!("{{\"events\":[{}]}}", ["{}"; 11].join(","));
        assert_eq!(parse(many.as_bytes(), 10), Err(BatchError::TooMany(11, 10)));
    }
}
