"""The commit a benchmark measured, recorded beside its numbers."""

import subprocess
from pathlib import Path


def short_head(root: Path) -> str:
    """`git rev-parse --short HEAD` of the checkout at `root` ("?" outside git)."""
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=root,
        capture_output=True,
        text=True,
    )
    return done.stdout.strip() or "?"
