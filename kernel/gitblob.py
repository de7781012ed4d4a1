"""Streaming a git blob out of the object database without inflating it whole (SPEC B-1, K-8).

libgit2 (and so pygit2) has no streaming read: looking a blob up — ``repo[oid]``, ``blob.size``,
``pygit2.BlobIO`` too — inflates the whole object into memory first. A blob of 300 MiB of zeros
(a few hundred KiB in the object database, one ``git add`` in a sandboxed command) took 300 MiB of
the host process to look up and 600 MiB through ``BlobIO``, which copies while it streams. Here the
two forms a big blob is actually stored in are read directly, with a bounded zlib stream:

- a **loose object** (``objects/ab/cdef…``: zlib of ``blob <size>\\0<bytes>``), what ``git add``
  and ``git hash-object -w`` write below ``core.bigFileThreshold``;
- a **whole (undeltified) entry of a pack**, what git's bulk check-in writes for files above
  ``core.bigFileThreshold`` (512 MiB by default) and what ``gc``/``repack`` keep for blobs too big
  to delta. The pack's ``.idx`` (version 2) gives the entry's offset.

``open_blob`` returns None for anything else (a delta entry, an object in an alternate store, an
index version it does not know): the caller then loads small blobs through libgit2 and refuses big
ones with a typed error. Sizes come from ``Odb.read_header``, which reads only an object's header.

The stream never yields more than the header's size (a corrupt or hostile object that inflates to
more, or ends early, is an error, not a longer or silent-short file), and each decompression step is
bounded (``zlib`` ``max_length``), so a deflate bomb cannot allocate more than one chunk.
Object files are opened non-blocking and must be regular files (a FIFO planted in ``objects/``
cannot freeze the reader). libgit2 opens them blocking, with pygit2 holding the GIL: a FIFO (or a
symlink to one) where a loose object belongs froze the whole host process on its first lookup, so
``check_loose_file`` is asked before libgit2 touches an object (``kernel.gittree``).
"""

from __future__ import annotations

import hashlib
import io
import mmap
import os
import stat as stat_mod
import struct
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from kernel.errors import InvalidArgument, Timeout

CHUNK_BYTES = 1 << 16  # compressed bytes read at a time
MAX_LOOSE_HEADER_BYTES = 64
OBJ_BLOB = 3
IDX_MAGIC = b"\xfftOc"
IDX_VERSION = 2
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)


class CorruptObject(InvalidArgument):
    """The object's stored bytes do not inflate to what its header says."""


def _open_regular(path: Path) -> int | None:
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError:
        return None
    if not stat_mod.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    os.set_blocking(fd, True)
    return fd


def check_loose_file(objects: Path, hex_id: str) -> None:
    """Refuse object ``hex_id`` when its loose file is there but is not a regular file (a FIFO,
    socket, device, directory or symlink: git writes none of these), before libgit2 opens it
    blocking. Absent is fine (the object is packed, or missing: libgit2 says so)."""
    path = objects / hex_id[:2] / hex_id[2:]
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as exc:
        raise CorruptObject(f"git object {hex_id} cannot be checked: {exc.strerror}") from None
    if not stat_mod.S_ISREG(st.st_mode):
        kind = "a symlink" if stat_mod.S_ISLNK(st.st_mode) else "a special file"
        raise CorruptObject(
            f"git object {hex_id} is not a regular file ({kind} in the object database): refused "
            "before git opens it"
        )


def special_object_files(objects: Path, *, deadline: float | None = None) -> list[str]:
    """Entries of the object directory ``objects`` that are neither a regular file nor one of its
    real subdirectories (``ab/``, ``pack/``, ``info/``, ``info/commit-graphs/``): FIFOs, sockets,
    devices, symlinks — what libgit2 would block on or follow when a diff, log or checkout opens
    them. A directory walk with ``os.scandir`` (no file opened, no stat for most file systems);
    ``Timeout`` when ``deadline`` (monotonic) passes first."""
    found: list[str] = []
    pending = [""]
    while pending:
        rel = pending.pop()
        if deadline is not None and time.monotonic() > deadline:
            raise Timeout(
                "the git object database is too large to check for special files", op="git", duration_ms=None
            )
        try:
            it = os.scandir(objects / rel) if rel else os.scandir(objects)
        except (FileNotFoundError, NotADirectoryError):
            continue
        with it:
            for de in it:
                name = f"{rel}/{de.name}" if rel else de.name
                try:
                    if de.is_file(follow_symlinks=False):
                        continue
                    if de.is_dir(follow_symlinks=False) and name.count("/") < 2:
                        pending.append(name)
                        continue
                except OSError:
                    pass
                found.append(name)
    return found


def check_object_database(objects: Path, *, deadline: float | None = None) -> None:
    """Refuse (``CorruptObject``, ``invalid_argument``) an object database holding special files
    (``special_object_files``) before libgit2 reads it: pygit2 holds the GIL while libgit2 blocks
    in ``open``, so one FIFO froze the whole host process."""
    bad = special_object_files(objects, deadline=deadline)
    if bad:
        shown = ", ".join(bad[:5]) + (", …" if len(bad) > 5 else "")
        raise CorruptObject(
            f"the git object database holds entries that are not regular files ({shown}); git would "
            "block on or follow them, so it is not run here until they are removed"
        )


def max_deflate_bytes(n: int) -> int:
    """More compressed bytes than any real zlib stream of ``n`` bytes takes (zlib's deflateBound is
    about n + n/4096 + 13; a writer that flushes every 4 KiB adds 5 bytes each): a stream still going
    past it is padding — empty stored blocks a hostile object can repeat for gigabytes, which the
    reader would inflate in one ``read`` call to hand out a few bytes."""
    return n + n // 64 + 4096


class _InflateReader(io.RawIOBase):
    """The zlib stream that starts at ``start`` of ``fd``, yielding exactly ``size`` bytes after
    ``skip_header`` (loose objects: the ``blob <size>\\0`` prefix)."""

    def __init__(self, fd: int, start: int, size: int, *, loose: bool, name: str) -> None:
        super().__init__()
        self._fd = fd
        self._pos = start  # next compressed byte to read
        self._start = start
        self._max_input = max_deflate_bytes(size + MAX_LOOSE_HEADER_BYTES)
        self._left = size  # content bytes still to come
        self._size = size
        self._name = name
        self._z = zlib.decompressobj()
        self._tail = b""  # compressed input not yet consumed
        self._pending = b""  # inflated bytes not yet returned
        # libgit2 checks an object's id when it loads it whole; a stream checks it when the last
        # byte is handed out (``readinto``), so a file read to its end is exactly the committed one.
        # sha1 only: a sha256 repository is refused when it is opened (``gittree.open_repository``:
        # libgit2 here cannot read one), so another id length never gets here; if it did, the id
        # check fails closed.
        self._hash = hashlib.sha1()
        self._hash.update(b"blob %d\x00" % size)
        try:
            if loose:
                self._skip_loose_header()
            if size == 0:
                self._check_id()
        except BaseException:
            self.close()  # the reader owns ``fd`` from here on
            raise

    @property
    def size(self) -> int:
        return self._size

    def _inflate(self, want: int) -> bytes:
        """Up to ``want`` inflated bytes (b"" at the end of the zlib stream)."""
        while True:
            if self._z.eof:
                return b""
            if not self._tail:
                if self._pos - self._start > self._max_input:
                    raise CorruptObject(
                        f"git object {self._name} has a zlib stream longer than any deflate of "
                        f"{self._size} bytes (refused, not read to its end)"
                    )
                self._tail = os.pread(self._fd, CHUNK_BYTES, self._pos)
                self._pos += len(self._tail)
                if not self._tail:
                    raise CorruptObject(f"git object {self._name} ends before its data does")
            try:
                out = self._z.decompress(self._tail, want)
            except zlib.error as exc:
                raise CorruptObject(f"git object {self._name} does not inflate: {exc}") from None
            self._tail = self._z.unconsumed_tail
            if out:
                return out

    def _skip_loose_header(self) -> None:
        head = b""
        while b"\x00" not in head:
            more = self._inflate(MAX_LOOSE_HEADER_BYTES - len(head))
            if not more or len(head) + len(more) > MAX_LOOSE_HEADER_BYTES:
                raise CorruptObject(f"git object {self._name} has no valid header")
            head += more
        header, _, rest = head.partition(b"\x00")
        kind, _, size = header.partition(b" ")
        if kind != b"blob" or not size.isdigit() or int(size) != self._size:
            raise CorruptObject(f"git object {self._name} is not the blob its header announced")
        self._pending = rest

    def _check_id(self) -> None:
        if self._hash.hexdigest() != self._name:
            raise CorruptObject(f"git object {self._name} holds the content of another id (tampered)")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        want = min(len(buffer), self._left)
        if want <= 0:
            return 0
        data = self._pending[:want]
        self._pending = self._pending[len(data) :]
        if not data:
            data = self._inflate(want)
            if not data:
                raise CorruptObject(f"git object {self._name} inflates to fewer bytes than its size")
        n = len(data)
        self._hash.update(data)
        if n == self._left:
            self._check_id()
        buffer[:n] = data
        self._left -= n
        return n

    def close(self) -> None:
        if not self.closed:
            os.close(self._fd)
        super().close()


class BlobReader(io.BufferedReader):
    """A buffered blob stream; ``size`` is the blob's length (``os.fstat`` does not apply)."""

    def __init__(self, raw: _InflateReader) -> None:
        super().__init__(raw, CHUNK_BYTES)
        self.size = raw.size


def _find_in_pack(idx_path: Path, raw: bytes) -> int | None:
    """The offset of object ``raw`` in the pack of index ``idx_path`` (version 2), or None."""
    fd = _open_regular(idx_path)
    if fd is None:
        return None
    try:
        size = os.fstat(fd).st_size
        if size < 8 + 256 * 4:
            return None
        with mmap.mmap(fd, size, prot=mmap.PROT_READ) as m:
            if m[:4] != IDX_MAGIC or struct.unpack(">I", m[4:8])[0] != IDX_VERSION:
                return None
            hlen = len(raw)
            fan = 8
            count = struct.unpack_from(">I", m, fan + 255 * 4)[0]
            lo = struct.unpack_from(">I", m, fan + (raw[0] - 1) * 4)[0] if raw[0] else 0
            hi = struct.unpack_from(">I", m, fan + raw[0] * 4)[0]
            names = fan + 256 * 4
            offsets = names + count * hlen + count * 4
            if offsets + count * 4 > size or hi > count or lo > hi:
                return None
            while lo < hi:  # binary search in the sorted name table
                mid = (lo + hi) // 2
                name = m[names + mid * hlen : names + (mid + 1) * hlen]
                if name == raw:
                    off = struct.unpack_from(">I", m, offsets + mid * 4)[0]
                    if off & 0x80000000:  # an index into the 64-bit offset table
                        big = offsets + count * 4 + (off & 0x7FFFFFFF) * 8
                        if big + 8 > size:
                            return None
                        off = struct.unpack_from(">Q", m, big)[0]
                    return int(off)
                if name < raw:
                    lo = mid + 1
                else:
                    hi = mid
            return None
    except (OSError, ValueError, struct.error):
        return None
    finally:
        os.close(fd)


@dataclass(frozen=True)
class _Located:
    """Where a whole object's zlib stream starts: an open regular file and an offset in it."""

    fd: int
    start: int
    loose: bool


def _open_packed(objects: Path, raw: bytes, size: int, name: str) -> _Located | None:
    pack_dir = objects / "pack"
    try:
        idx_names = sorted(n for n in os.listdir(pack_dir) if n.startswith("pack-") and n.endswith(".idx"))
    except OSError:
        return None
    for idx_name in idx_names:
        offset = _find_in_pack(pack_dir / idx_name, raw)
        if offset is None:
            continue
        fd = _open_regular(pack_dir / (idx_name[: -len(".idx")] + ".pack"))
        if fd is None:
            return None
        try:
            head = os.pread(fd, 16, offset)
            if not head:
                raise OSError("entry past the end of the pack")
            kind = (head[0] >> 4) & 0x7
            entry_size = head[0] & 0x0F
            shift, i = 4, 0
            while head[i] & 0x80:
                i += 1
                if i >= len(head):
                    raise OSError("entry header too long")
                entry_size |= (head[i] & 0x7F) << shift
                shift += 7
            if kind != OBJ_BLOB or entry_size != size:
                os.close(fd)
                return None  # a delta (or not what the header said): not streamable here
            return _Located(fd, offset + i + 1, False)
        except (OSError, IndexError):
            os.close(fd)
            return None
    return None


def open_blob(objects: Path, raw: bytes, hex_id: str, size: int) -> BinaryIO | None:
    """A stream of blob ``raw`` (``size`` bytes) from the object directory ``objects``, or None
    when it is not stored whole (loose or an undeltified pack entry; see the module docstring)."""
    where = _locate(objects, raw, hex_id, size)
    if where is None:
        return None
    return BlobReader(_InflateReader(where.fd, where.start, size, loose=where.loose, name=hex_id))


def open_verified_blob(objects: Path, raw: bytes, hex_id: str, size: int) -> BinaryIO | None:
    """As ``open_blob``, but the blob is first inflated once to its end and checked against its id
    (nothing kept: a chunk at a time), then streamed again from the same open file: a partial read
    of it is exactly the committed bytes too, at the cost of inflating it twice. ``CorruptObject``
    when it is not the blob of that id. (A file rewritten in place between the two passes is not
    caught; one replaced by a rename is, the open file stays the checked one.)"""
    where = _locate(objects, raw, hex_id, size)
    if where is None:
        return None
    try:
        check = _InflateReader(os.dup(where.fd), where.start, size, loose=where.loose, name=hex_id)
    except BaseException:
        os.close(where.fd)
        raise
    try:
        buf = bytearray(CHUNK_BYTES)
        while check.readinto(buf):  # the last chunk checks the id (``readinto``)
            pass
    except BaseException:
        os.close(where.fd)
        raise
    finally:
        check.close()
    return BlobReader(_InflateReader(where.fd, where.start, size, loose=where.loose, name=hex_id))


def _locate(objects: Path, raw: bytes, hex_id: str, size: int) -> _Located | None:
    fd = _open_regular(objects / hex_id[:2] / hex_id[2:])
    if fd is not None:
        return _Located(fd, 0, True)
    return _open_packed(objects, raw, size, hex_id)


__all__ = [
    "BlobReader",
    "CorruptObject",
    "check_loose_file",
    "check_object_database",
    "max_deflate_bytes",
    "open_blob",
    "open_verified_blob",
    "special_object_files",
]
