//! Database faults for tests, injected with real triggers so the statement really
//! fails inside the engine (as a failover, a constraint or a Galera conflict would).

use herald::store::{Engine, SqlStore};
use sqlx::Executor;

/// A trigger that makes matching `outbox_events` status changes fail.
pub struct StatusFault {
    pub name: &'static str,
    /// Only changes from this status (any when `None`).
    pub from: Option<&'static str>,
    pub to: &'static str,
    /// Only this event (every event when `None`).
    pub event_id: Option<&'static str>,
}

impl StatusFault {
    fn condition(&self, old: &str, new: &str) -> String {
        let mut parts = vec![format!("{new}.status = '{}'", self.to)];
        if let Some(from) = self.from {
            parts.push(format!("{old}.status = '{from}'"));
        }
        if let Some(id) = self.event_id {
            parts.push(format!("{new}.event_id = '{id}'"));
        }
        parts.join(" AND ")
    }

    pub async fn install(&self, store: &SqlStore) {
        let name = self.name;
        let statements = match store.engine() {
            Engine::Sqlite => vec![format!(
                "CREATE TRIGGER {name} BEFORE UPDATE OF status ON outbox_events WHEN {} \
                 BEGIN SELECT RAISE(ABORT, 'injected fault'); END",
                self.condition("OLD", "NEW")
            )],
            Engine::Postgres => vec![
                format!(
                    "CREATE FUNCTION {name}() RETURNS trigger AS $$ BEGIN IF {} THEN \
                     RAISE EXCEPTION 'injected fault'; END IF; RETURN NEW; END $$ LANGUAGE plpgsql",
                    self.condition("OLD", "NEW")
                ),
                format!(
                    "CREATE TRIGGER {name} BEFORE UPDATE ON outbox_events \
                     FOR EACH ROW EXECUTE FUNCTION {name}()"
                ),
            ],
            Engine::MySql => vec![format!(
                "CREATE TRIGGER {name} BEFORE UPDATE ON outbox_events FOR EACH ROW BEGIN \
                 IF {} THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'injected fault'; \
                 END IF; END",
                self.condition("OLD", "NEW")
            )],
        };
        install_all(store, &statements).await;
    }

    pub async fn remove(&self, store: &SqlStore) {
        let name = self.name;
        let sql = match store.engine() {
            Engine::Postgres => format!("DROP TRIGGER {name} ON outbox_events"),
            Engine::Sqlite | Engine::MySql => format!("DROP TRIGGER {name}"),
        };
        store
            .pool()
            .execute(sql.as_str())
            .await
            .expect("remove the fault");
    }
}

/// A trigger that makes every insert into `table` fail.
pub struct InsertFault {
    pub name: &'static str,
    pub table: &'static str,
}

impl InsertFault {
    pub async fn install(&self, store: &SqlStore) {
        let (name, table) = (self.name, self.table);
        let statements = match store.engine() {
            Engine::Sqlite => vec![format!(
                "CREATE TRIGGER {name} BEFORE INSERT ON {table} \
                 BEGIN SELECT RAISE(ABORT, 'injected fault'); END"
            )],
            Engine::Postgres => vec![
                format!(
                    "CREATE FUNCTION {name}() RETURNS trigger AS $$ BEGIN \
                     RAISE EXCEPTION 'injected fault'; END $$ LANGUAGE plpgsql"
                ),
                format!(
                    "CREATE TRIGGER {name} BEFORE INSERT ON {table} \
                     FOR EACH ROW EXECUTE FUNCTION {name}()"
                ),
            ],
            Engine::MySql => vec![format!(
                "CREATE TRIGGER {name} BEFORE INSERT ON {table} FOR EACH ROW \
                 SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'injected fault'"
            )],
        };
        install_all(store, &statements).await;
    }
}

/// Runs a fault's statements (a trigger, and on PostgreSQL its function).
async fn install_all(store: &SqlStore, statements: &[String]) {
    for sql in statements {
        store
            .pool()
            .execute(sql.as_str())
            .await
            .expect("install the fault");
    }
}
