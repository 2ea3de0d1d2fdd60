//! Routes: what a destination is, below the configuration and both sources —
//! a route's settings and checks, the URL rules and the one `origin` that names a
//! destination, a route's frozen payload and the delivery that sends it over its
//! channel.

mod book;
mod delivery;
mod payload;
mod route;
mod url;

pub use book::Routes;
pub use delivery::DeliveryHandler;
pub use payload::DeliveryPayload;
pub use route::{
    bounded_lane, lane_key, OrderedBy, RouteChannel, RouteConfig, MAX_LANE_LEN, MAX_ROUTE_NAME_LEN,
};
pub use url::{origin, validate_url, UrlError, MAX_URL_LEN};
