"""PEARL CPU backend plugin: a native n-ary sum tree. Importing it touches no device."""

__version__ = "0.1.0"
