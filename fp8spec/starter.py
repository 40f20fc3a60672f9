"""`fp8spec init`: a commented starter spec from a template, for the model and hardware asked for.

The template is rendered with a first guess for the layout, then validated exactly as `fp8spec validate`
would; while a finding carries proposals (values that pass every rule, fp8spec.rules.proposals), the first
one is applied to the YAML text (comments kept) and the spec validated again. What comes out either
validates clean as written, or is not written at all.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from fp8spec.compiler.templates import template_environment

TEMPLATES = {
    "dense-vllm": "FSDP + vLLM: FP8 linears, FP8 KV cache recalibrated per step, TIS (the paper's dense run)",
    "moe-megatron": "Megatron + vLLM, MoE, end-to-end FP8 training (the paper's MoE run)",
    "sglang": "FSDP + SGLang: FP8 linears, BF16 KV cache, TIS",
}
DEFAULTS = {  # template -> (model, gpu, nodes)
    "dense-vllm": ("Qwen/Qwen3-8B-Base", "h100", 1),
    "moe-megatron": ("Qwen/Qwen3-30B-A3B-Base", "h100", 2),
    "sglang": ("Qwen/Qwen3-8B", "h200", 1),
}
SUFFIX = {"dense-vllm": "fp8-rollout", "moe-megatron": "fp8-e2e", "sglang": "sglang-fp8-rollout"}
# the name of a starter that ends up with no FP8 at all (a GPU without FP8 tensor cores): it must not say fp8
SUFFIX_BF16 = {"dense-vllm": "bf16-rollout", "moe-megatron": "bf16", "sglang": "sglang-bf16-rollout"}
MAX_REPAIRS = 12


class StarterError(ValueError):
    """A request init cannot serve (unknown template or model): bad usage, exit 2."""


@dataclass
class Starter:
    text: str
    validation: Any  # fp8spec.rules.runner.Validation of ``text``
    changes: list[str] = field(default_factory=list)  # "rollout.tp 1 -> 2 (BLK001)", in order
    # warnings no change removes that the user did not acknowledge (--acknowledge CODE accepts one): printed as
    # notes; the spec stays unwritten until each is either fixed or acknowledged by the user
    unacknowledged: list[tuple[str, str]] = field(default_factory=list)  # (code, note)
    # findings whose proposal init did not apply because it would undo an earlier change or the user acknowledged
    # the finding (also comments in text)
    kept: list[str] = field(default_factory=list)
    # --acknowledge codes the written spec does not acknowledge, and why (init never drops one without a word)
    not_acknowledged: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not any(d.severity in ("error", "warning") for d in self.validation.diagnostics)


def default_name(template: str, model_id: str, fp8: bool = True) -> str:
    base = re.sub(r"[^a-z0-9._-]+", "-", model_id.rsplit("/", 1)[-1].lower()).strip("-._") or "model"
    return f"{base}-{(SUFFIX if fp8 else SUFFIX_BF16)[template]}"[:63]


def starter_spec(
    template: str,
    model_id: Optional[str] = None,
    gpu: Optional[str] = None,
    nodes: Optional[int] = None,
    gpus_per_node: int = 8,
    name: Optional[str] = None,
    file: str = "spec.yaml",
    spec_dir: Path = Path("."),
    acknowledge: tuple[str, ...] = (),
    config_path: Optional[Path] = None,
) -> Starter:
    from fp8spec.catalog import CatalogError, catalog_ids, get_model

    if template not in TEMPLATES:
        raise StarterError(f"unknown template {template!r}; choose one of {', '.join(TEMPLATES)}")
    d_model, d_gpu, d_nodes = DEFAULTS[template]
    config_file = None
    if config_path is not None:
        model, config_file = _model_of_config(config_path, model_id)
        model_id = model_id or model.id
    else:
        model_id = model_id or d_model
        # catalog ids are Hugging Face ids, whose case users do not always keep (qwen/qwen3-14b)
        model_id = next((m for m in catalog_ids() if m.lower() == model_id.lower()), model_id)
        try:
            model = get_model(model_id)
        except CatalogError:
            import difflib

            close = difflib.get_close_matches(model_id.lower(), [m.lower() for m in catalog_ids()], n=1)
            near = [m for m in catalog_ids() if close and m.lower() == close[0]]
            if near:
                raise StarterError(
                    f"--model {model_id!r} is not in the catalog; did you mean {near[0]!r}? (`fp8spec models` "
                    "lists them; for another model pass --config-path)"
                ) from None
            raise StarterError(
                f"--model {model_id!r} is not in the catalog ({', '.join(catalog_ids())}); for "
                "another model pass --config-path (its local Hugging Face folder or config.json)"
            ) from None
    gpu = gpu or d_gpu
    nodes = nodes or d_nodes
    from fp8spec.hardware import GPU_NAMES

    gpu = next((g for g in GPU_NAMES if g == gpu.lower()), gpu)
    if gpu not in GPU_NAMES:
        raise StarterError(f"--gpu {gpu!r} is not one of {', '.join(GPU_NAMES)}")
    if name is not None and not re.fullmatch(r"[a-z0-9][a-z0-9._-]{0,62}", name):
        raise StarterError(
            f"--name {name!r}: use lowercase letters, digits, '.', '_' and '-' (it names the bundle)"
        )
    values = _first_guess(template, model, gpu, nodes, gpus_per_node)
    values.update(
        name=name or default_name(template, model_id),
        model_id=model_id,
        gpu=gpu,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        model_path=str(config_file.parent) if config_file else f"/models/{model_id.rsplit('/', 1)[-1]}",
        config_path=str(config_file) if config_file else None,
        no_fp8=None,
        file=file,
    )
    chosen = _acknowledgeable(acknowledge)
    template_text = template_environment().get_template(f"init/{template}.yaml.j2")
    result = _repair(template_text.render(**values), file, spec_dir, chosen)
    spec = result.validation.loaded.spec
    if spec is not None and not spec.linear.quantize:
        # the repairs turned the template's FP8 linears off (no FP8 tensor cores on this GPU): the starter says so in
        # its name and header instead of keeping the FP8 recipe's; the same repairs apply again to the new draft
        import textwrap

        from fp8spec.hardware import gpu as gpu_facts

        kept = "the KV cache stays FP8 (kv_cache.dtype)" if spec.kv_cache.fp8 else "nothing else is FP8"
        bf16_name = default_name(template, model_id, fp8=False) + ("-fp8kv" if spec.kv_cache.fp8 else "")

        why = (
            f"The {template} template without FP8 linears: {gpu} (compute capability {gpu_facts(gpu).cc_text}) "
            f"cannot run them, so init turned them off; {kept}. stderr lists each change and the rule behind it."
        )
        values.update(name=name or bf16_name[:63], no_fp8="\n# ".join(textwrap.wrap(why, 108)))
        result = _repair(template_text.render(**values), file, spec_dir, chosen)
    written = result.validation.loaded.spec
    held = set(written.acknowledge) if written is not None else set()
    result.not_acknowledged = [
        f"--acknowledge {code}: this spec has no {code} finding to acknowledge, so none was written"
        for code in sorted(chosen - held)
    ]
    return result


def _model_of_config(path: Path, model_id: Optional[str]):
    """(facts, config.json path) of a local model outside the catalog: the folder's config.json or the file,
    read by the catalog's own parser (fp8spec.catalog.model_from_config), exactly as model.config_path is."""
    from fp8spec.catalog import CatalogError, model_from_config
    from fp8spec.specfile.paths import PathError, expand_user

    try:
        path = Path(expand_user(str(path))).resolve()
    except PathError as err:
        raise StarterError(f"--config-path {err}") from None
    config_file = path / "config.json" if path.is_dir() else path
    try:
        model = model_from_config(config_file, model_id)
    except CatalogError as err:
        raise StarterError(f"--config-path {path}: {err}") from None
    if not model_id and model.id == str(config_file):  # no _name_or_path: name it after its folder
        from dataclasses import replace

        model = replace(model, id=config_file.parent.name or "local-model")
    return model, config_file


def _acknowledgeable(codes: tuple[str, ...]) -> frozenset[str]:
    """The --acknowledge codes, each an acknowledgeable rule (anything else is bad usage)."""
    from fp8spec.rules.registry import get_rule

    out = set()
    for code in codes:
        rule = get_rule(code.strip().upper())
        if rule is None or not rule.acknowledgeable:
            raise StarterError(
                f"--acknowledge {code!r} is not an acknowledgeable rule (`fp8spec rules` marks them)"
            )
        out.add(rule.code)
    return frozenset(out)


def _first_guess(template: str, model, gpu: str, nodes: int, gpus_per_node: int) -> dict:
    from fp8spec.hardware import gpu as gpu_facts

    world = nodes * gpus_per_node
    values: dict[str, Any] = {
        "scale_dtype": "ue8m0" if gpu_facts(gpu).is_blackwell else "fp32",
        "rollout_tp": min(2, gpus_per_node),
    }
    if template == "moe-megatron":
        tp = min(4, gpus_per_node)
        ep = min(8, world, model.num_experts or 1) if model.is_moe else 1
        values.update(train_tp=tp, train_pp=1, train_ep=ep, train_etp=1 if model.is_moe and ep > 1 else None)
    return values


def _repair(text: str, file: str, spec_dir: Path, acknowledge: frozenset[str] = frozenset()) -> Starter:
    """Validate; apply the first proposal of the first finding that has one; repeat.

    The loop never goes back: a proposal that would set a field to a value it held before in this loop (one
    rule's fix undoing another's) or give a draft already seen is not applied. Its finding stays, named in a
    comment at the end of the draft and in a note, and init ends as for any finding it cannot fix (exit 1,
    nothing written, unless the user acknowledges it)."""
    from fp8spec.rules.runner import validate_loaded
    from fp8spec.specfile.loader import load_spec_text

    changes: list[str] = []
    held: dict[str, list[Any]] = {}  # field -> every value it has held in this loop
    seen = {text}
    kept: list[str] = []  # why a finding's proposal was not applied
    for _ in range(MAX_REPAIRS):
        validation = validate_loaded(load_spec_text(text, file), spec_dir)
        if validation.loaded.spec is None:
            break
        spec_data = validation.loaded.spec
        pending = [(rule, f) for rule, f, severity in validation.findings if severity in ("error", "warning")]
        pending.sort(key=lambda rf: (rf[0].severity != "error", rf[0].code))
        fix = None
        for rule, f in pending:
            if not f.proposals:
                continue
            proposal = f.proposals[0]
            if rule.code in acknowledge and rule.severity == "warning":
                # the user chose to keep this warning (--acknowledge): its fix is theirs to choose, not init's
                note = (
                    f"{rule.code} {rule.name} kept as you asked (--acknowledge {rule.code}): did not apply "
                    + (_proposal_text(proposal) + (f" ({f.costs[0]})" if f.costs and f.costs[0] else ""))
                )
                # one note per code: the proposal of the latest draft
                kept[:] = [k for k in kept if not k.startswith(f"{rule.code} {rule.name} kept as you asked")]
                kept.append(note)
                continue
            undone = [d for d, v in proposal.items() if any(_same(v, h) for h in held.get(d, ()))]
            after = set_values(text, proposal)
            if undone or after in seen:
                why = (
                    "; ".join(
                        f"{d}: {_shown(proposal[d])} would undo the change {c}"
                        for d in undone
                        for c in changes
                        if c.startswith(d + " ")
                    )
                    or f"{_proposal_text(proposal)} would give a draft already tried"
                )
                note = f"{rule.code} {rule.name} left unfixed: {why}"
                if note not in kept:
                    kept.append(note)
                continue
            fix = rule, proposal, after
            break
        if fix is None:
            return _acknowledge_rest(
                _with_notes(text, kept), file, spec_dir, validation, changes, acknowledge, kept
            )
        prior = text
        rule, proposal, text = fix
        seen.add(text)
        brought = _brought_by_rest(prior, proposal, file, spec_dir, validation)
        finding = next(f for r, f in pending if r is rule and f.proposals and f.proposals[0] is proposal)
        cost = f": {finding.costs[0]}" if finding.costs and finding.costs[0] else ""
        # the cost of a proposal of several fields is that of the field set for another rule (a concurrency cap)
        primary_cost = "" if brought else cost
        keep = (
            f"; `--acknowledge {rule.code}` keeps the warning instead"
            if cost
            and not cost.startswith(": no throughput cost")
            and rule.acknowledgeable
            and rule.severity == "warning"
            else ""
        )
        for dotted, value in proposal.items():
            old = _get(spec_data, dotted)
            held.setdefault(dotted, []).extend((old, value))
            if dotted in brought:  # set together with the fix, for the rule the fix alone would bring
                why = f"{brought[dotted]}, which {rule.code}'s change alone would bring{cost}"
                changes.append(f"{dotted} {_shown(old)} -> {_shown(value)} ({why})")
                continue
            changes.append(
                f"{dotted} {_shown(old)} -> {_shown(value)} ({rule.code}{primary_cost}{keep if primary_cost else ''})"
            )
    text = _with_notes(text, kept)
    validation = validate_loaded(load_spec_text(text, file), spec_dir)
    return Starter(text, validation, changes, kept=kept)


def _brought_by_rest(
    text: str, proposal: dict[str, Any], file: str, spec_dir: Path, validation
) -> dict[str, str]:
    """For a proposal of several fields: field -> the codes of the findings the proposal without that field
    would bring (a BF16 KV cache for KV008 with a rollout.max_num_seqs that keeps MEM004 away): what each extra
    field is there for, so init names the rule it serves."""
    from fp8spec.rules.runner import validate_loaded
    from fp8spec.specfile.loader import load_spec_text

    def codes(changes: dict[str, Any]) -> set[str]:
        found = validate_loaded(load_spec_text(set_values(text, changes), file), spec_dir).findings
        return {r.code for r, _, severity in found if severity in ("error", "warning")}

    if len(proposal) < 2:
        return {}
    before = {r.code for r, _, severity in validation.findings if severity in ("error", "warning")}
    whole = codes(proposal)  # what the proposal leaves or brings is not what one field of it keeps away
    out = {}
    for dotted in list(proposal)[1:]:
        new = sorted(codes({k: v for k, v in proposal.items() if k != dotted}) - whole - before)
        if new:
            out[dotted] = ", ".join(new)
    return out


def _lowered(summary: str) -> str:
    """A rule's summary inside a sentence: 'The KV cache ...' -> 'the KV cache ...', 'FP8 KV ...' kept."""
    return summary if summary[1:2].isupper() else summary[:1].lower() + summary[1:]


def _same(a: Any, b: Any) -> bool:
    return a == b and type(a) is type(b)


def _proposal_text(proposal: dict[str, Any]) -> str:
    return ", ".join(f"{d}: {_shown(v)}" for d, v in proposal.items())


def _with_notes(text: str, kept: list[str]) -> str:
    """The draft with a comment for each finding whose proposal init did not apply (it would go back)."""
    if not kept:
        return text
    return text.rstrip("\n") + "\n" + "".join(f"# init: {note}\n" for note in kept)


def _acknowledge_rest(
    text: str,
    file: str,
    spec_dir: Path,
    validation,
    changes: list[str],
    acknowledge: frozenset[str],
    kept: list[str],
) -> Starter:
    """Warnings no single change removes (the paper's 20K-token responses preempt on most GPUs: MEM004) are
    acknowledged only where the user asked for it (--acknowledge CODE), with a reason saying so; the others
    are left as notes and keep the spec unwritten: init accepts nothing the user did not choose."""
    from fp8spec.rules.runner import validate_loaded
    from fp8spec.specfile.loader import load_spec_text

    left = [(rule, f) for rule, f, severity in validation.findings if severity in ("error", "warning")]
    if not left or any(rule.severity == "error" for rule, _ in left):
        return Starter(text, validation, changes, kept=kept)
    chosen = {rule.code: rule for rule, _ in left if rule.code in acknowledge}
    # its proposal would undo an earlier change, or the user chose to keep it (--acknowledge)
    undoing = {note.split(" ", 1)[0] for note in kept if " kept as you asked " not in note}
    declined = {
        note.split(" ", 1)[0]: note.split(": ", 1)[1] for note in kept if " kept as you asked " in note
    }

    def why(code: str) -> str:
        if code in declined:
            return f"kept as asked; init {declined[code]}"
        return (
            "its proposal would undo an earlier change" if code in undoing else "no single change removes it"
        )

    unchosen = [
        (
            rule.code,
            f"{rule.code} {rule.name}: {f.message} ({why(rule.code)} on this hardware; "
            f"`--acknowledge {rule.code}` accepts it as a warning you know of)"
            if rule.acknowledgeable
            else f"{rule.code} {rule.name}: {f.message}",
        )
        for rule, f in left
        if rule.code not in chosen
    ]
    if not chosen:
        return Starter(text, validation, changes, unchosen, kept)
    acks = {
        f"acknowledge.{code}": f"accepted with fp8spec init --acknowledge {code}: {why(code)}"
        + ("" if code in declined else " on this hardware")
        + f" ({_lowered(rule.summary).rstrip('.')})"
        for code, rule in sorted(chosen.items())
    }
    text = set_values(text, acks)
    changes.extend(f"{key} (--acknowledge; `fp8spec rules {key.split('.')[1]}`)" for key in acks)
    return Starter(text, validate_loaded(load_spec_text(text, file), spec_dir), changes, unchosen, kept)


def set_values(text: str, changes: dict[str, Any]) -> str:
    """The YAML ``text`` with each dotted field set (created where missing), comments and layout kept."""
    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap

    yaml = YAML()  # round trip
    yaml.width = 4096
    yaml.preserve_quotes = True
    data = yaml.load(text)
    for dotted, value in changes.items():
        node = data
        *parents, last = dotted.split(".")
        for part in parents:
            if part not in node or node[part] is None:
                node[part] = CommentedMap()
            node = node[part]
        node[last] = value
    out = io.StringIO()
    yaml.dump(data, out)
    return out.getvalue()


def _get(spec, dotted: str) -> Any:
    node = spec
    for part in dotted.split("."):
        node = getattr(node, part, None)
    return node


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "null" if value is None else str(value)
