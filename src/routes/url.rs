//! Destination URLs: what Herald accepts as one, and the origin that names a
//! destination everywhere (health, breakers, listings) without its secrets.

/// The longest URL Herald stores (callbacks and routes).
pub const MAX_URL_LEN: usize = 2048;

/// A URL Herald refuses, naming the setting or field it came from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct UrlError {
    pub field: &'static str,
    pub message: String,
}

/// An absolute http(s) URL with a host, at most [`MAX_URL_LEN`] long; returns its
/// normalised form.
pub fn validate_url(field: &'static str, url: &str) -> Result<String, UrlError> {
    let refuse = |message: String| UrlError { field, message };
    if url.len() > MAX_URL_LEN {
        return Err(refuse(format!("is longer than {MAX_URL_LEN} characters")));
    }
    let parsed = url::Url::parse(url).map_err(|e| refuse(format!("is not a valid URL ({e})")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(refuse("must use http or https".into()));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(refuse("must name a host".into()));
    }
    // What is stored is the normalised form, which percent-encoding can make
    // several times longer than what was sent.
    let normalised = parsed.to_string();
    if normalised.len() > MAX_URL_LEN {
        return Err(refuse(format!(
            "is longer than {MAX_URL_LEN} characters once percent-encoded"
        )));
    }
    Ok(normalised)
}

/// `scheme://host[:port]` of a URL: the web origin for http(s) (as browsers
/// write it), `scheme://host:port` for other schemes (smtp, smtps). Enough to
/// recognise a destination, nothing secret.
pub fn origin(url: &str) -> Option<String> {
    let parsed = url::Url::parse(url).ok()?;
    let origin = parsed.origin();
    if origin.is_tuple() {
        return Some(origin.ascii_serialization());
    }
    let host = parsed.host()?;
    let port = parsed.port().or(match parsed.scheme() {
        "smtp" => Some(25),
        "smtps" => Some(465),
        _ => None,
    })?;
    Some(format!("{}://{host}:{port}", parsed.scheme()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_too_long_once_percent_encoded_is_refused() {
        // 1,000 two-byte characters: 2,019 bytes sent, 6,019 once encoded.
        let url = format!("https://hooks.example.com/{}", "é".repeat(1000));
        assert!(url.len() <= MAX_URL_LEN);
        let err = validate_url("callback_url", &url).unwrap_err();
        assert!(err.to_string().contains("percent-encoded"), "{err}");
    }

    #[test]
    fn origins_name_scheme_host_and_port_only() {
        assert_eq!(
            origin("https://hooks.example.com/a?key=secret").as_deref(),
            Some("https://hooks.example.com")
        );
        assert_eq!(
            origin("http://127.0.0.1:8080/x").as_deref(),
            Some("http://127.0.0.1:8080")
        );
        assert_eq!(
            origin("smtp://mail.example.com").as_deref(),
            Some("smtp://mail.example.com:25")
        );
    }

    #[test]
    fn origin_drops_path_and_query() {
        assert_eq!(
            origin("https://hooks.example.com:8443/secret/path?token=abc").as_deref(),
            Some("https://hooks.example.com:8443")
        );
    }
}
