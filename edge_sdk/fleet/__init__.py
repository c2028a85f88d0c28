"""A device fleet on Dask distributed: bench (and list) many devices from one workstation.

``pip install "edge-sdk[fleet]"``. One machine runs ``edge-sdk fleet serve`` (a Dask scheduler),
every device runs ``edge-sdk fleet join ADDRESS`` (a Dask worker tagged with the profiles it
runs natively), and ``edge-sdk bench OUT --fleet ADDRESS`` or :func:`bench` sends each artifact
folder (bytes + sha256) to the devices of its profile, benches it there in a fresh process and
gathers one report; ``convert --fleet`` / :func:`convert` farms (model x profile) conversions to
devices tagged ``convert`` and publishes the folders here atomically. Plain TCP only on loopback; mutual TLS (``edge-sdk fleet certs``) otherwise.
See docs/fleet.md.

Importing this package does not import Dask; the functions do, and raise
:class:`~edge_sdk.errors.MissingDependencyError` naming ``edge-sdk[fleet]`` when it is missing.
"""

from __future__ import annotations

from .client import FleetReport, FleetResult, bench, connect, devices, status
from .conversion import convert
from .node import FleetError, join, serve
from .security import Address, check_transport, make_certs, parse_address

__all__ = ["Address", "FleetError", "FleetReport", "FleetResult", "bench", "check_transport", "connect", "convert", "devices",
           "join", "make_certs", "parse_address", "serve", "status"]
