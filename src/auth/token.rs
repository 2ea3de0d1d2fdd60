//! API token secrets: high-entropy, shown once, stored only as a SHA-256 hash.

use argon2::password_hash::rand_core::{OsRng, RngCore};
use base64::Engine as _;
use sha2::{Digest, Sha256};

pub const TOKEN_PREFIX: &str = "hrl_";

pub fn generate_secret() -> String {
    let mut bytes = [0u8; 32];
    OsRng.fill_bytes(&mut bytes);
    format!(
        "{TOKEN_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    )
}

/// The stored form of a secret. A fast hash is enough: the secret has 256 random bits.
pub fn hash_secret(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_prefixed_random_and_hash_stably() {
        let secret = generate_secret();
        assert!(secret.starts_with(TOKEN_PREFIX));
        assert_ne!(secret, generate_secret());
        assert_eq!(hash_secret(&secret), hash_secret(&secret));
        assert_eq!(hash_secret(&secret).len(), 64);
        assert!(!hash_secret(&secret).contains(&secret[4..]));
    }
}
