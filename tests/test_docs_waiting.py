"""docs/waiting.md's Python examples run as written, in order (in a temporary folder)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[1] / "docs" / "waiting.md"


def test_the_waiting_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    text = PAGE.read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 4
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "waiting_doc"}
    for block in blocks:
        exec(compile(block, str(PAGE), "exec"), namespace)
    printed = capsys.readouterr().out
    shown = re.search(r"prints\n\n```text\n(.*?)```", text, re.S)
    assert shown is not None
    assert printed.splitlines()[:4] == shown.group(1).splitlines()
    assert printed.splitlines()[4:] == ["async progress deploy", "async completed deploy",
                                        "async progress announce",
                                        "async completed announce"]
