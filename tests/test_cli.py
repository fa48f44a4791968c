# SPDX-License-Identifier: Apache-2.0
"""The tensorbridge command line."""

from __future__ import annotations

import html.parser
import importlib.util
import io
import json
import logging
import os
import pathlib
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
from needs import needs

import tensorbridge as tb
from tensorbridge._cli import QUIET_ENVIRONMENT, main, matrix, page, quiet, reasons
from tensorbridge._cli.probes import probe
from tensorbridge._cli.progress import Progress
from tensorbridge._frameworks import FRAMEWORKS

#: What a plain `pip install tensorbridge` lacks: every other framework, and ml_dtypes.
MISSING = sorted(
    {m for f in FRAMEWORKS.values() for m in f.modules} - {"numpy", "tensorbridge"} | {"ml_dtypes"}
)
#: Their distributions, hidden too (a framework whose distribution is installed but
#: whose module cannot be imported is a broken install, not a missing one).
MISSING_DISTRIBUTIONS = sorted({f.distribution or f.name for f in FRAMEWORKS.values()} - {"numpy"})
# Run the CLI as if only NumPy were installed: no other framework is found.
ONLY_NUMPY = (
    textwrap.dedent(
        """
    import importlib.metadata, sys
    class Block:
        blocked = set(MISSING)
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in self.blocked:
                raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)")
            return None
    sys.meta_path.insert(0, Block())
    _distribution = importlib.metadata.distribution
    def distribution(name):
        if name in DISTRIBUTIONS:
            raise importlib.metadata.PackageNotFoundError(name)
        return _distribution(name)
    importlib.metadata.distribution = distribution
    from tensorbridge._cli import main
    sys.exit(main(sys.argv[1:]))
    """
    )
    .replace("MISSING", repr(MISSING))
    .replace("DISTRIBUTIONS", repr(MISSING_DISTRIBUTIONS))
)


def cli(*args, only_numpy=False, timeout=600):
    """Run the command line in a subprocess."""
    command = (
        [sys.executable, "-c", ONLY_NUMPY] if only_numpy else [sys.executable, "-m", "tensorbridge"]
    )
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=timeout)


class Cells(html.parser.HTMLParser):
    """What a test reads of the --html page: the cells, the tags and the links."""

    def __init__(self):
        super().__init__()
        self.cells = []  # (class, title, text)
        self.tags = []
        self.links = []  # every src= and href=
        self.style = ""
        self._in = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append(tag)
        self.links += [attrs[k] for k in ("src", "href") if k in attrs]
        if tag == "td":
            self.cells.append([attrs.get("class"), attrs.get("title"), ""])
        self._in = tag

    def handle_endtag(self, tag):
        self._in = None

    def handle_data(self, data):
        if self._in == "td":
            self.cells[-1][2] += data
        elif self._in == "style":
            self.style += data


def parse_page(text):
    parser = Cells()
    parser.feed(text)
    parser.close()
    return parser


def test_matrix_with_only_numpy_installed():
    result = cli("--dtypes", only_numpy=True)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    frameworks = next(line for line in out.splitlines() if line.startswith("frameworks:"))
    assert frameworks.split(":")[1].split()[0] == "numpy" and "," not in frameworks
    rows = {
        line.split()[0]: line.split()
        for line in out.splitlines()
        if line.startswith(("numpy ", "tensorbridge "))
    }
    assert rows["numpy"][1] == "S"  # numpy -> numpy, native: zero-copy
    assert "8 exchanges in" in out  # 2 producers x 2 consumers x 2 routes
    # Without ml_dtypes (a plain `pip install .`) float8/6/4 values cannot be made (the
    # sweep says so instead of failing); bfloat16 ones can (asarray fills them in C).
    untested = next(line for line in out.splitlines() if line.startswith("not tested: "))
    assert "float8_e4m3fn" in untested and "pip install ml-dtypes" in untested
    assert "bfloat16" not in untested
    coverage = next(line for line in out.splitlines() if line.startswith("dtypes "))
    # The 14 standard dtypes intact both ways; bfloat16 is one NumPy cannot hold.
    assert "14/15 · 14/15" in coverage
    assert "Warning" not in result.stderr
    assert result.stderr == ""  # stderr is a pipe here: no progress either


def test_matrix_json():
    result = cli("--json", "--dtypes", "--frameworks", "numpy,torch", "--no-timing")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["dlpack"] == [1, 3]
    assert set(data["frameworks"]) == {"numpy", "torch", "tensorbridge"}
    exchanges = {(e["producer"], e["consumer"], e["route"]): e for e in data["exchanges"]}
    assert len(exchanges) == 3 * 3 * 2
    for route in ("native", "convert"):
        e = exchanges[("numpy", "torch", route)]
        assert e["status"] == "zero-copy" and e["write_through"] is True
    assert exchanges[("tensorbridge", "tensorbridge", "native")]["status"] == "zero-copy"
    assert data["dtypes"]["numpy"]["bfloat16"] == {"native": False, "convert": True}
    assert data["dtypes"]["torch"]["float8_e4m3fn"] == {"native": True, "convert": True}
    assert data["process_changes"] == []  # no JAX here: nothing changed
    for e in data["exchanges"]:
        assert e["reason"], e  # every cell says why, shared ones included
    shared = exchanges[("numpy", "torch", "native")]["reason"]
    assert (
        shared
        == "same data address; a write through the numpy source was read through the torch result"
    )


def test_the_sweep_runs_only_when_asked():
    text = cli("--frameworks", "numpy", "--no-timing", only_numpy=True)
    assert text.returncode == 0, text.stderr
    assert "dtypes: not swept (tensorbridge --dtypes sends all 26 dtypes" in text.stdout
    assert "Every dtype" not in text.stdout and "dtype coverage" not in text.stdout
    data = json.loads(cli("--json", "--frameworks", "numpy", "--no-timing").stdout)
    assert data["dtypes"] is None and data["untested_dtypes"] is None
    assert data["native_untried"] is None
    # --markdown (docs/compatibility.md) always has it.
    md = cli("--markdown", "--frameworks", "numpy", "--no-timing").stdout
    assert "## Every dtype" in md
    help_text = cli("--help").stdout
    assert "--dtypes" in " ".join(help_text.split()) and "--markdown always includes it" in (
        " ".join(help_text.split())
    )


def test_matrix_dtypes_and_markdown():
    result = cli("--dtypes", "--frameworks", "numpy", "--no-timing")
    assert result.returncode == 0, result.stderr
    assert "float8_e4m3fn" in result.stdout and "Every dtype" in result.stdout
    md = cli("--markdown", "--frameworks", "numpy", "--no-timing").stdout
    assert md.startswith("# Compatibility")
    assert "## Quirks tensorbridge handles" in md and "### torch" in md
    assert "| producer \\ consumer |" in md


def test_unknown_framework_is_an_error():
    result = cli("--frameworks", "numpy,caffe")
    assert result.returncode == 2 and "unknown framework(s) caffe" in result.stderr


def test_frameworks_take_the_names_convert_takes_and_report_what_is_missing():
    result = cli("--frameworks", "np,paddle,cupy", "--no-timing", only_numpy=True)
    assert result.returncode == 1, result.stderr  # the matrix, but not all of it
    assert "paddle is not installed here (pip install paddlepaddle); left out" in result.stderr
    assert "cupy is left out: it needs a GPU" in result.stderr
    frameworks = next(line for line in result.stdout.splitlines() if line.startswith("frameworks:"))
    assert frameworks.split(":")[1].split()[0] == "numpy"


def test_conflicting_outputs_are_refused():
    result = cli("--json", "--markdown")
    assert result.returncode == 2 and "not allowed with argument" in result.stderr


@pytest.mark.parametrize(
    "args",
    ["--frameworks numpy --no-timing --dtypes", "inspect 'np.arange(100).reshape(10, 10)'"],
)
def test_a_closed_pipe_ends_quietly(args):
    command = f'"{sys.executable}" -m tensorbridge {args} | head -1'
    result = subprocess.run(
        ["bash", "-o", "pipefail", "-c", command], capture_output=True, text=True, timeout=600
    )
    assert result.stdout.count("\n") == 1
    assert "Traceback" not in result.stderr and "BrokenPipeError" not in result.stderr


def test_frameworks_naming_nothing_is_an_error():
    result = cli("--frameworks", " , ")
    assert result.returncode == 2 and "names no framework" in result.stderr


def test_a_profiler_still_gets_its_results(tmp_path):
    # The console entry ends with os._exit, except under a profiler (or coverage).
    out = tmp_path / "profile.out"
    command = [sys.executable, "-m", "cProfile", "-o", str(out), "-m", "tensorbridge", "--version"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert out.stat().st_size > 0


def test_version():
    result = cli("--version")
    assert result.stdout.startswith("tensorbridge ") and "(DLPack 1.3)" in result.stdout


def test_inspect_numpy_expression():
    result = cli("inspect", "np.arange(6)[::2]", only_numpy=True)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "type:         numpy.ndarray" in out
    assert "__dlpack__(max_version=(1, 3)):" in out and "capsule:      dltensor_versioned" in out
    assert "dtype:        int64 (code 0, bits 64, lanes 1)" in out
    assert "strides:      (2,)  (elements)" in out and "shape:        (3,)" in out
    assert "__dlpack__(legacy ()):" in out and "capsule:      dltensor\n" in out


@needs("torch")
def test_inspect_torch_and_read_only():
    result = cli("inspect", "torch.arange(4)[::2]")
    assert result.returncode == 0, result.stderr
    assert "C exchange API: __dlpack_c_exchange_api__" in result.stdout
    ro = cli("inspect", "tb.asarray(b'12345678', dtype='uint8')", only_numpy=True).stdout
    assert "flags:        1 READ_ONLY" in ro
    assert "fails: BufferError: __dlpack__(): cannot export a read-only tensor" in ro


def test_inspect_errors():
    result = cli("inspect", "1 +", only_numpy=True)
    assert result.returncode == 2 and "evaluating '1 +' failed: SyntaxError" in result.stderr
    result = cli("inspect", "[1, 2]", only_numpy=True)
    assert result.returncode == 1 and "no DLPack export" in result.stdout


@pytest.mark.parametrize("argv", [["-m", "tensorbridge", "--version"]])
def test_command_line_prints_the_version(argv):
    out = subprocess.run(
        [sys.executable, *argv], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    assert out.startswith(f"tensorbridge {tb.__version__} (DLPack 1.3)")


# --------------------------------------------------------------------------
# Progress on stderr
# --------------------------------------------------------------------------


class Terminal(io.StringIO):
    """A stderr that says it is a terminal."""

    def isatty(self):
        return True


def screen(written):
    """What a terminal shows of text written with carriage returns (one line)."""
    line = ""
    for part in written.split("\r"):
        line = part + line[len(part) :]
    return line


def test_progress_rewrites_one_line_and_clears_it():
    stream = Terminal()
    progress = Progress(stream)
    progress("importing torch… 3/9")
    progress("probing torch→jax 12/100")
    progress("short")
    assert screen(stream.getvalue()).rstrip() == "short"
    assert "\n" not in stream.getvalue()
    progress.clear()
    assert screen(stream.getvalue()).strip() == ""
    quiet = io.StringIO()  # not a terminal
    Progress(quiet)("importing numpy… 1/2")
    assert quiet.getvalue() == ""


def test_the_matrix_shows_progress_on_a_terminal(monkeypatch, capsys):
    for name, value in QUIET_ENVIRONMENT.items():
        monkeypatch.setenv(name, value)  # restored after the test
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert main(["--frameworks", "numpy", "--no-timing", "--dtypes"]) == 0
    shown = terminal.getvalue()
    steps = shown.split("\r")
    assert any(s.startswith("importing numpy… 1/2") for s in steps)
    assert any(s.startswith("probing numpy→tensorbridge 2/4") for s in steps)
    assert any(s.startswith("dtype sweep: tensorbridge 2/2") for s in steps)
    assert shown.endswith("\r") and screen(shown).strip() == ""  # cleared at the end
    assert "\n" not in shown  # nothing else was written to stderr
    assert "8 exchanges in" in capsys.readouterr().out  # the report went to stdout


def test_messages_clear_the_progress_line_first(monkeypatch, capsys):
    for name, value in QUIET_ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert main(["--frameworks", "numpy,cupy", "--no-timing"]) == 1
    lines = terminal.getvalue().split("\n")
    message = next(line for line in lines if "cupy is left out" in line)
    assert screen(message).startswith("tensorbridge: cupy is left out")


# --------------------------------------------------------------------------
# Time: no costly error paths, no waiting for the frameworks' teardown
# --------------------------------------------------------------------------


def test_the_console_entry_point_does_not_wait_for_teardown(monkeypatch):
    # main() with no arguments (the console script, python -m tensorbridge) ends the
    # process with os._exit once its output is flushed: atexit handlers (the
    # frameworks' teardown) do not run, and the exit status is kept.
    code = textwrap.dedent(
        """
        import atexit, sys
        atexit.register(lambda: print("teardown ran"))
        sys.argv = ["tensorbridge", *ARGS]
        from tensorbridge._cli import main
        main()
        print("main returned")
        """
    )
    for args, status in ((["--version"], 0), (["--frameworks", "caffe"], 2), (["--help"], 0)):
        run = subprocess.run(
            [sys.executable, "-c", code.replace("ARGS", repr(args))],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert run.returncode == status, run.stderr
        assert "teardown ran" not in run.stdout and "main returned" not in run.stdout
        assert run.stdout or run.stderr  # flushed before the end
    for name, value in QUIET_ENVIRONMENT.items():
        monkeypatch.setenv(name, value)  # main sets them: restored after the test
    assert main(["--version"]) == 0  # with arguments (the tests): it returns


def test_tvm_ffi_dtype_is_read_without_its_error_path():
    # tvm_ffi's .dtype raises for complex types, and its first error costs seconds:
    # the probe reads the DLPack export instead.
    class Complex:
        def __init__(self):
            self.t = tb.asarray([1.0, 2.0], dtype="complex64")

        @property
        def dtype(self):
            raise AssertionError(".dtype was read")

        def __dlpack__(self, **kwargs):
            return self.t.__dlpack__(**kwargs)

    assert probe("tvm_ffi").dtype_name(Complex()) == "complex64"


def test_the_sweep_does_not_take_a_consumers_costly_error_path(monkeypatch):
    called = []
    monkeypatch.setattr(
        probe("tvm_ffi"),
        "native_from_dlpack",
        classmethod(lambda cls, obj: called.append(obj.dtype.name)),
    )
    sweep = matrix.dtype_sweep(["tvm_ffi"])
    untried = probe("tvm_ffi").native_untried
    assert untried and not set(called) & untried
    assert all(not sweep["tvm_ffi"][d]["native"] for d in untried if d in sweep["tvm_ffi"])
    assert set(matrix.untried(["tvm_ffi", "numpy"])) == {"tvm_ffi"}


# --------------------------------------------------------------------------
# The frameworks' own logging
# --------------------------------------------------------------------------


def test_quiet_silences_framework_logging_and_warnings(capsys):
    handler = logging.StreamHandler(sys.stderr)
    logger = logging.getLogger("jax._src.xla_bridge")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        with quiet.quiet():
            logger.info("Unable to initialize backend 'tpu'")
            logger.error("an error of the framework")
            warnings.warn("import-time chatter", UserWarning, stacklevel=1)
        assert capsys.readouterr().err == ""
        logger.info("after the matrix")
        assert "after the matrix" in capsys.readouterr().err  # restored
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)


def test_what_native_code_writes_to_stderr_is_dropped_and_ours_is_not(capfd):
    # File descriptor 2 is where C and C++ code writes (TensorFlow's Abseil logging);
    # sys.stderr, where the command line writes, still reaches the real stderr.
    sys.stderr.write("before\n")
    with quiet.native_stderr_dropped():
        os.write(2, b"I0000 port.cc:153] oneDNN custom operations are on.\n")
        print("ours", file=sys.stderr)
        sys.stderr.flush()
    os.write(2, b"after\n")
    err = capfd.readouterr().err
    assert err == "before\nours\nafter\n"


def test_what_caches_the_stand_in_stderr_still_reaches_stderr_afterwards(capfd):
    # A framework imported inside quiet() may make a logging handler on sys.stderr
    # (the stand-in): it must still write to the real stderr once quiet() is over.
    with quiet.native_stderr_dropped():
        cached = sys.stderr
    with quiet.native_stderr_dropped():
        assert sys.stderr is cached  # one stand-in, re-pointed on every entry
    handler = logging.StreamHandler(cached)
    logger = logging.getLogger("tensorbridge-test-cached-stderr")
    logger.propagate = False  # (Paddle, imported first, gives the root logger a handler)
    logger.addHandler(handler)
    try:
        logger.error("still heard")
    finally:
        logger.removeHandler(handler)
    assert capfd.readouterr().err == "still heard\n"


@pytest.mark.parametrize(
    "args", [["--frameworks", "numpy", "--no-timing"], ["inspect", "np.ones(2)"], ["--version"]]
)
def test_a_closed_stdout_is_no_traceback(args):
    result = subprocess.run(  # (stdout closed by the shell: >&-)
        ["sh", "-c", 'exec "$0" -m tensorbridge "$@" >&-', sys.executable, *args],
        stderr=subprocess.PIPE,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and "Error" not in result.stderr


def test_a_closed_stderr_sends_nothing_to_stdout():
    for args, status in ((["--version"], 0), (["--frameworks", "caffe"], 2)):
        result = subprocess.run(  # (stderr closed by the shell: 2>&-)
            ["sh", "-c", 'exec "$0" -m tensorbridge "$@" 2>&-', sys.executable, *args],
            stdout=subprocess.PIPE,
            text=True,
            timeout=600,
        )
        assert result.returncode == status
        assert "unknown framework" not in result.stdout


def test_the_logging_environment_is_set_unless_the_user_set_it(monkeypatch):
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "1")
    monkeypatch.delenv("GLOG_minloglevel", raising=False)
    assert main(["--version"]) == 0
    assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == "1"  # the user's own
    # glog reads its flags from GLOG_<flag name>, in the flag's own case.
    glog = "GLOG_minloglevel"
    assert os.environ[glog] == QUIET_ENVIRONMENT[glog]


def _console_script() -> str:
    """The ``tensorbridge`` command of this interpreter's environment (as a user runs it)."""
    script = pathlib.Path(sys.executable).parent / "tensorbridge"
    if not script.exists():
        pytest.skip("the tensorbridge console script is not installed")
    return str(script)


@needs("paddle", "jax", "tensorflow")
def test_frameworks_log_nothing_to_stderr():
    # As a user runs it: the console script, with none of the logging settings in
    # the environment. TF_ENABLE_ONEDNN_OPTS=1 turns on what TensorFlow 2.21 does by
    # default on CPUs with AVX-512 or AMX, whatever this CPU has: it then writes
    # "oneDNN custom operations are on" through Abseil's logging, which no log level
    # silences. The control shows it does here too, so the command's empty stderr
    # is its own doing (it drops what the frameworks write to file descriptor 2).
    env = {k: v for k, v in os.environ.items() if k not in QUIET_ENVIRONMENT}
    env["TF_ENABLE_ONEDNN_OPTS"] = "1"
    control = subprocess.run(
        [sys.executable, "-c", "import tensorflow"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert "oneDNN custom operations are on" in control.stderr
    result = subprocess.run(
        [_console_script(), "--frameworks", "paddle,jax,tf", "--no-timing"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    inspected = subprocess.run(
        [_console_script(), "inspect", "tf.constant([1.0])"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert inspected.returncode == 0, inspected.stderr
    assert inspected.stderr == "" and "dltensor" in inspected.stdout


# --------------------------------------------------------------------------
# Frameworks that are installed but do not import
# --------------------------------------------------------------------------

BROKEN = "libtvm_ffi.so: cannot open shared object file: No such file or directory"


@pytest.fixture
def broken_tvm_ffi(tmp_path):
    """An environment whose tvm_ffi is found, and fails to import (a missing library)."""
    (tmp_path / "tvm_ffi.py").write_text(f"raise ImportError({BROKEN!r})\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path), env.get("PYTHONPATH")]))
    return env


def test_a_framework_that_fails_to_import_is_listed_with_its_error(broken_tvm_ffi):
    for args in (["--frameworks", "tvm_ffi,numpy"], []):
        result = subprocess.run(
            [sys.executable, "-m", "tensorbridge", *args, "--no-timing"],
            capture_output=True,
            text=True,
            timeout=600,
            env=broken_tvm_ffi,
        )
        assert result.returncode == 1, result.stderr
        said = f"importing tvm_ffi failed: ImportError: {BROKEN}"
        fix = "pip install --force-reinstall apache-tvm-ffi"
        assert f"tvm_ffi is left out: {said}" in result.stderr and fix in result.stderr
        assert "not installed" not in result.stderr
        assert f"left out: tvm_ffi: {said}" in result.stdout  # the report says so too
        frameworks = next(line for line in result.stdout.splitlines() if "frameworks:" in line)
        assert "tvm_ffi" not in frameworks and "numpy" in frameworks
    data = json.loads(
        subprocess.run(
            [sys.executable, "-m", "tensorbridge", "--json", "--frameworks", "tvm_ffi,numpy"],
            capture_output=True,
            text=True,
            timeout=600,
            env=broken_tvm_ffi,
        ).stdout
    )
    assert BROKEN in data["skipped"]["tvm_ffi"]


def test_convert_says_a_broken_framework_is_broken_not_missing(broken_tvm_ffi):
    code = "import numpy as np, tensorbridge as tb; tb.convert(np.ones(3), 'tvm_ffi')"
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=600,
        env=broken_tvm_ffi,
    )
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: convert(): converting to tvm_ffi needs tvm_ffi, and")
    assert f"importing tvm_ffi failed: ImportError: {BROKEN}" in last
    assert "not installed" not in last


def test_installed_tells_a_missing_framework_from_a_broken_one(monkeypatch):
    tvm = FRAMEWORKS["tvm_ffi"]
    assert tvm.installed() == (importlib.util.find_spec("tvm_ffi") is not None)

    class Missing(tvm):  # type: ignore[misc, valid-type]
        module_name = "tensorbridge_no_such_module"
        distribution = "tensorbridge-no-such-distribution"

    assert not Missing.installed()
    with pytest.raises(ImportError, match=r"which is not installed \(pip install tensorbridge-no"):
        Missing.module()
    numpy_1 = ImportError("A module that was compiled using NumPy 1.x cannot be run in NumPy 2")
    assert "pip install 'numpy<2'" in tvm.import_failure(numpy_1)
    assert tvm.import_failure(RuntimeError("odd")) == "importing tvm_ffi failed: RuntimeError: odd"


# --------------------------------------------------------------------------
# inspect and check: the working directory, the usual names
# --------------------------------------------------------------------------


def test_check_and_inspect_find_modules_in_the_working_directory(tmp_path):
    (tmp_path / "mylib.py").write_text(
        "import numpy as np\n\ndef make():\n    return np.arange(3.0)\n"
    )
    # A file named like a module of Python's own does not shadow it (EXPR imports one
    # that nothing imported before).
    (tmp_path / "fractions.py").write_text("raise RuntimeError('shadowed fractions')\n")
    check = subprocess.run(
        [_console_script(), "check", "mylib:make"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert "PASS" in check.stdout
    inspected = subprocess.run(
        [_console_script(), "inspect", "(fractions.Fraction(1, 2), mylib.make())[1]"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert inspected.returncode == 0, inspected.stderr
    assert "dtype:        float64" in inspected.stdout


@needs("pandas")
def test_inspect_has_the_usual_names_of_data_libraries():
    result = cli("inspect", "pd.Series([1.0, 2.0]).to_numpy()")
    assert result.returncode == 0, result.stderr
    assert "shape:        (2,)" in result.stdout
    # Any installed module by its own name; a name that is neither stays an error.
    assert cli("inspect", "numpy.ones(2)").returncode == 0
    unknown = cli("inspect", "no_such_module_here.ones(2)")
    assert unknown.returncode == 2 and "NameError" in unknown.stderr


_ODD_EXPORTS = """
import ctypes

_new = ctypes.pythonapi.PyCapsule_New
_new.restype = ctypes.py_object
_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class Exports:
    def __init__(self, make):
        self.make = make

    def __dlpack__(self, **kwargs):
        return self.make()

    def __dlpack_device__(self):
        return (1, 0)


not_a_capsule = Exports(lambda: 42)
wrong_name = Exports(lambda: _new(1, b"foo", None))
no_name = Exports(lambda: _new(1, None, None))
"""


@pytest.mark.parametrize(
    ("expr", "says"),
    [
        ("odd.not_a_capsule", "gives builtins.int, not a DLPack capsule"),
        ("odd.wrong_name", "capsule:      foo  (not a DLPack capsule's name"),
        ("odd.no_name", "not a DLPack capsule (the capsule has no name)"),
        ("odd.wrong_name.__dlpack__()", "foo  (not a DLPack capsule's name"),
        # A class made by type() in EXPR has no __module__ (the namespace has no __name__).
        ("type('Made', (odd.Exports,), {})(lambda: 42)", "type:         Made"),
    ],
)
def test_inspect_says_what_is_wrong_with_an_export_without_a_traceback(
    tmp_path, monkeypatch, capsys, expr, says
):
    (tmp_path / "odd.py").write_text(_ODD_EXPORTS)
    monkeypatch.syspath_prepend(str(tmp_path))
    from tensorbridge._cli import inspect

    assert inspect.run(expr) == 1
    out = capsys.readouterr().out
    assert says in out and "Traceback" not in out


def test_inspect_imports_only_what_the_expression_names():
    code = textwrap.dedent(
        """
        import sys
        from tensorbridge._cli import main
        main(["inspect", "np.ones(2)"])
        print(sorted(m for m in ("pandas", "polars", "torch", "jax") if m in sys.modules))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600
    )
    assert result.stdout.strip().splitlines()[-1] == "[]", result.stdout + result.stderr


# --------------------------------------------------------------------------
# Reasons
# --------------------------------------------------------------------------


class Producer:
    """A producer that gives a legacy capsule whatever it is asked, and a device id
    of None."""

    def __init__(self):
        self.t = tb.asarray([1.0, 2.0, 3.0, 4.0])

    def __dlpack__(self, **kwargs):
        return self.t.__dlpack__()

    def __dlpack_device__(self):
        return (1, None)


def test_copy_reasons():
    mlx_copy = reasons.copied("native", probe("numpy"), probe("mlx"), np.ones(4))
    assert mlx_copy == "mlx.core.from_dlpack always copies into mlx's own memory"
    misaligned = np.zeros(32, dtype=np.float32)[1:]  # 4 bytes past an aligned start
    assert reasons.alignment_of(misaligned.ctypes.data) == 4
    jax_copy = reasons.copied("native", probe("numpy"), probe("jax"), misaligned)
    assert jax_copy == (
        "jax.dlpack.from_dlpack shares only 64-byte aligned memory; this numpy array is "
        "4-byte aligned"
    )
    other = reasons.copied("native", probe("numpy"), probe("torch"), np.ones(4))
    assert other.startswith("torch.from_dlpack copied numpy's array")


def test_failure_reasons_are_whole_and_say_what_was_wrong():
    raw = ValueError("PyCapsule_GetPointer called with incorrect name")
    why = reasons.failed("native", probe("jax"), probe("pyarrow"), Producer(), raw)
    assert why.startswith(
        'pyarrow.Array.from_dlpack asks for max_version=(1, 3) and reads only versioned "'
        'dltensor_versioned" capsules, but jax answers with a legacy "dltensor" capsule'
    )
    assert why.endswith("(ValueError: PyCapsule_GetPointer called with incorrect name)")
    device = TypeError(
        "device_from_local_hardware_id(): incompatible function arguments.\n"
        "    1. device_from_local_hardware_id(self, arg: int, /)\n\n"
        "Invoked with types: jaxlib._jax.Client, NoneType"
    )
    why = reasons.failed("native", probe("paddle"), probe("jax"), Producer(), device)
    assert why.startswith(
        "paddle's __dlpack_device__() gives the device id None where DLPack specifies an "
        "int, and jax.dlpack.from_dlpack passes it on"
    )
    assert why.endswith("Invoked with types: jaxlib._jax.Client, NoneType)")  # whole
    long = RuntimeError("x" * 400 + "\n  second line")
    assert reasons.failed("convert", probe("numpy"), probe("torch"), Producer(), long) == (
        "RuntimeError: " + "x" * 400 + " second line"
    )


@needs("jax", "pyarrow")
def test_json_and_html_reasons_for_copies_and_failures(tmp_path):
    out = tmp_path / "matrix.html"
    result = cli("--json", "--html", str(out), "--frameworks", "jax,pyarrow", "--no-timing")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)  # stdout keeps the JSON; the page goes to the file
    exchanges = {(e["producer"], e["consumer"], e["route"]): e for e in data["exchanges"]}
    assert all(e["reason"] for e in exchanges.values())
    failure = exchanges[("jax", "pyarrow", "native")]
    assert failure["status"] == "fails"
    assert 'jax answers with a legacy "dltensor" capsule' in failure["reason"]
    assert "PyCapsule_GetPointer called with incorrect name" in failure["reason"]
    # What the matrix changed in the process is said.
    assert any("jax_enable_x64 is switched on" in c for c in data["process_changes"])
    cells = parse_page(out.read_text(encoding="utf-8")).cells
    failed = [c for c in cells if c[0] == "failed"]
    assert failed and any("PyCapsule_GetPointer" in c[1] for c in failed)
    assert all(c[2].startswith("✗") for c in failed)


@needs("jax")
def test_what_the_matrix_changes_is_said_in_text_and_markdown():
    text = cli("--frameworks", "jax", "--no-timing")
    assert text.returncode == 0, text.stderr
    assert "changed in this process for the probes: JAX's jax_enable_x64 is switched on" in (
        text.stdout
    )
    md = cli("--markdown", "--frameworks", "jax", "--no-timing").stdout
    assert "\n\nChanged in this process for the probes: JAX's jax_enable_x64" in md


# --------------------------------------------------------------------------
# --html
# --------------------------------------------------------------------------


def test_html_page(tmp_path):
    out = tmp_path / "matrix.html"
    result = cli("--html", str(out), "--dtypes", "--frameworks", "numpy", only_numpy=True)
    assert result.returncode == 0, result.stderr
    assert "exchanges in" in result.stdout  # stdout still has the text
    text = out.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>")
    page_ = parse_page(text)
    exchanges = [c for c in page_.cells if c[0] in ("shared", "copied", "failed")]
    assert len(exchanges) == 2 * 2 * 2  # numpy and tensorbridge, both ways, two routes
    assert all(c[0] == "shared" and c[2].startswith("S") for c in exchanges)
    assert all(c[1] and "same data address" in c[1] for c in exchanges)
    dtypes = [c for c in page_.cells if c[0] in ("intact", "partial", "lost")]
    assert len(dtypes) == 2 * 15  # the 14 standard dtypes and bfloat16 (no ml_dtypes here)
    for css in ("shared", "copied", "failed"):
        assert f".{css}" in page_.style  # coloured by class, with a legend
        assert f'<span class="{css}">' in text
    # Self-contained: no script, no stylesheet or image fetched, no link out.
    assert "script" not in page_.tags and "link" not in page_.tags and "img" not in page_.tags
    assert page_.links == [] and "http" not in text and "url(" not in text


def test_html_escapes_everything(tmp_path):
    evil = "<script>alert(\"x\")</script> & 'quotes'"
    results = {
        (p, c, route): matrix.Exchange(status, reason=evil)
        for p in ("numpy", "tensorbridge")
        for c in ("numpy", "tensorbridge")
        for route, status in (("native", "fails"), ("convert", "copy"))
    }
    text = page.render(
        versions={"numpy": "<b>2</b>", "tensorbridge": "0"},
        skipped={"paddle": evil},
        changes=[evil],
        results=results,
        sweep=None,
        untested=None,
        seconds=1.0,
    )
    parsed = parse_page(text)
    assert "script" not in parsed.tags and "b" not in parsed.tags
    assert {c[0] for c in parsed.cells} == {"failed", "copied"}
    assert all(c[1].endswith(evil) for c in parsed.cells)  # the tooltip, unescaped
    assert "<script>" not in text and "&lt;script&gt;" in text


def test_html_refuses_what_it_cannot_write(tmp_path):
    result = cli("--html", "-", "--frameworks", "numpy", only_numpy=True)
    assert result.returncode == 2 and "--html needs a file name" in result.stderr
    missing = tmp_path / "no" / "such" / "dir" / "m.html"
    result = cli("--html", str(missing), "--frameworks", "numpy", only_numpy=True)
    assert result.returncode == 2 and "does not exist" in result.stderr
    assert "exchanges in" not in result.stdout  # refused before the matrix ran
    result = cli("--html", str(tmp_path), "--frameworks", "numpy", only_numpy=True)
    assert result.returncode == 2 and "is a directory" in result.stderr


def test_markdown_notes_keep_dunder_names_and_angle_brackets():
    from tensorbridge._cli import markdown

    reason = "paddle's __dlpack_device__() gives (<kDLCPU: 1>, None)"
    results = {
        (p, c, route): matrix.Exchange("fails", reason=reason)
        for p in ("numpy", "tensorbridge")
        for c in ("numpy", "tensorbridge")
        for route in ("native", "convert")
    }
    broken = "importing tvm_ffi failed: ImportError: <libtvm_ffi.so> __init__"
    kwargs = dict(
        versions={"numpy": "2", "tensorbridge": "0"},
        skipped={"tvm_ffi": broken},
        changes=[],
        results=results,
        sweep=None,
        untested=None,
        seconds=1.0,
    )
    md = markdown.report(markdown=True, **kwargs)
    assert r"- ✗1: paddle's \_\_dlpack_device\_\_() gives (\<kDLCPU: 1>, None)" in md
    assert (
        r"Left out: tvm_ffi: importing tvm_ffi failed: ImportError: \<libtvm_ffi.so> \_\_init" in md
    )
    text = markdown.report(markdown=False, **kwargs)
    assert f"  ✗1: {reason}" in text
    assert f"\nleft out: tvm_ffi: {broken}\n" in text
