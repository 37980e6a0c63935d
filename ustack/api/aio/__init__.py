"""Native asyncio on ustack: an event loop that polls the stack itself, transports on connections, a policy.

    from ustack.api.aio import EventLoopPolicy
    asyncio.set_event_loop_policy(EventLoopPolicy(driver))   # ``ustack run`` does this
    asyncio.run(main())

``loop`` (EventLoop, EventLoopPolicy, the stack-polling selector),
``transport`` (StreamTransport on a TCP connection, DatagramTransport on a
UDP endpoint).
"""

import asyncio

from ustack.api.aio.loop import EventLoop, EventLoopPolicy, ustack_socket

__all__ = ["EventLoop", "EventLoopPolicy", "install_policy", "uninstall_policy", "ustack_socket"]


def install_policy(driver, *more) -> EventLoopPolicy:
    """Make ``EventLoop(driver, *more)`` the loop ``asyncio.run()`` and ``new_event_loop()`` create.

    ``more``: other drivers the loops poll too (the loopback interface's).
    """
    policy = EventLoopPolicy(driver, *more)
    asyncio.set_event_loop_policy(policy)
    return policy


def uninstall_policy() -> None:
    """Put asyncio's default policy back if ours is installed."""
    if isinstance(asyncio.get_event_loop_policy(), EventLoopPolicy):
        asyncio.set_event_loop_policy(None)
