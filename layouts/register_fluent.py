"""The fluent spelling of a register layout: the chain of primitives that rebuilds it
(``local(2, 1).spatial(8, 4)``), which is how a `RegisterLayout` prints.
"""

from __future__ import annotations


def fluent_spelling(ndim: int, mode_shape: tuple[int, ...], mode_dims: tuple[int, ...],
                    spatial_modes: tuple[int, ...], local_modes: tuple[int, ...]) -> str | None:
    """A chain of primitives that rebuilds the layout with these canonical fields (and
    derived ``mode_dims``), or None when there is none.

    Write the layout as a product of one-mode factors in an order that respects every
    dim's major -> minor order and both lists' orders (a topological sort; none exists
    when, e.g., a dim's minor mode is a more significant thread digit than its major
    one). Then group runs of same-kind factors over distinct dims: increasing dims make a
    row-major primitive, decreasing dims a column-major one.
    """
    next_in_dim = [0] * ndim  # position of the next unemitted mode of each dim
    by_dim = [[m for m, d in enumerate(mode_dims) if d == dim] for dim in range(ndim)]
    heads = {"spatial": 0, "local": 0}
    lists = {"spatial": spatial_modes, "local": local_modes}
    steps: list[tuple[str, int, int]] = []  # (kind, dim or -1, size)
    last = "spatial"
    while heads["spatial"] < len(lists["spatial"]) or heads["local"] < len(lists["local"]):
        ready = []
        for kind in (last, "local" if last == "spatial" else "spatial"):
            if heads[kind] == len(lists[kind]):
                continue
            e = lists[kind][heads[kind]]
            if e < 0 or by_dim[mode_dims[e]][next_in_dim[mode_dims[e]]] == e:
                ready.append((kind, e))
        if not ready:
            return None
        kind, e = ready[0]
        heads[kind] += 1
        last = kind
        if e < 0:
            steps.append(("replicated", -1, -e))
        else:
            next_in_dim[mode_dims[e]] += 1
            steps.append((kind, mode_dims[e], mode_shape[e]))

    calls: list[str] = []
    i = 0
    while i < len(steps):
        kind, dim, size = steps[i]
        if kind == "replicated":
            calls.append(f"replicated({size}" + (f", ndim={ndim})" if not calls else ")"))
            i += 1
            continue
        run = [steps[i]]
        direction = 0
        while i + len(run) < len(steps):
            nkind, ndim_, _ = steps[i + len(run)]
            step_dir = (ndim_ > run[-1][1]) - (ndim_ < run[-1][1])
            if nkind != kind or step_dir == 0 or (direction and step_dir != direction) or \
                    any(s[1] == ndim_ for s in run):
                break
            direction = step_dir
            run.append(steps[i + len(run)])
        extents = [1] * ndim
        for _, dim_, size_ in run:
            extents[dim_] = size_
        name = ("column_" if direction < 0 else "") + kind
        calls.append(f"{name}({', '.join(map(str, extents))})")
        i += len(run)
    if not calls:
        calls.append(f"local({', '.join(['1'] * ndim)})")
    return ".".join(calls)
