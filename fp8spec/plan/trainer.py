"""Trainer memory on the busiest GPU: parameters, gradients, optimizer state, FP8 weight caches, activations.

FSDP (verl): fp32 parameters, fp32 gradients and AdamW's two fp32 moments, all sharded over every GPU
(4 + 4 + 8 bytes per parameter / world; profile fact verl memory.fsdp_state). Megatron (verl): bf16
parameters and fp32 gradient buffers on each model-parallel rank, the distributed optimizer's fp32 master
copy and moments sharded over data parallelism (2 + 4 + 12 / dp bytes; memory.megatron_state); experts
split over EP x ETP, the rest over TP, layers over PP (busiest stage). FP8 training (TransformerEngine)
keeps two FP8 copies of every FP8 linear weight between micro-batches (transformer-engine
memory.fp8_weight_cache).

Activations are an estimate: per token and layer, the tensors a decoder layer saves for backward in bf16
(Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", Table 2, with
flash attention: no s^2 term; the MLP term taken at the model's own gated-MLP / top-k expert widths; FP8
linear inputs saved in one byte), divided by TP under sequence parallelism; with full recomputation only
each layer's input (2h bytes) is kept plus one layer being recomputed. Logits: bf16 logits, fp32
log-probabilities and the bf16 logit gradient of one micro-batch (8 bytes per token and vocab entry / TP).
The old-log-prob pass runs at its own token budget (log_prob_max_token_len_per_gpu) without gradients: its
micro-batch's logits with the entropy's and log-probs' temporaries (memory.log_prob_pass_logit_bytes: 4 bytes
per token and vocab entry on FSDP, 8 on Megatron) plus one layer's activations; with a budget above the
update's it can decide the peak.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import TYPE_CHECKING

from fp8spec.plan.facts import estimate
from fp8spec.plan.verdict import gib
from fp8spec.trainers import get_trainer

if TYPE_CHECKING:
    from fp8spec.catalog import ModelFacts
    from fp8spec.resolve.context import ResolvedSpec

BF16 = 2
LOGIT_BYTES = 8  # bf16 logits + fp32 log-probs + bf16 gradient, per token and vocab entry


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class ParamSplit:
    """Parameters of the whole model by where they live."""

    per_layer_dense: tuple[int, ...]  # attention, norms, dense MLP, shared experts, router
    per_layer_expert: tuple[int, ...]  # routed experts
    embedding: int
    lm_head: int
    fp8_dense_per_layer: tuple[int, ...]  # linears TransformerEngine runs in FP8: attention, dense MLP

    @property
    def total(self) -> int:
        return sum(self.per_layer_dense) + sum(self.per_layer_expert) + self.embedding + self.lm_head


@lru_cache(maxsize=8)  # one walk over the modules per model, however many times the rules re-plan
def split_params(model: ModelFacts) -> ParamSplit:
    layers = model.num_hidden_layers
    dense = [0] * layers
    expert = [0] * layers
    fp8_dense = [0] * layers
    lm_head = 0
    linear_total = 0
    for m in model.linear_modules():
        n = m.numel + (m.out_features if m.bias else 0)
        if m.kind == "lm_head":
            lm_head = 0 if m.tied else n
            continue
        linear_total += n
        assert m.layer is not None  # only lm_head is outside the layers
        if m.group == "experts":
            expert[m.layer] += n
        else:
            dense[m.layer] += n
            if m.kind != "router":
                fp8_dense[m.layer] += m.numel
    embedding = model.vocab_size * model.hidden_size
    norms = max(0, model.num_parameters() - linear_total - embedding - lm_head)
    for i in range(layers):  # norms and router biases, spread evenly
        dense[i] += norms // layers + (norms % layers if i == 0 else 0)
    return ParamSplit(tuple(dense), tuple(expert), embedding, lm_head, tuple(fp8_dense))


def _layer_bytes_per_token(model, fp8: bool) -> int:
    """Bytes one token's activations take in one decoder layer without recomputation (bf16, TP 1)."""
    h, q = model.hidden_size, model.q_size
    kv = model.kv_size if model.attention == "mla" else 2 * model.num_key_value_heads * model.head_dim
    lin_in = 1 if fp8 else BF16  # TransformerEngine saves FP8 linear inputs in one byte
    attn = BF16 * h + lin_in * h + BF16 * (q + kv) + lin_in * q
    if model.is_moe:
        inter, k = model.moe_intermediate_size, model.num_experts_per_tok
        mlp = BF16 * h + k * (lin_in * h + BF16 * 2 * inter + lin_in * inter + BF16 * h)
        if model.shared_expert_intermediate_size:
            s = model.shared_expert_intermediate_size
            mlp += lin_in * h + BF16 * 2 * s + lin_in * s
    else:
        inter = model.intermediate_size
        mlp = BF16 * h + lin_in * h + BF16 * 2 * inter + lin_in * inter
    return attn + mlp


@dataclass(frozen=True)
class TrainerMemory:
    backend: str
    precision: str
    layout: dict
    params_on_gpu: int
    params: int
    grads: int
    optimizer: int
    fp8_weight_cache: int
    activations: int
    logits: int
    transient: int
    context: int
    model_params: int = 0
    bytes_per_param: int = 0  # param + grad + optimizer (+ FP8 caches) bytes, summed over the cluster
    offload: dict = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    checkpoint_bytes_per_param: int = (
        0  # model + optimizer state one save writes (memory.checkpoint_contents)
    )
    micro_batch_tokens: int = 0  # tokens of the longest micro-batch (activations and logits scale with it)
    optimizer_step: int = 0  # temporaries of the optimizer step beside the state (foreach AdamW's sqrt list)
    log_prob_pass: int = 0  # what the old-log-prob pass holds beside the state (no gradients, its own budget)
    log_prob_tokens: int = 0  # tokens of its longest micro-batch
    # measured: allocator segments and library workspaces the process keeps beyond its state and context
    resident_extra: int = 0

    @property
    def state(self) -> int:
        """Parameters, gradients, optimizer state and FP8 caches: on the GPU during the training pass."""
        return self.params + self.grads + self.optimizer + self.fp8_weight_cache

    @property
    def peak(self) -> int:
        """Training peak: the whole state (verl loads offloaded state back for the whole training pass,
        verl/workers/engine/base.py:300-335) plus the larger of a micro-batch's activations, logits and gather
        buffers, the optimizer step's temporaries and the old-log-prob pass, plus the CUDA context."""
        return self.state + max(self.pass_transients, self.optimizer_step, self.log_prob_pass) + self.context

    @property
    def peak_phase(self) -> str:
        """Which phase sets the peak: "update", "optimizer step" or "old log-prob"."""
        top = max(self.pass_transients, self.optimizer_step, self.log_prob_pass)
        if top == self.pass_transients:
            return "update"
        return "optimizer step" if top == self.optimizer_step else "old log-prob"

    @property
    def pass_transients(self) -> int:
        """What a micro-batch's forward and backward hold beside the state."""
        return self.activations + self.logits + self.transient

    @property
    def host_offload(self) -> int:
        """Host RAM this GPU's offloaded state takes: the parameters with param offload (verl copies them to
        pinned host memory; Megatron frees its grad buffer instead of copying it: verl/utils/megatron_utils.py
        offload_megatron_model_to_cpu), the optimizer state with optimizer offload."""
        return (self.params if self.offload.get("params") else 0) + (
            self.optimizer if self.offload.get("optimizer") else 0
        )

    @property
    def checkpoint_bytes(self) -> int:
        """Bytes one checkpoint save writes for the whole model: every parameter once (shards are not
        duplicated across data-parallel ranks) in the trainer's stored dtype, plus its optimizer state."""
        return self.model_params * self.checkpoint_bytes_per_param

    @property
    def resident_parts(self) -> dict[str, int]:
        """What stays on the GPU while the colocated engine generates, by part (verl memory.colocation); a part
        offloaded or absent is left out."""
        on_gpu = not self.offload.get("params")
        parts = {"params": self.params} if on_gpu else {}
        if get_trainer(self.backend).grad_buffer_resident and on_gpu:
            parts["gradients"] = self.grads  # Megatron's grad buffer is released only with param offload
        if not self.offload.get("optimizer"):
            parts["optimizer"] = self.optimizer
        if on_gpu and self.fp8_weight_cache:
            # TE's cached FP8 weight copies: verl clears them only when it offloads the params (memory.colocation)
            parts["TE's FP8 weight copies"] = self.fp8_weight_cache
        parts["CUDA context"] = self.context
        if self.resident_extra:
            parts["measured beyond them"] = self.resident_extra
        return parts

    @property
    def resident_during_rollout(self) -> int:
        """What stays on the GPU while the colocated engine generates."""
        return sum(self.resident_parts.values())


def _offload(spec) -> dict:
    section = getattr(spec.training, "offload", None)
    return {
        "params": bool(getattr(section, "params", False)),
        "optimizer": bool(getattr(section, "optimizer", False)),
    }


def _micro_batch_tokens(ctx: ResolvedSpec) -> int:
    """Tokens of the longest micro-batch of the update: the budget the bundle compiles (a budget the spec leaves
    unset compiles to one sequence, not verl's own default), or fixed micro-batches of full sequences."""
    b = ctx.batching
    if b.dynamic:
        return max(b.ppo_max_token_len_per_gpu, b.sequence_tokens)
    return b.ppo_micro_batch_size_per_gpu * b.sequence_tokens


def _log_prob_tokens(ctx: ResolvedSpec) -> int:
    """Tokens of the longest micro-batch of the old-log-prob pass (its own budget or micro-batch size)."""
    b = ctx.batching
    if b.dynamic:
        return max(b.log_prob_max_token_len_per_gpu, b.sequence_tokens)
    return b.log_prob_micro_batch_size_per_gpu * b.sequence_tokens


def _log_prob_pass(
    verl, backend: str, model, tokens: int, per_layer_act: int, *, tp=1, cp=1, shard=1, last=True, transient=0
) -> int:
    """The old-log-prob pass beside the state: one micro-batch's logits, entropy and log-prob temporaries where
    the stage holds the output layer (sharded like the update's; memory.log_prob_pass_logit_bytes), one layer's
    activations, no gradients; FSDP's gather buffers too."""
    per_entry = verl.value("memory.log_prob_pass_logit_bytes")[backend]
    logits = _cdiv(tokens, cp) * _cdiv(model.vocab_size, tp) * per_entry if last else 0
    return logits + _cdiv(tokens, shard) * per_layer_act + transient


def _stage_layers(spec, layers: int, pp: int) -> list[int]:
    """Decoder layers per pipeline stage: uneven first/last stages when the spec gives them (the spec's
    field names, read defensively), otherwise Megatron's even split."""
    p = spec.training.parallel
    first = getattr(p, "first_stage_layers", None) or getattr(p, "num_layers_in_first_pipeline_stage", None)
    last = getattr(p, "last_stage_layers", None) or getattr(p, "num_layers_in_last_pipeline_stage", None)
    if pp == 1:
        return [layers]
    if first is None and last is None:
        per = _cdiv(layers, pp)
        return [per] * pp
    middle_stages = pp - (first is not None) - (last is not None)
    rest = layers - (first or 0) - (last or 0)
    per = _cdiv(max(rest, 0), middle_stages) if middle_stages else 0
    stages = [per] * pp
    if first is not None:
        stages[0] = first
    if last is not None:
        stages[-1] = last
    return stages


def trainer_memory(ctx: ResolvedSpec, precision: str | None = None) -> TrainerMemory:
    """The spec's trainer; ``precision`` ("bf16" / "fp8") plans the same layout in the other precision
    (FP8 training exists on the Megatron trainer only)."""
    spec, model = ctx.spec, ctx.model
    verl = ctx.profile("verl")
    world = spec.world_size
    split = split_params(model)
    offload = _offload(spec)
    tokens = _micro_batch_tokens(ctx)
    trainer = get_trainer(spec.training.backend)
    fp8 = (precision or spec.training.precision) == "fp8" and trainer.fp8_training
    context = int(estimate("trainer", "cuda_context_bytes"))
    per_layer_act = _layer_bytes_per_token(model, fp8)
    lp_tokens = _log_prob_tokens(ctx)
    if not trainer.parallel_layout:  # FSDP's memory model: data-parallel shards of the whole model
        memory = _fsdp(spec, model, verl, split, world, (tokens, lp_tokens), per_layer_act, offload, context)
    else:
        memory = _megatron(ctx, split, world, (tokens, lp_tokens), per_layer_act, fp8, offload, context)
    extra = int(estimate("trainer", "resident_beyond_state_bytes").get(spec.training.backend, 0))
    memory = replace(memory, micro_batch_tokens=tokens, resident_extra=extra)
    if memory.peak_phase == "old log-prob":
        memory = replace(
            memory,
            notes=memory.notes
            + (
                f"the old-log-prob pass sets the training peak: {lp_tokens:,}-token micro-batches "
                f"(algorithm.log_prob_max_token_len_per_gpu or log_prob_micro_batch_size_per_gpu) against the "
                f"update's {tokens:,}; their logits, entropy and log-prob temporaries exceed what the update's "
                "micro-batch holds",
            ),
        )
    return memory


def trainer_precisions(ctx: ResolvedSpec) -> list[TrainerMemory]:
    """BF16 and FP8 side by side for the Megatron trainer (the spec's own first), else the spec's only."""
    own = trainer_memory(ctx)
    if not ctx.trainer.fp8_training:
        return [own]
    other = trainer_memory(ctx, "bf16" if ctx.spec.training.precision == "fp8" else "fp8")
    return [own, other]


def _fsdp(spec, model, verl, split, world, passes, per_layer_act, offload, context) -> TrainerMemory:
    tokens, lp_tokens = passes  # the update's and the old-log-prob pass's micro-batch tokens
    f = verl.value("memory.fsdp_state")
    params = split.total
    per_gpu = _cdiv(params, world)
    layers = model.num_hidden_layers
    chosen = spec.training.gradient_checkpointing
    checkpointing = bool(f.get("gradient_checkpointing")) if chosen is None else chosen
    # with checkpointing each layer keeps only its input, and one layer's activations exist at a time
    acts_by_checkpointing = {
        True: layers * tokens * BF16 * model.hidden_size + tokens * per_layer_act,
        False: layers * tokens * per_layer_act,
    }
    acts = acts_by_checkpointing[checkpointing]
    logits = tokens * model.vocab_size * LOGIT_BYTES
    biggest = max(d + e for d, e in zip(split.per_layer_dense, split.per_layer_expert))
    transient = int(estimate("trainer", "transient_layers")) * biggest * (BF16 + f["grad_bytes"])
    memory = TrainerMemory(
        "fsdp",
        spec.training.precision,
        {"world": world, "fsdp_shard": world},
        per_gpu,
        per_gpu * f["param_bytes"],
        per_gpu * f["grad_bytes"],
        per_gpu * f["optimizer_bytes"],
        0,
        acts,
        logits,
        transient,
        context,
        params,
        f["param_bytes"] + f["grad_bytes"] + f["optimizer_bytes"],
        offload,
        ("FSDP shards parameters, gradients and optimizer state over all GPUs (fsdp_size -1)",),
        checkpoint_bytes_per_param=_checkpoint_bytes_per_param(verl, f),
        optimizer_step=per_gpu * f.get("optimizer_step_bytes", 0),
        log_prob_pass=_log_prob_pass(
            verl, spec.training.backend, model, lp_tokens, per_layer_act, transient=transient
        ),
        log_prob_tokens=lp_tokens,
    )
    source = "verl's default" if chosen is None else "training.gradient_checkpointing"
    other = replace(memory, activations=acts_by_checkpointing[not checkpointing])
    if checkpointing:
        note = (
            f"gradient checkpointing on ({source}): one more forward pass per micro-batch; off would plan "
            f"{gib(other.activations)} of activations and a training peak of {gib(other.peak)}"
            + (" (the same: it saves no peak memory here)" if other.peak == memory.peak else "")
        )
    else:
        note = (
            f"gradient checkpointing off ({source}): no recomputation; on would plan {gib(other.activations)} "
            f"of activations and a training peak of {gib(other.peak)}"
        )
    return replace(memory, notes=memory.notes + (note,))


def _megatron(ctx, split, world, passes, per_layer_act, fp8, offload, context) -> TrainerMemory:
    tokens, lp_tokens = passes  # the update's and the old-log-prob pass's micro-batch tokens
    spec, model = ctx.spec, ctx.model
    m = ctx.profile("verl").value("memory.megatron_state")
    p = spec.training.parallel
    tp, pp, ep, cp = p.tp, p.pp, p.ep, p.cp
    notes = []
    etp = getattr(p, "etp", None)
    if etp is None:  # verl leaves expert_tensor_parallel_size null = TP; Megatron needs etp*ep*pp | world
        etp = tp if world % (tp * ep * pp) == 0 else 1
        if etp != tp:
            notes.append(
                f"expert tensor parallelism = tp {tp} does not fit {world} GPUs with ep {ep} x pp {pp}; "
                "planned with etp 1"
            )
    dp = max(1, world // (tp * pp * cp))
    edp = max(1, world // (ep * etp * pp))
    stages = _stage_layers(spec, model.num_hidden_layers, pp)
    cache_per_param = 0
    te = ctx.profile("transformer-engine")
    if fp8 and te is not None and te.has("memory.fp8_weight_cache"):
        cache_per_param = te.value("memory.fp8_weight_cache")["bytes_per_param"]
    microbatches = _microbatches(spec, dp)
    shard = tp * cp if (m.get("sequence_parallel") and tp > 1) else cp
    best = None
    start = 0
    for index, count in enumerate(stages):  # the busiest stage: largest estimated peak
        layer_ids = range(start, min(start + count, model.num_hidden_layers))
        start += count
        dense = sum(split.per_layer_dense[i] for i in layer_ids)
        expert = sum(split.per_layer_expert[i] for i in layer_ids)
        fp8_dense = sum(split.fp8_dense_per_layer[i] for i in layer_ids)
        last = index == len(stages) - 1
        dense += (split.embedding if index == 0 else 0) + (split.lm_head if last else 0)
        dense_gpu, expert_gpu = _cdiv(dense, tp), _cdiv(expert, ep * etp)
        # experts are all FP8 linears, unless the layout keeps them in BF16 (training.bf16_modules)
        fp8_experts = 0 if "experts" in spec.training.bf16_modules else expert_gpu
        cache = (_cdiv(fp8_dense, tp) + fp8_experts) * cache_per_param
        state = (
            (dense_gpu + expert_gpu) * (m["param_bytes"] + m["grad_bytes"])
            + cache
            + m["optimizer_bytes"] * (_cdiv(dense_gpu, dp) + _cdiv(expert_gpu, edp))
        )
        in_flight = min(pp - index, microbatches)  # 1F1B: stage i holds pp - i micro-batches
        acts = len(layer_ids) * _cdiv(tokens, shard) * per_layer_act * in_flight
        logits = _cdiv(tokens, cp) * _cdiv(model.vocab_size, tp) * LOGIT_BYTES if last else 0
        if best is None or state + acts + logits > best[0]:
            best = (
                state + acts + logits,
                index,
                len(layer_ids),
                dense_gpu,
                expert_gpu,
                cache,
                acts,
                logits,
                in_flight,
            )
    assert best is not None  # a layout has at least one stage
    _, stage, stage_layers, dense_gpu, expert_gpu, cache, acts, logits, in_flight = best
    on_gpu = dense_gpu + expert_gpu
    layout = {
        "world": world,
        "tp": tp,
        "pp": pp,
        "ep": ep,
        "etp": etp,
        "cp": cp,
        "dp": dp,
        "expert_dp": edp,
        "busiest_stage": stage,
        "stage_layers": stage_layers,
    }
    return TrainerMemory(
        "megatron",
        "fp8" if fp8 else "bf16",
        layout,
        on_gpu,
        on_gpu * m["param_bytes"],
        on_gpu * m["grad_bytes"],
        m["optimizer_bytes"] * (_cdiv(dense_gpu, dp) + _cdiv(expert_gpu, edp)),
        cache,
        acts,
        logits,
        0,
        context,
        split.total,
        m["param_bytes"] + m["grad_bytes"] + m["optimizer_bytes"] + cache_per_param,
        offload,
        tuple(notes)
        + (
            f"distributed optimizer over dp {dp} (experts over expert-dp {edp}); {in_flight} "
            "micro-batch(es) of activations in flight on the busiest pipeline stage (1F1B)",
        ),
        checkpoint_bytes_per_param=_checkpoint_bytes_per_param(ctx.profile("verl"), m),
        log_prob_pass=_log_prob_pass(
            ctx.profile("verl"),
            spec.training.backend,
            model,
            lp_tokens,
            per_layer_act,
            tp=tp,
            cp=cp,
            shard=shard,
            last=stage == pp - 1,
        ),
        log_prob_tokens=lp_tokens,
    )


def _checkpoint_bytes_per_param(verl, state: dict) -> int:
    """Bytes per parameter of one save (memory.checkpoint_contents: the model as stored, the optimizer)."""
    contents = verl.value("memory.checkpoint_contents") if verl.has("memory.checkpoint_contents") else []
    return (state["param_bytes"] if "model" in contents else 0) + (
        state["optimizer_bytes"] if "optimizer" in contents else 0
    )


def _microbatches(spec, dp: int) -> int:
    a = spec.algorithm
    sequences = a.ppo_mini_batch_size * spec.rollout.n
    return max(1, sequences // max(1, dp * a.ppo_micro_batch_size_per_gpu))
