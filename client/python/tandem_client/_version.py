"""The package version (read by pyproject.toml too); it follows tandem's own version."""
__version__ = "0.1.0"
