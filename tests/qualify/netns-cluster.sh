#!/usr/bin/env bash
# Selene across hosts for real, on one machine: makes N network namespaces
# joined by a bridge, each a "host" with its own address (198.18.0.0/15) and
# its own directory, and launches one rank of `selene cluster-demo` in each
# with mpirun (an rsh agent that enters the namespace). Rank zero's links to
# the peers cross the veth pairs. Afterwards it checks that every host holds
# the same record file names and lengths and that `selene verify` passes on
# every host's directory, then removes everything it made (also on failure).
#
# usage: tests/qualify/netns-cluster.sh [PROGRAM] [HOSTS]   (as root)
set -euo pipefail
program=$(realpath "${1:-build/selene}")
hosts=${2:-3}
id=$$
net=$((id % 200 + 20))          # 198.18.<net>.0/24, per run
bridge=brs$id
work=$(mktemp -d /tmp/selene-netns.XXXXXX)

cleanup() {
	for i in $(seq 1 "$hosts"); do
		ip netns del "sel$id-h$i" 2>/dev/null || true
	done
	ip link del "$bridge" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

# A machine that cannot make namespaces (no root, a restricted container)
# cannot run this qualification: say so plainly and stop.
if ! ip netns add "sel$id-probe" 2>"$work/probe.err"; then
	echo "netns-cluster: SKIPPED: cannot create network namespaces here:" \
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
for i in $(seq 1 "$hosts"); do
	ns=sel$id-h$i
	ip netns add "$ns"
	ip link add "vs$id-$i" type veth peer name eth0 netns "$ns"
	ip link set "vs$id-$i" master "$bridge" up
	ip netns exec "$ns" ip addr add "198.18.$net.$((10 + i))/24" dev eth0
	ip netns exec "$ns" ip link set eth0 up
	ip netns exec "$ns" ip link set lo up
	echo "198.18.$net.$((10 + i)) slots=1" >> "$work/hostfile"
	echo "198.18.$net.$((10 + i))) exec ip netns exec $ns bash -c \"\$*\" ;;" >> "$work/rsh"
	mkdir -p "$work/host$i"
done
echo 'esac; echo "netns-rsh: unknown host $host" >&2; exit 1' >> "$work/rsh"
chmod +x "$work/rsh"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export SELENE_LOG=warn
unset SELENE_COORDINATOR SELENE_RANK
# The MPI bootstrap: rank zero's port and secret broadcast, each peer
# accepted only from its own namespace's address. Each rank's directory is
# its host's: host N's rank writes under hostN.
echo "== $hosts hosts (namespaces sel$id-h1..$hosts, 198.18.$net.11..), mpirun across them"
mpirun --hostfile "$work/hostfile" -np "$hosts" \
	--mca plm_rsh_agent "$work/rsh" \
	--mca oob_tcp_if_include "198.18.$net.0/24" \
	--mca btl tcp,self --mca btl_tcp_if_include "198.18.$net.0/24" \
	-x SELENE_LOG \
	bash -c "exec $program cluster-demo --dir $work/host\$((OMPI_COMM_WORLD_RANK + 1))" \
	| sort -s -t: -k2,2

# Every host holds the same record names and lengths; every file verifies.
listing() {
	(cd "$1"/*/ && find . -name '*.ckpt' -printf '%f %s\n' | sort)
}
listing "$work/host1" > "$work/expect"
[ -s "$work/expect" ] || { echo "no records on host 1" >&2; exit 1; }
for i in $(seq 1 "$hosts"); do
	"$program" verify "$work/host$i"
	if ! listing "$work/host$i" | cmp -s - "$work/expect"; then
		echo "host $i's record files differ from host 1's" >&2
		exit 1
	fi
done
echo "== every host holds the same $(wc -l < "$work/expect") record files; all verified"
