"""The installed version of tether."""

__version__ = "0.1.0"
