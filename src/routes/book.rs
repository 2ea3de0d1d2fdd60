//! The configured routes by name, shared by every source that sends over them.

use std::collections::HashMap;

use super::route::RouteConfig;

#[derive(Debug, Default)]
pub struct Routes {
    by_name: HashMap<String, RouteConfig>,
}

impl Routes {
    pub fn new(routes: &[RouteConfig]) -> Self {
        Routes {
            by_name: routes.iter().map(|r| (r.name.clone(), r.clone())).collect(),
        }
    }

    pub fn get(&self, name: &str) -> Option<&RouteConfig> {
        self.by_name.get(name)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }
}
