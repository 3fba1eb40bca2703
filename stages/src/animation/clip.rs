//! Animation clips read from glTF, and sampling them exactly as the glTF 2.0 specification
//! defines it (Appendix C): STEP, LINEAR (spherical for rotations, shortest path) and
//! CUBICSPLINE (Hermite with the stored tangents, scaled by the key interval).

use serde_json::Value;

use crate::gltf::accessors;
use crate::gltf::{Asset, GltfError, invalid};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Path {
    Translation,
    Rotation,
    Scale,
    Weights,
}

impl Path {
    pub fn name(self) -> &'static str {
        match self {
            Self::Translation => "translation",
            Self::Rotation => "rotation",
            Self::Scale => "scale",
            Self::Weights => "weights",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Interpolation {
    Step,
    Linear,
    CubicSpline,
}

impl Interpolation {
    pub fn name(self) -> &'static str {
        match self {
            Self::Step => "STEP",
            Self::Linear => "LINEAR",
            Self::CubicSpline => "CUBICSPLINE",
        }
    }
}

/// One animated property: keyframe times and values (for CUBICSPLINE, each key holds
/// in-tangent, value, out-tangent, as stored in the file).
#[derive(Debug, Clone, PartialEq)]
pub struct Channel {
    pub node: usize,
    pub path: Path,
    pub interpolation: Interpolation,
    pub times: Vec<f32>,
    pub values: Vec<f32>,
    /// Floats per value: 3, 4, or the number of morph targets.
    pub width: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Clip {
    pub name: String,
    pub channels: Vec<Channel>,
}

impl Channel {
    pub fn keys(&self) -> usize {
        self.times.len()
    }

    fn per_key(&self) -> usize {
        match self.interpolation {
            Interpolation::CubicSpline => 3 * self.width,
            _ => self.width,
        }
    }

    /// The value (not tangent) stored at key `k`.
    pub fn key_value(&self, k: usize) -> &[f32] {
        let start = k * self.per_key()
            + match self.interpolation {
                Interpolation::CubicSpline => self.width,
                _ => 0,
            };
        &self.values[start..start + self.width]
    }

    /// Samples the channel at time `t` into `out` (`width` values).
    pub fn sample(&self, t: f64, out: &mut [f64]) {
        self.sample_from(t, out, &mut 0);
    }

    /// `sample`, starting the key search at `*cursor` and leaving it at the key interval
    /// found: the same values, in constant time when `t` moves forward a key or less per
    /// call (frames and sample times in order), a binary search otherwise.
    pub fn sample_from(&self, t: f64, out: &mut [f64], cursor: &mut usize) {
        let n = self.times.len();
        let w = self.width;
        let copy = |out: &mut [f64], v: &[f32]| {
            for (o, &x) in out.iter_mut().zip(v) {
                *o = x as f64;
            }
        };
        // Strictly before the first key (three.js interpolates at the first key itself).
        if n == 1 || t < self.times[0] as f64 {
            copy(out, self.key_value(0));
            return;
        }
        if t >= self.times[n - 1] as f64 {
            copy(out, self.key_value(n - 1));
            return;
        }
        // The key interval [k, k + 1) holding t (the last key at or before t).
        let holds =
            |k: usize| k + 1 < n && self.times[k] as f64 <= t && (self.times[k + 1] as f64) > t;
        let k = if holds(*cursor) {
            *cursor
        } else if holds(*cursor + 1) {
            *cursor + 1
        } else {
            self.times.partition_point(|&x| x as f64 <= t) - 1
        };
        *cursor = k;
        let (t0, t1) = (self.times[k] as f64, self.times[k + 1] as f64);
        let dt = t1 - t0;
        let u = (t - t0) / dt;
        match self.interpolation {
            Interpolation::Step => copy(out, self.key_value(k)),
            Interpolation::Linear => {
                let (a, b) = (self.key_value(k), self.key_value(k + 1));
                if self.path == Path::Rotation {
                    slerp(a, b, u, out);
                } else {
                    for c in 0..w {
                        out[c] = a[c] as f64 * (1.0 - u) + b[c] as f64 * u;
                    }
                }
            }
            Interpolation::CubicSpline => {
                let stride = 3 * w;
                let v0 = &self.values[k * stride + w..k * stride + 2 * w];
                let b0 = &self.values[k * stride + 2 * w..k * stride + 3 * w];
                let a1 = &self.values[(k + 1) * stride..(k + 1) * stride + w];
                let v1 = &self.values[(k + 1) * stride + w..(k + 1) * stride + 2 * w];
                let (u2, u3) = (u * u, u * u * u);
                let h00 = 2.0 * u3 - 3.0 * u2 + 1.0;
                let h10 = (u3 - 2.0 * u2 + u) * dt;
                let h01 = -2.0 * u3 + 3.0 * u2;
                let h11 = (u3 - u2) * dt;
                for c in 0..w {
                    out[c] = h00 * v0[c] as f64
                        + h10 * b0[c] as f64
                        + h01 * v1[c] as f64
                        + h11 * a1[c] as f64;
                }
                if self.path == Path::Rotation {
                    normalize(out);
                }
            }
        }
    }
}

impl Clip {
    /// First and last key time over all channels (`(0, 0)` for a clip without channels).
    pub fn range(&self) -> (f64, f64) {
        let mut lo = f64::INFINITY;
        let mut hi = f64::NEG_INFINITY;
        for c in &self.channels {
            lo = lo.min(*c.times.first().unwrap_or(&0.0) as f64);
            hi = hi.max(*c.times.last().unwrap_or(&0.0) as f64);
        }
        if lo > hi { (0.0, 0.0) } else { (lo, hi) }
    }

    /// Total keyframes over all channels.
    pub fn keys(&self) -> usize {
        self.channels.iter().map(Channel::keys).sum()
    }
}

pub fn normalize(q: &mut [f64]) {
    let len = q.iter().map(|x| x * x).sum::<f64>().sqrt();
    if len > 0.0 {
        q.iter_mut().for_each(|x| *x /= len);
    }
}

/// Spherical interpolation along the shorter arc, as the glTF specification's reference.
/// Exact key times return the key itself.
pub fn slerp(a: &[f32], b: &[f32], u: f64, out: &mut [f64]) {
    if a == b {
        // Equal keys (three.js returns them untouched, even when not quite unit length).
        for i in 0..4 {
            out[i] = a[i] as f64;
        }
        return;
    }
    let a = [a[0] as f64, a[1] as f64, a[2] as f64, a[3] as f64];
    let mut b = [b[0] as f64, b[1] as f64, b[2] as f64, b[3] as f64];
    let mut dot: f64 = (0..4).map(|i| a[i] * b[i]).sum();
    if dot < 0.0 {
        b.iter_mut().for_each(|x| *x = -*x);
        dot = -dot;
    }
    // As the glTF reference and three.js: a true slerp leaves (slightly) non-unit keys as they
    // come; near-parallel keys are interpolated linearly and renormalised.
    let (s0, s1, linear) = if dot < 0.9995 {
        let theta = dot.acos();
        let sin = theta.sin();
        (
            ((1.0 - u) * theta).sin() / sin,
            (u * theta).sin() / sin,
            false,
        )
    } else {
        (1.0 - u, u, true)
    };
    for i in 0..4 {
        out[i] = s0 * a[i] + s1 * b[i];
    }
    if linear {
        normalize(out);
    }
}

/// Reads animation `index`, checking everything the sampler relies on: a clear error names
/// the channel or sampler at fault.
pub fn read_clip(
    asset: &Asset,
    index: usize,
    morph_targets: &dyn Fn(usize) -> Option<usize>,
) -> Result<Clip, GltfError> {
    let what = format!("animations[{index}]");
    let animation = asset
        .array("animations")
        .get(index)
        .ok_or_else(|| invalid(&what, "does not exist"))?;
    let samplers = animation
        .get("samplers")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    let node_count = asset.array("nodes").len();
    let mut channels = Vec::new();
    for (c, channel) in animation
        .get("channels")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let what = format!("{what}.channels[{c}]");
        let Some(node) = channel.pointer("/target/node").and_then(Value::as_u64) else {
            // Channels without a node target something an extension defines: not ours.
            continue;
        };
        let node = node as usize;
        if node >= node_count {
            return Err(invalid(
                &what,
                format!("targets node {node}, which does not exist"),
            ));
        }
        let path = match channel.pointer("/target/path").and_then(Value::as_str) {
            Some("translation") => Path::Translation,
            Some("rotation") => Path::Rotation,
            Some("scale") => Path::Scale,
            Some("weights") => Path::Weights,
            Some("pointer") => continue,
            other => {
                return Err(invalid(
                    &what,
                    format!("target path {other:?} is not valid"),
                ));
            }
        };
        let s = channel
            .get("sampler")
            .and_then(Value::as_u64)
            .ok_or_else(|| invalid(&what, "sampler missing"))? as usize;
        let sampler = samplers
            .get(s)
            .ok_or_else(|| invalid(&what, format!("sampler {s} does not exist")))?;
        let what = format!("{what} (sampler {s})");
        let interpolation = match sampler.get("interpolation").and_then(Value::as_str) {
            None | Some("LINEAR") => Interpolation::Linear,
            Some("STEP") => Interpolation::Step,
            Some("CUBICSPLINE") => Interpolation::CubicSpline,
            Some(other) => {
                return Err(invalid(
                    &what,
                    format!("interpolation {other:?} is not valid"),
                ));
            }
        };
        let accessor = |key: &str| {
            sampler
                .get(key)
                .and_then(Value::as_u64)
                .map(|i| i as usize)
                .ok_or_else(|| invalid(&what, format!("{key} missing")))
        };
        let (in_layout, times) = accessors::read_f32(asset, accessor("input")?)?;
        if in_layout.components != 1 || times.is_empty() {
            return Err(invalid(&what, "input is not a non-empty SCALAR accessor"));
        }
        if let Some(bad) = times.iter().position(|t| !t.is_finite() || *t < 0.0) {
            return Err(invalid(
                &what,
                format!("input time {bad} is negative or not finite"),
            ));
        }
        if let Some(k) = times.windows(2).position(|w| w[1] <= w[0]) {
            return Err(invalid(
                &what,
                format!(
                    "input times are not strictly increasing (key {} ≤ key {k})",
                    k + 1
                ),
            ));
        }
        let (out_layout, values) = accessors::read_f32(asset, accessor("output")?)?;
        let width = match path {
            Path::Translation | Path::Scale => 3,
            Path::Rotation => 4,
            Path::Weights => asset.array("nodes")[node]
                .get("mesh")
                .and_then(Value::as_u64)
                .and_then(|m| morph_targets(m as usize))
                .ok_or_else(|| {
                    invalid(&what, "animates weights of a node without morph targets")
                })?,
        };
        if path != Path::Weights && out_layout.components != width {
            return Err(invalid(
                &what,
                format!("{} output must have {width} components", path.name()),
            ));
        }
        let per_key = if interpolation == Interpolation::CubicSpline {
            3 * width
        } else {
            width
        };
        if values.len() != times.len() * per_key {
            return Err(invalid(
                &what,
                format!(
                    "output holds {} values but {} keys × {per_key} are needed",
                    values.len(),
                    times.len()
                ),
            ));
        }
        if interpolation == Interpolation::CubicSpline && times.len() < 2 {
            return Err(invalid(&what, "CUBICSPLINE needs at least two keys"));
        }
        if values.iter().any(|v| !v.is_finite()) {
            return Err(invalid(&what, "output holds NaN or infinite values"));
        }
        channels.push(Channel {
            node,
            path,
            interpolation,
            times,
            values,
            width,
        });
    }
    // The spec forbids two channels on one property; if a file has them, the last one wins
    // (as in three.js).
    let mut seen = std::collections::HashSet::new();
    let mut kept: Vec<Channel> = channels
        .into_iter()
        .rev()
        .filter(|c| seen.insert((c.node, c.path)))
        .collect();
    kept.reverse();
    Ok(Clip {
        name: animation
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        channels: kept,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn channel(interpolation: Interpolation, path: Path, times: &[f32], values: &[f32]) -> Channel {
        let width = if path == Path::Rotation { 4 } else { 3 };
        Channel {
            node: 0,
            path,
            interpolation,
            times: times.to_vec(),
            values: values.to_vec(),
            width,
        }
    }

    /// Sampling from a cursor gives what a fresh search gives, for times in order (the
    /// cursor moves a key or less), past several keys at once, backwards, and with keys that
    /// share a time (the last of them holds, as the binary search finds).
    #[test]
    fn sampling_from_a_cursor_is_the_same_as_searching() {
        let times = [0.0, 0.5, 0.5, 1.0, 1.25, 2.0, 3.0];
        let values: Vec<f32> = (0..times.len() * 3).map(|i| (i * i % 7) as f32).collect();
        let c = channel(Interpolation::Linear, Path::Translation, &times, &values);
        let mut queries: Vec<f64> = (0..=64).map(|i| i as f64 * 3.2 / 64.0 - 0.1).collect();
        queries.extend([2.5, 0.1, 0.5, 0.5, 3.0, -1.0, 1.0, 0.75, 2.9, 0.0]);
        let mut cursor = 0;
        for &t in &queries {
            let (mut searched, mut from) = ([0.0; 3], [0.0; 3]);
            c.sample(t, &mut searched);
            c.sample_from(t, &mut from, &mut cursor);
            assert_eq!(searched, from, "at {t}");
            assert!(cursor + 1 < times.len());
        }
        // A stale cursor past the keys (another channel's) is searched again, not read.
        let mut cursor = 99;
        let mut out = [0.0; 3];
        c.sample_from(1.1, &mut out, &mut cursor);
        assert_eq!(cursor, 3);
    }

    #[test]
    fn linear_step_and_clamping() {
        let c = channel(
            Interpolation::Linear,
            Path::Translation,
            &[1.0, 2.0],
            &[0., 0., 0., 2., 4., 6.],
        );
        let mut out = [0.0; 3];
        c.sample(1.5, &mut out);
        assert_eq!(out, [1.0, 2.0, 3.0]);
        c.sample(0.0, &mut out);
        assert_eq!(out, [0.0, 0.0, 0.0]);
        c.sample(9.0, &mut out);
        assert_eq!(out, [2.0, 4.0, 6.0]);
        let s = Channel {
            interpolation: Interpolation::Step,
            ..c
        };
        s.sample(1.99, &mut out);
        assert_eq!(out, [0.0, 0.0, 0.0]);
        s.sample(2.0, &mut out);
        assert_eq!(out, [2.0, 4.0, 6.0]);
    }

    #[test]
    fn slerp_takes_the_short_way_round() {
        // 90° about z, stored with opposite signs: the midpoint is 45°, not 135°.
        let h = std::f32::consts::FRAC_1_SQRT_2;
        let c = channel(
            Interpolation::Linear,
            Path::Rotation,
            &[0.0, 1.0],
            &[0., 0., 0., 1., 0., 0., -h, -h],
        );
        let mut q = [0.0; 4];
        c.sample(0.5, &mut q);
        let angle = 2.0 * q[3].abs().acos().to_degrees();
        assert!((angle - 45.0).abs() < 1e-4, "{angle}");
    }

    #[test]
    fn cubic_spline_uses_scaled_tangents() {
        // x(t) = t² on [0, 2]: tangents dx/dt are 0 and 4; the midpoint is exactly 1.
        let values = [
            0., 0., 0., 0., 0., 0., 0., 0., 0., 4., 0., 0., 4., 0., 0., 4., 0., 0.,
        ];
        let c = channel(
            Interpolation::CubicSpline,
            Path::Translation,
            &[0.0, 2.0],
            &values,
        );
        let mut out = [0.0; 3];
        c.sample(1.0, &mut out);
        assert!((out[0] - 1.0).abs() < 1e-9, "{out:?}");
    }
}
