-- Users and tokens, continued (issue 23, item 6).
-- Who made a token (a user's name, or local for the command line): a token is
-- not tied to its maker, so disabling the maker leaves it working until revoked.
ALTER TABLE api_tokens ADD COLUMN created_by TEXT NULL;

-- One row every change to a user writes first: on Galera, whose row locks stay
-- on their own node, two nodes taking out the last two admins at once write the
-- same row, so certification lets only one of them commit.
CREATE TABLE account_changes (
    id INTEGER NOT NULL PRIMARY KEY,
    changes INTEGER NOT NULL
);
INSERT INTO account_changes (id, changes) VALUES (1, 0);
