"""``read`` of a git blob between 1 and 64 MiB on a ``git:`` view is streamed, checked against its id
(SPEC B-1, B-6, K-8).

e9bca00 sent every blob up to the 64 MiB whole-file limit through libgit2 (which checks its id), so
each ``read`` of a 60 MiB text blob — a few hundred KiB in the object database, one ``git add`` in
the sandbox — held it about three times over: +181 MiB of peak RSS for one read, +429 MiB more for a
batch of 16, where a directory streams the same file in ~2 MiB. Such a blob is now inflated once to
check its id (a chunk at a time) and then streamed; a forged object is still refused, even for a
partial read.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

from kernel.gittree import SMALL_BLOB_BYTES
from kernel.workspace import MAX_READ_BYTES
from orchestrator import Agent
from tests.tools.git_cli import git as _git

REPO_ROOT = Path(__file__).resolve().parents[2]
PROBE = """
import json, resource, sys
from kernel.gittree import SMALL_BLOB_BYTES
from kernel.workspace import MAX_READ_BYTES
from orchestrator import Agent
def mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
with Agent() as agent:
    s = agent.session(sys.argv[1])
    s.tool("ls", {})
    base = mib()
    one = s.tool("read", {"file_path": "big.txt", "offset": 3, "limit": 2})
    reads = [{"tool": "read", "args": {"file_path": "big.txt", "offset": i, "limit": 5}} for i in range(8)]
    batch = s.tool("batch", {"invocations": reads})
    print(json.dumps({"growth_mib": mib() - base, "one": one.output, "batch": batch.exit_code}))
"""


def _commit(repo: Path, name: str, data: bytes) -> None:
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / name).write_bytes(data)
    _git(repo, "add", name)
    _git(repo, "commit", "-qm", "c")


def test_b1_k8_reads_of_a_60_mib_blob_stream_instead_of_loading_it(tmp_path: Path) -> None:
    data = b"".join(b"line %d of text\n" % i for i in range(3_000_000))  # ~59 MiB
    assert SMALL_BLOB_BYTES < len(data) <= MAX_READ_BYTES
    repo = tmp_path / "r"
    _commit(repo, "big.txt", data)
    (repo / "big.txt").unlink()
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, f"git:{repo}@HEAD"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    probe = json.loads(done.stdout.strip().splitlines()[-1])
    assert "line 3 of text" in probe["one"] and "line 4 of text" in probe["one"], probe["one"]
    assert probe["batch"] == 0
    assert probe["growth_mib"] < 64, probe  # was ~600 MiB: the blob held several times per read


def test_k8_b6_a_forged_mid_size_object_is_refused_even_for_a_partial_read(
    tmp_path: Path, agent: Agent
) -> None:
    """A 2 MiB blob's loose object rewritten with other bytes of the same length: a read of its
    first line fails ``invalid_argument`` naming the file, the forged bytes never shown."""
    honest = b"committed line\n" * 140_000
    forged = b"FORGED!!! line\n" * 140_000
    repo = tmp_path / "r"
    _commit(repo, "mid.txt", honest)
    hex_id = hashlib.sha1(b"blob %d\x00" % len(honest) + honest).hexdigest()
    obj = repo / ".git" / "objects" / hex_id[:2] / hex_id[2:]
    obj.chmod(0o644)
    obj.write_bytes(zlib.compress(b"blob %d\x00" % len(forged) + forged))
    res = agent.session(f"git:{repo}@HEAD").tool("read", {"file_path": "mid.txt", "limit": 1})
    assert res.exit_code == 1 and res.error_kind is not None, res.output
    assert res.error_kind["type"] == "invalid_argument", res.error_kind
    assert "mid.txt" in res.output and "FORGED" not in res.output
