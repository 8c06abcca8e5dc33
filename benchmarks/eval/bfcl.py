"""Function-calling accuracy on a fixed sample of the Berkeley Function Calling Leaderboard (BFCL v4).

Each question runs through ``GenerativeModel.chat`` with its functions offered as
tools (OpenAI envelope, BFCL's types mapped to JSON schema, greedy decoding);
the calls the reply made are graded against BFCL's possible answers with its
AST rules:

* the right functions (the right number of calls; in ``parallel*`` any order);
* every required parameter present, no parameter the function lacks or the
  answer does not list, every listed parameter without an optional marker ("") given;
* each value among the allowed ones: strings compared case-insensitively
  without spaces and ``,./-_*^``, an integer accepted for a float, lists and
  dictionaries compared element by element, a value of the answer's own type
  accepted as is when the answer names a variable rather than the schema's type;
* ``irrelevance``: right when the reply calls nothing.

Failures are counted by kind: no call, wrong function (also a call object in
the text naming a function that was not offered), wrong args, wrong count,
parse error (call markup, or a call object naming an offered function, that did
not parse), called (a call on an irrelevance question), error (the request failed).

    python benchmarks/eval/bfcl.py qwen2.5-coder-0.5b-instruct                 # first 50 of simple_python
    python benchmarks/eval/bfcl.py qwen2.5-coder-1.5b-instruct --categories simple_python multiple parallel \\
        parallel_multiple irrelevance --limit 20 --out bfcl-1.5b.json

The data comes from ``clika_export.pull.fetch.fetch_data("bfcl")``; the model is a
catalog name or a .gguf file (exported once and cached, ``--precision``), or a
model folder.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from clika_runtime import modelverse
from clika_runtime.chat.tools.stream import parse_tool_calls

PYTHON_CATEGORIES = (
    "simple_python",
    "multiple",
    "parallel",
    "parallel_multiple",
    "irrelevance",
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
    "live_irrelevance",
)
KINDS = ("no call", "wrong function", "wrong args", "wrong count", "parse error", "called", "error")
# BFCL's parameter types as JSON schema types (what a tools API takes).
SCHEMA_TYPES = {"dict": "object", "float": "number", "tuple": "array", "any": "string"}
PYTHON_TYPES = {
    "string": str,
    "integer": int,
    "float": float,
    "boolean": bool,
    "array": list,
    "tuple": list,
    "dict": dict,
    "any": str,
}
PYTHON_NOTE = " Note that the provided function is in Python 3 syntax."  # BFCL adds it to every description
IGNORED_CHARACTERS = re.compile(r"[ ,./\-_*^]")
CALL_NAME = re.compile(r'"name"\s*:\s*"([^"]+)"')  # a call object in a reply the parser did not read


# -- data ---------------------------------------------------------------------------------------


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def load_category(data: Path, category: str, limit: int, seed: int | None) -> list[dict[str, Any]]:
    """The category's sample (the first ``limit`` entries, or ``limit`` drawn with ``seed``), answers joined."""
    if category not in PYTHON_CATEGORIES:
        raise SystemExit(
            f"category {category!r} is not graded here; choose from {', '.join(PYTHON_CATEGORIES)}"
        )
    entries = read_lines(data / f"BFCL_v4_{category}.json")
    answers_file = data / "possible_answer" / f"BFCL_v4_{category}.json"
    answers = (
        {row["id"]: row["ground_truth"] for row in read_lines(answers_file)} if answers_file.exists() else {}
    )
    if seed is not None:
        entries = random.Random(seed).sample(entries, min(limit, len(entries)))
    else:
        entries = entries[:limit]
    for entry in entries:
        entry["ground_truth"] = answers.get(entry["id"])
        if entry["ground_truth"] is None and "irrelevance" not in category:
            raise SystemExit(f"{entry['id']}: no possible answer in {answers_file}")
    return entries


def json_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A BFCL parameter schema with JSON-schema type names, recursively."""
    out = dict(schema)
    if out.get("type") in SCHEMA_TYPES:
        out["type"] = SCHEMA_TYPES[out["type"]]
    if isinstance(out.get("properties"), dict):
        out["properties"] = {name: json_schema(sub) for name, sub in out["properties"].items()}
    if isinstance(out.get("items"), dict):
        out["items"] = json_schema(out["items"])
    return out


def as_tool(doc: dict[str, Any]) -> dict[str, Any]:
    """A BFCL function document as an OpenAI tool definition."""
    function = {
        "name": doc["name"],
        "description": doc.get("description", "") + PYTHON_NOTE,
        "parameters": json_schema(doc["parameters"]),
    }
    return {"type": "function", "function": function}


# -- grading ------------------------------------------------------------------------------------


@dataclass
class Verdict:
    correct: bool
    kind: str = ""  # one of KINDS when not correct
    detail: str = ""


def normalized(value: Any) -> Any:
    return IGNORED_CHARACTERS.sub("", value).lower().replace("'", '"') if isinstance(value, str) else value


def answer_type(allowed: list[Any]) -> type | None:
    """The type of the answer's first non-optional value (None when only "" is listed)."""
    return next((type(value) for value in allowed if value != ""), None)


def check_type(value: Any, schema: dict[str, Any], allowed: list[Any]) -> tuple[bool, bool]:
    """(the type is acceptable, the value stands for a variable) for one parameter value.

    A value of the schema's type passes (an array's items must be of the item
    type, or of an allowed list's own item type); otherwise a value of the
    answer's own type passes as a variable name, compared as it is.
    """
    expected = PYTHON_TYPES.get(schema.get("type"), str)
    listed = answer_type(allowed)
    variable = listed is not None and listed is not expected
    if type(value) is expected:
        item_type = (
            PYTHON_TYPES.get((schema.get("items") or {}).get("type", "")) if expected is list else None
        )
        if item_type is None or any(
            not isinstance(option, list)
            or all(type(item) in (item_type, answer_type(option)) for item in value)
            for option in allowed
        ):
            return True, variable
    return listed is not None and type(value) is listed, True


def dict_matches(value: dict[str, Any], options: list[Any]) -> bool:
    for option in options:
        if option == "" or not isinstance(option, dict):
            continue
        given = all(
            key in option and normalized(item) in map(normalized, option[key]) for key, item in value.items()
        )
        complete = all(key in value or "" in allowed for key, allowed in option.items())
        if given and complete:
            return True
    return False


def value_error(param: str, value: Any, schema: dict[str, Any], allowed: list[Any]) -> str | None:
    """Why ``value`` is not an allowed value of ``param`` (None when it is)."""
    if schema.get("type") == "float" and type(value) is int:
        value = float(value)
    type_ok, variable = check_type(value, schema, allowed)
    if not type_ok:
        return f"{param}: {value!r} is not of type {schema.get('type')}"
    kind = PYTHON_TYPES.get(schema.get("type"), str)
    items = PYTHON_TYPES.get((schema.get("items") or {}).get("type", ""))
    if variable:
        matches = value in allowed
    elif kind is dict:
        matches = dict_matches(value, allowed)
    elif kind is list and items is dict:
        matches = any(
            isinstance(option, list)
            and len(option) == len(value)
            and all(dict_matches(item, [choice]) for item, choice in zip(value, option, strict=True))
            for option in allowed
        )
    elif kind is str:
        matches = normalized(value) in [normalized(option) for option in allowed if isinstance(option, str)]
    elif kind is list:
        options = [[normalized(item) for item in option] for option in allowed if isinstance(option, list)]
        matches = [normalized(item) for item in value] in options
    else:
        matches = value in allowed
    return None if matches else f"{param}: {value!r} not in {allowed}"


def call_error(doc: dict[str, Any], name: str, arguments: dict[str, Any], answer: dict[str, Any]) -> Verdict:
    """One call against one possible answer ``{function: {param: [allowed values]}}``."""
    expected, allowed = next(iter(answer.items()))
    if name != expected:
        return Verdict(False, "wrong function", f"called {name!r}, expected {expected!r}")
    properties = doc["parameters"].get("properties", {})
    for param in doc["parameters"].get("required", []):
        if param not in arguments:
            return Verdict(False, "wrong args", f"missing required {param!r}")
    for param, value in arguments.items():
        if param not in properties or param not in allowed:
            return Verdict(False, "wrong args", f"unexpected parameter {param!r}")
        error = value_error(param, value, properties[param], allowed[param])
        if error:
            return Verdict(False, "wrong args", error)
    for param, values in allowed.items():
        if param not in arguments and "" not in values:
            return Verdict(False, "wrong args", f"missing {param!r} (expected one of {values})")
    return Verdict(True)


def grade(entry: dict[str, Any], calls: list[tuple[str, dict[str, Any]]], category: str) -> Verdict:
    """The reply's calls against the entry's possible answers (BFCL's AST check for ``category``)."""
    if "irrelevance" in category:
        return (
            Verdict(True) if not calls else Verdict(False, "called", f"called {[name for name, _ in calls]}")
        )
    answers = entry["ground_truth"]
    if not calls:
        return Verdict(False, "no call")
    if len(calls) != len(answers):
        return Verdict(False, "wrong count", f"{len(calls)} calls, expected {len(answers)}")
    docs = {doc["name"]: doc for doc in entry["function"]}
    unmatched = list(range(len(calls)))
    for answer in answers:  # each possible answer takes the first call that satisfies it
        doc = docs[next(iter(answer))]
        verdicts = [(index, call_error(doc, *calls[index], answer)) for index in unmatched]
        hit = next((index for index, verdict in verdicts if verdict.correct), None)
        if hit is None:
            named = [verdict for _, verdict in verdicts if verdict.kind != "wrong function"]
            return named[0] if named else verdicts[0][1]
        unmatched.remove(hit)
    return Verdict(True)


# -- running ------------------------------------------------------------------------------------


def open_model(name: str, precision: str, threads: int) -> tuple[modelverse.GenerativeModel, str]:
    path = Path(name)
    if path.is_dir():
        return modelverse.load(path, threads=threads), str(path)
    from clika_export.api import cached_export
    from clika_export.pull.fetch import fetch_gguf

    gguf = path if path.suffix == ".gguf" else fetch_gguf(name, progress=False)
    folder = cached_export(gguf, precision=precision, progress=False)
    return modelverse.load(folder, threads=threads), f"{gguf.name} ({precision})"


def run_entry(
    model: modelverse.GenerativeModel, entry: dict[str, Any], category: str, budget: int
) -> dict[str, Any]:
    tools = [as_tool(doc) for doc in entry["function"]]
    began = time.perf_counter()
    try:
        text = model.chat(entry["question"][0], tools=tools, temperature=0.0, max_new_tokens=budget)
    except ValueError as exc:  # e.g. a prompt longer than the context window
        verdict = Verdict(False, "error", str(exc))
        return {"id": entry["id"], "category": category, **asdict(verdict), "calls": [], "text": ""}
    outcome = model.report
    calls = [(call.name, call.arguments) for call in outcome.tool_calls]
    verdict = grade(entry, calls, category)
    if verdict.kind == "no call":
        verdict = _why_no_call(model, text, tools) or verdict
    return {
        "id": entry["id"],
        "category": category,
        **asdict(verdict),
        "calls": [{"name": name, "arguments": arguments} for name, arguments in calls],
        "text": text,
        "finish": outcome.finish,
        "completion_tokens": outcome.completion_tokens,
        "seconds": round(time.perf_counter() - began, 2),
    }


def _why_no_call(model: modelverse.GenerativeModel, text: str, tools: list[dict[str, Any]]) -> Verdict | None:
    """A reply without calls: call markup, or a call object naming an offered function, that did not
    parse (e.g. JSON with comments), or a call object naming a function nobody offered."""
    template = model.chat_template
    offered = {tool["function"]["name"] for tool in tools}
    named = CALL_NAME.findall(text)
    broken = template is not None and bool(parse_tool_calls(text, template.format, tools).malformed)
    if broken or "<tool_call>" in text or any(name in offered for name in named):
        return Verdict(False, "parse error", "a call that did not parse")
    return Verdict(False, "wrong function", f"named {named[0]!r}, not offered") if named else None


def report(results: list[dict[str, Any]], categories: list[str], title: str, failures: int) -> None:
    print(f"\n{title}")
    header = f"{'category':<24}{'n':>5}{'correct':>9}{'accuracy':>10}" + "".join(
        f"{kind:>16}" for kind in KINDS
    )
    print(header)
    for category in [*categories, "all"]:
        rows = results if category == "all" else [r for r in results if r["category"] == category]
        if not rows:
            continue
        correct = sum(r["correct"] for r in rows)
        kinds = Counter(r["kind"] for r in rows if not r["correct"])
        line = f"{category:<24}{len(rows):>5}{correct:>9}{100 * correct / len(rows):>9.1f}%"
        print(line + "".join(f"{kinds.get(kind, 0):>16}" for kind in KINDS))
    shown = [r for r in results if not r["correct"]][:failures]
    if shown:
        print(f"\nfailures (first {len(shown)}):")
    for r in shown:
        made = "; ".join(f"{c['name']}({json.dumps(c['arguments'])})" for c in r["calls"]) or repr(
            r["text"][:120]
        )
        print(f"  {r['id']:<28}{r['kind']:<16}{r['detail'][:100]}  <- {made[:160]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="a catalog name, a .gguf file or a model folder")
    parser.add_argument("--precision", default="int4", choices=["fp32", "int4", "int8"])
    parser.add_argument("--categories", nargs="+", default=["simple_python"], choices=PYTHON_CATEGORIES)
    parser.add_argument("--limit", type=int, default=50, help="questions per category")
    parser.add_argument(
        "--sample-seed", type=int, help="draw the sample with this seed instead of taking the first"
    )
    parser.add_argument("--max-new-tokens", type=int, default=384)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--failures", type=int, default=20, help="how many failures to print")
    parser.add_argument("--out", type=Path, help="write every graded reply here (JSON)")
    args = parser.parse_args()

    from clika_export.pull.fetch import fetch_data

    data = fetch_data("bfcl", progress=False)
    samples = {
        category: load_category(data, category, args.limit, args.sample_seed) for category in args.categories
    }
    model, label = open_model(args.model, args.precision, args.threads)
    results: list[dict[str, Any]] = []
    began = time.perf_counter()
    try:
        for category, entries in samples.items():
            for entry in entries:
                results.append(run_entry(model, entry, category, args.max_new_tokens))
                mark = "." if results[-1]["correct"] else "x"
                print(mark, end="", flush=True)
    finally:
        model.close()
    sample = f"seed {args.sample_seed}" if args.sample_seed is not None else "first"
    title = (
        f"BFCL v4 AST accuracy: {label}, greedy, {sample} {args.limit} per category, "
        f"{time.perf_counter() - began:.0f} s"
    )
    report(results, args.categories, title, args.failures)
    if args.out:
        args.out.write_text(json.dumps({"title": title, "results": results}, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
