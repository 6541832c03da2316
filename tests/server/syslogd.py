#!/usr/bin/env python3
"""A syslog socket for tests: a unix datagram socket at --socket whose
every datagram is appended to --out as one line; --ready is written once
it listens."""
import argparse
import os
import socket


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--socket", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--ready", required=True)
    args = parser.parse_args()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(args.socket)
    with open(args.ready, "w") as ready:
        ready.write(args.socket + "\n")
    with open(args.out, "a", buffering=1) as out:
        while True:
            data = sock.recv(65536)
            out.write(data.decode("utf-8", "replace").rstrip("\n") + "\n")


if __name__ == "__main__":
    main()
