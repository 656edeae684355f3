#!/usr/bin/python3
"""mitm.py: a man in the middle for one fusion link (tests/test_sealed_links.sh).

    mitm.py LISTEN_PORT TARGET_PORT MODE [--after K] [--dir D] [--file F] [--ready F]

Listens on 127.0.0.1:LISTEN_PORT; each connection it accepts (the device
that connects) is joined to 127.0.0.1:TARGET_PORT (the device that
listens).  It speaks nanomsg's TCP framing: each side first sends an 8-byte
SP header, then every message is an 8-byte big-endian length and that many
bytes.  Everything is forwarded unchanged, except in direction D
(to-listener or to-connector), at message number K of a connection (0: the
first after the SP header), MODE does one thing, once:

    pass       nothing (a plain relay)
    record     nothing, and messages K.. of direction D go to F
               (a length-prefixed list: 4 bytes big-endian, then the bytes)
    flip       one bit of message K's payload is flipped (past its counter)
    replay     message K-1 is sent again after message K
    random     256 random bytes are sent as a message before message K
    other-run  F's first message (recorded from another run) is sent
               before message K

Each step it takes is printed on standard error ("attack ..." once).
Standard library only.
"""
import argparse
import os
import socket
import sys
import threading
import time

p = argparse.ArgumentParser()
p.add_argument("listen", type=int)
p.add_argument("target", type=int)
p.add_argument("mode", choices=["pass", "record", "flip", "replay", "random", "other-run"])
p.add_argument("--after", type=int, default=20)
p.add_argument("--dir", choices=["to-listener", "to-connector"], default="to-connector")
p.add_argument("--file")
p.add_argument("--ready")
args = p.parse_args()

done = threading.Event()        # the attack happens once, over all connections
lock = threading.Lock()


def log(msg):
    print("mitm: " + msg, file=sys.stderr, flush=True)


def recv_exact(s, n):
    buf = bytearray()
    while len(buf) < n:
        b = s.recv(n - len(buf))
        if not b:
            raise EOFError
        buf += b
    return bytes(buf)


def frame(payload):
    return len(payload).to_bytes(8, "big") + payload


def pump(src, dst, name):
    attacked = name == args.dir
    prev = None
    rec = None
    try:
        dst.sendall(recv_exact(src, 8))          # the SP header
        i = 0
        while True:
            n = int.from_bytes(recv_exact(src, 8), "big")
            msg = recv_exact(src, n)
            out = [msg]
            if attacked and i >= args.after and args.mode == "record":
                with lock:
                    if rec is None:
                        rec = open(args.file, "ab")
                    rec.write(len(msg).to_bytes(4, "big") + msg)
                    rec.flush()
            if attacked and i == args.after and not done.is_set() and args.mode not in ("pass", "record"):
                done.set()
                if args.mode == "flip":
                    b = bytearray(msg)
                    at = 8 + (len(b) - 8) // 2   # past the counter: the ciphertext or its tag
                    b[at] ^= 0x10
                    out = [bytes(b)]
                elif args.mode == "replay":
                    out = [msg, prev]
                elif args.mode == "random":
                    out = [os.urandom(256), msg]
                elif args.mode == "other-run":
                    with open(args.file, "rb") as f:
                        k = int.from_bytes(f.read(4), "big")
                        out = [f.read(k), msg]
                log("attack %s: %s at message %d (%d bytes)" % (args.mode, name, i, n))
            dst.sendall(b"".join(frame(m) for m in out))
            prev = msg
            i += 1
    except (EOFError, OSError):
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if rec:
            rec.close()


def serve(client):
    up = None
    for _ in range(100):                        # the listener may not be up yet
        try:
            up = socket.create_connection(("127.0.0.1", args.target), timeout=1)
            break
        except OSError:
            time.sleep(0.05)
    if up is None:
        client.close()
        return
    up.settimeout(None)
    for s in (client, up):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    log("relaying a connection")
    threading.Thread(target=pump, args=(client, up, "to-listener"), daemon=True).start()
    threading.Thread(target=pump, args=(up, client, "to-connector"), daemon=True).start()


srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", args.listen))
srv.listen(16)
if args.ready:
    open(args.ready, "w").close()
while True:
    c, _ = srv.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
