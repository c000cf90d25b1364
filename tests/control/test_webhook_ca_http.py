"""hami-control keeps its webhook's caBundle: set at start when the manifest leaves it out,
and put back when something empties it (a re-applied older manifest)."""
import base64

from ctlhelpers import start_plane
from hami_sim.testing import wait_for
from kubernetes import client

WEBHOOK = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
           "metadata": {"name": "hami-control"},
           "webhooks": [{"name": "pods.hami-control.hami.io", "sideEffects": "None",
                         "admissionReviewVersions": ["v1"],
                         "clientConfig": {"service": {"name": "hami-control",
                                                      "namespace": "hami-system"}}}]}


def test_the_ca_bundle_is_set_and_kept(apiserver, kube_api_client, tmp_path):
    ca = tmp_path / "ca.crt"
    ca.write_text("-----BEGIN CERTIFICATE-----\nnot checked here\n-----END CERTIFICATE-----\n")
    expected = base64.b64encode(ca.read_bytes()).decode()
    admission = client.AdmissionregistrationV1Api(kube_api_client)
    admission.create_mutating_webhook_configuration(WEBHOOK)

    def bundle():
        raw = admission.read_mutating_webhook_configuration("hami-control")
        return raw.webhooks[0].client_config.ca_bundle
    control = start_plane(apiserver, "--webhook-configuration", "hami-control",
                          "--webhook-ca-file", str(ca), "--webhook-ca-check", "0.2")
    try:
        wait_for(lambda: bundle() == expected, timeout=10, what="the caBundle set")
        admission.patch_mutating_webhook_configuration(
            "hami-control", [{"op": "replace", "path": "/webhooks/0/clientConfig/caBundle",
                              "value": ""}])
        wait_for(lambda: bundle() == expected, timeout=10, what="the caBundle put back")
    finally:
        control.stop()
