"""The sandbox's seccomp filter: a classic-BPF program bubblewrap loads before the command runs.

The user, network, PID, IPC and UTS namespaces and the dropped capabilities do most of the
isolation (see ``tools/bash/sandbox.py``); this filter closes what namespaces cannot:

- **No host sockets.** A Unix socket file is reachable from any network namespace, and a
  read-only mount does not stop ``connect()`` on it; ``AF_VSOCK`` reaches the hypervisor. So
  ``socket()`` may only create ``AF_INET``/``AF_INET6`` (the sandbox's own network namespace: only
  its loopback) and ``AF_NETLINK`` (interface queries in that namespace); every other family —
  ``AF_UNIX`` included — fails with ``EACCES``. ``socketpair()`` stays allowed: an anonymous pair
  connects only the two ends the process just made (pipes between its own children).
- **No setuid/setgid files.** Files the sandbox creates in the workspace are owned, seen from the
  host, by the host's uid (root on CI). ``chmod``/``fchmod``/``fchmodat``/``fchmodat2`` with
  ``S_ISUID``/``S_ISGID``, and ``open``/``openat``/``creat``/``mknod``/``mknodat`` creating a file
  with those bits, fail with ``EPERM``: no setuid-root binary can be planted for someone else to run.
- **Less kernel surface**: ``io_uring_*`` (its operations bypass this filter), ``keyctl`` /
  ``add_key`` / ``request_key`` (keyrings are not fully namespaced), ``bpf``, ``perf_event_open``
  and ``userfaultfd`` fail with ``EPERM``; ``openat2`` (whose mode sits in a struct this filter
  cannot read) fails with ``ENOSYS`` so callers fall back to ``openat``.
- Only the native ABI passes: another architecture's calls (i386 ``int 0x80``, which has
  ``socketcall``) kill the process, and x32 system call numbers fail with ``EPERM``.

``program()`` returns the raw ``struct sock_filter`` array (8 bytes per instruction, native byte
order) that ``bwrap --seccomp FD`` reads. Supported: x86_64 and aarch64; elsewhere ``program()``
raises ``UnsupportedArchitecture`` and the sandbox reports itself unavailable (fail closed).
"""

from __future__ import annotations

import errno
import functools
import platform
import struct
from dataclasses import dataclass

# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6]
_NR_OFFSET = 0
_ARCH_OFFSET = 4
_ARGS_OFFSET = 16

# Classic BPF opcodes.
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06

RET_KILL_PROCESS = 0x80000000
RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000

AF_INET = 2
AF_INET6 = 10
AF_NETLINK = 16
ALLOWED_SOCKET_FAMILIES = (AF_INET, AF_INET6, AF_NETLINK)
SETID_MODE_BITS = 0o6000  # S_ISUID | S_ISGID
O_CREAT = 0o100
O_TMPFILE_BIT = 0o20000000  # __O_TMPFILE
X32_SYSCALL_BIT = 0x40000000


class UnsupportedArchitecture(RuntimeError):
    pass


@dataclass(frozen=True)
class _Arch:
    audit_arch: int
    socket: int
    denied_eperm: tuple[
        int, ...
    ]  # io_uring x3, keyctl, add_key, request_key, bpf, perf_event_open, userfaultfd
    openat2: int
    # syscall number -> index of its mode argument (chmod family: always checked)
    chmod_like: dict[int, int]
    # syscall number -> (index of flags argument or None, index of mode argument): creation calls
    create_like: dict[int, tuple[int | None, int]]
    has_x32: bool


_X86_64 = _Arch(
    audit_arch=0xC000003E,
    socket=41,
    denied_eperm=(425, 426, 427, 250, 248, 249, 321, 298, 323),
    openat2=437,
    chmod_like={90: 1, 91: 1, 268: 2, 452: 2},  # chmod, fchmod, fchmodat, fchmodat2
    # open(path, flags, mode), openat(dfd, path, flags, mode), creat(path, mode),
    # mknod(path, mode, dev), mknodat(dfd, path, mode, dev)
    create_like={2: (1, 2), 257: (2, 3), 85: (None, 1), 133: (None, 1), 259: (None, 2)},
    has_x32=True,
)
_AARCH64 = _Arch(
    audit_arch=0xC00000B7,
    socket=198,
    denied_eperm=(425, 426, 427, 219, 217, 218, 280, 241, 282),
    openat2=437,
    chmod_like={52: 1, 53: 2, 452: 2},  # fchmod, fchmodat, fchmodat2
    create_like={56: (2, 3), 33: (None, 2)},  # openat, mknodat
    has_x32=False,
)
_ARCHES = {"x86_64": _X86_64, "amd64": _X86_64, "aarch64": _AARCH64, "arm64": _AARCH64}


def _errno(code: int) -> int:
    return _RET_ERRNO | (code & 0xFFFF)


class _Asm:
    """A tiny classic-BPF assembler: jumps name labels, resolved to forward offsets at the end."""

    def __init__(self) -> None:
        self.code: list[tuple[int, object, object, int]] = []
        self.labels: dict[str, int] = {}

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def load(self, offset: int) -> None:
        self.code.append((_LD_W_ABS, 0, 0, offset))

    def jump(self, op: int, k: int, true: str | int, false: str | int) -> None:
        """``true``/``false``: a label, or 0 for "the next instruction"."""
        self.code.append((op, true, false, k))

    def ret(self, value: int) -> None:
        self.code.append((_RET_K, 0, 0, value))

    def assemble(self) -> bytes:
        out = bytearray()
        for index, (op, jt, jf, k) in enumerate(self.code):
            out += struct.pack("=HBBI", op, self._offset(index, jt), self._offset(index, jf), k)
        return bytes(out)

    def _offset(self, index: int, target: object) -> int:
        if target == 0:
            return 0
        assert isinstance(target, str)
        offset = self.labels[target] - index - 1
        if not 0 <= offset <= 255:
            raise ValueError(f"BPF jump to {target} out of range ({offset})")
        return offset


@functools.cache
def program(machine: str | None = None) -> bytes:
    """The filter for ``machine`` (default: this one) as bytes for ``bwrap --seccomp``."""
    arch = _ARCHES.get((machine or platform.machine()).lower())
    if arch is None:
        raise UnsupportedArchitecture(f"no seccomp filter for {machine or platform.machine()}")
    asm = _Asm()
    asm.load(_ARCH_OFFSET)
    asm.jump(_JEQ_K, arch.audit_arch, 0, "kill")
    asm.load(_NR_OFFSET)
    if arch.has_x32:
        asm.jump(_JGE_K, X32_SYSCALL_BIT, "eperm", 0)
    asm.jump(_JEQ_K, arch.socket, "socket", 0)
    for nr in arch.denied_eperm:
        asm.jump(_JEQ_K, nr, "eperm", 0)
    asm.jump(_JEQ_K, arch.openat2, "enosys", 0)
    for nr, mode_arg in arch.chmod_like.items():
        asm.jump(_JEQ_K, nr, f"mode{mode_arg}", 0)
    for nr, (flags_arg, mode_arg) in arch.create_like.items():
        target = f"mode{mode_arg}" if flags_arg is None else f"create{flags_arg}_{mode_arg}"
        asm.jump(_JEQ_K, nr, target, 0)
    asm.ret(RET_ALLOW)

    asm.label("socket")
    asm.load(_ARGS_OFFSET)  # low 32 bits of the domain (the kernel reads it as an int)
    for family in ALLOWED_SOCKET_FAMILIES:
        asm.jump(_JEQ_K, family, "allow", 0)
    asm.ret(_errno(errno.EACCES))

    create_pairs = sorted({v for v in arch.create_like.values() if v[0] is not None}, key=str)
    for flags_arg, mode_arg in create_pairs:
        assert flags_arg is not None
        asm.label(f"create{flags_arg}_{mode_arg}")
        asm.load(_ARGS_OFFSET + 8 * flags_arg)
        asm.jump(_JSET_K, O_CREAT | O_TMPFILE_BIT, f"mode{mode_arg}", "allow")
    mode_args = sorted({*arch.chmod_like.values(), *(m for _, m in arch.create_like.values())})
    for mode_arg in mode_args:
        asm.label(f"mode{mode_arg}")
        asm.load(_ARGS_OFFSET + 8 * mode_arg)
        asm.jump(_JSET_K, SETID_MODE_BITS, "eperm", "allow")

    asm.label("allow")
    asm.ret(RET_ALLOW)
    asm.label("eperm")
    asm.ret(_errno(errno.EPERM))
    asm.label("enosys")
    asm.ret(_errno(errno.ENOSYS))
    asm.label("kill")
    asm.ret(RET_KILL_PROCESS)
    return asm.assemble()
