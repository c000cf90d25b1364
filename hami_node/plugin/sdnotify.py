"""systemd's notify protocol with a plain socket: READY=1, STATUS=..., WATCHDOG=1.

systemd passes $NOTIFY_SOCKET (a path, or `@name` for the abstract namespace) to a
Type=notify service, and $WATCHDOG_USEC (with $WATCHDOG_PID) when WatchdogSec is set. Outside
systemd both are unset and every call is a no-op.
"""
import os
import socket
from typing import Mapping, Optional


class Notifier:
    """Sends datagrams to systemd's notify socket, if there is one."""

    def __init__(self, environ: Optional[Mapping[str, str]] = None):
        env = os.environ if environ is None else environ
        self.address = env.get("NOTIFY_SOCKET", "")
        usec = env.get("WATCHDOG_USEC", "")
        pid = env.get("WATCHDOG_PID", "")
        # The watchdog is ours only if systemd named our pid (or no pid at all).
        mine = not pid or pid == str(os.getpid())
        self.watchdog_s = int(usec) / 1e6 if usec.isdigit() and mine else 0.0

    @property
    def enabled(self) -> bool:
        """Whether systemd listens."""
        return bool(self.address)

    def send(self, *lines: str) -> bool:
        """Sends `KEY=VALUE` lines in one datagram; False when nobody listens or it failed."""
        if not self.address:
            return False
        target = "\0" + self.address[1:] if self.address.startswith("@") else self.address
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
                s.sendto("\n".join(lines).encode(), target)
            return True
        except OSError:
            return False   # systemd went away; the service keeps working without it

    def ready(self, status: str = "") -> bool:
        """READY=1 (with a STATUS line)."""
        return self.send("READY=1", *([f"STATUS={status}"] if status else []))

    def status(self, status: str) -> bool:
        """STATUS=..."""
        return self.send(f"STATUS={status}")

    def watchdog(self) -> bool:
        """WATCHDOG=1."""
        return self.send("WATCHDOG=1")

    def stopping(self) -> bool:
        """STOPPING=1."""
        return self.send("STOPPING=1")
