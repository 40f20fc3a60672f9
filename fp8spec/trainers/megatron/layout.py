"""The Megatron layout a spec asks for, and the arithmetic megatron-core does with it at start-up.

``stage_layers`` ports the two places megatron-core splits decoder layers over pipeline stages, so a rule can
refuse exactly the layouts it refuses: ``TransformerConfig.__post_init__`` ("Uneven PP", megatron-core 0.18.2
transformer_config.py:1765-1832) and ``transformer_block.get_num_layers_to_build`` (:96-160). The
proof that the port agrees with the real functions is tests/conformance/test_megatron_layout.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from fp8spec.specfile.model import Spec

if TYPE_CHECKING:
    from fp8spec.catalog import ModelFacts


@dataclass(frozen=True)
class MegatronLayout:
    world: int
    tp: int
    pp: int
    cp: int
    ep: int
    etp: Optional[int]  # what the bundle sets; None leaves verl's null, which megatron-core reads as tp
    first_stage_layers: Optional[int] = None
    last_stage_layers: Optional[int] = None

    @property
    def expert_tp(self) -> int:
        return self.tp if self.etp is None else self.etp

    @property
    def model_size(self) -> int:
        """tp*cp*pp: initialize_model_parallel requires it to divide the world (parallel_state.py:734-736)."""
        return self.tp * self.cp * self.pp

    @property
    def expert_model_size(self) -> int:
        """etp*ep*pp: the expert layout must divide the world too (parallel_state.py:781-790)."""
        return self.expert_tp * self.ep * self.pp

    @property
    def uneven(self) -> bool:
        return self.first_stage_layers is not None or self.last_stage_layers is not None


def default_etp(spec: Spec, model: Optional[ModelFacts]) -> Optional[int]:
    """etp 1 for an MoE model with expert parallelism: verl's null means etp = tp, and then etp*ep*pp is the
    whole world or more for any useful tp (tp 4, ep 8 on 16 GPUs needs 64). Otherwise leave Megatron's default."""
    p = spec.training.parallel
    if p.etp is not None:
        return p.etp
    if model is not None and model.is_moe and p.ep > 1:
        return 1
    return None


def megatron_layout(spec: Spec, model: Optional[ModelFacts]) -> MegatronLayout:
    p = spec.training.parallel
    return MegatronLayout(
        world=spec.world_size,
        tp=p.tp,
        pp=p.pp,
        cp=p.cp,
        ep=p.ep,
        etp=default_etp(spec, model),
        first_stage_layers=p.first_stage_layers,
        last_stage_layers=p.last_stage_layers,
    )


def stage_layers(
    num_layers: int, pp: int, first: Optional[int], last: Optional[int]
) -> tuple[list[int], str]:
    """Decoder layers each pipeline rank builds, and megatron-core's refusal ('' when it accepts).

    A layout megatron-core accepts but that builds a different total than ``num_layers`` (first and last stage
    given with pp 1: rank 0 is both and builds only ``last``) is reported as a refusal too: the model would be
    wrong."""
    if first is None and last is None:
        if num_layers % pp:
            return [], f"num_layers {num_layers} is not divisible by pp {pp}"
        return [num_layers // pp] * pp, ""
    middle_layers, middle_stages = num_layers, pp
    for given in (first, last):
        if given is not None:
            middle_layers -= given
            middle_stages -= 1
    if bool(middle_layers) != bool(middle_stages):
        return [], (
            f"{middle_layers} middle layers remain for {middle_stages} middle pipeline stages "
            f"(num_layers {num_layers} - first {first or 0} - last {last or 0})"
        )
    if middle_stages and middle_layers % middle_stages:
        return [], (
            f"{middle_layers} middle layers are not divisible by the {middle_stages} middle stages "
            f"(num_layers {num_layers} - first {first or 0} - last {last or 0})"
        )
    per_middle = middle_layers // middle_stages if middle_stages > 0 else 0
    counts = []
    for rank in range(pp):
        n = per_middle
        if rank == 0 and first is not None:
            n = first
        if rank == pp - 1 and last is not None:
            n = last
        counts.append(n)
    if sum(counts) != num_layers:
        return counts, (
            f"the stages would build {sum(counts)} layers ({'+'.join(map(str, counts))}), not the "
            f"model's {num_layers}"
        )
    return counts, ""


def uneven_split(num_layers: int, pp: int) -> Optional[tuple[int, int]]:
    """(first, last) stage layers that make the middle stages even, the extra layers on the first stage;
    None when there are fewer layers than stages."""
    if pp < 2 or num_layers < pp:
        return None
    middle = num_layers // pp
    ends = num_layers - middle * (pp - 2)
    return ends - ends // 2, ends // 2


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]
