#!/bin/bash
# redis-benchmark against a Catena server's own Redis front end (catena
# server -redis-listen: a master and 3 servers, one chain, fsync on),
# then against redis-server (appendfsync everysec), with the same
# arguments: pipelined SET and GET, 50 connections, -r 10000.
# Usage: tools/redisfloor/servers.sh [CATENA_BINARY]   (default: built
# from this tree; needs redis-server, redis-cli and redis-benchmark)
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
d=$(mktemp -d)
bin=${1:-}
if [ -z "$bin" ]; then
	bin=$d/catena
	(cd "$root" && go build -o "$bin" ./cmd/catena) || exit 1
fi
m=127.0.0.1:7800
servers=127.0.0.1:7801,127.0.0.1:7802,127.0.0.1:7803
"$bin" master -listen $m -data "$d/m" -servers $servers >"$d/m.log" 2>&1 &
for i in 1 2 3; do
	"$bin" server -listen 127.0.0.1:780$i -master $m -data "$d/s$i" -redis-listen 127.0.0.1:781$i >"$d/s$i.log" 2>&1 &
done
for _ in $(seq 100); do redis-cli -p 7811 set probe x 2>/dev/null | grep -q OK && break; sleep 0.2; done
echo "catena server front end (127.0.0.1:7811; GETs also at 7813):"
redis-benchmark -p 7811 -t set -n 100000 -r 10000 -P 16 -c 50 --csv 2>/dev/null | tail -1
redis-benchmark -p 7811 -t get -n 400000 -r 10000 -P 16 -c 50 --csv 2>/dev/null | tail -1
redis-benchmark -p 7813 -t get -n 400000 -r 10000 -P 16 -c 50 --csv 2>/dev/null | tail -1
kill $(jobs -p) 2>/dev/null; wait 2>/dev/null
redis-server --port 7820 --appendonly yes --appendfsync everysec --save '' --dir "$d" >"$d/r.log" 2>&1 &
for _ in $(seq 50); do redis-cli -p 7820 ping >/dev/null 2>&1 && break; sleep 0.1; done
echo "redis-server (appendfsync everysec):"
redis-benchmark -p 7820 -t set -n 400000 -r 10000 -P 16 -c 50 --csv 2>/dev/null | tail -1
redis-benchmark -p 7820 -t get -n 800000 -r 10000 -P 16 -c 50 --csv 2>/dev/null | tail -1
kill $(jobs -p) 2>/dev/null; wait 2>/dev/null
rm -rf "$d"
