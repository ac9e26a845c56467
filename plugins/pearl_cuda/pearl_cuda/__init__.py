"""PEARL CUDA backend plugin. Importing it touches no device."""

__version__ = "0.2.0"
