//! Bearer tokens: the admin token from configuration, and per-team tokens stored hashed.

use axum::extract::FromRequestParts;
use axum::http::StatusCode;
use axum::http::request::Parts;
use sha2::{Digest, Sha256};

use crate::AppState;
use crate::error::ApiError;

/// A request made with a team's token.
pub struct Team(pub String);

/// A request made with the admin token.
pub struct Admin;

fn bearer(parts: &Parts) -> Option<&str> {
    parts
        .headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::trim)
        .filter(|t| !t.is_empty())
}

fn unauthorized() -> ApiError {
    ApiError::new(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "missing or unknown bearer token",
    )
}

/// Tokens are stored as their SHA-256: a leaked database leaks no usable token.
pub fn token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// A fresh team token: 32 random bytes, base64url, with a prefix secret scanners know.
pub fn new_token() -> String {
    use base64::Engine;
    let bytes: [u8; 32] = rand_bytes();
    format!(
        "kiln_{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    )
}

fn rand_bytes() -> [u8; 32] {
    // uuid v4 draws from the OS generator; two of them make 32 random-enough bytes.
    let mut out = [0u8; 32];
    out[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
    out[16..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
    out
}

/// Compares without an early exit, so response time does not leak the token's prefix.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl FromRequestParts<AppState> for Team {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let token = bearer(parts).ok_or_else(unauthorized)?;
        match state.db.team_for_token(&token_hash(token)).await? {
            Some(team) => Ok(Team(team)),
            None => Err(unauthorized()),
        }
    }
}

impl FromRequestParts<AppState> for Admin {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let configured = &state.config.admin_token;
        let token = bearer(parts).ok_or_else(unauthorized)?;
        if !configured.is_empty() && constant_time_eq(token.as_bytes(), configured.as_bytes()) {
            Ok(Admin)
        } else {
            Err(unauthorized())
        }
    }
}
