"""One pool of helper children per process, forgotten in a fork's child (tools/_child_pool.py; SPEC K-6).

The QuickJS VM pool and the HTML-converter pool share this set-up. A Celery prefork worker is a
fork of a process that may already hold warm children: the fork must start with pools of its own,
close its copies of the parent's pipes and never wait on (or kill) the parent's children, while
the parent's pools go on as before. Run in a separate host process, so the fork is of a small
single-purpose Python, not of pytest.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

HOST = """
import asyncio, json, os, sys, time
from tools.program import pool as vm_pool
from tools.web_fetch import convert

PAGE = "<html><head><title>T</title></head><body><article><p>" + "Words here. " * 100 + "</p></article></body></html>"

def convert_once():
    return asyncio.run(convert.convert(PAGE, "text", True, "http://example.invalid/", "web_fetch"))

convert_once()  # leaves one warm converter
vms = vm_pool.pool()
vms.take().result(timeout=30)  # and warm QuickJS children
for fut in list(vms._idle):
    fut.result(timeout=30)
parent_conv = convert.pool()
conv_children = list(parent_conv.idle)
vm_children = [f.result() for f in vms._idle]
assert conv_children and vm_children

pid = os.fork()
if pid == 0:
    ok = {
        "conv_new_pool": convert.pool() is not parent_conv and convert.pool().idle == [],
        "conv_pipes_closed": all(p.stdin.closed and p.stdout.closed for p in conv_children),
        "conv_not_waited": all(p.returncode == 0 for p in conv_children),
        "vm_forgotten": len(vms._idle) == 0,
        "vm_pipes_closed": all(p.stdin.closed and p.stdout.closed for p in vm_children),
        "vm_not_waited": all(p.returncode == 0 for p in vm_children),
    }
    os.write(1, (json.dumps({"child": ok}) + "\\n").encode())
    os._exit(0)
os.waitpid(pid, 0)
started = convert.pool().started
text, title = convert_once()
print(json.dumps({"parent": {
    "same_conv_pool": convert.pool() is parent_conv,
    "conv_children_alive": all(p.poll() is None for p in conv_children),
    "conv_reused": convert.pool().started == started and title == "T",
    "vm_children_alive": all(p.poll() is None for p in vm_children),
    "same_vm_pool": vm_pool.pool() is vms,
}}), flush=True)
"""


def test_k6_a_forked_process_starts_its_own_child_pools_and_leaves_the_parents_alone() -> None:
    out = subprocess.run(
        [sys.executable, "-c", HOST], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr[-2000:]
    seen = {k: v for line in out.stdout.splitlines() for k, v in json.loads(line).items()}
    assert seen["child"] == dict.fromkeys(seen["child"], True), seen
    assert seen["parent"] == dict.fromkeys(seen["parent"], True), seen
