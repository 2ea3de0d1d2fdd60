//! Signing secrets, named by reference and read at send time, so no secret is ever
//! copied into the outbox: `env:NAME` reads an environment variable, `file:/path`
//! a file. A value may hold several space-separated `whsec_…` secrets while a key
//! rotates; each one signs.

use base64::Engine as _;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SecretError {
    #[error("secret reference {0:?} must start with env: or file:")]
    BadReference(String),
    #[error("signing secret {0} is not set")]
    Missing(String),
    #[error("signing secret {0} is unreadable: {1}")]
    Unreadable(String, String),
    #[error("signing secret {0} is not a whsec_ base64 secret")]
    Malformed(String),
}

/// Checks a reference's shape (at configuration time) without reading it.
pub fn validate_reference(reference: &str) -> Result<(), SecretError> {
    match reference.split_once(':') {
        Some(("env", name)) if !name.is_empty() => Ok(()),
        Some(("file", path)) if !path.is_empty() => Ok(()),
        _ => Err(SecretError::BadReference(reference.to_string())),
    }
}

/// The text behind a reference (an environment variable or a file), untrimmed.
pub fn resolve_text(reference: &str) -> Result<String, SecretError> {
    Ok(match reference.split_once(':') {
        Some(("env", name)) if !name.is_empty() => {
            std::env::var(name).map_err(|_| SecretError::Missing(reference.to_string()))?
        }
        Some(("file", path)) if !path.is_empty() => std::fs::read_to_string(path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                SecretError::Missing(reference.to_string())
            } else {
                SecretError::Unreadable(reference.to_string(), e.kind().to_string())
            }
        })?,
        _ => return Err(SecretError::BadReference(reference.to_string())),
    })
}

/// The signing keys behind a reference, decoded from their `whsec_` form.
pub fn resolve_keys(reference: &str) -> Result<Vec<Vec<u8>>, SecretError> {
    let raw = resolve_text(reference)?;
    let keys: Vec<Vec<u8>> = raw
        .split_whitespace()
        .map(|secret| {
            let encoded = secret.strip_prefix("whsec_").unwrap_or(secret);
            base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .map_err(|_| SecretError::Malformed(reference.to_string()))
        })
        .collect::<Result<_, _>>()?;
    if keys.is_empty() {
        return Err(SecretError::Missing(reference.to_string()));
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_resolve_from_files_and_never_leak_the_value() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        std::fs::write(&path, "whsec_c2VjcmV0LW9uZQ== whsec_c2VjcmV0LXR3bw==\n").unwrap();
        let keys = resolve_keys(&format!("file:{}", path.display())).unwrap();
        assert_eq!(keys, vec![b"secret-one".to_vec(), b"secret-two".to_vec()]);

        let missing = resolve_keys("env:HERALD_TEST_SURELY_UNSET_SECRET").unwrap_err();
        assert_eq!(
            missing,
            SecretError::Missing("env:HERALD_TEST_SURELY_UNSET_SECRET".into())
        );
        std::fs::write(&path, "whsec_not base64!").unwrap();
        let bad = resolve_keys(&format!("file:{}", path.display())).unwrap_err();
        assert!(!bad.to_string().contains("not base64"), "{bad}");
        assert!(validate_reference("vault:x").is_err());
        assert!(validate_reference("env:X").is_ok());
    }
}
