"""What the real-model tests may expect of this host's CPU.

Int8 kernels differ by instruction set: ONNX Runtime and OpenVINO take VNNI/AMX paths where the CPU
has them and AVX2 paths (int16 sums of u8 x s8 products, which saturate) where it does not, and
OpenVINO runs float parts in bf16 only where the CPU has it. So the same conversion can publish a
row on one host and rightly refuse it on another. Two kinds of expectation follow:

- the safety ones hold on every host: no published artifact fails its task, gate and task agree,
  no crash (asserted unconditionally in ``test_practice.py`` / ``test_wider.py``);
- "this row publishes" holds where it was measured. Each such expectation names the ISA it was
  measured on (:data:`XEON_AMX`, the host ``docs/accuracy*.md`` name), and on a host without that
  ISA the row must still end in a verdict its task agrees with (:func:`publishes_where_measured`).
"""

from __future__ import annotations

from typing import Any

#: Intel Xeon with AVX-512 VNNI and AMX: the host the wider set's "publishes" expectations were
#: measured on (docs/accuracy-wider.md, "Measured on").
XEON_AMX = ("avx512_vnni", "amx_int8")


def flags() -> set[str]:
    """This CPU's flags (``/proc/cpuinfo``), as ``edge_sdk.hostinfo`` reads them."""
    from edge_sdk import hostinfo

    return set(hostinfo.cpu_flags())


def has(isa: tuple[str, ...]) -> bool:
    """Whether this host has every flag of ``isa``."""
    return set(isa) <= flags()


def describe(isa: tuple[str, ...]) -> str:
    have = flags()
    return (f"measured on a CPU with {' + '.join(isa)}; this host has "
            f"{', '.join(f for f in ('avx2', 'avx512f', 'avx512_vnni', 'avx_vnni', 'amx_int8') if f in have) or 'none of AVX2/AVX-512/VNNI/AMX'}")


def publishes_where_measured(row: dict[str, Any], isa: tuple[str, ...]) -> None:
    """Assert that ``row`` (a matrix row) publishes and does its task on a host with ``isa``; on any
    other host, that it ends in a verdict the task agrees with: published and the task holds, or
    refused (gate failed, with a reason) where the task fails too (or is borderline). A refusal the
    task would have passed - the gate stricter than the task - fails here as on the measured host."""
    where = describe(isa)
    if has(isa):
        assert row["status"] == "published" and row.get("task_passed"), (where, row)
        return
    assert row["status"] in ("published", "gate_failed"), (where, row)
    if row["status"] == "published":
        assert row["task_passed"] or row.get("borderline"), (where, row)
    else:
        assert row["reason"], (where, row)
        assert not row["task_passed"] or row.get("borderline"), (
            f"{where}: the gate refused a row whose task passes (gate stricter than the task)", row)
