-- Users and tokens managed from the console (issue 23, item 6): a disabled user
-- cannot sign in and its sessions end; a user's sessions carry the epoch they
-- began in, and a password reset or a disable moves it on, ending every older
-- session; a revoked token stays listed (who made it, when it went) but no
-- longer authenticates.
ALTER TABLE users ADD COLUMN disabled_at INTEGER NULL;
ALTER TABLE users ADD COLUMN session_epoch INTEGER NOT NULL DEFAULT 0;
ALTER TABLE api_tokens ADD COLUMN revoked_at INTEGER NULL;
