"""What docker/README.md tells users to type works as written (no Docker engine needed: the
container side of a pipe is stood in for by the same tar stream made locally)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

DOCKER = Path(__file__).resolve().parents[2] / "docker"


def copy_out_recipe() -> list[str]:
    """The shell lines of the fenced block in docker/README.md that copies runs out."""
    text = (DOCKER / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    (block,) = [b for b in blocks if "--entrypoint tar" in b]
    return [line for line in block.splitlines() if line.strip()]


def test_the_copy_out_recipe_makes_its_folder_and_gives_the_files_to_the_caller(
    tmp_path: Path,
) -> None:
    volume = tmp_path / "volume"  # what the runs volume holds
    (volume / "run-1").mkdir(parents=True)
    metrics = volume / "run-1" / "metrics.csv"
    metrics.write_text("round,test_accuracy\n1,0.5\n")
    if os.geteuid() == 0:  # the containers' user owns what they write
        os.chown(metrics, 1000, 1000)
    work = tmp_path / "here"
    work.mkdir()
    lines = [
        re.sub(r"^\$C run .*?-c \.", f"tar -C {volume} -c .", line) for line in copy_out_recipe()
    ]
    assert any(line.startswith(f"tar -C {volume}") for line in lines), lines
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", "\n".join(lines)],
        cwd=work,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    copied = next(work.rglob("metrics.csv"))
    assert copied.read_text() == metrics.read_text()
    assert copied.stat().st_uid == os.geteuid()


def test_the_compose_project_name_is_fixed_where_both_compose_versions_read_it() -> None:
    """docker-compose v1 rejects a top-level `name:` in compose.yaml; both versions read
    COMPOSE_PROJECT_NAME from the .env file beside it, so volumes are fl-system_* from any
    folder, which is what the docs tell users to remove or inspect."""
    settings = dict(
        line.split("=", 1)
        for line in (DOCKER / ".env").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert settings == {"COMPOSE_PROJECT_NAME": "fl-system"}
    assert not re.search(r"^name:", (DOCKER / "compose.yaml").read_text(), flags=re.M)
    docs = (DOCKER / "README.md").read_text() + (DOCKER.parent / "README.md").read_text()
    named = re.findall(r"docker volume rm\s+(\S+)", docs)
    assert named and all(v.startswith("fl-system_") for v in named), named
