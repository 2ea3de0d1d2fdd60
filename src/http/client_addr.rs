//! The client address a request came from, as sign-in throttling keys it.
//!
//! Behind a reverse proxy every request arrives from the proxy, so one attacker
//! would share a throttle with every user. When the peer is a configured trusted
//! proxy, the client is the right-most `X-Forwarded-For` address that is not itself
//! a trusted proxy (the left part of the header is whatever the client claimed).

use std::net::IpAddr;

use axum::http::HeaderMap;
use ipnet::IpNet;

pub fn client_address(peer: IpAddr, headers: &HeaderMap, trusted: &[IpNet]) -> IpAddr {
    let is_trusted = |ip: &IpAddr| trusted.iter().any(|net| net.contains(ip));
    if !is_trusted(&peer) {
        return peer;
    }
    let forwarded: Vec<IpAddr> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|item| item.trim().parse::<IpAddr>().ok())
        .collect();
    forwarded
        .into_iter()
        .rev()
        .find(|ip| !is_trusted(ip))
        .unwrap_or(peer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(xff: &[&str]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for v in xff {
            map.append("x-forwarded-for", v.parse().unwrap());
        }
        map
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_claims() {
        let trusted = vec!["10.0.0.0/8".parse().unwrap()];
        let peer: IpAddr = "203.0.113.9".parse().unwrap();
        assert_eq!(
            client_address(peer, &headers(&["198.51.100.1"]), &trusted),
            peer
        );
        assert_eq!(client_address(peer, &headers(&["198.51.100.1"]), &[]), peer);
    }

    #[test]
    fn behind_a_trusted_proxy_the_rightmost_untrusted_hop_is_the_client() {
        let trusted = vec!["10.0.0.0/8".parse().unwrap()];
        let peer: IpAddr = "10.0.0.2".parse().unwrap();
        // The client forged the first entry; the proxy appended the real one.
        let got = client_address(
            peer,
            &headers(&["1.1.1.1, 198.51.100.7", "10.0.0.5"]),
            &trusted,
        );
        assert_eq!(got, "198.51.100.7".parse::<IpAddr>().unwrap());
        assert_eq!(client_address(peer, &headers(&[]), &trusted), peer);
    }
}
