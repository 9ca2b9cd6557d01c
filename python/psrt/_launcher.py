"""The console entry points of the wheel (pyproject.toml): `psrun` and the other programs run
the copies the wheel carries in psrt/bin, with the arguments they were given."""

import os
import sys
from pathlib import Path


def _run(program):
    path = Path(__file__).resolve().parent / "bin" / program
    if not path.is_file():
        sys.exit(
            f"{program}: not in this psrt installation ({path} is missing): this psrt was not "
            "installed from a wheel; run the psrun of your build or package instead"
        )
    os.execv(str(path), [program, *sys.argv[1:]])


def psrun():
    _run("psrun")


def pstrain():
    _run("pstrain")
