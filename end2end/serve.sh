#!/usr/bin/env bash
# Starts what the browser tests run against, each on a port the OS picks (port 0):
# the shared receiver (receiver-server.mjs; webhook routes /ok and /fail from
# approvals.toml, a chat route to /chat, and any callback path a spec names), then
# Herald on a temporary SQLite database with one user per role (password
# "<role>-password-e2e"), the built console bundle, and fast, loopback-allowed
# delivery. Once Herald answers /readyz it prints one line that playwright.config.ts
# waits for, handing the URLs (and the first Herald's database file) to the tests:
#   Herald e2e ready: base=http://127.0.0.1:<port> receiver=http://127.0.0.1:<port> two=… db=…
set -euo pipefail
cd "$(dirname "$0")"

# Herald gets this script's settings only, whatever the caller's shell exports.
while IFS= read -r name; do unset "$name"; done < <(compgen -e | grep '^HERALD_' || true)

dir=$(mktemp -d)
cleanup() {
  kill $(jobs -p) 2>/dev/null || true
  wait || true
  rm -rf "$dir"
}
trap cleanup EXIT
# Playwright stops the suite's server with SIGTERM (gracefulShutdown): exit through cleanup.
trap 'exit 143' TERM INT

# Runs "$@" in the background and waits for a stdout line matching $1, whose first
# group it puts in $url; sets $pid. Its output is copied to ours all along, so the
# child never blocks on a full pipe.
start() {
  local pattern=$1 line fd
  shift
  local fifo
  fifo=$(mktemp -u "$dir/out.XXXXXX")
  mkfifo "$fifo"
  "$@" >"$fifo" &
  pid=$!
  exec {fd}<"$fifo"
  while IFS= read -r -t 60 -u "$fd" line; do
    printf '%s\n' "$line"
    if [[ $line =~ $pattern ]]; then
      url=${BASH_REMATCH[1]}
      cat <&"$fd" &
      exec {fd}<&-
      return 0
    fi
  done
  echo "serve.sh: $1 exited or was silent for 60 s without printing its URL" >&2
  return 1
}

start 'Herald e2e receiver: (http://127\.0\.0\.1:[0-9]+)$' node receiver-server.mjs
receiver=$url

export HERALD_DATABASE_URL="sqlite://$dir/herald.db"
export HERALD_DESTINATION_ALLOWLIST=127.0.0.0/8
export HERALD_WEBHOOK_SECRET=whsec_ZTJlLXdlYmhvb2stc2VjcmV0LWZvci10ZXN0cw==
export HERALD_MAX_ATTEMPTS=2
export HERALD_INITIAL_BACKOFF_MS=100
export HERALD_MAX_BACKOFF_MS=200
export HERALD_WORKER_POLL_INTERVAL_MS=100
export HERALD_MAINTENANCE_INTERVAL_MS=200
export HERALD_CHAT_MAX_CHARS=40
# The suite is over when Playwright stops Herald: no need to drain for long.
export HERALD_DRAIN_DEADLINE_SECS=2
# breakers.spec.ts opens its own receiver's breaker with 20 failed callback attempts
# (high enough that no other spec trips the shared receiver's).
export HERALD_BREAKER_FAILURES=20
# Approval prompt routes and replay settings (approvals.spec.ts) come first:
# top-level keys must precede the route tables.
sed "s|@RECEIVER@|$receiver|g" approvals.toml >"$dir/herald.toml"
cat >>"$dir/herald.toml" <<TOML
[[routes]]
name = "ops-chat"
channel = "chat"
url = "$receiver/chat"
brand = "Herald e2e"

# lanes.spec.ts: one tenant's deliveries one at a time, in commit order.
[[routes]]
name = "e2e-ordered"
channel = "webhook"
url = "$receiver/ordered"
ordered_by = "tenant"
TOML
export HERALD_CONFIG="$dir/herald.toml"

bin=../target/${PROFILE:-debug}/herald
two_jobs="sqlite://$dir/two-jobs.db"
for role in admin operator reader; do
  printf '%s' "$role-password-e2e" | "$bin" user add "$role" --role "$role" --password-stdin
  printf '%s' "$role-password-e2e" | "$bin" user add "$role" --role "$role" --password-stdin --database-url "$two_jobs"
done
start 'Herald console: (http://127\.0\.0\.1:[0-9]+)/overview$' "$bin" serve --listen 127.0.0.1:0 --site-root ../target/site
base=$url herald=$pid
start 'Herald console: (http://127\.0\.0\.1:[0-9]+)/overview$' env HERALD_DATABASE_URL="$two_jobs" \
  HERALD_APPROVALS_DATABASE_URL="sqlite://$dir/two-approvals.db" \
  "$bin" serve --listen 127.0.0.1:0 --site-root ../target/site
two=$url two_pid=$pid

# Listening is not yet ready: wait (at most 60 s) for /readyz.
ready() { node -e 'fetch(process.argv[1]).then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))' "$1"; }
deadline=$((SECONDS + 60))
until ready "$base/readyz" && ready "$two/readyz"; do
  kill -0 "$herald" 2>/dev/null || { echo "serve.sh: Herald exited before it was ready" >&2; exit 1; }
  kill -0 "$two_pid" 2>/dev/null || { echo "serve.sh: the two-database Herald exited before it was ready" >&2; exit 1; }
  ((SECONDS < deadline)) || { echo "serve.sh: Herald was not ready within 60 s" >&2; exit 1; }
  sleep 0.2
done
echo "Herald e2e ready: base=$base receiver=$receiver two=$two db=$dir/herald.db"
wait "$herald"
