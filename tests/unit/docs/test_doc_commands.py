"""Every ``dra-gpu`` command the docs show parses, and the ones that need no cluster run and print
what the doc shows.

Found by testkit/docs_examples.py in the ```console (``$ `` lines, their output under them), ```sh
and ```bash blocks of README.md, docs/**/*.md and demo/**/*.md, spelled ``dra-gpu``,
``.venv/bin/dra-gpu`` or ``kubectl dra-gpu``. Whether a command can run here is decided by its
subcommand (``testkit.docs_examples.needs``): ``inventory`` (not ``--nvml``) and ``explain -f ...
--slices ...`` run (exit 0; explain's 1, "not allocatable", is an answer too), each block's
commands in order in one directory where demo/ and the rest of the checkout resolve (so
``> slices.yaml`` then ``--slices slices.yaml`` work); the first two words of each output line the
doc shows must begin an output line, in the doc's order. The commands that need a cluster run in
e2e/test_doc_examples.py where it can (``explain pod/...``); the rest (GPU, node, plugin metrics)
are listed with the reason. Every command, run or not, must parse: its subcommand's ``--help``
succeeds and names every flag the doc passes, and the CLI's own parser accepts the words.
"""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
import sys
from collections import defaultdict
from functools import cache
from pathlib import Path

from dra_driver.cli.main import build_parser
from testkit.docs_examples import (
    REPO,
    ShownCommand,
    cli_env,
    exited_ok,
    needs,
    output_shape_mismatch,
    run_shell,
    shown_commands,
    workdir_with_repo,
)


@cache
def subcommand_help(path: tuple[str, ...]) -> tuple[int, str]:
    """``dra-gpu <path> --help``: exit status and text."""
    cmd = [sys.executable, "-m", "dra_driver.cli.main", *path, "--help"]
    out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    return out.returncode, out.stdout + out.stderr


def help_of(cmd: ShownCommand) -> tuple[tuple[str, ...], int, str]:
    """The deepest subcommand the words name (``health repair``) and its --help."""
    path: tuple[str, ...] = cmd.args[:1]
    rc, text = subcommand_help(path)
    for word in cmd.args[1:]:
        choices = re.findall(r"\{([\w,.-]+)\}", text.split("\n\n", 1)[0])
        if word.startswith("-") or not any(word in c.split(",") for c in choices):
            break
        path += (word,)
        rc, text = subcommand_help(path)
    return path, rc, text


def parse_error(cmd: ShownCommand) -> str | None:
    """What the CLI's parser says about the words (None: accepted)."""
    if {"-h", "--help"} & set(cmd.flags):
        return None
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            build_parser().parse_args(list(cmd.args))
    except SystemExit:
        return err.getvalue().strip() or "rejected"
    return None


def test_every_shown_command_parses() -> None:
    commands = shown_commands()
    problems = []
    for cmd in commands:
        path, rc, text = help_of(cmd)
        if rc != 0 or not path:
            problems.append(f"{cmd.where}: dra-gpu {' '.join(path)} --help exited {rc}: {text[-300:]}")
            continue
        missing = [f for f in cmd.flags if not re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", text)]
        problems += [f"{cmd.where}: dra-gpu {' '.join(path)} has no flag {f}" for f in missing]
        if why := parse_error(cmd):
            problems.append(f"{cmd.where}: dra-gpu {' '.join(cmd.args)}: {why}")
    assert commands, "no dra-gpu command found in the docs: the discovery is broken"
    assert not problems, "\n".join(problems)


def test_commands_that_need_no_cluster_run_and_print_what_the_doc_shows(tmp_path: Path) -> None:
    commands = shown_commands()
    blocks: dict[str, list[ShownCommand]] = defaultdict(list)
    skipped = []
    for cmd in commands:
        if why := needs(cmd):
            skipped.append(f"{cmd.where}: dra-gpu {' '.join(cmd.args)}: {why}")
        else:
            blocks[cmd.block].append(cmd)
    problems, ran = [], 0
    for n, cmds in enumerate(blocks.values()):
        cwd = workdir_with_repo(tmp_path / f"block-{n}")
        env = cli_env(tmp_path / f"env-{n}")
        for cmd in cmds:
            out = run_shell(cmd.shell, cwd, env)
            ran += 1
            if not exited_ok(cmd, out.returncode):
                problems.append(f"{cmd.where}: `{cmd.shell}` exited {out.returncode}:\n{out.stderr[-1500:]}")
            elif mismatch := output_shape_mismatch(cmd.output, out.stdout):
                problems.append(f"{cmd.where}: `{cmd.shell}` printed what the doc does not show: {mismatch}\n{out.stdout[:1500]}")
    print(f"\n{len(commands)} dra-gpu commands in the docs: {ran} run here, {len(skipped)} parse-only here:")
    print("\n".join(skipped))
    assert not problems, "\n\n".join(problems)


def test_output_shape_is_checked_in_order() -> None:
    actual = "pod dra-demo/x:\n  claim dra-demo/x-gpu, request gpu: allocated\n    node-a: node-a/gpu-0  match\n"
    assert output_shape_mismatch(("pod dra-demo/x:", "node-a: node-a/gpu-0 whatever"), actual) is None
    assert output_shape_mismatch(("node-a: node-a/gpu-0", "pod dra-demo/x:"), actual) is not None
    assert output_shape_mismatch(("pod dra-demo/y:",), actual) is not None
