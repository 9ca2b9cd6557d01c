"""The wheel's build (pyproject.toml): configures and builds the CMake project for the running
interpreter, then lays the extension psrt._core, psrt/_version.py and the programs psrun and
pstrain (in psrt/bin, run by the console entry points) into the wheel.

Environment: PSRT_CMAKE_BUILD_DIR builds in that directory (default: setuptools' build_temp),
so `make package` reuses its build; PSRT_CMAKE_ARGS adds CMake arguments (split on spaces);
PSRT_BUILD_JOBS sets the parallelism (default: the number of CPUs)."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


def cmake_build_dir(build_temp):
    return Path(os.environ.get("PSRT_CMAKE_BUILD_DIR") or Path(build_temp) / "cmake").resolve()


class CMakeBuild(build_ext):
    """Builds psrt._core (and the programs the wheel carries) with the project's CMake."""

    def build_extension(self, ext):
        build = cmake_build_dir(self.build_temp)
        args = [
            "cmake", "-S", str(ROOT), "-B", str(build),
            "-DCMAKE_BUILD_TYPE=Release",
            f"-DPython3_EXECUTABLE={sys.executable}",
            "-DPSRT_WITH_PYTHON=ON", "-DPSRT_WITH_TORCH=ON",
            # CUDA 13 is not a Debian package: a wheel depending on libcudart would not load on a
            # machine without that toolkit. Build from source for the GPU paths.
            "-DPSRT_WITH_CUDA=OFF", "-DPSRT_BUILD_TESTS=OFF",
            *os.environ.get("PSRT_CMAKE_ARGS", "").split(),
        ]
        subprocess.run(args, check=True)
        jobs = os.environ.get("PSRT_BUILD_JOBS") or str(os.cpu_count() or 1)
        subprocess.run(["cmake", "--build", str(build), "-j", jobs, "--target", "psrt_python",
                        "psrun", "pstrain"], check=True)
        package = build / "python" / "psrt"
        built = sorted(package.glob("_core*.so"))
        if not built:
            raise RuntimeError(f"psrt: the build made no extension in {package}")
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built[0], target)
        shutil.copy2(package / "_version.py", target.parent / "_version.py")
        bin_dir = target.parent / "bin"
        bin_dir.mkdir(exist_ok=True)
        for program in ("psrun", "pstrain"):
            shutil.copy2(build / "bin" / program, bin_dir / program)


def version():
    """The version CMake computes (cmake/version.cmake), without building anything yet."""
    out = subprocess.run(
        ["cmake", "-DPSRT_PRINT_VERSION=ON", "-P", str(ROOT / "cmake" / "version.cmake")],
        check=True, capture_output=True, text=True, cwd=ROOT).stdout
    match = re.search(r"psrt version (\S+)", out)
    if not match:
        raise RuntimeError(f"psrt: cmake/version.cmake printed no version: {out!r}")
    return match.group(1)


# setuptools' own build and metadata directories, inside the ignored build tree rather than
# beside the sources.
SETUPTOOLS_DIR = ROOT / "build" / "setuptools"
SETUPTOOLS_DIR.mkdir(parents=True, exist_ok=True)

setup(
    version=version(),
    options={"build": {"build_base": str(SETUPTOOLS_DIR)},
             "egg_info": {"egg_base": str(SETUPTOOLS_DIR)}},
    ext_modules=[Extension("psrt._core", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    package_data={"psrt": ["bin/*"]},
    zip_safe=False,
)
