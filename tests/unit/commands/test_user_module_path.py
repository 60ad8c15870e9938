"""A YAML config naming a user module that Python cannot find: the error says where modules are
looked up and suggests ``PYTHONPATH=.``; a module that is found but fails to import says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpfl.errors import ConfigError
from dpfl.rounds.build import resolve_reference


def test_a_module_not_on_the_path_suggests_pythonpath() -> None:
    with pytest.raises(ConfigError) as err:
        resolve_reference("dpfl_no_such_user_module.nets:make", "model.name")
    message = str(err.value)
    assert message.startswith("`model.name`: cannot import module 'dpfl_no_such_user_module.nets'")
    assert "sys.path" in message and "PYTHONPATH" in message and "PYTHONPATH=. dpfl run" in message
    assert "\n" not in message


def test_a_module_found_whose_own_import_fails_is_not_blamed_on_the_path(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "dpfl_user_nets_broken.py").write_text("import dpfl_missing_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match=r"module 'dpfl_user_nets_broken' of 'dpfl_user_nets_broken:make' was found "
                                          r"but importing it failed: No module named 'dpfl_missing_dependency_xyz'"):
        resolve_reference("dpfl_user_nets_broken:make", "model.name")
