"""Check a built site's object inventory: every name of every public module's ``__all__`` has
an entry (``python docs/_ext/check_inventory.py docs/_build/html/objects.inv``)."""

from __future__ import annotations

import sys
from pathlib import Path

from sphinx.util.inventory import InventoryFile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from apiref import public_modules, public_names


def missing_entries(inventory: Path) -> list[str]:
    with open(inventory, "rb") as f:
        inv = InventoryFile.load(f, "", lambda base, uri: uri)
    documented = {
        name for kind, entries in inv.items() if kind.startswith("py:") for name in entries
    }
    want = [f"{m}.{n}" for m in public_modules() for n in public_names(m)]
    return [name for name in want if name not in documented]


if __name__ == "__main__":
    lost = missing_entries(Path(sys.argv[1]))
    if lost:
        sys.exit(f"{len(lost)} public names have no API entry: {', '.join(lost[:20])}")
    print("API reference: every name of every public __all__ has an entry")
