"""The agent's background parts: one thread each, started, stopped and watched alike."""
import threading


class Worker:
    """A part that runs `_run` in a daemon thread until `_stop` is set."""

    join_s = 5.0    # how long stop() waits for the thread (the agent's SIGTERM grace is shared)

    def __init__(self, name: str):
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=name)

    def _run(self) -> None:
        raise NotImplementedError

    def start(self):
        """Starts the thread; returns the part."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stops the thread (within its next wait)."""
        self._stop.set()
        self._thread.join(timeout=self.join_s)

    def alive(self) -> bool:
        """Whether the thread runs (the watchdog pings only while every part's does)."""
        return self._thread.is_alive()
