//! A build's own settings: its `kiln.toml`, parsed once per build and strictly. An unknown
//! section or key (`[modles]`, `losy = true`) is an error naming its line, never ignored. Each
//! stage is handed its own section, and its options own how the section applies on top of the
//! server's (`vat::build_selection`, `geometry::served_variant`, `ImagesSettings::apply`,
//! `kiln_common::csp::check_extension`).

use std::collections::BTreeMap;

use kiln_common::config::VatSettings;
use serde::Deserialize;

use crate::ir::FileTree;
use crate::stages::geometry::ModelsSettings;
use crate::stages::images::ImagesSettings;

/// The file's name, at the root of the package.
pub const FILE: &str = "kiln.toml";

/// Every section a build's `kiln.toml` may have.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BuildConfig {
    /// `[vat]`: models to bake into vertex animation textures, and how (`docs/vat.md`).
    pub vat: Option<VatSettings>,
    /// `[models]`: the variant a model's own path serves; dropping unused attributes.
    pub models: ModelsSettings,
    /// `[images]`: lossless on/off, lossy per build or path, the perceptual bound.
    pub images: ImagesSettings,
    /// `[csp]`: sources added to the Content-Security-Policy of the build's pages.
    pub csp: Option<BTreeMap<String, Vec<String>>>,
}

impl BuildConfig {
    /// Parses the file's text; an error names the line.
    pub fn parse(text: &str) -> Result<Self, String> {
        toml::from_str(text).map_err(|e| {
            match e
                .span()
                .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1)
            {
                Some(line) => format!("{FILE} line {line}: {}", e.message().trim_end()),
                None => format!("{FILE}: {}", e.message().trim_end()),
            }
        })
    }

    /// The build's `kiln.toml` (defaults when it has none).
    pub fn read(tree: &FileTree) -> Result<Self, String> {
        if !tree.contains(FILE) {
            return Ok(Self::default());
        }
        let text =
            std::fs::read_to_string(tree.root.join(FILE)).map_err(|e| format!("{FILE}: {e}"))?;
        Self::parse(&text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_sections_and_keys_are_errors_naming_the_line() {
        for (text, needle) in [
            ("[modles]\nserve = \"quantized\"\n", "line 1"),
            (
                "[models]\nserve = \"quantized\"\n\n[images]\nlosy = true\n",
                "line 5",
            ),
            ("[vat]\nframes = 3\n", "line 2"),
            ("[csp]\nscript-src = \"https://x.example\"\n", "line 2"),
            ("[vat\n", "line 1"),
        ] {
            let err = BuildConfig::parse(text).unwrap_err();
            assert!(err.starts_with("kiln.toml line"), "{text:?}: {err}");
            assert!(err.contains(needle), "{text:?}: {err}");
        }
        let err = BuildConfig::parse("[modles]\n").unwrap_err();
        assert!(err.contains("modles"), "{err}");
    }

    #[test]
    fn each_section_is_read_once_whole() {
        let c = BuildConfig::parse(
            "[models]\nserve = \"quantized\"\n[images]\nlossy = [\"bg/**\"]\nmin_ssimulacra2 = 85\n[[images.paths]]\nmatch = \"ui/**\"\nmin_ssimulacra2 = 90\n[vat]\nfiles = [\"a.glb\"]\n[csp]\nconnect-src = [\"https://api.studio.example\"]\n",
        )
        .unwrap();
        assert_eq!(c.models.serve.as_deref(), Some("quantized"));
        assert_eq!(c.images.min_ssimulacra2, Some(85.0));
        assert_eq!(c.images.paths.len(), 1);
        assert_eq!(c.vat.unwrap().files.unwrap(), ["a.glb"]);
        assert_eq!(
            c.csp.unwrap()["connect-src"],
            ["https://api.studio.example"]
        );
        assert_eq!(BuildConfig::parse("").unwrap(), BuildConfig::default());
    }
}
