//! Argon2id password hashing.

use std::sync::OnceLock;

use argon2::password_hash::rand_core::{OsRng, RngCore};
use std::cell::RefCell;

use argon2::password_hash::{Output, PasswordHash, PasswordHasher, SaltString};
use argon2::{Algorithm, Argon2, Block, Params, Version};

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
    let matches = verify_reusing_memory(password, hash).unwrap_or(false);
    known && matches
}

/// Largest argon2 memory accepted from a stored hash, in KiB (Herald writes 19 MiB).
const MAX_MEMORY_KIB: u32 = 256 * 1024;

thread_local! {
    /// This thread's argon2 working memory, kept between verifications: allocating
    /// 19 MiB afresh each time makes glibc raise its mmap threshold and keep every
    /// freed block resident (RSS grew ~19 MiB a sign-in until ~450 MiB).
    static BLOCKS: RefCell<Vec<Block>> = const { RefCell::new(Vec::new()) };
}

/// `argon2`'s own verification, with the working memory of this thread reused.
fn verify_reusing_memory(password: &str, stored: &str) -> Option<bool> {
    let parsed = PasswordHash::new(stored).ok()?;
    let algorithm = Algorithm::try_from(parsed.algorithm).ok()?;
    let version = match parsed.version {
        Some(v) => Version::try_from(v).ok()?,
        None => Version::default(),
    };
    let params = Params::try_from(&parsed).ok()?;
    if params.m_cost() > MAX_MEMORY_KIB {
        return None;
    }
    let expected = parsed.hash?;
    let mut salt = [0u8; 64];
    let salt = parsed.salt?.decode_b64(&mut salt).ok()?;
    let mut out = vec![0u8; expected.len()];
    let blocks = params.block_count();
    let hashed = BLOCKS.with(|memory| {
        let mut memory = memory.borrow_mut();
        memory.resize(blocks, Block::default());
        Argon2::new(algorithm, version, params).hash_password_into_with_memory(
            password.as_bytes(),
            salt,
            &mut out,
            &mut memory[..blocks],
        )
    });
    hashed.ok()?;
    // `Output`'s equality is constant-time.
    Some(Output::new(&out).ok()? == expected)
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
