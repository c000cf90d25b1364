"""Helpers the GPU tier's tests import (a module of its own name: `from conftest import` finds
whichever conftest was loaded last when several test folders run in one session)."""
import json
import subprocess
import sys
import tempfile
import threading
import time


def child(env, *args):
    """The command line of a child running `python args...` with the tier's interpreter."""
    return [env.get("HAMI_TEST_PYTHON", sys.executable), *args]


def run_together(commands, go, timeout=300):
    """Starts one child per (argv, env) and waits until every one has printed `ready` (its
    start-up done: importing PyTorch and warming up take from seconds to a minute on a loaded
    machine), then writes `go(now)` as one line to each child's stdin, so that their measured
    stretches begin together. Returns each child's last line of output, parsed as JSON."""
    kids = []
    try:
        for argv, env in commands:
            err = tempfile.TemporaryFile(mode="w+")
            kids.append((subprocess.Popen(argv, env=env, stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=err, text=True), err))
        deadline = time.monotonic() + timeout
        for kid, err in kids:
            first = []
            reader = threading.Thread(target=lambda: first.append(kid.stdout.readline()),
                                      daemon=True)
            reader.start()
            reader.join(max(0.0, deadline - time.monotonic()))
            if first != ["ready\n"]:
                kid.kill()
                kid.wait()
                err.seek(0)
                raise AssertionError(f"a child never got ready (printed {first!r}); "
                                     f"its stderr: {err.read()[-3000:]}")
        line = go(time.monotonic()) + "\n"
        for kid, _ in kids:
            kid.stdin.write(line)
            kid.stdin.flush()
        results = []
        for kid, err in kids:
            out, _ = kid.communicate(timeout=max(1.0, deadline - time.monotonic()))
            err.seek(0)
            assert kid.returncode == 0, err.read()[-3000:]
            results.append(json.loads(out.strip().splitlines()[-1]))
        return results
    finally:
        for kid, err in kids:
            kid.kill()
            kid.wait()
            err.close()
