"""A real SMTP server on loopback for Herald's e-mail channel tests (aiosmtpd).

Usage: smtp_server.py DIR. It listens on 127.0.0.1 on a free port, prints the
port on stdout, and then answers each message as the file DIR/mode says when the
message's data has arrived:

  accept    250, the message is written to DIR/<n>.json
  tempfail  451 (transient: the sender should retry)
  reject    554 (permanent)
  drop      the connection is cut after the data arrived, with no reply
            (the message is written to DIR/<n>.dropped.json)

Every answer given is appended to DIR/log, one line each.
"""

import asyncio
import json
import os
import sys

from aiosmtpd.smtp import SMTP


class Handler:
    def __init__(self, folder):
        self.folder = folder
        self.count = 0

    def mode(self):
        try:
            with open(os.path.join(self.folder, "mode")) as f:
                return f.read().strip() or "accept"
        except FileNotFoundError:
            return "accept"

    def record(self, envelope, suffix):
        self.count += 1
        path = os.path.join(self.folder, f"{self.count:05d}{suffix}.json")
        with open(path + ".tmp", "w") as f:
            json.dump(
                {
                    "mail_from": envelope.mail_from,
                    "rcpt_tos": envelope.rcpt_tos,
                    "data": envelope.content.decode("utf-8", "replace"),
                },
                f,
            )
        os.rename(path + ".tmp", path)

    def log(self, line):
        with open(os.path.join(self.folder, "log"), "a") as f:
            f.write(line + "\n")

    async def handle_DATA(self, server, session, envelope):
        mode = self.mode()
        self.log(mode)
        if mode == "tempfail":
            return "451 4.3.0 try again later"
        if mode == "reject":
            return "554 5.7.1 rejected"
        if mode == "drop":
            self.record(envelope, ".dropped")
            server.transport.abort()
            return "250 OK"
        self.record(envelope, "")
        return "250 OK"


async def main(folder):
    handler = Handler(folder)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: SMTP(handler, hostname="smtp.test"), "127.0.0.1", 0
    )
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
