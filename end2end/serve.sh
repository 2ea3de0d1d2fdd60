#!/usr/bin/env bash
# Starts Herald for the browser tests: a temporary SQLite database, one user per role
# (password "<role>-password-e2e"), the built console bundle.
set -euo pipefail
cd "$(dirname "$0")"
port=${1:-3917}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export HERALD_DATABASE_URL="sqlite://$dir/herald.db"
# Approval prompt routes to the browser tests' receiver (approvals.spec.ts).
export HERALD_CONFIG="$PWD/approvals.toml"
bin=../target/${PROFILE:-debug}/herald
for role in admin operator reader; do
  printf '%s' "$role-password-e2e" | "$bin" user add "$role" --role "$role" --password-stdin
done
"$bin" serve --listen "127.0.0.1:$port" --site-root ../target/site
