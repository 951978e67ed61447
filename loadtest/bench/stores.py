"""PostgreSQL and Redis as the runner reads them: PostgreSQL through psycopg 3 with bound
parameters (scripts/bench.sh installs it), Redis through `redis-cli` (no driver needed for the few
commands it sends), plus the server-wide counters the per-order costs come from."""

from __future__ import annotations

import os
import re
import urllib.parse
from typing import Any, Sequence

from .processes import SetupError, run


def url_hosts(url: str) -> list[str]:
    """The hosts of a URL, several when its authority lists them (`redlock://a:1,b:2`, `zk://...`)."""
    netloc = url.partition("://")[2].split("/", 1)[0].rpartition("@")[2]
    hosts = []
    for hostport in netloc.split(","):
        if hostport.startswith("["):
            hosts.append(hostport[1:hostport.find("]")])
        else:
            hosts.append(hostport.rpartition(":")[0] if ":" in hostport else hostport)
    return hosts


def loopback_only(url: str, what: str) -> None:
    """Every host of `url` must be a loopback address: the bench never leaves the machine."""
    for host in url_hosts(url):
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise SetupError(f"{what} must point at a loopback address (got host {host!r})")


class Pg:
    """One PostgreSQL database: queries with parameters (psycopg), and pgbench's connection args."""

    def __init__(self, url: str):
        self.url = url
        u = urllib.parse.urlparse(url)
        self.host = u.hostname or "127.0.0.1"
        self.port = str(u.port or 5432)
        self.user = urllib.parse.unquote(u.username or "postgres")
        self.db = (u.path or "/").lstrip("/") or self.user
        self.env = dict(os.environ)
        if u.password:
            self.env["PGPASSWORD"] = urllib.parse.unquote(u.password)
        self.conn = ["-h", self.host, "-p", self.port, "-U", self.user]

    def rows(self, sql: str, params: Sequence[Any] | dict = (), timeout: float = 60) -> list[tuple]:
        """The rows of one statement (an empty list for statements without a result), in its
        own autocommit session bounded by `timeout`."""
        try:
            import psycopg
        except ImportError as e:  # scripts/bench.sh installs it
            raise SetupError("psycopg 3 missing: run scripts/bench.sh (it installs it) or pip install 'psycopg[binary]'") from e
        try:
            with psycopg.connect(self.url, autocommit=True, connect_timeout=10,
                                 options=f"-c statement_timeout={int(timeout * 1000)}") as conn:
                cur = conn.execute(sql, params)
                return cur.fetchall() if cur.description else []
        except psycopg.Error as e:
            raise SetupError(f"PostgreSQL: {str(e).strip()[:500]}") from e

    def value(self, sql: str, params: Sequence[Any] | dict = (), timeout: float = 60) -> Any:
        rows = self.rows(sql, params, timeout)
        return rows[0][0] if rows and rows[0] else None


class Redis:
    def __init__(self, url: str):
        u = urllib.parse.urlparse(url)
        self.host = u.hostname or "127.0.0.1"
        self.port = str(u.port or 6379)
        self.db = (u.path or "/").lstrip("/") or "0"
        self.env = dict(os.environ)
        if u.password:
            self.env["REDISCLI_AUTH"] = urllib.parse.unquote(u.password)
        self.url = url

    def cli(self, *args: str, timeout: float = 20) -> str:
        proc = run(["redis-cli", "-h", self.host, "-p", self.port, "-n", self.db, *args], timeout=timeout, env=self.env)
        if proc.returncode != 0:
            raise SetupError(f"redis-cli {' '.join(args[:2])} failed: {proc.stderr.strip()[:300]}")
        return proc.stdout.strip()


def redis_total_commands(redis: Redis) -> int | None:
    """The server's total_commands_processed (INFO stats); this INFO itself is counted after it."""
    try:
        m = re.search(r"total_commands_processed:(\d+)", redis.cli("INFO", "stats"))
    except SetupError:
        return None
    return int(m.group(1)) if m else None


def pg_total_commits(pg: Pg) -> int | None:
    """sum(xact_commit) over every database of the server (read-only transactions included)."""
    try:
        v = pg.value("SELECT sum(xact_commit) FROM pg_stat_database")
    except SetupError:
        return None
    return None if v is None else int(v)


def redis_server_pid(redis: Redis) -> int | None:
    """The pid of the redis-server behind `redis` (INFO server process_id), checked against
    /proc: a live process named redis-server whose title names the same port (loopback servers
    run on this machine; the check guards against a different pid namespace)."""
    try:
        m = re.search(r"process_id:(\d+)", redis.cli("INFO", "server"))
    except SetupError:
        return None
    if not m:
        return None
    pid = int(m.group(1))
    try:
        with open(f"/proc/{pid}/comm") as fh:
            comm = fh.read().strip()
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmdline = fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None
    if comm != "redis-server" or f":{redis.port}" not in cmdline:
        return None
    return pid
