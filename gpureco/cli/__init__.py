"""The command line: `gpureco demo | evaluate | split | compare` (_commands), and the demo
(_demo). It calls the public front doors; nothing below it imports it."""
from ._commands import main

__all__ = ["main"]
