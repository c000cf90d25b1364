"""Generates the Python modules of a package's .proto files with grpcio-tools (protoc).

The committed modules are checked against a fresh generation by the tests, so a changed
.proto without regenerated modules fails there.
"""
import os
from pathlib import Path

# The repository (or site-packages) root: the protos' import paths are relative to it, so the
# generated modules import each other as hami_common.<package>.<name>_pb2.
SOURCE_ROOT = Path(__file__).resolve().parent.parent


class GenerateError(RuntimeError):
    """protoc failed or grpcio-tools is missing."""


def generate(package_dir: Path, protos, out_root: Path) -> list:
    """Runs protoc for each of protos (file names in package_dir) into out_root; the paths of
    the generated modules (<name>_pb2.py and <name>_pb2_grpc.py per proto)."""
    try:
        from grpc_tools import protoc
    except ImportError as e:
        raise GenerateError("grpcio-tools is not installed: pip install -e '.[test]'") from e
    out_root = Path(out_root)
    rel_dir = Path(package_dir).resolve().relative_to(SOURCE_ROOT)
    (out_root / rel_dir).mkdir(parents=True, exist_ok=True)
    out = []
    for proto in protos:
        args = ["protoc", f"-I{SOURCE_ROOT}", f"--python_out={out_root}",
                f"--grpc_python_out={out_root}", str(rel_dir / proto)]
        cwd = os.getcwd()
        try:   # protoc resolves the file against the include path; run from the root
            os.chdir(SOURCE_ROOT)
            code = protoc.main(args)
        finally:
            os.chdir(cwd)
        if code != 0:
            raise GenerateError(f"protoc exited {code} for {rel_dir / proto}")
        stem = Path(proto).stem
        out += [out_root / rel_dir / f"{stem}_pb2.py", out_root / rel_dir / f"{stem}_pb2_grpc.py"]
    return out


def main(package_dir: Path, protos, argv) -> int:
    """Command-line body: regenerate in place, or under argv[0] when given."""
    out = Path(argv[0]) if argv else SOURCE_ROOT
    for path in generate(package_dir, protos, out):
        print(path)
    return 0
