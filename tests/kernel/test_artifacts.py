"""Artifact stores: memory and filesystem (SPEC R-6; REFERENCE §6.6)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from kernel.artifact_files import FileArtifactStore
from kernel.artifacts import (
    MAX_TOOL_SEGMENT_CHARS,
    MemoryArtifactStore,
    artifact_uri,
    parse_uri,
    sanitize_tool_name,
)
from kernel.errors import KernelFault, NotFound

HEX = "0" * 64


def test_r6_uri_format_and_sanitising() -> None:
    data = b"payload"
    assert (
        artifact_uri("web.fetch/x", data)
        == f"a3s://tool-output/web_fetch_x/{hashlib.sha256(data).hexdigest()}"
    )
    assert sanitize_tool_name("") == "_"
    assert len(sanitize_tool_name("a" * 1000)) == MAX_TOOL_SEGMENT_CHARS


@pytest.mark.parametrize(
    "uri",
    [
        "a3s://tool-output/../" + HEX,
        "a3s://tool-output/..%2f/" + HEX,
        "a3s://tool-output/bash/../../etc/passwd",
        "a3s://tool-output/bash/" + HEX + "/x",
        "a3s://tool-output/bash/" + "A" * 64,
        "a3s://tool-output//" + HEX,
        "a3s://tool-output/" + "a" * 200 + "/" + HEX,
        "file:///etc/passwd",
        "a3s://tool-output/ba sh/" + HEX,
    ],
)
def test_r6_malformed_uris_are_not_found(uri: str, tmp_path: Path) -> None:
    with pytest.raises(NotFound):
        parse_uri(uri)
    with pytest.raises(NotFound):
        FileArtifactStore(tmp_path / "a").get(uri)
    with pytest.raises(NotFound):
        MemoryArtifactStore().get(uri)


# -- both stores share one contract -----------------------------------------------------------------


def make_store(kind: str, tmp_path: Path, **limits: Any) -> Any:
    if kind == "memory":
        return MemoryArtifactStore(**limits)
    return FileArtifactStore(tmp_path / ".a3s" / "artifacts", **limits)


KINDS = ["memory", "file"]


@pytest.mark.parametrize("kind", KINDS)
def test_r6_put_get_exact_bytes_and_idempotent(kind: str, tmp_path: Path) -> None:
    store = make_store(kind, tmp_path)
    data = bytes(range(256)) * 10
    uri = store.put("bash", data)
    assert store.get(uri) == data
    assert store.put("bash", data) == uri
    assert len(store) == 1 and store.total_bytes == len(data)
    with pytest.raises(NotFound):
        store.get("a3s://tool-output/bash/" + HEX)


@pytest.mark.parametrize("kind", KINDS)
def test_r6_eviction_oldest_first_by_count(kind: str, tmp_path: Path) -> None:
    store = make_store(kind, tmp_path, max_artifacts=2)
    uris = [store.put("t", b"item %d" % i) for i in range(3)]
    with pytest.raises(NotFound):
        store.get(uris[0])
    assert [store.get(u) for u in uris[1:]] == [b"item 1", b"item 2"]


@pytest.mark.parametrize("kind", KINDS)
def test_r6_eviction_by_bytes_skips_pinned_and_keeps_newest(kind: str, tmp_path: Path) -> None:
    store = make_store(kind, tmp_path, max_bytes=100)
    a = store.put("t", b"a" * 40)
    store.pin([a])
    b = store.put("t", b"b" * 40)
    c = store.put("t", b"c" * 40)  # over 100: evict oldest unpinned (b), never the pinned a
    assert store.get(a) == b"a" * 40 and store.get(c) == b"c" * 40
    with pytest.raises(NotFound):
        store.get(b)
    huge = store.put("t", b"h" * 500)  # alone over the limit: still readable right after put
    assert store.get(huge) == b"h" * 500
    assert store.get(a) == b"a" * 40
    assert store.retained_uris() == {a}


@pytest.mark.parametrize("kind", KINDS)
def test_r6_gc_unreferenced_keeps_only_pinned(kind: str, tmp_path: Path) -> None:
    store = make_store(kind, tmp_path)
    keep = store.put("t", b"keep")
    drop = store.put("t", b"drop")
    store.set_retained_uris([keep])
    assert store.gc_unreferenced() == 1
    assert store.get(keep) == b"keep"
    with pytest.raises(NotFound):
        store.get(drop)


# -- filesystem specifics --------------------------------------------------------------------------


def test_r6_file_store_layout_manifest_and_no_temp_leftovers(tmp_path: Path) -> None:
    root = tmp_path / "arts"
    store = FileArtifactStore(root)
    assert not root.exists()  # constructor does no I/O
    uri = store.put("bash", b"x" * 1000)
    tool, digest = parse_uri(uri)
    assert (root / "objects" / tool / digest).read_bytes() == b"x" * 1000
    manifest = json.loads((root / "artifacts.json").read_text())
    assert manifest["artifacts"] == [{"uri": uri, "bytes": 1000}]
    assert manifest["retained_uris"] == []
    leftovers = [p for p in root.rglob(".tmp-*")]
    assert leftovers == []


def test_r6_file_store_reads_across_instances_and_processes(tmp_path: Path) -> None:
    root = tmp_path / "shared"
    script = textwrap.dedent(
        f"""
        from kernel.artifact_files import FileArtifactStore
        store = FileArtifactStore({str(root)!r})
        print(store.put("worker", b"written by another process " * 1000))
        """
    )
    uri = subprocess.run(
        [sys.executable, "-c", script], check=True, capture_output=True, text=True
    ).stdout.strip()
    reader = FileArtifactStore(root)
    assert reader.get(uri) == b"written by another process " * 1000
    # and the other direction: this process writes, a fresh instance reads
    mine = reader.put("cli", b"mine")
    assert FileArtifactStore(root).get(mine) == b"mine"


def test_r6_file_store_concurrent_processes_lose_no_manifest_entries(tmp_path: Path) -> None:
    root = tmp_path / "race"
    script = textwrap.dedent(
        f"""
        import sys
        from kernel.artifact_files import FileArtifactStore
        store = FileArtifactStore({str(root)!r})
        for i in range(25):
            store.put("w", f"{{sys.argv[1]}}-{{i}}".encode())
        """
    )
    procs = [subprocess.Popen([sys.executable, "-c", script, name]) for name in ("p", "q", "r")]
    assert [p.wait(timeout=60) for p in procs] == [0, 0, 0]
    store = FileArtifactStore(root)
    manifest = json.loads((root / "artifacts.json").read_text())
    assert len(manifest["artifacts"]) == len(store) == 75
    for name in "pqr":
        for i in range(25):
            data = f"{name}-{i}".encode()
            assert store.get(artifact_uri("w", data)) == data


def test_r6_file_store_failed_write_leaves_no_partial_object(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "crash"
    store = FileArtifactStore(root)
    first = store.put("t", b"first")
    before = (root / "artifacts.json").read_bytes()

    def boom(*_args: object, **_kwargs: object) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(KernelFault, match="disk gone"):
        store.put("t", b"second" * 100)
    monkeypatch.undo()
    assert (root / "artifacts.json").read_bytes() == before  # manifest untouched
    assert [p.name for p in root.rglob(".tmp-*")] == []  # temp file removed
    with pytest.raises(NotFound):
        store.get(artifact_uri("t", b"second" * 100))
    assert store.get(first) == b"first"


def test_r6_file_store_adopts_objects_missing_from_manifest(tmp_path: Path) -> None:
    root = tmp_path / "adopt"
    store = FileArtifactStore(root)
    a = store.put("t", b"a")
    (root / "artifacts.json").write_text("{not json")  # damaged manifest
    b = store.put("t", b"b")
    assert store.uris() == [a, b]
    manifest = json.loads((root / "artifacts.json").read_text())
    assert [e["uri"] for e in manifest["artifacts"]] == [a, b]


def test_r6_file_store_detects_damaged_object(tmp_path: Path) -> None:
    root = tmp_path / "dmg"
    store = FileArtifactStore(root)
    uri = store.put("t", b"good content")
    tool, digest = parse_uri(uri)
    path = root / "objects" / tool / digest
    path.write_bytes(b"evil content")  # same size, different bytes
    with pytest.raises(KernelFault, match="does not match its digest"):
        store.get(uri)
    path.write_bytes(b"short")  # wrong size: the next put of the same content repairs it
    assert store.put("t", b"good content") == uri
    assert store.get(uri) == b"good content"


def test_r6_file_store_pins_persist_across_instances(tmp_path: Path) -> None:
    root = tmp_path / "pins"
    a = FileArtifactStore(root).put("t", b"a" * 60)
    FileArtifactStore(root).pin([a])
    other = FileArtifactStore(root, max_bytes=100)
    b = other.put("t", b"b" * 60)
    c = other.put("t", b"c" * 60)
    assert other.get(a) == b"a" * 60 and other.get(c) == b"c" * 60
    with pytest.raises(NotFound):
        other.get(b)
    assert FileArtifactStore(root).retained_uris() == {a}
