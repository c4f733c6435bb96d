"""Whether a run's FAB carries the app code this launcher imported, so that its ClientApp
tasks can use what it imported once instead of importing the FAB's copy every time.

A ClientApp task runs the app from the run's FAB, as a fresh `flwr-clientapp` would; importing
it was 0.14 s of a ~0.4 s task on a small model, for code that on a node installed like the
server is, file for file, the code the launcher has. So the launcher imports the apps once
(`warm_apps`) and fingerprints their source (`code_digest`); a task whose FAB has the same
fingerprint keeps what the launcher imported, any other drops the app packages
(`drop_app_modules`) and imports the FAB's copy. The fingerprint covers every `.py` file of
the app packages, so a FAB with one byte of other code never runs ours.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import os
import sys
from pathlib import Path

APP_PACKAGES = ("fl_system", "client_app", "server_app")
DIGEST_FILE = ".fl_code_digest"  # in an installed FAB: its fingerprint, computed once


def code_digest(root: Path) -> str:
    """The fingerprint of the app packages' source under `root` (paths and contents)."""
    digest = hashlib.sha256()
    for package in APP_PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            digest.update(path.relative_to(root).as_posix().encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def fab_digest(fab_dir: Path) -> str:
    """The fingerprint of an installed FAB, read from DIGEST_FILE or computed and kept there."""
    kept = fab_dir / DIGEST_FILE
    with contextlib.suppress(OSError):
        return kept.read_text()
    digest = code_digest(fab_dir)
    with contextlib.suppress(OSError):  # a FAB directory we may not write: computed each time
        tmp = kept.with_name(f"{DIGEST_FILE}.{os.getpid()}.tmp")
        tmp.write_text(digest)
        os.replace(tmp, kept)
    return digest


def warm_apps(root: Path | None, components: tuple[str, ...]) -> str | None:
    """Import the apps' modules (component references such as `client_app.app:app`) from the
    project at `root`; their fingerprint, or None without a project (nothing to compare)."""
    if root is None:
        return None
    for reference in components:
        importlib.import_module(reference.partition(":")[0])
    return code_digest(root)


def drop_app_modules() -> None:
    """Forget the app packages' modules: the next import takes the FAB's copy."""
    for name in [m for m in sys.modules if m.split(".")[0] in APP_PACKAGES]:
        del sys.modules[name]
