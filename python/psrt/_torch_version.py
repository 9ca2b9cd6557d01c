"""The version of the torch this interpreter finds, without importing it (importing torch takes
a second): its distribution's metadata, else torch.__version__. Run as a script by the build
(python/CMakeLists.txt) to record the torch psrt is built against; `import psrt` calls it to
compare."""

import importlib.metadata
import importlib.util


def found_torch_version():
    """The version string of the torch `import torch` would load, or None when there is none."""
    if importlib.util.find_spec("torch") is None:
        return None
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        import torch  # a torch without metadata (e.g. a source checkout on PYTHONPATH)

        return str(torch.__version__)


if __name__ == "__main__":
    version = found_torch_version()
    if version is None:
        raise SystemExit("no torch: this interpreter cannot import torch")
    print(version)
