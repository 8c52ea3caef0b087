"""Where the `cachealloc` command-line tool (the compiled replay and lab
program) is: the one place that decides, for the lab and the `cachealloc`
command alike."""
from __future__ import annotations

import os
import pathlib

from ._native import dev_build_dir, package_dir


class ToolNotFound(FileNotFoundError):
    """No `cachealloc` tool: the message says where it was looked for."""


def tool_path() -> pathlib.Path:
    """Path of the compiled tool: $CACHEALLOC_CLI if set; else the one
    installed with this package (cachealloc/bin/cachealloc, shipped in the
    wheel); else, when this package runs from a source checkout, that
    checkout's build ($CACHEALLOC_BUILD or build/, tools/cachealloc).
    Raises ToolNotFound."""
    env = os.environ.get("CACHEALLOC_CLI")
    if env:
        path = pathlib.Path(env)
        if not path.is_file():
            raise ToolNotFound(f"CACHEALLOC_CLI={env} does not name a file")
        return path
    installed = package_dir() / "bin" / "cachealloc"
    if installed.is_file():
        return installed
    build = dev_build_dir()
    if build is not None:
        built = build / "tools" / "cachealloc"
        if built.is_file():
            return built
        raise ToolNotFound(f"{built} is not built: run bash scripts/build.sh (or cmake --build "
                           f"{build} --target cachealloc), or set CACHEALLOC_CLI")
    raise ToolNotFound(f"the cachealloc tool is missing from the installed package ({installed}); "
                       "reinstall it (pip install cachealloc's source), or set CACHEALLOC_CLI")
