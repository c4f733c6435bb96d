"""Signed apps: a node takes the FAB flwr builds from a folder its trusted operator signed,
and refuses it unsigned, signed by another key, or changed by one byte after signing."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
import tomli_w
from flwr.cli.build import build_fab_from_disk

from fl_system.access.app_signature import SIGNATURE_FILE, AppRefused, check
from fl_system.access.tokens import load_credential
from fl_system.deploy.certs_cli import main as fl_certs
from fl_system.flower import fab_manifest
from fl_system.runtime.app_signing import SigningError, sign_app
from fl_system.runtime.supernode.site_checks import trusted_keys


def _app(folder: Path, include: list[str] | None = None) -> Path:
    (folder / "my_app").mkdir(parents=True)
    (folder / "my_app" / "__init__.py").write_text("")
    (folder / "my_app" / "apps.py").write_text("from flwr.clientapp import ClientApp\napp = 1\n")
    app = {"publisher": "me", "components": {"serverapp": "my_app.apps:app",
                                             "clientapp": "my_app.apps:app"}}  # fmt: skip
    if include is not None:
        app["fab-include"] = include
    project = {
        "build-system": {"requires": ["hatchling"], "build-backend": "hatchling.build"},
        "project": {"name": "my-app", "version": "1.0.0", "dependencies": []},
        "tool": {"flwr": {"app": app}},
    }
    (folder / "pyproject.toml").write_text(tomli_w.dumps(project))
    return folder


@pytest.fixture
def keys(tmp_path: Path) -> Path:
    for name in ("ana", "eve"):
        assert fl_certs([str(tmp_path / "keys"), "--operator-key", name]) == 0
    return tmp_path / "keys"


def test_a_signed_app_is_taken_and_every_change_refused(tmp_path: Path, keys: Path) -> None:
    app = _app(tmp_path / "app")
    trusted = trusted_keys([keys / "ana.pub"])
    with pytest.raises(AppRefused, match="the app is not signed"):
        check(build_fab_from_disk(app), trusted)
    sign_app(app, load_credential(keys / "ana.key"))
    assert check(build_fab_from_disk(app), trusted).name == "ana.pub"  # what flwr run sends
    assert SIGNATURE_FILE in zipfile.ZipFile(io.BytesIO(build_fab_from_disk(app))).namelist()
    code = app / "my_app" / "apps.py"
    code.write_bytes(code.read_bytes().replace(b"app = 1", b"app = 2"))  # one byte, after
    with pytest.raises(AppRefused, match=r"the app was changed after ana\.pub signed it"):
        check(build_fab_from_disk(app), trusted)
    code.write_bytes(code.read_bytes().replace(b"app = 2", b"app = 1"))
    assert check(build_fab_from_disk(app), trusted).name == "ana.pub"
    (app / "my_app" / "extra.py").write_text("")  # a file added after signing
    with pytest.raises(AppRefused, match=r"the app was changed after ana\.pub signed it"):
        check(build_fab_from_disk(app), trusted)
    sign_app(app, load_credential(keys / "ana.key"))
    assert check(build_fab_from_disk(app), trusted).name == "ana.pub"
    sign_app(app, load_credential(keys / "eve.key"))
    with pytest.raises(AppRefused, match=r"signed by key SHA256:\S+, which this node does not"):
        check(build_fab_from_disk(app), trusted)


def test_a_fab_changed_on_its_way_is_refused(tmp_path: Path, keys: Path) -> None:
    """The server (or anyone between) swaps a file's bytes inside the FAB, or adds one."""
    app = _app(tmp_path / "app")
    sign_app(app, load_credential(keys / "ana.key"))
    fab = build_fab_from_disk(app)
    trusted = trusted_keys([keys / "ana.pub"])
    for name, data in (("my_app/apps.py", b"import os; os.system('x')\n"), ("evil.py", b"")):
        out = io.BytesIO()
        with zipfile.ZipFile(io.BytesIO(fab)) as src, zipfile.ZipFile(out, "w") as dst:
            for item in src.namelist():
                dst.writestr(item, data if item == name else src.read(item))
            if name not in src.namelist():
                dst.writestr(name, data)
        with pytest.raises(AppRefused, match=f"changed after it was built: {name}"):
            check(out.getvalue(), trusted)
    with pytest.raises(AppRefused, match="not a readable FAB"):
        check(b"not a zip", trusted)


def test_an_app_whose_fab_would_leave_the_signature_out_is_not_signed(
    tmp_path: Path, keys: Path
) -> None:
    app = _app(tmp_path / "app", include=["my_app/**/*.py"])
    with pytest.raises(SigningError, match=f"would leave {SIGNATURE_FILE} out: add it to"):
        sign_app(app, load_credential(keys / "ana.key"))
    with pytest.raises(SigningError, match="is not a Flower app"):
        sign_app(tmp_path, load_credential(keys / "ana.key"))
    with pytest.raises(ValueError, match=r"--trust: \S+: not an OpenSSH public key"):
        trusted_keys([keys / "ana.key"])


def test_the_flwr_this_signs_with_builds_fabs_as_assumed() -> None:
    assert fab_manifest.problems() == []
