"""Write the CEL parser's LALR tables (``dra_driver/schedsim/cel/cel_parser.json``) from the grammar.

Run from anywhere: ``python scripts/gen_cel_parser.py [--out FILE]``; rerun it after changing the
grammar, its options in ``dra_driver/schedsim/cel/syntax.py``, or the Lark version. Until then the
parser is built at start-up as before (the file records what it was built from), and
``tests/unit/schedsim/test_explain_fast_paths.py`` fails, naming this script.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import lark

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dra_driver.schedsim.cel import parser_tables, syntax  # noqa: E402 - after the repository is on the path

DEFAULT_OUT = ROOT / "dra_driver" / "schedsim" / "cel" / syntax.PARSER_TABLES


def main() -> int:
    """Build the parser from the grammar and write its tables."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output file (default: {DEFAULT_OUT})")
    out = parser.parse_args().out
    grammar, options = syntax.grammar_and_options()
    out.write_text(parser_tables.dump(lark.Lark(grammar, **options), grammar, options), encoding="utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
