"""Publish a result that scripts/reproduce.py wrote without --publish, or on another machine (a GPU
machine's `$OUT/result/reproduce.json`, a run directory's result.json): results/<name>.{json,md,png}
and the results table, exactly as `--publish` would have written them there.

    python scripts/publish_result.py gpu-out/result/reproduce.json

The result names its hardware class in its name (multi30k_en_de_gpu_10min.nvidia_h200.json), so a
result of another class never replaces one of this class.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import reproduce  # noqa: E402

KEYS = ("name", "experiment", "machine", "steps", "checkpoint")  # what every reproduce.py result has


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("result", help="a JSON file scripts/reproduce.py printed or wrote")
    parser.add_argument("--results", default=str(reproduce.ROOT / "results"))
    parser.add_argument("--page", default=str(reproduce.ROOT / "docs" / "results.md"), help="whose table to rewrite")
    args = parser.parse_args(argv)
    try:
        result = json.loads(Path(args.result).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise SystemExit(f"error: {args.result}: unreadable ({err})") from None
    missing = [key for key in KEYS if not isinstance(result, dict) or key not in result]
    if missing:
        raise SystemExit(f"error: {args.result}: not a result of scripts/reproduce.py (no {', '.join(missing)})")
    reproduce.publish(result, Path(args.results), Path(args.page) if args.page else None)
    print(Path(args.results) / f"{result['name']}.json")


if __name__ == "__main__":
    main()
