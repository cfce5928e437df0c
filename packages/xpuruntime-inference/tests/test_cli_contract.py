"""The command line's contract, command by command: exit codes (0 success or no difference,
1 a runtime failure or a difference found, 2 a usage error), one-line errors, JSON that
parses, and input files that are never written over."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
from pathlib import Path

import click
import numpy as np
import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xpuruntime.inference.cli import main
from xpuruntime.inference.demo import DEMO_MODEL
from xpuruntime.policies import PolicyDocument
from xpuruntime.policies.bundle import BundleManifest, file_sha256


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner(env={"COLUMNS": "60"})


def invoke(runner: CliRunner, *args: str, env: dict[str, str] | None = None) -> Result:
    return runner.invoke(main, list(args), env=env, catch_exceptions=False)


def one_line_error(result: Result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.stderr
    assert "internal error" not in result.stderr
    assert "Traceback" not in result.output
    return lines[0]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    return Path(shutil.copy(DEMO_MODEL, tmp_path / "demo.onnx"))


def make_bundle(folder: Path, model: Path) -> Path:
    """A bundle directory as ``xpuruntime.pytorch.export`` writes one (manifest, model,
    policy, environment, reference I/O), for a model the engine's outputs define."""
    from xpuruntime.inference import InferenceSession

    folder.mkdir()
    shutil.copy(model, folder / "model.onnx")
    PolicyDocument().save(folder / "policy.json")
    (folder / "environment.json").write_text(json.dumps({"gpu": []}))
    image = np.random.default_rng(0).standard_normal((3, 1, 8, 8)).astype(np.float32)
    out = InferenceSession(folder / "model.onnx", device="cpu").run({"image": image})
    np.savez(
        folder / "reference.npz",
        **{"input/image": image, "output/probabilities": out["probabilities"]},
    )
    files = ["model.onnx", "policy.json", "environment.json", "reference.npz"]
    BundleManifest(
        inputs=["image"],
        outputs=["probabilities"],
        rtol=1e-4,
        atol=1e-5,
        files={name: file_sha256(folder / name) for name in files},
    ).save(folder)
    return folder


# -- 1. no command writes over a file it was asked to read ------------------------------------


def test_json_takes_no_path_so_a_second_model_is_not_overwritten(
    runner: CliRunner, demo: Path, tmp_path: Path
) -> None:
    other = Path(shutil.copy(demo, tmp_path / "demo2.onnx"))
    before = digest(other), digest(demo)
    result = invoke(runner, "inspect", "--json", str(other), str(demo))
    assert result.exit_code == 2
    assert "unexpected extra argument" in one_line_error(result)
    assert (digest(other), digest(demo)) == before


@pytest.mark.parametrize("command", ["inspect", "run"])
def test_json_out_refuses_an_input_and_a_file_that_is_not_json(
    runner: CliRunner, demo: Path, tmp_path: Path, command: str
) -> None:
    other = Path(shutil.copy(demo, tmp_path / "other.onnx"))
    before = digest(demo)
    args = [command, str(demo), *(["--dim", "batch=1"] if command == "run" else [])]
    onto_input = invoke(runner, *args, "--json-out", str(demo))
    assert onto_input.exit_code == 2
    assert "it is one of the command's inputs" in one_line_error(onto_input)
    onto_model = invoke(runner, *args, "--json-out", str(other))
    assert onto_model.exit_code == 2
    assert "does not hold JSON" in one_line_error(onto_model)
    assert digest(demo) == before == digest(other)
    previous = tmp_path / "out.json"
    previous.write_text("{}")
    again = invoke(runner, *args, "--json-out", str(previous))  # a previous output: replaced
    assert again.exit_code == 0, again.output
    assert json.loads(previous.read_text())


def test_record_and_save_outputs_never_write_over_inputs(
    runner: CliRunner, demo: Path, tmp_path: Path
) -> None:
    image = tmp_path / "out" / "probabilities.npy"
    image.parent.mkdir()
    np.save(image, np.zeros((2, 1, 8, 8), np.float32))
    before = digest(image), digest(demo)
    run = ["run", str(demo), "--input", f"image={image}"]
    saved = invoke(runner, *run, "--save-outputs", str(image.parent))
    assert saved.exit_code == 2
    assert "it is one of the command's inputs" in one_line_error(saved)
    recorded = invoke(runner, *run, "--record", str(demo))
    assert recorded.exit_code == 2
    assert "it is one of the command's inputs" in one_line_error(recorded)
    not_npy = tmp_path / "outs"
    not_npy.mkdir()
    (not_npy / "probabilities.npy").write_text("notes")
    refused = invoke(runner, *run, "--save-outputs", str(not_npy))
    assert refused.exit_code == 2
    assert "does not hold NPY" in one_line_error(refused)
    assert (digest(image), digest(demo)) == before
    assert (not_npy / "probabilities.npy").read_text() == "notes"


def test_lock_record_never_writes_over_the_model(runner: CliRunner, demo: Path) -> None:
    before = digest(demo)
    result = invoke(runner, "lock", "record", str(demo), "--lock", str(demo), "--dim", "batch=1")
    assert result.exit_code == 2
    assert "it is one of the command's inputs" in one_line_error(result)
    assert digest(demo) == before


@pytest.mark.parametrize(
    "flag",
    [["--record", "{dir}/x.json"], ["--json-out", "{dir}/x.json"], ["--save-outputs", "{f}"]],
)
def test_an_unwritable_output_is_one_line_not_an_internal_error(
    runner: CliRunner, demo: Path, tmp_path: Path, flag: list[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    value = flag[1].format(dir=tmp_path / "missing", f=blocker / "sub")
    result = invoke(runner, "run", str(demo), "--dim", "batch=1", flag[0], value)
    assert result.exit_code in (1, 2)
    message = one_line_error(result)
    assert str(tmp_path) in message


# -- 2. one exit-code contract ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["run", "{demo}", "--dim", "batch=0"], 2, "between 1 and"),
        (["run", "{demo}", "--dim", "batch=1e11"], 2, "--dim expects NAME=INT"),
        (["run", "{demo}", "--dim", "batch=100000000000"], 2, "between 1 and"),
        (["run", "{demo}", "--input-shapes", "image:0x1x8x8"], 2, "between 1 and"),
        (["run", "{demo}", "--dim", "batch=1", "--seed", "-5"], 2, "--seed"),
        (["run", "{demo}", "--dim", "batch=1", "--engine", "foo"], 2, "unknown engine 'foo'"),
        (["run", "{demo}", "--dim", "batch=1", "--device", "gpu"], 2, "'cuda:N'"),
        (["run", "{empty}"], 2, "is empty (0 bytes)"),
        (["run", "{garbage}"], 2, "InvalidModelError"),
        (["run", "{tmp}"], 2, "not a bundle"),
        (["inspect", "{empty}"], 2, "is empty (0 bytes)"),
        (["inspect", "{garbage}"], 2, "InvalidModelError"),
        (["bench", "{demo}", "--dim", "batch=1", "-n", "0"], 2, "--iterations"),
        (["explain", "{demo}", "--dim", "batch=1", "--engine", "nope"], 2, "unknown engine"),
        (["compare", "{demo}", "--engines", "ort:cpu,openvino:cpu", "--atol", "-1"], 2, "--atol"),
        (["compare", "{demo}", "--engines", "ort:cpu,openvino:cpu", "--rtol", "-1"], 2, "--rtol"),
        (["compare", "{demo}", "--engines", "foo:cpu,ort:cpu"], 2, "unknown engine 'foo'"),
        (["compare", "{demo}", "--engines", "ort:gpu,ort:cpu"], 2, "A GPU is 'cuda'"),
        (["run", "{demo}", "--dim", "batch=1", "--lock", "{tmp}/missing.json"], 2, "--lock"),
        (["lock", "replay", "{demo}", "--lock", "{tmp}/missing.json"], 2, "no such lockfile"),
        (["demo", "--batch", "0"], 2, "--batch"),
        (["cache", "list", "--dir", "/nonexistent"], 2, "does not exist"),
        (["cache", "clear", "--dir", "{cache}", "--kind", "foo"], 2, "unknown cache kind 'foo'"),
        (["cache", "list", "--dir", "{cache}", "--kind", "foo"], 2, "unknown cache kind 'foo'"),
        (["lock", "show", "{demo}"], 2, "Lockfile"),
        (["lock", "diff", "{empty}"], 2, "Lockfile"),
    ],
)
def test_usage_errors_exit_2_with_one_line(
    runner: CliRunner, demo: Path, tmp_path: Path, args: list[str], code: int, message: str
) -> None:
    empty = tmp_path / "empty.onnx"
    empty.touch()
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\xff\x00 not a model")
    cache = tmp_path / "cache"
    cache.mkdir()
    paths = {"demo": demo, "empty": empty, "garbage": garbage, "tmp": tmp_path, "cache": cache}
    result = invoke(runner, *(a.format(**paths) for a in args))
    assert result.exit_code == code, result.output
    assert message in one_line_error(result)


def test_success_exits_0_on_every_inventory_and_read_only_command(
    runner: CliRunner, demo: Path, tmp_path: Path
) -> None:
    (tmp_path / "cache" / "onnxruntime-optimized-model").mkdir(parents=True)
    for args in (
        ["engines", "--json"],
        ["devices", "--json"],
        ["inspect", str(demo), "--json"],
        ["cache", "list", "--dir", str(tmp_path), "--json"],
        ["cache", "clear", "--dir", str(tmp_path / "cache"), "--json"],
        ["cache", "explain", "--json"],
        ["lock", "schema", "--json"],
        ["policy", "kernels", "matmul", "--json"],
    ):
        result = invoke(runner, *args)
        assert result.exit_code == 0, (args, result.output)
        json.loads(result.stdout)


def test_lock_diff_exits_1_when_the_lockfiles_differ(
    runner: CliRunner, demo: Path, mlp: Path, tmp_path: Path
) -> None:
    first, second = tmp_path / "a.lock.json", tmp_path / "b.lock.json"
    for model, lock in ((demo, first), (mlp, second)):
        recorded = invoke(
            runner, "lock", "record", str(model), "--lock", str(lock), "--dim", "batch=1", "--json"
        )
        assert recorded.exit_code == 0, recorded.output
        assert json.loads(recorded.stdout)["decisions"]
    same = invoke(runner, "lock", "diff", str(first), str(first), "--json")
    assert same.exit_code == 0
    assert json.loads(same.stdout)["changes"] == []
    differ = invoke(runner, "lock", "diff", str(first), str(second), "--json")
    assert differ.exit_code == 1
    assert {c["kind"] for c in json.loads(differ.stdout)["changes"]} == {"added", "removed"}
    here = invoke(runner, "lock", "diff", str(first), "--json")
    assert here.exit_code == 0
    assert all(e["replays"] for e in json.loads(here.stdout)["entries"])
    shown = invoke(runner, "lock", "show", str(first), "--json")
    assert json.loads(shown.stdout)["entries"][0]["domain"] == "onnxruntime"


def test_lock_tables_do_not_break_words_off_a_terminal(
    runner: CliRunner, demo: Path, tmp_path: Path
) -> None:
    lock = tmp_path / "a.lock.json"
    invoke(runner, "lock", "record", str(demo), "--lock", str(lock), "--dim", "batch=1")
    shown = invoke(runner, "lock", "show", str(lock))
    assert shown.exit_code == 0
    assert "CPUExecutionProvider" in shown.stdout
    assert "│" not in shown.stdout  # no box lines, so no cell is folded mid-word
    assert "─" not in shown.stdout


# The bounded argument space of the hypothesis test below: valid and invalid values alike.
_VALUES = {
    "--dim": st.one_of(
        st.sampled_from(["batch=1", "batch=0", "batch=-3", "batch=1e11", "batch=", "=2", "x=2"]),
        st.text(max_size=8),
    ),
    "--input-shapes": st.one_of(
        st.sampled_from(["image:1x1x8x8", "image:0x1x8x8", "image:[2,1,8,8]", "image:1x2", ":"]),
        st.text(max_size=8),
    ),
    "--seed": st.one_of(st.integers(-(2**40), 2**40).map(str), st.text(max_size=4)),
    "--engine": st.sampled_from(["auto", "ort", "openvino", "tensorrt", "qnn", "foo", ""]),
    "--device": st.sampled_from(["cpu", "auto", "gpu", "cuda:x", "npu", "cuda:99", ""]),
    "--precision": st.sampled_from(["fp32", "fp16", "int8", "fp64"]),
    "--fallback": st.sampled_from(["allow", "warn", "error", "maybe"]),
    "--input": st.sampled_from(["image={demo}", "image={missing}", "image", "x=y.npy"]),
    "--json-out": st.sampled_from(["{demo}", "{missing}", "{tmp}", "{tmp}/out.json", "-"]),
}


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,  # the same 40 examples on every machine: CI stays reproducible
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    command=st.sampled_from(["run", "explain", "bench", "inspect"]),
    flags=st.lists(st.sampled_from(sorted(_VALUES)), max_size=3, unique=True).flatmap(
        lambda names: st.tuples(*(st.tuples(st.just(n), _VALUES[n]) for n in names))
    ),
)
def test_no_argument_reaches_an_internal_error(
    demo: Path, tmp_path: Path, command: str, flags: tuple[tuple[str, str], ...]
) -> None:
    before = digest(demo)
    args = [command, str(demo)]
    for name, value in flags:
        if command == "inspect" and name not in ("--json-out",):
            continue
        # Placeholders by replacement, not str.format: generated text may hold braces.
        for key, path in (("{demo}", demo), ("{missing}", tmp_path / "no" / "x")):
            value = value.replace(key, str(path))
        args += [name, value.replace("{tmp}", str(tmp_path))]
    if command == "bench":
        args += ["-n", "1", "--warmup", "0"]
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code in (0, 1, 2), result.output
    assert "internal error" not in result.output, (args, result.output)
    assert "Traceback" not in result.output
    if result.exit_code:
        one_line_error(result)
    assert digest(demo) == before


# -- 3. defaults: compare runs under the policy's fallback mode and says what ran ------------


def test_compare_states_what_each_side_ran(runner: CliRunner, demo: Path) -> None:
    pytest.importorskip("openvino")
    result = invoke(
        runner,
        "compare",
        str(demo),
        "--engines",
        "ort:cpu,openvino:cpu",
        "--dim",
        "batch=2",
        "--json",
    )
    assert result.exit_code == 0, result.output
    targets = json.loads(result.stdout)["targets"]
    assert [t["ran"] for t in targets] == [True, True]
    assert targets[0]["reason"].startswith("ran on onnxruntime:cpu in fp32")
    assert targets[1]["reason"].startswith("ran on openvino:")


def test_compare_follows_the_policy_fallback_and_lists_the_fallback(
    runner: CliRunner, demo: Path, without_cuda_ep: None
) -> None:
    # A GPU target where no GPU engine runs: under 'warn' it runs elsewhere and says so.
    warned = invoke(
        runner, "compare", str(demo), "--engines", "ort:cpu,ort:cuda", "--dim", "batch=2", "--json"
    )
    targets = json.loads(warned.stdout)["targets"]
    assert targets[1]["ran"], targets
    assert "fell back" in targets[1]["reason"]
    strict = invoke(
        runner,
        "compare",
        str(demo),
        "--engines",
        "ort:cpu,ort:cuda",
        "--dim",
        "batch=2",
        "--fallback",
        "error",
        "--json",
    )
    assert strict.exit_code == 1
    assert not json.loads(strict.stdout)["targets"][1]["ran"]
    from_env = invoke(
        runner,
        "compare",
        str(demo),
        "--engines",
        "ort:cpu,ort:cuda",
        "--dim",
        "batch=2",
        "--json",
        env={"XPURUNTIME_POLICY_FALLBACK": "error"},
    )
    assert from_env.exit_code == 1
    assert "FallbackError" in json.loads(from_env.stdout)["targets"][1]["reason"]


@pytest.mark.parametrize("engine", ["onnxruntime", "openvino"])
def test_a_dynamically_quantized_model_runs_without_a_precision_warning(
    runner: CliRunner, mlp: Path, tmp_path: Path, engine: str
) -> None:
    """Precision not given = what the model stores: nothing to warn about."""
    if engine == "openvino":
        pytest.importorskip("openvino")
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantized = tmp_path / "mlp.int8.onnx"
    quantize_dynamic(mlp, quantized, weight_type=QuantType.QInt8)
    result = invoke(runner, "run", str(quantized), "--dim", "batch=2", "--engine", engine)
    assert result.exit_code == 0, result.output
    assert "FallbackWarning" not in result.stderr, (engine, result.stderr)


# -- 4. output style and suggestions ----------------------------------------------------------


def test_device_gpu_suggests_cuda_not_npu(runner: CliRunner, demo: Path) -> None:
    result = invoke(runner, "run", str(demo), "--dim", "batch=1", "--device", "gpu")
    message = one_line_error(result)
    assert "Did you mean 'npu'" not in message
    assert "A GPU is 'cuda' (or 'cuda:N' for GPU N)" in message


# -- 5. XPURUNTIME_POLICY_* settings ----------------------------------------------------------


def test_cache_list_and_clear_use_the_policy_cache_dir(
    runner: CliRunner, demo: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "policy-cache"
    env = {
        "XPURUNTIME_POLICY_CACHE_DIR": str(folder),
        "XPURUNTIME_CACHE_DIR": str(tmp_path / "other"),
    }
    ran = invoke(runner, "run", str(demo), "--dim", "batch=1", env=env)
    assert ran.exit_code == 0, ran.output
    listed = json.loads(invoke(runner, "cache", "list", "--json", env=env).stdout)
    assert listed["root"] == str(folder)
    assert [e["kind"] for e in listed["entries"]] == ["onnxruntime-optimized-model"]
    cleared = json.loads(invoke(runner, "cache", "clear", "--json", env=env).stdout)
    assert len(cleared["removed"]) == 1


# -- 6. bundles and policy sources ------------------------------------------------------------


@pytest.mark.parametrize("command", ["run", "explain", "bench", "inspect"])
def test_commands_take_a_bundle_directory(
    runner: CliRunner, demo: Path, tmp_path: Path, command: str
) -> None:
    bundle = make_bundle(tmp_path / "bundle", demo)
    extra = ["-n", "2", "--warmup", "0"] if command == "bench" else []
    result = invoke(runner, command, str(bundle), *extra, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    if command == "run":
        assert data["outputs"][0]["shape"] == [3, 10]  # the bundle's reference inputs
        assert any("bundle" in note for note in data["record"]["notes"])
    if command == "inspect":
        assert data["inputs"][0]["name"] == "image"


def test_compare_takes_a_bundle_directory(runner: CliRunner, demo: Path, tmp_path: Path) -> None:
    pytest.importorskip("openvino")
    bundle = make_bundle(tmp_path / "bundle", demo)
    result = invoke(runner, "compare", str(bundle), "--engines", "ort:cpu,openvino:cpu", "--json")
    assert result.exit_code == 0, result.output
    assert all(t["ran"] for t in json.loads(result.stdout)["targets"])


# -- 7. --dim binds a symbolic dimension on every engine --------------------------------------


@pytest.mark.parametrize("engine", ["onnxruntime", "openvino"])
def test_dim_binds_the_files_symbolic_dimension_on_every_engine(
    runner: CliRunner, demo: Path, engine: str
) -> None:
    if engine == "openvino":
        pytest.importorskip("openvino")
    result = invoke(runner, "run", str(demo), "--dim", "batch=2", "--engine", engine, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["outputs"][0]["shape"] == [2, 10]


def test_every_command_has_json(runner: CliRunner) -> None:
    """--json on every command that prints a result (lock included). Commands whose result
    is a file they must be given (``-o FILE``: reports, traces) or a server print none."""

    def walk(command: click.Command, path: str) -> list[str]:
        if isinstance(command, click.Group):
            return [
                m for name, sub in command.commands.items() for m in walk(sub, f"{path} {name}")
            ]
        options = {o for p in command.params if isinstance(p, click.Option) for o in p.opts}
        to_a_file = any(
            isinstance(p, click.Option) and p.required and "-o" in p.opts for p in command.params
        )
        return [] if "--json" in options or to_a_file or path.endswith(" explore") else [path]

    assert walk(main, "xpuruntime") == []


def test_tables_on_a_narrow_terminal_never_break_a_word(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from xpuruntime.inference.cli.output import Output

    monkeypatch.setenv("COLUMNS", "40")
    out = Output()
    out.terminal = True  # what a terminal gets: rich box tables at the terminal's width
    table = out.table("Nodes", "node", "provider", "reason")
    table.add_row("conv", "CPUExecutionProvider", "the only provider the session was given")
    out.print(table)
    printed = capsys.readouterr().out
    words = {w.strip("│┃╭╮╰╯─━┬┴├┤┼ ") for line in printed.splitlines() for w in line.split()}
    word = "CPUExecutionProvider"
    pieces = {w for w in words if w and w.rstrip("…") in word and w != word}
    assert all(w.endswith("…") and word.startswith(w[:-1]) for w in pieces), printed
    assert any(w.startswith("CPU") for w in words), printed  # the cell is there


def test_cache_clear_refuses_a_folder_that_is_not_a_cache(
    runner: CliRunner, tmp_path: Path
) -> None:
    """Clearing removes every folder two levels down: never in a home or project folder."""
    home = tmp_path / "home"
    (home / "projects" / "thesis").mkdir(parents=True)
    (home / "projects" / "thesis" / "chapter1.tex").write_text("precious")
    result = invoke(runner, "cache", "clear", "--dir", str(home))
    assert result.exit_code == 2
    assert "does not look like an xpuruntime cache" in one_line_error(result)
    assert (home / "projects" / "thesis" / "chapter1.tex").read_text() == "precious"


def test_an_openvino_lock_entry_holds_openvino_names_not_python_reprs(
    runner: CliRunner, demo: Path, tmp_path: Path
) -> None:
    pytest.importorskip("openvino")
    lock = tmp_path / "ov.lock.json"
    args = ["lock", "record", str(demo), "--lock", str(lock), "--engine", "openvino"]
    recorded = invoke(runner, *args, "--dim", "batch=1")
    assert recorded.exit_code == 0, recorded.output
    (entry,) = json.loads(invoke(runner, "lock", "show", str(lock), "--json").stdout)["entries"]
    options = entry["choice"]["options"]
    assert all("<" not in value for value in options.values()), options
    if "INFERENCE_PRECISION_HINT" in options:
        assert options["INFERENCE_PRECISION_HINT"] in ("f32", "f16", "bf16")


def test_save_outputs_keeps_every_file_in_the_folder(runner: CliRunner, tmp_path: Path) -> None:
    """Output names may hold "/" and ".."; the files stay inside --save-outputs."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["../../escaped/y"], name="relu")],
        "slashes",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("../../escaped/y", TensorProto.FLOAT, [2])],
    )
    model = tmp_path / "slashes.onnx"
    onnx_model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx_model.ir_version = 8
    model.write_bytes(onnx_model.SerializeToString())
    folder = tmp_path / "a" / "b" / "out"
    result = invoke(runner, "run", str(model), "--save-outputs", str(folder))
    assert result.exit_code == 0, result.output
    assert [p.name for p in folder.iterdir()] == ["_.._escaped_y.npy"]
    assert not (tmp_path / "a" / "escaped").exists()


# -- 9. a bundle's files are inputs; outputs are checked before any work -----------------------


@pytest.mark.parametrize(
    "args",
    [
        ["run", "{b}", "--json-out", "{b}/bundle.json"],
        ["run", "{b}", "--json-out", "{b}/policy.json"],
        ["run", "{b}", "--json-out", "{b}/environment.json"],
        ["run", "{b}", "--json-out", "{b}/lock.json"],
        ["run", "{b}", "--record", "{b}/bundle.json"],
        ["run", "{b}", "--save-outputs", "{b}"],
        ["run", "{b}", "--save-outputs", "{b}/outs"],
        ["explain", "{b}", "--json-out", "{b}/policy.json"],
        [
            "compare",
            "{b}",
            "--engines",
            "onnxruntime:cpu,openvino:cpu",
            "--json-out",
            "{b}/bundle.json",
        ],
        ["bundle", "verify", "{b}", "--json-out", "{b}/bundle.json"],
        ["lock", "record", "{b}", "--lock", "{b}/lock.json"],
        ["report", "{b}", "-o", "{b}/report.html"],
        ["timeline", "{b}", "-o", "{b}/trace.json"],
        ["explore", "{b}", "--node-data-out", "{b}/nd"],
    ],
)
def test_no_output_lands_in_an_input_bundle(
    runner: CliRunner, demo: Path, tmp_path: Path, args: list[str]
) -> None:
    bundle = make_bundle(tmp_path / "b.bundle", demo)
    (bundle / "lock.json").write_text("{}")
    before = {p.name: digest(p) for p in bundle.iterdir()}
    result = invoke(runner, *(a.format(b=bundle) for a in args))
    assert result.exit_code == 2, result.output
    assert "input folder" in one_line_error(result)
    assert {p.name: digest(p) for p in bundle.iterdir()} == before


@pytest.mark.parametrize(
    "args",
    [
        ["report", "{m}", "--dim", "batch=2", "-o", "/nonexistent-xrt/x.html"],
        ["timeline", "{m}", "--dim", "batch=2", "-o", "/nonexistent-xrt/t.json"],
        ["timeline", "{m}", "--dim", "batch=2", "-o", "{m}/t.json"],
        ["explore", "{m}", "--dim", "batch=2", "--node-data-out", "/proc/xrt-nd"],
        ["run", "{m}", "--dim", "batch=2", "--save-outputs", "/proc/xrt-outs"],
        ["run", "{m}", "--dim", "batch=2", "--json-out", "/proc/xrt.json"],
    ],
)
def test_an_unwritable_output_is_a_usage_error_before_any_work(
    runner: CliRunner, demo: Path, args: list[str]
) -> None:
    before = digest(demo)
    result = invoke(runner, *(a.format(m=demo) for a in args))
    assert result.exit_code == 2, result.output
    assert "cannot write" in one_line_error(result)
    assert "ms" not in result.stdout  # nothing ran
    assert digest(demo) == before


def test_report_rejects_a_kernel_trace_that_is_not_a_trace(
    runner: CliRunner, demo: Path, tmp_path: Path
) -> None:
    text = tmp_path / "text.onnx"
    text.write_text("hello")
    out = tmp_path / "r.html"
    result = invoke(runner, "report", str(demo), "--dim", "batch=2", "-o", str(out),
                    "--kernel-trace", str(text))  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "not a Chrome trace" in one_line_error(result)
    assert not out.exists()
    assert text.read_text() == "hello"


def test_report_rejects_an_unknown_compare_engine(
    runner: CliRunner, demo: Path, tmp_path: Path
) -> None:
    out = tmp_path / "r.html"
    result = invoke(runner, "report", str(demo), "--dim", "batch=2", "-o", str(out),
                    "--compare", "foo:cpu")  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "unknown engine 'foo'" in one_line_error(result)
    assert not out.exists()


def test_report_without_bokeh_says_what_to_install(
    runner: CliRunner, demo: Path, tmp_path: Path
) -> None:
    if importlib.util.find_spec("bokeh") is not None:
        pytest.skip("Bokeh is installed here: the report is drawn (test_visual_report)")
    out = tmp_path / "r.html"
    result = invoke(runner, "report", str(demo), "--dim", "batch=2", "-o", str(out))
    assert result.exit_code == 1, result.output
    assert "xpuruntime[report]" in one_line_error(result)
    assert not out.exists()


@pytest.mark.parametrize(
    "args",
    [
        ["report", "{b}", "-o", "{t}/r.html", "--no-times"],
        ["timeline", "{b}", "-o", "{t}/t.json"],
        ["explore", "{b}", "--node-data-out", "{t}/nd", "--no-times"],
    ],
)
def test_visual_commands_feed_a_bundle_its_reference_inputs(
    runner: CliRunner, demo: Path, tmp_path: Path, args: list[str]
) -> None:
    if args[0] == "report":
        pytest.importorskip("bokeh", reason="the report needs Bokeh: xpuruntime[report]")
    bundle = make_bundle(tmp_path / "b.bundle", demo)
    result = invoke(runner, *(a.format(b=bundle, t=tmp_path) for a in args))
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("command", [["run"], ["lock", "replay"], ["explain"], ["bench"]])
def test_a_lock_that_is_not_a_lockfile_is_a_usage_error(
    runner: CliRunner, demo: Path, tmp_path: Path, command: list[str]
) -> None:
    text = tmp_path / "text.onnx"
    text.write_text("hello")
    result = invoke(runner, *command, str(demo), "--dim", "batch=2", "--lock", str(text))
    assert result.exit_code == 2, result.output
    assert "LockfileError" in one_line_error(result)
    assert text.read_text() == "hello"


@pytest.mark.parametrize("args", [["policy", "kernels", "bogus"], ["policy", "diff", "{p}", "{t}"]])
def test_policy_usage_errors_exit_2_under_xpuruntime(
    runner: CliRunner, tmp_path: Path, args: list[str]
) -> None:
    good = PolicyDocument().save(tmp_path / "p1.json")
    text = tmp_path / "text.onnx"
    text.write_text("hello")
    result = invoke(runner, *(a.format(p=good, t=text) for a in args))
    assert result.exit_code == 2, result.output
    one_line_error(result)
    assert text.read_text() == "hello"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--dim", "batch=-1"], "--dim batch: the value must be an integer between 1 and"),
        (["--dim", "batch=2", "--dim", "batch=3"], "--dim batch is given twice"),
        (["--dim", "batch=2", "--json-out", "{t}/a.json", "--json-out={t}/b.json"],
         "--json-out is given twice"),
        (["--dim", "batch=2", "--record", "{t}/a.json", "--record", "{t}/b.json"],
         "--record is given twice"),
    ],
)  # fmt: skip
def test_repeated_and_negative_values_are_usage_errors(
    runner: CliRunner, demo: Path, tmp_path: Path, args: list[str], message: str
) -> None:
    result = invoke(runner, "run", str(demo), *(a.format(t=tmp_path) for a in args))
    assert result.exit_code == 2, result.output
    assert message in one_line_error(result)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo.onnx"]


def test_output_folders_that_are_not_bundles_hold_other_outputs(
    runner: CliRunner, demo: Path, tmp_path: Path
) -> None:
    """Only a bundle folder is an input: --save-outputs and --cache-dir folders are where a
    command writes, so --json-out and --record may go there."""
    (tmp_path / "c").mkdir()
    result = invoke(runner, "run", str(demo), "--dim", "batch=2", "--save-outputs",
                    str(tmp_path), "--cache-dir", str(tmp_path / "c"), "--json-out",
                    str(tmp_path / "r.json"), "--record", str(tmp_path / "c" / "rec.json"))  # fmt: skip
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "r.json").read_text())["outputs"]
    assert (tmp_path / "probabilities.npy").is_file()


@pytest.mark.parametrize("command", [["timeline", "-o", "{t}/t.json"], ["run"]])
def test_unbound_dimensions_are_named_as_the_file_names_them(
    runner: CliRunner, demo: Path, tmp_path: Path, command: list[str]
) -> None:
    """OpenVINO reports the dimension unnamed (``image[?, 1, 8, 8]``); every command names
    it as the file does, so the suggested --dim works."""
    pytest.importorskip("openvino")
    args = [command[0], str(demo), *(a.format(t=tmp_path) for a in command[1:])]
    result = invoke(runner, *args, "--engine", "openvino")
    assert result.exit_code == 2, result.output
    assert "image[batch, 1, 8, 8]" in one_line_error(result)
