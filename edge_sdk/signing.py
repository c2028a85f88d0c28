"""Signed artifacts: an Ed25519 signature over ``manifest.json``, which covers every file's sha256.

A device that trusts only its owner's key refuses any artifact the owner did not sign: one
changed byte in the manifest breaks the signature, and one changed byte in a model file breaks
the manifest's sha256 for it. The signature lies beside the manifest in ``manifest.sig`` (JSON:
algorithm, key id, base64 signature); it is not listed in the manifest, so signing never
changes the signed bytes. The signed message is :data:`CONTEXT` followed by the manifest bytes
exactly as read, so a signature made for something else cannot be replayed as one of these.

Keys: ``edge-sdk keygen --out owner`` writes ``owner.key`` (PKCS#8 PEM, mode 0600) and
``owner.pub``; OpenSSL (``openssl genpkey -algorithm ed25519``) and ``ssh-keygen -t ed25519``
keys work as well. Needs the ``cryptography`` package (``pip install "edge-sdk[sign]"``), only
where signatures are made or checked.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Iterable

from .errors import InputValidationError, ManifestError

SIGNATURE_NAME = "manifest.sig"
ALGORITHM = "ed25519"
#: Domain separation: what is signed is CONTEXT + the manifest bytes.
CONTEXT = b"edge-sdk manifest signature v1\n"
MAX_KEY_BYTES = 64 * 1024


def _crypto():
    from ._deps import require

    require("cryptography", "signed artifacts (Ed25519)", extra="sign")
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    return serialization, ed25519


def key_id(public_key) -> str:
    """A short, stable name of a public key: the first 16 hex digits of sha256(raw key)."""
    serialization, _ = _crypto()
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def _read_key_bytes(path: Path, what: str) -> bytes:
    from .strictjson import read_regular_file

    return read_regular_file(path, limit=MAX_KEY_BYTES, what=what, error=InputValidationError)


def load_public_key(key: Any):
    """An Ed25519 public key from a path, PEM/OpenSSH bytes, 32 raw bytes, or a key object.

    Raises:
        InputValidationError: unreadable, or not an Ed25519 public key.
        MissingDependencyError: ``cryptography`` is not installed.
    """
    serialization, ed25519 = _crypto()
    if isinstance(key, ed25519.Ed25519PublicKey):
        return key
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return key.public_key()
    name = "public key"
    if isinstance(key, str | os.PathLike):
        name = f"public key {key}"
        key = _read_key_bytes(Path(key), "public key")
    if not isinstance(key, bytes | bytearray):
        raise InputValidationError(f"trusted key of type {type(key).__name__}: expected a path, bytes or an Ed25519 key.")
    data = bytes(key)
    try:
        if len(data) == 32:
            return ed25519.Ed25519PublicKey.from_public_bytes(data)
        if data.lstrip().startswith(b"ssh-"):
            loaded = serialization.load_ssh_public_key(data.strip())
        else:
            loaded = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        raise InputValidationError(f"{name}: not a readable public key ({str(exc)[:120]}).",
                                   "Pass the .pub file `edge-sdk keygen` wrote (PEM or OpenSSH ed25519).") from None
    if not isinstance(loaded, ed25519.Ed25519PublicKey):
        raise InputValidationError(f"{name}: not an Ed25519 key ({type(loaded).__name__}).",
                                   "edge-sdk signatures are Ed25519: make a key with `edge-sdk keygen`.")
    return loaded


def load_private_key(path: str | Path):
    """An Ed25519 private key from a PEM (PKCS#8) or OpenSSH file (unencrypted).

    Raises:
        InputValidationError: unreadable, encrypted, or not an Ed25519 private key.
    """
    serialization, ed25519 = _crypto()
    data = _read_key_bytes(Path(path), "private key")
    try:
        if b"OPENSSH PRIVATE KEY" in data:
            key = serialization.load_ssh_private_key(data, password=None)
        else:
            key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise InputValidationError(f"private key {path}: cannot read it ({str(exc)[:120]}).",
                                   "Pass an unencrypted Ed25519 key, e.g. the .key file `edge-sdk keygen` wrote.") from None
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise InputValidationError(f"private key {path}: not an Ed25519 key ({type(key).__name__}).",
                                   "edge-sdk signatures are Ed25519: make a key with `edge-sdk keygen`.")
    return key


def generate_keypair(out: str | Path, *, force: bool = False) -> tuple[Path, Path]:
    """Write a new Ed25519 key pair: ``OUT.key`` (private, mode 0600) and ``OUT.pub``.

    Raises:
        InputValidationError: a file exists (without ``force``) or the folder is not writable.
    """
    serialization, ed25519 = _crypto()
    out = Path(out)
    priv_path, pub_path = out.with_name(out.name + ".key"), out.with_name(out.name + ".pub")
    for p in (priv_path, pub_path):
        if os.path.lexists(p) and not force:
            raise InputValidationError(f"{p} exists; not overwriting a key.", "Pick another --out, or pass --force.")
    key = ed25519.Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    pub = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    try:
        if force and os.path.lexists(priv_path):
            os.unlink(priv_path)
        fd = os.open(priv_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(pem)
        pub_path.write_bytes(pub)
    except OSError as exc:
        raise InputValidationError(f"Cannot write the key pair at {out}: {exc.strerror or exc}.") from None
    return priv_path, pub_path


def sign_artifact(folder: str | Path, private_key: str | Path) -> dict[str, str]:
    """Check an artifact folder completely, then sign its manifest (writes ``manifest.sig``).

    The artifact must pass every check first (hashes included), so a damaged artifact is never
    signed. External delegates named by its profile are the signer's to vouch for and are not
    held against it here; devices still decide whether to allow them.

    Returns:
        The signature record written (``algorithm``, ``key_id``, ``manifest_sha256``, ``signature``).

    Raises:
        ManifestError / ModelLoadError: the artifact does not pass its checks.
        InputValidationError: the key is unusable, or the signature cannot be written.
    """
    from .fsutil import atomic_write_bytes
    from .trust import check_artifact

    key = load_private_key(private_key)
    checked = check_artifact(folder, verify=True, policy=_SignerPolicy())  # type: ignore[arg-type]
    folder, raw = checked.folder, checked.manifest_bytes  # sign exactly the bytes that were checked
    record = {"format": "edge-sdk-signature", "version": 1, "algorithm": ALGORITHM,
              "key_id": key_id(key.public_key()), "manifest_sha256": hashlib.sha256(raw).hexdigest(),
              "signature": base64.b64encode(key.sign(CONTEXT + raw)).decode()}
    try:
        atomic_write_bytes(folder / SIGNATURE_NAME, (json.dumps(record, indent=2) + "\n").encode())
    except OSError as exc:
        raise InputValidationError(f"Cannot write {folder / SIGNATURE_NAME}: {exc.strerror or exc}.") from None
    return record


class _SignerPolicy:
    """Policy for signing: no signature needed yet, any external delegate vouched for by the signer."""

    allow_external_delegates: tuple[str, ...] = ()
    trusted_keys: tuple[Any, ...] = ()

    @staticmethod
    def delegate_allowed(library: str) -> bool:
        return True


def verify_manifest_signature(folder: Path, raw: bytes, trusted_keys: Iterable[Any]) -> str:
    """Check ``manifest.sig`` in ``folder`` over ``raw`` against the trusted keys.

    Returns:
        The key id of the key that signed it.

    Raises:
        ManifestError: no signature, a malformed one, or none of the keys verifies it.
        InputValidationError: a trusted key is unreadable.
        MissingDependencyError: ``cryptography`` is not installed.
    """
    from .strictjson import loads, read_regular_file

    keys = [load_public_key(k) for k in trusted_keys]  # imports cryptography, or names the extra
    from cryptography.exceptions import InvalidSignature

    path = folder / SIGNATURE_NAME
    hint = "Sign it with the owner's key (edge-sdk sign DIR --key OWNER.key), or copy the signed artifact again."
    if not os.path.lexists(path):
        raise ManifestError(f"{folder} is not signed (no {SIGNATURE_NAME}), and this device accepts only signed artifacts.",
                            hint)
    rec = loads(read_regular_file(path, limit=MAX_KEY_BYTES, what="signature", error=ManifestError),
                where=str(path), error=ManifestError)
    if not isinstance(rec, dict) or rec.get("algorithm") != ALGORITHM or not isinstance(rec.get("signature"), str):
        raise ManifestError(f"{path}: not an {ALGORITHM} signature record.", hint)
    try:
        sig = base64.b64decode(rec["signature"], validate=True)
    except ValueError:
        raise ManifestError(f"{path}: the signature is not valid base64.", hint) from None
    for key in keys:
        try:
            key.verify(sig, CONTEXT + raw)
        except InvalidSignature:
            continue
        return key_id(key)
    ids = ", ".join(key_id(k) for k in keys)
    raise ManifestError(f"{folder}: the manifest signature (key {str(rec.get('key_id'))[:16]}) does not verify with any "
                        f"trusted key ({ids}): the manifest was changed after signing, or another key signed it.", hint)


__all__ = ["ALGORITHM", "CONTEXT", "SIGNATURE_NAME", "generate_keypair", "key_id", "load_private_key",
           "load_public_key", "sign_artifact", "verify_manifest_signature"]
