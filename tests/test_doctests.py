# SPDX-License-Identifier: Apache-2.0
"""The examples in the docs run: every ``>>>`` example of a docstring in the package
(the compiled core's included, which Cython embeds) and of the Markdown documents
(README.md, CONTRIBUTING.md, docs/**/*.md outside the built site docs/_build) is a
doctest, and its output must match.

Collection does not rely on ``doctest.DocTestFinder`` alone: it finds the functions
and methods of an extension module (Cython's cyfunctions) but not the properties of a
``cdef class`` (getset descriptors), and Cython's ``__test__`` table repeats the
functions' docstrings. The tests below walk those too, drop the repeats, and check that
the number of examples collected equals the number of ``>>>`` lines in the sources, so
an example cannot silently stop running.

An example that needs a framework (an ``import`` of it, or a ``convert``/``explain``
to it) is marked ``needs(...)``: it skips, naming the framework, where that is not
installed.
"""

from __future__ import annotations

import ast
import doctest
import importlib
import inspect
import pathlib
import re
from collections.abc import Iterator
from types import ModuleType

import pytest
from needs import needs

from tensorbridge._frameworks import FRAMEWORKS

ROOT = pathlib.Path(__file__).resolve().parent.parent
SOURCE = ROOT / "src" / "tensorbridge"
DOCUMENTS = [
    ROOT / "README.md",
    ROOT / "CONTRIBUTING.md",
    *sorted(p for p in (ROOT / "docs").rglob("*.md") if p.relative_to(ROOT).parts[1] != "_build"),
]
FLAGS = doctest.ELLIPSIS

# A fenced Markdown block: its opening fence, info string, body and closing fence.
_FENCE = re.compile(
    r"^(?P<fence>```+|~~~+)(?P<info>[^\n]*)\n(?P<body>.*?)^(?P=fence)[ \t]*$", re.M | re.S
)
_PROMPT = re.compile(r"^\s*>>>", re.M)


# -- collection ------------------------------------------------------------------


def module_names() -> list[str]:
    """The package's modules, from the source tree: every .py and .pyx module and
    subpackage (not ``__main__``, which runs the command line when imported)."""
    names = []
    for path in sorted(SOURCE.rglob("*")):
        if path.suffix not in (".py", ".pyx") or path.stem == "__main__":
            continue
        parts = path.relative_to(SOURCE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names.append(".".join(parts))
    return names


def _documented_members(cls: type) -> Iterator[tuple[str, str]]:
    """(name, docstring) of the attributes of ``cls`` that DocTestFinder skips: the
    getset and member descriptors of an extension type (a cdef class's properties)."""
    for name, member in vars(cls).items():
        if inspect.isgetsetdescriptor(member) or inspect.ismemberdescriptor(member):
            doc = member.__doc__
            if isinstance(doc, str):
                yield name, doc


def module_doctests(module: ModuleType) -> list[doctest.DocTest]:
    """The doctests of one module, each docstring once."""
    finder = doctest.DocTestFinder(exclude_empty=True)
    parser = doctest.DocTestParser()
    tests = finder.find(module, module.__name__)
    for name, value in vars(module).items():
        if inspect.isclass(value) and value.__module__ == module.__name__:
            for member, doc in _documented_members(value):
                test = parser.get_doctest(
                    doc,
                    dict(vars(module)),
                    f"{module.__name__}.{name}.{member}",
                    getattr(module, "__file__", None),
                    None,
                )
                if test.examples:
                    tests.append(test)
    # Cython's __test__ table holds the docstrings of functions found above as well
    # (without the signature line embedsignature adds): keep each list of examples
    # once, under its function's name.
    unique: dict[tuple[tuple[str, str], ...], doctest.DocTest] = {}
    for test in sorted(tests, key=lambda t: ".__test__." in t.name):
        if test.examples:
            unique.setdefault(tuple((e.source, e.want) for e in test.examples), test)
    return sorted(unique.values(), key=lambda t: t.name)


def document_doctests(path: pathlib.Path) -> list[doctest.DocTest]:
    """One doctest per fenced block of a Markdown file that holds ``>>>`` examples,
    each in a fresh namespace."""
    if not path.exists():
        return []
    text = path.read_text()
    parser = doctest.DocTestParser()
    tests = []
    for block in _FENCE.finditer(text):
        body = block.group("body")
        if not _PROMPT.search(body):
            continue
        line = text.count("\n", 0, block.start("body"))  # 0-based, as doctest counts
        name = f"{path.relative_to(ROOT)}:{line + 1}"
        tests.append(parser.get_doctest(body, {}, name, str(path), line))
    return tests


# -- what an example needs ---------------------------------------------------------


def _framework_names(source: str) -> set[str]:
    """The frameworks a piece of example code uses: the modules it imports (where they
    belong to a framework of the registry) and the targets of convert/explain calls."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()  # the doctest reports it
    modules = {m for f in FRAMEWORKS.values() for m in f.modules}
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.partition(".")[0] in modules)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.partition(".")[0] in modules:
                found.add(node.module)
        elif isinstance(node, ast.Call) and len(node.args) >= 2:
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            target = node.args[1]
            if (
                called in ("convert", "explain")
                and isinstance(target, ast.Constant)
                and target.value in FRAMEWORKS
            ):
                found.add(target.value)
    found.discard("tensorbridge")
    return found


def _param(test: doctest.DocTest) -> object:
    names: set[str] = set()
    for example in test.examples:
        names |= _framework_names(example.source)
    marks = [needs(*sorted(names))] if names else []
    return pytest.param(test, id=test.name, marks=marks)


def _once(tests: list[doctest.DocTest]) -> list[doctest.DocTest]:
    """Each list of examples once across modules: the public functions say they are
    tensorbridge's (``__module__``), so the package's module finds them too."""
    unique: dict[tuple[tuple[str, str], ...], doctest.DocTest] = {}
    for test in tests:
        unique.setdefault(tuple((e.source, e.want) for e in test.examples), test)
    return list(unique.values())


MODULE_DOCTESTS = _once(
    [t for name in module_names() for t in module_doctests(importlib.import_module(name))]
)
DOCUMENT_DOCTESTS = [t for path in DOCUMENTS for t in document_doctests(path)]


# -- the tests -----------------------------------------------------------------------


def run_doctest(test: doctest.DocTest) -> str:
    """Run one doctest; the report of its failures ("" when every example passed)."""
    report: list[str] = []
    runner = doctest.DocTestRunner(optionflags=FLAGS, verbose=False)  # not from sys.argv
    # The examples run in a copy of their namespace; globs is cleared afterwards.
    runner.run(test, out=report.append, clear_globs=True)
    return "".join(report)


@pytest.mark.parametrize("test", [_param(t) for t in MODULE_DOCTESTS + DOCUMENT_DOCTESTS])
def test_example(test: doctest.DocTest) -> None:
    report = run_doctest(test)
    if report:
        pytest.fail(f"{test.name}: an example's output differs\n{report}", pytrace=False)


def test_every_docstring_example_is_collected() -> None:
    # Each example starts with one ">>>" line: the sources' count must be what runs.
    written = sum(
        len(_PROMPT.findall(path.read_text()))
        for path in sorted(SOURCE.rglob("*"))
        if path.suffix in (".py", ".pyx", ".pxi") and path.stem != "__main__"
    )
    collected = sum(len(t.examples) for t in MODULE_DOCTESTS)
    assert collected == written, (
        f"{written} '>>>' lines in src/tensorbridge, {collected} examples collected: an "
        "example sits where Python cannot see it (a cdef function, a comment?)"
    )


def test_every_document_example_is_collected() -> None:
    for path in DOCUMENTS:
        if not path.exists():
            continue
        written = len(_PROMPT.findall(path.read_text()))
        collected = sum(len(t.examples) for t in document_doctests(path))
        assert collected == written, f"{path.name}: a '>>>' example outside a fenced block"


def test_readme_examples_are_doctests() -> None:
    # The README's Python blocks are doctests (`>>>` with the output shown), so their
    # output is checked rather than written as comments.
    text = (ROOT / "README.md").read_text()
    blocks = [b for b in _FENCE.finditer(text) if b.group("info").strip() in ("python", "pycon")]
    assert blocks, "README.md has no Python examples"
    plain = [
        text.count("\n", 0, b.start()) + 1 for b in blocks if not _PROMPT.search(b.group("body"))
    ]
    assert not plain, f"README.md blocks at lines {plain} are Python without '>>>' examples"


def test_a_wrong_output_fails() -> None:
    # The runner must report a mismatch (a doctest runner that passes everything would
    # make every test above pass).
    parser = doctest.DocTestParser()
    good = parser.get_doctest(">>> 1 + 1\n2\n", {}, "good", None, 0)
    bad = parser.get_doctest(">>> 1 + 1\n3\n", {}, "bad", None, 0)
    assert run_doctest(good) == ""
    assert "Expected:\n    3\nGot:\n    2" in run_doctest(bad)
