//! The archive formats Kiln accepts as a build's package: what the API sniffs at upload and
//! the `unpack` stage opens.

use serde::{Deserialize, Serialize};

/// Archive format of an uploaded package.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PackageFormat {
    Zip,
    TarGz,
}

impl PackageFormat {
    /// From the first bytes of the package: the only evidence that can't lie about the format.
    pub fn sniff(head: &[u8]) -> Option<Self> {
        if head.starts_with(b"PK\x03\x04") || head.starts_with(b"PK\x05\x06") {
            Some(Self::Zip)
        } else if head.starts_with(&[0x1f, 0x8b]) {
            Some(Self::TarGz)
        } else {
            None
        }
    }

    pub fn extension(self) -> &'static str {
        match self {
            Self::Zip => "zip",
            Self::TarGz => "tar.gz",
        }
    }

    pub fn from_extension(ext: &str) -> Option<Self> {
        match ext {
            "zip" => Some(Self::Zip),
            "tar.gz" | "tgz" => Some(Self::TarGz),
            _ => None,
        }
    }
}

impl std::fmt::Display for PackageFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Zip => "zip",
            Self::TarGz => "tar.gz",
        })
    }
}
