#!/bin/bash
# The CPU per GET of redisfloor (a goroutine per connection; gnet's event
# loops) and of redis-server, under redis-benchmark with 50 connections,
# unpipelined (-P 1) and pipelined (-P 16): ROUNDS rounds, interleaved.
# Usage: tools/redisfloor/run.sh [ROUNDS]   (needs redis-server and
# redis-benchmark: apt-get install redis-server redis-tools)
set -euo pipefail
cd "$(dirname "$0")"
rounds=${1:-3}
bin=$(mktemp -d)/redisfloor
go build -o "$bin" .
port=7790
measure() { # kind P requests: prints "req/s ns-per-request"
	local kind=$1 p=$2 n=$3 pid
	if [ "$kind" = redis-server ]; then
		redis-server --port $port --save '' --appendonly no >/dev/null 2>&1 & pid=$!
	else
		"$bin" -kind "$kind" -addr 127.0.0.1:$port >/dev/null 2>&1 & pid=$!
	fi
	for _ in $(seq 50); do redis-cli -p $port ping >/dev/null 2>&1 && break; sleep 0.1; done
	redis-benchmark -p $port -t set -n 20000 -r 10000 -P 16 -c 50 -q >/dev/null 2>&1
	local t0 t1 r
	t0=$(awk '{print $14+$15}' /proc/$pid/stat)
	r=$(redis-benchmark -p $port -t get -n "$n" -r 10000 -P "$p" -c 50 --csv 2>/dev/null | tail -1 | cut -d, -f2 | tr -d '"')
	t1=$(awk '{print $14+$15}' /proc/$pid/stat)
	kill $pid; wait $pid 2>/dev/null || true
	echo "${r%.*} $(( (t1 - t0) * 1000000000 / $(getconf CLK_TCK) / n ))"
}
echo "| server | -P | round | GET/s | server CPU ns per GET |"
echo "|---|---:|---:|---:|---:|"
for round in $(seq "$rounds"); do
	for p in 1 16; do
		n=200000; [ $p = 16 ] && n=1000000
		for kind in goroutines gnet redis-server; do
			read -r rate ns < <(measure $kind $p $n)
			echo "| $kind | $p | $round | $rate | $ns |"
		done
	done
done
