#!/usr/bin/env python3
"""fp8spec preflight, the Ray CPU check: does the Ray cluster offer the logical CPUs verl's main_ppo takes?

Shipped beside preflight.py in every trainer bundle (preflight.py runs it before any node task; launch.sh run by
hand runs this file alone). verl's main_ppo places CPU-only actors (TransferQueue's controller and storage units)
before it asks for GPUs, then one placement-group bundle of CPUs per GPU, and Ray leaves an actor it cannot place
pending with no error: on a cluster with too few logical CPUs the training job waits forever in silence. The
counts are the bundle's preflight.json "ray_cpus" (from fp8spec's verl profile). Standard library and ray only.

    python3 preflight_cpus.py [--address ADDR]   # the cluster verl's ray.init would join; exit 3 when too few

Exit codes: 0 enough CPUs, 2 the check could not run (no ray, an address that does not answer, a bad
preflight.json), 3 too few logical CPUs (one line says how many, and how many to start Ray with).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

EXIT_CPU_SHORTAGE = 3


class CpuShortage(Exception):
    """The Ray cluster offers too few logical CPUs for verl's main_ppo, which would wait forever: exit code 3."""


class CheckError(Exception):
    """The check could not run: exit code 2."""


def ray_cpu_shortage(need: dict | None, cluster_cpus: float, cluster_gpus: float, gpus: int) -> str | None:
    """Why verl's main_ppo would wait forever on a cluster with these totals (None: it will not, for CPUs).

    ``need``: preflight.json's "ray_cpus". The CPU-only actors come first, held to the end; once the cluster has
    the run's ``gpus`` (fewer: verl stops itself with an error), every GPU's placement-group bundle takes
    ``per_gpu`` more. Totals only: which node has them is Ray's business (and its own PENDING state)."""
    if not need:
        return None
    before = need["before_gpus"]
    wanted = before + (need["per_gpu"] * gpus if cluster_gpus >= gpus else 0)
    if cluster_cpus >= wanted:
        return None
    per_gpu = (
        f" + {need['per_gpu']} per GPU for its {gpus} GPU placement-group bundles" if wanted > before else ""
    )
    return (
        f"the Ray cluster offers {cluster_cpus:g} logical CPUs; verl {need['verl']}'s main_ppo needs "
        f"{wanted} ({before} for its CPU-only actors before it asks for GPUs{per_gpu}) and would wait "
        f"forever without an error: start Ray with --num-cpus={wanted} or more (a count, not cores)"
    )


def cluster_totals(ray: object) -> tuple:
    """(logical CPUs, GPUs) the joined Ray cluster offers in all."""
    total = ray.cluster_resources()  # type: ignore[attr-defined]
    return float(total.get("CPU", 0)), float(total.get("GPU", 0))


def gpus_of_run(expected: dict) -> int:
    return expected["hardware"]["nodes"] * expected["hardware"]["gpus_per_node"]


def require_cpus(ray: object, expected: dict) -> None:
    """Raise CpuShortage when the joined cluster is short of CPUs for this bundle's run."""
    cpus, gpus = cluster_totals(ray)
    shortage = ray_cpu_shortage(expected.get("ray_cpus"), cpus, gpus, gpus_of_run(expected))
    if shortage:
        raise CpuShortage(shortage)


def local_cpus() -> float:
    """Logical CPUs a Ray that verl starts itself (ray.init without a cluster) would offer: Ray's own count."""
    try:
        from ray._private.utils import get_num_cpus

        return float(get_num_cpus())
    except Exception:  # pragma: no cover - Ray moved it: the affinity mask is what it reads first
        return float(
            len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        )


def check_ray_cpus(expected: dict, address: str | None) -> str:
    """Join the running cluster verl's ray.init would join (address, RAY_ADDRESS, else a local head) and check its
    CPUs; with none running, verl starts its own, so count what that one would offer. Returns the passing line."""
    try:
        import ray
    except ImportError as err:
        raise CheckError(f"ray is not importable ({err})") from err
    try:
        # RAY_ADDRESS set: Ray reads it (as verl's ray.init will); else "auto" finds a local head or raises
        joined = address or (None if os.environ.get("RAY_ADDRESS") else "auto")
        ray.init(address=joined, logging_level=logging.WARNING, log_to_driver=False)
    except ConnectionError:
        if address or os.environ.get("RAY_ADDRESS"):
            raise CheckError(
                f"cannot join the Ray cluster at {address or os.environ['RAY_ADDRESS']}"
            ) from None
        cpus, where = local_cpus(), "the local Ray verl would start"
        shortage = ray_cpu_shortage(expected.get("ray_cpus"), cpus, 0, gpus_of_run(expected))
    except Exception as err:
        raise CheckError(f"cannot join the Ray cluster ({type(err).__name__}: {err})") from err
    else:
        try:
            cpus, gpus = cluster_totals(ray)
        finally:
            ray.shutdown()
        where = "the Ray cluster"
        shortage = ray_cpu_shortage(expected.get("ray_cpus"), cpus, gpus, gpus_of_run(expected))
    if shortage:
        raise CpuShortage(shortage.replace("the Ray cluster", where, 1))
    return f"{where} offers {cpus:g} logical CPUs: enough for verl's main_ppo"


def main(argv: list[str] | None = None) -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--expected",
        default=os.path.join(here, "preflight.json"),
        help="the bundle's expected values (default: preflight.json beside this file)",
    )
    parser.add_argument("--address", default=None, help="Ray address (default: what verl's ray.init joins)")
    args = parser.parse_args(argv)
    try:
        with open(args.expected, encoding="utf-8") as fh:
            expected = json.load(fh)
        print("preflight: " + check_ray_cpus(expected, args.address))
    except (OSError, ValueError, KeyError, TypeError) as err:
        print(f"preflight: error: cannot use {args.expected}: {err}", file=sys.stderr)
        return 2
    except CheckError as err:
        print(f"preflight: error: {err}", file=sys.stderr)
        return 2
    except CpuShortage as err:
        print(f"preflight: error: {err}", file=sys.stderr)
        return EXIT_CPU_SHORTAGE
    return 0


if __name__ == "__main__":
    sys.exit(main())
