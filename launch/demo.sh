#!/usr/bin/env bash
# make demo: four ranks under mpirun on this host, each with its own base
# directory. First the store across ranks through the public API (rank zero
# forms the cluster over loopback TCP, every other rank is a peer): store a
# conversation's checkpoints on every rank, restore them, restart every rank
# and restore them from disk, every byte checked on every rank. Then each
# rank's record layer alone (selene demo). selene verify and ls close it.
set -euo pipefail
program=${1:-build/selene}
base=${SELENE_DEMO_DIR:-/tmp/selene-demo}
ranks=${SELENE_DEMO_RANKS:-4}

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
rm -rf "$base"
mkdir -p "$base"
# The ranks find each other through MPI: rank zero's port and a fresh launch
# secret are broadcast, every rank's addresses gathered (launch/bootstrap.h).
export SELENE_LOG=warn
echo "== $ranks ranks under mpirun: a store across ranks"
mpirun --oversubscribe -np "$ranks" -x SELENE_LOG \
	"$program" cluster-demo --dir "$base/cluster/rank%r" | sort -s -t: -k2,2
echo
echo "== $ranks ranks under mpirun: each rank's record layer alone"
mpirun --oversubscribe -np "$ranks" -x SELENE_LOG "$program" demo --dir "$base/rank%r"
echo
echo "== selene verify $base"
"$program" verify "$base"
echo
echo "== selene ls $base/cluster/rank1"
"$program" ls "$base/cluster/rank1"
