"""bantam: a tiny, powerful AI agent. Importing it has no side effects."""

__version__ = "0.1.0"
__all__ = ["__version__"]
