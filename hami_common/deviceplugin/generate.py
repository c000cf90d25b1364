"""Regenerates api_pb2.py and api_pb2_grpc.py from api.proto with grpcio-tools.

Usage: python -m hami_common.deviceplugin.generate [OUT_ROOT]
Without OUT_ROOT the modules are rewritten in place; with it they land under
OUT_ROOT/hami_common/deviceplugin/ (the test uses that to check the committed files are current).
"""
import sys
from pathlib import Path

from hami_common import protogen
from hami_common.protogen import GenerateError  # noqa: F401  (part of this module's API)

PACKAGE_DIR = Path(__file__).resolve().parent
PROTOS = ("api.proto",)


def generate(out_root: Path) -> list:
    """Runs protoc into out_root and returns the paths of the generated modules."""
    return protogen.generate(PACKAGE_DIR, PROTOS, out_root)


if __name__ == "__main__":
    sys.exit(protogen.main(PACKAGE_DIR, PROTOS, sys.argv[1:]))
