"""What ``a3s-fleet index status`` reports: where the index is, its size, contents and freshness.

Freshness of a local index compares the current listing (same visibility rules as a build) with
the manifest by size and mtime — only files recorded too close to their build's start (a racy
mtime, which cannot vouch for the content) are read and their digest compared, so a status of a
large tree stays cheap. A git tree's content never changes: its index is fresh once complete.
"""

from __future__ import annotations

from typing import Any

from kernel.workspace import Workspace
from tools.search.indexed import store
from tools.search.indexed.build import MAX_FILE_BYTES, digest
from tools.search.indexed.files import Reader, Unreadable, list_files


def _same_digest(reader: Reader, path: str, rec: store.FileRecord) -> bool:
    try:
        data, _, _ = reader.read(path, MAX_FILE_BYTES)
    except (OSError, Unreadable):
        return False
    return digest(data) == rec.digest


def index_report(ws: Workspace) -> dict[str, Any]:
    location = store.locate(ws)
    directory = location.existing()
    out: dict[str, Any] = {
        "workspace": ws.name,
        "location": location.kind,
        "directory": str(directory or location.primary),
        "exists": directory is not None,
    }
    if directory is None:
        return out
    summary = store.read_summary(directory) or {}
    manifest = store.read_manifest(directory)
    out.update(
        {
            "size_bytes": store.directory_bytes(directory),
            "files": manifest.indexed_files if manifest else int(summary.get("files", 0)),
            "chunks": manifest.chunks if manifest else int(summary.get("chunks", 0)),
            "skipped_files": sum(1 for r in manifest.files.values() if r.skipped) if manifest else 0,
            "complete": bool(manifest and manifest.complete),
            "committed_at": summary.get("committed_at"),
            "writer": store.read_progress(directory),
        }
    )
    if location.kind == "git":
        out["freshness"] = {"fresh": out["complete"], "tree": location.key}
        return out
    if manifest is None:
        out["freshness"] = {"fresh": False, "added": 0, "changed": 0, "removed": 0, "manifest": "stale"}
        return out
    listing = list_files(ws, lambda: False)
    added = sum(1 for p in listing if p not in manifest.files)
    removed = sum(1 for p in manifest.files if p not in listing)
    changed = 0
    with Reader(ws) as reader:
        for p, item in listing.items():
            rec = manifest.files.get(p)
            if rec is None or (rec.size == item.size and rec.mtime_ns == item.mtime_ns >= 0):
                continue
            if (
                rec.mtime_ns < 0
                and rec.size == item.size
                and not rec.skipped
                and _same_digest(reader, p, rec)
            ):
                continue
            changed += 1
    out["freshness"] = {
        "fresh": not (added or changed or removed),
        "added": added,
        "changed": changed,
        "removed": removed,
    }
    return out
