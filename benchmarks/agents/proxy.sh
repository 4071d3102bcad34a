#!/bin/bash
# usage: proxy.sh <client>   (restart the recording proxy under a new client name)
[ -f /tmp/agents/proxy.pid ] && kill $(cat /tmp/agents/proxy.pid) 2>/dev/null; sleep 0.5
setsid /work/main/.venv/bin/python /work/main/benchmarks/agents/record_proxy.py --client "$1" >> /tmp/agents/proxy-$1.log 2>&1 &
echo $! > /tmp/agents/proxy.pid
sleep 1; cat /tmp/agents/proxy-$1.log
