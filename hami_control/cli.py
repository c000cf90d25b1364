"""`hami-control`: the mutating webhook and scheduler extender server.

Exit status: 0 after SIGTERM/SIGINT, 2 for a configuration error (the message names the flag),
1 when the Kubernetes client cannot be configured.
"""
import logging
import signal
import sys
import threading

from hami_common.lifeline import watch_parent
from hami_control.cluster.api import ApiError
from hami_control.config import from_args
from hami_control.errors import ConfigError

log = logging.getLogger("hami_control")


def _serve(config) -> int:
    from hami_control.cluster.kube import KubeApi, make_api_client
    from hami_control.service import ControlPlane
    try:
        api = KubeApi(make_api_client(config.kubeconfig))
    except ApiError as e:
        print(f"hami-control: {e}", file=sys.stderr)
        return 1
    # Handlers, watches and binds share the GIL; the default 5 ms switch interval would let
    # one of them hold up a filter call for that long.
    sys.setswitchinterval(0.0005)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    watch_parent(stop.set)      # started by a launcher: end with it
    plane = ControlPlane(config, api).start()
    if not config.tls:
        log.warning("serving plain HTTP (no --tls-cert): fine for the extender on loopback, "
                    "but the API server calls webhooks only over HTTPS")
    print(f"serving {plane.url}", flush=True)
    if plane.dashboard:         # the second line: launchers read it for the page's address
        print(f"dashboard {plane.dashboard.url}/", flush=True)
    try:
        stop.wait()
    finally:
        log.info("stopping")
        plane.stop()
        api.close()
    return 0


def main(argv=None) -> int:
    """Parses the flags and serves until SIGTERM."""
    try:
        config = from_args(sys.argv[1:] if argv is None else argv)
    except ConfigError as e:
        print(f"hami-control: configuration error: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(level=config.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return _serve(config)
    except ConfigError as e:
        print(f"hami-control: configuration error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
