"""The test suite's time, like for like: two pytest JUnit XML reports (``--junitxml``) of the
same machine and conditions, compared over the tests both ran (same test id).

    git worktree add ../base OLD_COMMIT
    (cd ../base && PYTHONPATH=src taskset -c 0 python -m pytest -q --junitxml=/tmp/base.xml)
    taskset -c 0 python -m pytest -q --junitxml=/tmp/new.xml
    python bench/suite_time.py /tmp/base.xml /tmp/new.xml

Prints one JSON object: tests in each report, tests in both, the summed seconds of the
common tests in each, and their ratio (new / base).
"""

from __future__ import annotations

import argparse
import json
import xml.etree.ElementTree as ET
from pathlib import Path


def test_times(report: Path) -> dict[str, float]:
    """Seconds per test id (``classname::name``) in a JUnit XML report."""
    return {
        f"{case.get('classname')}::{case.get('name')}": float(case.get("time") or 0.0)
        for case in ET.parse(report).iter("testcase")
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base", type=Path, help="JUnit XML of the baseline run")
    ap.add_argument("new", type=Path, help="JUnit XML of the run to compare")
    ap.add_argument("--target", type=float, default=1.05, help="the ratio not to exceed")
    args = ap.parse_args()
    base, new = test_times(args.base), test_times(args.new)
    common = sorted(set(base) & set(new))
    b = sum(base[k] for k in common)
    n = sum(new[k] for k in common)
    print(
        json.dumps(
            {
                "tests": {"base": len(base), "new": len(new), "common": len(common)},
                "seconds_all": {
                    "base": round(sum(base.values()), 1),
                    "new": round(sum(new.values()), 1),
                },
                "seconds_common": {"base": round(b, 1), "new": round(n, 1)},
                "ratio_common": round(n / b, 4) if b else None,
                "target_ratio_at_most": args.target,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
