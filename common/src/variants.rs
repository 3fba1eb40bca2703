//! Decode-aware variants: for one device class, the variant of each model expected to be
//! ready soonest — bytes over the class's assumed bandwidth plus the decode time measured on
//! that class — or, with too few measurements, the default policy.
//!
//! Measurements come from trusted beacons only, and count per client: a variant is measured
//! once it has `min_samples` decodes from at least `min_clients` distinct clients, and its
//! decode time is the median over clients of each client's p90
//! (`rollups::robust_decodes`), so one chatty client or a few extreme values can't move it.

use std::collections::HashMap;

use crate::config::VariantsConfig;
use crate::manifest::{Exploration, Ktx2Choice, ManifestModel, VariantChoice, VariantEstimate};
use crate::rollups::RobustDecode;

/// Measured decodes of one game on one device class: (asset, variant) → decodes, clients
/// and the robust p90.
pub type DecodeStats = HashMap<(String, String), RobustDecode>;

/// Why a variant was chosen.
pub const MEASURED: &str = "measured";
pub const DEFAULT: &str = "default";
pub const SLOW_CLASS: &str = "slow_class";
/// The `ktx2` variant taken for its GPU memory, whatever it costs in time.
pub const LOW_MEMORY_CLASS: &str = "low_memory_class";

/// The variant a model's textures are GPU-compressed in (Basis, `[images] ktx2`): only a
/// device whose GPU format it holds its bounds on can take it, so it is decided apart
/// ([`VariantChoice::ktx2`]) and never the class's `variant`.
pub const KTX2: &str = "ktx2";

/// The variant `class` should load for `model`, with the estimates behind it.
pub fn choose(
    model: &ManifestModel,
    class: &str,
    stats: &DecodeStats,
    policy: &VariantsConfig,
) -> VariantChoice {
    let bandwidth = policy.bandwidth_of(class);
    let estimates: Vec<VariantEstimate> = model
        .variants
        .iter()
        .map(|v| {
            let transfer_ms = (v.brotli_size as f64 / bandwidth * 1000.0).round() as u64;
            let measured = stats
                .get(&(model.path.clone(), v.variant.clone()))
                .copied()
                .unwrap_or(RobustDecode {
                    samples: 0,
                    clients: 0,
                    ms: 0.0,
                });
            let decode_p90_ms = (measured.samples > 0).then(|| measured.ms.round() as u64);
            VariantEstimate {
                variant: v.variant.clone(),
                bytes: v.brotli_size,
                transfer_ms,
                decode_p90_ms,
                samples: measured.samples,
                clients: measured.clients,
                total_ms: decode_p90_ms.map(|d| d + transfer_ms),
            }
        })
        .collect();
    let is_measured = |e: &VariantEstimate| {
        e.samples >= policy.min_samples && e.clients >= policy.min_clients && e.total_ms.is_some()
    };
    let measured: Vec<&VariantEstimate> = estimates
        .iter()
        .filter(|e| e.variant != KTX2 && is_measured(e))
        .collect();
    let best = measured
        .iter()
        .min_by_key(|e| (e.total_ms, e.bytes))
        .copied();
    let ktx2 = model.variants.iter().any(|v| v.variant == KTX2).then(|| {
        let ktx2 = estimates.iter().find(|e| e.variant == KTX2);
        ktx2_choice(class, ktx2.filter(|e| is_measured(e)), best, policy)
    });
    // Measurements decide once at least two variants can be compared.
    if measured.len() >= 2 {
        let best = best.expect("two or more");
        let others: Vec<String> = measured
            .iter()
            .filter(|e| e.variant != best.variant)
            .map(|e| format!("{} {} ms", e.variant, e.total_ms.unwrap_or(0)))
            .collect();
        return VariantChoice {
            explore: exploration(model, &best.variant, &estimates, policy),
            variant: best.variant.clone(),
            reason: MEASURED.into(),
            detail: format!(
                "on {class}: {} ready in {} ms ({} ms transfer + p90 decode {} ms over {} decodes from {} clients) vs {}",
                best.variant,
                best.total_ms.unwrap_or(0),
                best.transfer_ms,
                best.decode_p90_ms.unwrap_or(0),
                best.samples,
                best.clients,
                others.join(", ")
            ),
            estimates,
            ktx2,
        };
    }
    let has = |name: &str| model.variants.iter().any(|v| v.variant == name);
    let slow = policy.slow_classes.iter().any(|c| c == class);
    let (variant, reason) = if slow && has("quantized") {
        ("quantized".to_string(), SLOW_CLASS)
    } else if has("meshopt") {
        ("meshopt".to_string(), DEFAULT)
    } else {
        (model.preferred.clone(), DEFAULT)
    };
    let counts: Vec<String> = estimates
        .iter()
        .map(|e| format!("{} {} from {} clients", e.variant, e.samples, e.clients))
        .collect();
    VariantChoice {
        explore: exploration(model, &variant, &estimates, policy),
        detail: format!(
            "{}: too few decodes measured on {class} ({}; {} per variant from {} clients needed for two variants)",
            if reason == SLOW_CLASS {
                "slow class default"
            } else {
                "default"
            },
            counts.join(", "),
            policy.min_samples,
            policy.min_clients
        ),
        variant,
        reason: reason.into(),
        estimates,
        ktx2,
    }
}

/// Whether a device of `class` that can take the `ktx2` variant should. On a low-memory
/// class, yes: its textures take a quarter of the GPU memory or less, and a phone that runs
/// out of it crashes the game. Elsewhere measurements decide once the ktx2 variant (its
/// decode timed with its textures' transcode) and another variant are both measured on the
/// class; until then, yes (the GPU memory is smaller, and its loads are what measures it).
fn ktx2_choice(
    class: &str,
    ktx2: Option<&VariantEstimate>,
    best: Option<&VariantEstimate>,
    policy: &VariantsConfig,
) -> Ktx2Choice {
    if policy.low_memory_classes.iter().any(|c| c == class) {
        return Ktx2Choice {
            take: true,
            reason: LOW_MEMORY_CLASS.into(),
            detail: format!(
                "{class} is a low-memory class: GPU-compressed textures whatever their transcode costs"
            ),
        };
    }
    match (ktx2, best) {
        (Some(k), Some(b)) => {
            let (k_ms, b_ms) = (k.total_ms.unwrap_or(0), b.total_ms.unwrap_or(0));
            Ktx2Choice {
                take: k_ms <= b_ms,
                reason: MEASURED.into(),
                detail: format!(
                    "on {class}: ktx2 ready in {k_ms} ms ({} ms transfer + p90 decode and transcode {} ms over {} decodes from {} clients) vs {} {b_ms} ms",
                    k.transfer_ms,
                    k.decode_p90_ms.unwrap_or(0),
                    k.samples,
                    k.clients,
                    b.variant
                ),
            }
        }
        _ => Ktx2Choice {
            take: true,
            reason: DEFAULT.into(),
            detail: format!(
                "default: ktx2 and another variant not both measured on {class} ({} per variant from {} clients needed)",
                policy.min_samples, policy.min_clients
            ),
        },
    }
}

/// Which other candidate a few loads should try so it gets measured on this class: without
/// it, a class served `meshopt` would never time `quantized` (and the reverse), and
/// measurements could never decide. `original` is not tried: it is the largest download.
fn exploration(
    model: &ManifestModel,
    chosen: &str,
    estimates: &[VariantEstimate],
    policy: &VariantsConfig,
) -> Option<Exploration> {
    if policy.explore_per_mille == 0 {
        return None;
    }
    estimates
        .iter()
        .filter(|e| e.variant != chosen && ["meshopt", "quantized"].contains(&e.variant.as_str()))
        .filter(|e| e.samples < policy.min_samples || e.clients < policy.min_clients)
        .filter(|e| model.variants.iter().any(|v| v.variant == e.variant))
        .min_by_key(|e| e.samples)
        .map(|e| Exploration {
            variant: e.variant.clone(),
            per_mille: policy.explore_per_mille,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::ModelVariant;

    fn model() -> ManifestModel {
        let variant = |name: &str, brotli_size: u64| ModelVariant {
            gpu_formats: Vec::new(),
            variant: name.into(),
            path: format!("m.{name}.glb"),
            url: String::new(),
            size: brotli_size * 2,
            brotli_size,
            needs_decoder: name == "meshopt",
        };
        ManifestModel {
            path: "m.glb".into(),
            preferred: "meshopt".into(),
            fallback: "quantized".into(),
            variants: vec![
                variant("meshopt", 100_000),
                variant("quantized", 150_000),
                variant("original", 400_000),
            ],
            choice: None,
        }
    }

    fn stats(entries: &[(&str, u64, f64)]) -> DecodeStats {
        entries
            .iter()
            .map(|(v, n, p90)| {
                (
                    ("m.glb".to_string(), v.to_string()),
                    RobustDecode {
                        samples: *n,
                        clients: *n,
                        ms: *p90,
                    },
                )
            })
            .collect()
    }

    #[test]
    fn measurements_pick_the_variant_ready_soonest() {
        let policy = VariantsConfig::default();
        // android-low: 500 kB/s → meshopt 200 ms + 400 ms decode; quantized 300 ms + 20 ms.
        let slow_decoder = stats(&[("meshopt", 50, 400.0), ("quantized", 30, 20.0)]);
        let c = choose(&model(), "android-low", &slow_decoder, &policy);
        assert_eq!(
            (c.variant.as_str(), c.reason.as_str()),
            ("quantized", MEASURED)
        );
        assert_eq!(c.estimates[0].total_ms, Some(600));
        assert_eq!(c.estimates[1].total_ms, Some(320));
        assert!(
            c.detail.contains("quantized ready in 320 ms"),
            "{}",
            c.detail
        );
        // desktop: 5 MB/s → meshopt 20 + 5, quantized 30 + 3.
        let fast = stats(&[("meshopt", 50, 5.0), ("quantized", 30, 3.0)]);
        let c = choose(&model(), "desktop", &fast, &policy);
        assert_eq!(
            (c.variant.as_str(), c.reason.as_str()),
            ("meshopt", MEASURED)
        );
        assert_eq!(c.explore, None, "both measured");
    }

    #[test]
    fn too_little_data_falls_back_to_the_policy() {
        let policy = VariantsConfig::default();
        let few = stats(&[("meshopt", 50, 400.0), ("quantized", 19, 20.0)]);
        let c = choose(&model(), "android-low", &few, &policy);
        assert_eq!(
            (c.variant.as_str(), c.reason.as_str()),
            ("quantized", SLOW_CLASS)
        );
        // meshopt is measured enough: nothing to explore.
        assert_eq!(c.explore, None);
        let c = choose(&model(), "android-mid", &few, &policy);
        assert_eq!(
            (c.variant.as_str(), c.reason.as_str()),
            ("meshopt", DEFAULT)
        );
        // quantized has 19 of 20 decodes: 5 % of loads try it.
        let explore = c.explore.as_ref().unwrap();
        assert_eq!(
            (explore.variant.as_str(), explore.per_mille),
            ("quantized", 50)
        );
        let off = VariantsConfig {
            explore_per_mille: 0,
            ..VariantsConfig::default()
        };
        assert_eq!(choose(&model(), "android-mid", &few, &off).explore, None);
        assert!(
            c.detail.contains("quantized 19 from 19 clients"),
            "{}",
            c.detail
        );
        // A model without a meshopt variant keeps its preferred one.
        let mut plain = model();
        plain.variants.retain(|v| v.variant != "meshopt");
        plain.preferred = "quantized".into();
        let c = choose(&plain, "desktop", &DecodeStats::new(), &policy);
        assert_eq!(c.variant, "quantized");
    }

    #[test]
    fn the_ktx2_variant_is_decided_apart_by_memory_then_measured_time() {
        let policy = VariantsConfig::default();
        let mut m = model();
        assert_eq!(
            choose(&m, "desktop", &DecodeStats::new(), &policy).ktx2,
            None
        );
        m.variants.push(ModelVariant {
            gpu_formats: vec!["astc".into(), "bc7".into()],
            variant: KTX2.into(),
            path: "m.ktx2.glb".into(),
            url: String::new(),
            size: 200_000,
            brotli_size: 120_000,
            needs_decoder: true,
        });
        // Unmeasured: taken (its loads are what measure it); never the class's variant.
        let c = choose(&m, "desktop", &DecodeStats::new(), &policy);
        let k = c.ktx2.unwrap();
        assert!(k.take);
        assert_eq!(k.reason, DEFAULT);
        assert_eq!(c.variant, "meshopt");
        // desktop, 5 MB/s: ktx2 24 + 300 ms of transcode vs meshopt 20 + 5: not taken, and
        // ktx2 being fastest measured never makes it the class's variant.
        let slow_transcode = stats(&[
            ("meshopt", 50, 5.0),
            ("quantized", 30, 3.0),
            ("ktx2", 40, 300.0),
        ]);
        let c = choose(&m, "desktop", &slow_transcode, &policy);
        let k = c.ktx2.clone().unwrap();
        assert_eq!((k.take, k.reason.as_str()), (false, MEASURED));
        assert!(k.detail.contains("ktx2 ready in 324 ms"), "{}", k.detail);
        assert!(k.detail.contains("vs meshopt 25 ms"), "{}", k.detail);
        let fast_transcode = stats(&[
            ("meshopt", 50, 40.0),
            ("quantized", 30, 30.0),
            ("ktx2", 40, 5.0),
        ]);
        let c = choose(&m, "desktop", &fast_transcode, &policy);
        assert_eq!(c.ktx2.map(|k| k.take), Some(true));
        assert_ne!(c.variant, KTX2);
        // A low-memory class takes it whatever it costs in time.
        let c = choose(&m, "android-low", &slow_transcode, &policy);
        let k = c.ktx2.unwrap();
        assert_eq!((k.take, k.reason.as_str()), (true, LOW_MEMORY_CLASS));
    }

    #[test]
    fn measurements_need_enough_distinct_clients() {
        let policy = VariantsConfig::default();
        // Plenty of decodes, but all from 3 clients: not measured, the policy stands.
        let few_clients: DecodeStats = [("meshopt", 10.0), ("quantized", 400.0)]
            .into_iter()
            .map(|(v, ms)| {
                (
                    ("m.glb".to_string(), v.to_string()),
                    RobustDecode {
                        samples: 500,
                        clients: 3,
                        ms,
                    },
                )
            })
            .collect();
        let c = choose(&model(), "android-low", &few_clients, &policy);
        assert_eq!(
            (c.variant.as_str(), c.reason.as_str()),
            ("quantized", SLOW_CLASS),
            "{}",
            c.detail
        );
        assert!(c.detail.contains("from 10 clients needed"), "{}", c.detail);
    }
}
