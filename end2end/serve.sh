#!/usr/bin/env bash
# Starts Herald for the browser tests: a temporary SQLite database, one user per role
# (password "<role>-password-e2e"), the built console bundle, and fast, loopback-
# allowed delivery so tests can drive notifications against a receiver they start
# on 127.0.0.1:${HERALD_E2E_RECEIVER_PORT:-3918} (webhooks to /hook, a chat route to /chat).
set -euo pipefail
cd "$(dirname "$0")"
port=${1:-3917}
receiver=${HERALD_E2E_RECEIVER_PORT:-3918}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export HERALD_DATABASE_URL="sqlite://$dir/herald.db"
export HERALD_DESTINATION_ALLOWLIST=127.0.0.0/8
export HERALD_WEBHOOK_SECRET=whsec_ZTJlLXdlYmhvb2stc2VjcmV0LWZvci10ZXN0cw==
export HERALD_MAX_ATTEMPTS=2
export HERALD_INITIAL_BACKOFF_MS=100
export HERALD_MAX_BACKOFF_MS=200
export HERALD_WORKER_POLL_INTERVAL_MS=100
export HERALD_MAINTENANCE_INTERVAL_MS=200
export HERALD_CHAT_MAX_CHARS=40
# breakers.spec.ts opens a destination's breaker with 20 failed callback attempts
# (high enough that no other spec trips one on the shared receiver).
export HERALD_BREAKER_FAILURES=20
# Approval prompt routes and replay settings (approvals.spec.ts) come first:
# top-level keys must precede the route tables.
cat approvals.toml > "$dir/herald.toml"
cat >> "$dir/herald.toml" <<TOML
[[routes]]
name = "ops-chat"
channel = "chat"
url = "http://127.0.0.1:$receiver/chat"
brand = "Herald e2e"
TOML
export HERALD_CONFIG="$dir/herald.toml"
bin=../target/${PROFILE:-debug}/herald
for role in admin operator reader; do
  printf '%s' "$role-password-e2e" | "$bin" user add "$role" --role "$role" --password-stdin
done
"$bin" serve --listen "127.0.0.1:$port" --site-root ../target/site
