#!/usr/bin/env bash
# The layer check: every #include of every source file must point down the layer graph
#
#   {tools, python} → {runtime, libtorch} → ps → ps/session → {transport, kernels → device} → base
#
# (an arrow is "may include"; the graph is transitive, so ps may include device and base).
# ps/session/ (what the three roles share: protocol, auth, permissions, endpoint, requests) is a
# layer of its own under the roles: it may not include the rest of ps/. include/psrt/ holds the
# public headers: any layer may include them, and they include only each other. tests/ may
# include anything. transport/secure/ is part of transport. Includes of other projects (<fmt/…>,
# <torch/…>, <cuda…>) are not checked.
#
# Prints file:line and the arrow of every include against the graph, and exits 1 if there is one.
# Usage: scripts/check_layers.sh [REPO_ROOT]   (default: the repository this script is in)
set -euo pipefail
root="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
exec /usr/bin/python3 - "$root" <<'PY'
import os
import re
import subprocess
import sys

root = sys.argv[1]

# What each layer may include besides itself and the public headers (include/psrt/).
BELOW = {
    "base": set(),
    "device": {"base"},
    "kernels": {"device", "base"},
    "transport": {"base"},
    "ps/session": {"transport", "kernels", "device", "base"},
    "ps": {"ps/session", "transport", "kernels", "device", "base"},
    "runtime": {"ps", "ps/session", "transport", "kernels", "device", "base"},
    "libtorch": {"ps", "ps/session", "transport", "kernels", "device", "base"},
    "tools": {"runtime", "libtorch", "ps", "ps/session", "transport", "kernels", "device", "base"},
    "python": {"runtime", "ps", "ps/session", "transport", "kernels", "device",
               "base"},  # the module (python/)
    "include": set(),  # public headers: only each other
    "tests": None,     # anything
}
GRAPH = ("{tools, python} → {runtime, libtorch (not python)} → ps → ps/session → "
         "{transport, kernels → device} → base")

# Files held to less than their layer: what they may include besides the public headers.
NARROW = {
    # The wire format: its types are the protocol's own and the public ones (psrt::GradType);
    # codecs of device types live in ps/session/protocol_device.h.
    "ps/session/protocol.h": set(),
}

# Known leaks, each as "file -> included path" with a comment saying why it is still there.
# Empty: the tree has none.
ALLOWED = set()

SOURCE = re.compile(r"\.(h|hh|hpp|c|cc|cpp|cu|cuh|inc|ipp)$")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]')
# Extra include directories of the build (target_include_directories): tools/ for pstrain/….
SEARCH = ["tools"]


def files():
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-co", "--exclude-standard"],
                             check=True, capture_output=True, text=True).stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):
        out = []
        for d, dirs, names in os.walk(root):
            dirs[:] = [x for x in dirs if not x.startswith((".", "build"))]
            out += [os.path.relpath(os.path.join(d, n), root) for n in names]
    return sorted(f for f in out if SOURCE.search(f) and f.split("/")[0] in BELOW)


def layer_of(path):
    """The layer of a path from the repository root: its deepest folder that is a layer."""
    parts = path.split("/")
    for n in range(len(parts) - 1, 0, -1):
        if "/".join(parts[:n]) in BELOW:
            return "/".join(parts[:n])
    return None


def resolve(src, quote, inc):
    """The layer an include points into, or None for another project's header."""
    top = inc.split("/")[0]
    if top == "psrt":
        return "include"
    if top in BELOW and top != "include":
        return layer_of(inc)
    if quote == "<":
        return None
    # A path relative to the including file, or to one of the extra include directories.
    for base in [os.path.dirname(src)] + SEARCH:
        cand = os.path.normpath(os.path.join(base, inc))
        if os.path.isfile(os.path.join(root, cand)):
            return layer_of(cand)
    return "?"


bad = 0
sources = files()
for src in sources:
    here = layer_of(src)
    allowed = BELOW[here]
    if allowed is None:
        continue
    narrow = NARROW.get(src)
    with open(os.path.join(root, src), encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            quote, inc = m.groups()
            there = resolve(src, quote, inc)
            if there is None or there == "include":
                continue
            if narrow is not None:
                if there in narrow:
                    continue
            elif there == here or there in allowed:
                continue
            if f"{src} -> {inc}" in ALLOWED:
                continue
            if narrow is not None and there != "?":
                print(f"{src}:{n}: {src} → {there} (#include \"{inc}\"): this file may include "
                      f"only the standard library, other projects and include/psrt/"
                      + (f" and {', '.join(sorted(narrow))}" if narrow else ""))
            elif there == "?":
                print(f"{src}:{n}: #include \"{inc}\": not found next to the file or in "
                      f"{', '.join(SEARCH)}/; name it by its path from the repository root")
            else:
                print(f"{src}:{n}: {here} → {there} (#include \"{inc}\") is against the layers "
                      f"{GRAPH}")
            bad += 1

if bad:
    print(f"check_layers: {bad} include(s) against the layers (see CONTRIBUTING.md, Layer rules)")
    sys.exit(1)
print(f"check_layers: {len(sources)} files, every include follows {GRAPH}")
PY
