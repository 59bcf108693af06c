#!/usr/bin/env bash
# make demo: four ranks under mpirun on this host, each with its own base
# directory, each storing its share of a conversation's checkpoints,
# restarting, restoring and verifying them; then selene verify and ls over
# every rank's directory.
set -euo pipefail
program=${1:-build/selene}
base=${SELENE_DEMO_DIR:-/tmp/selene-demo}
ranks=${SELENE_DEMO_RANKS:-4}

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
rm -rf "$base"
echo "== $ranks ranks under mpirun, one directory per rank under $base"
SELENE_LOG=warn mpirun --oversubscribe -np "$ranks" "$program" demo --dir "$base/rank%r"
echo
echo "== selene verify $base"
"$program" verify "$base"
echo
echo "== selene ls $base/rank0"
"$program" ls "$base/rank0"
