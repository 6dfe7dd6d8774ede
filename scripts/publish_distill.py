"""Publish a seq2seq-distill result: results/<name>.json and the distilled students' table.

    python scripts/publish_distill.py outputs/distill/multi30k_en_de/result.json

Copies the result.json that seq2seq-distill wrote into results/ (its name says the direction and CPU
class: results of different classes never overwrite each other), then rewrites results/distill_table.md
from every results/distill_*.json and the table between the markers of docs/results.md. A result timed
on a loaded machine (the load average around its timings above half the cores) is refused: its lines/s
would say more about the other work than about the models; --loaded publishes it anyway, marked.
A results file of that name holding another result is left alone and refused: --name gives the new
one another name (e.g. distill_en-de_60min.amx), --replace replaces it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results_page import replace_table  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TABLE_START, TABLE_END = (
    "<!-- distill table: written by scripts/publish_distill.py -->",
    "<!-- end of distill table -->",
)
TABLE_HEADER = (
    "| direction | CPU class | model | parameters | test BLEU (lowercase) | test BLEU (lowercase, Moses-tokenized) "
    "| chrF | lines/s, default engine, 1 / 2 threads | lines/s, int8, 1 / 2 threads | training | load around the timings |\n"
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n"
)


def loaded(result: dict) -> bool:
    """Whether other work ran around the timings: other processes' running threads counted just before
    them, where the result has the count (the load average also holds the command's own training winding
    down and its own timing threads), else the load average."""
    others = result.get("other_threads_before_speed")
    if others is not None:
        return others > result["machine"]["cores"] / 2
    return max(result["load_average_during_speed"]) > result["machine"]["cores"] / 2


def per_thread(speed: dict) -> str:
    if "unavailable" in speed:
        return "unavailable"
    return " / ".join(str(speed.get(t, "-")) for t in ("1", "2"))


def rows(result: dict) -> str:
    """Teacher, student and (with baseline=true) the student trained on the references, one row each."""
    machine, load = result["machine"], " / ".join(map(str, result["load_average_during_speed"]))
    load += " (loaded: not an idle measurement)" if loaded(result) else ""
    members = len(result["settings"]["teacher"])
    models = [("teacher", f"teacher (ensemble of {members})" if members > 1 else "teacher", "")]
    student = result["student"]
    models.append(("student", "student (distilled)", f"{student['steps']} updates, {student['train_minutes']:g} min"))
    if "baseline" in result:
        models.append(("baseline", "student (references)", f"{result['baseline']['steps']} updates"))
    out = ""
    for key, label, training in models:
        m = result[key]
        speed = m.get("speed", {})
        parameters = f"{m['parameters']:,}" if "parameters" in m else "as the student"
        out += (
            f"| {result['direction']} | {machine['cpu_capability']} | {label} | {parameters} | "
            f"{m['bleu_lowercase']} | {m.get('bleu_moses_lowercase') or 'not scored'} | {m['chrf']} | "
            f"{per_thread(speed.get('default', {})) if speed else '-'} | {per_thread(speed.get('int8', {})) if speed else '-'} | "
            f"{training or '-'} | {load} |\n"
        )
    return out


def table(results: Path) -> str:
    found = [json.loads(p.read_text()) for p in sorted(results.glob("distill_*.json"))]
    return TABLE_HEADER + "".join(rows(r) for r in found)


def publish(result: dict, results: Path, page: Path | None, replace: bool = False) -> Path:
    """Writes results/<result's name>.json and the tables; an existing file of that name that holds
    another result is a SystemExit naming it, unless `replace`."""
    results.mkdir(parents=True, exist_ok=True)
    path = results / f"{result['name']}.json"
    text = json.dumps(result, indent=2) + "\n"
    if path.exists() and path.read_text() != text and not replace:
        raise SystemExit(
            f"error: {path} holds another result; publish this one under another name (--name) or --replace it"
        )
    path.write_text(text)
    text = table(results)
    (results / "distill_table.md").write_text(text)
    replace_table(page, TABLE_START, TABLE_END, text)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("result", help="the result.json seq2seq-distill wrote into its output folder")
    parser.add_argument("--results", default=str(ROOT / "results"))
    parser.add_argument("--page", default=str(ROOT / "docs" / "results.md"), help="whose distill table to rewrite")
    parser.add_argument("--loaded", action="store_true", help="publish a result timed on a loaded machine")
    parser.add_argument("--name", help="the results file's name, without .json (default: the result's own)")
    parser.add_argument("--replace", action="store_true", help="replace a published result of that name")
    args = parser.parse_args()
    result = json.loads(Path(args.result).read_text())
    result["name"] = args.name or result["name"]
    if loaded(result) and not args.loaded:
        raise SystemExit(
            f"error: {args.result}: timed at load average {result['load_average_during_speed']} on "
            f"{result['machine']['cores']} cores; measure on an idle machine (or --loaded)"
        )
    print(publish(result, Path(args.results), Path(args.page) if args.page else None, args.replace))


if __name__ == "__main__":
    main()
