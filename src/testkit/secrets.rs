//! Webhook secrets in files, referenced as `file:` secret refs.

use std::collections::HashMap;

/// A `whsec_` signing secret in a file of its own, named by a `file:` reference:
/// read where it is needed, with no process-wide environment to change.
pub struct SecretFile(tempfile::NamedTempFile);

impl SecretFile {
    pub fn new(secret: &str) -> SecretFile {
        // Under target/tmp: the process-wide ones (`secret_ref`) are never dropped.
        let file = tempfile::NamedTempFile::new_in(crate::target_tmp_dir()).unwrap();
        std::fs::write(file.path(), secret).unwrap();
        SecretFile(file)
    }

    /// Rotates the secret in place: the same file (and reference), a new value.
    pub fn rewrite(&self, secret: &str) {
        std::fs::write(self.0.path(), secret).unwrap();
    }

    /// The reference a setting or route takes (`file:/path`).
    pub fn reference(&self) -> String {
        format!("file:{}", self.0.path().display())
    }
}

/// A `file:` reference to `secret`, in a file kept for the whole test process (one
/// per secret), for servers that read it at send time, whenever that is.
pub fn secret_ref(secret: &str) -> String {
    static FILES: std::sync::LazyLock<std::sync::Mutex<HashMap<String, SecretFile>>> =
        std::sync::LazyLock::new(Default::default);
    FILES
        .lock()
        .unwrap()
        .entry(secret.to_string())
        .or_insert_with(|| SecretFile::new(secret))
        .reference()
}
