"""Where a download's bytes go until they are complete and verified (SPEC D-1, D-2, D-4, B-6).

Invariants:

- The target is resolved race-free beneath the workspace root (``kernel.beneath.Beneath``:
  ``openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS)`` or an ``O_NOFOLLOW`` walk that follows
  symlinks only inside the root): the result is a verified descriptor of the target's directory.
  Missing parent directories are created one by one below such descriptors. From then on every
  operation — create the temp file, link, rename, unlink, fsync — is relative to that descriptor,
  so swapping a path component for a symlink cannot redirect the write.
- ``protect`` (governed origins, like ``write``): nothing inside git metadata, under any spelling
  that leads there (``tools/_fileio.check_not_git_metadata``), checked before a directory is made:
  ``permission_denied`` (``protected_path``).
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

from kernel.beneath import Beneath, Fd, fsync_dir, open_subdir
from kernel.errors import InvalidArgument, ToolError
from kernel.workspace import LocalWorkspace, normalize_relative
from tools._fileio import check_not_git_metadata

TEMP_PREFIX = ".a3s-download-"
TEMP_SUFFIX = ".part"
FILE_MODE = 0o644


def _os_error(what: str, exc: OSError) -> ToolError:
    return ToolError(f"{what}: {exc.strerror or exc}", errno=exc.errno)


class Staging:
    def __init__(self, ws: LocalWorkspace, file_path: str, *, protect: bool = False) -> None:
        rel = normalize_relative(file_path)  # absolute, NUL, look-alike, lexical escape, .a3s
        if not rel:
            raise InvalidArgument("file_path names the workspace root, not a file")
        self.fd = -1
        self.temp_name: str | None = None
        self._beneath = Beneath(str(ws.root))
        try:
            loc = self._beneath.locate(file_path)
            if protect:  # before any directory is made: a hook in .git/ would run outside every sandbox
                try:
                    check_not_git_metadata(ws, rel, loc.rel)
                except BaseException:
                    loc.close()
                    raise
            parent = loc.parent
            for name in loc.missing:  # create missing parents, each below a verified descriptor
                try:
                    child = open_subdir(parent.fd, name, create=True)
                except OSError as exc:
                    raise _os_error(f"cannot create the directories for {rel}", exc) from exc
                parent.close()
                parent = child
        except BaseException:
            self._beneath.close()
            raise
        if not loc.name:
            parent.close()
            self._beneath.close()
            raise InvalidArgument("file_path names the workspace root, not a file")
        self._dir: Fd = parent
        self.name = loc.name
        self.rel = loc.rel

    @property
    def dir_fd(self) -> int:
        return self._dir.fd

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
        fsync_dir(self.dir_fd)
        return replaced

    def discard(self) -> None:
        """Remove the temp file (if any) and close every descriptor; safe to call twice."""
        if self.temp_name is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.temp_name, dir_fd=self.dir_fd)
            self.temp_name = None
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1
        self._dir.close()
        self._beneath.close()
