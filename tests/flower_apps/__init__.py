"""Flower apps written the way Flower's examples are (see README.md); imported as ``flower_apps``."""
