//! The destination guard: loopback, private, link-local, unspecified and other
//! non-public addresses are refused unless allow-listed. It runs on the resolved
//! address at connect time (a DNS resolver for reqwest), so DNS rebinding cannot
//! slip past, and on IP literals before a request is made.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use ipnet::IpNet;

#[derive(Clone, Debug, Default)]
pub struct DestinationGuard {
    allow: Arc<Vec<IpNet>>,
}

#[derive(Debug, thiserror::Error, PartialEq)]
#[error(
    "destination address {0} is not public; allow-list it with destination_allowlist to send there"
)]
pub struct Refused(pub IpAddr);

impl DestinationGuard {
    pub fn new(allow: Vec<IpNet>) -> Self {
        DestinationGuard {
            allow: Arc::new(allow),
        }
    }

    /// Parses `127.0.0.0/8, ::1/128` (a bare address is a single-host network).
    pub fn parse_allowlist(text: &str) -> Result<Vec<IpNet>, String> {
        text.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|item| {
                item.parse::<IpNet>()
                    .or_else(|_| item.parse::<IpAddr>().map(IpNet::from))
                    .map_err(|_| format!("{item:?} is not an IP address or CIDR network"))
            })
            .collect()
    }

    pub fn check(&self, ip: IpAddr) -> Result<(), Refused> {
        if is_public(ip) || self.allow.iter().any(|net| net.contains(&ip)) {
            Ok(())
        } else {
            Err(Refused(ip))
        }
    }
}

fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_documentation()
                || v4.is_multicast()
                || a == 0
                || (a == 100 && (64..128).contains(&b)) // shared address space (CGNAT)
                || (a == 198 && (b == 18 || b == 19)) // benchmarking
                || (a == 192 && b == 0 && v4.octets()[2] == 0) // IETF protocol assignments
                || a >= 240)
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = embedded_ipv4(v6) {
                return is_public(IpAddr::V4(v4));
            }
            let first = v6.segments()[0];
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00 // unique local
                || (first & 0xffc0) == 0xfe80 // link-local
                || (first & 0xffc0) == 0xfec0 // site-local (deprecated, still routed privately)
                || v6.segments()[..3] == [0x64, 0xff9b, 0x0001]) // local-use NAT64
        }
    }
}

/// The IPv4 address an IPv6 address carries: IPv4-mapped (`::ffff:a.b.c.d`),
/// IPv4-compatible (`::a.b.c.d`), NAT64 (`64:ff9b::a.b.c.d`) and 6to4
/// (`2002:aabb:ccdd::`). Each reaches that IPv4 host, so it is judged as that host.
fn embedded_ipv4(v6: std::net::Ipv6Addr) -> Option<std::net::Ipv4Addr> {
    let s = v6.segments();
    let tail =
        || std::net::Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    if let Some(v4) = v6.to_ipv4_mapped() {
        return Some(v4);
    }
    if s[..6] == [0, 0, 0, 0, 0, 0] && !(v6.is_loopback() || v6.is_unspecified()) {
        return Some(tail());
    }
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return Some(tail());
    }
    if s[0] == 0x2002 {
        return Some(std::net::Ipv4Addr::new(
            (s[1] >> 8) as u8,
            s[1] as u8,
            (s[2] >> 8) as u8,
            s[2] as u8,
        ));
    }
    None
}

/// A resolver that drops refused addresses; a name with none left fails to connect.
pub struct GuardedResolver {
    pub guard: DestinationGuard,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let guard = self.guard.clone();
        let host = name.as_str().to_string();
        Box::pin(async move {
            let resolved: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let mut refused = None;
            let allowed: Vec<SocketAddr> = resolved
                .into_iter()
                .filter(|addr| match guard.check(addr.ip()) {
                    Ok(()) => true,
                    Err(r) => {
                        refused = Some(r);
                        false
                    }
                })
                .collect();
            if allowed.is_empty() {
                let err: Box<dyn std::error::Error + Send + Sync> = match refused {
                    Some(r) => Box::new(r),
                    None => format!("{host} did not resolve").into(),
                };
                return Err(err);
            }
            Ok(Box::new(allowed.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_public_addresses_are_refused_unless_allow_listed() {
        let guard = DestinationGuard::default();
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "192.168.0.1",
            "172.16.5.5",
            "169.254.169.254",
            "0.0.0.0",
            "::1",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "100.64.0.1",
            "64:ff9b::a9fe:a9fe",
            "2002:7f00:1::",
            "::10.0.0.1",
            "fec0::1",
            "64:ff9b:1::1",
            "192.0.0.8",
        ] {
            assert!(guard.check(ip.parse().unwrap()).is_err(), "{ip}");
        }
        for ip in ["93.184.216.34", "2606:4700::1111"] {
            assert!(guard.check(ip.parse().unwrap()).is_ok(), "{ip}");
        }
        let allow = DestinationGuard::parse_allowlist("127.0.0.0/8, ::1").unwrap();
        let guard = DestinationGuard::new(allow);
        assert!(guard.check("127.0.0.1".parse().unwrap()).is_ok());
        assert!(guard.check("::1".parse().unwrap()).is_ok());
        assert!(guard.check("10.0.0.1".parse().unwrap()).is_err());
        assert!(DestinationGuard::parse_allowlist("localhost").is_err());
    }
}
