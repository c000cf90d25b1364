"""The API server double spells quantities as the real server does, and our request parser
reads those spellings as HAMi does."""
import pytest

from hami_common.request import RequestError, parse_pod
from hami_sim.apiserver.quantity import canonical

CANONICAL = [
    (3000, "3k"), ("3000", "3k"), ("1500", "1500"), ("1.5", "1500m"), ("0.5", "500m"),
    ("2048Mi", "2Gi"), ("1.5Gi", "1536Mi"), ("1000Ki", "1000Ki"), ("1e3", "1e3"), ("3k", "3k"),
    (1, "1"), (0, "0"), ("0.0001", "100u"), ("100m", "100m"), (1024, "1024"), (2000000, "2M"),
]


@pytest.mark.parametrize("given,stored", CANONICAL, ids=[str(c[0]) for c in CANONICAL])
def test_canonical_spelling(given, stored):
    assert canonical(given) == stored


def _pod(gpumem):
    return {"metadata": {"name": "p", "namespace": "default"}, "spec": {"containers": [
        {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1",
                                               "nvidia.com/gpumem": gpumem}}}]}}


@pytest.mark.parametrize("given,mib", [(3000, 3000), ("4096", 4096), ("2Gi", 2048),
                                      ("1e3", 1000), ("12k", 12000)])
def test_gpumem_survives_the_servers_spelling(given, mib):
    stored = canonical(given)
    assert parse_pod(_pod(stored)).containers[0].mem_mib == mib


def test_gpumem_in_bytes_must_be_whole_mib():
    with pytest.raises(RequestError, match="whole number of MiB"):
        parse_pod(_pod("1500Ki"))
