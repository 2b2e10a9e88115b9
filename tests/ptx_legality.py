"""An independent criterion of a legal order of a PTX run (tests of tune.ptx_order and
tune.order_search): every register read sees the same definition as in the original
order, every register ends with the same last definition, and memory operations that
conflict (one writes) keep their order."""

from __future__ import annotations

from tilevm.tune.ptx_order import Run


def check_order(run: Run, order: list[int]) -> list[str]:
    """What `order` of `run`'s instructions breaks (nothing: a legal order)."""
    def flow(sequence):
        seen, last = [], {}
        for i in sequence:
            inst = run.instructions[i]
            seen.append((i, tuple(sorted((r, last.get(r)) for r in inst.reads))))
            for r in inst.defines:
                last[r] = i
        return dict(seen), last
    problems = []
    if sorted(order) != list(range(len(run.instructions))):
        return ["not a permutation"]
    (reads_before, last_before), (reads_after, last_after) = flow(range(len(order))), \
        flow(order)
    problems += [f"{run.instructions[i].text.strip()} reads other definitions"
                 for i in reads_before if reads_before[i] != reads_after[i]]
    problems += [f"{r} ends with another definition"
                 for r in last_before if last_before[r] != last_after[r]]
    position = {i: k for k, i in enumerate(order)}
    memory = [i for i, inst in enumerate(run.instructions) if inst.memory]
    for a in memory:
        for b in memory:
            kinds = {run.instructions[a].memory, run.instructions[b].memory}
            if a < b and "write" in kinds and position[a] > position[b]:
                problems.append(f"memory order of {a} and {b}")
    return problems
