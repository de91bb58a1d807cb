"""The suite's own guard: a connection to anything but loopback fails before a packet is sent."""

from __future__ import annotations

import os
import socket

import pytest


def test_non_loopback_connection_is_refused():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        with pytest.raises(RuntimeError, match="reach the network"):
            s.connect(("192.0.2.1", 443))  # TEST-NET-1: never routed; refused before connecting
    finally:
        s.close()


def test_loopback_connection_is_allowed():
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        client.connect(server.getsockname())
    finally:
        client.close()
        server.close()
    assert os.environ["HF_HUB_OFFLINE"] == "1"
