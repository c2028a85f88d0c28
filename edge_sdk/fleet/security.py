"""Fleet addresses and TLS: who may talk to the scheduler, and with which certificates.

Any client of a Dask scheduler can run code on its workers, so a fleet never listens or
connects in plain TCP beyond this machine unless told to: plain ``tcp://`` is allowed only on a
loopback address (127.0.0.0/8, ::1, ``localhost``), or with an explicit ``insecure=True``
(``--insecure``) that prints a warning. Everything else uses mutual TLS with the files
:func:`make_certs` writes (``edge-sdk fleet certs DIR``)::

    DIR/ca.pem            the fleet's certificate authority (every member trusts it)
    DIR/ca.key            its private key (keep it off the devices; only `certs` needs it)
    DIR/scheduler.pem/.key  for `fleet serve`
    DIR/worker.pem/.key     for `fleet join` (every device)
    DIR/client.pem/.key     for `bench --fleet`, `fleet status`

Nothing here imports Dask.
"""

from __future__ import annotations

import ipaddress
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from edge_sdk.errors import InputValidationError

DEFAULT_PORT = 8786
ROLES = ("scheduler", "worker", "client")


@dataclass(frozen=True)
class Address:
    """A parsed fleet address.

    Attributes:
        scheme: ``tcp`` or ``tls``.
        host: Host name or IP (IPv6 without brackets).
        port: TCP port.
    """

    scheme: str
    host: str
    port: int

    @property
    def url(self) -> str:
        """The address as Dask wants it (``tls://[::1]:8786``)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

    @property
    def loopback(self) -> bool:
        """True for 127.0.0.0/8, ::1 and ``localhost``."""
        return is_loopback(self.host)


def is_loopback(host: str) -> bool:
    """True when ``host`` is a loopback IP address or ``localhost``."""
    if host.lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_address(text: str, *, tls: bool = False, default_port: int = DEFAULT_PORT) -> Address:
    """Parse ``HOST[:PORT]``, ``[IPv6]:PORT`` or ``tcp://``/``tls://`` forms.

    Args:
        text: The address as the user typed it.
        tls: A TLS directory was given: a scheme-less address means ``tls://``.
        default_port: Port when none is given.

    Raises:
        InputValidationError: an unknown scheme, an empty host or a bad port.
    """
    raw = (text or "").strip()
    scheme = "tls" if tls else "tcp"
    if "://" in raw:
        scheme, raw = raw.split("://", 1)
        scheme = scheme.lower()
        if scheme not in ("tcp", "tls"):
            raise InputValidationError(f"fleet address '{text}': unknown scheme '{scheme}://'.",
                                       "Use HOST:PORT, tcp://HOST:PORT (loopback only) or tls://HOST:PORT.")
    raw = raw.rstrip("/")
    port: int | str = default_port
    if raw.startswith("["):
        host, _, rest = raw[1:].partition("]")
        if rest.startswith(":"):
            port = rest[1:]
    elif raw.count(":") == 1:
        host, port = raw.split(":")
    else:
        host = raw  # a bare IPv6 address or a host name
    try:
        port = int(port)
        if not 0 <= port < 65536:
            raise ValueError
    except ValueError:
        raise InputValidationError(f"fleet address '{text}': '{port}' is not a port number.",
                                   "e.g. 127.0.0.1:8786 or tls://fleet.example:8786") from None
    if not host:
        raise InputValidationError(f"fleet address '{text}' has no host.", "e.g. 127.0.0.1:8786")
    return Address(scheme, host, port)


def check_transport(addr: Address, tls_dir: str | None, insecure: bool, role: str) -> Address:
    """Refuse plain TCP beyond loopback unless ``insecure``; match the scheme to ``tls_dir``.

    Args:
        addr: The parsed address.
        tls_dir: The certificates folder (``--tls``), or None.
        insecure: The user asked for plain TCP on a non-loopback address (a warning is printed).
        role: ``scheduler``, ``worker`` or ``client`` (for messages).

    Returns:
        The address with the scheme that will be used.

    Raises:
        InputValidationError: plain TCP on a non-loopback address without ``insecure``, or a
            ``tls://`` address without certificates.
    """
    if tls_dir:
        check_tls_dir(tls_dir, role)
        if addr.scheme == "tcp":
            addr = Address("tls", addr.host, addr.port)
        return addr
    if addr.scheme == "tls":
        raise InputValidationError(f"{addr.url} is a TLS address but no certificates were given.",
                                   "Pass --tls DIR (the folder `edge-sdk fleet certs` wrote).")
    if not addr.loopback:
        if not insecure:
            raise InputValidationError(
                f"refusing plain TCP on {addr.host} (not a loopback address): any client of a Dask scheduler "
                "can run code on every device of the fleet.",
                "Make certificates with `edge-sdk fleet certs DIR` and pass --tls DIR on every member; "
                "--insecure allows plain TCP on a trusted, isolated network.")
        print(f"warning: plain TCP on {addr.host} without TLS (--insecure): anyone who can reach "
              f"{addr.url} can run code on every device of this fleet.", file=sys.stderr)
    return addr


def check_tls_dir(tls_dir: str | os.PathLike, role: str) -> Path:
    """The certificates folder, with the CA and ``role``'s certificate and key present.

    Raises:
        InputValidationError: the folder or one of its files is missing.
    """
    d = Path(tls_dir)
    need = [d / "ca.pem", d / f"{role}.pem", d / f"{role}.key"]
    missing = [str(p) for p in need if not p.is_file()]
    if missing:
        raise InputValidationError(f"TLS folder {d}: missing {', '.join(missing)}.",
                                   "Make the files with `edge-sdk fleet certs DIR` (copy ca.pem and the "
                                   f"{role} pair to this machine).")
    return d


def security(tls_dir: str | os.PathLike | None, role: str):
    """A ``distributed.Security`` for mutual TLS as ``role`` (None without ``tls_dir``: plain TCP)."""
    if not tls_dir:
        return None
    from distributed import Security

    d = check_tls_dir(tls_dir, role)
    return Security(tls_ca_file=str(d / "ca.pem"), require_encryption=True,
                    **{f"tls_{role}_cert": str(d / f"{role}.pem"), f"tls_{role}_key": str(d / f"{role}.key")})


def make_certs(folder: str | os.PathLike, hosts: list[str] | None = None, *, days: int = 825,
               force: bool = False) -> dict[str, str]:
    """Make a fleet CA and scheduler/worker/client certificates for mutual TLS.

    Args:
        folder: Where to write (created; private keys get mode 0600).
        hosts: Names and IPs the scheduler is reached by (its certificate's subject alternative
            names); ``localhost``, 127.0.0.1 and ::1 are always included.
        days: Validity.
        force: Overwrite existing files.

    Returns:
        File name -> path of what was written.

    Raises:
        InputValidationError: files exist and ``force`` is False.
        MissingDependencyError: ``cryptography`` is not installed (the ``fleet`` extra).
    """
    import datetime

    from edge_sdk._deps import require

    require("cryptography", "edge-sdk fleet certs", extra="fleet")
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    out = Path(folder)
    names = ["ca"] + list(ROLES)
    existing = [str(out / f"{n}.{ext}") for n in names for ext in ("pem", "key") if (out / f"{n}.{ext}").exists()]
    if existing and not force:
        raise InputValidationError(f"{out} already holds fleet certificates ({existing[0]} ...).",
                                   "Pick an empty folder, or pass --force to replace them (every member then "
                                   "needs the new files).")
    out.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days)

    def key():
        return ec.generate_private_key(ec.SECP256R1())

    def name(cn):
        return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "edge-sdk fleet"),
                          x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    ca_key = key()
    ca = (x509.CertificateBuilder().subject_name(name("edge-sdk fleet CA")).issuer_name(name("edge-sdk fleet CA"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(start).not_valid_after(end)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                       key_encipherment=False, data_encipherment=False, key_agreement=False,
                                       encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    san: list = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                 x509.IPAddress(ipaddress.ip_address("::1"))]
    for h in hosts or []:
        try:
            san.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            san.append(x509.DNSName(h))
    written: dict[str, str] = {}

    def write(fname: str, data: bytes, private: bool) -> None:
        path = out / fname
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        if private:
            os.chmod(path, 0o600)
        written[fname] = str(path)

    def key_bytes(k) -> bytes:
        return k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                               serialization.NoEncryption())

    write("ca.pem", ca.public_bytes(serialization.Encoding.PEM), False)
    write("ca.key", key_bytes(ca_key), True)
    for role in ROLES:
        k = key()
        cert = (x509.CertificateBuilder().subject_name(name(f"edge-sdk fleet {role}")).issuer_name(ca.subject)
                .public_key(k.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(start).not_valid_after(end)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.SubjectAlternativeName(san), critical=False)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                               critical=False)
                .sign(ca_key, hashes.SHA256()))
        write(f"{role}.pem", cert.public_bytes(serialization.Encoding.PEM), False)
        write(f"{role}.key", key_bytes(k), True)
    return written
