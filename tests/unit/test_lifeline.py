"""The lifeline: a child started with child_options ends when its parent's end of the pipe
closes, and only children started that way watch it."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from hami_common import lifeline

CHILD = textwrap.dedent("""
    import os, sys, time
    from hami_common.lifeline import ENV, watch_parent
    thread = watch_parent()
    print("watching" if thread else "not watching", os.environ.get(ENV, "-"), flush=True)
    time.sleep(30)
""")


def _spawn(**options) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True,
                            **options)


def test_child_ends_with_sigterm_when_the_parent_end_closes():
    proc = _spawn(**lifeline.child_options())
    try:
        # The variable is gone from the child's environment: its own children won't watch.
        assert proc.stdout.readline().split() == ["watching", "-"]
        assert proc.poll() is None
        proc.stdin.close()                    # what the kernel does when the parent dies
        assert proc.wait(timeout=10) == -15   # SIGTERM, as from a supervisor
    finally:
        proc.kill()
        proc.wait()


def test_child_started_otherwise_does_not_watch():
    proc = _spawn(stdin=subprocess.DEVNULL)   # stdin at end of file at once
    try:
        assert proc.stdout.readline().split() == ["not", "watching", "-"]
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=0.5)            # an empty stdin is not taken for a dead parent
    finally:
        proc.kill()
        proc.wait()


def test_child_options_keeps_the_given_environment():
    options = lifeline.child_options({"A": "1"})
    assert options["stdin"] is subprocess.PIPE
    assert options["env"] == {"A": "1", lifeline.ENV: "stdin"}


def test_on_loss_is_called_at_end_of_file(monkeypatch):
    read, write = os.pipe()
    monkeypatch.setenv(lifeline.ENV, "stdin")
    called = []
    with os.fdopen(read) as stream:
        thread = lifeline.watch_parent(lambda: called.append(True), stream=stream)
        assert thread is not None and lifeline.ENV not in os.environ
        os.write(write, b"ignored")
        os.close(write)
        thread.join(timeout=5)
    assert called == [True]
