"""The tiny model kit: content hash, tokenizer contract, weight rounding, training, the shipped kit.

Unit tests build a deliberately tiny kit (one layer, a handful of steps) on synthetic data in a
temporary cache; the real kit is the one shipped under ``kit/``, checked here without training.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from tools.kit import BASE, KitParams, QuantSpec, TrainParams, ensure_kit, kit_hash  # noqa: E402
from tools.kit.build import HOLD_TOLERANCE, MIN_DROP  # noqa: E402
from tools.kit.data import load_examples  # noqa: E402
from tools.kit.evaluate import exact_match, greedy_outputs  # noqa: E402
from tools.kit.manifest import SHIPPED_DIR, KitIntegrityError, read_manifest, sha256_file  # noqa: E402
from tools.kit.quantize import fake_quantize, quantize_model_  # noqa: E402
from tools.kit.ship import compare_with_shipped, ship_kit  # noqa: E402
from tools.kit.tokenizer import (  # noqa: E402
    CHAT_TEMPLATE,
    encode_example,
    render_prompt,
    train_tokenizer,
    training_texts,
)
from tools.kit.train import make_model, seed_everything, train_model  # noqa: E402

CITIES = ["Berlin", "Lyon", "Porto", "Oslo", "Dublin"]
TINY_TRAIN = TrainParams(
    vocab_size=320,
    hidden_size=128,
    intermediate_size=256,
    num_layers=1,
    num_heads=2,
    num_kv_heads=1,
    max_position_embeddings=256,
    steps=4,
    batch_size=4,
)
TINY = KitParams(train=TINY_TRAIN, variants=(QuantSpec(4, 32), QuantSpec(2, 32)))


def write_synthetic_suites(root: Path, rows: int = 8) -> list[Path]:
    """Two small templated tasks in the suites' ``<slug>/samples.jsonl`` layout."""
    files = []
    for slug, make in {
        "synth_sql": lambda i: (
            f"Question: customers in '{CITIES[i % 5]}'?",
            f"SELECT name FROM c WHERE city = '{CITIES[i % 5]}';",
        ),
        "synth_json": lambda i: (f"Summarize: Ana paid ${i}.5{i % 10} on day {i}.", json.dumps({"amount": i + 0.5})),
    }.items():
        folder = root / slug
        folder.mkdir(parents=True)
        lines = [json.dumps({"id": f"{slug}-{i}", "prompt": make(i)[0], "target": make(i)[1]}) for i in range(rows)]
        (folder / "samples.jsonl").write_text("\n".join(lines) + "\n")
        files.append(folder / "samples.jsonl")
    return files


@pytest.fixture(scope="module")
def tiny_kit(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("kitcache")
    files = write_synthetic_suites(tmp_path_factory.mktemp("suites"))
    return ensure_kit(cache_root=root, params=TINY, data_files=files), root, files


# --- content hash ---------------------------------------------------------------------------------


def test_it_hashes_the_same_inputs_to_the_same_value(tmp_path: Path) -> None:
    files = write_synthetic_suites(tmp_path)
    assert kit_hash(files, TINY) == kit_hash(list(reversed(files)), TINY)


def test_it_hashes_changed_data_or_params_to_a_new_value(tmp_path: Path) -> None:
    files = write_synthetic_suites(tmp_path)
    before = kit_hash(files, TINY)
    with files[0].open("a") as handle:
        handle.write(json.dumps({"id": "extra", "prompt": "p", "target": "t"}) + "\n")
    after_data = kit_hash(files, TINY)
    after_params = kit_hash(files, KitParams(train=TINY_TRAIN, variants=(QuantSpec(3, 32),)))
    assert len({before, after_data, after_params}) == 3


# --- tokenizer and chat template ------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer():
    texts = ["SELECT name FROM customers WHERE city = 'Lyon';", '{"amount": 12.5, "date": "2024-01-02"}'] * 20
    return train_tokenizer(texts, vocab_size=300, model_max_length=256)


@pytest.mark.parametrize(
    "text",
    ["SELECT name FROM c WHERE city = 'Porto';", '  {"a": [1, 2.50]}\n\n\tend ', "naïve café — ünïcödé ✓", ""],
)
def test_it_round_trips_text_exactly(tokenizer, text: str) -> None:
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ids) == text


def test_the_chat_template_renders_the_trained_prefix(tokenizer) -> None:
    messages = [{"role": "user", "content": "How many orders?"}]
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert tokenizer.chat_template == CHAT_TEMPLATE
    assert rendered == render_prompt("How many orders?") == "<|bos|><|user|>\nHow many orders?\n<|assistant|>\n"
    # vLLM tokenizes the rendered prompt without adding special tokens: ids must equal training's.
    prompt_ids, answer_ids = encode_example(tokenizer, "How many orders?", "SELECT 1;")
    assert tokenizer.encode(rendered, add_special_tokens=False) == prompt_ids
    assert prompt_ids[0] == tokenizer.bos_token_id
    assert answer_ids[-1] == tokenizer.eos_token_id
    assert tokenizer.eos_token_id not in answer_ids[:-1]


def test_an_assistant_turn_ends_with_eos(tokenizer) -> None:
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    rendered = tokenizer.apply_chat_template(messages, tokenize=False)
    assert rendered.endswith("<|assistant|>\na<|eos|>")


# --- weight rounding ------------------------------------------------------------------------------


@pytest.mark.parametrize("bits", [2, 3, 4])
@pytest.mark.parametrize("symmetric", [False, True])
def test_each_group_takes_at_most_2_to_the_bits_levels(bits: int, symmetric: bool) -> None:
    weight = torch.randn(16, 128, generator=torch.Generator().manual_seed(bits))
    rounded = fake_quantize(weight, QuantSpec(bits=bits, group_size=32, symmetric=symmetric))
    groups = rounded.reshape(-1, 32)
    assert max(len(torch.unique(group)) for group in groups) <= 2**bits
    assert not torch.equal(rounded, weight)


def test_8_bit_rounding_error_is_tiny_and_2_bit_is_not() -> None:
    weight = torch.randn(64, 256, generator=torch.Generator().manual_seed(0))
    error8 = (fake_quantize(weight, QuantSpec(8, 32)) - weight).abs()
    error2 = (fake_quantize(weight, QuantSpec(2, 32)) - weight).abs()
    # Half a step of a 255-level grid over each group's range.
    step = (weight.reshape(-1, 32).amax(1) - weight.reshape(-1, 32).amin(1)) / 255
    assert bool((error8.reshape(-1, 32) <= step[:, None] / 2 + 1e-6).all())
    assert error2.mean() > 20 * error8.mean()


def test_rounding_rejects_rows_that_do_not_split_into_groups() -> None:
    with pytest.raises(ValueError, match="group_size"):
        fake_quantize(torch.zeros(4, 48), QuantSpec(4, 32))


def test_quantizing_a_model_leaves_embeddings_and_norms_untouched(tokenizer) -> None:
    model = make_model(TINY_TRAIN, tokenizer)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    changed = quantize_model_(model, QuantSpec(2, 32))
    after = dict(model.named_parameters())
    assert changed and all(name.endswith("proj.weight") for name in changed)
    for name, value in before.items():
        if name in changed:
            assert not torch.equal(after[name], value), name
        else:
            assert torch.equal(after[name], value), name
    assert any("embed_tokens" in name for name in before)


# --- cached, atomic builds ------------------------------------------------------------------------


def test_a_built_kit_has_complete_servable_variants(tiny_kit) -> None:
    kit, root, _files = tiny_kit
    assert set(kit.variants) == {BASE, "w4g32", "w2g32"}
    assert kit.root.parent == root and kit.root.name == kit.hash[:16]
    for name, path in kit.variants.items():
        for required in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
            assert (path / required).is_file(), (name, required)
        assert kit.revision(name) == sha256_file(path / "model.safetensors")
    generation = json.loads((kit.path() / "generation_config.json").read_text())
    assert generation["eos_token_id"] == kit.manifest["tokenizer"]["eos_token_id"]
    assert json.loads((kit.path() / "config.json").read_text())["head_dim"] >= 64
    assert len({kit.revision(name) for name in kit.variants}) == 3
    manifest = kit.manifest
    assert manifest["training"]["steps"] == TINY_TRAIN.steps
    assert manifest["training"]["final_loss"] > 0
    assert manifest["degraded_variant"] == kit.degraded == "w2g32"
    assert set(manifest["variants"]["w2g32"]["accuracy"]["per_task"]) == {"synth_sql", "synth_json"}
    assert 0.0 <= kit.accuracy("w2g32", "synth_sql") <= 1.0
    assert not list(root.glob(".tmp-*"))


def test_a_second_call_reuses_the_cached_kit(tiny_kit, monkeypatch: pytest.MonkeyPatch) -> None:
    kit, root, files = tiny_kit

    def no_build(*args, **kwargs):
        raise AssertionError("a valid cached kit must not be rebuilt")

    monkeypatch.setattr("tools.kit.build.build_kit_into", no_build)
    again = ensure_kit(cache_root=root, params=TINY, data_files=files)
    assert again.root == kit.root and again.manifest == kit.manifest


def test_a_failed_build_leaves_no_kit_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = write_synthetic_suites(tmp_path / "suites")
    root = tmp_path / "cache"

    def crash(*args, **kwargs):
        raise RuntimeError("disk full while rounding weights")

    # Fails after the base model and tokenizer are on disk: the worst moment for a half kit.
    monkeypatch.setattr("tools.kit.quantize.write_quantized_variant", crash)
    with pytest.raises(RuntimeError, match="disk full"):
        ensure_kit(cache_root=root, params=TINY, data_files=files)
    assert [p.name for p in root.iterdir() if not p.name.endswith(".lock")] == []


def test_a_damaged_kit_is_rebuilt(tmp_path: Path) -> None:
    files = write_synthetic_suites(tmp_path / "suites")
    root = tmp_path / "cache"
    params = KitParams(train=TINY_TRAIN, variants=(QuantSpec(4, 32),), evaluate=False)
    kit = ensure_kit(cache_root=root, params=params, data_files=files)
    (kit.path("w4g32") / "model.safetensors").write_bytes(b"truncated")
    rebuilt = ensure_kit(cache_root=root, params=params, data_files=files)
    assert rebuilt.root == kit.root
    assert sha256_file(rebuilt.path("w4g32") / "model.safetensors") == rebuilt.revision("w4g32")
    assert rebuilt.accuracy() is None  # evaluate=False measures nothing


def test_a_damaged_kit_with_an_extra_file_is_rebuilt(tmp_path: Path) -> None:
    files = write_synthetic_suites(tmp_path / "suites")
    params = KitParams(train=TINY_TRAIN, variants=(QuantSpec(4, 32),), evaluate=False)
    kit = ensure_kit(cache_root=tmp_path / "cache", params=params, data_files=files)
    stray = kit.path("w4g32") / "quantize_config.json"  # would change what vLLM serves
    stray.write_text("{}")
    rebuilt = ensure_kit(cache_root=tmp_path / "cache", params=params, data_files=files)
    assert not (rebuilt.path("w4g32") / "quantize_config.json").exists()


# --- training -------------------------------------------------------------------------------------


def test_a_short_training_run_learns_the_answers(tmp_path: Path) -> None:
    """150 steps on two templated tasks: from no exact answer to nearly all of them."""
    examples = load_examples(write_synthetic_suites(tmp_path, rows=8))
    pairs = [(example.prompt, example.target) for example in examples]
    vocabulary = train_tokenizer(training_texts(pairs), vocab_size=320, model_max_length=256)

    def accuracy(model) -> float:
        outputs = greedy_outputs(model, vocabulary, examples)
        return sum(exact_match(example, output) for example, output in zip(examples, outputs, strict=True)) / len(
            examples
        )

    seed_everything(0)
    assert accuracy(make_model(TINY_TRAIN, vocabulary)) == 0.0
    trained, report = train_model(
        pairs,
        vocabulary,
        TrainParams(**{**TINY_TRAIN.as_dict(), "steps": 150, "batch_size": 8}),
        groups=[example.task for example in examples],
    )
    assert report.loss_curve[-1][1] < report.loss_curve[0][1] / 10
    assert accuracy(trained) >= 0.9


# --- the shipped kit ------------------------------------------------------------------------------


def _no_training(*args, **kwargs):
    raise AssertionError("the kit must not be trained here")


@pytest.fixture
def shipped_tiny_kit(tiny_kit, tmp_path: Path):
    """The tiny kit shipped into a folder of its own, as ``make kit --ship`` ships the real one."""
    kit, _root, files = tiny_kit
    return ship_kit(kit, tmp_path / "kit"), files


def test_a_shipped_kit_keeps_the_low_bit_variant_and_the_mildest_rounding(shipped_tiny_kit) -> None:
    shipped, _files = shipped_tiny_kit
    assert set(shipped.variants) == {BASE, "w2g32", "w4g32"}
    assert read_manifest(shipped.root) == shipped.manifest
    for name in shipped.variants:
        assert shipped.manifest["variants"][name]["files"]["model.safetensors"] == shipped.revision(name)


def test_the_shipped_kit_is_served_as_it_is_without_training(
    shipped_tiny_kit, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shipped, files = shipped_tiny_kit
    monkeypatch.setattr("tools.kit.build.build_kit_into", _no_training)
    kit = ensure_kit(cache_root=tmp_path / "empty-cache", params=TINY, data_files=files, shipped_dir=shipped.root)
    assert kit.root == shipped.root and kit.degraded == "w2g32"
    assert not (tmp_path / "empty-cache").exists()


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(lambda folder: (folder / "model.safetensors").write_bytes(b"rounded differently"), id="weights"),
        pytest.param(lambda folder: (folder / "tokenizer.json").unlink(), id="missing-tokenizer"),
        pytest.param(lambda folder: (folder / "quantize_config.json").write_text("{}"), id="extra-file"),
    ],
)
def test_a_tampered_shipped_kit_is_refused_naming_the_file_and_its_hash(
    shipped_tiny_kit, tamper, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shipped, files = shipped_tiny_kit
    folder = shipped.path("w2g32")
    expected = shipped.manifest["variants"]["w2g32"]["files"]
    tamper(folder)
    monkeypatch.setattr("tools.kit.build.build_kit_into", _no_training)
    with pytest.raises(KitIntegrityError) as refused:
        ensure_kit(cache_root=tmp_path / "cache", params=TINY, data_files=files, shipped_dir=shipped.root)
    message = str(refused.value)
    assert "not used" in message and "make kit" in message
    changed = [
        name for name in expected if not (folder / name).exists() or sha256_file(folder / name) != expected[name]
    ]
    changed += [path.name for path in folder.iterdir() if path.name not in expected]
    assert len(changed) == 1
    assert str(folder / changed[0]) in message
    assert (expected.get(changed[0]) or sha256_file(folder / changed[0])) in message


def test_a_shipped_kit_built_from_other_inputs_gives_way_to_a_build(
    shipped_tiny_kit, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    shipped, shared_files = shipped_tiny_kit
    files = []
    for source in shared_files:  # copies: the module's other tests keep the shipped inputs
        (tmp_path / source.parent.name).mkdir()
        files.append(tmp_path / source.parent.name / source.name)
        files[-1].write_bytes(source.read_bytes())
    with files[0].open("a") as handle:  # a new training row: the shipped weights no longer fit this tree
        handle.write(json.dumps({"id": "extra", "prompt": "Question: customers in 'Rome'?", "target": "SELECT 1;"}))
    with caplog.at_level("INFO", logger="tools.kit.build"):
        kit = ensure_kit(cache_root=tmp_path / "cache", params=TINY, data_files=files, shipped_dir=shipped.root)
    assert kit.root.parent == tmp_path / "cache" and kit.hash != shipped.hash
    assert "data/synth_sql/samples.jsonl" in caplog.text


def test_a_rebuild_on_the_same_machine_reproduces_the_shipped_kit(shipped_tiny_kit, tmp_path: Path) -> None:
    shipped, files = shipped_tiny_kit
    rebuilt = ensure_kit(force=True, cache_root=tmp_path / "cache", params=TINY, data_files=files)
    comparison = compare_with_shipped(rebuilt, shipped.manifest)
    assert comparison.identical and comparison.equivalent, comparison.lines
    assert "bit for bit" in comparison.verdict


def test_a_rebuild_with_other_accuracies_is_reported_as_different(shipped_tiny_kit, tmp_path: Path) -> None:
    shipped, files = shipped_tiny_kit
    rebuilt = ensure_kit(force=True, cache_root=tmp_path / "cache", params=TINY, data_files=files)
    manifest = json.loads(json.dumps(shipped.manifest))
    manifest["variants"]["w2g32"]["accuracy"]["per_task"]["synth_sql"]["accuracy"] += 0.5
    manifest["variants"]["w2g32"]["files"]["model.safetensors"] = "0" * 64
    comparison = compare_with_shipped(rebuilt, manifest)
    assert not comparison.identical and not comparison.equivalent
    assert any(line.startswith("w2g32: different weights; synth_sql") for line in comparison.lines), comparison.lines


# --- the real kit ---------------------------------------------------------------------------------


# The low-bit variant the demo, the README and the engine tests name: the same on every CPU,
# because the kit is shipped rather than trained on each machine.
SHIPPED_LOW_BIT = "w2g32"


def test_a_fresh_checkout_uses_the_shipped_kit_without_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tools.kit.data import discover_data_files
    from tools.kit.manifest import differing_inputs, hash_inputs

    shipped = read_manifest(SHIPPED_DIR)
    assert shipped is not None, f"no kit is shipped in {SHIPPED_DIR}"
    changed = differing_inputs(shipped["hash_inputs"], hash_inputs(discover_data_files(), KitParams()))
    assert not changed, f"the shipped kit no longer fits this tree ({changed}): retrain and ship it (make kit, --ship)"
    monkeypatch.setattr("tools.kit.build.build_kit_into", _no_training)
    kit = ensure_kit(cache_root=tmp_path / "empty-cache")
    assert kit.root == SHIPPED_DIR
    assert kit.degraded == SHIPPED_LOW_BIT and set(kit.variants) == {BASE, SHIPPED_LOW_BIT, "w4g32"}
    assert not (tmp_path / "empty-cache").exists()


def test_the_shipped_kit_is_accurate_and_its_low_bit_variant_breaks_a_risk_task_unevenly() -> None:
    """What DEMO.md needs of the kit, read from the shipped manifest (measured on every suite row)."""
    kit = ensure_kit()
    assert kit.manifest["params"]["eval_per_task"] is None  # measured on every row, not a sample
    base = kit.manifest["variants"][BASE]["accuracy"]
    assert base["overall"] >= 0.95, base
    tasks = list(base["per_task"])
    assert len(tasks) == 6

    def drops(variant: str) -> dict[str, float]:
        return {task: (kit.accuracy(BASE, task) or 0.0) - (kit.accuracy(variant, task) or 0.0) for task in tasks}

    lost = drops(SHIPPED_LOW_BIT)
    broken = {task for task in KitParams().must_break if lost[task] >= MIN_DROP}
    held = {task for task in tasks if lost[task] <= HOLD_TOLERANCE}
    assert broken and held - broken, lost  # breaks SQL or tool calling, while other tasks hold
    assert lost["cs_summary"] >= MIN_DROP  # the demo's beneficiary breaks too: the ticket is rejected
    assert max(drops("w4g32").values()) <= HOLD_TOLERANCE  # the mildest rounding is lossless
    # The manifest keeps the measured rejects so the choice can be checked: every milder rounding
    # that was not shipped broke nothing unevenly.
    milder = [name for name, info in kit.manifest["not_shipped"].items() if info["quantization"]["bits"] > 2]
    for name in milder:
        per_task = kit.manifest["not_shipped"][name]["accuracy"]["per_task"]
        assert all(base["per_task"][t]["accuracy"] - per_task[t]["accuracy"] < MIN_DROP for t in tasks), name


def _measured(**per_task: float) -> dict[str, object]:
    return {"accuracy": {"per_task": {task: {"accuracy": value} for task, value in per_task.items()}}}


def test_the_degraded_variant_is_the_mildest_rounding_that_breaks_a_risk_task_unevenly() -> None:
    from tools.kit.build import choose_degraded

    risks = ("dataagent_nl2sql", "tool_calling")
    variants = {
        BASE: _measured(dataagent_nl2sql=0.9, tool_calling=1.0, cs_summary=0.9),
        "w4g32": _measured(dataagent_nl2sql=0.9, tool_calling=1.0, cs_summary=0.9),  # lossless: not degraded
        "w3g32": _measured(dataagent_nl2sql=0.7, tool_calling=1.0, cs_summary=0.9),  # uneven: the pick
        "w2g32": _measured(dataagent_nl2sql=0.1, tool_calling=0.9, cs_summary=0.1),
        "w2g64": _measured(dataagent_nl2sql=0.1, tool_calling=0.1, cs_summary=0.1),  # breaks everything
    }
    specs = [QuantSpec(2, 32), QuantSpec(4, 32), QuantSpec(2, 64), QuantSpec(3, 32)]
    name, reason = choose_degraded(variants, specs, risks)
    assert name == "w3g32" and reason == "dataagent_nl2sql drops by 0.20; holds on tool_calling, cs_summary"
    # SQL holds at every width, tool calling breaks first at 2 bits: that width plays the low-bit candidate.
    variants["w3g32"] = _measured(dataagent_nl2sql=0.9, tool_calling=1.0, cs_summary=0.9)
    variants["w2g32"] = _measured(dataagent_nl2sql=0.9, tool_calling=0.9, cs_summary=0.6)
    name, reason = choose_degraded(variants, specs, risks)
    assert name == "w2g32" and reason == "tool_calling drops by 0.10; holds on dataagent_nl2sql"
    variants["w2g32"] = _measured(dataagent_nl2sql=0.9, tool_calling=0.96, cs_summary=0.6)  # a 0.04 drop is noise
    assert choose_degraded(variants, specs, risks)[0] == "w2g64"  # the fallback: nothing qualifies
    assert "fell back" in choose_degraded(variants, specs, risks)[1]


_HEADER = "Document: the retention policy keeps versions for 36 days and deleted files for 110 days.\n"


@pytest.mark.parametrize(
    "pairs",
    [
        pytest.param([(_HEADER + f"Question {i}: how long?", f"{30 + i} days") for i in range(4)], id="shared-prefix"),
        pytest.param(
            [("Name a colour.", "red"), ("Sum 2 and 3?", "5"), ("Capital of Peru?", "Lima, on the coast")],
            id="no-shared-prefix",
        ),
    ],
)
def test_batch_loss_gives_the_models_own_loss_and_gradient(tokenizer, pairs) -> None:
    from tools.kit.train import batch_loss, collate, encode_all

    rows = encode_all(tokenizer, pairs, 256)
    torch.manual_seed(0)
    model = make_model(TINY_TRAIN, tokenizer)

    def loss_and_grads(compute):
        model.zero_grad()
        loss = compute()
        loss.backward()
        first_layer = model.model.layers[0].self_attn.q_proj.weight
        return float(loss), first_layer.grad.clone(), model.lm_head.weight.grad.clone()

    ours, our_q, our_head = loss_and_grads(lambda: batch_loss(model, rows, tokenizer.pad_token_id))
    theirs, their_q, their_head = loss_and_grads(lambda: model(**collate(rows, tokenizer.pad_token_id)).loss)
    assert ours == pytest.approx(theirs, rel=1e-5)
    assert torch.allclose(our_q, their_q, atol=1e-6)
    assert torch.allclose(our_head, their_head, atol=1e-6)
    assert our_q.abs().max() > 0


def test_training_flushes_subnormal_floats_and_restores_the_setting() -> None:
    from tools.kit.train import denormals_flushed

    def product() -> float:
        return float(torch.tensor([1e-30]) * torch.tensor([1e-10]))  # 1e-40: subnormal in float32

    assert product() > 0
    with pytest.raises(RuntimeError), denormals_flushed():
        assert product() == 0.0
        raise RuntimeError("a failing step")
    assert product() > 0


def test_a_nested_flush_leaves_the_setting_to_the_outermost() -> None:
    from tools.kit.train import denormals_flushed

    def product() -> float:
        return float(torch.tensor([1e-30]) * torch.tensor([1e-10]))

    with denormals_flushed():
        with denormals_flushed():
            pass
        assert product() == 0.0  # the inner exit did not turn flushing off mid-build
    assert product() > 0


_FLUSH_PROBE = """
import torch
from tools.kit.train import denormals_flushed
torch.set_num_threads(2)
if {threads_first}:
    torch.ones(1 << 20) * 2  # starts torch's worker threads before flushing is turned on
with denormals_flushed() as every_thread_flushes:
    print(every_thread_flushes, int(((torch.full((1 << 20,), 1e-30) * 1e-10) != 0).sum()))
"""


@pytest.mark.parametrize("threads_first", [False, True])
def test_flushing_reaches_every_thread_only_when_it_starts_before_them(threads_first: bool) -> None:
    """What the kit build relies on by flushing before any tensor work: threads inherit the setting."""
    import subprocess
    import sys

    from django.conf import settings

    done = subprocess.run(
        [sys.executable, "-c", _FLUSH_PROBE.format(threads_first=threads_first)],
        cwd=settings.BASE_DIR,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    reported, subnormals_left = done.stdout.split()
    assert reported == str(not threads_first)
    assert (int(subnormals_left) > 0) is threads_first
