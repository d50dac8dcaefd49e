"""Find data files shipped inside installed packages *without importing them*.

``qm9pack``'s ``__init__`` needs ``pkg_resources`` and ``moses``'s imports torch and pins old
dependencies, so neither is imported: `importlib.util.find_spec` on the top-level name only reads
the import system's metadata, and the file is then located relative to the package folder.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from .._errors import InputError

__all__ = ["package_data_path"]

#: How to install each data package (their dependency pins must not be installed).
INSTALL_HINT = {
    "qm9pack": "pip install --no-deps qm9pack==1.0.3",
    "moses": "pip install --no-deps molsets==0.3.1",
}


def package_data_path(package: str, *parts: str) -> Path:
    """Path of ``parts`` inside the installed top-level ``package`` (which is not imported).

    Raises ``FileNotFoundError`` naming the install command when the package or file is missing.
    """
    if "." in package:
        raise InputError(f"give a top-level package name, got {package!r}")
    spec = importlib.util.find_spec(package)
    hint = INSTALL_HINT.get(package, f"pip install {package}")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"package {package!r} is not installed; install it with: {hint}")
    for root in spec.submodule_search_locations:
        path = Path(root).joinpath(*parts)
        if path.exists():
            return path
    raise FileNotFoundError(
        f"{'/'.join(parts)!r} not found in package {package!r} at "
        f"{list(spec.submodule_search_locations)}; reinstall it with: {hint}"
    )
