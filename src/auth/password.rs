//! Argon2id password hashing.

use std::sync::OnceLock;

use argon2::password_hash::rand_core::{OsRng, RngCore};
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;

#[derive(Debug, thiserror::Error)]
#[error("password hashing failed: {0}")]
pub struct HashError(String);

pub const MIN_PASSWORD_LEN: usize = 12;

pub fn hash_password(password: &str) -> Result<String, HashError> {
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|hash| hash.to_string())
        .map_err(|e| HashError(e.to_string()))
}

/// Whether `password` matches `stored`. An unknown user is checked against a dummy
/// hash so that timing does not reveal whether a user exists.
pub fn verify_password(password: &str, stored: Option<&str>) -> bool {
    static DUMMY: OnceLock<String> = OnceLock::new();
    let dummy = DUMMY.get_or_init(|| hash_password("herald-dummy-password").unwrap_or_default());
    let (hash, known) = match stored {
        Some(hash) => (hash, true),
        None => (dummy.as_str(), false),
    };
    let Ok(parsed) = PasswordHash::new(hash) else {
        return false;
    };
    let matches = Argon2::default()
        .verify_password(password.as_bytes(), &parsed)
        .is_ok();
    known && matches
}

/// A random password for generated accounts: 24 characters, URL-safe.
pub fn generate_password() -> String {
    let mut bytes = [0u8; 18];
    OsRng.fill_bytes(&mut bytes);
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_verify_and_are_argon2id() {
        let hash = hash_password("correct horse battery").unwrap();
        assert!(hash.starts_with("$argon2id$"));
        assert!(verify_password("correct horse battery", Some(&hash)));
        assert!(!verify_password("wrong horse battery", Some(&hash)));
        assert!(!verify_password("herald-dummy-password", None));
        assert!(!verify_password("x", Some("not a hash")));
    }

    #[test]
    fn generated_passwords_are_long_and_distinct() {
        let a = generate_password();
        assert!(a.len() >= MIN_PASSWORD_LEN);
        assert_ne!(a, generate_password());
    }
}
