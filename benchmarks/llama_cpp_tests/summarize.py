#!/usr/bin/env python3
"""Reads the junit XML files run.sh wrote (RESULTS/<server>-<file>.xml) and prints a JSON
record: outcome per case per server, and counts per file.

    summarize.py RESULTS_DIR [--meta KEY=VALUE ...]  > docs/agents/llama-cpp-server-tests.json
    summarize.py RESULTS_DIR --table                   (the markdown table of README.md)
"""
import json
import os
import sys
import xml.etree.ElementTree as ET

SERVERS = ("plookup", "llama-server")
FILES = ("test_tool_call", "test_compat_oai_responses", "test_compat_anthropic")


def cases(path):
    out = {}
    if not os.path.exists(path):
        return out
    for tc in ET.parse(path).getroot().iter("testcase"):
        name = f"unit/{tc.get('classname').split('.')[-1]}.py::{tc.get('name')}"
        outcome, message = "passed", ""
        for kind in ("failure", "error", "skipped"):
            el = tc.find(kind)
            if el is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[kind]
                message = (el.get("message") or "").strip().splitlines()[0][:300] if el.get("message") else ""
                break
        out[name] = {"outcome": outcome, "seconds": round(float(tc.get("time") or 0), 1), "message": message}
    return out


def main(argv):
    results_dir = argv[0]
    meta = dict(a.split("=", 1) for a in argv[1:] if "=" in a)
    record = {"meta": meta, "counts": {}, "cases": {}}
    for server in SERVERS:
        for f in FILES:
            got = cases(os.path.join(results_dir, f"{server}-{f}.xml"))
            counts = {"passed": 0, "failed": 0, "error": 0, "skipped": 0}
            for name, r in got.items():
                counts[r["outcome"]] += 1
                record["cases"].setdefault(name, {})[server] = r
            record["counts"].setdefault(f, {})[server] = counts
    if "--table" in argv:
        print("| file | plookup pass/fail/error/skip | llama-server pass/fail/error/skip |")
        print("|---|---|---|")
        for f in FILES:
            row = [f]
            for server in SERVERS:
                c = record["counts"][f][server]
                row.append(f"{c['passed']}/{c['failed']}/{c['error']}/{c['skipped']}")
            print("| " + " | ".join(row) + " |")
        print()
        print("| case | plookup | llama-server |")
        print("|---|---|---|")
        for name in sorted(record["cases"]):
            r = record["cases"][name]
            print(f"| `{name}` | {r.get('plookup', {}).get('outcome', '-')} | {r.get('llama-server', {}).get('outcome', '-')} |")
        return
    json.dump(record, sys.stdout, indent=1, sort_keys=False)
    print()


if __name__ == "__main__":
    main(sys.argv[1:])
