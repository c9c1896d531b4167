"""Generate the Python gRPC stubs for every .proto under proto/ (the only way stubs are made).

Run from anywhere: ``python scripts/gen_protos.py [--out DIR]``. Each upstream file is called
``api.proto``; compiling them under distinct import paths (``proto/dra/v1/api.proto`` ...)
keeps Python's descriptor pool from seeing duplicate files. Generated files are never edited
by hand; ``make check-protos`` (part of ``make test``) regenerates into a temp dir and fails
if the committed stubs differ.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    """Compile every proto; return protoc's exit code."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=ROOT, help="output root (default: the repository)")
    out = parser.parse_args().out.resolve()
    protos = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "proto").rglob("*.proto"))
    kinds = ("python_out", "grpc_python_out", "mypy_out", "mypy_grpc_out")
    args = ["protoc", f"-I{ROOT}", *(f"--{k}={out}" for k in kinds), *protos]
    rc = int(protoc.main(args))
    if rc == 0:
        for proto in protos:
            d = (out / proto).parent
            for parent in [d, *d.relative_to(out).parents]:
                init = out / parent / "__init__.py"
                if parent != Path() and not init.exists():
                    init.write_text('"""Generated gRPC stubs (scripts/gen_protos.py); do not edit."""\n')
    return rc


if __name__ == "__main__":
    sys.exit(main())
