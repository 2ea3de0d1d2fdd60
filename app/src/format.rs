//! Text helpers every page shares: times and ids as shown, query values as sent.

/// `2026-11-30T10:36:47.021Z` as `2026-11-30 10:36:47 UTC`: seconds are enough at a glance;
/// the full time is in the cell's title.
pub fn display_time(rfc3339: &str) -> String {
    let trimmed = rfc3339.split(['.', 'Z']).next().unwrap_or(rfc3339);
    format!("{} UTC", trimmed.replace('T', " "))
}

/// The last 12 characters of an id: the part of a UUIDv7 that differs between runs.
pub fn short_id(id: &str) -> String {
    let start = id.len().saturating_sub(12);
    format!("…{}", &id[start..])
}

/// Percent-encodes a query value (types and cursors are plain ASCII, but be exact).
pub fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_show_to_the_second_in_utc() {
        assert_eq!(
            display_time("2026-11-30T10:36:47.021Z"),
            "2026-11-30 10:36:47 UTC"
        );
        assert_eq!(
            display_time("2026-11-30T10:36:47Z"),
            "2026-11-30 10:36:47 UTC"
        );
    }

    #[test]
    fn ids_show_their_last_twelve_characters() {
        assert_eq!(
            short_id("0193a5b2-7c1e-7d3f-9a4b-5c6d7e8f9a0b"),
            "…5c6d7e8f9a0b"
        );
        assert_eq!(short_id("run-1"), "…run-1");
    }

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(encode("run:0193-a_b.c~"), "run%3A0193-a_b.c~");
        assert_eq!(encode("a b&c=d/é"), "a%20b%26c%3Dd%2F%C3%A9");
    }
}
