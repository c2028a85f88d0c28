"""aarch64 (emulated) verification harness: ``make test-arm64`` runs ``run.py``; see docs/arm64.md."""
