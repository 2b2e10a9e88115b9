"""Tuning: the search over a kernel's schedules and instruction orders (issue: SIP).

`ptx_order`: the dependency graph of a PTX function's straight-line runs and random
legal orders of them (`vmc tune --permute`); `variants`: a program's kernel loaded from
a variant of its PTX; `runner`: candidates run in a child process behind a watchdog;
`rank`: candidates ordered by the cost model's prediction; `anneal`: simulated annealing
on measured times; `order_search`: level 2, the PTX order of one kernel annealed behind
the bit-exact gate.
"""
