"""Where a download's bytes go until they are complete and verified (SPEC D-1, D-2, D-4, B-6).

Invariants:

- The target comes from the workspace resolver (``LocalWorkspace.resolve``): workspace-relative,
  no escapes, symlinks followed only inside the root. Missing parent directories are created
  inside the workspace, then the parent is resolved again and opened as a directory fd
  (``O_DIRECTORY|O_NOFOLLOW``); ``/proc/self/fd`` must show that fd still inside the root. From
  then on every operation — create the temp file, link, rename, unlink, fsync — is relative to
  that fd, so swapping a path component for a symlink afterwards cannot redirect the write.
  (When ``fsboundary``'s race-free workspace API lands, it replaces the resolve-then-open step.)
- The temp file is ``.a3s-download-<random>.part`` beside the target, created ``O_EXCL`` and
  ``O_NOFOLLOW`` with mode 0644. ``discard()`` removes it; it is called on every failure path
  (cancel, timeout, over-limit, digest mismatch, server or transport errors).
- Promotion happens only after ``fsync``: without ``overwrite`` the temp file is hard-linked to
  the target name, which fails if anything exists there (no clobbering, atomically); with
  ``overwrite`` it is renamed over a regular file (never over a directory). The directory is
  fsynced afterwards. Readers see the old file or the complete new one, never a partial one.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat as stat_mod
from pathlib import Path

from kernel.errors import InvalidArgument, PathOutsideWorkspace, ToolError
from kernel.workspace import LocalWorkspace, normalize_relative

TEMP_PREFIX = ".a3s-download-"
TEMP_SUFFIX = ".part"
FILE_MODE = 0o644


def _os_error(what: str, exc: OSError) -> ToolError:
    return ToolError(f"{what}: {exc.strerror or exc}", errno=exc.errno)


class Staging:
    def __init__(self, ws: LocalWorkspace, file_path: str) -> None:
        rel = normalize_relative(file_path)
        if not rel:
            raise InvalidArgument("file_path names the workspace root, not a file")
        self.rel = rel
        self.ws = ws
        self.dir_fd = -1
        self.fd = -1
        self.temp_name: str | None = None
        path = ws.resolve(rel)
        self.name = path.name
        self._open_dir(path.parent)

    def _open_dir(self, parent: Path) -> None:
        self._make_parents(parent)
        # Resolve again after mkdir: a symlink planted meanwhile must not carry the file away.
        parent = self.ws.resolve(self.rel).parent
        try:
            fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except NotADirectoryError as exc:
            raise InvalidArgument(f"a parent of {self.rel} is not a directory") from exc
        except OSError as exc:
            raise _os_error(f"cannot open the directory of {self.rel}", exc) from exc
        try:
            real = Path(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            real = parent  # no /proc: fall back to comparing the inode
            if os.fstat(fd).st_ino != os.stat(parent).st_ino:
                os.close(fd)
                raise PathOutsideWorkspace(f"{self.rel} moved while it was opened", path=self.rel) from None
        root = self.ws.root
        if real != root and root not in real.parents:
            os.close(fd)
            raise PathOutsideWorkspace(f"{self.rel} resolves outside the workspace", path=self.rel)
        self.dir_fd = fd

    def _make_parents(self, parent: Path) -> None:
        missing: list[Path] = []
        probe = parent
        while not probe.exists():
            missing.append(probe)
            probe = probe.parent
        if not probe.is_dir():
            raise InvalidArgument(f"a parent of {self.rel} is a file, not a directory")
        for d in reversed(missing):
            try:
                os.mkdir(d)
            except FileExistsError:
                pass
            except OSError as exc:
                raise _os_error(f"cannot create the directories for {self.rel}", exc) from exc

    # ---- the target -----------------------------------------------------------------------

    def existing(self) -> os.stat_result | None:
        """What is at the target name now (not following a final symlink), or None."""
        try:
            return os.stat(self.name, dir_fd=self.dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def check_target(self, overwrite: bool) -> bool:
        """Refuse early what promotion would refuse; True when a file would be replaced."""
        st = self.existing()
        if st is None:
            return False
        if stat_mod.S_ISDIR(st.st_mode):
            raise InvalidArgument(f"{self.rel} is a directory")
        if not overwrite:
            raise InvalidArgument(f"{self.rel} already exists; pass overwrite=true to replace it")
        if not stat_mod.S_ISREG(st.st_mode):
            raise InvalidArgument(f"{self.rel} is not a regular file; refusing to replace it")
        return True

    # ---- the temp file --------------------------------------------------------------------

    def create_temp(self) -> int:
        for _ in range(8):
            name = f"{TEMP_PREFIX}{secrets.token_hex(8)}{TEMP_SUFFIX}"
            flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            try:
                self.fd = os.open(name, flags, FILE_MODE, dir_fd=self.dir_fd)
            except FileExistsError:
                continue
            except OSError as exc:
                raise _os_error(f"cannot create a temporary file beside {self.rel}", exc) from exc
            self.temp_name = name
            with contextlib.suppress(OSError):
                os.fchmod(self.fd, FILE_MODE)  # exactly 0644, whatever the process umask
            return self.fd
        raise ToolError(f"cannot create a temporary file beside {self.rel}")

    def reset(self) -> None:
        """Empty the temp file (a sequential fallback starts again from byte 0)."""
        os.ftruncate(self.fd, 0)

    def write_at(self, data: bytes | memoryview, offset: int) -> None:
        view = memoryview(data)
        while view:
            written = os.pwrite(self.fd, view, offset)
            view, offset = view[written:], offset + written

    def sync(self) -> None:
        try:
            os.fsync(self.fd)
        except OSError as exc:
            raise _os_error(f"cannot sync the download of {self.rel}", exc) from exc

    def promote(self, overwrite: bool) -> bool:
        """Make the synced temp file the target; True when an existing file was replaced."""
        assert self.temp_name is not None
        replaced = False
        try:
            if overwrite:
                replaced = self.check_target(True)
                os.rename(self.temp_name, self.name, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)
            else:
                os.link(
                    self.temp_name,
                    self.name,
                    src_dir_fd=self.dir_fd,
                    dst_dir_fd=self.dir_fd,
                    follow_symlinks=False,
                )
                os.unlink(self.temp_name, dir_fd=self.dir_fd)
        except FileExistsError:
            raise InvalidArgument(
                f"{self.rel} appeared while downloading; pass overwrite=true to replace it"
            ) from None
        except OSError as exc:
            raise _os_error(f"cannot move the download into place at {self.rel}", exc) from exc
        self.temp_name = None
        with contextlib.suppress(OSError):
            os.fsync(self.dir_fd)
        return replaced

    def discard(self) -> None:
        """Remove the temp file (if any) and close every descriptor; safe to call twice."""
        if self.temp_name is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.temp_name, dir_fd=self.dir_fd)
            self.temp_name = None
        for attr in ("fd", "dir_fd"):
            fd = getattr(self, attr)
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
                setattr(self, attr, -1)
