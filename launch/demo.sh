#!/usr/bin/env bash
# make demo: four ranks of the reference tensor-parallel worker (`selene run`)
# under mpirun on this host, the host-memory device standing in for each
# rank's GPU, a record directory per rank. Rank zero forms the store over
# loopback TCP; every other rank is a peer agent. Two launches:
#
#   1. a conversation's second turn hits the GPU prefix cache; three long
#      documents then evict it from the GPU, and its third turn is restored
#      from the record files of every rank;
#   2. every rank restarted (a new mpirun): turns are restored from disk,
#      then one hits the GPU cache again.
#
# Every reused page and row is checked byte-exact on every rank. Then every
# rank's files are compared (same names and lengths) and verified.
set -euo pipefail
program=${1:-build/selene}
base=${SELENE_DEMO_DIR:-/tmp/selene-demo}
ranks=${SELENE_DEMO_RANKS:-4}
device=${SELENE_DEMO_DEVICE:-host}
traces=$(cd "$(dirname "$0")" && pwd)/traces

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
export SELENE_LOG=warn
unset SELENE_COORDINATOR SELENE_RANK SELENE_WORLD_SIZE
rm -rf "$base"
mkdir -p "$base"

# The ranks find each other through MPI: rank zero's port and a fresh launch
# secret are broadcast, every rank's addresses gathered (launch/bootstrap/bootstrap.h).
# A GPU cache of 64 pages (256 KiB each per rank) and 8 state rows.
run() {
	mpirun --oversubscribe -np "$ranks" -x SELENE_LOG \
		"$program" run --trace "$traces/$1" --dir "$base/rank%r" --device "$device" \
		--gpu-pages 64 --gpu-rows 8 --results "$base/${1%.jsonl}.results.json"
}

echo "== launch 1: $ranks ranks under mpirun: a GPU hit, then a host restore after GPU eviction"
run demo-1.jsonl
echo
echo "== launch 2: every rank restarted: restores from the record files"
run demo-2.jsonl
echo
listing() {
	(cd "$1"/*/ && find . -name '*.ckpt' -printf '%f %s\n' | sort)
}
listing "$base/rank0" > "$base/expect"
for r in $(seq 1 $((ranks - 1))); do
	if ! listing "$base/rank$r" | cmp -s - "$base/expect"; then
		echo "rank $r's record files differ from rank 0's" >&2
		exit 1
	fi
done
echo "== every rank holds the same $(wc -l < "$base/expect") record files"
echo "== selene verify $base"
"$program" verify "$base" | tail -1
echo
echo "== selene ls $base/rank1"
"$program" ls "$base/rank1"
echo
echo "per-request results (JSON lines): $base/demo-1.results.json, $base/demo-2.results.json"
