"""A held-out benchmark mix: labeled prompts the task classifier was never tuned on.

    python -m bench.heldout [--out bench/prompts/heldout.jsonl]

`router/classify.py` was tuned on the `dev` half of `bench/prompts/tasks.jsonl` and scored on its
`test` half, both written by the project. This mix is built instead from text that ships with eight
third-party packages of the project's own dependency closure (`PACKAGES`: pyproject's direct
dependencies pydantic, PyYAML, httpx, prometheus_client and tqdm; click and requests, which Ray
requires; jinja2, which torch requires), read from the installed site-packages, so it needs no
download. Never the Python standard library: the model lab trains its tiny models on it
(`models/corpus.py`).

- code: function heads plus their docstring's first sentence (completion), and "write / test /
  port this function" requests naming a real signature and docstring (chat);
- math: word problems and notation from fixed templates, numbers drawn from `random.Random(SEED)`,
  some counting the packages' own modules and functions;
- extraction: the packages' METADATA headers (fields to JSON), module docstrings (summaries,
  TL;DR) and docstring lines (translation, signature parameters to JSON);
- chat: "What does `X` in Y do?" and other questions about the packages and their functions;
- creative: poems, stories, names and story openings over nouns from the packages' class names.

Labels follow `bench/prompts/README.md`'s guide and come from the template, never from the
classifier. Each row is a `tasks.jsonl` row (`split` = "heldout") plus `source`: the package, its
version and the file and function a prompt's text came from, or the template's name. The text is a
pure function of the installed versions of `PACKAGES` (files sorted, one seeded RNG); another
version of any of them gives other prompts. Licences: each package's own (README, "Held-out mix").
"""

from __future__ import annotations

import argparse
import ast
import copy
import json
import random
import re
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from bench.workload import HELDOUT_PATH, PROMPTS_PATH, SKIPPED_SOURCE_PARTS

PACKAGES = ("click", "httpx", "jinja2", "prometheus_client", "pydantic", "PyYAML", "requests",
            "tqdm")  # distribution names
SEED = 28
MAX_HEAD_CHARS = 240  # longer function heads (a CLI's 20 typed options) are skipped
# prompts per (task, kind): ~200 in tasks.jsonl's task mix (code 81, math 81, extraction 71,
# chat 73, creative 70 of 376) and about its per-task share of completion prompts
COUNTS = {("code", "completion"): 17, ("code", "chat"): 26,
          ("math", "completion"): 15, ("math", "chat"): 28,
          ("extraction", "completion"): 12, ("extraction", "chat"): 26,
          ("chat", "completion"): 7, ("chat", "chat"): 32,
          ("creative", "completion"): 9, ("creative", "chat"): 28}
_NOUN_SKIP = re.compile(r"Error|Exception|Warning|Mixin|Base|Meta|Protocol|Type|Dict|Callable")


@dataclass(frozen=True, slots=True)
class Function:
    """A public function or method with a docstring; `head` is its signature and that docstring's
    first sentence, ending inside the body, e.g. 'def get(url, params=None):\\n    \"\"\"Sends a GET
    request.\"\"\"\\n    '."""

    source: str  # "<dist> <version>: <file> <qualname>"
    package: str
    name: str
    qualname: str
    params: str  # "url, params=None" (no self / cls)
    doc: str  # the first sentence of the docstring's first paragraph
    head: str


@dataclass(frozen=True, slots=True)
class Package:
    """What one installed distribution gives the builder."""

    name: str
    version: str
    licence: str
    header: str  # METADATA lines Name, Version, Summary, Author*, Maintainer*, License*
    modules: int  # .py files read
    functions: tuple[Function, ...]
    module_docs: tuple[tuple[str, str], ...]  # (source, first paragraph of the module docstring)
    nouns: tuple[str, ...]  # class names split into lowercase words: "connection pool"


def _licence(meta) -> str:
    for value in (meta.get("License-Expression"), meta.get("License")):
        if value and len(value) < 60:
            return value.strip()
    classifiers = [c for c in meta.get_all("Classifier") or [] if c.startswith("License ::")]
    return classifiers[0].split(" :: ")[-1] if classifiers else "unknown"


def _head(node: ast.FunctionDef | ast.AsyncFunctionDef, doc: str, cls: str | None) -> str:
    stub = copy.copy(node)  # shallow: the parsed tree keeps its body
    stub.body, stub.decorator_list = [ast.Expr(ast.Constant(doc))], []
    text = ast.unparse(stub)
    if cls is None:
        return text + "\n    "
    return f"class {cls}:\n\n" + "".join(f"    {line}\n" for line in text.splitlines()) + "        "


def _functions(tree: ast.Module, source: str, package: str) -> list[Function]:
    found = []
    scopes = [(None, tree)] + [(n.name, n) for n in tree.body if isinstance(n, ast.ClassDef)
                               and not n.name.startswith("_")]
    for cls, scope in scopes:
        for node in scope.body:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                    or node.name.startswith("_"):
                continue
            paragraph = " ".join((ast.get_docstring(node) or "").split("\n\n")[0].split())
            doc = re.split(r"(?<=[.!?]) ", paragraph)[0]  # the first sentence
            if not 20 <= len(doc) <= 110 or not doc[0].isupper() or "`" in doc:
                continue
            args = [a.arg for a in node.args.posonlyargs + node.args.args
                    if a.arg not in ("self", "cls")]
            qualname = f"{cls}.{node.name}" if cls else node.name
            head = _head(node, doc, cls)
            if len(head) > MAX_HEAD_CHARS:
                continue
            found.append(Function(f"{source} {qualname}", package, node.name, qualname,
                                  ", ".join(args), doc, head))
    return found


def read_package(dist_name: str) -> Package:
    """Functions, module docstrings, class-name nouns and METADATA of one installed distribution.

    Raises:
        importlib.metadata.PackageNotFoundError: `dist_name` is not installed in this venv.
    """
    dist = metadata.distribution(dist_name)
    meta = dist.metadata
    fields = ("Name", "Version", "Summary", "Author", "Author-email", "Maintainer-email",
              "License", "License-Expression", "Requires-Python")
    header = "\n".join(f"{k}: {meta[k]}" for k in fields if meta.get(k) and len(meta[k]) < 200)
    files = sorted(str(f) for f in dist.files or () if str(f).endswith(".py")
                   and not SKIPPED_SOURCE_PARTS & set(Path(str(f)).parts))
    functions, module_docs, nouns = [], [], set()
    for rel in files:
        tree = ast.parse(Path(dist.locate_file(rel)).read_text(encoding="utf-8"))
        source = f"{meta['Name']} {dist.version}: {rel}"
        functions += _functions(tree, source, meta["Name"])
        paragraph = " ".join((ast.get_docstring(tree) or "").split("\n\n")[0].split())
        if 80 <= len(paragraph) <= 500:
            module_docs.append((source, paragraph))
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_") \
                    and not _NOUN_SKIP.search(node.name) and node.name.isalpha():
                words = re.findall(r"[A-Z][a-z]+", node.name)
                if 1 <= len(words) <= 3 and "".join(words) == node.name:
                    nouns.add(" ".join(words).lower())
    return Package(meta["Name"], dist.version, _licence(meta), header, len(files),
                   tuple(functions), tuple(module_docs), tuple(sorted(nouns)))


def _fn(rng: random.Random, pkgs: list[Package]) -> Function:
    return rng.choice(rng.choice(pkgs).functions)


def _noun(rng: random.Random, pkgs: list[Package]) -> tuple[str, Package]:
    pkg = rng.choice([p for p in pkgs if p.nouns])
    return rng.choice(pkg.nouns), pkg


def _a(noun: str) -> str:
    return f"{'an' if noun[0] in 'aeiou' else 'a'} {noun}"


def _code_completion(rng, pkgs):
    f = _fn(rng, pkgs)
    return f.head, f.source


def _code_chat(rng, pkgs):
    f = _fn(rng, pkgs)
    return rng.choice((
        f"Write a Python function `{f.name}({f.params})` that does this: {f.doc}",
        f"Implement `{f.qualname}` from {f.package} from scratch in Python. Its docstring says: "
        f"\"{f.doc}\"",
        f"Write pytest unit tests for `{f.qualname}` in {f.package}, whose docstring reads "
        f"\"{f.doc}\"",
        f"Write a TypeScript version of {f.package}'s `{f.name}({f.params})`: {f.doc}",
    )), f.source


def _math_completion(rng, pkgs):
    a, b, c = rng.randint(12, 99), rng.randint(3, 48), rng.randint(2, 9)
    pkg = rng.choice(pkgs)
    return rng.choice((
        (f"Q: {a} × {b} + {c * 11} = ?\nA:", "template math-product"),
        (f"$$\\sum_{{k=1}}^{{{a}}} {c}k = ", "template math-sum"),
        (f"Let $f(x) = {c}x^3 - {b}x^2 + {a}$. Then $f'(x) = ", "template math-derivative"),
        (f"Problem: A {pkg.name} wheel of {a} MB downloads at {c} MB/s for the first half and "
         f"at {b} MB/s for the rest. How many seconds does the download take?\nSolution:",
         f"template math-rate over {pkg.name} {pkg.version}"),
        (f"Question: {pkg.name} retries a request up to {c} times, and each try fails with "
         f"probability 0.{b:02d}. What is the probability that every try fails?\nAnswer: Let's "
         f"think step by step.", f"template math-retry over {pkg.name} {pkg.version}"),
    ))


def _math_chat(rng, pkgs):
    a, b, c = rng.randint(3, 40), rng.randint(41, 400), rng.randint(401, 999)
    pkg = rng.choice(pkgs)
    k = 3 * rng.randint(2, 9)
    return rng.choice((
        (f"{pkg.name} {pkg.version} ships {pkg.modules} Python modules holding "
         f"{len(pkg.functions)} documented public functions. What is the mean number of such "
         f"functions per module, to two decimal places?",
         f"template math-mean, counts of {pkg.name} {pkg.version}"),
        (f"A server built on {pkg.name} answers {b} requests per second. How many requests does "
         f"it answer in {a} hours?", f"template math-rate over {pkg.name} {pkg.version}"),
        (f"Solve for x: {a}x + {b} = {c}.", "template math-linear"),
        (f"Compute the GCD and the LCM of {b} and {c}.", "template math-gcd"),
        (f"A cache answers a lookup with probability 0.{b % 100:02d}. What is the probability "
         f"that {a % 7 + 2} lookups in a row all hit?", "template math-probability"),
        (f"Find the area of a right triangle whose legs are {k} cm and {4 * k // 3} cm long.",
         "template math-area"),
        (f"In how many ways can a reviewer pick {a % 5 + 2} of the {pkg.modules} modules of "
         f"{pkg.name} {pkg.version} to read?",
         f"template math-combinations, counts of {pkg.name} {pkg.version}"),
        (f"Evaluate the integral of {a}x^2 + {b}x from 0 to {a % 9 + 1}.",
         "template math-integral"),
    ))


def _extraction_completion(rng, pkgs):
    f = _fn(rng, pkgs)
    source, doc = rng.choice(rng.choice([p for p in pkgs if p.module_docs]).module_docs)
    return rng.choice((
        (f"Text: {doc}\n\nTL;DR:", source),
        (f"English: {f.doc}\nFrench:", f.source),
        (f"Docstring: {doc}\nKeywords:", source),
    ))


def _extraction_chat(rng, pkgs):
    pkg = rng.choice(pkgs)
    f = _fn(rng, pkgs)
    source, doc = rng.choice(rng.choice([p for p in pkgs if p.module_docs]).module_docs)
    return rng.choice((
        (f"Extract the package name, version, author and licence as JSON from this metadata:\n\n"
         f"{pkg.header}", f"{pkg.name} {pkg.version}: METADATA"),
        (f"Summarize this module docstring in one sentence:\n\n{doc}", source),
        (f"Translate this docstring into German: \"{f.doc}\"", f.source),
        (f"Extract the parameter names of this signature as a JSON list: "
         f"`{f.name}({f.params})`", f.source),
    ))


def _chat_completion(rng, pkgs):
    f, pkg = _fn(rng, pkgs), rng.choice(pkgs)
    return rng.choice((
        (f"User: What does `{f.qualname}` in {f.package} do?\nAssistant:", f.source),
        (f"Q: What is {pkg.name} used for?\nA:", f"{pkg.name} {pkg.version}: METADATA"),
    ))


def _chat_chat(rng, pkgs):
    f = _fn(rng, pkgs)
    g = _fn(rng, [p for p in pkgs if p.name != f.package])
    return rng.choice((
        (f"What does `{f.qualname}` in {f.package} do?", f.source),
        (f"When would I use {f.package} instead of {g.package}?",
         f"{f.source}; {g.source}"),
        (f"Is `{f.qualname}` in {f.package} safe to call from several threads at once?",
         f.source),
        (f"Should I learn {f.package} or {g.package} first as a beginner?",
         f"{f.source}; {g.source}"),
    ))


def _creative_completion(rng, pkgs):
    noun, pkg = _noun(rng, pkgs)
    return rng.choice((
        f"Once upon a time, {_a(noun)} lived deep inside the {pkg.name} package, and",
        f"Chapter 1\n\nThe {noun} had never been imported before.",
        f"Title: The Last {noun.title()}\n\n",
    )), f"{pkg.name} {pkg.version}: class names"


def _creative_chat(rng, pkgs):
    (noun, pkg), (other, _) = _noun(rng, pkgs), _noun(rng, pkgs)
    f = _fn(rng, pkgs)
    return rng.choice((
        (f"Write a short poem about {_a(noun)}.", f"{pkg.name} {pkg.version}: class names"),
        (f"Tell me a story about {_a(noun)} that wants to become {_a(other)}.",
         f"{pkg.name} {pkg.version}: class names"),
        (f"Write a limerick about the `{f.name}` function of {f.package}.", f.source),
        (f"Come up with five names for a café themed on {pkg.name}.",
         f"{pkg.name} {pkg.version}: METADATA"),
        (f"Invent a myth explaining where the first {noun} came from.",
         f"{pkg.name} {pkg.version}: class names"),
    ))


_TEMPLATES = {("code", "completion"): _code_completion, ("code", "chat"): _code_chat,
              ("math", "completion"): _math_completion, ("math", "chat"): _math_chat,
              ("extraction", "completion"): _extraction_completion,
              ("extraction", "chat"): _extraction_chat,
              ("chat", "completion"): _chat_completion, ("chat", "chat"): _chat_chat,
              ("creative", "completion"): _creative_completion,
              ("creative", "chat"): _creative_chat}


def build(packages: list[Package] | None = None, seed: int = SEED,
          known: Path = PROMPTS_PATH) -> list[dict]:
    """The held-out rows (`id`, `task`, `split`, `prompt`, `kind`, `source`), COUNTS of each
    (task, kind), tasks in tasks.jsonl's order; ids `heldout-<task>-<nnn>`.

    Args:
        packages: the sources (default: `read_package` of every PACKAGES entry, in that order).
        seed: the RNG's seed; the same seed and package versions give the same rows.
        known: labeled prompts the mix must not repeat (tasks.jsonl).

    Raises:
        ValueError: the sources cannot give COUNTS distinct prompts unseen in `known`.
    """
    pkgs = packages if packages is not None else [read_package(p) for p in PACKAGES]
    rng = random.Random(seed)
    seen = {json.loads(line)["prompt"] for line in known.read_text().splitlines() if line.strip()}
    rows: list[dict] = []
    for task in dict.fromkeys(t for t, _ in COUNTS):
        nnn = 0
        for kind in ("completion", "chat"):
            for _ in range(COUNTS[task, kind]):
                for _attempt in range(100):
                    prompt, source = _TEMPLATES[task, kind](rng, pkgs)
                    if prompt not in seen:
                        break
                else:
                    raise ValueError(f"{task}/{kind}: no new prompt in 100 draws (seed {seed})")
                seen.add(prompt)
                rows.append({"id": f"heldout-{task}-{nnn:03d}", "task": task, "split": "heldout",
                             "prompt": prompt, "kind": kind, "source": source})
                nnn += 1
    return rows


def render(rows: list[dict]) -> str:
    """The JSONL text of `rows`: one object a line, keys in insertion order, UTF-8 kept."""
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HELDOUT_PATH, help="JSONL file written.")
    args = parser.parse_args(argv)
    packages = [read_package(p) for p in PACKAGES]
    args.out.write_text(render(build(packages)), encoding="utf-8")
    for p in packages:
        print(f"{p.name} {p.version} ({p.licence}): {p.modules} modules, "
              f"{len(p.functions)} functions, {len(p.module_docs)} module docstrings, "
              f"{len(p.nouns)} nouns")
    print(f"wrote {sum(COUNTS.values())} prompts to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
