"""Usage: stalls.py SOURCE.csv: per kernel of ncu's source page (`ncu --import R --page
source --csv --print-source sass`), the warp-state samples by reason and by opcode, the
25 instructions with the most samples and the loads with the most excessive L2 sectors
(what stalls.txt holds)."""

import collections
import csv
import io
import re
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"
EXCESS = "L2 Theoretical Sectors Global Excessive"


def number(row: dict, key: str) -> float:
    try:
        return float((row.get(key) or "0").replace(",", ""))
    except ValueError:
        return 0.0


def opcode(sass: str) -> str:
    return re.sub(r"^@!?U?P\w+\s+", "", sass.strip()).split(" ")[0]


def report(rows: list[dict]) -> None:
    total = sum(number(r, SAMPLES) for r in rows)
    print(f"  {len(rows)} instructions, {total:.0f} samples")
    reasons = [k for k in rows[0] if k.startswith("stall_") and "Not Issued" not in k]
    by_reason = collections.Counter({k: sum(number(r, k) for r in rows) for k in reasons})
    print("  by reason:", ", ".join(f"{k[6:]} {100 * v / total:.1f}%"
                                    for k, v in by_reason.most_common(9)))
    by_op = collections.Counter()
    for r in rows:
        by_op[opcode(r["Source"])] += number(r, SAMPLES)
    print("  by opcode:", ", ".join(f"{k} {100 * v / total:.1f}%"
                                    for k, v in by_op.most_common(14)))
    for r in sorted(rows, key=lambda r: -number(r, SAMPLES))[:25]:
        top = sorted(((number(r, k), k[6:]) for k in reasons), reverse=True)[:3]
        print(f"  {r['Address'][-5:]} {100 * number(r, SAMPLES) / total:5.1f}% "
              f"{r['Source'].strip()[:60]:60s} "
              + " ".join(f"{name}:{v:.0f}" for v, name in top if v))
    print("  excessive sectors:")
    for r in sorted(rows, key=lambda r: -number(r, EXCESS))[:8]:
        if number(r, EXCESS):
            print(f"    {r['Address'][-5:]} {r['Source'].strip()[:60]:60s} excessive "
                  f"{number(r, EXCESS):.0f} of {number(r, 'L2 Theoretical Sectors Global'):.0f}")


def main() -> None:
    text = open(sys.argv[1]).read()
    for i, part in enumerate(re.split(r'^"Kernel Name",.*\n', text, flags=re.M)[1:]):
        print(f"== kernel {i}")
        report(list(csv.DictReader(io.StringIO(part))))


if __name__ == "__main__":
    main()
