"""``kernel.gitblob``: a blob streamed from the object database is exactly its bytes, or an error
(SPEC K-8, B-1). Objects are written by hand (zlib), the way a hostile repository could hold them."""

from __future__ import annotations

import hashlib
import os
import zlib
from pathlib import Path

import pygit2
import pytest

from kernel.gitblob import CorruptObject, open_blob


def _loose(objects: Path, payload: bytes, *, header: bytes | None = None) -> tuple[bytes, str]:
    """Write ``payload`` as a loose object (``header`` defaults to the honest one)."""
    head = header if header is not None else b"blob %d\x00" % len(payload)
    hex_id = hashlib.sha1(head + payload).hexdigest()
    (objects / hex_id[:2]).mkdir(parents=True, exist_ok=True)
    (objects / hex_id[:2] / hex_id[2:]).write_bytes(zlib.compress(head + payload))
    return bytes.fromhex(hex_id), hex_id


def test_k8_a_loose_blob_streams_exactly_as_libgit2_reads_it(tmp_path: Path) -> None:
    repo = pygit2.init_repository(str(tmp_path / "r"))
    data = os.urandom(300_000) + b"\n" * 1000
    oid = repo.create_blob(data)
    objects = Path(repo.path) / "objects"
    with open_blob(objects, oid.raw, str(oid), len(data)) as fh:
        assert fh is not None
        got = b"".join(iter(lambda: fh.read(4096), b""))
    assert got == data == repo[oid].data


def test_k8_an_object_that_ends_early_is_an_error_not_a_short_file(tmp_path: Path) -> None:
    objects = tmp_path / "objects"
    raw, hex_id = _loose(objects, b"ten bytes!", header=b"blob 100\x00")
    fh = open_blob(objects, raw, hex_id, 100)
    assert fh is not None
    with fh, pytest.raises(CorruptObject):
        fh.read()


def test_k8_an_object_never_yields_more_than_its_size(tmp_path: Path) -> None:
    """A deflate bomb (256 MiB of zeros announced as 5 bytes) yields 5 bytes, inflating one chunk."""
    objects = tmp_path / "objects"
    hex_id = hashlib.sha1(b"blob 5\x00" + bytes(5)).hexdigest()  # the id of the 5 bytes it holds
    (objects / hex_id[:2]).mkdir(parents=True)
    z = zlib.compressobj()
    with open(objects / hex_id[:2] / hex_id[2:], "wb") as out:
        out.write(z.compress(b"blob 5\x00"))
        block = bytes(1 << 20)
        for _ in range(256):
            out.write(z.compress(block))
        out.write(z.flush())
    fh = open_blob(objects, bytes.fromhex(hex_id), hex_id, 5)
    assert fh is not None
    with fh:
        assert fh.read() == b"\x00" * 5


def test_k8_a_header_that_is_not_the_announced_blob_is_refused(tmp_path: Path) -> None:
    objects = tmp_path / "objects"
    raw, hex_id = _loose(objects, b"tree-ish", header=b"tree 8\x00")
    with pytest.raises(CorruptObject):
        open_blob(objects, raw, hex_id, 8)


def test_k8_a_fifo_in_the_object_database_is_not_opened_blocking(tmp_path: Path) -> None:
    objects = tmp_path / "objects"
    hex_id = "cd" * 20
    (objects / "cd").mkdir(parents=True)
    os.mkfifo(objects / "cd" / hex_id[2:])
    assert open_blob(objects, bytes.fromhex(hex_id), hex_id, 5) is None


def test_k8_b1_a_blob_read_to_its_end_is_checked_against_its_id(tmp_path: Path) -> None:
    """An object file replaced by another blob's bytes (a model with bash can write ``.git/objects``)
    is refused when the stream reaches its end, as libgit2 refuses it when it loads a blob whole."""
    objects = tmp_path / "objects"
    honest = b"the committed text\n"
    forged = b"the forged content\n"  # same length: the header and size agree
    hex_id = hashlib.sha1(b"blob %d\x00" % len(honest) + honest).hexdigest()
    (objects / hex_id[:2]).mkdir(parents=True)
    (objects / hex_id[:2] / hex_id[2:]).write_bytes(zlib.compress(b"blob %d\x00" % len(forged) + forged))
    fh = open_blob(objects, bytes.fromhex(hex_id), hex_id, len(honest))
    assert fh is not None
    with fh, pytest.raises(CorruptObject, match="another id"):
        fh.read()
    empty_id = hashlib.sha1(b"blob 0\x00").hexdigest()
    (objects / hex_id[:2] / hex_id[2:]).write_bytes(zlib.compress(b"blob 0\x00"))
    with pytest.raises(CorruptObject, match="another id"):  # an emptied object is caught at once
        open_blob(objects, bytes.fromhex(hex_id), hex_id, 0)
    assert empty_id != hex_id


def _padded_stream(payload: bytes, empty_blocks: int) -> bytes:
    """A valid zlib stream of ``payload`` that first holds ``empty_blocks`` empty stored blocks
    (5 bytes each, no output): any length of compressed input for a few bytes of content."""
    raw = zlib.compressobj(9, zlib.DEFLATED, -15)
    body = raw.compress(payload) + raw.flush()
    adler = zlib.adler32(payload).to_bytes(4, "big")
    return b"\x78\x01" + b"\x00\x00\x00\xff\xff" * empty_blocks + body + adler


def test_k8_b1_a_stream_longer_than_any_deflate_of_its_size_is_refused_without_reading_it_all(
    tmp_path: Path,
) -> None:
    """A loose object of 20 bytes whose zlib stream first holds 40 MB of empty stored blocks (a
    sandboxed command can write one): the reader inflated all of it — in one ``read`` call, with no
    cancel or deadline check — to hand out 20 bytes; a real deflate of 20 bytes is never longer than
    a few dozen. Now it stops past the longest possible stream: ``CorruptObject``."""
    payload = b"blob 20\x00" + b"twenty bytes of text"
    stream = _padded_stream(payload, 8_000_000)
    assert zlib.decompress(stream) == payload  # valid: zlib and libgit2 would inflate it
    hex_id = hashlib.sha1(payload).hexdigest()
    objects = tmp_path / "objects"
    (objects / hex_id[:2]).mkdir(parents=True)
    (objects / hex_id[:2] / hex_id[2:]).write_bytes(stream)
    with pytest.raises(CorruptObject, match="longer than"):  # at open: the header comes after it
        fh = open_blob(objects, bytes.fromhex(hex_id), hex_id, 20)
        assert fh is not None
        fh.read()
    honest = _padded_stream(payload, 3)  # a little padding stays readable
    (objects / hex_id[:2] / hex_id[2:]).write_bytes(honest)
    fh = open_blob(objects, bytes.fromhex(hex_id), hex_id, 20)
    assert fh is not None
    with fh:
        assert fh.read() == b"twenty bytes of text"
