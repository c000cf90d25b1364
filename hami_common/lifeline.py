"""Lifeline: a server started by one of our launchers ends when the process that started it
ends, however it ended (SIGKILL, a test run killed by its timeout, a crashed demo).

The launcher gives the child a pipe as stdin and sets HAMI_LIFELINE=stdin (`child_options`);
the child (`watch_parent`, called first thing by hami-control, hami-sim's servers and hami-node)
reads that pipe on a daemon thread. Nothing is ever written to it, so the read returns only at
end of file, which the kernel delivers when the last holder of the write end, the parent,
exits. The child then sends itself SIGTERM and shuts down as it would for its supervisor.

A pipe, not PR_SET_PDEATHSIG: that signal fires when the *thread* that forked the child exits,
which would stop servers started from short-lived threads. The variable is removed from the
child's environment so that its own children (containers, helpers), whose stdin is something
else, do not take an empty stdin for their parent's death.
"""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
from typing import Callable, Mapping, Optional

ENV = "HAMI_LIFELINE"
_STDIN = "stdin"

log = logging.getLogger(__name__)


def child_options(env: Optional[Mapping[str, str]] = None) -> dict:
    """Popen keyword arguments that tie the child's life to this process: stdin a pipe this
    process keeps open, and the environment (env, else this process's) marked."""
    return {"stdin": subprocess.PIPE, "env": {**(os.environ if env is None else env),
                                              ENV: _STDIN}}


def watch_parent(on_loss: Optional[Callable[[], None]] = None,
                 stream=None) -> Optional[threading.Thread]:
    """In a child started with `child_options`: calls on_loss (default: SIGTERM to this
    process) once the parent has gone. Returns the watching thread, or None when this process
    was not started that way (run by hand, systemd, a DaemonSet)."""
    if os.environ.pop(ENV, None) != _STDIN:
        return None
    stream = sys.stdin if stream is None else stream
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None       # no stdin to watch
    action = on_loss or (lambda: os.kill(os.getpid(), signal.SIGTERM))

    def wait_for_eof() -> None:
        try:
            while os.read(fd, 4096):
                pass            # the parent never writes; anything read is ignored
        except OSError:
            pass                # a broken stdin also means the parent is gone
        log.warning("the process that started this one has exited: shutting down")
        action()

    thread = threading.Thread(target=wait_for_eof, name="lifeline", daemon=True)
    thread.start()
    return thread
