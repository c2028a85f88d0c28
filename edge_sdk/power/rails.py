"""Jetson power rails: which to add up, and tegrastats output in the formats of several JetPacks.

The INA3221 monitors on Jetson modules measure several rails, and on most modules one of
them is the module's total input, upstream of the others. Adding it to the rest would
count the same watts twice, so when a total rail is present it is used alone:

- Orin NX / Orin Nano, Xavier NX (documented as ``5V_IN``), TX2 NX: ``VDD_IN`` is the module's
  total (``VDD_CPU_GPU_CV``, ``VDD_SOC`` ... are inside it).
- Nano (JetPack 4): ``POM_5V_IN`` is the total (``POM_5V_GPU``, ``POM_5V_CPU`` inside it).
- TX1 / TX2: ``VDD_IN`` (module) and ``VDD_MUX`` (carrier board) branch in parallel from the
  supply, so both are added; the rails downstream of either are not.
- AGX Xavier (``GPU CPU SOC CV VDDRQ SYS5V``) and AGX Orin (``VDD_GPU_SOC VDD_CPU_CV
  VIN_SYS_5V0 VDDQ_VDD2_1V8AO``) have no total rail: the named rails are summed (on AGX
  Xavier they are fed separately from SYS_VIN_HV / SYS_VIN_MV, per its design guide).

Unconnected channels (``NC``) and the hwmon "sum of shunt voltages" pseudo channel are ignored.
The chosen rails and the rule are written into the report, so a reader can check them.
"""

from __future__ import annotations

import re

#: Rails that are the module's total input, most specific first.
TOTAL_RAILS = ("VDD_IN", "POM_5V_IN", "5V_IN")

#: Top-level rails in parallel with the total (carrier board supply on TX1/TX2): added to it.
PARALLEL_RAILS = ("VDD_MUX",)

_IGNORED = re.compile(r"^(NC|N/A|sum of shunt voltages|)$", re.IGNORECASE)

# A rail reading in tegrastats: ``NAME cur/avg`` with optional ``mW`` units on both numbers
# (JetPack 5+: ``VDD_IN 5000mW/5000mW``; JetPack 4: ``POM_5V_IN 3000/3000``). The lookahead
# rejects ``RAM 2000/7000MB`` and ``IRAM 0/252kB(lfb 252kB)``; ``CPU [..]`` has no slash pair.
_RAIL = re.compile(r"(?:(?<=\s)|^)([A-Za-z][A-Za-z0-9_]*) (\d+)(mW)?/(\d+)(mW)?(?=\s|$)")

# tegrastats fields that look like ``NAME a/b`` but are not power rails.
_NOT_RAILS = frozenset({"RAM", "SWAP", "IRAM", "LFB", "EMC", "MTS"})


def combine(rails: list[str]) -> tuple[list[str], str]:
    """Pick the rails whose sum is the module's power, without double counting.

    Args:
        rails: Rail names as the sensor reports them.

    Returns:
        (rails to add up, a one-line description of the method for the report).

    Raises:
        ValueError: no usable rail.
    """
    named = [r for r in rails if not _IGNORED.match(r.strip())]
    for total in TOTAL_RAILS:
        if total in named:
            used = [total] + [r for r in PARALLEL_RAILS if r in named]
            others = [r for r in named if r not in used]
            label = " + ".join(used)
            return used, (f"total rail {label} (not adding {', '.join(others) or 'nothing'}: inside it)"
                          if len(used) == 1 else
                          f"module + carrier rails {label} (in parallel; not adding {', '.join(others) or 'nothing'})")
    if not named:
        raise ValueError(f"no named rail among {rails!r}")
    return named, "sum of rails " + " + ".join(named) + " (no total input rail on this module)"


def parse_tegrastats_line(line: str) -> dict[str, float]:
    """Rail name -> current milliwatts from one tegrastats line (empty if it has none).

    Args:
        line: One line of ``tegrastats`` output, any JetPack version.

    Returns:
        The instantaneous (first) value of every rail reading on the line, in mW.
    """
    out: dict[str, float] = {}
    for m in _RAIL.finditer(line):
        name, cur, unit_cur, _avg, unit_avg = m.groups()
        if name.upper() in _NOT_RAILS:
            continue
        if (unit_cur is None) != (unit_avg is None):
            continue  # mixed units: not a rail reading
        out[name] = float(cur)
    return out
