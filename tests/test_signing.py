"""Signed artifacts: Ed25519 over manifest.json (which covers every file's sha256).

Round trip (keygen, sign, load/verify with the public key), and every way a device must refuse:
a one-byte change in the manifest or in a model file, a wrong key, no signature, a damaged
signature record, and (with trusted keys in the owner's config file) any unsigned artifact.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import pytest

import edge_sdk
from edge_sdk.errors import InputValidationError, ManifestError
from edge_sdk.signing import SIGNATURE_NAME, generate_keypair, key_id, load_public_key, sign_artifact

import rt_artifacts as ra


@pytest.fixture(scope="module")
def arts(tmp_path_factory):
    return ra.onnx_artifacts(tmp_path_factory)


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGE_SDK_CONFIG", str(tmp_path / "no-config.toml"))
    monkeypatch.setenv("EDGE_SDK_VERIFIED_CACHE", str(tmp_path / "verified"))


@pytest.fixture
def keys(tmp_path):
    """((owner.key, owner.pub), (other.key, other.pub))."""
    (tmp_path / "keys").mkdir()
    return generate_keypair(tmp_path / "keys" / "owner"), generate_keypair(tmp_path / "keys" / "other")


def load(folder, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return edge_sdk.load(folder, **kw)


def test_round_trip(arts, tmp_path, keys):
    (priv, pub), _ = keys
    assert oct(priv.stat().st_mode & 0o777) == "0o600"
    folder = ra.copy_artifact(arts["intel-cpu"], tmp_path / "a")
    rec = sign_artifact(folder, priv)
    assert rec["key_id"] == key_id(load_public_key(pub)) and (folder / SIGNATURE_NAME).is_file()
    with load(folder, trusted_keys=[pub]) as m:
        assert m.profile == "intel-cpu"
    with load(folder, trusted_keys=[pub.read_bytes()]) as m:  # PEM bytes work as well as a path
        assert m.backend.startswith("openvino/")


def test_one_byte_change_of_the_manifest_is_refused(arts, tmp_path, keys):
    (priv, pub), _ = keys
    folder = ra.copy_artifact(arts["jetson-orin"], tmp_path / "a")
    sign_artifact(folder, priv)
    mpath = folder / "manifest.json"
    data = bytearray(mpath.read_bytes())
    i = data.index(b'"created_at": "') + len(b'"created_at": "') + 3  # a digit of the year: still valid JSON
    data[i] = ord("9") if data[i] != ord("9") else ord("8")
    mpath.write_bytes(bytes(data))
    load(folder).close()  # without trusted keys the edit is invisible (the manifest is not hashed) ...
    with pytest.raises(ManifestError, match="does not verify with any trusted key"):
        load(folder, trusted_keys=[pub])  # ... with them it is refused


def test_one_byte_change_of_a_model_file_is_refused(arts, tmp_path, keys):
    (priv, pub), _ = keys
    folder = ra.copy_artifact(arts["jetson-orin"], tmp_path / "a")
    sign_artifact(folder, priv)
    f = folder / "model.onnx"
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0x01
    f.write_bytes(bytes(data))
    with pytest.raises(ManifestError, match="sha256"):
        load(folder, trusted_keys=[pub])


def test_wrong_key_unsigned_and_damaged_signature_are_refused(arts, tmp_path, keys):
    (priv, pub), (other_priv, other_pub) = keys
    folder = ra.copy_artifact(arts["jetson-orin"], tmp_path / "a")
    with pytest.raises(ManifestError, match="not signed"):
        load(folder, trusted_keys=[pub])
    sign_artifact(folder, other_priv)
    with pytest.raises(ManifestError, match="does not verify"):
        load(folder, trusted_keys=[pub])
    load(folder, trusted_keys=[pub, other_pub]).close()  # any one trusted key will do
    rec = json.loads((folder / SIGNATURE_NAME).read_text())
    rec["signature"] = "!!not base64!!"
    (folder / SIGNATURE_NAME).write_text(json.dumps(rec))
    with pytest.raises(ManifestError, match="base64"):
        load(folder, trusted_keys=[other_pub])
    (folder / SIGNATURE_NAME).write_text("{}")
    with pytest.raises(ManifestError, match="not an ed25519 signature"):
        load(folder, trusted_keys=[other_pub])


def test_a_damaged_artifact_is_never_signed(arts, tmp_path, keys):
    (priv, _), _ = keys
    folder = ra.copy_artifact(arts["jetson-orin"], tmp_path / "a")
    (folder / "model.onnx").write_bytes(b"\x08" + (folder / "model.onnx").read_bytes()[1:-1])
    with pytest.raises(ManifestError):
        sign_artifact(folder, priv)
    assert not (folder / SIGNATURE_NAME).exists()


def test_bad_keys_are_input_errors(tmp_path, keys):
    (priv, pub), _ = keys
    (tmp_path / "junk.pub").write_text("not a key")
    with pytest.raises(InputValidationError, match="not a readable public key"):
        load_public_key(tmp_path / "junk.pub")
    with pytest.raises(InputValidationError, match="cannot read it"):
        sign_artifact(tmp_path, pub)  # a public key is no private key
    with pytest.raises(InputValidationError, match="exists"):
        generate_keypair(tmp_path / "keys" / "owner")


def test_openssh_ed25519_keys_work(arts, tmp_path):
    """Keys made by ssh-keygen -t ed25519 sign and verify too."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    key = ed25519.Ed25519PrivateKey.generate()
    (tmp_path / "id").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                                    serialization.NoEncryption()))
    (tmp_path / "id.pub").write_bytes(key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                                    serialization.PublicFormat.OpenSSH))
    folder = ra.copy_artifact(arts["jetson-orin"], tmp_path / "a")
    sign_artifact(folder, tmp_path / "id")
    load(folder, trusted_keys=[tmp_path / "id.pub"]).close()


def test_cli_keygen_sign_verify(arts, tmp_path, cli):
    env = {"EDGE_SDK_CONFIG": str(tmp_path / "no-config.toml")}
    r = cli("keygen", "--out", str(tmp_path / "owner"), env=env)
    assert r.returncode == 0 and "keep it secret" in r.stdout, r.stderr
    out = tmp_path / "out"
    for name in ("jetson-orin", "intel-cpu"):
        ra.copy_artifact(arts[name], out / name)
    r = cli("sign", str(out), "--key", str(tmp_path / "owner.key"), env=env)  # a convert output folder: every profile
    assert r.returncode == 0 and r.stdout.count("signed (key") == 2, r.stderr
    r = cli("verify", str(out / "jetson-orin"), "--key", str(tmp_path / "owner.pub"), "--no-load", env=env)
    assert r.returncode == 0 and "signed by key" in r.stdout, r.stderr
    r = cli("keygen", "--out", str(tmp_path / "other"), env=env)
    r = cli("verify", str(out / "jetson-orin"), "--key", str(tmp_path / "other.pub"), env=env)
    assert r.returncode == 4 and "does not verify" in r.stderr and "Traceback" not in r.stderr


def test_owner_config_makes_every_load_require_a_signature(arts, tmp_path, keys, monkeypatch):
    (priv, pub), _ = keys
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[trust]\ntrusted_keys = ["{pub}"]\n')
    monkeypatch.setenv("EDGE_SDK_CONFIG", str(cfg))
    folder = ra.copy_artifact(arts["jetson-orin"], tmp_path / "a")
    with pytest.raises(ManifestError, match="not signed"):
        load(folder)
    sign_artifact(folder, priv)
    load(folder).close()


def test_plain_load_never_imports_cryptography(arts, tmp_path):
    """The runtime path needs the [sign] extra only when signatures are used."""
    code = ("import sys, warnings; warnings.simplefilter('ignore'); import edge_sdk\n"
            f"edge_sdk.load({str(arts['jetson-orin'])!r}).close()\n"
            "assert 'cryptography' not in sys.modules, 'cryptography imported'\nprint('clean')\n")
    env = dict(os.environ, EDGE_SDK_CONFIG=str(tmp_path / "none.toml"))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0 and "clean" in r.stdout, r.stderr


def test_verify_false_cannot_switch_off_the_hashes_a_signature_vouches_for(arts, tmp_path, keys):
    """Issue 43, finding 7: load(verify=False, trusted_keys=...) checked the signature but not the
    file hashes, so a signed artifact with a replaced model file loaded."""
    (priv, pub), _ = keys
    folder = ra.copy_artifact(arts["jetson-orin"], tmp_path / "a")
    sign_artifact(folder, priv)
    other = ra.build_qdq_onnx(ra.build_float_onnx(tmp_path / "f.onnx", seed=3), tmp_path / "q.onnx")
    (folder / "model.onnx").write_bytes(other.read_bytes())  # another valid model
    load(folder, verify=False, crash_guard=False).close()  # no keys: development, the edit is allowed
    for kw in ({"verify": False}, {"verify": False, "crash_guard": False}):
        with pytest.raises(ManifestError, match="sha256"):
            load(folder, trusted_keys=[pub], **kw)
