"""What applications touch, above the core: the driver (who polls), clocks, stdlib-shaped sockets.

The core (``ustack.stack`` and below) never imports this package.
"""
