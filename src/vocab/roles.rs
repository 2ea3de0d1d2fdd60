//! Who may do what: permissions, roles (DESIGN §7) and the viewer making a request.

use serde::{Deserialize, Serialize};

/// What a principal may do (DESIGN §7). Checked in the server's service layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Permission {
    RunsRead,
    RunsWrite,
    UsersManage,
    DataRead,
    RecordsRead,
    RecordsWrite,
    ApprovalsSubmit,
    DefinitionsManage,
}

impl Permission {
    pub fn as_str(self) -> &'static str {
        match self {
            Permission::RunsRead => "runs:read",
            Permission::RunsWrite => "runs:write",
            Permission::UsersManage => "users:manage",
            Permission::DataRead => "data:read",
            Permission::RecordsRead => "records:read",
            Permission::RecordsWrite => "records:write",
            Permission::ApprovalsSubmit => "approvals:submit",
            Permission::DefinitionsManage => "definitions:manage",
        }
    }
}

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Reader,
    Operator,
    Admin,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::Reader, Role::Operator, Role::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Reader => "reader",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }

    pub fn parse(value: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|role| role.as_str() == value)
    }

    pub fn permissions(self) -> &'static [Permission] {
        use Permission::*;
        match self {
            Role::Reader => &[RunsRead, RecordsRead],
            Role::Operator => &[
                RunsRead,
                RecordsRead,
                RunsWrite,
                RecordsWrite,
                ApprovalsSubmit,
            ],
            Role::Admin => &[
                RunsRead,
                RecordsRead,
                RunsWrite,
                RecordsWrite,
                ApprovalsSubmit,
                UsersManage,
                DefinitionsManage,
                DataRead,
            ],
        }
    }

    pub fn can(self, permission: Permission) -> bool {
        self.permissions().contains(&permission)
    }
}

/// Who is making a request: a signed-in user or an API token.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Viewer {
    pub name: String,
    pub role: Role,
}

impl Viewer {
    pub fn can(&self, permission: Permission) -> bool {
        self.role.can(permission)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_role_grants_its_table_of_permissions() {
        use Permission::*;
        let all = [
            RunsRead,
            RunsWrite,
            UsersManage,
            DataRead,
            RecordsRead,
            RecordsWrite,
            ApprovalsSubmit,
            DefinitionsManage,
        ];
        let granted =
            |role: Role| -> Vec<Permission> { all.into_iter().filter(|p| role.can(*p)).collect() };
        assert_eq!(granted(Role::Reader), vec![RunsRead, RecordsRead]);
        assert_eq!(
            granted(Role::Operator),
            vec![
                RunsRead,
                RunsWrite,
                RecordsRead,
                RecordsWrite,
                ApprovalsSubmit
            ]
        );
        assert_eq!(granted(Role::Admin), all.to_vec());
        let viewer = Viewer {
            name: "ops".into(),
            role: Role::Operator,
        };
        assert!(viewer.can(RunsWrite) && !viewer.can(DataRead));
    }

    #[test]
    fn roles_and_permissions_keep_their_names() {
        for role in Role::ALL {
            assert_eq!(Role::parse(role.as_str()), Some(role));
            assert_eq!(
                serde_json::to_string(&role).unwrap(),
                format!("\"{}\"", role.as_str())
            );
        }
        assert_eq!(Role::parse("root"), None);
        assert_eq!(Permission::DataRead.as_str(), "data:read");
        assert_eq!(
            serde_json::to_string(&Permission::RunsWrite).unwrap(),
            "\"RunsWrite\""
        );
        let viewer = Viewer {
            name: "ada".into(),
            role: Role::Admin,
        };
        let json = serde_json::to_string(&viewer).unwrap();
        assert_eq!(json, r#"{"name":"ada","role":"admin"}"#);
        assert_eq!(serde_json::from_str::<Viewer>(&json).unwrap(), viewer);
    }
}
