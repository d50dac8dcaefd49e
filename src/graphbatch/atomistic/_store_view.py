"""What the atomistic presets' store readers share: the error of a store that cannot feed a
preset (`StoreFieldError`), the checks of a store's fields and cutoff, and the batch structure
every transform passes through (`PADDING_KEYS`). The readers: `graphbatch.atomistic._mace_view`
(MACE) and `graphbatch.atomistic._fairchem_view` (fairchem); each gives the store batch path
a `graphbatch.torch.StoreView` whose transform turns one padded batch of the store's fields
into the model's batch dict.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._errors import InputError

if TYPE_CHECKING:
    from ..datasets import GraphStore

__all__ = ["NEEDED", "PADDING_KEYS", "StoreFieldError", "check_cutoff", "check_fields"]

#: The padded batch's structure, passed through unchanged by every transform here.
PADDING_KEYS = (
    "batch",
    "ptr",
    "node_mask",
    "edge_mask",
    "graph_mask",
    "graph_index",
    "edge_ptr",
    "num_graphs",
)
#: Store fields the atomistic presets cannot do without.
NEEDED = ("positions", "atomic_numbers", "unit_shifts", "cell", "pbc")


class StoreFieldError(InputError):
    """A store cannot feed a preset: a field it needs is missing, or an element is not in the
    model's z table."""


def store_name(store: GraphStore) -> str:
    """How errors name ``store``: its path."""
    return str(getattr(store, "path", store))


def check_fields(store: GraphStore, preset: str, build_hint: str) -> None:
    """`StoreFieldError` naming the `NEEDED` fields ``store`` lacks (``preset``: the preset
    that needs them; ``build_hint``: how to build a store that has them)."""
    fields = store.fields
    missing = [f for f in NEEDED if f not in fields]
    if missing:
        raise StoreFieldError(
            f"{store_name(store)}: the store has no field(s) {missing} that {preset} needs (it "
            f"has {sorted(fields)}); build it with {build_hint}"
        )


def check_cutoff(store: GraphStore, r_max: float, *, say_why: bool = False) -> None:
    """`StoreFieldError` where the model's cutoff ``r_max`` (Å) exceeds the store's (its
    edges stop there; ``say_why``: the message says so)."""
    cutoff = store.meta.get("cutoff_angstrom")
    if cutoff is not None and r_max > float(cutoff) * (1 + 1e-12):
        why = f": edges between {cutoff} and {r_max} are not in the store" if say_why else ""
        raise StoreFieldError(
            f"{store_name(store)}: r_max {r_max} is larger than the store's cutoff "
            f"{cutoff}{why}; build it again with --cutoff >= r_max"
        )
