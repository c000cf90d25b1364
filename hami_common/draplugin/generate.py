"""Regenerates the modules of the DRA and registration protos with grpcio-tools.

Usage: python -m hami_common.draplugin.generate [OUT_ROOT]
Without OUT_ROOT the modules are rewritten in place; with it they land under
OUT_ROOT/hami_common/draplugin/ (the test uses that to check the committed files are current).
"""
import sys
from pathlib import Path

from hami_common import protogen
from hami_common.protogen import GenerateError  # noqa: F401  (part of this module's API)

PACKAGE_DIR = Path(__file__).resolve().parent
PROTOS = ("dra_v1.proto", "dra_v1beta1.proto", "registration.proto")


def generate(out_root: Path) -> list:
    """Runs protoc into out_root and returns the paths of the generated modules."""
    return protogen.generate(PACKAGE_DIR, PROTOS, out_root)


if __name__ == "__main__":
    sys.exit(protogen.main(PACKAGE_DIR, PROTOS, sys.argv[1:]))
