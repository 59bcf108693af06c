#!/usr/bin/env bash
# make check-tsan: three ranks of the selene program built with
# ThreadSanitizer (selene cluster-demo through the environment bootstrap:
# store, restore, restart every rank, restore), on loopback. Fails when a
# rank exits non-zero or TSan reports anything (its log is printed).
set -euo pipefail
program=${1:-build-tsan/selene}
ranks=3
base=$(mktemp -d "${TMPDIR:-/tmp}/selene-tsan-XXXXXX")
trap 'rm -rf "$base"' EXIT

printf '0123456789abcdef0123456789abcdef' > "$base/secret"
chmod 600 "$base/secret"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export SELENE_WORLD_SIZE=$ranks SELENE_COORDINATOR=127.0.0.1:$port \
	SELENE_SECRET_FILE=$base/secret SELENE_LOG=warn
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1} log_path=$base/tsan"

pids=()
for r in $(seq 0 $((ranks - 1))); do
	SELENE_RANK=$r "$program" cluster-demo --dir "$base/rank%r" > "$base/out$r" 2>&1 &
	pids+=($!)
done
failed=0
for r in $(seq 0 $((ranks - 1))); do
	if ! wait "${pids[$r]}"; then
		echo "tsan-ranks: rank $r failed:" >&2
		cat "$base/out$r" >&2
		failed=1
	fi
done
if compgen -G "$base/tsan*" > /dev/null; then
	echo "tsan-ranks: ThreadSanitizer reported:" >&2
	cat "$base"/tsan* >&2
	failed=1
fi
[ "$failed" -eq 0 ] && echo "tsan-ranks: $ranks ranks of cluster-demo clean under ThreadSanitizer"
exit "$failed"
