# python-redis-lock's own fixtures start a redis-server of their own on a
# Unix socket; these name an existing server's socket instead (PEER_SOCKET),
# and change nothing else of the suite.
import os

import pytest


@pytest.fixture
def redis_socket(tmp_path):
    return os.environ["PEER_SOCKET"]


@pytest.fixture
def redis_server(redis_socket):
    import redis

    redis.StrictRedis(unix_socket_path=redis_socket).flushdb()
    yield None
