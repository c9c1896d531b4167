"""What testkit/docs_examples.py finds in a sample tree: YAML examples and fragments, dra-gpu commands.

The docs tests (test_doc_links.py, test_doc_commands.py, e2e/test_doc_examples.py) rely on this
discovery; here it is checked on files written for the purpose, so a change to the real docs cannot
hide a discovery bug (e.g. a marked fragment applied, or a command line missed).
"""

from __future__ import annotations

from pathlib import Path

from testkit.docs_examples import needs, shown_commands, yaml_examples

PAGE = """# Guide

<!-- example: fragment -->
```yaml
config:
- opaque: {parameters: {apiVersion: resource.dra-gpu.dev/v1alpha1, kind: GpuConfig}}
```

```yaml
apiVersion: v1
kind: Namespace
metadata: {name: team-a}
```

```yaml
mig: {strategy: none}
```

- in a list:

  ```console
  $ dra-gpu inventory --fake-gpus h100x8 \\
      --node-name node-a > slices.yaml
  $ dra-gpu explain -f demo/x.yaml --slices slices.yaml
  pod dra-demo/x:
  ...
    claim dra-demo/x-gpu, request gpu: allocated
  $ kubectl get pods
  ```

```sh
.venv/bin/dra-gpu inventory --nvml --node-name "$(hostname)"   # this machine
kubectl exec -n dra-gpu ds/dra-gpu-kubelet-plugin -- dra-gpu health repair gpu-0
make demo
```
"""


def test_yaml_examples_and_fragments(tmp_path: Path) -> None:
    (tmp_path / "docs" / "guides").mkdir(parents=True)
    (tmp_path / "docs" / "guides" / "g.md").write_text(PAGE)
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "pod.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n")
    found = {e.where: e for e in yaml_examples(tmp_path)}
    assert sorted(found) == ["demo/pod.yaml", "docs/guides/g.md:4", "docs/guides/g.md:9"]
    assert found["docs/guides/g.md:4"].fragment and not found["docs/guides/g.md:9"].fragment
    assert found["docs/guides/g.md:9"].objects() == [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}]


def test_shown_commands_and_what_they_need(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text(PAGE)
    cmds = shown_commands(tmp_path)
    assert [c.args[:2] for c in cmds] == [
        ("inventory", "--fake-gpus"),
        ("explain", "-f"),
        ("inventory", "--nvml"),
        ("health", "repair"),
    ]
    inv, explain, nvml, repair = cmds
    assert inv.args[-2:] == ("--node-name", "node-a") and inv.shell.endswith("> slices.yaml")
    assert explain.output == ("pod dra-demo/x:", "claim dra-demo/x-gpu, request gpu: allocated")
    assert nvml.shell.startswith("dra-gpu inventory --nvml") and nvml.flags == ["--nvml", "--node-name"]
    assert repair.in_pod
    assert [needs(c) is None for c in cmds] == [True, True, False, False]
