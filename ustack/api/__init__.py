"""What applications touch, above the core: the driver (who polls), clocks, stdlib-shaped sockets.

driver, clock; base (what sockets share: handles for dup, timeouts, flags,
makefile), dgram (UDP), stream (TCP), socket (the factory); readiness (one
kernel-visible fd per socket for select/poll/epoll/selectors); patch
(``ustack.patch(driver)``: the socket class installed as ``socket.socket``).

The core (``ustack.stack`` and below) never imports this package.
"""
