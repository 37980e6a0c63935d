"""ustack: a user-space TCP/UDP/IPv4 stack for Python over kernel-bypass packet I/O."""

__version__ = "0.1.0"


def patch(driver, resolver=None):
    """Install ustack sockets as ``socket.socket`` (AF_INET; AF_UNIX and 127.0.0.0/8 stay on the kernel).

    Name lookups (``socket.getaddrinfo``...) go through ``resolver`` (default:
    ``ustack.api.resolver.Resolver(driver)``: /etc/hosts, then DNS over ustack UDP).

    Returns the installed class, which is also a context manager: ``with ustack.patch(driver):``
    unpatches when the block ends. See ``ustack.api.patch``; imported here lazily, so the core
    never loads the api package.

    Args:
        driver: the :class:`~ustack.api.driver.Driver` whose stack gets the sockets.
        resolver: what answers name lookups (default as above).

    Raises:
        ValueError: as :func:`ustack.api.patch.patch`.
    """
    from ustack.api.patch import patch as install

    return install(driver, resolver)


def unpatch() -> None:
    """Put the stdlib's ``socket.socket`` and name lookups back."""
    from ustack.api.patch import unpatch as uninstall

    uninstall()
