"""The QuickJS child process: runs one script, talks to its host over JSON lines on stdin/stdout.

Started as ``python -I -S vm_child.py SITE_DIR PRELUDE PARENT_PID`` with an empty environment and
``/`` as its working directory; it imports nothing but the standard library's C parts and the
``_quickjs`` extension (no ``json``, no project code: JSON is parsed by the VM itself, which keeps a
cold start cheap). Invariants:

- it dies with its parent: ``PR_SET_PDEATHSIG`` (SIGKILL) plus a parent-pid check for the race
  before it, and EOF on stdin whenever it waits for the host;
- rlimits back up the VM's own limits: address space (``AS_LIMIT_BYTES``), CPU seconds (the
  deadline plus slack; with a slice cap, a soft limit a slice ahead — ``_CpuFence``), no core
  files, no file writes;
- one script per process: the host never sends a second job, and the process exits after it;
- every pump of the VM (evaluation, pending jobs, settling) runs under ``set_time_limit`` set to the
  time left before the deadline; the host still kills the process 500 ms after the deadline, so a
  hang in native code cannot outlive it.

Lines out: ``{"t":"ready"}`` once the bridge is loaded, ``{"t":"calls","calls":[…]}`` whenever the
script queued new host requests, ``{"t":"done", …}`` at the end. Lines in: the job (``{"profile",
"inputs", "source", "timeoutMs", "sliceMs"?}``), then replies ``[{"id","ok","value"}, …]`` for any
subset of the outstanding requests, in any order, as the host finishes them.
"""

import os
import resource
import sys
import time

MEMORY_LIMIT_BYTES = 64 * 1024 * 1024
STACK_LIMIT_BYTES = 512 * 1024
AS_LIMIT_BYTES = 320 * 1024 * 1024
CPU_SLACK_S = 5
PR_SET_PDEATHSIG = 1
SIGKILL = 9


def _tie_to_parent(parent_pid: int) -> None:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0)
    except Exception:
        pass  # not Linux, or no libc: stdin EOF and the host's kill still end us
    if os.getppid() != parent_pid:
        os._exit(3)  # the parent died before the signal was armed


def _limit(which: int, value: int) -> None:
    try:
        resource.setrlimit(which, (value, value))
    except (ValueError, OSError):
        pass


class _CpuFence:
    """A soft ``RLIMIT_CPU`` kept one slice ahead of the CPU time used, re-armed before each call into
    the VM: native work the VM's interrupt cannot stop (a catastrophic regex: QuickJS's regex engine
    never checks it) ends with SIGXCPU after about ``slice_s`` + 3 s of CPU instead of running to the
    deadline (a workflow's is up to 24 h). The host reports that as the runaway it is."""

    def __init__(self, slice_s: float, hard: int) -> None:
        self.slice_s = slice_s
        self.hard = hard
        self.at = 0

    def arm(self) -> None:
        used = time.process_time()
        if self.at - used >= self.slice_s + 1:
            return  # still more than a slice ahead: no syscall for this call
        self.at = min(self.hard, int(used + self.slice_s) + 2)
        try:
            resource.setrlimit(resource.RLIMIT_CPU, (self.at, self.hard))
        except (ValueError, OSError):
            pass


def _write(line: str) -> None:
    data = (line + "\n").encode("utf-8", "surrogatepass")
    view = memoryview(data)
    while view:
        n = os.write(1, view)
        view = view[n:]


def _quote(text: str) -> str:
    """A JSON string literal without the json module (only for our own error texts)."""
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif code < 0x20:
            out.append(f"\\u{code:04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _done_error(kind: str, message: str, logs: str = "[]") -> None:
    _write(f'{{"t":"done","ok":false,"kind":{_quote(kind)},"error":{_quote(message[:8192])},"logs":{logs}}}')


def _classify(exc: BaseException) -> str:
    text = str(exc)
    if type(exc).__name__ == "StackOverflow" or text.startswith("InternalError: stack overflow"):
        return "stack"
    if text.startswith("InternalError: interrupted"):
        return "timeout"
    if text.startswith("InternalError: out of memory"):
        return "memory"
    if text.startswith("SyntaxError"):
        return "syntax"
    return "script"


def main() -> None:
    site, prelude_path, parent_pid = sys.argv[1], sys.argv[2], int(sys.argv[3])
    _tie_to_parent(parent_pid)
    _limit(resource.RLIMIT_CORE, 0)
    _limit(resource.RLIMIT_FSIZE, 0)
    _limit(resource.RLIMIT_AS, AS_LIMIT_BYTES)
    sys.path.append(site)
    import _quickjs

    with open(prelude_path, encoding="utf-8") as fh:
        prelude = fh.read()
    ctx = _quickjs.Context()
    ctx.set_memory_limit(MEMORY_LIMIT_BYTES)
    ctx.set_max_stack_size(STACK_LIMIT_BYTES)
    ctx.eval(prelude)
    bridge = {
        name: ctx.eval("__a3s." + name)
        for name in ("job", "timeoutMs", "sliceMs", "start", "next", "settle", "waiting", "logs")
    }
    _write('{"t":"ready"}')

    stdin = sys.stdin.buffer
    line = stdin.readline()
    if not line:
        return  # the host went away (or released a pooled child)
    started = time.monotonic()
    source = bridge["job"](line.decode("utf-8", "surrogatepass"))
    timeout_s = float(bridge["timeoutMs"]()) / 1000.0
    slice_s = float(bridge["sliceMs"]()) / 1000.0 or None
    cpu_hard = int(timeout_s) + CPU_SLACK_S
    _limit(resource.RLIMIT_CPU, cpu_hard)
    fence = _CpuFence(slice_s, cpu_hard) if slice_s else None
    deadline = started + timeout_s

    def limited(fn, *args):
        """Call into the VM with the time left before the deadline (or the slice cap) as its limit."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        if fence is not None:
            fence.arm()
        ctx.set_time_limit(min(left, slice_s) if slice_s else left)
        try:
            return fn(*args)
        finally:
            ctx.set_time_limit(-1)

    def run_jobs() -> None:
        while limited(ctx.execute_pending_job):
            pass

    def logs() -> str:
        try:
            return str(bridge["logs"]())
        except Exception:
            return "[]"

    try:
        limited(ctx.eval, source)
        if limited(bridge["start"]) == "no_entry":
            _done_error("no_entry", "program script must define async function run(ctx, inputs)")
            return
        while True:
            run_jobs()
            out = limited(bridge["next"])
            if out:
                _write(out)
                if out.startswith('{"t":"done"'):
                    return
            elif not limited(bridge["waiting"]):
                _done_error(
                    "deadlock", "program script is waiting on a promise that nothing will settle", logs()
                )
                return
            # Replies may come one request at a time (workflow steps finish independently).
            reply = stdin.readline()
            if not reply:
                return  # the host went away
            limited(bridge["settle"], reply.decode("utf-8", "surrogatepass"))
    except TimeoutError:
        _done_error("timeout", "program script timed out", logs())
    except MemoryError:
        _done_error("memory", "program script ran out of memory")
    except Exception as exc:  # the VM's JSException / StackOverflow: classified, never a traceback
        kind = _classify(exc)
        if kind == "timeout" and time.monotonic() < deadline - 0.05:
            # Interrupted before the deadline: the per-slice cap (a runaway loop between host
            # requests), or a script throwing its own "interrupted" error.
            kind = "runaway" if slice_s else "script"
        _done_error(kind, str(exc), logs())


if __name__ == "__main__":
    main()
