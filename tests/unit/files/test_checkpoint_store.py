"""Reading the node's boot id (dra_driver.files.boot_id.read_boot_id)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_driver.files.boot_id import BootIdError, read_boot_id


def test_the_boot_id_is_read_stripped_and_an_empty_or_missing_one_is_refused_naming_the_file(tmp_path: Path) -> None:
    f = tmp_path / "boot_id"
    f.write_text("0f3c-boot\n")
    assert "0f3c-boot" == read_boot_id(f)
    f.write_text(" \n")
    with pytest.raises(BootIdError, match=f"{f} is empty"):
        read_boot_id(f)
    with pytest.raises(BootIdError, match=f"cannot read the node's boot id from {tmp_path / 'absent'}"):
        read_boot_id(tmp_path / "absent")
    f.write_bytes(b"x" * 10_000_000)  # a wrong BOOT_ID_FILE: read no further than the bound
    with pytest.raises(BootIdError, match="over 256 bytes: not a boot id"):
        read_boot_id(f)
    f.write_bytes(b"\xff\xfe")
    with pytest.raises(BootIdError, match="cannot read"):
        read_boot_id(f)
