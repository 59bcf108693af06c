#!/usr/bin/env bash
# The multihost qualification (seed section 4): the reference TP worker
# (`selene run`) on every rank, launched with mpirun, through three phases:
#
#   1. a GPU-cache hit with no host hit;
#   2. a host restore after the GPU copies were evicted;
#   3. a restore after restarting every rank (a new mpirun);
#   4. a store whose disk writes fail on one rank (a failpoint armed there
#      only): the run fails and says so, and no rank keeps a file of it;
#   5. a warm tier on every rank (fresh directories, written through): a
#      restore after the GPU copies were evicted is served from warm
#      slots, reading no file (the results' warm figures say so);
#   6. a restart of every rank with a smaller warm tier, written behind:
#      warm starts empty, so the first restore reads its records through
#      from the disk into warm; the documents stored after fill warm, and
#      the last restore takes its chain from warm or the disk, whichever
#      holds it then (the spills' timing decides; both byte-exact).
#   7. a pool: a manager (`selene pool`) on the first host, two instances
#      of two ranks each on the others (loopback: all here); instance A
#      cascades records under a small disk limit, instance B (fresh
#      directories) restores them byte-exact from the pool; then the
#      manager is killed while a third instance's claim streams (each
#      window read held back by a failpoint on that instance only): its
#      restore fails and says so, and no byte is taken as restored.
#
# Every phase checks every reused page and row byte-exact on every rank and
# its "expect" lines (tests/qualify/phase-*.jsonl); after every phase, every
# rank holds the same record file names and lengths, and `selene verify`
# passes on every rank's directory.
#
#   loopback  every rank on this host (its links over 127.0.0.1)
#   netns     one network namespace per rank, each a "host" with its own
#             address from 198.18.0.0/15 on a bridge made for this run, and
#             mpirun across them through an rsh agent that enters the
#             namespace; removed afterwards, also on failure (as root)
#
# usage: tests/qualify/multihost.sh loopback|netns [PROGRAM] [RANKS]
# SELENE_QUALIFY_DEVICE=cuda runs every rank on CUDA device 0 (default host).
# SELENE_QUALIFY_ONLY=pool runs the pool phase (7) alone.
set -euo pipefail
mode=${1:?usage: multihost.sh loopback|netns [PROGRAM] [RANKS]}
program=$(realpath "${2:-build/selene}")
ranks=${3:-3}
here=$(cd "$(dirname "$0")" && pwd)
id=$$
net=$((id % 200 + 20))          # 198.18.<net>.0/24, per run
bridge=brs$id
work=$(mktemp -d /tmp/selene-qualify.XXXXXX)

cleanup() {
	if [ "$mode" = netns ]; then
		for i in $(seq 1 "$ranks"); do
			ip netns del "sel$id-h$i" 2>/dev/null || true
		done
		ip link del "$bridge" 2>/dev/null || true
	fi
	[ -z "${pool_pid:-}" ] || kill -9 "$pool_pid" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export SELENE_LOG=warn
unset SELENE_COORDINATOR SELENE_RANK SELENE_WORLD_SIZE
mpi_args=()

make_hosts() {
	# A machine that cannot make namespaces (no root, a restricted
	# container) cannot run this mode: say so plainly and stop.
	if ! ip netns add "sel$id-probe" 2>"$work/probe.err"; then
		echo "multihost netns: SKIPPED: cannot create network namespaces here:" \
			"$(cat "$work/probe.err")" >&2
		exit 0
	fi
	ip netns del "sel$id-probe"
	ip link add "$bridge" type bridge
	ip addr add "198.18.$net.1/24" dev "$bridge"
	ip link set "$bridge" up
	: > "$work/hostfile"
	{
		echo '#!/bin/bash'
		echo 'while [[ $1 == -* ]]; do shift; done'
		echo 'host=$1; shift'
		echo 'case $host in'
	} > "$work/rsh"
	for i in $(seq 1 "$ranks"); do
		local ns=sel$id-h$i
		ip netns add "$ns"
		ip link add "vs$id-$i" type veth peer name eth0 netns "$ns"
		ip link set "vs$id-$i" master "$bridge" up
		ip netns exec "$ns" ip addr add "198.18.$net.$((10 + i))/24" dev eth0
		ip netns exec "$ns" ip link set eth0 up
		ip netns exec "$ns" ip link set lo up
		echo "198.18.$net.$((10 + i)) slots=1" >> "$work/hostfile"
		# A host of its own: a network namespace, a hostname (a UTS
		# namespace) and a temporary directory. Open MPI keeps its session
		# files under ompi.HOSTNAME in the temporary directory; daemons on
		# "hosts" sharing both race to make and remove each other's.
		mkdir -p "$work/h$i-tmp"
		{
			echo '#!/bin/bash'
			echo "echo sel-h$i > /proc/sys/kernel/hostname || exit 1"
			echo "export TMPDIR=$work/h$i-tmp"
			echo 'exec bash -c "$*"'
		} > "$work/h$i-enter"
		chmod +x "$work/h$i-enter"
		echo "198.18.$net.$((10 + i))) exec ip netns exec $ns unshare --uts" \
			"$work/h$i-enter \"\$@\" ;;" >> "$work/rsh"
	done
	echo 'esac; echo "netns-rsh: unknown host $host" >&2; exit 1' >> "$work/rsh"
	chmod +x "$work/rsh"
	# Every daemon started by mpirun itself and talking to it directly:
	# no daemon depends on another having started (tree spawn, radix
	# routing), as on a cluster where mpirun reaches every host.
	mpi_args=(--hostfile "$work/hostfile" --mca plm_rsh_agent "$work/rsh"
		--mca plm_rsh_no_tree_spawn 1 --mca routed direct
		--mca oob_tcp_if_include "198.18.$net.0/24"
		--mca btl tcp,self --mca btl_tcp_if_include "198.18.$net.0/24")
	echo "== $ranks hosts: namespaces sel$id-h1..$ranks at 198.18.$net.11.., mpirun across them"
}

case $mode in
loopback)
	mpi_args=(--oversubscribe --mca btl self,tcp --mca btl_tcp_if_include lo
		--mca oob_tcp_if_include lo)
	echo "== $ranks ranks on this host (loopback)"
	;;
netns) make_hosts ;;
*) echo "multihost.sh: mode is loopback or netns, not $mode" >&2; exit 2 ;;
esac

# Every rank holds the same record names and lengths; every file verifies.
listing() {
	(cd "$1"/*/ && find . -name '*.ckpt' -printf '%f %s\n' | sort)
}

check_agreement() {
	local base=${1:-$work/rank}
	listing "${base}0" > "$work/expect"
	[ -s "$work/expect" ] || { echo "no records on rank 0" >&2; exit 1; }
	for r in $(seq 0 $((ranks - 1))); do
		"$program" verify "$base$r" > /dev/null
		if ! listing "$base$r" | cmp -s - "$work/expect"; then
			echo "rank $r's record files differ from rank 0's:" >&2
			listing "$base$r" | diff "$work/expect" - >&2 || true
			exit 1
		fi
	done
	echo "-- every rank holds the same $(wc -l < "$work/expect") record files; all verified"
}

# The hosts' addresses and links, for a launch that failed.
show_hosts() {
	[ "$mode" = netns ] || return 0
	ip -br link show "$bridge" >&2 || true
	for i in $(seq 1 "$ranks"); do
		echo "host sel-h$i:" >&2
		ip netns exec "sel$id-h$i" ip -br addr >&2 || true
	done
}

# mpirun ARGS...: mpirun, once more if Open MPI could not start its daemons
# (no rank ran then, so nothing of Selene's is retried); the output shows it.
launch() {
	local attempt
	for attempt in 1 2; do
		if mpirun "${mpi_args[@]}" -np "$ranks" -x SELENE_LOG "$@" 2>&1 |
			tee "$work/launch.out"; [ "${PIPESTATUS[0]}" = 0 ]; then
			return 0
		fi
		grep -q "unable to reliably start one or more daemons" "$work/launch.out" ||
			return 1
		echo "multihost $mode: mpirun could not start its daemons (attempt $attempt)" >&2
		show_hosts
	done
	return 1
}

run_phase() {
	local phase=$1 what=$2
	echo
	echo "== phase $phase: $what"
	# each rank's directory is its own host's; %r becomes the rank
	launch "$program" run --trace "$here/phase-$phase.jsonl" --dir "$work/rank%r" \
		--device "${SELENE_QUALIFY_DEVICE:-host}" --device-ordinal 0 --gpu-pages 64 --gpu-rows 8 --results "$work/phase-$phase.json"
	check_agreement
}

run_failing_phase() {
	local before
	before=$(wc -l < "$work/expect")
	echo
	echo "== phase 4: every disk write fails on rank 1 only"
	if launch bash -c \
		'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then
			export SELENE_FAILPOINTS="disk.write=return(EIO)"
		fi
		exec "$0" "$@"' \
		"$program" run --trace "$here/phase-4.jsonl" --dir "$work/rank%r" \
		--device "${SELENE_QUALIFY_DEVICE:-host}" --device-ordinal 0 --gpu-pages 64 \
		--gpu-rows 8 > "$work/phase-4.out" 2>&1; then
		cat "$work/phase-4.out"
		echo "phase 4: the run succeeded although rank 1 could not write" >&2
		exit 1
	fi
	if ! grep -q "was not stored" "$work/phase-4.out"; then
		cat "$work/phase-4.out"
		echo "phase 4: the failed store was not reported" >&2
		exit 1
	fi
	grep "was not stored" "$work/phase-4.out" | head -1
	check_agreement
	if [ "$(wc -l < "$work/expect")" != "$before" ]; then
		echo "phase 4: the failed store left files behind" >&2
		exit 1
	fi
}

# run_warm_phase N WHAT SIZE POLICY CHECK: a phase on the warm directories
# with a warm tier of SIZE on every rank; CHECK, a Python expression over w
# (the results summary's "warm" figures), must hold.
run_warm_phase() {
	local phase=$1 what=$2 size=$3 policy=$4 check=$5
	echo
	echo "== phase $phase: $what"
	launch "$program" run --trace "$here/phase-$phase.jsonl" --dir "$work/warm%r" \
		--device "${SELENE_QUALIFY_DEVICE:-host}" --device-ordinal 0 --gpu-pages 64 \
		--gpu-rows 8 --warm "$size" --warm-policy "$policy" \
		--results "$work/phase-$phase.json"
	python3 - "$work/phase-$phase.json" "$check" <<'PY'
import json, sys
w = [json.loads(l) for l in open(sys.argv[1]) if '"summary"' in l][-1]["summary"]["warm"]
print("-- warm tier: %s" % ", ".join("%s %d" % kv for kv in sorted(w.items())))
if not eval(sys.argv[2], {"w": w}):
    sys.exit("the warm figures do not meet %s" % sys.argv[2])
PY
	check_agreement "$work/warm"
}

# The pool phase (7): see the top. Instances run two ranks on the hosts
# after the first; the manager runs on the first.
run_pool_phase() {
	local t0=$SECONDS mgr_host=127.0.0.1 enter=() port=$((7400 + id % 500))
	local mport=$((9400 + id % 500)) inst=() before claims rc a
	echo
	echo "== phase 7: a pool manager; instance A cascades, B restores from the pool"
	if [ "$mode" = netns ]; then
		mgr_host=198.18.$net.11
		enter=(ip netns exec "sel$id-h1")
		sed -n '2,3p' "$work/hostfile" > "$work/hostfile-pool"
	fi
	for a in "${mpi_args[@]}"; do # the instances' hosts: all but the first
		[ "$a" = "$work/hostfile" ] && a=$work/hostfile-pool
		inst+=("$a")
	done
	head -c 32 /dev/urandom > "$work/pool.secret"
	chmod 600 "$work/pool.secret"
	"${enter[@]}" "$program" pool --listen "$mgr_host:$port" --secret "$work/pool.secret" \
		--memory 64M --name qualify --metrics-port "$mport" 2> "$work/pool.log" &
	pool_pid=$!
	pool_metric() {
		"${enter[@]}" curl -s "http://127.0.0.1:$mport/metrics" |
			awk -v m="$1" 'index($0, m) == 1 { print $2 }'
	}
	for _ in $(seq 100); do
		[ -n "$(pool_metric selene_pool_records 2>/dev/null)" ] && break
		sleep 0.1
	done
	pool_instance() { # NAME DIR TRACE DISK_LIMIT [MPIRUN ARGS...]
		local name=$1 dir=$2 trace=$3 limit=$4
		shift 4
		mpirun "${inst[@]}" -np 2 -x SELENE_LOG "$@" \
			"$program" run --trace "$here/$trace" --dir "$work/$dir%r" \
			--device "${SELENE_QUALIFY_DEVICE:-host}" --device-ordinal 0 \
			--gpu-pages 64 --gpu-rows 8 --planes 2x4K --row-bytes 16K \
			--disk-limit "$limit" \
			--pool "$mgr_host:$port" --pool-secret "$work/pool.secret" \
			--results "$work/pool-$name.json"
	}
	pool_instance a poolA phase-pool-a.jsonl 2M > "$work/pool-a.out" 2>&1 ||
		{ cat "$work/pool-a.out" "$work/pool.log"; echo "phase 7: instance A failed" >&2; exit 1; }
	echo "-- instance A: $(pool_metric 'selene_pool_puts_total{outcome="committed"}') records" \
		"committed to the pool"
	pool_instance b poolB phase-pool-b.jsonl 64M > "$work/pool-b.out" 2>&1 ||
		{ cat "$work/pool-b.out"; echo "phase 7: instance B did not restore from the pool" >&2
		  exit 1; }
	grep '"doc-x"' "$work/pool-b.json" | head -1
	before=$(pool_metric 'selene_pool_claims_total{outcome="granted"}')
	echo "-- instance B restored doc-x from the pool byte-exact ($before claims granted)"
	# its ranks stream the claim (on one host they would copy it from the
	# manager's arena at once), each window held 3 s: the kill lands mid-claim
	SELENE_FAILPOINTS="pool.arena_map=return(EIO);pool.rx_data=sleep(3000)" \
		pool_instance c poolC phase-pool-b.jsonl \
		64M -x SELENE_FAILPOINTS > "$work/pool-c.out" 2>&1 &
	local c_pid=$!
	for _ in $(seq 400); do
		claims=$(pool_metric 'selene_pool_claims_total{outcome="granted"}')
		[ "${claims:-0}" -gt "$before" ] && break
		sleep 0.05
	done
	[ "${claims:-0}" -gt "$before" ] ||
		{ kill "$c_pid"; cat "$work/pool-c.out"; echo "phase 7: no claim began" >&2; exit 1; }
	kill -9 "$pool_pid"
	wait "$pool_pid" 2>/dev/null || true
	rc=0
	wait "$c_pid" || rc=$?
	if [ "$rc" = 0 ] || ! grep -q "restore of 1536 tokens failed" "$work/pool-c.out"; then
		cat "$work/pool-c.out"
		echo "phase 7: the claim cut by the manager's death did not fail (rc $rc)" >&2
		exit 1
	fi
	if grep -q '"host_reused": [1-9]' "$work/pool-c.json"; then
		echo "phase 7: a restore counted bytes from a dead manager" >&2
		exit 1
	fi
	grep "restore of 1536 tokens failed" "$work/pool-c.out" | head -1
	echo "-- phase 7 took $((SECONDS - t0)) s"
}

if [ "${SELENE_QUALIFY_ONLY:-}" = pool ]; then
	run_pool_phase
	exit 0
fi
run_phase 1 "a GPU-cache hit with no host hit"
run_phase 2 "a host restore after the GPU copies were evicted"
run_phase 3 "a restore after restarting every rank"
run_failing_phase
run_warm_phase 5 "a warm tier on every rank: a restore from warm slots" 64M write-through \
	"w['hits'] >= 1 and w['read_throughs'] == 0 and w['dirty_at_close'] == 0"
run_warm_phase 6 "a restart: warm empty, restores read through from the disk" 8M write-behind \
	"w['read_throughs'] >= 2"
run_pool_phase
echo
echo "== multihost $mode: qualified ($ranks ranks, 7 phases)"
