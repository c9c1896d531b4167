"""Generate the Python gRPC stubs for every .proto under proto/ (the only way stubs are made).

Run from the repository root: ``python scripts/gen_protos.py``. Each upstream file is called
``api.proto``; compiling them under distinct import paths (``proto/dra/v1/api.proto`` ...)
keeps Python's descriptor pool from seeing duplicate files. Generated files are never edited
by hand; ``make check-protos`` (part of ``make test``) fails if they are stale.
"""

from __future__ import annotations

import sys
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    """Compile every proto; return protoc's exit code."""
    protos = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "proto").rglob("*.proto"))
    args = ["protoc", f"-I{ROOT}", f"--python_out={ROOT}", f"--grpc_python_out={ROOT}", f"--mypy_out={ROOT}", *protos]
    rc = int(protoc.main(args))
    if rc == 0:
        for d in {(ROOT / p).parent for p in protos} | {ROOT / "proto"}:
            for parent in [d, *d.relative_to(ROOT).parents]:
                init = ROOT / parent / "__init__.py"
                if parent != Path(".") and not init.exists():
                    init.write_text('"""Generated gRPC stubs (scripts/gen_protos.py); do not edit."""\n')
    return rc


if __name__ == "__main__":
    sys.exit(main())
