"""The SDK version, in one place (read by pyproject and written into every manifest)."""

__version__ = "0.1.0"
