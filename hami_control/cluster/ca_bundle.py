"""Keeps the webhook's caBundle: the CA of hami-control's serving certificate, in its
MutatingWebhookConfiguration.

The bundle lives outside the applied manifest (deploy/ leaves `caBundle` out), so a
`kubectl apply -f deploy/` never empties it; and should anything empty or change it (an older
manifest with `caBundle: ""`, a renewed CA), every replica puts the CA file's content back
within a check period. Writes only when different; a failure is logged with the RBAC hint and
retried at the next check.
"""
import base64
import logging
import threading
from typing import Optional

from hami_control.cluster.api import ApiError

log = logging.getLogger(__name__)


class WebhookCaBundle:
    """ensure() sets every webhook's clientConfig.caBundle of one configuration to the CA."""

    def __init__(self, api, configuration: str, ca_file: str, interval_s: float = 60.0):
        self.api, self.configuration, self.ca_file = api, configuration, ca_file
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self) -> "WebhookCaBundle":
        """Checks now and then every interval, in a thread."""
        self._thread = threading.Thread(target=self._loop, name="webhook-ca", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stops checking."""
        self._stop.set()

    def _loop(self) -> None:
        while True:
            self.ensure()
            if self._stop.wait(self.interval_s):
                return

    def ensure(self) -> int:
        """How many webhooks' bundles it corrected (0 when all were right or it failed)."""
        try:
            with open(self.ca_file, "rb") as f:
                bundle = base64.b64encode(f.read()).decode()
        except OSError as e:
            log.error("cannot read the webhook CA %s: %s", self.ca_file, e)
            return 0
        try:
            config = self.api.get_mutating_webhook(self.configuration)
            if config is None:
                log.warning("MutatingWebhookConfiguration %s does not exist; apply deploy/",
                            self.configuration)
                return 0
            ops = [{"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle",
                    "value": bundle}
                   for i, hook in enumerate(config.get("webhooks") or [])
                   if (hook.get("clientConfig") or {}).get("caBundle") != bundle]
            if ops:
                # Only onto the object as read: the webhooks' positions are the ones seen.
                version = (config.get("metadata") or {}).get("resourceVersion")
                guard = [{"op": "test", "path": "/metadata/resourceVersion", "value": version}]
                self.api.json_patch_mutating_webhook(self.configuration, guard + ops)
                log.info("set the caBundle of %d webhook(s) of %s", len(ops), self.configuration)
            return len(ops)
        except ApiError as e:
            log.error("cannot keep the caBundle of MutatingWebhookConfiguration %s: %s (the "
                      "ClusterRole needs get and patch on mutatingwebhookconfigurations)",
                      self.configuration, e)
            return 0
