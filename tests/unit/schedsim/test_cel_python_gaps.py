"""Where upstream cel-python differs from cel-go (the scheduler's CEL), and our side of each difference.

dra-gpu uses cel-python's grammar (``celpy/cel.lark``) and nothing else of it. Each test first
shows the upstream behaviour, then what dra-gpu does instead, which is what cel-go does (the
differential tests in tests/differential/ check the same against the Go code itself). If an
upstream release fixes one of these, its first assertion fails and the workaround can go.
"""

from __future__ import annotations

from typing import Any

import celpy
import pytest
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError

from dra_driver.schedsim.cel import CelCompileError, CelRuntimeError, compile_selector

DRIVER = "gpu.dra-gpu.dev"
DEVICE = {"name": "g", "attributes": {"cores": {"int": 132}}}


def upstream(expr: str) -> Any:
    env = celpy.Environment()
    return env.program(env.compile(expr)).evaluate({})


def ours(expr: str) -> bool:
    return compile_selector(expr).matches(DEVICE, driver=DRIVER)


def test_a_float_needs_a_digit_after_the_point() -> None:
    # cel-python lexes "1." as a float, so a call on an int literal does not parse.
    with pytest.raises(CELParseError):
        celpy.Environment().compile("1.all(x, y, true)")
    # We drop that float form from the grammar we build: "1" is an int, and ranging over it is
    # cel-go's type error, at cel-go's position.
    with pytest.raises(CelCompileError) as err:
        ours("1.all(x, y, true)")
    assert "ERROR: <input>:1:1: expression of type 'int' cannot be range of a comprehension" in err.value.message
    assert ours("1.5 > 1.0 && .5 < 1.0")


def test_optional_selection_syntax_is_missing_from_the_grammar() -> None:
    for expr in ("{'a': 1}.?a", "{'a': 1}[?'a']"):
        with pytest.raises(CELParseError):
            celpy.Environment().compile(expr)
    # Blanked to plain syntax before parsing (offsets kept), rebuilt as cel-go's _?._ / _[?_].
    assert ours("{'a': 1}.?a.orValue(2) == 1 && {'a': 1}[?'b'].orValue(2) == 2")


def test_true_and_false_lose_their_source_position() -> None:
    tree = celpy.Environment().compile("true")
    assert [tok.line for tok in tree.scan_values(lambda v: True)] == [None]
    # Our lexer callback retypes the token in place, so errors point where cel-go points.
    with pytest.raises(CelCompileError) as err:
        ours("true && 1")
    assert err.value.message.startswith("compilation failed: ERROR: <input>:1:9: expected type 'bool' but found 'int'")


def test_numbers_of_different_types_are_not_compared_upstream() -> None:
    with pytest.raises(CELEvalError):
        upstream("1 == 1.0")
    with pytest.raises(CELEvalError):
        upstream("1 < 2.5")
    # cel-go orders them (the environment's cross-type comparison overloads) and, for dyn
    # operands, compares them for equality; statically typed 1 == 1.0 does not type-check there.
    assert ours("dyn(1) == 1.0 && 1 < 2.5 && 2u > 1")
    with pytest.raises(CelCompileError, match=r"found no matching overload for '_==_' applied to '\(int, double\)'"):
        ours("1 == 1.0")


def test_there_is_no_type_checking_upstream() -> None:
    assert upstream("true && 1") == 1
    assert upstream("[1, 2.5].size()") == 2
    with pytest.raises(CelCompileError, match=r"expected type 'int' but found 'double'"):
        ours("[1, 2.5].size() == 2")  # the environment's homogeneous-literal validator


def test_a_missing_key_has_a_different_message_upstream() -> None:
    with pytest.raises(CELEvalError) as up:
        upstream('{"a": 1}.b == 1')
    assert "no such member in mapping" in str(up.value)
    with pytest.raises(CelRuntimeError, match=r"^no such key: b$"):
        ours('{"a": 1}.b == 1')


def test_unicode_script_classes_are_refused_rather_than_guessed() -> None:
    # Not an upstream difference but a limit of Python's re (no script data): RE2's \p{Greek}
    # is valid in cel-go; we say so instead of matching wrongly.
    with pytest.raises(CelRuntimeError, match=r"Unicode script class Greek is not supported by dra-gpu"):
        ours('"\\u03b1".matches("\\\\p{Greek}")')
    assert ours('"a".matches("\\\\p{Ll}") && !"a".matches("\\\\p{Lu}")')
