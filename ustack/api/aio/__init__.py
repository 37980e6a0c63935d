"""Native asyncio on ustack: an event loop that polls the stack itself, transports on connections, a policy.

    from ustack.api.aio import EventLoopPolicy
    asyncio.set_event_loop_policy(EventLoopPolicy(driver))   # ``ustack run`` does this
    asyncio.run(main())

``loop`` (EventLoop, EventLoopPolicy, the stack-polling selector),
``transport`` (StreamTransport on a TCP connection, DatagramTransport on a
UDP endpoint).
"""

from ustack.api.aio.loop import EventLoop, EventLoopPolicy, ustack_socket

__all__ = ["EventLoop", "EventLoopPolicy", "ustack_socket"]
