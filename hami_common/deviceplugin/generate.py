"""Regenerates api_pb2.py and api_pb2_grpc.py from api.proto with grpcio-tools.

Usage: python -m hami_common.deviceplugin.generate [OUT_ROOT]
Without OUT_ROOT the modules are rewritten in place; with it they land under
OUT_ROOT/hami_common/deviceplugin/ (the test uses that to check the committed files are current).
"""
import os
import sys
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
# The repository (or site-packages) root: the proto's import path is relative to it, so the
# generated modules import each other as hami_common.deviceplugin.api_pb2.
SOURCE_ROOT = PACKAGE_DIR.parent.parent
PROTO = PACKAGE_DIR / "api.proto"
GENERATED = ("api_pb2.py", "api_pb2_grpc.py")


class GenerateError(RuntimeError):
    """protoc failed or grpcio-tools is missing."""


def generate(out_root: Path) -> list[Path]:
    """Runs protoc into out_root and returns the paths of the generated modules."""
    try:
        from grpc_tools import protoc
    except ImportError as e:
        raise GenerateError("grpcio-tools is not installed: pip install -e '.[test]'") from e
    out_root = Path(out_root)
    (out_root / "hami_common" / "deviceplugin").mkdir(parents=True, exist_ok=True)
    rel = PROTO.relative_to(SOURCE_ROOT)
    args = ["protoc", f"-I{SOURCE_ROOT}", f"--python_out={out_root}",
            f"--grpc_python_out={out_root}", str(rel)]
    # protoc resolves the file against the include path; run from the root so rel is found.
    cwd = os.getcwd()
    try:
        os.chdir(SOURCE_ROOT)
        code = protoc.main(args)
    finally:
        os.chdir(cwd)
    if code != 0:
        raise GenerateError(f"protoc exited {code} for {PROTO}")
    return [out_root / "hami_common" / "deviceplugin" / name for name in GENERATED]


def main(argv=None) -> int:
    """Command-line entry point."""
    argv = sys.argv[1:] if argv is None else argv
    out = Path(argv[0]) if argv else SOURCE_ROOT
    for path in generate(out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
