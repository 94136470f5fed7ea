"""A TCP proxy that delays every byte by a fixed time in each direction: the network tests'
stand-in for `tc netem delay` on kernels without netem.

    python delayproxy.py HOST:PORT SECONDS

listens on 127.0.0.1 (any free port, printed as ``listening <port>`` on the first line of
stdout) and forwards each connection to HOST:PORT. Data read at time t is written at
t + SECONDS, in order, so a request and its reply gain 2 x SECONDS: the added round trip of
a link with that one-way latency. Bandwidth is not limited. Run inside a host's network
namespace, the proxy's own connection to HOST:PORT crosses the host's link (and its packet
loss).
"""

from __future__ import annotations

import asyncio
import sys


async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    """Copy `reader` to `writer`, each chunk `delay` seconds after it arrived."""
    loop = asyncio.get_running_loop()
    pending: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def deliver() -> None:
        while True:
            due, data = await pending.get()
            await asyncio.sleep(max(0.0, due - loop.time()))
            if not data:
                return
            writer.write(data)
            await writer.drain()

    delivering = asyncio.create_task(deliver())
    try:
        while data := await reader.read(65536):
            pending.put_nowait((loop.time() + delay, data))
        pending.put_nowait((loop.time() + delay, b""))
        await delivering
    finally:
        delivering.cancel()
        writer.close()


async def serve(upstream: tuple[str, int], delay: float) -> None:
    async def connected(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            server_reader, server_writer = await asyncio.open_connection(*upstream)
        except OSError:
            client_writer.close()
            return
        pumps = [
            asyncio.create_task(pump(client_reader, server_writer, delay)),
            asyncio.create_task(pump(server_reader, client_writer, delay)),
        ]
        # A reset on either side ends both directions (each closes its writer).
        await asyncio.wait(pumps, return_when=asyncio.FIRST_EXCEPTION)
        for task in pumps:
            task.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)

    server = await asyncio.start_server(connected, "127.0.0.1", 0)
    print(f"listening {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    host, port = sys.argv[1].rsplit(":", 1)
    asyncio.run(serve((host, int(port)), float(sys.argv[2])))


if __name__ == "__main__":
    main()
