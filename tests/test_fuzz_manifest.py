"""Fuzzing the parsers that read untrusted files: manifests and profiles (seeded, fixed budget).

A seeded mutator (byte flips, insertions, deletions, splices of JSON/TOML tokens, NaN/Infinity,
huge numbers, deep nesting, duplicate keys, binary junk) rewrites a real manifest and a real
profile a fixed number of times. The only acceptable outcomes are success or an
``EdgeSDKError`` subclass (``ManifestError`` / ``ModelLoadError`` for manifests, ``ProfileError``
for profiles): no other exception type, no hang. The budget is a fixed case count (a few
seconds on the 2-core CI host); the seed makes a failure reproducible.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from edge_sdk.errors import EdgeSDKError, ModelLoadError, ProfileError
from edge_sdk.profiles import load_profile_file
from edge_sdk.trust import Policy, check_artifact

import rt_artifacts as ra

TOKENS = [b"NaN", b"Infinity", b"-Infinity", b"1e999", b"9" * 400, b"[" * 300, b"{", b"}", b"null", b'"', b"\\",
          b"\x00", b"\xff\xfe", b'"schema_version": 1, ', b'"x": 1, "x": 2', b"-0", b"1e-400", b"true", b"[]",
          b"\xe2\x80\xae", b"\n", b"../", b"/etc/passwd", b"\t" * 10]
TOML_TOKENS = [b"nan", b"inf", b"-inf", b"1e999", b"9" * 400, b"[" * 300, b"]", b"=", b"\"", b"'''", b"\x00",
               b"\xff\xfe", b"\n[accuracy]\n", b"\nname = \"../../victim\"\n", b"\nname = \"\"\n", b"-1.0", b"0x7f",
               b"1979-05-27T07:32:00Z", b"{ a = 1 }", b"\n[[runtime.chain]]\n", b"external:evil.so"]

CASES = 800


def mutate(data: bytes, rnd: random.Random, tokens: list[bytes]) -> bytes:
    """1-4 random edits of ``data``."""
    buf = bytearray(data)
    for _ in range(rnd.randint(1, 4)):
        op = rnd.randrange(6)
        pos = rnd.randrange(len(buf) + 1)
        if op == 0 and buf:
            buf[min(pos, len(buf) - 1)] ^= 1 << rnd.randrange(8)
        elif op == 1:
            buf[pos:pos] = rnd.choice(tokens)
        elif op == 2 and buf:
            del buf[pos:pos + rnd.randint(1, 40)]
        elif op == 3:  # replace a number with a special token
            digits = [i for i, c in enumerate(buf) if 48 <= c <= 57]
            if digits:
                i = rnd.choice(digits)
                buf[i:i + 1] = rnd.choice(tokens)
        elif op == 4 and len(buf) > 2:  # splice a chunk of the file elsewhere
            a = rnd.randrange(len(buf))
            chunk = bytes(buf[a:a + rnd.randint(1, 80)])
            buf[pos:pos] = chunk
        else:
            buf[pos:pos] = bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 8)))
    return bytes(buf)


@pytest.fixture(scope="module")
def arts(tmp_path_factory):
    return ra.onnx_artifacts(tmp_path_factory)


def test_fuzz_manifest_reader(arts, tmp_path, monkeypatch):
    monkeypatch.setenv("EDGE_SDK_CONFIG", str(tmp_path / "none.toml"))
    folder = ra.copy_artifact(arts["intel-cpu"], tmp_path / "a")
    original = (folder / "manifest.json").read_bytes()
    policy = Policy.resolve()
    rnd = random.Random(20251313)
    outcomes = {"ok": 0, "refused": 0}
    t0 = time.perf_counter()
    for i in range(CASES):
        (folder / "manifest.json").write_bytes(mutate(original, rnd, TOKENS))
        try:
            check_artifact(folder, policy=policy)
            outcomes["ok"] += 1
        except ModelLoadError:  # ManifestError or a damaged container
            outcomes["refused"] += 1
        except Exception as exc:  # noqa: BLE001 - the property under test
            pytest.fail(f"case {i}: {type(exc).__name__}: {exc}")
    elapsed = time.perf_counter() - t0
    print(f"manifest fuzz: {CASES} cases in {elapsed:.1f} s, {outcomes}")
    assert outcomes["refused"] > CASES // 2  # the mutations bite


def test_fuzz_profile_reader(tmp_path):
    src = Path(__import__("edge_sdk").__file__).parent / "device_profiles"
    originals = [p.read_bytes() for p in sorted(src.glob("*.toml"))] if src.is_dir() else []
    if not originals:
        from importlib import resources

        originals = [e.read_bytes() for e in resources.files("edge_sdk.device_profiles").iterdir() if e.name.endswith(".toml")]
    assert originals
    rnd = random.Random(20251314)
    path = tmp_path / "p.toml"
    outcomes = {"ok": 0, "refused": 0}
    t0 = time.perf_counter()
    for i in range(CASES):
        path.write_bytes(mutate(rnd.choice(originals), rnd, TOML_TOKENS))
        try:
            load_profile_file(path)
            outcomes["ok"] += 1
        except ProfileError:
            outcomes["refused"] += 1
        except EdgeSDKError as exc:
            pytest.fail(f"case {i}: a profile error must be a ProfileError, got {type(exc).__name__}: {exc}")
        except Exception as exc:  # noqa: BLE001 - the property under test
            pytest.fail(f"case {i}: {type(exc).__name__}: {exc}")
    print(f"profile fuzz: {CASES} cases in {time.perf_counter() - t0:.1f} s, {outcomes}")
    assert outcomes["refused"] > CASES // 2
